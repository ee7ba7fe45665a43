/*
 * inbox.c: the inbox consumer loop.
 *
 * One thread reads records with rd_kafka_consumer_poll() into a batch of
 * at most inbox.batch_max records, which is flushed when it is full or
 * when no more records are waiting: bad records go to the dead-letter
 * topic first (and are waited for), then one database transaction inserts
 * the good rows and stores the next offset of every partition of the
 * batch (inboxdb.c). The positions stored in Postgres are the truth: on
 * every assignment the consumer starts each partition there (Kafka's own
 * committed offset is used only where Postgres has none), and after a
 * failed transaction, whose outcome may be unknown, it reconnects and
 * seeks every assigned partition back to what Postgres holds. Kafka
 * offsets are committed asynchronously after each database commit, for
 * monitoring tools only.
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
#define BACKOFF_SLICE_MS 100

/* outboxd's consumer defaults, applied before the user's [kafka]
 * properties. */
static const ob_kafka_setting consumer_defaults[] = {
    {"auto.offset.reset", "earliest"},
    {"client.id", "outboxd-inbox"},
    {"statistics.interval.ms", "1000"},
    {"enable.partition.eof", "false"},
};

typedef struct ob_inbox {
	const ob_config *cfg;
	rd_kafka_t *rk;
	ob_inboxdb *db; /* NULL while disconnected */
	ob_producer *dlq;
	ob_event dlq_event;
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
	bool reposition; /* seek back to the stored positions once connected */
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

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Sleep the current backoff in slices (stopping early on SIGTERM), then
 * double it up to postgres.reconnect_max_backoff_ms. */
static void
back_off(ob_inbox *ib)
{
	for (int slept = 0; slept < ib->backoff_ms && !ob_signals_stop_requested();
	     slept += BACKOFF_SLICE_MS) {
		ob_metrics_heartbeat();
		ob_notify_watchdog();
		sleep_ms(BACKOFF_SLICE_MS);
	}
	ib->backoff_ms *= 2;
	if (ib->backoff_ms > ib->cfg->pg.reconnect_max_backoff_ms)
		ib->backoff_ms = ib->cfg->pg.reconnect_max_backoff_ms;
}

/* After a failed statement: close the connection, remember to seek back
 * once it is up again, and wait the backoff. */
static void
drop_db(ob_inbox *ib)
{
	ob_inboxdb_close(ib->db);
	ib->db = NULL;
	ib->reposition = true;
	set_ready(ib);
	ob_metrics_reconnect(OB_TARGET_POSTGRES);
	back_off(ib);
}

/* Connect to the database unless connected, retrying with backoff until
 * it works, SIGTERM arrives or the tables are missing (exit 1). True when
 * connected. */
static bool
ensure_db(ob_inbox *ib)
{
	while (ib->db == NULL && ib->exit_code < 0 && !ob_signals_stop_requested()) {
		switch (ob_inboxdb_connect(ib->cfg, &ib->db, NULL, 0)) {
		case OB_INBOXDB_OK:
			ob_info("connected to the inbox database");
			set_ready(ib);
			break;
		case OB_INBOXDB_FATAL:
			ib->exit_code = EXIT_OPERATOR;
			break;
		case OB_INBOXDB_RETRY:
		case OB_INBOXDB_REJECTED:
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			back_off(ib);
			break;
		}
	}
	return ib->db != NULL;
}

static void
drop_batch(ob_inbox *ib)
{
	for (size_t i = 0; i < ib->batch_len; i++)
		rd_kafka_message_destroy(ib->batch[i]);
	ib->batch_len = 0;
}

/* The record of m as a view (borrowing m). False when it has more headers
 * than a view holds. */
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
	if (rd_kafka_header_cnt(hdrs) > OB_EVENT_MAX_HEADERS)
		return false;
	for (size_t i = 0; i < rd_kafka_header_cnt(hdrs); i++) {
		if (rd_kafka_header_get_all(hdrs, i, &v->header_names[i], &v->header_values[i],
					    &v->header_value_lens[i]) != RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		v->headers_len = i + 1;
	}
	return true;
}

/* ---- dead letters ---------------------------------------------------- */

static void
on_dlq_delivery(void *ctx, const ob_delivery *d)
{
	ob_inbox *ib = ctx;

	if (d->status != OB_DELIVERED && !ib->dlq_failed) {
		ib->dlq_failed = true;
		ob_error("could not publish a dead-letter record to %s: %s",
			 ib->cfg->outbox.dlq_topic, d->error);
	}
	if (ib->dlq_waiting > 0)
		ib->dlq_waiting--;
}

/* Queue the dead-letter record of m: headers "error" (reason: detail),
 * "source-topic", "source-partition", "source-offset", then the original
 * headers; the original key, value and timestamp. */
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
	for (size_t i = 0; i < v->headers_len; i++) {
		if (!ob_event_add_header(ev, v->header_names[i], v->header_values[i],
					 v->header_value_lens[i]))
			break; /* the original's last headers do not fit */
	}
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
		switch (ob_producer_send(ib->dlq, ev, 0, &why, &too_large)) {
		case OB_SEND_OK:
			ib->dlq_waiting++;
			return true;
		case OB_SEND_QUEUE_FULL:
			ob_producer_poll(ib->dlq, POLL_MS);
			continue;
		case OB_SEND_REFUSED:
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
 * the next offset to read is one past the latest record. */
static void
note_position(ob_inbox_position *pos, size_t *n, const rd_kafka_message_t *m)
{
	const char *topic = rd_kafka_topic_name(m->rkt);

	for (size_t i = 0; i < *n; i++) {
		if (pos[i].partition == m->partition && strcmp(pos[i].topic, topic) == 0) {
			if (m->offset + 1 > pos[i].next_offset)
				pos[i].next_offset = m->offset + 1;
			return;
		}
	}
	pos[*n] = (ob_inbox_position){topic, m->partition, m->offset + 1};
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
		note_position(pos, &n_pos, ib->batch[i]);
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
 * failure the connection is dropped, and the partitions are sought back to
 * the stored positions once it is up again. */
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
	if (handle_bad(ib, good, bad) && ensure_db(ib)) {
		st = commit_range(ib, 0, n, rows, good, error, sizeof(error));
		if (st == OB_INBOXDB_REJECTED)
			st = commit_one_by_one(ib, rows, good);
		if (st == OB_INBOXDB_FATAL && ib->exit_code < 0)
			ib->exit_code = EXIT_OPERATOR;
		if (st == OB_INBOXDB_RETRY)
			drop_db(ib);
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

/* Fill .offset of each partition of list from Postgres (where it has a
 * row; others keep fallback). False when the database failed. */
static bool
load_stored(ob_inbox *ib, rd_kafka_topic_partition_list_t *list, bool keep_fallback)
{
	ob_inbox_position *pos = ob_xcalloc((size_t)list->cnt + 1, sizeof(*pos));
	ob_inboxdb_status st;

	for (int i = 0; i < list->cnt; i++)
		pos[i] = (ob_inbox_position){list->elems[i].topic, list->elems[i].partition, -1};
	st = ob_inboxdb_stored(ib->db, pos, (size_t)list->cnt);
	for (int i = 0; st == OB_INBOXDB_OK && i < list->cnt; i++) {
		if (pos[i].next_offset >= 0)
			list->elems[i].offset = pos[i].next_offset;
		else if (!keep_fallback)
			list->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
	}
	free(pos);
	if (st != OB_INBOXDB_OK)
		drop_db(ib);
	return st == OB_INBOXDB_OK;
}

/* After a failed transaction: seek every assigned partition to where
 * Postgres says it resumes (or, with nothing stored, to the first record
 * read from it). */
static void
reposition(ob_inbox *ib)
{
	rd_kafka_topic_partition_list_t *seek = rd_kafka_topic_partition_list_new(1);
	rd_kafka_error_t *err;

	if (!load_stored(ib, ib->assigned, true))
		goto out;
	for (int i = 0; i < ib->assigned->cnt; i++) {
		const rd_kafka_topic_partition_t *a = &ib->assigned->elems[i];

		if (a->offset >= 0)
			rd_kafka_topic_partition_list_add(seek, a->topic, a->partition)->offset =
			    a->offset;
	}
	ib->reposition = false;
	if (seek->cnt == 0)
		goto out;
	err = rd_kafka_seek_partitions(ib->rk, seek, SEEK_TIMEOUT_MS);
	if (err != NULL) {
		ob_warn("could not seek back to the stored inbox positions: %s",
			rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
		ib->reposition = true;
		goto out;
	}
	for (int i = 0; i < seek->cnt; i++) {
		if (seek->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			ob_warn("could not seek %s [%d] to offset %lld: %s", seek->elems[i].topic,
				(int)seek->elems[i].partition, (long long)seek->elems[i].offset,
				rd_kafka_err2str(seek->elems[i].err));
			ib->reposition = true;
		}
	}
	ob_info("resumed %d partition(s) from the positions stored in postgres", seek->cnt);
out:
	rd_kafka_topic_partition_list_destroy(seek);
}

static void
update_lag(ob_inbox *ib)
{
	uint64_t lag = 0;

	for (int i = 0; i < ib->assigned->cnt; i++) {
		const rd_kafka_topic_partition_t *a = &ib->assigned->elems[i];
		int64_t low, high;

		if (a->offset >= 0 &&
		    rd_kafka_get_watermark_offsets(ib->rk, a->topic, a->partition, &low, &high) ==
			RD_KAFKA_RESP_ERR_NO_ERROR &&
		    high > a->offset)
			lag += (uint64_t)(high - a->offset);
	}
	ob_metrics_set_inbox_lag(lag);
}

/* ---- rebalances ------------------------------------------------------- */

static bool
cooperative(rd_kafka_t *rk)
{
	return strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
}

static void
log_partitions(const char *what, const rd_kafka_topic_partition_list_t *parts)
{
	for (int i = 0; i < parts->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &parts->elems[i];

		if (p->offset >= 0)
			ob_info("%s %s [%d] at stored offset %lld", what, p->topic,
				(int)p->partition, (long long)p->offset);
		else
			ob_info("%s %s [%d] (nothing stored: kafka's committed offset, else "
				"auto.offset.reset)",
				what, p->topic, (int)p->partition);
	}
}

static void
on_assign(ob_inbox *ib, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Start where Postgres says; without the database there is no
	 * knowing where, so wait for it. */
	while (ensure_db(ib) && !load_stored(ib, parts, false))
		;
	if (ib->db == NULL) {
		/* SIGTERM or exit: take nothing. */
		if (!cooperative(ib->rk))
			(void)rd_kafka_assign(ib->rk, NULL);
		return;
	}
	if (cooperative(ib->rk))
		err = rd_kafka_incremental_assign(ib->rk, parts);
	else if (rd_kafka_assign(ib->rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
		ob_error("could not assign the partitions");
	if (err != NULL) {
		ob_error("could not assign the partitions: %s", rd_kafka_error_string(err));
		rd_kafka_error_destroy(err);
	}
	if (!cooperative(ib->rk)) {
		rd_kafka_topic_partition_list_destroy(ib->assigned);
		ib->assigned = rd_kafka_topic_partition_list_copy(parts);
	} else {
		for (int i = 0; i < parts->cnt; i++)
			rd_kafka_topic_partition_list_add(ib->assigned, parts->elems[i].topic,
							  parts->elems[i].partition)
			    ->offset = parts->elems[i].offset;
	}
	ib->reposition = false;
	log_partitions("assigned", parts);
}

static void
on_revoke(ob_inbox *ib, rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_error_t *err = NULL;

	/* Store what was read before the partitions go to another member. */
	flush(ib);
	ob_info("revoked %d partition(s)", parts->cnt);
	if (cooperative(ib->rk)) {
		err = rd_kafka_incremental_unassign(ib->rk, parts);
		for (int i = 0; i < parts->cnt; i++)
			(void)rd_kafka_topic_partition_list_del(ib->assigned, parts->elems[i].topic,
								parts->elems[i].partition);
	} else {
		(void)rd_kafka_assign(ib->rk, NULL);
		rd_kafka_topic_partition_list_destroy(ib->assigned);
		ib->assigned = rd_kafka_topic_partition_list_new(1);
	}
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

/* Take one polled message: a record joins the batch, an error is logged. */
static void
take(ob_inbox *ib, rd_kafka_message_t *m)
{
	rd_kafka_topic_partition_t *a;

	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			ob_warn("kafka consumer: %s", rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
		return;
	}
	a = rd_kafka_topic_partition_list_find(ib->assigned, rd_kafka_topic_name(m->rkt),
					       m->partition);
	if (a != NULL && a->offset < 0)
		a->offset = m->offset; /* nothing stored yet: resume here on failure */
	ib->batch[ib->batch_len++] = m;
}

static void
run_loop(ob_inbox *ib)
{
	int64_t next_lag = 0;

	while (ib->exit_code < 0 && !ob_signals_stop_requested()) {
		rd_kafka_message_t *m;

		ob_metrics_heartbeat();
		ob_notify_watchdog();
		if (ib->reposition && ib->batch_len == 0) {
			if (!ensure_db(ib))
				break;
			reposition(ib);
			continue;
		}
		/* With records waiting, only take what is already fetched. */
		m = rd_kafka_consumer_poll(ib->rk, ib->batch_len > 0 ? 0 : POLL_MS);
		if (m != NULL)
			take(ib, m);
		if (ib->batch_len >= (size_t)ib->cfg->inbox.batch_max ||
		    (m == NULL && ib->batch_len > 0))
			flush(ib);
		if (ob_mono_ms() >= next_lag) {
			update_lag(ib);
			next_lag = ob_mono_ms() + 1000;
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
	ib.assigned = rd_kafka_topic_partition_list_new(1);
	ib.batch = ob_xcalloc((size_t)cfg->inbox.batch_max, sizeof(*ib.batch));
	set_ready(&ib);
	if (!ob_producer_new(cfg, on_dlq_delivery, &ib, &ib.dlq) || !start_consumer(&ib)) {
		ib.exit_code = EXIT_USAGE;
		goto out;
	}
	if (!ensure_db(&ib))
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
	rd_kafka_topic_partition_list_destroy(ib.assigned);
	free(ib.batch);
	ob_info("outboxd inbox stopped");
	return ib.exit_code < 0 ? 0 : ib.exit_code;
}
