/*
 * seqcheck.c: idempotent producers' sequence numbers checked as a Kafka
 * broker checks them (seqcheck.h).
 *
 * ob-mockbroker defines accept, accept4, recv, recvmsg, sendmsg and close:
 * librdkafka's mock cluster, a shared library, calls these definitions
 * rather than libc's, which they call in turn (dlsym RTLD_NEXT). Only
 * sockets returned by accept, the mock brokers' connections, are looked at.
 *
 * Requests: each read of the mock cluster goes to the socket as asked, cut
 * at the end of the request being read (so what follows stays in the kernel
 * and the mock cluster's poll still sees it), and what it got is copied
 * aside. The read that completes a ProduceRequest (versions 3 to 8, the ones
 * with record batch v2 and a non-flexible layout) looks at it batch by
 * batch before it returns, and so before the mock cluster handles it; a
 * byte to change is changed where the mock cluster holds it.
 *
 * Responses: the mock cluster writes each response whole with one sendmsg
 * whose iovecs hold the rest of it. A ProduceResponse answering a request
 * with refused batches is rewritten in place before it is sent.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "seqcheck.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define KAFKA_PRODUCE                    0
#define ERR_NOT_LEADER_FOR_PARTITION     6
#define ERR_OUT_OF_ORDER_SEQUENCE_NUMBER 45
#define ERR_DUPLICATE_SEQUENCE_NUMBER    46
#define RECENT_MAX                       5 /* Kafka keeps the last five */
#define CONN_MAX                         65536
#define FRAME_MAX                        (256 * 1024 * 1024)
#define SEQ_BUCKETS                      4096
#define FAIL_RUNS                        64
#define TOPIC_MAX                        256
#define BROKERS_MAX                      64

/* Offsets in a v2 record batch (Kafka's DefaultRecordBatch). */
#define BATCH_MAGIC             16
#define BATCH_LAST_OFFSET_DELTA 23
#define BATCH_PRODUCER_ID       43
#define BATCH_PRODUCER_EPOCH    51
#define BATCH_BASE_SEQUENCE     53
#define BATCH_HEADER_LEN        61

/* One refused partition of a request: its response's error becomes err. */
struct refusal {
	char topic[TOPIC_MAX];
	int32_t partition;
	int16_t err;
};

/* A batch of a request handed to the mock cluster: its response says
 * whether the mock cluster wrote it (recent[slot] of s, while that slot
 * still holds base). */
struct accepted {
	char topic[TOPIC_MAX];
	int32_t partition;
	struct seq *s;
	int slot;
	int32_t base;
};

/* The refusals and accepted batches of one ProduceRequest, until its
 * response is sent. */
struct pending {
	int32_t corr;
	int16_t version;
	int nrefusals;
	struct refusal *refusals;
	int naccepted;
	struct accepted *accepted;
	struct pending *next;
};

/* A piece of a request handed to the mock cluster: frame bytes from off
 * on went to addr, which stays valid until the mock cluster has the whole
 * request. */
struct handed {
	size_t off, len;
	uint8_t *addr;
};

/* A mock broker's connection: the request being read and the responses
 * to rewrite. */
struct conn {
	/* A copy of the request being read, and where in the mock cluster's
	 * buffers each piece of it went. */
	uint8_t *frame;
	size_t cap, have, total;
	struct handed *handed;
	int nhanded, handed_cap;
	struct pending *pending;
	/* The broker the connection reached (1..n), 0 when not known. */
	int32_t broker;
	/* Outgoing: bytes of the current response not yet sent (0 at a
	 * boundary), and the part of its size field sent so far. */
	size_t out_left;
	uint8_t out_hdr[4];
	int out_hdr_have;
};

/* A topic's partition: the key of the tables below. */
struct tp {
	char topic[TOPIC_MAX];
	int32_t partition;
};

/* What became of a batch handed to the mock cluster. */
enum fate {
	FATE_SENT,    /* no response seen (yet, or the connection closed) */
	FATE_WRITTEN, /* the response said no error */
	FATE_REFUSED  /* the mock cluster refused it unwritten */
};

