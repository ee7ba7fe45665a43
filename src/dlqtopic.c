/*
 * dlqtopic.c: a topic read once, from a start point to the high
 * watermarks it had when the read began, by a consumer of its own that
 * joins no group (dlqtopic.h).
 */
#include "outboxd/dlqtopic.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "outboxd/kafka.h"
#include "outboxd/log.h"

#define QUERY_TIMEOUT_MS 10000
/* How long the read waits for anything from partitions not read to their
 * end before it gives up. */
#define IDLE_TIMEOUT_MS  30000
#define POLL_MS          500

typedef struct reader {
	const char *topic;
	int64_t since_ms; /* negative: from the start */
	rd_kafka_t *rk;
	/* The partitions not read to their end yet, each .offset its high
	 * watermark when the read began. */
	rd_kafka_topic_partition_list_t *unread;
	ob_kafka_brokers brokers;
} reader;

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	reader *r = opaque;

	(void)ob_kafka_brokers_error(&r->brokers, false, err, reason);
}

/* Create the reader's client: the inbox consumer's configuration with a
 * group of its own that it never joins (librdkafka's consumer wants one),
 * client.id outboxd-dlq unless the user set one, and the end of each
 * partition reported. False (logged) on a configuration error. */
static bool
start_client(reader *r, const ob_config *cfg)
{
	char *group = ob_xasprintf("outboxd-dlq-%d-%lld", (int)getpid(), (long long)ob_now_us());
	rd_kafka_conf_t *conf = ob_consumer_conf_build(cfg, group);
	char errstr[512];

	free(group);
	if (conf == NULL)
		return false;
	if ((ob_config_kafka_get(cfg, "client.id") == NULL &&
	     !ob_kafka_conf_set(conf, "client.id", "outboxd-dlq")) ||
	    !ob_kafka_conf_set(conf, "enable.partition.eof", "true")) {
		rd_kafka_conf_destroy(conf);
		return false;
	}
	rd_kafka_conf_set_opaque(conf, r);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, ob_kafka_log);
	r->rk = ob_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (r->rk == NULL) {
		ob_error("could not create kafka consumer: %s", errstr);
		rd_kafka_conf_destroy(conf);
		return false;
	}
	rd_kafka_poll_set_consumer(r->rk);
	return true;
}

/* The partitions of the topic into a new *parts; OB_DLQTOPIC_MISSING when
 * the topic does not exist, OB_DLQTOPIC_FAILED (logged) when the cluster
 * did not say. */
static ob_dlqtopic_result
partitions(reader *r, rd_kafka_topic_partition_list_t **parts)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(r->rk, r->topic, NULL);
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err = rd_kafka_metadata(r->rk, 0, rkt, &md, QUERY_TIMEOUT_MS);
	ob_dlqtopic_result res = OB_DLQTOPIC_FAILED;

	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		err = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
	if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
	    err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
		res = OB_DLQTOPIC_MISSING;
	} else if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not read the partitions of %s: %s", r->topic,
			 rd_kafka_err2str(err));
	} else {
		*parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt + 1);
		for (int i = 0; i < md->topics[0].partition_cnt; i++)
			rd_kafka_topic_partition_list_add(*parts, r->topic,
							  md->topics[0].partitions[i].id);
		res = OB_DLQTOPIC_READ;
	}
	if (md != NULL)
		rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return res;
}

/* The offset of each of parts for time ms in a new *out (the caller
 * destroys it, also on failure): that of its first record stamped ms or
 * later, -1 when there is none. */
static rd_kafka_resp_err_t
offsets_for_time(reader *r, const rd_kafka_topic_partition_list_t *parts, int64_t ms,
		 rd_kafka_topic_partition_list_t **out)
{
	rd_kafka_resp_err_t err;

	*out = rd_kafka_topic_partition_list_copy(parts);
	for (int i = 0; i < (*out)->cnt; i++)
		(*out)->elems[i].offset = ms;
	err = rd_kafka_offsets_for_times(r->rk, *out, QUERY_TIMEOUT_MS);
	for (int i = 0; i < (*out)->cnt && err == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
		err = (*out)->elems[i].err;
	return err;
}

/* Where each of parts starts, given its .offset at its low watermark and
 * with since_ms its offsets for that time (at) and for time 0 (any). A
 * partition with records for which the broker finds none even at time 0
 * has a broker that does not look offsets up by time (librdkafka's mock
 * cluster): it is read from its start, take() skipping the records stamped
 * before since_ms. -1: nothing to read. */
static int64_t
start_of(const rd_kafka_topic_partition_t *p, const rd_kafka_topic_partition_list_t *at,
	 const rd_kafka_topic_partition_list_t *any)
{
	const rd_kafka_topic_partition_t *t, *z;

	if (at == NULL)
		return p->offset;
	t = rd_kafka_topic_partition_list_find(at, p->topic, p->partition);
	z = rd_kafka_topic_partition_list_find(any, p->topic, p->partition);
	if (t != NULL && t->offset >= 0)
		return t->offset;
	return z != NULL && z->offset < 0 ? p->offset : -1;
}

/* Where each of parts starts, in a new list (NULL, logged, when the broker
 * did not answer): from its low watermark, or with since_ms from its
 * offset for that time. Each also goes to r->unread with its high watermark;
 * a partition with nothing to read goes to neither. */
static rd_kafka_topic_partition_list_t *
plan(reader *r, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_topic_partition_list_t *from = NULL, *at = NULL, *any = NULL;
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

	/* The high watermarks first: the read ends where the topic ended
	 * before anything else was asked. */
	for (int i = 0; i < parts->cnt && err == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
		rd_kafka_topic_partition_t *p = &parts->elems[i];
		int64_t low = 0, high = 0;

		err = rd_kafka_query_watermark_offsets(r->rk, r->topic, p->partition, &low, &high,
						       QUERY_TIMEOUT_MS);
		rd_kafka_topic_partition_list_add(r->unread, r->topic, p->partition)->offset = high;
		p->offset = low;
	}
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR && r->since_ms >= 0)
		err = offsets_for_time(r, parts, r->since_ms, &at);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR && r->since_ms >= 0)
		err = offsets_for_time(r, parts, 0, &any);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not read the offsets of %s: %s", r->topic, rd_kafka_err2str(err));
		goto done;
	}
	from = rd_kafka_topic_partition_list_new(parts->cnt + 1);
	for (int i = 0; i < parts->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &parts->elems[i];
		const rd_kafka_topic_partition_t *end =
		    rd_kafka_topic_partition_list_find(r->unread, r->topic, p->partition);
		int64_t start = start_of(p, at, any);

		if (start >= 0 && start < end->offset)
			rd_kafka_topic_partition_list_add(from, r->topic, p->partition)->offset =
			    start;
		else
			(void)rd_kafka_topic_partition_list_del(r->unread, r->topic, p->partition);
	}
