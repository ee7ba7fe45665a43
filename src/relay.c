/*
 * relay.c: the loop between the slot and the producer.
 *
 * ob_relay_run() turns run_connection() until a stop: each call connects
 * to Postgres, checks the database and the slot, starts replication from
 * the confirmable position and streams until something ends the
 * connection; the one switch of relay_main() handles that outcome
 * (reconnect, back off, wait as a standby, recreate the producer, or stop),
 * as pg_recvlogical does. Before the first stream the backlog cutover may
 * run (cutover.h); a lost slot is recovered before the next (slotrecover.h).
 *
 * What the stream reads is dispatched here, one decoded change at a time;
 * mapped events are handed to delivery.h, which follows them to the broker
 * (reports, dead letters, suspects produced alone); the stream's tables
 * and what may be confirmed are tableset.h's.
 *
 * State that outlives one connection: the deliveries (the producer, the
 * ack tracker and the replay state), who the server is (a slot is created
 * only before the first stream, and a different server or a vanished slot
 * later is an operator's matter), and the stream's tables.
 */
#include "outboxd/relay.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/check.h"
#include "outboxd/cutover.h"
#include "outboxd/slotprep.h"
#include "outboxd/slotrecover.h"
#include "outboxd/decoder.h"
#include "outboxd/delivery.h"
#include "outboxd/fork.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/notify.h"
#include "outboxd/outbox.h"
#include "outboxd/pgrepl.h"
#include "outboxd/policy.h"
#include "outboxd/position.h"
#include "outboxd/runtime.h"
#include "outboxd/slotsave.h"
#include "outboxd/tableset.h"

/* How long SIGTERM waits for in-flight events before giving up. */
#define SHUTDOWN_FLUSH_MS       30000
/* How long the last read of the stream's tables may take at shutdown. */
#define FINAL_READ_MS           5000
/* How long a stop asked for inside a transaction reads on to its end, so
 * that its events already handed over are confirmed with it, not published
 * again by the next start. */
#define STOP_TXN_GRACE_MS       5000
/* Records read per loop turn before serving delivery reports again. */
#define READ_BATCH              2000
/* How long the loop naps, reading a backlog, once it has read what came. */
#define BACKLOG_NAP_MS          4
/* First reconnect delay; doubles up to reconnect_max_backoff_ms. */
#define BACKOFF_FIRST_MS        100
/* How often a standby says it is still waiting. */
#define STANDBY_LOG_INTERVAL_MS 60000
/* For OWN_WALSENDER_GRACE_MS after this process left a stream, the slot
 * being active elsewhere most likely means that stream's walsender has not
 * exited yet: retry after as long as it has been since leaving (at least
 * OWN_WALSENDER_RETRY_MS, at most standby_retry_ms), not after
 * standby_retry_ms. */
#define OWN_WALSENDER_GRACE_MS  3000
#define OWN_WALSENDER_RETRY_MS  50

typedef struct relay {
	const ob_config *cfg;
	ob_deliveries d;      /* the producer and what it was handed */
	ob_tableset tableset; /* the stream's tables: what may be confirmed */
	ob_cutover cutover;   /* the backlog, before the first stream */
	ob_mapper mapper;
	ob_pgconn *pg;
	ob_event ev;        /* the event being mapped, reused */
	ob_decoder decoder; /* wal2json's or pgoutput's records as changes */

	/* The server and the stream. */
	bool streamed;        /* replication started once: the slot is ours */
	ob_pg_system server;  /* who we streamed from */
	ob_timeline timeline; /* its timeline, and the events handed over (fork.h) */
	ob_lsn received;
	ob_lsn wal_end;
	ob_lsn sent_flush;
	int64_t last_status_ms;
	bool reply_due;
	/* stream() runs: a query waiting meanwhile (the stream's tables read
	 * again) leaves the stream's state on /readyz and the gauges. */
	bool streaming;
	/* Until when a query may still run after a stop was asked for (the
	 * last read of the stream's tables at shutdown); 0: it may not. */
	int64_t stopping_query_until;
	/* Until when a stop waits for the open transaction's end (0: no stop
	 * seen inside one yet). */
	int64_t stopping_txn_until;

	/* The last server error, and how often it came at one position. */
	char err_state[6];
	char err_msg[256];
	ob_error_repeat err_repeat;

	ob_backoff backoff; /* before the next connection attempt */
	int64_t last_standby_log;
	int64_t left_stream_ms; /* when disconnect() last left a stream */
	bool slot_created;      /* `slot create` created it */
} relay;

