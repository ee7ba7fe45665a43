/*
 * slotwatch.c: reading the slot's state and the outbox's insert counter
 * on the stream's plain connection (see slotwatch.h for the contract).
 */
#include "outboxd/slotwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/failover.h"
#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/partitions.h"

/* The least time between two readings. */
#define SLOTWATCH_INTERVAL_MS 1000
/* The least time between two readings of the failover readiness. */
#define FAILOVER_INTERVAL_MS  10000

void
ob_slotwatch_init(ob_slotwatch *w)
{
	memset(w, 0, sizeof(*w));
}

/* Take one reading: the counter, the server's WAL position read after it,
 * and the position up to which nothing waits (the stream's or the slot's,
 * whichever is further). */
static void
take(ob_slotwatch *w, int64_t inserts, ob_lsn wal_lsn, ob_lsn done_lsn)
{
	size_t kept = 0;

	if (w->counted && inserts > w->inserts && wal_lsn > done_lsn) {
		if (w->n_marks == OB_SLOTWATCH_MARKS) {
			size_t k = 1;

			for (size_t i = 2; i < w->n_marks; i += 2)
				w->marks[k++] = w->marks[i];
			w->n_marks = k;
		}
		w->marks[w->n_marks++] = (ob_slotwatch_mark){wal_lsn, ob_now_us()};
	}
	/* A counter that went down was reset (pg_stat_reset): a new start. */
	w->counted = true;
	w->inserts = inserts;
	while (kept < w->n_marks && w->marks[kept].lsn <= done_lsn)
		kept++;
	memmove(w->marks, w->marks + kept, (w->n_marks - kept) * sizeof(w->marks[0]));
	w->n_marks -= kept;
}

/* Read whether the slot survives a promotion, when due; say when that
 * changes. */
static void
poll_failover(ob_slotwatch *w, ob_pgconn *p, const ob_config *cfg)
{
	ob_failover_state st;

	if (ob_mono_ms() < w->next_failover_ms || !ob_failover_read(p, cfg, &st))
		return;
	w->next_failover_ms = ob_mono_ms() + FAILOVER_INTERVAL_MS;
	if (!w->failover_read || st.verdict != w->failover) {
		if (st.verdict == OB_FAILOVER_NOT_READY)
			ob_warn("replication slot %s is not failover-ready: %s", cfg->pg.slot,
				st.why);
		else if (st.verdict == OB_FAILOVER_READY)
			ob_info("replication slot %s is failover-ready: %s", cfg->pg.slot, st.why);
	}
	w->failover_read = true;
	w->failover = st.verdict;
	ob_metrics_set_failover_ready(st.verdict != OB_FAILOVER_NA,
				      st.verdict == OB_FAILOVER_READY);
}

void
ob_slotwatch_poll(ob_slotwatch *w, ob_pgconn *p, const ob_config *cfg, ob_lsn read_lsn)
{
	char *name;
	ob_pgres *res;
	ob_lsn wal_lsn = 0, confirmed = 0;
	char what[512];
	bool ok;

	if (p == NULL || ob_mono_ms() < w->next_ms)
		return;
	w->next_ms = ob_mono_ms() + SLOTWATCH_INTERVAL_MS;
	name = ob_partitions_table_name(p, cfg);
	snprintf(what, sizeof(what), "read replication slot %s and the insert counter of %s.%s",
		 cfg->pg.slot, cfg->outbox.schema, cfg->outbox.table_name);
	/* The counter (of the table and, when it is partitioned, of every
	 * partition: pg_partition_tree() lists nothing for a plain table)
	 * comes before the WAL position in the target list, so it is read
	 * first. A failure is told once, until a read succeeds again. */
	ok = ob_pgsql_query_row(
	    p, w->failing ? OB_LOG_DEBUG : OB_LOG_WARNING, what, 5, &res,
	    "SELECT (SELECT coalesce(sum(pg_stat_get_tuples_inserted(tree.r)), 0)::bigint "
	    "FROM (SELECT to_regclass(%s) AS t) AS o, "
	    "LATERAL (SELECT relid FROM pg_partition_tree(o.t) UNION SELECT o.t) AS "
	    "tree(r)), " OB_SQL_WAL_LSN ", s.confirmed_flush_lsn, s.wal_status, "
	    "coalesce(" OB_SQL_WAL_LSN " - s.restart_lsn, 0)::bigint "
	    "FROM (SELECT 1) AS one LEFT JOIN pg_replication_slots s ON s.slot_name = %L",
	    name, cfg->pg.slot);
	if (ok &&
	    !(ob_lsn_parse(ob_pgres_value(res, 0, 1), &wal_lsn) &&
	      (ob_pgres_null(res, 0, 2) || ob_lsn_parse(ob_pgres_value(res, 0, 2), &confirmed)))) {
		if (!w->failing)
			ob_warn("could not %s: unexpected answer", what);
		ok = false;
	}
	if (!ok) {
		w->failing = true;
		goto done;
	}
	if (w->failing)
		ob_info("read replication slot %s again", cfg->pg.slot);
	w->failing = false;
	take(w, atoll(ob_pgres_value(res, 0, 0)), wal_lsn,
	     read_lsn > confirmed ? read_lsn : confirmed);
	ob_metrics_set_slot(atoll(ob_pgres_value(res, 0, 4)),
			    ob_wal_status_parse(ob_pgres_value(res, 0, 3)),
			    w->n_marks > 0 ? w->marks[0].seen_us : 0);
	poll_failover(w, p, cfg);
done:
	ob_pgres_free(res);
	free(name);
}
