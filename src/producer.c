/*
 * producer.c: librdkafka's idempotent producer behind a small interface.
 *
 * All callbacks (delivery reports, errors, statistics) are served on the
 * thread calling ob_producer_poll(); only log lines come from librdkafka's
 * own threads, and the logger is safe for that. The wake-up pipe lets the
 * relay sleep in poll(2) on the Postgres socket and the producer at once.
 */
#include "outboxd/producer.h"

#include "ob_build.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outboxd/expiry.h"
#include "outboxd/kafka.h"
#include "outboxd/log.h"
#include "outboxd/prodconf.h"

/* Topic handles a client keeps between records, one per slot of a
 * table indexed by a hash of the topic's name. */
#define TOPIC_SLOTS     64
/* Records change clients at most once per this long: each change waits
 * for everything outstanding, so records whose lateness alternates (a lag
 * near the bound) must not pay that wait for each transaction. */
#define SWITCH_DWELL_MS 1000
/* How long records wait for the client they leave to have nothing
 * outstanding while its count of outstanding records does not fall.
 * Records to a partition whose leader is down stay outstanding until it
 * is back (message.timeout.ms 0), and a wait for them would hold up every
 * other topic: past this, records stay on the current client and the
 * change is tried again SWITCH_RETRY_MS later. */
#define SWITCH_WAIT_MS  50
#define SWITCH_RETRY_MS 5000

/* One librdkafka client, the queue its reports arrive on, and the topic
 * handles it produced to last. Each non-NULL topics[i] holds one
 * application reference of the client's topic, released when the slot is
 * taken by another topic or the client is stopped. */
typedef struct handle {
	rd_kafka_t *rk;
	rd_kafka_queue_t *main_queue;
	rd_kafka_topic_t *topics[TOPIC_SLOTS];
	ob_expiry expiry; /* its records in flight, with a timeout_ms */
} handle;

struct ob_producer {
	const ob_config *cfg;
	/* Every record but those produced alone. With OB_PRODUCER_PIPELINED it
	 * keeps librdkafka's enable.gapless.guarantee: a batch the broker
	 * fails fails the producer, and nothing queued behind that batch is
	 * written (its requests carry later sequence numbers, which the broker
	 * refuses; librdkafka purges the rest). */
	handle main;
	/* Late records (ob_producer_set_late), with main's guarantees but a
	 * linger.ms of OB_PRODCONF_LATE_LINGER_MS: a backlog drains in fewer, larger
	 * requests, each of which wakes librdkafka's threads. Created on
	 * first use; never when main's own linger.ms is as long. */
	handle late;
	/* The client of main and late that takes records: the one that
	 * ob_producer_set_late() asks for once the other has nothing
	 * outstanding, so that records of one key never travel through two
	 * clients at once (each has its own idempotence sequence). */
	handle *current;
	int64_t next_switch_ms; /* no change of current before (monotonic) */
	int64_t waiting_ms;     /* since when a change waits without progress (0: none) */
	int waiting_outq;       /* the outstanding records then */
	bool want_late;
	/* main's linger.ms is shorter than OB_PRODCONF_LATE_LINGER_MS, and
	 * message.timeout.ms (0 or longer than linger.ms) allows it. */
	bool late_useful;
	/* Records produced alone (ob_producer_send_alone), created on first
	 * use; NULL until then. Without the gapless guarantee: its refusal of
	 * a record is the record's own and leaves the producer working. */
	handle alone;
	int wake_pipe[2];
	ob_delivery_fn on_delivery;
	void *ctx;
	bool failed;
	char fatal_reason[512];
	/* kafka.message.timeout.ms, enforced here (expiry.h); 0: none. */
	long long timeout_ms;
	/* message.max.bytes: the largest record the client sends. */
	size_t max_record_bytes;
	/* Brokers whose connection is up, from the statistics callback. */
	ob_kafka_brokers brokers;
#if OB_TEST_HOOKS
	/* Test hook: raise a fatal error after this many records (0: never). */
	long fatal_after;
	long sent;
#endif
};

#if OB_TEST_HOOKS
/* The fault-injection hook of test builds (meson -Dtest_hooks=true):
 * OUTBOXD_TEST_FATAL_AFTER=N raises an idempotence fatal error after the
 * N-th record. It fires once per process, so the producer that replaces
 * the failed one runs normally. */