/* One of the last batches of a producer on a partition, as Kafka keeps
 * them to answer a retry of a written batch with DUPLICATE_SEQUENCE_NUMBER
 * instead of writing it twice. */
struct recent {
	int32_t base, count;
	enum fate fate;
	bool to_leader; /* sent to the broker known to lead the partition */
};

/* The next expected base sequence of a producer id, epoch and partition. */
struct seq {
	struct tp tp;
	int64_t pid;
	int16_t epoch;
	int64_t next;
	long batches; /* batches taken (not refused here) */
	long records; /* records the mock cluster wrote (those whose response
		       * was lost taken as written) */
	struct recent recent[RECENT_MAX];
	int nrecent; /* batches ever kept in recent (ring position) */
	struct seq *chain;
};

/* The leader of a partition (0: not known, or moving). */
struct lead {
	struct tp tp;
	int32_t broker;
	struct lead *chain;
};

/* A run of injected Produce failures. */
struct fail_run {
	int16_t err;
	long left;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns[CONN_MAX];
static struct seq *seqs[SEQ_BUCKETS];
static struct lead *leads[SEQ_BUCKETS];
static int ports[BROKERS_MAX];
static int nports;
static struct fail_run fails[FAIL_RUNS];
static int nfails;
static long refused;
static long duplicates;

static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_close)(int);

static void *
libc_symbol(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	if (f == NULL) {
		fprintf(stderr, "ob-mockbroker: seqcheck: no %s in libc\n", name);
		abort();
	}
	return f;
}

static void
resolve(void)
{
	if (real_close != NULL)
		return;
	real_recv = libc_symbol("recv");
	real_recvmsg = libc_symbol("recvmsg");
	real_sendmsg = libc_symbol("sendmsg");
	real_accept = libc_symbol("accept");
	real_accept4 = libc_symbol("accept4");
	real_close = libc_symbol("close");
}

static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int16_t
be16s(const uint8_t *p)
{
	return (int16_t)((uint16_t)p[0] << 8 | p[1]);
}