/* Send a status update if one is due (ob_status_due(): forced, asked
 * for, status_interval_ms passed, or the confirmable position moved). */
static bool
send_status(relay *r, bool force)
{
	ob_lsn flush = ob_tableset_confirmable(&r->tableset);
	int64_t now = ob_mono_ms();
	bool due = ob_status_due(force, r->reply_due, flush != r->sent_flush,
				 now - r->last_status_ms, r->cfg->pg.status_interval_ms);
	ob_acktrack *ack = &r->d.ack;
	ob_pos oldest_unit;
	int64_t oldest_us = 0;

	ob_metrics_set_lsns(flush, r->received, r->wal_end);
	ob_metrics_set_inflight(ob_acktrack_inflight(ack));
	/* The confirmable position dropped the confirmed prefix: the oldest
	 * entry left is the oldest transaction received and not confirmed. */
	ob_metrics_set_oldest_unconfirmed(
	    ob_acktrack_txn_info(ack, ack->head_seq, &oldest_unit, &oldest_us) ? oldest_us : 0);
	if (!due || r->pg == NULL)
		return true;
	if (!ob_pgrepl_send_status(r->pg, r->received > flush ? r->received : flush, flush, false))
		return false;
	if (flush != r->sent_flush)
		ob_log_lsn(OB_LOG_DEBUG, flush, NULL, 0, "confirmed " OB_LSN_FMT,
			   OB_LSN_ARGS(flush));
	r->sent_flush = flush;
	r->last_status_ms = now;
	r->reply_due = false;
	return true;
}

/* The deliveries waited for the producer: keep the server informed and
 * stay alive (delivery.h's tick). */
static bool
on_delivery_wait(void *ctx, ob_outcome *out)
{
	relay *r = ctx;

	if (!send_status(r, false)) {
		*out = OB_OUTCOME_LOST;
		return false;
	}
	ob_delivery_alive(&r->d, r->pg != NULL);
	return true;
}

/* Before an event is handed over: the stream's tables must cover it. */
static bool
on_delivery_cover(void *ctx, ob_outcome *out)
{
	relay *r = ctx;

	return ob_tableset_cover(&r->tableset, out);
}

/* Hand the event just mapped into r->ev over. */
static bool
hand_over(relay *r, ob_map_result mr, ob_lsn lsn, ob_outcome *out)
{
	return ob_delivery_hand_over(&r->d, &r->ev, mr, lsn, out);
}

/* The open unit committed; end_lsn is the position that confirms it. */
static void
commit(relay *r, ob_lsn end_lsn)
{
	if (ob_delivery_commit(&r->d, end_lsn)) {
		ob_tableset_committed(&r->tableset, end_lsn);
		ob_timeline_committed(&r->timeline, end_lsn, r->d.replay.handed_events);
	}
}

/* A record the decoder sent that did not parse (malformed, or with
 * wal2json an outbox row wider than OB_W2J_MAX_COLUMNS). Inside a
 * transaction it can only be an outbox change: dead-letter its raw bytes. */
static bool
handle_unparsable(relay *r, const ob_pgrepl_msg *msg, const char *err, ob_outcome *out)
{
	ob_record_view view;
	char error[512];

	snprintf(error, sizeof(error), "could not parse %s record: %s",
		 ob_plugin_name(r->cfg->pg.plugin), err);
	if (!r->d.replay.in_txn) {
		/* A B or C record we cannot read: going on could skip a whole
		 * transaction, so stop before confirming anything past it. */
		ob_log_lsn(OB_LOG_ERROR, msg->data_start, NULL, 0,
			   "%s; stopping: outboxd cannot tell which transaction it belongs to",
			   error);
		*out = OB_OUTCOME_HALT;
		return false;
	}
	memset(&view, 0, sizeof(view));
	view.value = msg->data;
	view.value_len = msg->len;
	view.has_value = true;
	view.timestamp_ms = r->d.unit_commit_us / 1000;
	ob_event_build_dlq(&r->ev, r->cfg->outbox.dlq_topic, "bad-record", error, msg->data_start,
			   &view, false);
	return hand_over(r, OB_MAP_DLQ, msg->data_start, out);
}

