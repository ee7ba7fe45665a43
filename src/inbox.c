/*
 * inbox.c: the inbox consumer loop.
 *
 * One thread reads records from the consumer (consumer.h) into a batch of
 * at most inbox.batch_max records, which is flushed when it is full or
 * when no more records are waiting: bad records go to the dead-letter
 * topic first (and are waited for), then one database transaction inserts
 * the good rows and stores the next offset of every partition of the
 * batch (inboxdb.c). The positions stored in Postgres are the truth.
 * Partitions are assigned paused; the main loop then starts each one at
 * its stored position judged against what the broker serves (inboxpos.h).
 * After a failed transaction, whose outcome may be unknown, it reconnects
 * and seeks every assigned partition back to what Postgres holds. While
 * the database is away the partitions stay paused and the consumer keeps
 * being polled, so the group keeps this member; nothing waits for the
 * database inside a rebalance callback. Kafka offsets are committed
 * asynchronously after each database commit, for monitoring tools and for
 * telling a restored database apart.
 *
 * A record the database refuses in a batch makes the batch go again one
 * record per transaction, so that only the refused record is
 * dead-lettered. Rebalance callbacks run inside ob_consumer_poll() on
 * this thread; a revocation flushes the batch first.
 */
#include "outboxd/inbox.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/consumer.h"
#include "outboxd/event.h"
#include "outboxd/inboxdb.h"
#include "outboxd/inboxpos.h"
#include "outboxd/inboxrow.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/producer.h"
#include "outboxd/runtime.h"

#define POLL_MS          100
#define BACKOFF_FIRST_MS 100

typedef struct ob_inbox {
	const ob_config *cfg;
	ob_consumer *consumer;
	ob_inboxdb *db; /* NULL while disconnected */
	ob_producer *dlq;
	ob_event dlq_event;
	ob_event dlq_small; /* a dead letter cut down to its headers */
	size_t dlq_waiting; /* dead-letter records not yet acknowledged */
	bool dlq_failed;
	/* Records read and not yet stored, in the order read; owned. */
	ob_consumer_record *batch;
	size_t batch_len;
	bool reposition; /* seek back to the stored positions once connected */
	ob_backoff backoff;
	int exit_code; /* -1 while running */
} ob_inbox;

/* ---- helpers ------------------------------------------------------------ */

static void
set_ready(ob_inbox *ib)
{
	int brokers_up = ib->consumer != NULL ? ob_consumer_brokers_up(ib->consumer) : 0;
	ob_ready_state st = ib->db == NULL    ? OB_READY_CONNECTING
			    : brokers_up == 0 ? OB_READY_KAFKA_DOWN
					      : OB_READY_STREAMING;

	ob_metrics_set_ready(st);
	ob_metrics_set_connected(ib->db != NULL, brokers_up > 0);
}

/* Poll the consumer while a backoff waits: the partitions are paused,
 * and a message that comes anyway is dropped. Before the consumer exists
 * (its group waits for the database), only wait. */
static bool
serve_paused(void *ctx, int timeout_ms)
{
	ob_inbox *ib = ctx;

	if (ib->consumer != NULL)
		ob_consumer_poll_drop(ib->consumer, timeout_ms);
	else
		(void)poll(NULL, 0, timeout_ms);
	return ib->exit_code < 0;
}

/* Wait the current backoff, polling the consumer meanwhile (so the group
 * keeps this member and rebalances are served), stopping early on SIGTERM
 * or an exit; the next backoff doubles, up to
 * postgres.reconnect_max_backoff_ms. Only outside rebalance callbacks,
 * with no batch in hand. */
static void
wait_polling(ob_inbox *ib)
{
	(void)ob_runtime_wait(ob_backoff_next(&ib->backoff), serve_paused, ib);
}

/* The database is unusable (a failed statement or connection attempt):
 * close it, pause every assigned partition until they are sought back to
 * the stored positions, and count a reconnect. */