static int64_t
be64s(const uint8_t *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* ---- a bounds-checked reader over one frame ---- */

struct rd {
	const uint8_t *p;
	size_t len, off;
	bool bad;
};

static const uint8_t *
rd_take(struct rd *r, size_t n)
{
	const uint8_t *at;

	if (r->bad || r->len - r->off < n) {
		r->bad = true;
		return NULL;
	}
	at = r->p + r->off;
	r->off += n;
	return at;
}

static int32_t
rd_i32(struct rd *r)
{
	const uint8_t *p = rd_take(r, 4);

	return p ? (int32_t)be32(p) : -1;
}

static int16_t
rd_i16(struct rd *r)
{
	const uint8_t *p = rd_take(r, 2);

	return p ? be16s(p) : -1;
}

/* A (nullable) string into out (TOPIC_MAX bytes, cut to fit). */
static void
rd_str(struct rd *r, char *out)
{
	int16_t n = rd_i16(r);
	const uint8_t *p;

	out[0] = '\0';
	if (n <= 0)
		return;
	p = rd_take(r, (size_t)n);
	if (p == NULL)
		return;
	snprintf(out, TOPIC_MAX, "%.*s", (int)n, (const char *)p);
}

/* ---- the sequence table ---- */

/* A hash of topic's partition (not yet reduced to a bucket). */
static unsigned long
tp_hash(const char *topic, int32_t partition)
{
	unsigned long h = 5381;

	for (const char *c = topic; *c; c++)
		h = h * 33 + (unsigned char)*c;
	return h * 33 + (uint32_t)partition;
}

static bool
tp_is(const struct tp *tp, const char *topic, int32_t partition)
{
	return tp->partition == partition && strcmp(tp->topic, topic) == 0;
}

/* A zeroed table entry of size bytes whose first member, a struct tp, is
 * topic's partition. */
static void *
tp_new(size_t size, const char *topic, int32_t partition)
{
	struct tp *tp = calloc(1, size);

	if (tp == NULL)
		abort();
	snprintf(tp->topic, sizeof(tp->topic), "%s", topic);
	tp->partition = partition;
	return tp;
}

static struct seq *
seq_get(const char *topic, int32_t partition, int64_t pid, int16_t epoch)
{
	unsigned long h = tp_hash(topic, partition) * 33 + (uint64_t)pid;
	struct seq *s;

	h = (h * 33 + (uint16_t)epoch) % SEQ_BUCKETS;
	for (s = seqs[h]; s != NULL; s = s->chain)
		if (s->pid == pid && s->epoch == epoch && tp_is(&s->tp, topic, partition))
			return s;
	s = tp_new(sizeof(*s), topic, partition);
	s->pid = pid;
	s->epoch = epoch;
	s->next = 0; /* a producer's first batch on a partition starts at 0 */
	s->chain = seqs[h];
	seqs[h] = s;
	return s;
}

/* The leader entry of a partition; created (leader not known) when make. */
static struct lead *
lead_get(const char *topic, int32_t partition, bool make)
{
	unsigned long h = tp_hash(topic, partition) % SEQ_BUCKETS;
	struct lead *l;

	for (l = leads[h]; l != NULL; l = l->chain)
		if (tp_is(&l->tp, topic, partition))
			return l;
	if (!make)
		return NULL;
	l = tp_new(sizeof(*l), topic, partition);
	l->chain = leads[h];
	leads[h] = l;
	return l;
}

/* The error of the next injected failure, 0 if none is pending. */
static int16_t
take_injected(void)
{
	int16_t err;

	if (nfails == 0)
		return 0;
	err = fails[0].err;
	if (--fails[0].left == 0) {
		memmove(&fails[0], &fails[1], (size_t)(nfails - 1) * sizeof(fails[0]));
		nfails--;
	}
	return err;
}

/* The batch of recent that has base and count, NULL if none. */
static struct recent *
recent_find(struct seq *s, int32_t base, int32_t count)
{
	int n = s->nrecent < RECENT_MAX ? s->nrecent : RECENT_MAX;

	for (int i = 0; i < n; i++)
		if (s->recent[i].base == base && s->recent[i].count == count)
			return &s->recent[i];
	return NULL;
}

/* The error a batch gets (0: hand it to the mock cluster as it is, and
 * *acc says which of its producer's recent batches it is).
 * - An injected error is taken by the first batch to reach any broker (the
 *   mock cluster's own leader check comes after it).
 * - A batch of a partition whose leadership is moving is refused unwritten
 *   with NOT_LEADER_FOR_PARTITION, as Kafka answers during an election:
 *   judged as if it reached the leader, it moved the sequence on while the
 *   mock cluster, already moved, refused it; the batch behind it was then
 *   written, and the producer took that as the refused one's success too
 *   (librdkafka acknowledges earlier records implicitly), a loss no Kafka
 *   broker causes.
 * - A batch sent to a broker known not to lead its partition is left to the
 *   mock cluster, which refuses it unwritten (NOT_LEADER_FOR_PARTITION), and
 *   does not move the sequence on: a batch behind it is then out of order,
 *   as on Kafka, where only the leader appends.
 * - The first batch of a producer id and epoch on a partition is expected
 *   at sequence 0, as Kafka expects it (else a refused first batch would let
 *   those sent behind it through).
 * - A retry of one of the producer's last five batches on the partition
 *   that the mock cluster wrote (its response said so, or was lost with the
 *   connection after the batch went to the partition's known leader) is
 *   refused unwritten with DUPLICATE_SEQUENCE_NUMBER, which the producer
 *   takes as success, as Kafka answers it: the response of a written batch
 *   lost to a broker outage must not make the broker write it twice.
 * - A batch that is not refused moves its sequence on, whatever the mock
 *   cluster then answers: a retry of a batch it refused is then written. */
static int16_t
judge_batch(const char *topic, int32_t partition, const uint8_t *b, int16_t injected,
	    int32_t broker, struct accepted *acc)
{
	int64_t pid = be64s(b + BATCH_PRODUCER_ID);
	int16_t epoch = be16s(b + BATCH_PRODUCER_EPOCH);
	int32_t base = (int32_t)be32(b + BATCH_BASE_SEQUENCE);
	int32_t count = (int32_t)be32(b + BATCH_LAST_OFFSET_DELTA) + 1;
	struct seq *s;
	struct recent *r;
	const struct lead *l;

	acc->s = NULL;
	if (injected != 0)
		return injected;
	if (pid < 0 || base < 0)
		return 0;
	l = lead_get(topic, partition, false);
	if (l != NULL && l->broker == 0)
		return ERR_NOT_LEADER_FOR_PARTITION;
	if (broker != 0 && l != NULL && l->broker != broker)
		return 0;
	s = seq_get(topic, partition, pid, epoch);
	if (base > s->next) {
		refused++;
		fprintf(stderr,
			"ob-mockbroker: %s [%d]: producer %lld epoch %d sent base sequence %d, "
			"expected %lld: OUT_OF_ORDER_SEQUENCE_NUMBER\n",
			topic, partition, (long long)pid, epoch, base, (long long)s->next);
		return ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
	}
	r = recent_find(s, base, count);
	if (r != NULL && (r->fate == FATE_WRITTEN || (r->fate == FATE_SENT && r->to_leader))) {
		duplicates++;
		fprintf(stderr,
			"ob-mockbroker: %s [%d]: producer %lld epoch %d resent base sequence %d, "
			"written already: DUPLICATE_SEQUENCE_NUMBER\n",
			topic, partition, (long long)pid, epoch, base);
		return ERR_DUPLICATE_SEQUENCE_NUMBER;
	}
	if (r == NULL)
		r = &s->recent[s->nrecent++ % RECENT_MAX];
	*r = (struct recent){base, count, FATE_SENT,
			     broker != 0 && l != NULL && l->broker == broker};
	acc->s = s;
	acc->slot = (int)(r - s->recent);
	acc->base = base;
	s->records += count; /* until its response says otherwise */
	if ((int64_t)base + count > s->next)
		s->next = (int64_t)base + count;
	s->batches++;
	return 0;
}

static void
add_refusal(struct pending *pd, const char *topic, int32_t partition, int16_t err)
{
	struct refusal *r = realloc(pd->refusals, (size_t)(pd->nrefusals + 1) * sizeof(*r));

	if (r == NULL)
		abort();
	pd->refusals = r;
	r = &r[pd->nrefusals++];
	snprintf(r->topic, sizeof(r->topic), "%s", topic);
	r->partition = partition;
	r->err = err;
}

static void
add_accepted(struct pending *pd, const char *topic, int32_t partition, const struct accepted *acc)
{
	struct accepted *a = realloc(pd->accepted, (size_t)(pd->naccepted + 1) * sizeof(*a));

	if (a == NULL)
		abort();
	pd->accepted = a;
	a = &a[pd->naccepted++];
	*a = *acc;
	snprintf(a->topic, sizeof(a->topic), "%s", topic);
	a->partition = partition;
}

static void
pending_free(struct pending *pd)
{
	free(pd->refusals);
	free(pd->accepted);
	free(pd);
}

/* Set the byte at frame offset off, where the mock cluster holds it. */
static void
spoil(struct conn *c, size_t off, uint8_t value)
{
	c->frame[off] = value;
	for (int i = 0; i < c->nhanded; i++)
		if (off >= c->handed[i].off && off - c->handed[i].off < c->handed[i].len)
			c->handed[i].addr[off - c->handed[i].off] = value;
}

/* Call visit for each partition of a Produce request or response (topic
 * array, partition array), r at the partition's fields; visit reads them. */
static void
for_each_partition(struct rd *r, void (*visit)(struct rd *, const char *, void *), void *arg)
{
	int32_t ntopics = rd_i32(r);
	char topic[TOPIC_MAX];

	for (int32_t t = 0; t < ntopics && !r->bad; t++) {
		int32_t nparts;

		rd_str(r, topic);
		nparts = rd_i32(r);
		for (int32_t i = 0; i < nparts && !r->bad; i++)
			visit(r, topic, arg);
	}
}

/* What judging a ProduceRequest's partitions needs. */
struct request_walk {
	struct conn *c;
	struct pending *pd;
	int16_t injected;
};

/* One partition of a ProduceRequest: judge its batch, refuse it if so. */
static void
judge_partition(struct rd *r, const char *topic, void *arg)
{
	struct request_walk *req = arg;
	int32_t partition = rd_i32(r);
	int32_t len = rd_i32(r);
	uint8_t *batch;
	struct accepted acc;
	int16_t err;

	if (len < 0)
		return;
	batch = (uint8_t *)rd_take(r, (size_t)len);
	if (batch == NULL || len < BATCH_HEADER_LEN)
		return;
	err = judge_batch(topic, partition, batch, req->injected, req->c->broker, &acc);
	if (err == 0) {
		if (acc.s != NULL)
			add_accepted(req->pd, topic, partition, &acc);
		return;
	}
	spoil(req->c, (size_t)(batch - req->c->frame) + BATCH_MAGIC, 0x7f);
	add_refusal(req->pd, topic, partition, err);
}

/* Judge every batch of a whole ProduceRequest frame; a refused batch's
 * magic byte is spoiled so the mock cluster refuses it unwritten, and the
 * refusal is kept for the response. */
static void
inspect_request(struct conn *c)
{
	struct rd r = {c->frame, c->total, 4, false};
	struct pending pd = {0};
	struct request_walk req;
	char topic[TOPIC_MAX], client[TOPIC_MAX];
	int16_t key;

	key = rd_i16(&r);
	pd.version = rd_i16(&r);
	pd.corr = rd_i32(&r);
	rd_str(&r, client);
	if (r.bad || key != KAFKA_PRODUCE)
		return;
	if (pd.version < 3 || pd.version > 8) {
		fprintf(stderr, "ob-mockbroker: seqcheck: ProduceRequest v%d not checked\n",
			pd.version);
		return;
	}
	rd_str(&r, topic);  /* transactional id */
	rd_take(&r, 2 + 4); /* acks, timeout */
	req.c = c;
	req.pd = &pd;
	req.injected = take_injected();
	for_each_partition(&r, judge_partition, &req);
	if (pd.nrefusals > 0 || pd.naccepted > 0) {
		struct pending *keep = malloc(sizeof(*keep));

		if (keep == NULL)
			abort();
		*keep = pd;
		keep->next = c->pending;
		c->pending = keep;
	}
}

/* One partition of a ProduceResponse: set its error code if it was
 * refused; note what became of a batch handed to the mock cluster. */
static void
rewrite_partition(struct rd *r, const char *topic, void *arg)
{
	const struct pending *pd = arg;
	int32_t partition = rd_i32(r);
	uint8_t *err = (uint8_t *)rd_take(r, 2);
	char skip[TOPIC_MAX];

	rd_take(r, 8 + (pd->version >= 2 ? 8 : 0) + (pd->version >= 5 ? 8 : 0));
	if (pd->version >= 8) {
		int32_t nerrs = rd_i32(r);

		for (int32_t e = 0; e < nerrs && !r->bad; e++) {
			rd_take(r, 4);
			rd_str(r, skip);
		}
		rd_str(r, skip);
	}
	for (int k = 0; err != NULL && k < pd->nrefusals; k++)
		if (pd->refusals[k].partition == partition &&
		    strcmp(pd->refusals[k].topic, topic) == 0) {
			err[0] = (uint8_t)((uint16_t)pd->refusals[k].err >> 8);
			err[1] = (uint8_t)pd->refusals[k].err;
		}
	for (int k = 0; err != NULL && k < pd->naccepted; k++) {
		const struct accepted *a = &pd->accepted[k];
		struct recent *rc = &a->s->recent[a->slot];

		if (a->partition != partition || strcmp(a->topic, topic) != 0 ||
		    rc->base != a->base || rc->fate != FATE_SENT)
			continue;
		rc->fate = be16s(err) == 0 ? FATE_WRITTEN : FATE_REFUSED;
		if (rc->fate == FATE_REFUSED)
			a->s->records -= rc->count;
	}
}

/* Rewrite, in the copy of a whole ProduceResponse, the error code of each
 * refused partition. */
static void
rewrite_response(uint8_t *frame, size_t len, const struct pending *pd)
{
	struct rd r = {frame, len, 8, false};

	for_each_partition(&r, rewrite_partition, (void *)pd);
	if (r.bad)
		fprintf(stderr, "ob-mockbroker: seqcheck: a ProduceResponse did not parse\n");
}

/* ---- iovec helpers ---- */

static size_t
iov_len(const struct msghdr *msg)
{
	size_t n = 0;

	for (size_t i = 0; i < msg->msg_iovlen; i++)
		n += msg->msg_iov[i].iov_len;
	return n;
}

/* Copy len bytes at offset off of the iovecs to out (to_iov false) or
 * from out into them (to_iov true). */
static void
iov_copy(const struct msghdr *msg, size_t off, uint8_t *out, size_t len, bool to_iov)
{
	for (size_t i = 0; i < msg->msg_iovlen && len > 0; i++) {
		uint8_t *base = msg->msg_iov[i].iov_base;
		size_t n = msg->msg_iov[i].iov_len;

		if (off >= n) {
			off -= n;
			continue;
		}
		n -= off;
		if (n > len)
			n = len;
		if (to_iov)
			memcpy(base + off, out, n);
		else
			memcpy(out, base + off, n);
		out += n;
		len -= n;
		off = 0;
	}
}

/* Rewrite the responses that start in these iovecs and have refusals
 * pending; a response the iovecs do not hold whole is left as it is
 * (logged: the mock cluster writes each response with one call). */
static void
edit_responses(struct conn *c, const struct msghdr *msg)
{
	size_t total = iov_len(msg), pos = c->out_left;

	if (c->out_hdr_have != 0)
		return;
	while (c->pending != NULL && pos + 8 <= total) {
		uint8_t head[8];
		size_t len;
		struct pending **pp;

		iov_copy(msg, pos, head, 8, false);
		len = 4 + be32(head);
		for (pp = &c->pending; *pp != NULL; pp = &(*pp)->next)
			if ((*pp)->corr == (int32_t)be32(head + 4))
				break;
		if (*pp != NULL) {
			struct pending *pd = *pp;
			uint8_t *copy;

			if (pos + len > total) {
				fprintf(stderr, "ob-mockbroker: seqcheck: a ProduceResponse "
						"was split; left as it is\n");
				return;
			}
			copy = malloc(len);
			if (copy == NULL)
				abort();
			iov_copy(msg, pos, copy, len, false);
			rewrite_response(copy, len, pd);
			iov_copy(msg, pos, copy, len, true);
			free(copy);
			*pp = pd->next;
			pending_free(pd);
		}
		pos += len;
	}
}

/* Follow the response boundaries over the sent bytes. */
static void
account_sent(struct conn *c, const struct msghdr *msg, size_t sent)
{
	size_t pos = 0;

	while (pos < sent) {
		if (c->out_left == 0) {
			while (c->out_hdr_have < 4 && pos < sent) {
				iov_copy(msg, pos++, &c->out_hdr[c->out_hdr_have], 1, false);
				c->out_hdr_have++;
			}
			if (c->out_hdr_have < 4)
				break;
			c->out_left = be32(c->out_hdr);
			c->out_hdr_have = 0;
			continue;
		}
		size_t n = c->out_left < sent - pos ? c->out_left : sent - pos;

		pos += n;
		c->out_left -= n;
	}
}

/* ---- reading requests ---- */

static void
note_handed(struct conn *c, size_t off, uint8_t *addr, size_t len)
{
	if (c->nhanded == c->handed_cap) {
		int cap = c->handed_cap ? 2 * c->handed_cap : 8;
		struct handed *h = realloc(c->handed, (size_t)cap * sizeof(*h));

		if (h == NULL)
			abort();
		c->handed = h;
		c->handed_cap = cap;
	}
	c->handed[c->nhanded++] = (struct handed){off, len, addr};
	memcpy(c->frame + off, addr, len);
}

/* recvmsg for a mock broker's connection: read at most to the end of the
 * request being read (its size field alone first), copy what came aside,
 * and look at the request once it is whole. */
static ssize_t
read_request(int fd, struct conn *c, struct msghdr *msg, int flags)
{
	size_t limit = c->total ? c->total - c->have : 4 - c->have;
	struct iovec iov[64];
	struct msghdr cut = *msg;
	size_t n = 0, left;
	ssize_t r;

	cut.msg_iov = iov;
	cut.msg_iovlen = 0;
	for (size_t i = 0; i < msg->msg_iovlen && n < limit && cut.msg_iovlen < 64; i++) {
		size_t len = msg->msg_iov[i].iov_len;

		if (len > limit - n)
			len = limit - n;
		iov[cut.msg_iovlen++] = (struct iovec){msg->msg_iov[i].iov_base, len};
		n += len;
	}
	r = real_recvmsg(fd, &cut, flags);
	if (r <= 0)
		return r;
	left = (size_t)r;
	for (size_t i = 0; left > 0; i++) {
		size_t len = iov[i].iov_len < left ? iov[i].iov_len : left;

		note_handed(c, c->have, iov[i].iov_base, len);
		c->have += len;
		left -= len;
	}
	if (c->total == 0 && c->have == 4) {
		c->total = 4 + (size_t)be32(c->frame);
		if (c->total > FRAME_MAX) {
			errno = EMSGSIZE;
			return -1;
		}
		if (c->total > c->cap) {
			uint8_t *f = realloc(c->frame, c->total);

			if (f == NULL)
				abort();
			c->frame = f;
			c->cap = c->total;
		}
	}
	if (c->total != 0 && c->have == c->total) {
		inspect_request(c);
		c->have = c->total = 0;
		c->nhanded = 0;
	}
	return r;
}

static struct conn *
tracked(int fd)
{
	return fd >= 0 && fd < CONN_MAX ? conns[fd] : NULL;
}

static void
untrack(int fd)
{
	struct conn *c = tracked(fd);

	if (c == NULL)
		return;
	while (c->pending != NULL) {
		struct pending *pd = c->pending;

		c->pending = pd->next;
		pending_free(pd);
	}
	free(c->handed);
	free(c->frame);
	free(c);
	conns[fd] = NULL;
}

/* The broker whose listener accepted fd (by its local port), 0 if not
 * known. */
static int32_t
broker_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int port;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	if (ss.ss_family == AF_INET)
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return 0;
	for (int i = 0; i < nports; i++)
		if (ports[i] == port)
			return i + 1;
	return 0;
}