/* A Begin: the transaction whose commit record starts at commit_start
 * starts. */
static bool
handle_begin(relay *r, ob_lsn commit_start, int64_t commit_us, ob_outcome *out)
{
	if (r->d.replay.in_txn) {
		ob_error("transaction " OB_LSN_FMT " began before " OB_LSN_FMT " ended",
			 OB_LSN_ARGS(commit_start), OB_LSN_ARGS(ob_pos_lsn(r->d.replay.unit)));
		*out = OB_OUTCOME_LOST;
		return false;
	}
	ob_delivery_begin(&r->d, ob_pos_txn(commit_start), commit_us, true);
	return true;
}

/* A logical message, inside the open transaction or standing alone. */
static bool
handle_message(relay *r, const ob_logical_message *lm, ob_outcome *out)
{
	int64_t now_us;
	bool ok;

	/* pgoutput sends every prefix: only the outbox's are events the
	 * table does not hold (slotloss.h). */
	if (ob_mapper_reads_message(&r->mapper, lm))
		ob_recpointdb_saw_message(&r->tableset.recpoint);
	if (r->d.replay.in_txn)
		return hand_over(r,
				 ob_mapper_map_logical_message(&r->mapper, lm,
							       r->d.unit_commit_us / 1000, &r->ev),
				 lm->lsn, out);
	/* A non-transactional message stands alone, placed and confirmed by
	 * where its record ends (position.h). */
	now_us = ob_now_us();
	ob_delivery_begin(&r->d, ob_pos_message(lm->lsn), now_us, false);
	ok = hand_over(r, ob_mapper_map_logical_message(&r->mapper, lm, now_us / 1000, &r->ev),
		       lm->lsn, out);
	if (ok)
		commit(r, ob_pos_message_confirms(lm->lsn));
	return ok;
}

/* Whether the row of ch is of the outbox table. */
static bool
outbox_table(const relay *r, const ob_change *ch)
{
	return strcmp(ch->schema, r->cfg->outbox.schema) == 0 &&
	       strcmp(ch->table, r->cfg->outbox.table_name) == 0;
}

/* Map an inserted row: a row of the outbox table (with pgoutput, a
 * partition's rows come under it), or, with wal2json and a partitioned
 * table, of one of the leaves the stream reads. Rows of other tables are
 * skipped (pgoutput's publication may hold them). */
static ob_map_result
map_row(relay *r, const ob_change *ch)
{
	const ob_leafset *tables = &r->tableset.tables;
	int64_t commit_ms = r->d.unit_commit_us / 1000;

	if (ch->w2j != NULL && !tables->partitioned)
		return ob_mapper_map_insert(&r->mapper, ch->w2j, commit_ms, &r->ev);
	if (ch->w2j != NULL)
		return ob_leafset_has(tables, ch->schema, ch->table)
			   ? ob_mapper_map_row(&r->mapper, ch->w2j, commit_ms, &r->ev)
			   : OB_MAP_SKIP;
	if (!outbox_table(r, ch))
		return OB_MAP_SKIP;
	return ob_mapper_map_text_row(&r->mapper, &ch->text, ch->lsn, commit_ms, &r->ev);
}

/* One record of the stream, whichever decoder sent it: the one dispatch
 * of decoded changes (change.h). */