static bool fatal_hook_fired;

static void
test_hook_arm(ob_producer *p)
{
	if (!fatal_hook_fired && getenv("OUTBOXD_TEST_FATAL_AFTER") != NULL)
		p->fatal_after = atol(getenv("OUTBOXD_TEST_FATAL_AFTER"));
}

/* A record was queued on the client h of p. */
static void
test_hook_sent(ob_producer *p, handle *h)
{
	if (p->fatal_after > 0 && ++p->sent == p->fatal_after) {
		fatal_hook_fired = true;
		rd_kafka_test_fatal_error(h->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
					  "OUTBOXD_TEST_FATAL_AFTER");
	}
}
#else
static void
test_hook_arm(ob_producer *p)
{
	(void)p;
}

static void
test_hook_sent(ob_producer *p, handle *h)
{
	(void)p;
	(void)h;
}
#endif

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	ob_producer *p = opaque;
	char fatal[256];

	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk, fatal, sizeof(fatal));

		p->failed = true;
		/* The gapless guarantee's error is a batch's delivery failure
		 * (its text names the batch and the broker's error). */
		if (cause == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE)
			snprintf(p->fatal_reason, sizeof(p->fatal_reason), "delivery failed: %s",
				 fatal);
		else
			snprintf(p->fatal_reason, sizeof(p->fatal_reason), "%s: %s",
				 rd_kafka_err2name(cause), fatal);
		ob_error("kafka producer failed: %s", p->fatal_reason);
		return;
	}
	(void)ob_kafka_brokers_error(&p->brokers, rk == p->current->rk, err, reason);
}

static int
on_stats(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
	ob_producer *p = opaque;

	/* The connections outboxd reports are those of the client taking
	 * records: the other may sit idle with its connections closed. */
	if (rk == p->current->rk)
		ob_kafka_brokers_stats(&p->brokers, json, json_len);
	return 0; /* librdkafka frees json */
}

/* Delivery errors that may be the record's own: its size, its content
 * (a broker rule, a timestamp out of range) or its topic's name, which
 * comes from the record's columns. The broker answers a whole batch with
 * one code, so such an error only makes the record a suspect; the relay
 * produces it alone before calling the error its own. Every other delivery
 * error is a fault of the producer or the cluster (outages, leadership
 * moves, idempotence trouble, an unknown or unauthorized topic, an unknown
 * server error): a fresh producer reading the slot again gets past it, and
 * nothing is dead-lettered for it. */
static bool
may_be_records_own(rd_kafka_resp_err_t err)
{
	switch (err) {
	case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
	case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
	case RD_KAFKA_RESP_ERR_INVALID_MSG:
	case RD_KAFKA_RESP_ERR_INVALID_RECORD:
	case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
	case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
		return true;
	default:
		return false;
	}
}

static bool
is_too_large(rd_kafka_resp_err_t err)
{
	return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
	       err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* The client of p that rk is. */
static handle *
handle_of(ob_producer *p, const rd_kafka_t *rk)
{
	return rk == p->main.rk ? &p->main : rk == p->late.rk ? &p->late : &p->alone;
}

/* Fail p (for reason, logged) unless it failed already, and stop the
 * client rk at once: nothing queued on it is written any more, of any
 * key, whatever outboxd does before it drops the producer (it may be away
 * from the stream for a while). Records already sent may still be
 * written: they come before anything queued behind them. */
static void
fail_client(ob_producer *p, rd_kafka_t *rk, const char *reason)
{
	if (!p->failed) {
		p->failed = true;
		snprintf(p->fatal_reason, sizeof(p->fatal_reason), "%s", reason);
		ob_error("kafka producer failed: %s", p->fatal_reason);
	}
	rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE);
}