done:
	if (at != NULL)
		rd_kafka_topic_partition_list_destroy(at);
	if (any != NULL)
		rd_kafka_topic_partition_list_destroy(any);
	return from;
}

/* Take one message of the read: hand a record to fn, and note a partition
 * read to its end. False (logged) on a read error or when fn stops the
 * read. */
static bool
take(reader *r, const rd_kafka_message_t *m, ob_dlqtopic_fn fn, void *ctx)
{
	rd_kafka_topic_partition_t *end =
	    rd_kafka_topic_partition_list_find(r->unread, r->topic, m->partition);
	ob_dlqtopic_record rec;

	if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
		if (end != NULL && m->offset >= end->offset)
			(void)rd_kafka_topic_partition_list_del(r->unread, r->topic, m->partition);
		return true;
	}
	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not read %s [%d]: %s", r->topic, (int)m->partition,
			 rd_kafka_message_errstr(m));
		return false;
	}
	if (end == NULL || m->offset >= end->offset)
		return true; /* written after the read began */
	if (m->offset + 1 >= end->offset)
		(void)rd_kafka_topic_partition_list_del(r->unread, r->topic, m->partition);
	rec.partition = m->partition;
	rec.offset = m->offset;
	rec.all_headers = ob_kafka_record_view(m, true, &rec.view);
	if (r->since_ms >= 0 && rec.view.timestamp_ms < r->since_ms)
		return true;
	return fn(ctx, &rec);
}

/* Read the assigned partitions until r->unread is empty. False (logged) on
 * an error, when fn stops the read, or after IDLE_TIMEOUT_MS with nothing
 * read. */
static bool
read_all(reader *r, ob_dlqtopic_fn fn, void *ctx)
{
	int64_t heard_ms = ob_mono_ms();

	while (r->unread->cnt > 0) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, POLL_MS);
		bool ok;

		if (m == NULL) {
			if (ob_mono_ms() - heard_ms < IDLE_TIMEOUT_MS)
				continue;
			ob_error(
			    "could not read %s to its end: %d partition(s) sent nothing for %d "
			    "s",
			    r->topic, r->unread->cnt, IDLE_TIMEOUT_MS / 1000);
			return false;
		}
		heard_ms = ob_mono_ms();
		ok = take(r, m, fn, ctx);
		rd_kafka_message_destroy(m);
		if (!ok)
			return false;
	}
	return true;
}

ob_dlqtopic_result
ob_dlqtopic_read(const ob_config *cfg, const char *topic, int64_t since_ms, ob_dlqtopic_fn fn,
		 void *ctx)
{
	reader r = {.topic = topic, .since_ms = since_ms};
	rd_kafka_topic_partition_list_t *parts = NULL, *from = NULL;
	ob_dlqtopic_result res = OB_DLQTOPIC_FAILED;
	rd_kafka_resp_err_t err;

	r.unread = rd_kafka_topic_partition_list_new(1);
	if (!start_client(&r, cfg))
		goto done;
	res = partitions(&r, &parts);
	if (res != OB_DLQTOPIC_READ)
		goto done;
	res = OB_DLQTOPIC_FAILED;
	from = plan(&r, parts);
	if (from == NULL)
		goto done;
	err = rd_kafka_assign(r.rk, from);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not assign the partitions of %s: %s", topic, rd_kafka_err2str(err));
		goto done;
	}
	if (read_all(&r, fn, ctx))
		res = OB_DLQTOPIC_READ;
done:
	if (parts != NULL)
		rd_kafka_topic_partition_list_destroy(parts);
	if (from != NULL)
		rd_kafka_topic_partition_list_destroy(from);
	if (r.rk != NULL) {
		(void)rd_kafka_consumer_close(r.rk);
		rd_kafka_destroy(r.rk);
	}
	rd_kafka_topic_partition_list_destroy(r.unread);
	return res;
}