static bool
handle_xlog(relay *r, const ob_pgrepl_msg *msg, ob_outcome *out)
{
	ob_change ch;
	char err[256];
	bool parsed;

	if (msg->data_start > r->received)
		r->received = msg->data_start;
	if (msg->unconvertible)
		return handle_unparsable(r, msg,
					 "its bytes are not text of the database's encoding, so "
					 "they have no UTF-8 form",
					 out);
	parsed = ob_decoder_next(&r->decoder, msg->data, msg->len, msg->data_start, &ch, err,
				 sizeof(err));
	if (!parsed && ch.kind == OB_CHANGE_OTHER)
		return handle_unparsable(r, msg, err, out);
	switch (ch.kind) {
	case OB_CHANGE_BEGIN:
		return handle_begin(r, ch.lsn, ch.commit_us != 0 ? ch.commit_us : ob_now_us(), out);
	case OB_CHANGE_COMMIT:
		if (r->d.replay.in_txn)
			commit(r, ch.lsn);
		return true;
	case OB_CHANGE_ROW:
		if (!r->d.replay.in_txn || (!parsed && ch.table != NULL && !outbox_table(r, &ch)))
			return true;
		if (!parsed)
			return handle_unparsable(r, msg, err, out);
		return hand_over(r, map_row(r, &ch), ch.lsn, out);
	case OB_CHANGE_MESSAGE:
		return handle_message(r, &ch.message, out);
	case OB_CHANGE_RELATION:
		if (parsed)
			return true;
		/* Every row of the table would be unreadable. */
		ob_log_lsn(OB_LOG_ERROR, msg->data_start, NULL, 0,
			   "could not read a pgoutput Relation message: %s; stopping", err);
		*out = OB_OUTCOME_HALT;
		return false;
	case OB_CHANGE_OTHER:
		break;
	}
	return true;
}

/* Whether the stream stops now: a stop was asked for, and no transaction
 * is open, or the open one did not end within STOP_TXN_GRACE_MS. */
static bool
stop_now(relay *r)
{
	if (!ob_runtime_stop_requested())
		return false;
	if (!r->d.replay.in_txn)
		return true;
	if (r->stopping_txn_until == 0) {
		ob_info("stopping once the open transaction is read to its end (for up to %d ms)",
			STOP_TXN_GRACE_MS);
		r->stopping_txn_until = ob_mono_ms() + STOP_TXN_GRACE_MS;
	}
	return ob_mono_ms() >= r->stopping_txn_until;
}

/* Read the stream until something ends it. */
static ob_outcome
stream(relay *r)
{
	ob_outcome out = OB_OUTCOME_STOP;

	for (;;) {
		struct pollfd fds[3];
		int64_t wait_ms;

		ob_delivery_alive(&r->d, true);
		if (stop_now(r))
			return OB_OUTCOME_STOP;
		if (!ob_delivery_serve(&r->d, 0, &out) ||
		    !ob_tableset_watch(&r->tableset, r->wal_end, &out))
			return out;

		/* Read what is there, up to READ_BATCH records; drained says
		 * whether libpq's buffer is empty, so poll() may wait. */
		bool drained = false, nap;
		int n;

		for (n = 0; n < READ_BATCH && !stop_now(r); n++) {
			ob_pgrepl_msg msg;
			ob_read_result rr = ob_pgrepl_read(r->pg, &msg);

			if (rr == OB_READ_NONE) {
				drained = true;
				break;
			}
			if (rr == OB_READ_ERROR)
				return OB_OUTCOME_LOST;
			if (msg.wal_end > r->wal_end)
				r->wal_end = msg.wal_end;
			if (msg.keepalive) {
				if (!r->d.replay.in_txn)
					ob_acktrack_keepalive(&r->d.ack, msg.wal_end);
				if (msg.reply_requested)
					r->reply_due = true;
			} else if (!handle_xlog(r, &msg, &out)) {
				return out;
			}
		}
		if (!ob_delivery_serve(&r->d, 0, &out))
			return out;
		ob_hold_tick(&r->d.hold, r->sent_flush);
		if (!send_status(r, false))
			return OB_OUTCOME_LOST;

		fds[0] = (struct pollfd){ob_pgrepl_socket(r->pg), POLLIN, 0};
		fds[1] = (struct pollfd){ob_producer_wake_fd(r->d.producer), POLLIN, 0};
		fds[2] = (struct pollfd){ob_hold_wake_fd(&r->d.hold), POLLIN, 0};
		wait_ms = ob_status_wait_ms(ob_tableset_confirmable(&r->tableset) != r->sent_flush,
					    ob_mono_ms() - r->last_status_ms,
					    r->cfg->pg.status_interval_ms);
		wait_ms = ob_tableset_wait_ms(&r->tableset, drained, wait_ms);
		if (wait_ms > 1000)
			wait_ms = 1000;
		if (wait_ms < 0 || !drained)
			wait_ms = 0; /* records wait in libpq's buffer: no sleeping */
		/* Reading a backlog, the walsender sends faster than the
		 * events can wait for: rather than waking for each packet
		 * (and for each delivery report), nap and then read all that
		 * came meanwhile. Each wake-up costs more CPU than the events
		 * of one packet; the nap adds up to 4 ms to events already late by
		 * more than OB_DELIVERY_LATE_MS. A turn that read nothing (idle, or the
		 * backlog's end) sleeps as usual. */
		nap = drained && n > 0 && r->d.behind;
		if (nap && wait_ms > BACKLOG_NAP_MS)
			wait_ms = BACKLOG_NAP_MS;
		if (poll(fds, nap ? 0 : 3, (int)wait_ms) < 0 && errno != EINTR) {
			ob_error("could not poll: %s", strerror(errno));
			return OB_OUTCOME_LOST;
		}
	}
}