static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	ob_producer *p = opaque;
	ob_delivery d;
	char reason[256];

	if (p->timeout_ms > 0)
		ob_expiry_reported(&handle_of(p, rk)->expiry, ob_mono_ms());
	/* Records purged when the producer is dropped or failed: nobody waits
	 * for them. */
	if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
		return;
	/* Not zeroed whole: ob_kafka_record_view() sets every field of
	 * d.record but the header arrays past its headers_len. */
	d.tag = (uint64_t)(uintptr_t)m->_private;
	/* A report carries its own batch's error even when that error then
	 * failed the producer (the gapless guarantee): the records of the
	 * refused batch are suspects; those queued behind it are purged. */
	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		d.status = OB_DELIVERED;
	else if (may_be_records_own(m->err))
		d.status = OB_DELIVERY_SUSPECT;
	else
		d.status = OB_DELIVERY_RETRY;
	d.error = d.status == OB_DELIVERED ? NULL : rd_kafka_err2str(m->err);
	d.value_too_large = is_too_large(m->err);
	d.partition = m->partition;
	/* The headers are for a dead-letter record only. */
	(void)ob_kafka_record_view(m, d.status != OB_DELIVERED, &d.record);
	/* A failure a fresh producer may get past fails the producer: the
	 * relay then recreates it and reads the slot again. */
	if (d.status == OB_DELIVERY_RETRY) {
		snprintf(reason, sizeof(reason), "delivery failed: %s", rd_kafka_err2str(m->err));
		fail_client(p, rk, reason);
	}
	p->on_delivery(p->ctx, &d);
}

const char *
ob_producer_library_version(void)
{
	return rd_kafka_version_str();
}

/* Start one librdkafka client of p, its reports announced on p's wake-up
 * pipe. False (logged) on a configuration error. */
static bool
handle_start(ob_producer *p, handle *h, bool gapless)
{
	rd_kafka_conf_t *conf = ob_prodconf_build(
	    p->cfg, gapless, h == &p->late ? OB_STRINGIFY(OB_PRODCONF_LATE_LINGER_MS) : NULL,
	    &p->timeout_ms);
	char err[512];

	if (conf == NULL)
		return false;
	rd_kafka_conf_set_opaque(conf, p);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, ob_kafka_log);
	if (h != &p->alone) /* the connection state outboxd reports is current's */
		rd_kafka_conf_set_stats_cb(conf, on_stats);
	h->rk = ob_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (h->rk == NULL) {
		ob_error("could not create kafka producer: %s", err);
		rd_kafka_conf_destroy(conf);
		return false;
	}
	h->main_queue = rd_kafka_queue_get_main(h->rk);
	rd_kafka_queue_io_event_enable(h->main_queue, p->wake_pipe[1], "1", 1);
	return true;
}

/* Drop what h still holds (purged records report errors, which
 * on_delivery ignores) and destroy it; a handle never started is left
 * alone. */
