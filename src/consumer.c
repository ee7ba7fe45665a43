/*
 * consumer.c: librdkafka's consumer behind a small interface (see
 * consumer.h).
 */
#include "outboxd/consumer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/kafka.h"
#include "outboxd/log.h"
#include "outboxd/topic.h"
#include "outboxd/topicids.h"
#include "outboxd/metrics.h"

#define SEEK_TIMEOUT_MS  10000
#define QUERY_TIMEOUT_MS 10000

/* outboxd's consumer defaults, applied before the user's [kafka]
 * properties. */
static const ob_kafka_setting consumer_defaults[] = {
    {"client.id", "outboxd-inbox"},
    {"statistics.interval.ms", OB_KAFKA_STATS_INTERVAL_MS},
    {"enable.partition.eof", "false"},
};

struct ob_consumer {
	const ob_config *cfg;
	char *group; /* the consumer group (inbox.group, or derived: inboxdb.h) */
	ob_consumer_hooks hooks;
	rd_kafka_t *rk;
	/* The assigned partitions, each .offset where it resumes (consumer.h). */
	rd_kafka_topic_partition_list_t *assigned;
	/* The assigned partitions not started yet: paused until
	 * ob_consumer_start(). */
	rd_kafka_topic_partition_list_t *unstarted;
	/* The lag of partitions of unstarted, as the owner last computed it
	 * (each .offset is a count of records). */
	rd_kafka_topic_partition_list_t *unstarted_lag;
	char cluster_id[128]; /* "" unknown */
	ob_topicids *topic_ids;
	ob_kafka_brokers brokers;
};

static bool
cooperative(rd_kafka_t *rk)
{
	return strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
}

/* Add each partition of parts to list (at offset INVALID) unless there. */
static void
list_add(rd_kafka_topic_partition_list_t *list, const rd_kafka_topic_partition_list_t *parts)
{
	for (int i = 0; i < parts->cnt; i++) {
		if (rd_kafka_topic_partition_list_find(list, parts->elems[i].topic,
						       parts->elems[i].partition) == NULL)
			rd_kafka_topic_partition_list_add(list, parts->elems[i].topic,
							  parts->elems[i].partition)
			    ->offset = RD_KAFKA_OFFSET_INVALID;
	}
}

static void
list_del(rd_kafka_topic_partition_list_t *list, const rd_kafka_topic_partition_list_t *parts)
{
	for (int i = 0; i < parts->cnt; i++)
		(void)rd_kafka_topic_partition_list_del(list, parts->elems[i].topic,
							parts->elems[i].partition);
}

/* The partitions of list as a new array (the caller frees). */
static ob_kpart *
to_parts(const rd_kafka_topic_partition_list_t *list, size_t *n)
{
	ob_kpart *parts = ob_xcalloc((size_t)list->cnt + 1, sizeof(*parts));

	for (int i = 0; i < list->cnt; i++)
		parts[i] = (ob_kpart){list->elems[i].topic, list->elems[i].partition,
				      list->elems[i].offset};
	*n = (size_t)list->cnt;
	return parts;
}

/* Note where a partition that has nothing stored resumes after a failure:
 * the first record read from it. */
static void
note_first(ob_consumer *c, const rd_kafka_message_t *m)
{
	rd_kafka_topic_partition_t *a = rd_kafka_topic_partition_list_find(
	    c->assigned, rd_kafka_topic_name(m->rkt), m->partition);

	if (a != NULL && a->offset < 0)
		a->offset = m->offset;
}

/* The consumer could not fetch at the position of m's partition (the
 * broker no longer holds it: auto.offset.reset is pinned to error, so
 * librdkafka never moves past it by itself). Pause the partition and
 * have it started again, which judges its stored position against the
 * watermarks: a position below the low watermark is a mismatch, recovered
 * as inbox.on_position_mismatch says. */