/* Leave the current connection; a transaction cut off in the middle is
 * remembered so its replay skips the events already handed over. */
static void
disconnect(relay *r, bool graceful)
{
	ob_delivery_cut(&r->d);
	ob_pgrepl_close(r->pg, graceful);
	r->pg = NULL;
	r->left_stream_ms = ob_mono_ms();
	ob_tableset_close(&r->tableset);
	r->reply_due = false;
	ob_metrics_set_connected(false, ob_delivery_connected(&r->d));
}

/* Keep the connection's last server error before the connection goes. */
static void
keep_error(relay *r)
{
	snprintf(r->err_state, sizeof(r->err_state), "%s", ob_pgsql_error_state(r->pg));
	snprintf(r->err_msg, sizeof(r->err_msg), "%s", ob_pgsql_error_message(r->pg));
}

/* Count the kept server error (ob_error_repeat_note(): lost connections
 * and server shutdowns never count): otherwise while it may go away; one
 * met OB_ERROR_REPEAT_LIMIT times in a row with the stream no further on
 * is not (ob_slotrecover_stuck()). */
static ob_outcome
note_server_error(relay *r, ob_outcome otherwise)
{
	int n = ob_error_repeat_note(&r->err_repeat, r->err_state, r->received);

	if (n < OB_ERROR_REPEAT_LIMIT)
		return otherwise;
	ob_error_repeat_reset(&r->err_repeat);
	return ob_slotrecover_stuck(&r->cutover, r->err_state, r->err_msg, r->received, n);
}

/* While a query waits for the server: stay alive, keep serving delivery
 * reports, and give up when asked to stop (after stopping_query_until). */
static bool
on_query_tick(void *ctx)
{
	relay *r = ctx;

	ob_delivery_alive(&r->d, r->streaming);
	ob_delivery_poll(&r->d, 0);
	return !ob_runtime_stop_requested() || ob_mono_ms() < r->stopping_query_until;
}

/* The server must be the one streamed from before: the same system
 * (another one does not hold this slot's position, even if it has a slot
 * of that name). A new timeline is a promoted standby of the same system,
 * which may have forked below what was read (fork.h). */
static ob_pg_status
check_server(relay *r, ob_pg_system *sys)
{
	if (!ob_pgrepl_identify(r->pg, sys))
		return OB_PG_RETRY;
	if (r->streamed && strcmp(sys->system_id, r->server.system_id) != 0) {
		ob_error("the server is a different system (system identifier %s, streamed from "
			 "%s before): it does not hold the position of replication slot %s, "
			 "confirmed up to " OB_LSN_FMT "; stopping. Point postgres.conninfo at the "
			 "original server, or create the slot on this one and republish the outbox "
			 "rows written since then",
			 sys->system_id, r->server.system_id, r->cfg->pg.slot,
			 OB_LSN_ARGS(ob_tableset_confirmable(&r->tableset)));
		return OB_PG_FATAL;
	}
	return ob_fork_follow(&r->timeline, r->pg, sys->timeline, &r->d, &r->received);
}

