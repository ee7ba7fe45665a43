/*
 * inbox.c: the inbox consumer loop.
 *
 * One thread reads records with rd_kafka_consumer_poll() into a batch of
 * at most inbox.batch_max records, which is flushed when it is full or
 * when no more records are waiting: bad records go to the dead-letter
 * topic first (and are waited for), then one database transaction inserts
 * the good rows and stores the next offset of every partition of the
 * batch (inboxdb.c). The positions stored in Postgres are the truth.
 * Partitions are assigned paused; the main loop then checks each one's
 * stored position against what the broker serves (watermarks, cluster id,
 * the group's committed offset: see start_partitions()) and seeks it
 * there before resuming it. After a failed transaction, whose outcome may
 * be unknown, it reconnects and seeks every assigned partition back to
 * what Postgres holds. While the database is away the partitions stay
 * paused and the consumer keeps being polled, so the group keeps this
 * member; nothing waits for the database inside a rebalance callback.
 * Kafka offsets are committed asynchronously after each database commit,
 * for monitoring tools and for telling a restored database apart.
 *
 * A record the database refuses in a batch makes the batch go again one
 * record per transaction, so that only the refused record is
 * dead-lettered. Rebalance callbacks run inside rd_kafka_consumer_poll()
 * on this thread; a revocation flushes the batch first.
 */
#include "outboxd/inbox.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outboxd/event.h"
#include "outboxd/inboxdb.h"
#include "outboxd/inboxrow.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/producer.h"
#include "outboxd/signals.h"

#define EXIT_OPERATOR    1
#define EXIT_USAGE       2
#define POLL_MS          100
#define BACKOFF_START_MS 100
#define SEEK_TIMEOUT_MS  10000
#define QUERY_TIMEOUT_MS 10000

/* outboxd's consumer defaults, applied before the user's [kafka]
 * properties. */
static const ob_kafka_setting consumer_defaults[] = {
    {"client.id", "outboxd-inbox"},
    {"statistics.interval.ms", OB_KAFKA_STATS_INTERVAL_MS},
    {"enable.partition.eof", "false"},
};

typedef struct ob_inbox {
	const ob_config *cfg;
	rd_kafka_t *rk;
	ob_inboxdb *db; /* NULL while disconnected */
	ob_producer *dlq;
	ob_event dlq_event;
	ob_event dlq_small; /* a dead letter cut down to its headers */
	size_t dlq_waiting; /* dead-letter records not yet acknowledged */
	bool dlq_failed;
	/* Records read and not yet stored, in the order read; owned. */
	rd_kafka_message_t **batch;
	size_t batch_len;
	/* The assigned partitions. Each .offset is where the partition
	 * resumes after a failed transaction: the stored next offset, else
	 * the offset of the first record read from it, else
	 * RD_KAFKA_OFFSET_INVALID. */
	rd_kafka_topic_partition_list_t *assigned;
	/* The assigned partitions not started yet: paused until
	 * start_partitions() has checked their stored positions. */
	rd_kafka_topic_partition_list_t *unstarted;
	/* The lag of partitions of unstarted, as note_unstarted_lag() last
	 * queried it (each .offset is a count of records). */
	rd_kafka_topic_partition_list_t *unstarted_lag;
	char cluster_id[OB_CLUSTER_ID_LEN]; /* the broker's, stored with positions; "" unknown */
	bool reposition;                    /* seek back to the stored positions once connected */
	int backoff_ms;
	int brokers_up;
	int exit_code; /* -1 while running */
} ob_inbox;

/* ---- helpers ------------------------------------------------------------ */

static void
set_ready(ob_inbox *ib)
{
	ob_ready_state st = ib->db == NULL        ? OB_READY_CONNECTING
			    : ib->brokers_up == 0 ? OB_READY_KAFKA_DOWN
						  : OB_READY_STREAMING;

	ob_metrics_set_ready(st);
	ob_metrics_set_connected(ib->db != NULL, ib->brokers_up > 0);
}

/* Note where a partition that has nothing stored resumes after a failure:
 * the first record read from it. */
static void
note_first(ob_inbox *ib, const rd_kafka_message_t *m)
{
	rd_kafka_topic_partition_t *a = rd_kafka_topic_partition_list_find(
	    ib->assigned, rd_kafka_topic_name(m->rkt), m->partition);

	if (a != NULL && a->offset < 0)
		a->offset = m->offset;
}

static bool cooperative(rd_kafka_t *rk);
static void list_add(rd_kafka_topic_partition_list_t *list,
		     const rd_kafka_topic_partition_list_t *parts);

/* The consumer could not fetch at the position of m's partition (the
 * broker no longer holds it: auto.offset.reset is pinned to error, so
 * librdkafka never moves past it by itself). Pause the partition and
 * start it again (start_partitions()), which judges its stored position
 * against the watermarks: a position below the low watermark is a
 * mismatch, recovered as inbox.on_position_mismatch says. */
static void
restart_partition(ob_inbox *ib, const rd_kafka_message_t *m)
{
	const char *topic = m->rkt != NULL ? rd_kafka_topic_name(m->rkt) : NULL;
	rd_kafka_topic_partition_list_t *again;

	if (topic == NULL ||
	    rd_kafka_topic_partition_list_find(ib->assigned, topic, m->partition) == NULL ||
	    rd_kafka_topic_partition_list_find(ib->unstarted, topic, m->partition) != NULL)
		return; /* not ours, or its start seeks it anyway */
	ob_warn("kafka cannot serve %s [%d] at offset %lld (%s); checking its stored position "
		"against the partition's watermarks",
		topic, (int)m->partition, (long long)m->offset, rd_kafka_message_errstr(m));
	/* librdkafka stopped fetching it, and a stopped partition cannot be
	 * sought: assign it again (eager: every partition, all started
	 * again), at the beginning like on_assign(), and paused. */
	if (cooperative(ib->rk)) {
		rd_kafka_error_t *err;

		again = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_add(again, topic, m->partition);
		err = rd_kafka_incremental_unassign(ib->rk, again);
		if (err == NULL) {
			again->elems[0].offset = RD_KAFKA_OFFSET_BEGINNING;
			err = rd_kafka_incremental_assign(ib->rk, again);
		}
		if (err != NULL) {
			ob_error("could not assign %s [%d] again: %s", topic, (int)m->partition,
				 rd_kafka_error_string(err));
			rd_kafka_error_destroy(err);
		}
	} else {
		again = rd_kafka_topic_partition_list_copy(ib->assigned);
		for (int i = 0; i < again->cnt; i++)
			again->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
		if (rd_kafka_assign(ib->rk, again) != RD_KAFKA_RESP_ERR_NO_ERROR)
			ob_error("could not assign the partitions again");
	}
	(void)rd_kafka_pause_partitions(ib->rk, again);
	list_add(ib->unstarted, again);
	rd_kafka_topic_partition_list_destroy(again);
}