static void
restart_partition(ob_consumer *c, const rd_kafka_message_t *m)
{
	const char *topic = m->rkt != NULL ? rd_kafka_topic_name(m->rkt) : NULL;
	rd_kafka_topic_partition_list_t *again;

	if (topic == NULL ||
	    rd_kafka_topic_partition_list_find(c->assigned, topic, m->partition) == NULL ||
	    rd_kafka_topic_partition_list_find(c->unstarted, topic, m->partition) != NULL)
		return; /* not ours, or its start seeks it anyway */
	ob_warn("kafka cannot serve %s [%d] at offset %lld (%s); checking its stored position "
		"against the partition's watermarks",
		topic, (int)m->partition, (long long)m->offset, rd_kafka_message_errstr(m));
	/* librdkafka stopped fetching it, and a stopped partition cannot be
	 * sought: assign it again (eager: every partition, all started
	 * again), at the beginning like on_assign(), and paused. */
	if (cooperative(c->rk)) {
		rd_kafka_error_t *err;

		again = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_add(again, topic, m->partition);
		err = rd_kafka_incremental_unassign(c->rk, again);
		if (err == NULL) {
			again->elems[0].offset = RD_KAFKA_OFFSET_BEGINNING;
			err = rd_kafka_incremental_assign(c->rk, again);
		}
		if (err != NULL) {
			ob_error("could not assign %s [%d] again: %s", topic, (int)m->partition,
				 rd_kafka_error_string(err));
			rd_kafka_error_destroy(err);
		}
	} else {
		again = rd_kafka_topic_partition_list_copy(c->assigned);
		for (int i = 0; i < again->cnt; i++)
			again->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
		if (rd_kafka_assign(c->rk, again) != RD_KAFKA_RESP_ERR_NO_ERROR)
			ob_error("could not assign the partitions again");
	}
	(void)rd_kafka_pause_partitions(c->rk, again);
	list_add(c->unstarted, again);
	rd_kafka_topic_partition_list_destroy(again);
}

/* ---- rebalances ------------------------------------------------------- */

/* Take the partitions paused; the owner starts them (ob_consumer_start()).
 * Nothing here waits for the database, so a Postgres outage never holds up
 * the rebalance. */
static void
on_assign(ob_consumer *c, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Fetching starts at the beginning (paused, so nothing is read): an
	 * explicit offset, as auto.offset.reset is error and a partition
	 * stopped on it could not be sought; its start seeks it. */
	for (int i = 0; i < parts->cnt; i++)
		parts->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
	if (cooperative(c->rk))
		err = rd_kafka_incremental_assign(c->rk, parts);
	else if (rd_kafka_assign(c->rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
		ob_error("could not assign the partitions");
	if (err != NULL) {
		ob_error("could not assign the partitions: %s", rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
	}
	(void)rd_kafka_pause_partitions(c->rk, parts);
	list_add(c->assigned, parts);
	list_add(c->unstarted, parts);
	ob_info("assigned %d partition(s); each starts once its stored position is checked",
		parts->cnt);
}

static void
on_revoke(ob_consumer *c, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Store what was read before the partitions go to another member. */
	c->hooks.revoking(c->hooks.ctx);
	ob_info("revoked %d partition(s)", parts->cnt);
	if (cooperative(c->rk))
		err = rd_kafka_incremental_unassign(c->rk, parts);
	else
		(void)rd_kafka_assign(c->rk, NULL);
	list_del(c->assigned, parts);
	list_del(c->unstarted, parts);
	if (err != NULL) {
		ob_error("could not unassign the partitions: %s", rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
	}
}

static void
on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
	     void *opaque)
{
	ob_consumer *c = opaque;

	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		on_assign(c, parts);
	} else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
		on_revoke(c, parts);
	} else {
		ob_error("kafka rebalance failed: %s", rd_kafka_err2str(err));
		c->hooks.lost(c->hooks.ctx);
		(void)rd_kafka_assign(rk, NULL);
		rd_kafka_topic_partition_list_destroy(c->assigned);
		c->assigned = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_destroy(c->unstarted);
		c->unstarted = rd_kafka_topic_partition_list_new(1);
	}
}

/* ---- the client ------------------------------------------------------- */

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	ob_consumer *c = opaque;

	if (ob_kafka_brokers_error(&c->brokers, true, err, reason))
		c->hooks.brokers(c->hooks.ctx);
}