/* Connect, check, take the slot and start streaming. */
static ob_pg_status
connect_stream(relay *r)
{
	ob_pg_status st = ob_pgrepl_connect(r->cfg, &r->pg);
	ob_pg_system sys;
	ob_lsn start;

	r->err_state[0] = '\0';
	if (st != OB_PG_OK)
		return st;
	ob_pgsql_set_tick(r->pg, on_query_tick, r);
	st = check_server(r, &sys);
	if (st == OB_PG_OK)
		st = ob_check_database(r->pg, r->cfg, NULL);
	if (st == OB_PG_OK)
		st = ob_tableset_start(&r->tableset, r->pg);
	start = ob_tableset_confirmable(&r->tableset);
	if (st == OB_PG_OK)
		st = ob_slotprep_prepare(r->pg, r->cfg, r->streamed, start, &r->cutover.lost);
	if (r->cutover.lost == OB_SLOT_LOSS_MISSING && r->streamed &&
	    sys.timeline != r->server.timeline)
		r->cutover.lost = OB_SLOT_LOSS_PROMOTED;
	if (st == OB_PG_OK)
		st = ob_pgrepl_start(r->pg, r->cfg, start, &r->tableset.tables);
	if (st != OB_PG_OK) {
		keep_error(r);
		ob_pgrepl_close(r->pg, false);
		r->pg = NULL;
		ob_tableset_close(&r->tableset); /* pgoutput's first read opened it */
		return st;
	}
	r->streamed = true;
	r->server = sys;
	ob_decoder_reset(&r->decoder); /* a new session describes its relations again */
	r->sent_flush = 0;
	r->last_status_ms = 0;
	return OB_PG_OK;
}

/* The recovery of a slot found lost (slotrecover.h), when one was;
 * otherwise the outcome otherwise. */
static ob_outcome
recover_or(relay *r, ob_outcome otherwise)
{
	return r->cutover.lost != OB_SLOT_LOSS_NONE ? ob_slotrecover_run(&r->cutover) : otherwise;
}

/* One replication connection, from connecting to what ended it. */
static ob_outcome
run_connection(relay *r)
{
	ob_outcome out;
	bool created;

	if (!ob_hold_load(&r->d.hold, &out))
		return out;
	if (!r->streamed && (r->cfg->outbox.backlog_where[0] != '\0' || r->cutover.create_only)) {
		if (!ob_cutover_run(&r->cutover, &created, &out))
			return recover_or(r, out);
		if (r->cutover.create_only) {
			r->slot_created = created;
			if (!created)
				ob_error("replication slot %s already exists", r->cfg->pg.slot);
			return created ? OB_OUTCOME_STOP : OB_OUTCOME_HALT;
		}
	}
	switch (connect_stream(r)) {
	case OB_PG_OK:
		break;
	case OB_PG_RETRY:
		return note_server_error(r, OB_OUTCOME_RETRY);
	case OB_PG_STANDBY:
		return OB_OUTCOME_STANDBY;
	case OB_PG_FATAL:
		return recover_or(r, OB_OUTCOME_HALT);
	}
	ob_metrics_set_ready(OB_READY_STREAMING);
	ob_notify_ready("streaming");
	r->streaming = true;
	out = stream(r);
	r->streaming = false;
	/* A stop cancels the reads of the stream's tables: shut_down() reads
	 * them once more, connected, before the last confirmation (else the
	 * next start publishes again what was acknowledged since). */
	if (out == OB_OUTCOME_RETRY && ob_runtime_stop_requested())
		out = OB_OUTCOME_STOP;
	if (out == OB_OUTCOME_REFILTER) {
		/* Confirm what may be before the next stream reads more. */
		if (!send_status(r, true))
			out = OB_OUTCOME_LOST;
		disconnect(r, out == OB_OUTCOME_REFILTER);
	}
	if (out == OB_OUTCOME_RETRY)
		disconnect(r, false); /* the stream's tables could not be read */
	if (out == OB_OUTCOME_LOST || out == OB_OUTCOME_REPRODUCE) {
		keep_error(r);
		disconnect(r, false);
		if (out == OB_OUTCOME_LOST)
			out = note_server_error(r, out);
	}
	return out;
}