static void
lose_db(ob_inbox *ib)
{
	ob_inboxdb_close(ib->db);
	ib->db = NULL;
	ib->reposition = true;
	if (ib->consumer != NULL)
		ob_consumer_pause(ib->consumer);
	set_ready(ib);
	ob_metrics_reconnect(OB_TARGET_POSTGRES);
}

/* While a statement waits for the database: the loop is alive. A stop
 * does not cancel it: the batch in hand is stored first. */
static bool
on_db_tick(void *ctx)
{
	(void)ob_runtime_tick();
	return true;
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
		ob_inboxdb_set_tick(ib->db, on_db_tick, ib);
		ob_info("connected to the inbox database");
		set_ready(ib);
		return true;
	case OB_INBOXDB_FATAL:
		ib->exit_code = OB_EXIT_OPERATOR;
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
		ob_consumer_record_free(&ib->batch[i]);
	ib->batch_len = 0;
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
add_original_headers(ob_event *ev, const ob_consumer_record *m, const char *id_header, bool id)
{
	const char *name;
	const void *value;
	size_t len;

	for (size_t i = 0; ob_consumer_record_header(m, i, &name, &value, &len); i++) {
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
dead_letter(ob_inbox *ib, const ob_consumer_record *m, const ob_record_view *v, const char *reason,
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
	ob_event_put_record(ev, v);
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
	while (ib->dlq_waiting > 0 && !ib->dlq_failed && ob_runtime_tick())
		ob_producer_poll(ib->dlq, POLL_MS);
	if (ib->dlq_failed) {
		ob_error("dead-letter publish failed: stopping without storing the positions "
			 "past it");
		ib->exit_code = OB_EXIT_OPERATOR;
	}
	return ib->dlq_waiting == 0 && !ib->dlq_failed;
}

/* ---- one database transaction -------------------------------------------------- */

/* Add (topic, partition) at offset to the positions of a transaction:
 * the next offset to read is one past the latest record, on the cluster
 * and in the topic (its id) the partitions were started on. */
static void
note_position(const ob_inbox *ib, ob_inbox_position *pos, size_t *n, const ob_consumer_record *m)
{
	const char *topic = m->topic;

	for (size_t i = 0; i < *n; i++) {
		if (pos[i].partition == m->partition && strcmp(pos[i].topic, topic) == 0) {
			if (m->offset + 1 > pos[i].next_offset)
				pos[i].next_offset = m->offset + 1;
			return;
		}
	}
	pos[*n] = (ob_inbox_position){
	    .topic = topic, .partition = m->partition, .next_offset = m->offset + 1};
	snprintf(pos[*n].cluster_id, sizeof(pos[*n].cluster_id), "%s",
		 ob_consumer_cluster_id(ib->consumer));
	snprintf(pos[*n].topic_id, sizeof(pos[*n].topic_id), "%s",
		 ob_consumer_topic_id(ib->consumer, topic));
	(*n)++;
}

/* After a commit: the assigned list, metrics, and Kafka's committed
 * offsets (asynchronously; a hint for monitoring only). */
static void
committed(ob_inbox *ib, const ob_inbox_position *pos, size_t n)
{
	ob_kpart *parts = ob_xcalloc(n + 1, sizeof(*parts));

	for (size_t i = 0; i < n; i++)
		parts[i] = (ob_kpart){pos[i].topic, pos[i].partition, pos[i].next_offset};
	ob_consumer_stored(ib->consumer, parts, n);
	free(parts);
	ob_backoff_reset(&ib->backoff);
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
		note_position(ib, pos, &n_pos, &ib->batch[i]);
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

			(void)ob_consumer_record_view(&ib->batch[i], &v);
			good[i] = false;
			if (ib->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
				ob_error("the inbox database refused %s [%d] offset %lld: %s; "
					 "stopping (outbox.on_bad_event = halt)",
					 v.topic, (int)ib->batch[i].partition,
					 (long long)ib->batch[i].offset, error);
				ib->exit_code = OB_EXIT_OPERATOR;
				return OB_INBOXDB_FATAL;
			}
			if (!dead_letter(ib, &ib->batch[i], &v, "unstorable", error)) {
				ib->exit_code = OB_EXIT_OPERATOR;
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
		(void)ob_consumer_record_view(&ib->batch[i], &v);
		if (ib->cfg->outbox.on_bad_event == OB_BAD_EVENT_HALT) {
			ob_error("bad record %s [%d] offset %lld: %s; stopping "
				 "(outbox.on_bad_event = halt)",
				 v.topic, (int)ib->batch[i].partition,
				 (long long)ib->batch[i].offset, bad[i].error);
			ib->exit_code = OB_EXIT_OPERATOR;
			return false;
		}
		if (!dead_letter(ib, &ib->batch[i], &v, bad[i].reason, bad[i].error)) {
			ib->exit_code = OB_EXIT_OPERATOR;
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

		if (!ob_consumer_record_view(&ib->batch[i], &v)) {
			bad[i].reason = "bad-header";
			snprintf(bad[i].error, sizeof(bad[i].error), "more than %d headers",
				 OB_EVENT_MAX_HEADERS);
			continue;
		}
		good[i] = ob_inbox_row_build(&v, ib->batch[i].partition, ib->batch[i].offset,
					     ib->cfg->inbox.id_header, &rows[i], &bad[i]);
	}
	if (handle_bad(ib, good, bad) && connect_db(ib)) {
		st = commit_range(ib, 0, n, rows, good, error, sizeof(error));
		if (st == OB_INBOXDB_REJECTED)
			st = commit_one_by_one(ib, rows, good);
		if (st == OB_INBOXDB_FATAL && ib->exit_code < 0)
			ib->exit_code = OB_EXIT_OPERATOR;
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

/* A status of inboxpos.h: true when OK; otherwise the database is lost or
 * the exit code set as it says. */
static bool
positions_ok(ob_inbox *ib, ob_inboxpos_status st)
{
	switch (st) {
	case OB_INBOXPOS_OK:
		return true;
	case OB_INBOXPOS_WAIT:
		break;
	case OB_INBOXPOS_DB:
		lose_db(ib);
		break;
	case OB_INBOXPOS_HALT:
		ib->exit_code = OB_EXIT_OPERATOR;
		break;
	case OB_INBOXPOS_CONFIG:
		ib->exit_code = OB_EXIT_CONFIG;
		break;
	}
	return false;
}

/* Outside the rebalance callbacks, with no batch in hand: connect, start
 * the partitions assigned since, and seek back after a failure; after a
 * failure of any of these, wait a backoff (polling the consumer). The
 * records of a partition that cannot start wait as well: their lag is
 * noted (README, "Metrics and health"). */
static void
recover(ob_inbox *ib)
{
	bool ok = connect_db(ib);

	if (ok && ob_consumer_unstarted_count(ib->consumer) > 0) {
		ok = positions_ok(ib, ob_inboxpos_start(ib->consumer, ib->db, ib->cfg));
		if (!ok && ib->exit_code < 0 && ib->db != NULL &&
		    ob_consumer_brokers_up(ib->consumer) > 0)
			(void)positions_ok(ib, ob_inboxpos_note_lag(ib->consumer, ib->db));
	}
	if (ok && ib->reposition) {
		ok = positions_ok(ib, ob_inboxpos_resume(ib->consumer, ib->db));
		if (ok)
			ib->reposition = false;
	}
	if (ok)
		ob_backoff_reset(&ib->backoff);
	else if (ib->exit_code < 0)
		wait_polling(ib);
}

/* True when the main loop must recover() before it reads on: the
 * database is away, partitions wait to be started, or a failure left the
 * partitions to be sought back. */
static bool
must_recover(const ob_inbox *ib)
{
	return ib->db == NULL || ob_consumer_unstarted_count(ib->consumer) > 0 || ib->reposition;
}

static void
run_loop(ob_inbox *ib)
{
	int64_t next_lag = 0;

	while (ib->exit_code < 0 && ob_runtime_tick()) {
		ob_consumer_poll_result got;
		ob_consumer_record rec;

		if (ob_mono_ms() >= next_lag) {
			ob_consumer_report_lag(ib->consumer);
			next_lag = ob_mono_ms() + 1000;
		}
		if (ib->batch_len == 0 && must_recover(ib)) {
			recover(ib);
			continue;
		}
		/* With records waiting, only take what is already fetched. */
		got = ob_consumer_poll(ib->consumer, ib->batch_len > 0 ? 0 : POLL_MS, &rec);
		/* A revocation inside the poll may have flushed the batch. */
		if (got == OB_CONSUMER_RECORD)
			ib->batch[ib->batch_len++] = rec;
		if (ib->batch_len >= (size_t)ib->cfg->inbox.batch_max ||
		    (got == OB_CONSUMER_NONE && ib->batch_len > 0)) {
			/* The records in hand count as waiting (README, "Metrics
			 * and health") while they are being stored. */
			ob_consumer_report_lag(ib->consumer);
			flush(ib);
		}
	}
}

/* The consumer's hooks (consumer.h). */
static void
on_revoking(void *ctx)
{
	flush(ctx);
}

static void
on_lost(void *ctx)
{
	drop_batch(ctx);
}

static void
on_brokers(void *ctx)
{
	set_ready(ctx);
}

int
ob_inbox_run(const ob_config *cfg)
{
	ob_inbox ib = {.cfg = cfg, .exit_code = -1};
	ob_consumer_hooks hooks = {on_revoking, on_lost, on_brokers, &ib};
	char *masked = ob_log_mask_conninfo(cfg->inbox.conninfo);

	ob_info("outboxd inbox starting: postgres \"%s\", table %s.%s, topics %s, group %s", masked,
		cfg->inbox.schema, cfg->inbox.table_name, cfg->inbox.topics,
		cfg->inbox.group[0] != '\0' ? cfg->inbox.group
					    : "derived from the database (once connected)");
	free(masked);
	ob_runtime_start();
	ob_backoff_init(&ib.backoff, BACKOFF_FIRST_MS, cfg->pg.reconnect_max_backoff_ms);
	ob_event_init(&ib.dlq_event);
	ob_event_init(&ib.dlq_small);
	ib.batch = ob_xcalloc((size_t)cfg->inbox.batch_max, sizeof(*ib.batch));
	set_ready(&ib);
	if (!ob_producer_new(cfg, OB_PRODUCER_AWAITED, on_dlq_delivery, &ib, &ib.dlq) ||
	    !ob_consumer_check_config(cfg)) {
		ib.exit_code = OB_EXIT_CONFIG;
		goto out;
	}
	/* The group may be named after the database (inboxdb.h): the
	 * consumer joins it once the database answered. */
	while (ib.db == NULL && ib.exit_code < 0 && !ob_runtime_stop_requested()) {
		if (!connect_db(&ib) && ib.exit_code < 0)
			wait_polling(&ib);
	}
	if (ib.db == NULL)
		goto out;
	ob_log_set_context("group", ob_inboxdb_group(ib.db));
	ob_info("consumer group %s%s", ob_inboxdb_group(ib.db),
		cfg->inbox.group[0] != '\0' ? " (inbox.group)"
					    : " (derived from the database and the table; "
					      "inbox.group sets another)");
	if ((ib.consumer = ob_consumer_new(cfg, ob_inboxdb_group(ib.db), hooks)) == NULL) {
		ib.exit_code = OB_EXIT_CONFIG;
		goto out;
	}
	ob_backoff_reset(&ib.backoff);
	ob_notify_ready("consuming into the inbox table");
	run_loop(&ib);
	ob_runtime_stopping();
	/* Store what was read; on an exit for the operator, nothing more. */
	if (ib.exit_code < 0)
		flush(&ib);
	drop_batch(&ib);
out:
	/* Leaves the group; the revocation's flush finds nothing. */
	ob_consumer_free(ib.consumer);
	ob_producer_free(ib.dlq);
	ob_inboxdb_close(ib.db);
	ob_event_free(&ib.dlq_event);
	ob_event_free(&ib.dlq_small);
	free(ib.batch);
	return ob_runtime_exit("outboxd inbox", ib.exit_code < 0 ? OB_EXIT_OK : ib.exit_code);
}