static int
on_stats(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
	ob_consumer *c = opaque;

	ob_kafka_brokers_stats(&c->brokers, json, json_len);
	c->hooks.brokers(c->hooks.ctx);
	return 0; /* librdkafka frees json */
}

/* Whether conf's assignor is safe with the librdkafka in use: before 2.3.0
 * a consumer using cooperative-sticky aborts (an assertion in the sticky
 * assignor) when it is destroyed before its first assignment, as a
 * SIGTERM right after start does (librdkafka issue 4312). False (logged)
 * when the configuration asks for it there. */
static bool
assignor_safe(rd_kafka_conf_t *conf)
{
	char value[256];
	size_t len = sizeof(value);

	if (rd_kafka_version() >= 0x020300ff ||
	    rd_kafka_conf_get(conf, "partition.assignment.strategy", value, &len) !=
		RD_KAFKA_CONF_OK ||
	    strstr(value, "cooperative-sticky") == NULL)
		return true;
	ob_error("invalid kafka.partition.assignment.strategy \"%s\": librdkafka %s aborts when "
		 "a consumer using cooperative-sticky stops before its first assignment (fixed in "
		 "librdkafka 2.3.0); use range,roundrobin",
		 value, rd_kafka_version_str());
	return false;
}

rd_kafka_conf_t *
ob_consumer_conf_build(const ob_config *cfg, const char *group)
{
	rd_kafka_conf_t *conf = ob_kafka_conf_build(
	    cfg, consumer_defaults, OB_ARRAY_LEN(consumer_defaults), ob_kafka_pinned,
	    ob_kafka_pinned_len, ob_kafka_consumer_pinned, ob_kafka_consumer_pinned_len);

	if (conf == NULL)
		return NULL;
	if (!ob_kafka_conf_set(conf, "group.id", group) || !assignor_safe(conf)) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	return conf;
}

bool
ob_consumer_check_config(const ob_config *cfg)
{
	rd_kafka_conf_t *conf = ob_consumer_conf_build(cfg, "outboxd-inbox");

	if (conf != NULL)
		rd_kafka_conf_destroy(conf);
	return conf != NULL;
}

/* ob_consumer_conf_build() with the consumer's callbacks. */
static rd_kafka_conf_t *
consumer_conf(ob_consumer *c)
{
	rd_kafka_conf_t *conf = ob_consumer_conf_build(c->cfg, c->group);

	if (conf == NULL)
		return NULL;
	rd_kafka_conf_set_opaque(conf, c);
	rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, ob_kafka_log);
	rd_kafka_conf_set_stats_cb(conf, on_stats);
	return conf;
}

/* inbox.topics as a subscription list. */
static rd_kafka_topic_partition_list_t *
topic_list(const char *topics)
{
	size_t n;
	char **names = ob_topic_subscriptions(topics, &n);
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n + 1);

	for (size_t i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, names[i], RD_KAFKA_PARTITION_UA);
	ob_topic_subscriptions_free(names, n);
	return list;
}

/* Create the client and subscribe; false (logged) on a configuration
 * error. */
static bool
subscribe(ob_consumer *c)
{
	rd_kafka_conf_t *conf = consumer_conf(c);
	rd_kafka_topic_partition_list_t *topics = topic_list(c->cfg->inbox.topics);
	rd_kafka_resp_err_t err;
	char errstr[512];
	bool ok = false;

	if (conf == NULL)
		goto out;
	if (topics->cnt == 0) {
		ob_error("inbox.topics is empty: name the topics to consume (comma-separated)");
		rd_kafka_conf_destroy(conf);
		goto out;
	}
	c->rk = ob_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (c->rk == NULL) {
		ob_error("could not create kafka consumer: %s", errstr);
		rd_kafka_conf_destroy(conf);
		goto out;
	}
	rd_kafka_poll_set_consumer(c->rk);
	err = rd_kafka_subscribe(c->rk, topics);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not subscribe to %s: %s", c->cfg->inbox.topics,
			 rd_kafka_err2str(err));
		goto out;
	}
	ok = true;