/* Destroy a polled message that is not to be stored now (its partition
 * is paused or not started, or the database is away): it is read again
 * after the seek that starts or repositions its partition. */
static void
drop_message(ob_inbox *ib, rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		note_first(ib, m);
	else if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
		restart_partition(ib, m);
	rd_kafka_message_destroy(m);
}

/* Wait the current backoff, polling the consumer meanwhile (so the group
 * keeps this member and rebalances are served; the partitions are paused
 * and a message that comes anyway is dropped), stopping early on SIGTERM
 * or an exit; then double the backoff up to
 * postgres.reconnect_max_backoff_ms. Only outside rebalance callbacks,
 * with no batch in hand. */
static void
wait_polling(ob_inbox *ib)
{
	for (int waited = 0;
	     waited < ib->backoff_ms && ib->exit_code < 0 && !ob_signals_stop_requested();
	     waited += POLL_MS) {
		rd_kafka_message_t *m;

		ob_metrics_heartbeat();
		ob_notify_watchdog();
		m = rd_kafka_consumer_poll(ib->rk, POLL_MS);
		if (m != NULL)
			drop_message(ib, m);
	}
	ib->backoff_ms *= 2;
	if (ib->backoff_ms > ib->cfg->pg.reconnect_max_backoff_ms)
		ib->backoff_ms = ib->cfg->pg.reconnect_max_backoff_ms;
}

/* The database is unusable (a failed statement or connection attempt):
 * close it, pause every assigned partition until reposition() seeks it
 * back to the stored position, and count a reconnect. */
static void
lose_db(ob_inbox *ib)
{
	ob_inboxdb_close(ib->db);
	ib->db = NULL;
	ib->reposition = true;
	(void)rd_kafka_pause_partitions(ib->rk, ib->assigned);
	set_ready(ib);
	ob_metrics_reconnect(OB_TARGET_POSTGRES);
}

/* One attempt to connect to the database, unless connected. True when
 * connected; a missing table sets exit 1. */
static bool
connect_db(ob_inbox *ib)
{
	if (ib->db != NULL)
		return true;
	switch (ob_inboxdb_connect(ib->cfg, true, &ib->db, NULL, 0)) {
	case OB_INBOXDB_OK:
		ob_info("connected to the inbox database");
		set_ready(ib);
		return true;
	case OB_INBOXDB_FATAL:
		ib->exit_code = EXIT_OPERATOR;
		return false;
	case OB_INBOXDB_RETRY:
	case OB_INBOXDB_REJECTED:
		break;
	}
	lose_db(ib);
	return false;
}

static void
drop_batch(ob_inbox *ib)
{
	for (size_t i = 0; i < ib->batch_len; i++)
		rd_kafka_message_destroy(ib->batch[i]);
	ib->batch_len = 0;
}

/* The record of m as a view (borrowing m), with at most
 * OB_EVENT_MAX_HEADERS of its headers. False when it has more. */
