/*
 * cutover.c: the backlog, then the slot (see cutover.h).
 */
#include "outboxd/cutover.h"

#include <stdio.h>
#include <unistd.h>

#include "outboxd/backlog.h"
#include "outboxd/check.h"
#include "outboxd/log.h"
#include "outboxd/notify.h"
#include "outboxd/pgrepl.h"
#include "outboxd/runtime.h"
#include "outboxd/slotmark.h"
#include "outboxd/slotrecover.h"

/* First wait before the copy is tried again; doubles up to
 * reconnect_max_backoff_ms. */
#define COPY_BACKOFF_FIRST_MS   100
/* How often the backlog's progress is logged. */
#define BACKLOG_LOG_INTERVAL_MS 5000
/* How long to wait before writing the backlog's held events again. */
#define HOLD_RETRY_MS           1000

void
ob_cutover_init(ob_cutover *c, const ob_config *cfg, ob_deliveries *d, bool create_only)
{
	c->cfg = cfg;
	c->deliveries = d;
	c->create_only = create_only;
	c->backlog_end = 0;
	c->recovering = OB_SLOT_LOSS_NONE;
	c->snapshot_ms = 0;
	c->lost = OB_SLOT_LOSS_NONE;
	c->published = 0;
}

/* What /readyz says while the backlog is published. */
static ob_ready_state
busy_state(const ob_cutover *c)
{
	return c->recovering != OB_SLOT_LOSS_NONE ? OB_READY_RECOVERING : OB_READY_BACKLOG;
}

/* While a query of the cutover waits for the server: stay alive, keep
 * serving delivery reports, and give up when asked to stop. */
static bool
on_query_tick(void *ctx)
{
	ob_cutover *c = ctx;

	ob_delivery_alive(c->deliveries, false);
	ob_delivery_poll(c->deliveries, 0);
	return !ob_runtime_stop_requested();
}

/* Log the backlog's progress (rows handed over, their rate, what the
 * planner's estimate leaves) and tell systemd. */
static void
log_progress(int64_t started_ms, uint64_t rows, int64_t estimate)
{
	double secs = (double)(ob_mono_ms() - started_ms) / 1000.0;
	long long left = estimate > (int64_t)rows ? (long long)(estimate - (int64_t)rows) : 0;
	char status[128];

	ob_info("backlog: %llu rows handed to the producer in %.1f s (%.0f rows/s), about %lld "
		"left",
		(unsigned long long)rows, secs, secs > 0 ? (double)rows / secs : 0.0, left);
	snprintf(status, sizeof(status), "publishing the backlog: %llu rows, about %lld left",
		 (unsigned long long)rows, left);
	ob_notify_status(status);
}

/* A backlog status other than OB_PG_OK: false with *out set (a refused
 * predicate or order is a configuration error, logged here). */
static bool
backlog_failed(ob_backlog *b, ob_pg_status st, ob_outcome *out)
{
	if (st == OB_PG_FATAL) {
		ob_error("%s; stopping: no slot was created", ob_backlog_error(b));
		*out = OB_OUTCOME_CONFIG;
	} else {
		*out = ob_runtime_stop_requested() ? OB_OUTCOME_STOP : OB_OUTCOME_RETRY;
	}
	return false;
}

/* Hand every row of the backlog over as one unit known by the temporary
 * slot's consistent point, and wait until the broker has acknowledged all
 * of them (or their dead-letter records). The producer's backpressure
 * applies: no row is read while its queue is full. False with *out set
 * when the relay must stop trying. */
