/*
 * slotrecover.c: a lost slot recovered from the outbox table
 * (slotrecover.h).
 */
#include "outboxd/slotrecover.h"

#include <inttypes.h>
#include <stdio.h>

#include "outboxd/delivery.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/pgrepl.h"
#include "outboxd/pgsql.h"
#include "outboxd/recpoint.h"
#include "outboxd/recpointdb.h"
#include "outboxd/runtime.h"
#include "outboxd/slotmark.h"

/* How long after a delete its rows reach the statistics, at most: a
 * backend reports its counts at most once a second and holds them back
 * meanwhile, for up to 10 s while it stays idle (PostgreSQL 15+,
 * PGSTAT_IDLE_INTERVAL); with a margin. A session that stays inside
 * transaction blocks reports only once it goes idle: not bounded. */
#define STATS_SETTLE_MS 12000

/* How a loss is said in the log. */
static const char *
loss_words(ob_slot_loss loss)
{
	switch (loss) {
	case OB_SLOT_LOSS_INVALIDATED:
		return "has been invalidated (wal_status lost)";
	case OB_SLOT_LOSS_PROMOTED:
		return "is missing on the promoted server";
	case OB_SLOT_LOSS_UNDECODABLE:
		return "cannot be decoded: its stream fails at the same change every time (a "
		       "PostgreSQL bug of new slots: a relation given a new file while the slot "
		       "was made, by a TRUNCATE or a new partition, is missing from the catalog "
		       "view it rebuilt)";
	case OB_SLOT_LOSS_MISSING:
	case OB_SLOT_LOSS_NONE:
	case OB_SLOT_LOSS_KINDS:
		break;
	}
	return "is missing while its marker row is there (dropped, or the database restored)";
}

/* An undecodable slot is found by the stream, on a hot standby too, whose
 * read-only table holds no recovery (nor does its slot's marker): OB_PG_OK
 * on a primary, OB_PG_FATAL (logged, naming the recovery by hand) on a
 * standby, OB_PG_RETRY on a failed query. */
static ob_pg_status
on_primary(ob_pgconn *p, const ob_config *cfg, ob_slot_loss loss)
{
	bool standby = false;

	if (!ob_pgrepl_in_recovery(p, &standby))
		return OB_PG_RETRY;
	if (!standby)
		return OB_PG_OK;
	ob_error(
	    "replication slot %s %s on a hot standby, where outboxd recovers no slot; "
	    "stopping. Drop it (SELECT pg_drop_replication_slot('%s')), then " OB_SLOTMARK_RECOVERY,
	    cfg->pg.slot, loss_words(loss), cfg->pg.slot);
	return OB_PG_FATAL;
}

/* Read the recovery point and judge it on a plain connection into *f,
 * and with drop, drop the invalidated or undecodable slot it replaces
 * (an unused one: a slot another process holds is left, and the cutover
 * then finds it there). OB_PG_FATAL
 * (logged, saying when when is not "") when the table cannot prove
 * completeness; OB_PG_RETRY (logged) on a failed query. */
static ob_pg_status
prepare(const ob_config *cfg, ob_slot_loss loss, bool drop, const char *when, ob_recovery_facts *f)
{
	ob_pgconn *p;
	ob_pgres *res = NULL;
	ob_pg_status st = ob_pgsql_connect(cfg, OB_PGCONN_PLAIN, &p);
	char why[512];

	if (st != OB_PG_OK)
		return st;
	/* A table it judges locked for long (an ALTER, a VACUUM FULL in an
	 * open transaction) ends the attempt: the next comes after a
	 * backoff, and a stop is heard between the two. */
	if (!ob_pgsql_command(p, OB_LOG_WARNING, "bound the recovery's lock waits",
			      "SET lock_timeout = '10s'")) {
		st = OB_PG_RETRY;
		goto done;
	}
	if (loss == OB_SLOT_LOSS_UNDECODABLE && (st = on_primary(p, cfg, loss)) != OB_PG_OK)
		goto done;
	if ((st = ob_recpointdb_facts(p, cfg, f)) != OB_PG_OK)
		goto done;
	if (!ob_slotloss_recoverable(f, why, sizeof(why))) {
		ob_error("replication slot %s %s and cannot be recovered from the outbox table%s: "
			 "%s; stopping. To recover by hand, %s" OB_SLOTMARK_RECOVERY,
			 cfg->pg.slot, loss_words(loss), when, why,
			 loss == OB_SLOT_LOSS_UNDECODABLE
			     ? "drop it (pg_drop_replication_slot), then "
			     : "");
		st = OB_PG_FATAL;
		goto done;
	}
	if (!drop)
		goto done;
	ob_runtime_crash_point("recovery-judged");
	/* An invalidated one only while it still is (17+ name every
	 * invalidation: 18's idle timeout leaves wal_status be). */
	if ((loss == OB_SLOT_LOSS_INVALIDATED || loss == OB_SLOT_LOSS_UNDECODABLE) &&
	    !ob_pgsql_query_row(p, OB_LOG_WARNING, "drop the lost slot", 1, &res,
				"SELECT count(*) FROM (SELECT pg_drop_replication_slot(slot_name) "
				"FROM pg_replication_slots AS s WHERE slot_name = %L AND "
				"active_pid IS NULL AND %s) AS dropped",
				cfg->pg.slot,
				loss == OB_SLOT_LOSS_UNDECODABLE
				    ? "true"
				    : "(wal_status = 'lost' OR to_jsonb(s) ->> "
				      "'invalidation_reason' IS NOT NULL)"))
		st = OB_PG_RETRY;
	ob_runtime_crash_point("recovery-prepared");
done:
	ob_pgres_free(res);
	ob_pgsql_close(p);
	return st;
}