/* Stop: flush what is in flight (bounded), confirm it, close. False when
 * a record met during the flush needs an operator (exit 1). */
static bool
shut_down(relay *r)
{
	int64_t deadline = ob_mono_ms() + SHUTDOWN_FLUSH_MS;
	ob_outcome out = OB_OUTCOME_STOP;
	bool final_ok, confirmed, save;

	ob_runtime_stopping();
	/* Nothing to say after a start that never streamed (a refusal at
	 * start-up, slot create). */
	if (ob_acktrack_inflight(&r->d.ack) > 0)
		ob_info("stopping: flushing %llu in-flight events",
			(unsigned long long)ob_acktrack_inflight(&r->d.ack));
	else if (r->pg != NULL)
		ob_info("stopping");
	while (r->d.producer != NULL && ob_acktrack_inflight(&r->d.ack) > 0 &&
	       ob_mono_ms() < deadline) {
		ob_delivery_alive(&r->d, r->pg != NULL);
		if (!ob_delivery_serve(&r->d, 100, &out))
			break;
		if (r->pg != NULL && !send_status(r, false))
			disconnect(r, false);
	}
	if (ob_acktrack_inflight(&r->d.ack) > 0)
		ob_warn("%llu events were not acknowledged in time; they will be published "
			"again on restart",
			(unsigned long long)ob_acktrack_inflight(&r->d.ack));
	if (r->pg != NULL) {
		r->stopping_query_until = ob_mono_ms() + FINAL_READ_MS;
		final_ok = ob_tableset_final_read(&r->tableset);
		r->stopping_query_until = 0;
		if (!final_ok)
			out = OB_OUTCOME_HALT;
		ob_delivery_write_holds(&r->d);
		confirmed = send_status(r, true);
		save = confirmed && ob_slotsave_needed(ob_pgsql_server_version(r->pg));
		if (!confirmed)
			ob_warn("could not confirm the final position");
		else
			ob_log_lsn(OB_LOG_INFO, r->sent_flush, NULL, 0, "confirmed " OB_LSN_FMT,
				   OB_LSN_ARGS(r->sent_flush));
		disconnect(r, true);
		if (save)
			(void)ob_slotsave_mark(r->cfg);
	}
	return out != OB_OUTCOME_HALT;
}

/* Set r up; false when the producer cannot be made (exit 2). */
static bool
relay_init(relay *r, const ob_config *cfg, bool create_only)
{
	ob_delivery_hooks hooks = {on_delivery_wait, on_delivery_cover, r};

	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	ob_mapper_init(&r->mapper, cfg);
	ob_decoder_init(&r->decoder, cfg->pg.plugin, cfg->outbox.id_column);
	ob_event_init(&r->ev);
	ob_timeline_init(&r->timeline);
	ob_backoff_init(&r->backoff, BACKOFF_FIRST_MS, cfg->pg.reconnect_max_backoff_ms);
	r->last_standby_log = -STANDBY_LOG_INTERVAL_MS;
	r->left_stream_ms = -OWN_WALSENDER_GRACE_MS;
	ob_tableset_init(&r->tableset, cfg, &r->d, on_query_tick, r);
	ob_cutover_init(&r->cutover, cfg, &r->d, create_only);
	return ob_delivery_init(&r->d, cfg, hooks);
}

static void
relay_free(relay *r)
{
	ob_delivery_free(&r->d);
	ob_event_free(&r->ev);
	ob_mapper_free(&r->mapper);
	ob_decoder_free(&r->decoder);
	ob_tableset_free(&r->tableset);
	ob_timeline_free(&r->timeline);
}

/* The slot is active in another process: say so (at most every
 * STANDBY_LOG_INTERVAL_MS) and wait standby_retry_ms, or only
 * OWN_WALSENDER_RETRY_MS just after this process left a stream. False when
 * a stop was requested meanwhile. */