static int
track(int fd)
{
	int one = 1;

	if (fd < 0)
		return fd;
	/* As a Kafka broker does: a response written in two pieces must not
	 * wait for the client's delayed ACK. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (fd >= CONN_MAX) {
		fprintf(stderr, "ob-mockbroker: seqcheck: socket %d not checked\n", fd);
		return fd;
	}
	pthread_mutex_lock(&lock);
	untrack(fd);
	conns[fd] = calloc(1, sizeof(struct conn));
	if (conns[fd] == NULL)
		abort();
	conns[fd]->frame = malloc(4);
	conns[fd]->cap = 4;
	conns[fd]->broker = broker_of(fd);
	if (conns[fd]->frame == NULL)
		abort();
	pthread_mutex_unlock(&lock);
	return fd;
}

/* ---- the wrapped calls ---- */

int
accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	resolve();
	return track(real_accept(fd, addr, len));
}

int
accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	resolve();
	return track(real_accept4(fd, addr, len, flags));
}

int
close(int fd)
{
	resolve();
	if (tracked(fd) != NULL) {
		pthread_mutex_lock(&lock);
		untrack(fd);
		pthread_mutex_unlock(&lock);
	}
	return real_close(fd);
}

ssize_t
recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct conn *c;
	ssize_t r;

	resolve();
	c = tracked(fd);
	if (c == NULL || (flags & MSG_PEEK))
		return real_recvmsg(fd, msg, flags);
	pthread_mutex_lock(&lock);
	r = read_request(fd, c, msg, flags);
	pthread_mutex_unlock(&lock);
	return r;
}