static bool
record_view(const rd_kafka_message_t *m, ob_record_view *v)
{
	rd_kafka_headers_t *hdrs = NULL;
	rd_kafka_timestamp_type_t tstype;

	memset(v, 0, sizeof(*v));
	v->topic = rd_kafka_topic_name(m->rkt);
	v->topic_len = strlen(v->topic);
	v->has_key = m->key != NULL;
	v->key = m->key;
	v->key_len = m->key_len;
	v->has_value = m->payload != NULL;
	v->value = m->payload;
	v->value_len = m->len;
	v->timestamp_ms = rd_kafka_message_timestamp(m, &tstype);
	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return true;
	for (size_t i = 0; i < rd_kafka_header_cnt(hdrs) && i < OB_EVENT_MAX_HEADERS; i++) {
		if (rd_kafka_header_get_all(hdrs, i, &v->header_names[i], &v->header_values[i],
					    &v->header_value_lens[i]) != RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		v->headers_len = i + 1;
	}
	return rd_kafka_header_cnt(hdrs) <= OB_EVENT_MAX_HEADERS;
}

/* ---- dead letters ---------------------------------------------------- */

/* Tags of dead-letter records: the whole record, or its headers only. */
#define DLQ_WHOLE        0
#define DLQ_HEADERS_ONLY 1

/* Cut the dead letter rec (refused as too large) down to its headers
 * (and key, when small), as the publisher does, into ib->dlq_small. */
static void
build_headers_only(ob_inbox *ib, const ob_record_view *rec)
{
	ob_event_build_dlq_headers_only(&ib->dlq_small, "too-large", rec,
					ob_producer_max_record_bytes(ib->dlq));
}

static void
on_dlq_delivery(void *ctx, const ob_delivery *d)
{
	ob_inbox *ib = ctx;
	const char *why = NULL;
	bool too_large = false;

	if (d->status != OB_DELIVERED && d->value_too_large && d->tag == DLQ_WHOLE &&
	    !ib->dlq_failed) {
		ob_warn("dead-letter record to %s is too large (%s); publishing its headers only",
			ib->cfg->outbox.dlq_topic, d->error);
		build_headers_only(ib, &d->record);
		if (ob_producer_send(ib->dlq, &ib->dlq_small, DLQ_HEADERS_ONLY, &why, &too_large) ==
		    OB_SEND_OK)
			return; /* its own report settles dlq_waiting */
	}
	if (d->status != OB_DELIVERED && !ib->dlq_failed) {
		ib->dlq_failed = true;
		ob_error("could not publish a dead-letter record to %s: %s",
			 ib->cfg->outbox.dlq_topic, d->error);
	}
	if (ib->dlq_waiting > 0)
		ib->dlq_waiting--;
}

/* Add the headers of m named id_header (when id is true) or all others
 * (when false) to ev, in order, as long as ev has room. */
static void
add_original_headers(ob_event *ev, const rd_kafka_message_t *m, const char *id_header, bool id)
{
	rd_kafka_headers_t *hdrs = NULL;
	const char *name;
	const void *value;
	size_t len;

	if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return;
	for (size_t i = 0;
	     rd_kafka_header_get_all(hdrs, i, &name, &value, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
	     i++) {
		if ((strcmp(name, id_header) == 0) == id &&
		    !ob_event_add_header(ev, name, value, len))
			return; /* the record's last headers do not fit */
	}
}

/* Queue the dead-letter record of m: headers "error" (reason: detail),
 * "source-topic", "source-partition", "source-offset", then the original
 * headers (the id header first, then the others in order, as many as the
 * record holds: OB_EVENT_MAX_HEADERS in all); the original key, value and
 * timestamp. */
static bool
dead_letter(ob_inbox *ib, const rd_kafka_message_t *m, const ob_record_view *v, const char *reason,
	    const char *detail)
{
	ob_event *ev = &ib->dlq_event;
	char error[512], number[24];
	const char *why = NULL;
	bool too_large = false;

	ob_event_reset(ev);
	ev->topic = ob_event_put(ev, ib->cfg->outbox.dlq_topic, strlen(ib->cfg->outbox.dlq_topic));
	snprintf(error, sizeof(error), "%s: %s", reason, detail);
	(void)ob_event_add_header(ev, "error", error, strlen(error));
	(void)ob_event_add_header(ev, "source-topic", v->topic, v->topic_len);
	snprintf(number, sizeof(number), "%d", (int)m->partition);
	(void)ob_event_add_header(ev, "source-partition", number, strlen(number));
	snprintf(number, sizeof(number), "%lld", (long long)m->offset);
	(void)ob_event_add_header(ev, "source-offset", number, strlen(number));
	add_original_headers(ev, m, ib->cfg->inbox.id_header, true);
	add_original_headers(ev, m, ib->cfg->inbox.id_header, false);
	ev->has_key = v->has_key;
	if (v->has_key)
		ev->key = ob_event_put(ev, v->key, v->key_len);
	ev->has_value = v->has_value;
	if (v->has_value)
		ev->value = ob_event_put(ev, v->value, v->value_len);
	ev->timestamp_ms = v->timestamp_ms;
	ob_warn("dead-lettering %s [%d] offset %lld to %s: %s", v->topic, (int)m->partition,
		(long long)m->offset, ib->cfg->outbox.dlq_topic, error);
	for (;;) {
		switch (ob_producer_send(ib->dlq, ev,
					 ev == &ib->dlq_small ? DLQ_HEADERS_ONLY : DLQ_WHOLE, &why,
					 &too_large)) {
		case OB_SEND_OK:
			ib->dlq_waiting++;
			return true;
		case OB_SEND_QUEUE_FULL:
			ob_producer_poll(ib->dlq, POLL_MS);
			continue;
		case OB_SEND_REFUSED:
			if (too_large && ev != &ib->dlq_small) {
				ob_record_view view;

				ob_warn("dead-letter record to %s is too large (%s); publishing "
					"its headers only",
					ib->cfg->outbox.dlq_topic, why);
				ob_event_view(ev, &view);
				build_headers_only(ib, &view);
				ev = &ib->dlq_small;
				continue;
			}
			ob_error("could not publish a dead-letter record to %s: %s",
				 ib->cfg->outbox.dlq_topic, why);
			return false;
		case OB_SEND_FATAL:
			return false; /* logged by the producer */
		}
	}
}

/* Wait until every queued dead-letter record is acknowledged. False when
 * one failed (exit 1 is set) or SIGTERM came first. */
static bool
wait_dead_letters(ob_inbox *ib)
{
	while (ib->dlq_waiting > 0 && !ib->dlq_failed && !ob_signals_stop_requested()) {
		ob_metrics_heartbeat();
		ob_notify_watchdog();
		ob_producer_poll(ib->dlq, POLL_MS);
	}
	if (ib->dlq_failed) {
		ob_error("dead-letter publish failed: stopping without storing the positions "
			 "past it");
		ib->exit_code = EXIT_OPERATOR;
	}
	return ib->dlq_waiting == 0 && !ib->dlq_failed;
}

/* ---- one database transaction -------------------------------------------------- */

/* Add (topic, partition) at offset to the positions of a transaction:
 * the next offset to read is one past the latest record, on the cluster
 * the partitions were started on. */
static void
note_position(const ob_inbox *ib, ob_inbox_position *pos, size_t *n, const rd_kafka_message_t *m)
{
	const char *topic = rd_kafka_topic_name(m->rkt);

	for (size_t i = 0; i < *n; i++) {
		if (pos[i].partition == m->partition && strcmp(pos[i].topic, topic) == 0) {
			if (m->offset + 1 > pos[i].next_offset)
				pos[i].next_offset = m->offset + 1;
			return;
		}
	}
	pos[*n] = (ob_inbox_position){
	    .topic = topic, .partition = m->partition, .next_offset = m->offset + 1};
	snprintf(pos[*n].cluster_id, sizeof(pos[*n].cluster_id), "%s", ib->cluster_id);
	(*n)++;
}

/* After a commit: the assigned list, metrics, and Kafka's committed
 * offsets (asynchronously; a hint for monitoring only). */
static void
committed(ob_inbox *ib, const ob_inbox_position *pos, size_t n)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n);

	for (size_t i = 0; i < n; i++) {
		rd_kafka_topic_partition_t *a = rd_kafka_topic_partition_list_find(
		    ib->assigned, pos[i].topic, pos[i].partition);

		if (a != NULL)
			a->offset = pos[i].next_offset;
		rd_kafka_topic_partition_list_add(list, pos[i].topic, pos[i].partition)->offset =
		    pos[i].next_offset;
	}
	(void)rd_kafka_commit(ib->rk, list, 1);
	rd_kafka_topic_partition_list_destroy(list);
	ib->backoff_ms = BACKOFF_START_MS;
}

/* Store batch[from, to): the rows whose good[] is set, and the positions
 * of every record of the range. On success the metrics count the range's
 * rows as inserted or duplicate and its other records as dead-lettered.
 * Returns the database's verdict; error holds a refusal's message. */