static bool
wait_as_standby(relay *r)
{
	int64_t since_left;

	ob_error_repeat_reset(&r->err_repeat); /* losing a race for the slot is no server error */
	ob_metrics_set_connected(false, ob_delivery_connected(&r->d));
	since_left = ob_mono_ms() - r->left_stream_ms;
	if (since_left < OWN_WALSENDER_GRACE_MS) {
		if (since_left < OWN_WALSENDER_RETRY_MS)
			since_left = OWN_WALSENDER_RETRY_MS;
		if (since_left > r->cfg->pg.standby_retry_ms)
			since_left = r->cfg->pg.standby_retry_ms;
		ob_debug("replication slot %s is still active, most likely in the walsender of "
			 "the stream this process just left; retrying in %lld ms",
			 r->cfg->pg.slot, (long long)since_left);
		return ob_delivery_pause(&r->d, since_left, OB_READY_CONNECTING);
	}
	if (ob_mono_ms() - r->last_standby_log >= STANDBY_LOG_INTERVAL_MS) {
		ob_info("replication slot %s is active in another process; waiting as a standby, "
			"retrying every %d ms",
			r->cfg->pg.slot, r->cfg->pg.standby_retry_ms);
		r->last_standby_log = ob_mono_ms();
	}
	ob_notify_ready("standby");
	return ob_delivery_pause(&r->d, r->cfg->pg.standby_retry_ms, OB_READY_STANDBY);
}

/* The relay's body: stream (or, with create_only, create the slot with
 * its backlog) until a stop; returns the exit code. */
static int
relay_main(const ob_config *cfg, bool create_only)
{
	relay r;
	int exit_code = OB_EXIT_OK;
	bool running = true;
	ob_outcome out;
	int64_t ms;

	ob_runtime_start();
	if (!relay_init(&r, cfg, create_only)) {
		exit_code = OB_EXIT_CONFIG;
		goto out;
	}

	while (running && !ob_runtime_stop_requested()) {
		switch (run_connection(&r)) {
		case OB_OUTCOME_STOP:
			running = false;
			break;
		case OB_OUTCOME_HALT:
			exit_code = OB_EXIT_OPERATOR;
			running = false;
			break;
		case OB_OUTCOME_CONFIG:
			exit_code = OB_EXIT_CONFIG;
			running = false;
			break;
		case OB_OUTCOME_LOST:
			ob_backoff_reset(&r.backoff);
			ob_metrics_set_ready(OB_READY_CONNECTING);
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			break;
		case OB_OUTCOME_RETRY:
			ob_metrics_reconnect(OB_TARGET_POSTGRES);
			ms = ob_backoff_next(&r.backoff);
			ob_info("retrying in %lld ms", (long long)ms);
			running = ob_delivery_pause(&r.d, ms, OB_READY_CONNECTING);
			break;
		case OB_OUTCOME_STANDBY:
			running = wait_as_standby(&r);
			break;
		case OB_OUTCOME_REFILTER:
			break; /* the next stream reads the new partitions */
		case OB_OUTCOME_REPRODUCE:
			ob_timeline_rebase(&r.timeline, ob_tableset_confirmable(&r.tableset),
					   r.d.replay.handed_events);
			if (!ob_delivery_recreate(&r.d, ob_tableset_confirmable(&r.tableset),
						  &out)) {
				if (out == OB_OUTCOME_HALT)
					exit_code = OB_EXIT_OPERATOR; /* worked at start */
				running = false;
			}
			break;
		}
	}
	if (!shut_down(&r))
		exit_code = OB_EXIT_OPERATOR;

out:
	/* `slot create` succeeds only once the backlog is acknowledged. */
	if (create_only && !r.slot_created && exit_code == OB_EXIT_OK)
		exit_code = OB_EXIT_OPERATOR;
	relay_free(&r);
	return ob_runtime_exit("outboxd", exit_code);
}

int
ob_relay_run(const ob_config *cfg)
{
	return relay_main(cfg, false);
}

int
ob_relay_create_slot(const ob_config *cfg)
{
	return relay_main(cfg, true);
}
