/*
 * fork.c: the stream across a promotion (fork.h).
 */
#include "outboxd/fork.h"

#include <stdio.h>
#include <stdlib.h>

#include "outboxd/log.h"
#include "outboxd/metrics.h"

/* TIMELINE_HISTORY: the history file of timeline tli (2 or more), its
 * lines "parent-tli switch-point reason" (timeline.h). *content is
 * allocated, the caller frees it. False (logged) on error. */
static bool
timeline_history(ob_pgconn *pg, int tli, char **content)
{
	char cmd[64], err[256];
	ob_pgres *res;
	bool ok;

	snprintf(cmd, sizeof(cmd), "TIMELINE_HISTORY %d", tli);
	res = ob_pgsql_exec(pg, cmd);
	ok = ob_pgres_tuples(res) && ob_pgres_rows(res) == 1 && ob_pgres_columns(res) >= 2;
	*content = ok ? ob_xstrdup(ob_pgres_value(res, 0, 1)) : NULL;
	if (!ok)
		ob_error("could not read the history of timeline %d: %s", tli,
			 ob_pgres_error(res, err, sizeof(err)));
	ob_pgres_free(res);
	return ok;
}

/* Where the server's timeline tli left timeline was: false when its
 * history does not say (a server on an older timeline than the one
 * streamed from, or one that is not its descendant). OB_PG_RETRY when the
 * history cannot be read. */
static ob_pg_status
find_switch_point(ob_pgconn *pg, int tli, int was, bool *known, ob_lsn *switch_point)
{
	char *history;

	*known = false;
	if (tli < was)
		return OB_PG_OK;
	if (!timeline_history(pg, tli, &history))
		return OB_PG_RETRY;
	*known = ob_timeline_switch_point(history, was, switch_point);
	free(history);
	return OB_PG_OK;
}

/* The slot on the new server starts past the switch point: the server
 * streams from there whatever outboxd asks, so the new timeline's
 * transactions between the two are not read. Said, since nothing else
 * can be done about it. */
static void
check_slot_start(ob_pgconn *pg, const ob_config *cfg, ob_lsn switch_point)
{
	ob_slot_info info;

	if (!ob_pgrepl_slot_info(pg, cfg->pg.slot, &info) || !info.exists ||
	    info.confirmed_flush <= switch_point)
		return;
	ob_warn("replication slot %s on the promoted server is confirmed up to " OB_LSN_FMT
		", past the switch point " OB_LSN_FMT ": the server streams from there, and "
		"outbox rows the new timeline committed in between are not published; "
		"republish them with outbox.backlog_where (README, \"Failover\")",
		cfg->pg.slot, OB_LSN_ARGS(info.confirmed_flush), OB_LSN_ARGS(switch_point));
}

/* Whether a unit replay counts as handed over (whole, or cut off in the
 * middle) lies past switch_point: a transaction whose commit the new
 * timeline does not have, though every record of it read so far lies
 * before the switch point (a transaction cut off by the crash). */
static bool
handed_past(const ob_replay *r, ob_lsn switch_point)
{
	ob_pos bound = ob_pos_bound(switch_point);

	return r->handed > bound || r->partial > bound;
}

ob_pg_status
ob_fork_follow(ob_timeline *tl, ob_pgconn *pg, int tli, ob_deliveries *d, ob_lsn *received)
{
	int was = tl->tli;
	ob_lsn switch_point = 0, reached = *received;
	ob_lsn confirmable = ob_acktrack_confirmable(&d->ack);
	uint64_t beyond;
	bool known, exact;
	ob_pg_status st;

	if (was == 0 || was == tli) {
		tl->tli = tli;
		return OB_PG_OK;
	}
	st = find_switch_point(pg, tli, was, &known, &switch_point);
	if (st != OB_PG_OK)
		return st;
	if (confirmable > reached)
		reached = confirmable;
	if (ob_pos_lsn(d->replay.handed) > reached)
		reached = ob_pos_lsn(d->replay.handed);
	if (ob_pos_lsn(d->replay.partial) > reached)
		reached = ob_pos_lsn(d->replay.partial);
	if (known && reached <= switch_point && !handed_past(&d->replay, switch_point)) {
		ob_info("the server is on timeline %d now (was %d), which left timeline %d "
			"at " OB_LSN_FMT ", past everything read from it (" OB_LSN_FMT
			"): a standby was promoted, "
			"and the stream goes on",
			tli, was, was, OB_LSN_ARGS(switch_point), OB_LSN_ARGS(reached));
		ob_metrics_timeline_switch(0);
		tl->tli = tli;
		return OB_PG_OK;
	}
	beyond = ob_timeline_forget_after(tl, known ? switch_point : confirmable,
					  d->replay.handed_events, &exact);
	/* Unknown: go back to the slot's own position (0), the one place the
	 * new server vouches for, and forget every mark (all lie past it). */
	if (!known) {
		bool all;

		switch_point = 0;
		(void)ob_timeline_forget_after(tl, 0, 0, &all);
	}
	ob_acktrack_rewind(&d->ack, switch_point);
	ob_replay_rewind(&d->replay, switch_point);
	if (*received > switch_point)
		*received = switch_point;
	ob_metrics_timeline_switch(beyond);
	if (known && beyond == 0 && exact)
		ob_info("the server is on timeline %d now (was %d), which left timeline %d "
			"at " OB_LSN_FMT ", before outboxd's position " OB_LSN_FMT
			" (WAL without events): reading the "
			"slot again from there; nothing outboxd published lies past it",
			tli, was, was, OB_LSN_ARGS(switch_point), OB_LSN_ARGS(reached));
	else if (known)
		ob_warn(
		    "the server is on timeline %d now (was %d), which left timeline %d "
		    "at " OB_LSN_FMT ", before outboxd's position " OB_LSN_FMT
		    ": a standby that lagged was "
		    "promoted. %s%llu events handed to Kafka from timeline %d past the switch "
		    "point are not in the new primary's history and cannot be taken back "
		    "(outboxd_events_beyond_fork_total); reading the slot again from " OB_LSN_FMT
		    ", every transaction of timeline %d after it is published",
		    tli, was, was, OB_LSN_ARGS(switch_point), OB_LSN_ARGS(reached),
		    exact ? "" : "at least ", (unsigned long long)beyond, was,
		    OB_LSN_ARGS(switch_point), tli);
	else
		ob_warn("the server is on timeline %d now (was %d), and its history does not say "
			"where it left timeline %d: reading the slot again from its own position; "
			"%s%llu events handed to Kafka past the position outboxd had "
			"confirmed, " OB_LSN_FMT ", may not be in the new primary's history",
			tli, was, was, exact ? "" : "at least ", (unsigned long long)beyond,
			OB_LSN_ARGS(confirmable));
	if (known)
		check_slot_start(pg, d->cfg, switch_point);
	tl->tli = tli;
	return OB_PG_OK;
}