static void
handle_stop(handle *h)
{
	if (h->rk == NULL)
		return;
	for (size_t i = 0; i < TOPIC_SLOTS; i++) {
		if (h->topics[i] != NULL)
			rd_kafka_topic_destroy(h->topics[i]);
		h->topics[i] = NULL;
	}
	rd_kafka_purge(h->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_poll(h->rk, 0);
	rd_kafka_queue_io_event_enable(h->main_queue, -1, NULL, 0);
	rd_kafka_queue_destroy(h->main_queue);
	rd_kafka_destroy(h->rk);
	h->rk = NULL;
	h->expiry = (ob_expiry){0};
}

bool
ob_producer_new(const ob_config *cfg, ob_producer_order order, ob_delivery_fn on_delivery_fn,
		void *ctx, ob_producer **out)
{
	ob_producer *p = ob_xcalloc(1, sizeof(*p));

	*out = NULL;
	p->cfg = cfg;
	p->on_delivery = on_delivery_fn;
	p->ctx = ctx;
	if (pipe2(p->wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		ob_error("could not create wake-up pipe: %s", strerror(errno));
		free(p);
		return false;
	}
	if (!handle_start(p, &p->main, order == OB_PRODUCER_PIPELINED)) {
		ob_producer_free(p);
		return false;
	}
	p->max_record_bytes =
	    (size_t)ob_kafka_conf_number(rd_kafka_conf(p->main.rk), "message.max.bytes");
	p->current = &p->main;
	p->next_switch_ms = ob_mono_ms();
	p->late_useful = order == OB_PRODUCER_PIPELINED &&
			 ob_kafka_conf_number(rd_kafka_conf(p->main.rk), "linger.ms") <
			     OB_PRODCONF_LATE_LINGER_MS &&
			 (p->timeout_ms == 0 || p->timeout_ms > OB_PRODCONF_LATE_LINGER_MS);
	test_hook_arm(p);
	*out = p;
	return true;
}

void
ob_producer_free(ob_producer *p)
{
	if (p == NULL)
		return;
	/* Drop what is still queued: its transactions are not confirmed and
	 * will be read again from the slot. */
	handle_stop(&p->alone);
	handle_stop(&p->late);
	handle_stop(&p->main);
	close(p->wake_pipe[0]);
	close(p->wake_pipe[1]);
	free(p);
}

/* The event's headers as librdkafka headers; the caller owns the result
 * until produceva takes it. */
static rd_kafka_headers_t *
event_headers(const ob_event *ev)
{
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new(ev->headers_len);

	for (size_t i = 0; i < ev->headers_len; i++) {
		const ob_event_header *h = &ev->headers[i];

		rd_kafka_header_add(hdrs, ob_event_ptr(ev, h->name), (ssize_t)h->name.len,
				    ob_event_ptr(ev, h->value), (ssize_t)h->value.len);
	}
	return hdrs;
}

/* What a failed produce call means for the caller; takes error. */
static ob_send_result
produce_failed(ob_producer *p, rd_kafka_t *rk, rd_kafka_error_t *error, const char *topic,
	       const char **why, bool *too_large)
{
	rd_kafka_resp_err_t err = rd_kafka_error_code(error);

	/* After a fatal error, produce fails with the fatal error's own code
	 * before the error callback has run: ask librdkafka directly. */
	if (rd_kafka_error_is_fatal(error) ||
	    rd_kafka_fatal_error(rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR)
		err = RD_KAFKA_RESP_ERR__FATAL;
	rd_kafka_error_destroy(error);
	switch (err) {
	case RD_KAFKA_RESP_ERR__QUEUE_FULL:
		if (rd_kafka_outq_len(rk) > 0)
			return OB_SEND_QUEUE_FULL;
		/* The queue is empty and still has no room: it never will. */
		*too_large = true;
		*why = "record larger than the producer queue (queue.buffering.max.kbytes)";
		return OB_SEND_REFUSED;
	case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		/* librdkafka's own check of this one record's size. */
		*too_large = true;
		*why = rd_kafka_err2str(err);
		return OB_SEND_REFUSED;
	default:
		/* A fatal error, or the topic is unknown or not ours: a fresh
		 * producer reading the slot again may get past it. */
		if (!p->failed) {
			p->failed = true;
			snprintf(p->fatal_reason, sizeof(p->fatal_reason),
				 "could not produce to %.200s: %s", topic, rd_kafka_err2str(err));
			ob_error("kafka producer failed: %s", p->fatal_reason);
		}
		return OB_SEND_FATAL;
	}
}

/* The handle of h's topic name (NUL-terminated, len bytes), or NULL when
 * librdkafka refuses to make one. The handle stays h's (see handle):
 * the caller neither keeps nor destroys it past its produce call.
 *
 * Produce through a handle from rd_kafka_topic_new(): the call that
 * creates a topic's handle asks the cluster for its metadata at once. A
 * record produced by topic name alone waits in the unassigned partition
 * for librdkafka's 1 s topic scan instead (librdkafka before 2.10.1, its
 * issue #5032): up to a second for the first record to each topic after
 * every start. Keeping the handle spares each later record the lookup
 * under the client's lock and the reference taken and dropped around it. */
static rd_kafka_topic_t *
topic_handle(handle *h, const char *name, size_t len)
{
	uint32_t hash = 2166136261u; /* FNV-1a */
	rd_kafka_topic_t **slot;

	for (size_t i = 0; i < len; i++)
		hash = (hash ^ (unsigned char)name[i]) * 16777619u;
	slot = &h->topics[hash % TOPIC_SLOTS];
	if (*slot != NULL && strcmp(rd_kafka_topic_name(*slot), name) == 0)
		return *slot;
	if (*slot != NULL)
		rd_kafka_topic_destroy(*slot); /* queued records hold their own references */
	*slot = rd_kafka_topic_new(h->rk, name, NULL);
	return *slot;
}

/* Queue ev on the client h of p (ob_producer_send's contract). */
static ob_send_result
send_on(ob_producer *p, handle *h, const ob_event *ev, uint64_t tag, const char **why,
	bool *too_large)
{
	rd_kafka_headers_t *hdrs;
	rd_kafka_vu_t vu[7];
	rd_kafka_error_t *error;
	rd_kafka_topic_t *rkt;
	char topic[512];
	size_t n = 0;

	*why = NULL;
	*too_large = false;
	if (p->failed)
		return OB_SEND_FATAL;
	if (ev->topic.len >= sizeof(topic) || ev->topic.len == 0 ||
	    memchr(ob_event_ptr(ev, ev->topic), '\0', ev->topic.len) != NULL) {
		*why = "invalid topic name";
		return OB_SEND_REFUSED;
	}
	memcpy(topic, ob_event_ptr(ev, ev->topic), ev->topic.len);
	topic[ev->topic.len] = '\0';

	rkt = topic_handle(h, topic, ev->topic.len);
	if (rkt != NULL) {
		vu[n].vtype = RD_KAFKA_VTYPE_RKT;
		vu[n++].u.rkt = rkt;
	} else {
		/* Let produceva report the error. */
		vu[n].vtype = RD_KAFKA_VTYPE_TOPIC;
		vu[n++].u.cstr = topic;
	}
	if (ev->has_key) {
		vu[n].vtype = RD_KAFKA_VTYPE_KEY;
		vu[n].u.mem.ptr = (void *)ob_event_ptr(ev, ev->key);
		vu[n++].u.mem.size = ev->key.len;
	}
	if (ev->has_value) {
		vu[n].vtype = RD_KAFKA_VTYPE_VALUE;
		vu[n].u.mem.ptr = (void *)ob_event_ptr(ev, ev->value);
		vu[n++].u.mem.size = ev->value.len;
	}
	hdrs = event_headers(ev);
	vu[n].vtype = RD_KAFKA_VTYPE_HEADERS;
	vu[n++].u.headers = hdrs;
	vu[n].vtype = RD_KAFKA_VTYPE_TIMESTAMP;
	vu[n++].u.i64 = ev->timestamp_ms;
	vu[n].vtype = RD_KAFKA_VTYPE_OPAQUE;
	vu[n++].u.ptr = (void *)(uintptr_t)tag;
	vu[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
	vu[n++].u.i32 = RD_KAFKA_MSG_F_COPY;

	error = rd_kafka_produceva(h->rk, vu, n);
	if (error == NULL) {
		/* librdkafka owns hdrs now. */
		if (p->timeout_ms > 0)
			ob_expiry_produced(&h->expiry, ob_mono_ms());
		test_hook_sent(p, h);
		return OB_SEND_OK;
	}
	rd_kafka_headers_destroy(hdrs);
	return produce_failed(p, h->rk, error, topic, why, too_large);
}

/* Start the client h of p made on first use (for what, in the failure's
 * reason) unless it runs. False when it cannot be made: p is failed. */
static bool
handle_ready(ob_producer *p, handle *h, bool gapless, const char *what)
{
	if (h->rk != NULL || handle_start(p, h, gapless))
		return true;
	if (!p->failed) {
		p->failed = true;
		snprintf(p->fatal_reason, sizeof(p->fatal_reason),
			 "could not create the producer for %s", what);
	}
	return false;
}

void
ob_producer_set_late(ob_producer *p, bool late)
{
	p->want_late = late && p->late_useful;
}

/* Make the client ob_producer_set_late() asked for current, once the
 * current one has nothing outstanding (see SWITCH_DWELL_MS and
 * SWITCH_WAIT_MS for when records stay where they are). False when
 * records must wait for that (*result OB_SEND_QUEUE_FULL) or the client
 * cannot be made (OB_SEND_FATAL, p failed). */
static bool
switch_clients(ob_producer *p, ob_send_result *result)
{
	handle *want = p->want_late ? &p->late : &p->main;
	int64_t now;
	int outstanding;

	if (want == p->current) { /* every record but those at a change */
		p->waiting_ms = 0;
		return true;
	}
	now = ob_mono_ms();
	if (now < p->next_switch_ms)
		return true;
	outstanding = rd_kafka_outq_len(p->current->rk);
	if (outstanding > 0 && (p->waiting_ms == 0 || outstanding < p->waiting_outq)) {
		p->waiting_ms = now;
		p->waiting_outq = outstanding;
	}
	if (outstanding > 0 && now - p->waiting_ms < SWITCH_WAIT_MS) {
		*result = OB_SEND_QUEUE_FULL;
		return false;
	}
	if (outstanding > 0) {
		ob_debug("kafka: %s records stay on the client they are on: %d records "
			 "outstanding there have not moved for %d ms",
			 p->want_late ? "late" : "fresh", outstanding, SWITCH_WAIT_MS);
		p->waiting_ms = 0;
		p->next_switch_ms = now + SWITCH_RETRY_MS;
		return true;
	}
	p->waiting_ms = 0;
	if (!handle_ready(p, want, true, "late records")) {
		*result = OB_SEND_FATAL;
		return false;
	}
	ob_debug("kafka: %s records go through the client with linger.ms %s",
		 want == &p->late ? "late" : "fresh",
		 want == &p->late ? OB_STRINGIFY(OB_PRODCONF_LATE_LINGER_MS) : "as configured");
	p->current = want;
	p->next_switch_ms = now + SWITCH_DWELL_MS;
	return true;
}

ob_send_result
ob_producer_send(ob_producer *p, const ob_event *ev, uint64_t tag, const char **why,
		 bool *too_large)
{
	ob_send_result result;

	/* A failed producer takes nothing: send_on() says so. */
	if (!p->failed && !switch_clients(p, &result))
		return result;
	return send_on(p, p->current, ev, tag, why, too_large);
}

ob_send_result
ob_producer_send_alone(ob_producer *p, const ob_event *ev, uint64_t tag, const char **why,
		       bool *too_large)
{
	if (!handle_ready(p, &p->alone, false, "records produced alone"))
		return OB_SEND_FATAL;
	return send_on(p, &p->alone, ev, tag, why, too_large);
}

/* Empty the wake-up pipe: the reports it announced are about to be served. */
static void
drain_wake_pipe(ob_producer *p)
{
	char drain[64];

	while (read(p->wake_pipe[0], drain, sizeof(drain)) > 0)
		;
}

/* The client whose reports are awaited: the one for records produced
 * alone while it holds any, else the current one. */
static rd_kafka_t *
awaited(const ob_producer *p)
{
	if (p->alone.rk != NULL && rd_kafka_outq_len(p->alone.rk) > 0)
		return p->alone.rk;
	return p->current->rk;
}

/* Serve the reports of the clients that are not awaited, without
 * waiting; then fail p when a client's records waited timeout_ms with none
 * reported (expiry.h). */
static void
poll_other(ob_producer *p, rd_kafka_t *busy)
{
	handle *all[] = {&p->main, &p->late, &p->alone};
	char reason[256];

	for (size_t i = 0; i < OB_ARRAY_LEN(all); i++) {
		if (all[i]->rk != NULL && all[i]->rk != busy)
			rd_kafka_poll(all[i]->rk, 0);
	}
	for (size_t i = 0; p->timeout_ms > 0 && i < OB_ARRAY_LEN(all); i++) {
		if (all[i]->rk == NULL ||
		    !ob_expiry_due(&all[i]->expiry, p->timeout_ms, ob_mono_ms()))
			continue;
		snprintf(reason, sizeof(reason),
			 "delivery timed out: %llu records waited kafka.message.timeout.ms (%lld "
			 "ms) with none acknowledged",
			 (unsigned long long)all[i]->expiry.outstanding, p->timeout_ms);
		fail_client(p, all[i]->rk, reason);
		all[i]->expiry.moved_ms = ob_mono_ms(); /* said once per timeout */
	}
}

void
ob_producer_poll(ob_producer *p, int timeout_ms)
{
	rd_kafka_t *busy = awaited(p);

	drain_wake_pipe(p);
	rd_kafka_poll(busy, timeout_ms);
	poll_other(p, busy);
}

void
ob_producer_flush(ob_producer *p, int timeout_ms)
{
	rd_kafka_t *busy = awaited(p);

	drain_wake_pipe(p);
	/* rd_kafka_flush() serves reports like rd_kafka_poll() and, for its
	 * duration, takes linger.ms as elapsed (librdkafka 1.8 and later). */
	(void)rd_kafka_flush(busy, timeout_ms);
	poll_other(p, busy);
}

int
ob_producer_wake_fd(const ob_producer *p)
{
	return p->wake_pipe[0];
}

bool
ob_producer_failed(const ob_producer *p, const char **why)
{
	if (why != NULL)
		*why = p->fatal_reason;
	return p->failed;
}

size_t
ob_producer_max_record_bytes(const ob_producer *p)
{
	return p->max_record_bytes;
}

bool
ob_producer_connected(const ob_producer *p)
{
	return p->brokers.up > 0;
}