out:
	rd_kafka_topic_partition_list_destroy(topics);
	return ok;
}

ob_consumer *
ob_consumer_new(const ob_config *cfg, const char *group, ob_consumer_hooks hooks)
{
	ob_consumer *c = ob_xcalloc(1, sizeof(*c));

	c->cfg = cfg;
	c->group = ob_xstrdup(group);
	c->hooks = hooks;
	c->assigned = rd_kafka_topic_partition_list_new(1);
	c->unstarted = rd_kafka_topic_partition_list_new(1);
	c->unstarted_lag = rd_kafka_topic_partition_list_new(1);
	c->topic_ids = ob_topicids_new();
	if (!subscribe(c)) {
		ob_consumer_free(c);
		return NULL;
	}
	return c;
}

void
ob_consumer_free(ob_consumer *c)
{
	if (c == NULL)
		return;
	if (c->rk != NULL) {
		/* Leaves the group; the revocation's hook finds nothing to store. */
		(void)rd_kafka_consumer_close(c->rk);
		rd_kafka_destroy(c->rk);
	}
	rd_kafka_topic_partition_list_destroy(c->assigned);
	rd_kafka_topic_partition_list_destroy(c->unstarted);
	rd_kafka_topic_partition_list_destroy(c->unstarted_lag);
	ob_topicids_free(c->topic_ids);
	free(c->group);
	free(c);
}

/* ---- records ---------------------------------------------------------- */

ob_consumer_poll_result
ob_consumer_poll(ob_consumer *c, int timeout_ms, ob_consumer_record *rec)
{
	rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout_ms);

	if (m == NULL)
		return OB_CONSUMER_NONE;
	if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET) {
		restart_partition(c, m);
		rd_kafka_message_destroy(m);
		return OB_CONSUMER_OTHER;
	}
	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			ob_warn("kafka consumer: %s", rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
		return OB_CONSUMER_OTHER;
	}
	if (rd_kafka_topic_partition_list_find(c->unstarted, rd_kafka_topic_name(m->rkt),
					       m->partition) != NULL) {
		rd_kafka_message_destroy(m);
		return OB_CONSUMER_OTHER;
	}
	note_first(c, m); /* nothing stored yet: resume here on failure */
	*rec = (ob_consumer_record){rd_kafka_topic_name(m->rkt), m->partition, m->offset, m};
	return OB_CONSUMER_RECORD;
}

void
ob_consumer_poll_drop(ob_consumer *c, int timeout_ms)
{
	rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout_ms);

	if (m == NULL)
		return;
	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		note_first(c, m);
	else if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
		restart_partition(c, m);
	rd_kafka_message_destroy(m);
}

bool
ob_consumer_record_view(const ob_consumer_record *rec, ob_record_view *v)
{
	return ob_kafka_record_view(rec->msg, true, v);
}