ob_outcome
ob_slotrecover_run(ob_cutover *c)
{
	const ob_config *cfg = c->cfg;
	ob_slot_loss loss = c->lost;
	int64_t started = ob_mono_ms();
	ob_recovery_facts f;
	ob_outcome out;
	ob_config rc;
	char where[128];
	bool created = false, ok;

	c->lost = OB_SLOT_LOSS_NONE;
	ob_metrics_set_ready(OB_READY_RECOVERING);
	switch (prepare(cfg, loss, true, "", &f)) {
	case OB_PG_OK:
		break;
	case OB_PG_FATAL:
		return OB_OUTCOME_HALT;
	case OB_PG_RETRY:
	case OB_PG_STANDBY:
		return ob_runtime_stop_requested() ? OB_OUTCOME_STOP : OB_OUTCOME_RETRY;
	}
	ob_recpoint_backlog_where(f.xid, where, sizeof(where));
	ob_warn("replication slot %s %s: recovering it from the outbox table "
		"(postgres.on_slot_lost = recover): publishing again the rows past recovery point "
		"%" PRIu64 " (outbox.backlog_where=\"%s\"), then streaming from a new slot",
		cfg->pg.slot, loss_words(loss), f.xid, where);
	/* The cutover with the point's rows as its backlog, and a slot made
	 * whatever postgres.create_slot says: the operator chose recover. */
	rc = *cfg;
	rc.pg.create_slot = true;
	rc.outbox.backlog_where = where;
	c->cfg = &rc;
	c->recovering = loss;
	ok = ob_cutover_run(c, &created, &out);
	c->cfg = cfg;
	c->recovering = OB_SLOT_LOSS_NONE;
	if (!ok)
		return out;
	/* Another process made the slot meanwhile, or the invalidated one
	 * could not be dropped (still held): connect again after a backoff,
	 * never in a tight loop. */
	if (!created)
		return OB_OUTCOME_RETRY;
	ob_metrics_slot_recovery(loss);
	ob_warn("recovered replication slot %s in %.1f s: %" PRIu64
		" rows past recovery point %" PRIu64 " published again (those published "
		"before the loss are duplicates)",
		cfg->pg.slot, (double)(ob_mono_ms() - started) / 1000.0, c->published, f.xid);
	return OB_OUTCOME_LOST;
}

ob_outcome
ob_slotrecover_stuck(ob_cutover *c, const char *state, const char *msg, ob_lsn at, int times)
{
	bool undecodable = ob_slotloss_undecodable(state, msg);

	if (undecodable && c->cfg->pg.recover_lost_slot) {
		c->lost = OB_SLOT_LOSS_UNDECODABLE;
		return ob_slotrecover_run(c);
	}
	ob_log_lsn(OB_LOG_ERROR, at, NULL, 0,
		   "the server failed %d times in a row at " OB_LSN_FMT
		   " with the same error: %s (SQLSTATE %s); stopping: replication slot %s cannot "
		   "get past it%s",
		   times, OB_LSN_ARGS(at), msg, state, c->cfg->pg.slot,
		   undecodable ? " (a PostgreSQL bug of new slots: with postgres.on_slot_lost = "
				 "recover, outboxd drops the slot and recovers it from the outbox "
				 "table)"
			       : "");
	return OB_OUTCOME_HALT;
}

bool
ob_slotrecover_recheck(ob_cutover *c, ob_outcome *out)
{
	int64_t settle = c->snapshot_ms + STATS_SETTLE_MS - ob_mono_ms();
	ob_recovery_facts f;

	if (settle > 0) {
		ob_debug("recovery of slot %s: judging the outbox table again in %.1f s, once the "
			 "statistics counted the deletes before the snapshot",
			 c->cfg->pg.slot, (double)settle / 1000.0);
		if (!ob_delivery_pause(c->deliveries, settle, OB_READY_RECOVERING)) {
			*out = OB_OUTCOME_STOP;
			return false;
		}
	}
	switch (prepare(c->cfg, c->recovering, false,
			" (found once its backlog was published; no slot was made)", &f)) {
	case OB_PG_OK:
		return true;
	case OB_PG_FATAL:
		*out = OB_OUTCOME_HALT;
		return false;
	case OB_PG_RETRY:
	case OB_PG_STANDBY:
		break;
	}
	*out = ob_runtime_stop_requested() ? OB_OUTCOME_STOP : OB_OUTCOME_RETRY;
	return false;
}