static ob_inboxdb_status
commit_range(ob_inbox *ib, size_t from, size_t to, const ob_inbox_row *rows, const bool *good,
	     char *error, size_t error_len)
{
	ob_inbox_row *keep = ob_xcalloc(to - from, sizeof(*keep));
	ob_inbox_position *pos = ob_xcalloc(to - from, sizeof(*pos));
	size_t n_keep = 0, n_pos = 0;
	uint64_t inserted = 0;
	ob_inboxdb_status st;

	for (size_t i = from; i < to; i++) {
		if (good[i])
			keep[n_keep++] = rows[i]; /* borrowed: a shallow copy */
		note_position(ib, pos, &n_pos, ib->batch[i]);
	}
	st = ob_inboxdb_commit(ib->db, keep, n_keep, pos, n_pos, &inserted, error, error_len);
	if (st == OB_INBOXDB_OK) {
		ob_metrics_inbox_records(inserted, n_keep - inserted, (to - from) - n_keep);
		committed(ib, pos, n_pos);
	}
	free(keep);
	free(pos);
	return st;
}

/* The batch again, one record per transaction, after the database refused
 * it: a record refused alone is dead-lettered and only its position is
 * stored. */
static ob_inboxdb_status
commit_one_by_one(ob_inbox *ib, const ob_inbox_row *rows, bool *good)
{
	ob_inboxdb_status st = OB_INBOXDB_OK;
	char error[1024];

	for (size_t i = 0; i < ib->batch_len && st == OB_INBOXDB_OK; i++) {
		st = commit_range(ib, i, i + 1, rows, good, error, sizeof(error));
		if (st == OB_INBOXDB_REJECTED) {
			ob_record_view v;

			(void)record_view(ib->batch[i], &v);
			good[i] = false;
			if (ib->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
				ob_error("the inbox database refused %s [%d] offset %lld: %s; "
					 "stopping (outbox.on_bad_event = halt)",
					 v.topic, (int)ib->batch[i]->partition,
					 (long long)ib->batch[i]->offset, error);
				ib->exit_code = EXIT_OPERATOR;
				return OB_INBOXDB_FATAL;
			}
			if (!dead_letter(ib, ib->batch[i], &v, "unstorable", error)) {
				ib->exit_code = EXIT_OPERATOR;
				return OB_INBOXDB_FATAL;
			}
			/* Not acknowledged: a failure (exit 1 is set) or SIGTERM. */
			if (!wait_dead_letters(ib))
				return ib->exit_code < 0 ? OB_INBOXDB_RETRY : OB_INBOXDB_FATAL;
			st = commit_range(ib, i, i + 1, rows, good, error, sizeof(error));
		}
	}
	return st;
}

/* Dead-letter (or halt on) the records that make no row. False when the
 * batch cannot go on: halt, a failed dead-letter publish, or SIGTERM. */
static bool
handle_bad(ob_inbox *ib, bool *good, const ob_inbox_bad *bad)
{
	bool queued = false;

	for (size_t i = 0; i < ib->batch_len; i++) {
		ob_record_view v;

		if (good[i])
			continue;
		(void)record_view(ib->batch[i], &v);
		if (ib->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
			ob_error("bad record %s [%d] offset %lld: %s; stopping "
				 "(outbox.on_bad_event = halt)",
				 v.topic, (int)ib->batch[i]->partition,
				 (long long)ib->batch[i]->offset, bad[i].error);
			ib->exit_code = EXIT_OPERATOR;
			return false;
		}
		if (!dead_letter(ib, ib->batch[i], &v, bad[i].reason, bad[i].error)) {
			ib->exit_code = EXIT_OPERATOR;
			return false;
		}
		queued = true;
	}
	return !queued || wait_dead_letters(ib);
}

/* Store the batch (see the file comment) and empty it. On a database
 * failure (or when one connection attempt fails) the batch is dropped,
 * and the partitions are sought back to the stored positions once the
 * database is up again. Never waits for the database: a revocation calls
 * this inside the rebalance callback. */
static void
flush(ob_inbox *ib)
{
	size_t n = ib->batch_len;
	ob_inbox_row *rows;
	ob_inbox_bad *bad;
	bool *good;
	char error[1024];
	ob_inboxdb_status st = OB_INBOXDB_RETRY; /* until the batch is stored */

	if (n == 0)
		return;
	rows = ob_xcalloc(n, sizeof(*rows));
	bad = ob_xcalloc(n, sizeof(*bad));
	good = ob_xcalloc(n, sizeof(*good));
	for (size_t i = 0; i < n; i++) {
		ob_record_view v;

		if (!record_view(ib->batch[i], &v)) {
			bad[i].reason = "bad-header";
			snprintf(bad[i].error, sizeof(bad[i].error), "more than %d headers",
				 OB_EVENT_MAX_HEADERS);
			continue;
		}
		good[i] = ob_inbox_row_build(&v, ib->batch[i]->partition, ib->batch[i]->offset,
					     ib->cfg->inbox.id_header, &rows[i], &bad[i]);
	}
	if (handle_bad(ib, good, bad) && connect_db(ib)) {
		st = commit_range(ib, 0, n, rows, good, error, sizeof(error));
		if (st == OB_INBOXDB_REJECTED)
			st = commit_one_by_one(ib, rows, good);
		if (st == OB_INBOXDB_FATAL && ib->exit_code < 0)
			ib->exit_code = EXIT_OPERATOR;
		if (st == OB_INBOXDB_RETRY)
			lose_db(ib);
	}
	if (st != OB_INBOXDB_OK)
		ib->reposition = true;
	for (size_t i = 0; i < n; i++)
		ob_inbox_row_free(&rows[i]);
	free(rows);
	free(bad);
	free(good);
	drop_batch(ib);
}

/* ---- positions -------------------------------------------------------- */

/* The stored positions of the partitions of list, in a new array of
 * list->cnt (the caller frees); NULL when the database failed (it is then
 * lost: see lose_db()). */
static ob_inbox_position *
read_stored(ob_inbox *ib, const rd_kafka_topic_partition_list_t *list)
{
	ob_inbox_position *pos = ob_xcalloc((size_t)list->cnt + 1, sizeof(*pos));

	for (int i = 0; i < list->cnt; i++) {
		pos[i].topic = list->elems[i].topic;
		pos[i].partition = list->elems[i].partition;
	}
	if (ob_inboxdb_stored(ib->db, pos, (size_t)list->cnt) != OB_INBOXDB_OK) {
		free(pos);
		lose_db(ib);
		return NULL;
	}
	return pos;
}