bool
ob_consumer_record_header(const ob_consumer_record *rec, size_t i, const char **name,
			  const void **value, size_t *len)
{
	rd_kafka_headers_t *hdrs = NULL;

	return rd_kafka_message_headers(rec->msg, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	       rd_kafka_header_get_all(hdrs, i, name, value, len) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

void
ob_consumer_record_free(ob_consumer_record *rec)
{
	if (rec->msg != NULL)
		rd_kafka_message_destroy(rec->msg);
	rec->msg = NULL;
}

/* ---- the broker's view ------------------------------------------------- */

int
ob_consumer_brokers_up(const ob_consumer *c)
{
	return c->brokers.up;
}

const char *
ob_consumer_cluster_id(const ob_consumer *c)
{
	return c->cluster_id;
}

bool
ob_consumer_read_cluster_id(ob_consumer *c)
{
	char *cluster = rd_kafka_clusterid(c->rk, QUERY_TIMEOUT_MS);

	if (cluster == NULL) {
		ob_warn("could not read the kafka cluster id in %d ms; trying again",
			QUERY_TIMEOUT_MS);
		return false;
	}
	snprintf(c->cluster_id, sizeof(c->cluster_id), "%s", cluster);
	free(cluster);
	return true;
}

void
ob_consumer_read_topic_ids(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	ob_topicids_read(c->topic_ids, c->rk, parts, n, QUERY_TIMEOUT_MS);
}

const char *
ob_consumer_topic_id(const ob_consumer *c, const char *topic)
{
	return ob_topicids_get(c->topic_ids, topic);
}

ob_kpart *
ob_consumer_assigned(const ob_consumer *c, size_t *n)
{
	return to_parts(c->assigned, n);
}

ob_kpart *
ob_consumer_unstarted(const ob_consumer *c, size_t *n)
{
	return to_parts(c->unstarted, n);
}

size_t
ob_consumer_unstarted_count(const ob_consumer *c)
{
	return (size_t)c->unstarted->cnt;
}

/* parts as a new list, at their offsets; only those with an offset when
 * placed_only. */
static rd_kafka_topic_partition_list_t *
to_list(const ob_kpart *parts, size_t n, bool placed_only)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n + 1);

	for (size_t i = 0; i < n; i++) {
		if (!placed_only || parts[i].offset >= 0)
			rd_kafka_topic_partition_list_add(list, parts[i].topic, parts[i].partition)
			    ->offset = parts[i].offset;
	}
	return list;
}