static bool
publish_rows(ob_cutover *c, ob_backlog *b, ob_lsn consistent, ob_outcome *out)
{
	ob_deliveries *d = c->deliveries;
	int64_t started = ob_mono_ms(), last_log = started, now_us = ob_now_us();
	int64_t estimate = ob_backlog_estimate(b);
	uint64_t rows = 0;
	const ob_text_row *row;
	ob_mapper mapper;
	ob_event ev;
	ob_pg_status st;
	bool ok = false;

	ob_info("publishing the backlog: outbox rows where %s (about %lld rows), then streaming "
		"from " OB_LSN_FMT,
		c->cfg->outbox.backlog_where, (long long)estimate, OB_LSN_ARGS(consistent));
	ob_metrics_set_ready(busy_state(c));
	ob_notify_status("publishing the backlog");
	ob_mapper_init(&mapper, c->cfg);
	ob_event_init(&ev);
	d->backlog = true;
	ob_delivery_begin(d, ob_pos_backlog(consistent), now_us, false);
	while ((st = ob_backlog_next(b, &row)) == OB_PG_OK && row != NULL) {
		ob_map_result mr =
		    ob_mapper_map_text_row(&mapper, row, consistent, now_us / 1000, &ev);

		if (!ob_delivery_hand_over(d, &ev, mr, consistent, out))
			goto done;
		if (++rows % 1000 != 0)
			continue;
		ob_runtime_crash_point("cutover-publishing");
		if (ob_runtime_stop_requested()) {
			*out = OB_OUTCOME_STOP;
			goto done;
		}
		if (!ob_delivery_serve(d, 0, out))
			goto done;
		ob_delivery_alive(d, false);
		if (ob_mono_ms() - last_log >= BACKLOG_LOG_INTERVAL_MS) {
			log_progress(started, rows, estimate);
			last_log = ob_mono_ms();
		}
	}
	if (st != OB_PG_OK)
		ok = backlog_failed(b, st, out);
	else
		ok = ob_delivery_settle(d, out);
	/* The backlog's held events (hold.h) are written before its slot is
	 * made: the slot starts after the backlog, which no stream sends
	 * again. The temporary slot waits meanwhile. */
	while (ok && !ob_hold_write(&d->hold)) {
		if (!ob_delivery_pause(d, HOLD_RETRY_MS, busy_state(c))) {
			*out = OB_OUTCOME_STOP;
			ok = false;
		}
	}
	c->published = ok ? rows : 0;
	if (ok) {
		ob_runtime_crash_point("cutover-published");
		ob_info("backlog published: %llu rows acknowledged in %.1f s",
			(unsigned long long)rows, (double)(ob_mono_ms() - started) / 1000.0);
	}
done:
	/* Its ack tracker entry confirms no WAL position: the slot it would
	 * end at may never be created (a crash, or another process creating
	 * the slot first), and the stream starts at the slot's own confirmed
	 * position; its events still count until acknowledged. A backlog read
	 * again is read from a new snapshot, of which nothing may be skipped. */
	ob_delivery_end_backlog(d);
	ob_event_free(&ev);
	ob_mapper_free(&mapper);
	return ok;
}

/* One attempt at copying the temporary slot tmp_slot into the permanent
 * one, on a plain connection of its own: any error on the replication
 * connection that holds tmp_slot would drop it (a walsender drops its
 * temporary slots on every error). */
static ob_pg_status
copy_once(ob_cutover *c, const char *tmp_slot)
{
	ob_pgconn *p;
	ob_pg_status st = ob_pgsql_connect(c->cfg, OB_PGCONN_PLAIN, &p);

	if (st != OB_PG_OK)
		return st;
	ob_pgsql_set_tick(p, on_query_tick, c);
	st = ob_pgrepl_copy_slot(p, tmp_slot, c->cfg->pg.slot);
	/* A row not written now is written when the stream takes the slot. */
	if (st == OB_PG_OK && !ob_slotmark_write(p, c->cfg))
		ob_info("the slot's marker row is written on the next connection");
	ob_pgsql_close(p);
	return st;
}

/* Copy the temporary slot tmp_slot, held by the replication connection
 * tmp, into the permanent slot once the backlog is acknowledged. A failed
 * copy (no slot free, say) is tried again with backoff while the
 * temporary slot exists, so the backlog is not published again for it;
 * once it is gone (its connection dropped), the next attempt publishes the
 * backlog again. When another process created the slot meanwhile, true
 * with *created false: the stream starts at that slot's own position.
 * False with *out set otherwise. */
static bool
copy_slot(ob_cutover *c, ob_pgconn *tmp, const char *tmp_slot, ob_lsn consistent, bool *created,
	  ob_outcome *out)
{
	ob_backoff backoff;
	ob_slot_info info;
	ob_pg_status st;

	ob_backoff_init(&backoff, COPY_BACKOFF_FIRST_MS, c->cfg->pg.reconnect_max_backoff_ms);
	while ((st = copy_once(c, tmp_slot)) == OB_PG_RETRY) {
		int64_t ms;

		/* A query that succeeds leaves tmp's temporary slot alone. */
		if (!ob_pgrepl_slot_info(tmp, tmp_slot, &info) || !info.exists) {
			ob_warn(
			    "the temporary slot %s is gone; the backlog will be published again",
			    tmp_slot);
			*out = OB_OUTCOME_RETRY;
			return false;
		}
		ms = ob_backoff_next(&backoff);
		ob_info("retrying the copy in %lld ms; the backlog is acknowledged and is "
			"published again only if outboxd stops before the copy succeeds",
			(long long)ms);
		if (!ob_delivery_pause(c->deliveries, ms, busy_state(c))) {
			*out = OB_OUTCOME_STOP;
			return false;
		}
	}
	*created = st == OB_PG_OK;
	if (*created)
		ob_log_lsn(OB_LOG_INFO, consistent, NULL, 0,
			   "created replication slot %s with plugin %s at " OB_LSN_FMT
			   ", where the backlog ends",
			   c->cfg->pg.slot, ob_plugin_name(c->cfg->pg.plugin),
			   OB_LSN_ARGS(consistent));
	return true;
}

/* The slot is missing and the backlog is about to be published: when its
 * marker says it was lost (slotmark.h), the backlog is the operator's
 * recovery, said in the log (by `slot create --accept-gap` itself, which
 * refuses a lost slot without it); the marker's table must be writable
 * before any slot is made. Nothing of this on a hot standby. A loss to
 * recover from the recovery point instead (slotrecover.h) sets c->lost:
 * OB_PG_FATAL, logged by the recovery. */