ssize_t
recv(int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {buf, len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

	resolve();
	if (tracked(fd) == NULL || (flags & MSG_PEEK))
		return real_recv(fd, buf, len, flags);
	return recvmsg(fd, &msg, flags);
}

ssize_t
sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct conn *c;
	ssize_t r;

	resolve();
	c = tracked(fd);
	if (c == NULL)
		return real_sendmsg(fd, msg, flags);
	pthread_mutex_lock(&lock);
	edit_responses(c, msg);
	r = real_sendmsg(fd, msg, flags);
	if (r > 0)
		account_sent(c, msg, (size_t)r);
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- commands ---- */

bool
ob_seqcheck_fail_produce(int16_t err, long count)
{
	bool room;

	pthread_mutex_lock(&lock);
	room = nfails < FAIL_RUNS;
	if (room) {
		fails[nfails].err = err;
		fails[nfails].left = count;
		nfails++;
	}
	pthread_mutex_unlock(&lock);
	return room;
}

void
ob_seqcheck_clear_produce(void)
{
	pthread_mutex_lock(&lock);
	nfails = 0;
	pthread_mutex_unlock(&lock);
}

void
ob_seqcheck_set_ports(const int *p, int n)
{
	pthread_mutex_lock(&lock);
	nports = n < BROKERS_MAX ? n : BROKERS_MAX;
	memcpy(ports, p, (size_t)nports * sizeof(*ports));
	pthread_mutex_unlock(&lock);
}

int32_t
ob_seqcheck_set_leader(const char *topic, int32_t partition, int32_t broker)
{
	struct lead *l;
	int32_t was;

	pthread_mutex_lock(&lock);
	l = lead_get(topic, partition, true);
	was = l->broker;
	l->broker = broker;
	pthread_mutex_unlock(&lock);
	return was;
}

long
ob_seqcheck_refused(void)
{
	long n;

	pthread_mutex_lock(&lock);
	n = refused;
	pthread_mutex_unlock(&lock);
	return n;
}

long
ob_seqcheck_duplicates(void)
{
	long n;

	pthread_mutex_lock(&lock);
	n = duplicates;
	pthread_mutex_unlock(&lock);
	return n;
}

int
ob_seqcheck_producers(const char *topic, long *records, int max)
{
	int64_t pids[64];
	int n = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < SEQ_BUCKETS; i++) {
		for (const struct seq *s = seqs[i]; s != NULL; s = s->chain) {
			int k;

			if (strcmp(s->tp.topic, topic) != 0)
				continue;
			for (k = 0; k < n && pids[k] != s->pid; k++)
				;
			if (k == n) {
				if (n == max || n == 64)
					continue;
				pids[n] = s->pid;
				records[n++] = 0;
			}
			records[k] += s->records;
		}
	}
	pthread_mutex_unlock(&lock);
	return n;
}

long
ob_seqcheck_batches(const char *topic)
{
	long n = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < SEQ_BUCKETS; i++) {
		for (const struct seq *s = seqs[i]; s != NULL; s = s->chain)
			if (strcmp(s->tp.topic, topic) == 0)
				n += s->batches;
	}
	pthread_mutex_unlock(&lock);
	return n;
}