/* Seek each partition of seek to its .offset. False (logged) when a seek
 * failed. */
static bool
seek_to(ob_inbox *ib, rd_kafka_topic_partition_list_t *seek)
{
	rd_kafka_error_t *err;
	bool ok = true;

	if (seek->cnt == 0)
		return true;
	err = rd_kafka_seek_partitions(ib->rk, seek, SEEK_TIMEOUT_MS);
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

/* After a failed transaction: seek every assigned partition to where
 * Postgres says it resumes (or, with nothing stored, to the first record
 * read from it) and resume them. False when the database or a seek
 * failed: try again after a backoff. */
static bool
reposition(ob_inbox *ib)
{
	rd_kafka_topic_partition_list_t *seek = rd_kafka_topic_partition_list_new(1);
	ob_inbox_position *pos = read_stored(ib, ib->assigned);
	bool ok = pos != NULL;

	for (int i = 0; ok && i < ib->assigned->cnt; i++) {
		rd_kafka_topic_partition_t *a = &ib->assigned->elems[i];

		if (pos[i].next_offset >= 0)
			a->offset = pos[i].next_offset;
		if (a->offset >= 0)
			rd_kafka_topic_partition_list_add(seek, a->topic, a->partition)->offset =
			    a->offset;
	}
	if (ok && seek_to(ib, seek)) {
		(void)rd_kafka_resume_partitions(ib->rk, ib->assigned);
		ib->reposition = false;
		ob_info("resumed %d partition(s) from the positions stored in postgres", seek->cnt);
	} else {
		ok = false;
	}
	free(pos);
	rd_kafka_topic_partition_list_destroy(seek);
	return ok;
}

/* What the broker says of one partition being started. */
typedef struct broker_view {
	int64_t low, high; /* watermarks */
	int64_t committed; /* the group's committed offset; < 0: none */
} broker_view;

static const char *const mismatch_policy_names[] = {"halt", "earliest", "latest", "stored"};

/* Judge the stored position st of a partition against the broker's view
 * bv. True when it cannot belong to the partition, with *reason set and
 * what it is in text (both positions) in why. */
static bool
mismatch(const ob_inbox *ib, const ob_inbox_position *st, const broker_view *bv,
	 ob_position_mismatch *reason, char *why, size_t why_len)
{
	if (st->next_offset < 0 && bv->committed >= 0) {
		*reason = OB_POSITION_NOT_STORED;
		snprintf(why, why_len,
			 "postgres has no stored position, but the group's committed offset in "
			 "kafka is %lld (was the database restored to before the inbox stored "
			 "this partition?); the broker holds offsets %lld to %lld",
			 (long long)bv->committed, (long long)bv->low, (long long)bv->high);
	} else if (st->next_offset < 0) {
		return false;
	} else if (st->cluster_id[0] != '\0' && ib->cluster_id[0] != '\0' &&
		   strcmp(st->cluster_id, ib->cluster_id) != 0) {
		*reason = OB_POSITION_CLUSTER;
		snprintf(why, why_len,
			 "stored offset %lld belongs to kafka cluster %s, but the broker is "
			 "cluster %s and holds offsets %lld to %lld",
			 (long long)st->next_offset, st->cluster_id, ib->cluster_id,
			 (long long)bv->low, (long long)bv->high);
	} else if (st->next_offset > bv->high) {
		*reason = OB_POSITION_PAST_HIGH;
		snprintf(why, why_len,
			 "stored offset %lld is past the partition's high watermark %lld (was the "
			 "topic deleted and created again?)",
			 (long long)st->next_offset, (long long)bv->high);
	} else if (st->next_offset < bv->low) {
		*reason = OB_POSITION_BELOW_LOW;
		snprintf(why, why_len,
			 "stored offset %lld is below the partition's low watermark %lld: records "
			 "%lld to %lld expired before the inbox stored them",
			 (long long)st->next_offset, (long long)bv->low, (long long)st->next_offset,
			 (long long)bv->low - 1);
	} else {
		return false;
	}
	return true;
}

/* Ask the broker about partition i of ib->unstarted: its watermarks and,
 * from committed (the group's offsets of ib->unstarted), its committed
 * offset. False (logged) when the broker did not answer. */
static bool
ask_broker(ob_inbox *ib, int i, const rd_kafka_topic_partition_list_t *committed, broker_view *bv)
{
	const rd_kafka_topic_partition_t *p = &ib->unstarted->elems[i];
	rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
	    ib->rk, p->topic, p->partition, &bv->low, &bv->high, QUERY_TIMEOUT_MS);

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_warn("could not read the watermarks of %s [%d]: %s; trying again", p->topic,
			(int)p->partition, rd_kafka_err2str(err));
		return false;
	}
	bv->committed = committed->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR
			    ? committed->elems[i].offset
			    : RD_KAFKA_OFFSET_INVALID;
	return true;
}

/* Where partition i of ib->unstarted starts after the mismatch of
 * position st (described in why): set by inbox.on_position_mismatch, and
 * stored in place of st (unless the setting is "stored"). -1 with exit 1
 * set for "halt"; -2 when the database failed. */
static int64_t
recover_start(ob_inbox *ib, int i, ob_inbox_position *st, const broker_view *bv, const char *why)
{
	ob_mismatch_policy policy = ib->cfg->inbox.on_position_mismatch;
	const rd_kafka_topic_partition_t *p = &ib->unstarted->elems[i];
	int64_t start = policy == OB_MISMATCH_EARLIEST ? bv->low
			: policy == OB_MISMATCH_LATEST ? bv->high
			: st->next_offset >= 0         ? st->next_offset
						       : bv->committed;

	if (policy == OB_MISMATCH_HALT) {
		ob_error("position mismatch on %s [%d]: %s; stopping without consuming it "
			 "(inbox.on_position_mismatch = halt; set it to earliest, latest or stored "
			 "to start there instead)",
			 p->topic, (int)p->partition, why);
		ib->exit_code = EXIT_OPERATOR;
		return -1;
	}
	ob_warn("position mismatch on %s [%d]: %s; starting at offset %lld "
		"(inbox.on_position_mismatch = %s)",
		p->topic, (int)p->partition, why, (long long)start, mismatch_policy_names[policy]);
	if (policy == OB_MISMATCH_STORED)
		return start;
	st->next_offset = start;
	snprintf(st->cluster_id, sizeof(st->cluster_id), "%s", ib->cluster_id);
	if (ob_inboxdb_reset(ib->db, st) != OB_INBOXDB_OK) {
		lose_db(ib);
		return -2;
	}
	return start;
}

