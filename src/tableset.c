/*
 * tableset.c: the stream's tables, the ceiling and what may be confirmed
 * (see tableset.h).
 */
#include "outboxd/tableset.h"

#include <string.h>

#include "outboxd/log.h"
#include "outboxd/runtime.h"
#include "outboxd/tableprops.h"

/* The shortest gap between two reads of the stream's tables when
 * acknowledgements wait on the verified position. */
#define HURRIED_READ_MS 20

void
ob_tableset_init(ob_tableset *ts, const ob_config *cfg, ob_deliveries *d, ob_pgsql_tick_fn tick,
		 void *tick_ctx)
{
	memset(ts, 0, sizeof(*ts));
	ts->cfg = cfg;
	ts->deliveries = d;
	ob_leafset_init(&ts->tables);
	ob_leafset_init(&ts->latest);
	ts->ceiling = OB_TABLESET_NO_CEILING;
	ob_partwatch_init(&ts->watch, cfg, tick, tick_ctx);
	ob_slotwatch_init(&ts->slots);
}

void
ob_tableset_free(ob_tableset *ts)
{
	ob_partwatch_close(&ts->watch);
	ob_leafset_free(&ts->tables);
	ob_leafset_free(&ts->latest);
	ob_recpointdb_free(&ts->recpoint);
}

ob_lsn
ob_tableset_confirmable(ob_tableset *ts)
{
	ob_lsn lsn = ob_acktrack_confirmable(&ts->deliveries->ack);
	ob_lsn held = ob_hold_cap(&ts->deliveries->hold);

	if (lsn > held)
		lsn = held;
	return lsn < ts->ceiling ? lsn : ts->ceiling;
}

/* pgoutput decodes each change with the publication of its time: rows
 * written while it left the outbox's inserts out are never sent. Nothing
 * after the last position it was seen unchanged at is confirmed. */
static void
log_publication_changed(ob_tableset *ts)
{
	ob_log_lsn(OB_LOG_ERROR, ob_tableset_confirmable(ts), NULL, 0,
		   "publication %s changed while outboxd streamed it (now: %s; was: %s): rows "
		   "written after " OB_LSN_FMT " may not have been sent by Postgres; stopping "
		   "without confirming past it. Restore the publication, then drop the slot "
		   "(\"outboxd slot drop\") and start outboxd with outbox.backlog_where to "
		   "publish the rows written since then",
		   ts->cfg->pg.publication, ts->latest.stamp, ts->tables.stamp,
		   OB_LSN_ARGS(ts->ceiling));
}

/* A table of the outbox turned UNLOGGED: the rows written to it from
 * then on are in no WAL, and no decoder can send them. Nothing after the
 * last position it was seen logged at is confirmed. */
static void
log_unlogged(ob_tableset *ts)
{
	const ob_config *cfg = ts->cfg;
	char detail[1024];

	ob_tableprops_unlogged_detail(ts->latest.unlogged, cfg->outbox.schema,
				      cfg->outbox.table_name, detail, sizeof(detail));
	ob_log_lsn(
	    OB_LOG_ERROR, ob_tableset_confirmable(ts), NULL, 0,
	    "%s; it turned UNLOGGED while outboxd streamed it: rows written to it after " OB_LSN_FMT
	    " may never have been written to the WAL; stopping without "
	    "confirming past it. Once it is logged again, drop the slot (\"outboxd slot "
	    "drop\") and start outboxd with outbox.backlog_where to publish the rows still "
	    "in the table that were written since then",
	    detail, OB_LSN_ARGS(ts->ceiling));
}

/* The set just read into ts->latest: while the stream's tables are
 * unchanged, the ceiling moves up to its verified position; a leaf the
 * stream does not read ends the stream (false, *out set), and the next
 * stream reads it; a changed publication or an unlogged table halts. */
static bool
take_latest(ob_tableset *ts, ob_outcome *out)
{
	bool unlogged = ts->latest.unlogged[0] != '\0';

	if (unlogged || strcmp(ts->latest.stamp, ts->tables.stamp) != 0) {
		/* The final read at the stop finds it again: logged once. */
		if (unlogged && !ts->halted)
			log_unlogged(ts);
		else if (!ts->halted)
			log_publication_changed(ts);
		ts->halted = true;
		*out = OB_OUTCOME_HALT;
		return false;
	}
	if (ob_leafset_missing(&ts->latest, &ts->tables, NULL, 0) > 0) {
		*out = OB_OUTCOME_REFILTER;
		return false;
	}
	if (ts->latest.verified > ts->ceiling)
		ts->ceiling = ts->latest.verified;
	return true;
}

bool
ob_tableset_watch(ob_tableset *ts, ob_lsn wal_end, ob_outcome *out)
{
	if (!ob_partwatch_poll(&ts->watch, &ts->latest)) {
		if (!ob_partwatch_failing(&ts->watch))
			return true;
		*out = OB_OUTCOME_RETRY;
		return false;
	}
	ob_slotwatch_poll(&ts->slots, ts->watch.conn, ts->cfg, wal_end);
	ob_recpointdb_poll(&ts->recpoint, ts->watch.conn, ts->cfg, ob_tableset_confirmable(ts));
	ob_retention_poll(&ts->retention, ts->watch.conn, ts->cfg, &ts->recpoint);
	return take_latest(ts, out);
}