bool
ob_consumer_group_offsets(ob_consumer *c, ob_kpart *parts, size_t n)
{
	rd_kafka_topic_partition_list_t *list = to_list(parts, n, false);
	rd_kafka_resp_err_t err = rd_kafka_committed(c->rk, list, QUERY_TIMEOUT_MS);

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		ob_warn("could not read the group's committed offsets: %s; trying again",
			rd_kafka_err2str(err));
	for (size_t i = 0; err == RD_KAFKA_RESP_ERR_NO_ERROR && i < n; i++)
		parts[i].offset = list->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR
				      ? list->elems[i].offset
				      : RD_KAFKA_OFFSET_INVALID;
	rd_kafka_topic_partition_list_destroy(list);
	return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

bool
ob_consumer_watermarks(ob_consumer *c, const char *topic, int32_t partition, int64_t *low,
		       int64_t *high, bool log)
{
	rd_kafka_resp_err_t err =
	    rd_kafka_query_watermark_offsets(c->rk, topic, partition, low, high, QUERY_TIMEOUT_MS);

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && log)
		ob_warn("could not read the watermarks of %s [%d]: %s; trying again", topic,
			(int)partition, rd_kafka_err2str(err));
	return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* Seek each partition of seek to its .offset. False (logged) when a seek
 * failed. */
static bool
seek_to(ob_consumer *c, rd_kafka_topic_partition_list_t *seek)
{
	rd_kafka_error_t *err;
	bool ok = true;

	if (seek->cnt == 0)
		return true;
	err = rd_kafka_seek_partitions(c->rk, seek, SEEK_TIMEOUT_MS);
	if (err != NULL) {
		ob_warn("could not seek to the stored inbox positions: %s",
			rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
		return false;
	}
	for (int i = 0; i < seek->cnt; i++) {
		if (seek->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			ob_warn("could not seek %s [%d] to offset %lld: %s", seek->elems[i].topic,
				(int)seek->elems[i].partition, (long long)seek->elems[i].offset,
				rd_kafka_err2str(seek->elems[i].err));
			ok = false;
		}
	}
	return ok;
}

/* Set where each of parts resumes (in the assigned list). */
static void
set_resume(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		rd_kafka_topic_partition_t *a = rd_kafka_topic_partition_list_find(
		    c->assigned, parts[i].topic, parts[i].partition);

		if (a != NULL)
			a->offset = parts[i].offset;
	}
}

/* Each of parts resumes at its .offset: seek those that have one, then
 * resume the partitions of list. False (logged) when a seek failed; else
 * *sought is how many were sought. */
static bool
place(ob_consumer *c, const ob_kpart *parts, size_t n, rd_kafka_topic_partition_list_t *list,
      int *sought)
{
	rd_kafka_topic_partition_list_t *seek = to_list(parts, n, true);
	bool ok;

	set_resume(c, parts, n);
	ok = seek_to(c, seek);
	*sought = seek->cnt;
	rd_kafka_topic_partition_list_destroy(seek);
	if (ok)
		(void)rd_kafka_resume_partitions(c->rk, list);
	return ok;
}

bool
ob_consumer_start(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	int sought;

	if (!place(c, parts, n, c->unstarted, &sought))
		return false;
	rd_kafka_topic_partition_list_destroy(c->unstarted);
	c->unstarted = rd_kafka_topic_partition_list_new(1);
	return true;
}

bool
ob_consumer_resume_at(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	int sought = 0;
	bool ok = place(c, parts, n, c->assigned, &sought);

	if (ok)
		ob_info("resumed %d partition(s) from the positions stored in postgres", sought);
	return ok;
}

void
ob_consumer_unstart(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	rd_kafka_topic_partition_list_t *list;

	if (n == 0)
		return;
	list = to_list(parts, n, false);
	(void)rd_kafka_pause_partitions(c->rk, list);
	list_add(c->unstarted, list);
	rd_kafka_topic_partition_list_destroy(list);
}

void
ob_consumer_pause(ob_consumer *c)
{
	(void)rd_kafka_pause_partitions(c->rk, c->assigned);
}

void
ob_consumer_stored(ob_consumer *c, const ob_kpart *parts, size_t n)
{
	rd_kafka_topic_partition_list_t *list = to_list(parts, n, false);

	set_resume(c, parts, n);
	(void)rd_kafka_commit(c->rk, list, 1);
	rd_kafka_topic_partition_list_destroy(list);
}

/* ---- lag -------------------------------------------------------------- */

void
ob_consumer_set_unstarted_lag(ob_consumer *c, const ob_kpart *lags, size_t n)
{
	rd_kafka_topic_partition_list_destroy(c->unstarted_lag);
	c->unstarted_lag = to_list(lags, n, false);
}

void
ob_consumer_report_lag(ob_consumer *c)
{
	uint64_t lag = 0;
	ob_partition_lag *lags = ob_xcalloc((size_t)c->assigned->cnt + 1, sizeof(*lags));

	for (int i = 0; i < c->assigned->cnt; i++) {
		const rd_kafka_topic_partition_t *a = &c->assigned->elems[i];
		int64_t low, high;

		const rd_kafka_topic_partition_t *u =
		    rd_kafka_topic_partition_list_find(c->unstarted, a->topic, a->partition);

		lags[i] = (ob_partition_lag){a->topic, a->partition, 0};
		if (u != NULL) {
			u = rd_kafka_topic_partition_list_find(c->unstarted_lag, a->topic,
							       a->partition);
			if (u != NULL && u->offset > 0)
				lags[i].records = (uint64_t)u->offset;
		} else if (a->offset >= 0 &&
			   rd_kafka_get_watermark_offsets(c->rk, a->topic, a->partition, &low,
							  &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
			   high > a->offset)
			lags[i].records = (uint64_t)(high - a->offset);
		lag += lags[i].records;
	}
	ob_metrics_set_inbox_partition_lags(lags, (size_t)c->assigned->cnt);
	ob_metrics_set_inbox_lag(lag);
	free(lags);
}