/* Where a partition with nothing stored and nothing committed starts:
 * its high watermark with inbox.on_position_mismatch = latest, else its
 * low watermark (outboxd's default, formerly auto.offset.reset=earliest). */
static int64_t
nothing_stored_start(const ob_inbox *ib, const broker_view *bv)
{
	return ib->cfg->inbox.on_position_mismatch == OB_MISMATCH_LATEST ? bv->high : bv->low;
}

/* Log where partition p starts. */
static void
log_start(const rd_kafka_topic_partition_t *p, int64_t stored, int64_t start)
{
	if (start >= 0 && start == stored)
		ob_info("assigned %s [%d] at stored offset %lld", p->topic, (int)p->partition,
			(long long)start);
	else if (stored < 0)
		ob_info("assigned %s [%d] at offset %lld (nothing stored)", p->topic,
			(int)p->partition, (long long)start);
	else
		ob_info("assigned %s [%d] at offset %lld", p->topic, (int)p->partition,
			(long long)start);
}

/* Start the partitions of ib->unstarted: judge each stored position
 * against the broker (a position past the high watermark, below the low
 * watermark, or stored for another cluster, and a partition with nothing
 * stored while the group has a committed offset in Kafka, cannot belong
 * to what the broker serves), recover a mismatch as
 * inbox.on_position_mismatch says, seek each partition to its start and
 * resume it. A partition with nothing stored and nothing committed starts
 * at a watermark (nothing_stored_start()). False when they must wait (the
 * database or the broker failed: try again after a backoff) or the inbox
 * stops (exit_code set). */
static bool
start_partitions(ob_inbox *ib)
{
	rd_kafka_topic_partition_list_t *committed =
	    rd_kafka_topic_partition_list_copy(ib->unstarted);
	rd_kafka_topic_partition_list_t *seek = rd_kafka_topic_partition_list_new(1);
	ob_inbox_position *pos = NULL;
	char *cluster = rd_kafka_clusterid(ib->rk, QUERY_TIMEOUT_MS);
	rd_kafka_resp_err_t err;
	bool ok = false;

	if (cluster == NULL) {
		/* Without it a position stored for another cluster would pass
		 * unseen: wait for the broker to tell. */
		ob_warn("could not read the kafka cluster id in %d ms; trying again",
			QUERY_TIMEOUT_MS);
		goto out;
	}
	snprintf(ib->cluster_id, sizeof(ib->cluster_id), "%s", cluster);
	free(cluster);
	for (int i = 0; i < ib->unstarted->cnt; i++) {
		if (strcmp(ib->unstarted->elems[i].topic, ib->cfg->outbox.dlq_topic) == 0) {
			ob_error("inbox.topics (%s) took in outbox.dlq_topic (%s): the inbox would "
				 "consume its own dead letters; change one of them",
				 ib->cfg->inbox.topics, ib->cfg->outbox.dlq_topic);
			ib->exit_code = EXIT_USAGE;
			goto out;
		}
	}
	err = rd_kafka_committed(ib->rk, committed, QUERY_TIMEOUT_MS);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_warn("could not read the group's committed offsets: %s; trying again",
			rd_kafka_err2str(err));
		goto out;
	}
	pos = read_stored(ib, ib->unstarted);
	if (pos == NULL)
		goto out;
	for (int i = 0; i < ib->unstarted->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &ib->unstarted->elems[i];
		rd_kafka_topic_partition_t *a =
		    rd_kafka_topic_partition_list_find(ib->assigned, p->topic, p->partition);
		int64_t stored = pos[i].next_offset, start = stored;
		ob_position_mismatch reason;
		broker_view bv;
		char why[512];

		if (!ask_broker(ib, i, committed, &bv))
			goto out;
		if (mismatch(ib, &pos[i], &bv, &reason, why, sizeof(why))) {
			ob_metrics_inbox_mismatch(reason);
			start = recover_start(ib, i, &pos[i], &bv, why);
			if (start == -2)
				goto out;
		}
		if (ib->exit_code >= 0)
			continue; /* halt: every mismatch is logged before the exit */
		if (start < 0) /* nothing stored, nothing committed: see nothing_stored_start() */
			start = nothing_stored_start(ib, &bv);
		if (a != NULL)
			a->offset = start;
		if (start >= 0)
			rd_kafka_topic_partition_list_add(seek, p->topic, p->partition)->offset =
			    start;
		log_start(p, stored, start);
	}
	if (ib->exit_code >= 0 || !seek_to(ib, seek))
		goto out;
	(void)rd_kafka_resume_partitions(ib->rk, ib->unstarted);
	rd_kafka_topic_partition_list_destroy(ib->unstarted);
	ib->unstarted = rd_kafka_topic_partition_list_new(1);
	ok = true;
out:
	free(pos);
	rd_kafka_topic_partition_list_destroy(seek);
	rd_kafka_topic_partition_list_destroy(committed);
	return ok;
}

/* After start_partitions() failed: the lag of each partition of
 * ib->unstarted (its high watermark, queried from the broker, minus the
 * stored position, or minus the low watermark when nothing is stored), for
 * update_lag(). The records of a partition that cannot start wait as well
 * (README, "Metrics and health"). Kept as it was when the database or the
 * broker does not answer. */