bool
ob_tableset_cover(ob_tableset *ts, ob_outcome *out)
{
	const ob_replay *replay = &ts->deliveries->replay;
	char err[512];

	if (ts->cfg->pg.plugin != OB_PLUGIN_WAL2JSON || !ts->tables.partitioned)
		return true;
	while (replay->unit > ob_pos_bound(ts->ceiling)) {
		if (ob_runtime_stop_requested()) {
			*out = OB_OUTCOME_STOP;
			return false;
		}
		if (!ob_partwatch_read(&ts->watch, &ts->latest, err, sizeof(err))) {
			ob_warn("could not read the partitions of %s.%s: %s",
				ts->cfg->outbox.schema, ts->cfg->outbox.table_name, err);
			ob_partwatch_close(&ts->watch);
			*out = OB_OUTCOME_RETRY;
			return false;
		}
		if (!take_latest(ts, out))
			return false;
		if (replay->unit > ob_pos_bound(ts->ceiling) &&
		    !ob_delivery_serve(ts->deliveries, 5, out))
			return false;
	}
	return true;
}

void
ob_tableset_committed(ob_tableset *ts, ob_lsn end_lsn)
{
	ts->events_end = end_lsn;
}

int64_t
ob_tableset_wait_ms(ob_tableset *ts, bool drained, int64_t wait_ms)
{
	int64_t due;

	if (drained && ts->events_end > ts->ceiling &&
	    ob_acktrack_confirmable(&ts->deliveries->ack) >= ts->events_end)
		ob_partwatch_hurry(&ts->watch, HURRIED_READ_MS);
	due = ob_partwatch_due_ms(&ts->watch) - ob_mono_ms();
	return wait_ms > due ? due : wait_ms;
}

ob_pg_status
ob_tableset_start(ob_tableset *ts, ob_pgconn *pg)
{
	const ob_config *cfg = ts->cfg;
	ob_deliveries *d = ts->deliveries;
	char err[512], added[512];
	bool ok;

	ob_recpointdb_init(&ts->recpoint);
	ob_retention_init(&ts->retention);
	/* pgoutput's publication is never read on the replication
	 * connection (see check.c). */
	if (cfg->pg.plugin == OB_PLUGIN_PGOUTPUT)
		ok = ob_partwatch_read(&ts->watch, &ts->latest, err, sizeof(err));
	else
		ok = ob_partitions_read(pg, cfg, &ts->latest, err, sizeof(err));
	if (!ok) {
		ob_error("could not read the %s of %s.%s: %s",
			 cfg->pg.plugin == OB_PLUGIN_PGOUTPUT ? "publication" : "partitions",
			 cfg->outbox.schema, cfg->outbox.table_name, err);
		ob_partwatch_close(&ts->watch);
		return OB_PG_RETRY;
	}
	if (ts->latest.unlogged[0] != '\0') {
		ob_tableprops_unlogged_detail(ts->latest.unlogged, cfg->outbox.schema,
					      cfg->outbox.table_name, err, sizeof(err));
		ob_error("%s", err);
		return OB_PG_FATAL;
	}
	if (ts->have_tables && strcmp(ts->latest.stamp, ts->tables.stamp) != 0) {
		log_publication_changed(ts);
		return OB_PG_FATAL;
	}
	if (ts->have_tables &&
	    ob_leafset_missing(&ts->latest, &ts->tables, added, sizeof(added)) > 0) {
		ob_acktrack_rewind(&d->ack, ts->ceiling);
		ob_replay_rewind(&d->replay, ts->ceiling);
		ob_log_lsn(OB_LOG_INFO, ob_tableset_confirmable(ts), NULL, 0,
			   "new partitions of %s.%s: %s; reading the slot again from " OB_LSN_FMT
			   " with them (events committed after it are published again)",
			   cfg->outbox.schema, cfg->outbox.table_name, added,
			   OB_LSN_ARGS(ob_tableset_confirmable(ts)));
	}
	ob_leafset_swap(&ts->tables, &ts->latest);
	ts->have_tables = true;
	/* A read that verified no position (a commit not visible yet) leaves
	 * the ceiling where the stream starts. */
	ts->ceiling =
	    ts->tables.verified != 0 ? ts->tables.verified : ob_acktrack_confirmable(&d->ack);
	if (ts->tables.partitioned)
		ob_debug("streaming %zu tables of partitioned %s.%s (verified at " OB_LSN_FMT ")",
			 ts->tables.len, cfg->outbox.schema, cfg->outbox.table_name,
			 OB_LSN_ARGS(ts->tables.verified));
	return OB_PG_OK;
}

bool
ob_tableset_final_read(ob_tableset *ts)
{
	ob_outcome out = OB_OUTCOME_STOP;
	char err[512];

	if (!ob_partwatch_read(&ts->watch, &ts->latest, err, sizeof(err)))
		return true;
	return take_latest(ts, &out) || out != OB_OUTCOME_HALT;
}

void
ob_tableset_close(ob_tableset *ts)
{
	ob_partwatch_close(&ts->watch);
}