static ob_pg_status
lost_slot_recovery(ob_cutover *c, ob_pgconn *p)
{
	char since[64];
	bool marked, standby;
	ob_pg_status st;

	if (!ob_pgrepl_in_recovery(p, &standby))
		return OB_PG_RETRY;
	if (standby)
		return OB_PG_OK;
	if ((st = ob_slotmark_ready(p, c->cfg)) != OB_PG_OK ||
	    (st = ob_slotmark_read(p, c->cfg, &marked, since, sizeof(since))) != OB_PG_OK)
		return st;
	if (!marked || c->create_only || c->recovering != OB_SLOT_LOSS_NONE)
		return OB_PG_OK;
	if (c->cfg->pg.recover_lost_slot) {
		c->lost = OB_SLOT_LOSS_MISSING;
		return OB_PG_FATAL;
	}
	ob_warn("replication slot %s was lost (outboxd created it at %s): publishing the "
		"outbox rows of outbox.backlog_where \"%s\" again before a new slot is "
		"made; rows outside it committed since the loss are not published",
		c->cfg->pg.slot, since, c->cfg->outbox.backlog_where);
	return OB_PG_OK;
}

bool
ob_cutover_run(ob_cutover *c, bool *created, ob_outcome *out)
{
	const ob_config *cfg = c->cfg;
	ob_pgconn *tmp = NULL;
	ob_backlog *b = NULL;
	ob_slot_info info;
	ob_lsn consistent = 0;
	char tmp_slot[64], snapshot[128];
	ob_pg_status st;
	bool ok = false;

	*created = false;
	*out = OB_OUTCOME_RETRY;
	if (ob_pgrepl_connect(cfg, &tmp) != OB_PG_OK)
		return false;
	ob_pgsql_set_tick(tmp, on_query_tick, c);
	if (!ob_pgrepl_slot_info(tmp, cfg->pg.slot, &info))
		goto close;
	if (info.exists || (!cfg->pg.create_slot && !c->create_only)) {
		ok = true;
		goto close;
	}
	/* The table and its columns first, so a missing one is named as
	 * such (exit 1), not as a predicate the server refuses. */
	if ((st = ob_check_database(tmp, cfg, NULL)) != OB_PG_OK) {
		*out = st == OB_PG_FATAL ? OB_OUTCOME_HALT : OB_OUTCOME_RETRY;
		goto close;
	}
	if (ob_backlog_connect(cfg, on_query_tick, c, &b) != OB_PG_OK)
		goto close;
	if ((st = ob_backlog_verify(b)) != OB_PG_OK) {
		ok = backlog_failed(b, st, out);
		goto close;
	}
	if ((st = lost_slot_recovery(c, tmp)) != OB_PG_OK) {
		*out = st == OB_PG_FATAL ? OB_OUTCOME_HALT : OB_OUTCOME_RETRY;
		goto close;
	}
	snprintf(tmp_slot, sizeof(tmp_slot), "%.40s_backlog_%d", cfg->pg.slot, (int)getpid());
	switch (ob_pgrepl_create_exported_slot(tmp, tmp_slot, cfg->pg.plugin, &consistent, snapshot,
					       sizeof(snapshot))) {
	case OB_PG_OK:
		break;
	case OB_PG_FATAL:
		*out = OB_OUTCOME_HALT;
		goto close;
	case OB_PG_RETRY:
	case OB_PG_STANDBY:
		goto close;
	}
	c->snapshot_ms = ob_mono_ms();
	/* Suspects of an earlier attempt are known by its consistent point. */
	if (c->backlog_end != 0 && c->backlog_end != consistent)
		ob_replay_rebase(&c->deliveries->replay, ob_pos_backlog(c->backlog_end),
				 ob_pos_backlog(consistent));
	c->backlog_end = consistent;
	ob_runtime_crash_point("cutover-temp-slot");
	if ((st = ob_backlog_start(b, snapshot)) != OB_PG_OK) {
		ok = backlog_failed(b, st, out);
		goto close;
	}
	ok = publish_rows(c, b, consistent, out);
	ob_backlog_close(b); /* its snapshot is no longer needed */
	b = NULL;
	/* Rows deleted or truncated after a recovery judged the table and
	 * before the snapshot was taken (the slot's creation waits for
	 * running transactions) are in neither the backlog nor the stream. */
	if (ok && c->recovering != OB_SLOT_LOSS_NONE)
		ok = ob_slotrecover_recheck(c, out);
	if (ok)
		ok = copy_slot(c, tmp, tmp_slot, consistent, created, out);
	if (ok && *created)
		ob_runtime_crash_point("cutover-copied");
close:
	ob_backlog_close(b);
	ob_pgrepl_close(tmp, false);
	return ok;
}