static void
note_unstarted_lag(ob_inbox *ib)
{
	rd_kafka_topic_partition_list_t *lag;
	ob_inbox_position *pos;

	if (ib->db == NULL || ib->brokers_up == 0 || ib->unstarted->cnt == 0)
		return;
	pos = read_stored(ib, ib->unstarted);
	if (pos == NULL)
		return;
	lag = rd_kafka_topic_partition_list_new(ib->unstarted->cnt);
	for (int i = 0; i < ib->unstarted->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &ib->unstarted->elems[i];
		int64_t low, high, from;

		if (rd_kafka_query_watermark_offsets(ib->rk, p->topic, p->partition, &low, &high,
						     QUERY_TIMEOUT_MS) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR) {
			rd_kafka_topic_partition_list_destroy(lag);
			free(pos);
			return;
		}
		from = pos[i].next_offset >= 0 ? pos[i].next_offset : low;
		rd_kafka_topic_partition_list_add(lag, p->topic, p->partition)->offset =
		    high > from ? high - from : 0;
	}
	free(pos);
	rd_kafka_topic_partition_list_destroy(ib->unstarted_lag);
	ib->unstarted_lag = lag;
}

/* Outside the rebalance callbacks, with no batch in hand: connect, start
 * the partitions assigned since, and seek back after a failure; after a
 * failure of any of these, wait a backoff (polling the consumer). */
static void
recover(ob_inbox *ib)
{
	bool ok = connect_db(ib);

	if (ok && ib->unstarted->cnt > 0) {
		ok = start_partitions(ib);
		if (!ok && ib->exit_code < 0)
			note_unstarted_lag(ib);
	}
	if (ok && ib->reposition)
		ok = reposition(ib);
	if (ok)
		ib->backoff_ms = BACKOFF_START_MS;
	else if (ib->exit_code < 0)
		wait_polling(ib);
}

/* The lag of each assigned partition (its high watermark as the consumer
 * last heard it, minus the stored position; for a partition not started,
 * what note_unstarted_lag() queried) and their sum, to metrics.h. */
static void
update_lag(ob_inbox *ib)
{
	uint64_t lag = 0;
	ob_partition_lag *lags = ob_xcalloc((size_t)ib->assigned->cnt + 1, sizeof(*lags));

	for (int i = 0; i < ib->assigned->cnt; i++) {
		const rd_kafka_topic_partition_t *a = &ib->assigned->elems[i];
		int64_t low, high;

		const rd_kafka_topic_partition_t *u =
		    rd_kafka_topic_partition_list_find(ib->unstarted, a->topic, a->partition);

		lags[i] = (ob_partition_lag){a->topic, a->partition, 0};
		if (u != NULL) {
			u = rd_kafka_topic_partition_list_find(ib->unstarted_lag, a->topic,
							       a->partition);
			if (u != NULL && u->offset > 0)
				lags[i].records = (uint64_t)u->offset;
		} else if (a->offset >= 0 &&
			   rd_kafka_get_watermark_offsets(ib->rk, a->topic, a->partition, &low,
							  &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
			   high > a->offset)
			lags[i].records = (uint64_t)(high - a->offset);
		lag += lags[i].records;
	}
	ob_metrics_set_inbox_partition_lags(lags, (size_t)ib->assigned->cnt);
	ob_metrics_set_inbox_lag(lag);
	free(lags);
}

/* ---- rebalances ------------------------------------------------------- */

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

/* Take the partitions paused; the main loop starts them
 * (start_partitions()). Nothing here waits for the database, so a
 * Postgres outage never holds up the rebalance. */
static void
on_assign(ob_inbox *ib, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Fetching starts at the beginning (paused, so nothing is read): an
	 * explicit offset, as auto.offset.reset is error and a partition
	 * stopped on it could not be sought; start_partitions() seeks it. */
	for (int i = 0; i < parts->cnt; i++)
		parts->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
	if (cooperative(ib->rk))
		err = rd_kafka_incremental_assign(ib->rk, parts);
	else if (rd_kafka_assign(ib->rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
		ob_error("could not assign the partitions");
	if (err != NULL) {
		ob_error("could not assign the partitions: %s", rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
	}
	(void)rd_kafka_pause_partitions(ib->rk, parts);
	list_add(ib->assigned, parts);
	list_add(ib->unstarted, parts);
	ob_info("assigned %d partition(s); each starts once its stored position is checked",
		parts->cnt);
}

static void
on_revoke(ob_inbox *ib, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Store what was read before the partitions go to another member. */
	flush(ib);
	ob_info("revoked %d partition(s)", parts->cnt);
	if (cooperative(ib->rk))
		err = rd_kafka_incremental_unassign(ib->rk, parts);
	else
		(void)rd_kafka_assign(ib->rk, NULL);
	list_del(ib->assigned, parts);
	list_del(ib->unstarted, parts);
	if (err != NULL) {
		ob_error("could not unassign the partitions: %s", rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
	}
}

static void
on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
	     void *opaque)
{
	ob_inbox *ib = opaque;

	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		on_assign(ib, parts);
	} else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
		on_revoke(ib, parts);
	} else {
		ob_error("kafka rebalance failed: %s", rd_kafka_err2str(err));
		drop_batch(ib);
		(void)rd_kafka_assign(rk, NULL);
		rd_kafka_topic_partition_list_destroy(ib->assigned);
		ib->assigned = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_destroy(ib->unstarted);
		ib->unstarted = rd_kafka_topic_partition_list_new(1);
	}
}

/* ---- the consumer ----------------------------------------------------- */

static void
on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	ob_inbox *ib = opaque;

	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		ib->brokers_up = 0;
		set_ready(ib);
	}
	ob_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static int
on_stats(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
	ob_inbox *ib = opaque;

	ib->brokers_up = ob_kafka_stats_brokers_up(json, json_len);
	set_ready(ib);
	return 0; /* librdkafka frees json */
}

/* True when key is one of the producer's pinned properties, which mean
 * nothing to a consumer. */
static bool
producer_pinned(const char *key)
{
	for (size_t i = 0; i < ob_kafka_pinned_len; i++) {
		if (strcmp(key, ob_kafka_pinned[i].key) == 0)
			return true;
	}
	return false;
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

/* The consumer's configuration: outboxd's defaults, the user's [kafka],
 * the consumer's pinned properties, group.id = inbox.group. NULL (logged)
 * when a property is rejected. */
static rd_kafka_conf_t *
consumer_conf(ob_inbox *ib)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const ob_config *cfg = ib->cfg;
	bool ok = true;

	for (size_t i = 0; i < OB_ARRAY_LEN(consumer_defaults); i++)
		ok =
		    ob_kafka_conf_set(conf, consumer_defaults[i].key, consumer_defaults[i].value) &&
		    ok;
	for (size_t i = 0; i < cfg->kafka_len; i++) {
		if (!producer_pinned(cfg->kafka[i].key))
			ok = ob_kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value) && ok;
	}
	for (size_t i = 0; i < ob_kafka_consumer_pinned_len; i++)
		ok = ob_kafka_conf_set(conf, ob_kafka_consumer_pinned[i].key,
				       ob_kafka_consumer_pinned[i].value) &&
		     ok;
	ok = ob_kafka_conf_set(conf, "group.id", cfg->inbox.group) && ok;
	ok = ok && ob_kafka_conf_keep_stats(conf) && assignor_safe(conf);
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_opaque(conf, ib);
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
	char **names = ob_config_inbox_topics(topics, &n);
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n + 1);

	for (size_t i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, names[i], RD_KAFKA_PARTITION_UA);
	ob_config_free_topics(names, n);
	return list;
}

/* Create the consumer and subscribe; false (logged) on a configuration
 * error. */
static bool
start_consumer(ob_inbox *ib)
{
	rd_kafka_conf_t *conf = consumer_conf(ib);
	rd_kafka_topic_partition_list_t *topics = topic_list(ib->cfg->inbox.topics);
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
	ib->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (ib->rk == NULL) {
		ob_error("could not create kafka consumer: %s", errstr);
		rd_kafka_conf_destroy(conf);
		goto out;
	}
	rd_kafka_poll_set_consumer(ib->rk);
	err = rd_kafka_subscribe(ib->rk, topics);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		ob_error("could not subscribe to %s: %s", ib->cfg->inbox.topics,
			 rd_kafka_err2str(err));
		goto out;
	}
	ok = true;
out:
	rd_kafka_topic_partition_list_destroy(topics);
	return ok;
}

/* Take one polled message: a record joins the batch unless its partition
 * is not started yet (then it is dropped: the start seeks it); an error is
 * logged. */
static void
take(ob_inbox *ib, rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET) {
		restart_partition(ib, m);
		rd_kafka_message_destroy(m);
		return;
	}
	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			ob_warn("kafka consumer: %s", rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
		return;
	}
	if (rd_kafka_topic_partition_list_find(ib->unstarted, rd_kafka_topic_name(m->rkt),
					       m->partition) != NULL) {
		rd_kafka_message_destroy(m);
		return;
	}
	note_first(ib, m); /* nothing stored yet: resume here on failure */
	ib->batch[ib->batch_len++] = m;
}

/* True when the main loop must recover() before it reads on: the
 * database is away, partitions wait to be started, or a failure left the
 * partitions to be sought back. */
static bool
must_recover(const ob_inbox *ib)
{
	return ib->db == NULL || ib->unstarted->cnt > 0 || ib->reposition;
}

static void
run_loop(ob_inbox *ib)
{
	int64_t next_lag = 0;

	while (ib->exit_code < 0 && !ob_signals_stop_requested()) {
		rd_kafka_message_t *m;

		ob_metrics_heartbeat();
		ob_notify_watchdog();
		if (ob_mono_ms() >= next_lag) {
			update_lag(ib);
			next_lag = ob_mono_ms() + 1000;
		}
		if (ib->batch_len == 0 && must_recover(ib)) {
			recover(ib);
			continue;
		}
		/* With records waiting, only take what is already fetched. */
		m = rd_kafka_consumer_poll(ib->rk, ib->batch_len > 0 ? 0 : POLL_MS);
		if (m != NULL)
			take(ib, m);
		if (ib->batch_len >= (size_t)ib->cfg->inbox.batch_max ||
		    (m == NULL && ib->batch_len > 0)) {
			/* The records in hand count as waiting (README, "Metrics
			 * and health") while they are being stored. */
			update_lag(ib);
			flush(ib);
		}
	}
}

int
ob_inbox_run(const ob_config *cfg)
{
	ob_inbox ib = {.cfg = cfg, .exit_code = -1, .backoff_ms = BACKOFF_START_MS};
	char *masked = ob_log_mask_conninfo(cfg->inbox.conninfo);

	ob_info("outboxd inbox starting: postgres \"%s\", table %s.%s, topics %s, group %s", masked,
		cfg->inbox.schema, cfg->inbox.table_name, cfg->inbox.topics, cfg->inbox.group);
	free(masked);
	ob_signals_install();
	ob_notify_init();
	ob_event_init(&ib.dlq_event);
	ob_event_init(&ib.dlq_small);
	ib.assigned = rd_kafka_topic_partition_list_new(1);
	ib.unstarted = rd_kafka_topic_partition_list_new(1);
	ib.unstarted_lag = rd_kafka_topic_partition_list_new(1);
	ib.batch = ob_xcalloc((size_t)cfg->inbox.batch_max, sizeof(*ib.batch));
	set_ready(&ib);
	if (!ob_producer_new(cfg, OB_PRODUCER_AWAITED, on_dlq_delivery, &ib, &ib.dlq) ||
	    !start_consumer(&ib)) {
		ib.exit_code = EXIT_USAGE;
		goto out;
	}
	/* Ready once the database is: the consumer is polled meanwhile. */
	while (ib.db == NULL && ib.exit_code < 0 && !ob_signals_stop_requested())
		recover(&ib);
	if (ib.db == NULL)
		goto out;
	ob_notify_ready("consuming into the inbox table");
	run_loop(&ib);
	ob_notify_stopping();
	/* Store what was read; on an exit for the operator, nothing more. */
	if (ib.exit_code < 0)
		flush(&ib);
	drop_batch(&ib);
out:
	if (ib.rk != NULL) {
		/* Leaves the group; the revocation's flush finds nothing. */
		(void)rd_kafka_consumer_close(ib.rk);
		rd_kafka_destroy(ib.rk);
	}
	ob_producer_free(ib.dlq);
	ob_inboxdb_close(ib.db);
	ob_event_free(&ib.dlq_event);
	ob_event_free(&ib.dlq_small);
	rd_kafka_topic_partition_list_destroy(ib.assigned);
	rd_kafka_topic_partition_list_destroy(ib.unstarted);
	rd_kafka_topic_partition_list_destroy(ib.unstarted_lag);
	free(ib.batch);
	ob_info("outboxd inbox stopped");
	return ib.exit_code < 0 ? 0 : ib.exit_code;
}
