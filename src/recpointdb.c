/*
 * recpointdb.c: the recovery point on the server (recpointdb.h).
 */
#include "outboxd/recpointdb.h"

#include "ob_build.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/lsn.h"
#include "outboxd/pgrepl.h"
#include "outboxd/runtime.h"
#include "outboxd/slotloss.h"
#include "outboxd/slotmark.h"

#define TABLE_SQL  OB_SLOTMARK_SQL
#define TABLE_NAME OB_SLOTMARK_FROM
#define COLUMNS_SQL                                                                                \
	"ADD COLUMN IF NOT EXISTS recovery_xid xid8, ADD COLUMN IF NOT EXISTS recovery_lsn "       \
	"pg_lsn, ADD COLUMN IF NOT EXISTS recovery_at timestamptz, ADD COLUMN IF NOT EXISTS "      \
	"recovery_system text, ADD COLUMN IF NOT EXISTS deletes_counted bigint, ADD COLUMN IF "    \
	"NOT EXISTS deletes_own bigint, ADD COLUMN IF NOT EXISTS deletes_seen_at timestamptz, "    \
	"ADD COLUMN IF NOT EXISTS messages_seen_at timestamptz, ADD COLUMN IF NOT EXISTS "         \
	"recovery_leaves oid[]"
/* The leaves of the outbox table now, as a subquery of their oids (%L
 * takes the schema's name, then the table's): its pg_class rows of kind
 * 'r' (the table itself when it is not partitioned: pg_partition_tree()
 * gives nothing for such a table), less a partition whose detach is
 * pending (an interrupted DETACH CONCURRENTLY: the table's scans no
 * longer read it; PostgreSQL 15's pg_partition_tree() leaves it out
 * already). */
#define LEAVES_NOW_SQL                                                                             \
	"(SELECT c.oid FROM (SELECT to_regclass(quote_ident(%L) || '.' || quote_ident(%L)) AS "    \
	"rel) AS o JOIN pg_class AS c ON c.oid = o.rel OR c.oid IN (SELECT relid FROM "            \
	"pg_partition_tree(o.rel) WHERE isleaf) WHERE c.relkind = 'r' AND NOT EXISTS (SELECT 1 "   \
	"FROM pg_inherits AS i WHERE i.inhrelid = c.oid AND i.inhdetachpending))"
/* The tables a recovery judges (as LEAVES_NOW_SQL, with the row r): the
 * leaves now, and those the point's candidate saw that were detached
 * since (their deletes and truncations count as the others'). */
#define LEAVES_JUDGED_SQL                                                                          \
	"(" LEAVES_NOW_SQL " UNION SELECT x FROM unnest(r.recovery_leaves) AS x JOIN pg_class AS " \
	"c ON c.oid = x)"
/* The rows deleted from the tables of the subquery of oids leaves, as
 * the cumulative statistics count them (text). They count every DELETE,
 * whoever ran it, and start again from 0 after a crash and on a promoted
 * standby. */
#define DELETES_SQL(leaves)                                                                        \
	"(SELECT coalesce(sum(n_tup_del), 0)::text FROM pg_stat_user_tables WHERE relid "          \
	"IN " leaves ")"
/* The deletes' columns set by a store, with the statistics' count (%L,
 * four times): the count and outboxd's own deletes (retention.h) are
 * kept from an epoch on: the first store, the one after the statistics
 * were found started again (a crash, a promotion, a reset), or the one
 * after an operator cleared deletes_counted with the note; when the
 * statistics counted more deletes since than outboxd made, someone else
 * deletes rows. outboxd's own count is exact at once, the statistics'
 * lags (a session reports its counts within seconds), so the lag never
 * makes deletes look foreign. */
#define STORE_DELETES_SQL                                                                          \
	"deletes_seen_at = CASE WHEN %L::bigint - deletes_counted > coalesce(deletes_own, 0) "     \
	"THEN now() ELSE deletes_seen_at END, deletes_own = CASE WHEN deletes_counted IS NULL "    \
	"OR %L::bigint < deletes_counted THEN 0 ELSE deletes_own END, deletes_counted = CASE "     \
	"WHEN deletes_counted IS NULL OR %L::bigint < deletes_counted THEN %L::bigint ELSE "       \
	"deletes_counted END"
/* The tables a recovery judges (LEAVES_JUDGED_SQL) whose storage was
 * replaced by a transaction with an id past the point r.recovery_xid
 * (their pg_class row written since, relfilenode no longer the table's
 * first): TRUNCATE, which no statistics count as deletes, or a rewrite
 * (VACUUM FULL, CLUSTER, a rewriting ALTER TABLE) that deleted nothing;
 * NULL when none. A table made since the point still has its first
 * relfilenode. The window is exact while the point is (recpoint.h). */
#define REWRITTEN_SQL                                                                              \
	"(SELECT string_agg(c.relname, ', ') FROM pg_class AS c WHERE c.oid IN " LEAVES_JUDGED_SQL \
	" AND c.relfilenode <> c.oid AND (c.xmin::text::bigint - r.recovery_xid::text::bigint %% " \
	"4294967296 + 4294967296) %% 4294967296 < 2147483648)"
/* The leaves the point's candidate saw that are no longer leaves of the
 * outbox table (as LEAVES_NOW_SQL, with the row r; %s takes "NOT" for the
 * detached, "" for the dropped). A dropped one (no pg_class row: a
 * partition, or the table dropped and made again) has its rows in no
 * table a recovery reads and in no count of deleted rows: taken to hold
 * events not yet published ("oid N, ..."). A detached one is looked at
 * (judge_detached(): their oids, space-separated). NULL when none. */
#define GONE_SQL(item, sep)                                                                        \
	"(SELECT string_agg(" item ", '" sep "' ORDER BY x) FROM unnest(r.recovery_leaves) AS x "  \
	"LEFT JOIN pg_class AS c ON c.oid = x WHERE x NOT IN " LEAVES_NOW_SQL                      \
	" AND c.oid IS %s NULL)"
#define DROPPED_SQL  GONE_SQL("'oid ' || x::text", ", ")
#define DETACHED_SQL GONE_SQL("x::text", " ")
/* When the statistics of this database were last reset (pg_stat_reset(),
 * pg_stat_reset_single_table_counters(); NULL: never since they started,
 * as after a crash): a count of deleted rows taken before a reset and one
 * taken after it do not compare. */
#define STATS_RESET_SQL                                                                            \
	"(SELECT stats_reset FROM pg_stat_database WHERE datname = current_database())"
/* The server's system identifier: a physical standby or a backup keeps
 * it (and the rows' transaction ids), a logical copy or a restored dump
 * does not. */
#define SYSTEM_SQL "(SELECT system_identifier::text FROM pg_control_system())"

void
ob_recpointdb_init(ob_recpointdb *r)
{
	free(r->cand_leaves);
	memset(r, 0, sizeof(*r));
	ob_recpoint_init(&r->rule);
#if OB_TEST_HOOKS
	/* Test builds (meson -Dtest_hooks=true): OUTBOXD_TEST_RECPOINT_MS
	 * takes candidates that often, so tests wait less. */
	if (getenv("OUTBOXD_TEST_RECPOINT_MS") != NULL)
		r->rule.interval_ms = atol(getenv("OUTBOXD_TEST_RECPOINT_MS"));
#endif
}

void
ob_recpointdb_free(ob_recpointdb *r)
{
	free(r->cand_leaves);
	r->cand_leaves = NULL;
}

char *
ob_recpointdb_setup_sql(const ob_config *cfg, const char *role)
{
	return ob_xasprintf("ALTER TABLE \"%s\"." OB_SLOTMARK_TABLE " " COLUMNS_SQL
			    "; GRANT UPDATE ON \"%s\"." OB_SLOTMARK_TABLE " TO \"%s\";",
			    cfg->outbox.schema, cfg->outbox.schema, role);
}

/* Whether the columns are there and this role may UPDATE the table, into
 * *yes; false (logged at debug) when the query failed. */
static bool
columns_usable(ob_pgconn *p, const ob_config *cfg, bool *yes)
{
	return ob_pgsql_query_true(
	    p, yes,
	    "SELECT to_regclass(m.t) IS NOT NULL AND has_table_privilege(m.t, 'UPDATE') AND "
	    "(SELECT count(*) FROM pg_attribute a WHERE a.attrelid = to_regclass(m.t) AND "
	    "NOT a.attisdropped AND a.attname IN ('recovery_xid', 'recovery_lsn', "
	    "'recovery_at', 'recovery_system', 'deletes_counted', 'deletes_own', "
	    "'deletes_seen_at', 'messages_seen_at', 'recovery_leaves')) = 9 FROM " TABLE_NAME,
	    cfg->outbox.schema);
}

/* Looks once per stream whether the point can be stored, adding the
 * columns when this role owns the table; says once per process when it
 * cannot. */
static void
check_columns(ob_recpointdb *r, ob_pgconn *p, const ob_config *cfg)
{
	static bool warned, told_standby;
	bool yes = false, standby = false;

	if (!ob_pgrepl_in_recovery(p, &standby) || (!standby && !columns_usable(p, cfg, &yes)))
		return; /* the next poll looks again */
	r->checked = true;
	if (standby) {
		/* Decoding on a standby: its tables are read-only, and the row
		 * is the primary's; no point is taken here. */
		if (!told_standby)
			ob_info("slot %s is read on a standby: no recovery point is kept there",
				cfg->pg.slot);
		told_standby = true;
		return;
	}
	if (!yes &&
	    ob_pgsql_command(p, OB_LOG_DEBUG, "add the recovery point's columns",
			     "ALTER TABLE " TABLE_SQL " " COLUMNS_SQL, cfg->outbox.schema) &&
	    columns_usable(p, cfg, &yes) && yes)
		ob_info("added the recovery point's columns to %s." OB_SLOTMARK_TABLE,
			cfg->outbox.schema);
	r->usable = yes;
	if (!yes && !warned) {
		char *fix = ob_recpointdb_setup_sql(cfg, "<outboxd's role>");

		ob_warn("no recovery point is kept for slot %s: %s." OB_SLOTMARK_TABLE
			" lacks its columns or this role may not update it; have the table's "
			"owner run %s",
			cfg->pg.slot, cfg->outbox.schema, fix);
		free(fix);
		warned = true;
	}
}

/* Take a candidate: the snapshot's xmin, then the insert position, in
 * one statement (the snapshot is taken when it starts), with the rows
 * deleted from the outbox table so far, when the statistics that count
 * them were last reset, and the table's leaves: a leaf there now may
 * hold rows committed past the position, so one gone at a recovery
 * (DROPPED_SQL) took rows of events not yet published with it. */
static bool
capture(ob_recpointdb *r, ob_pgconn *p, const ob_config *cfg)
{
	ob_pgres *res = NULL;
	ob_lsn lsn = 0;
	unsigned long long xmin = 0;
	bool ok = ob_pgsql_query_row(
	    p, r->failing ? OB_LOG_DEBUG : OB_LOG_WARNING, "take a recovery point candidate", 5,
	    &res,
	    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, "
	    "pg_current_wal_insert_lsn(), " DELETES_SQL(
		LEAVES_NOW_SQL) ", coalesce(" STATS_RESET_SQL "::text, ''), ARRAY" LEAVES_NOW_SQL
				"::text",
	    cfg->outbox.schema, cfg->outbox.table_name, cfg->outbox.schema, cfg->outbox.table_name);

	if (ok && (sscanf(ob_pgres_value(res, 0, 0), "%llu", &xmin) != 1 ||
		   !ob_lsn_parse(ob_pgres_value(res, 0, 1), &lsn) ||
		   sscanf(ob_pgres_value(res, 0, 2), "%lld", &r->cand_deletes) != 1)) {
		if (!r->failing)
			ob_warn("could not take a recovery point candidate: unexpected answer");
		ok = false;
	}
	if (ok) {
		snprintf(r->cand_reset, sizeof(r->cand_reset), "%s", ob_pgres_value(res, 0, 3));
		free(r->cand_leaves);
		r->cand_leaves = ob_xstrdup(ob_pgres_value(res, 0, 4));
		ob_recpoint_captured(&r->rule, xmin, lsn, ob_mono_ms());
	}
	ob_pgres_free(res);
	return ok;
}

/* Store the candidate, never lowering the stored point, in a
 * transaction of outboxd's own upkeep (pgsql.h). The stream waits while
 * this runs: the commit must not wait for a synchronous standby (a point
 * the standby lacks is only an older one there) nor the update for long
 * on a lock of the row (a slot drop in progress, an operator's open
 * transaction). The row also keeps the deletes' counts and when foreign
 * ones were seen (STORE_DELETES_SQL, slotloss.h). A candidate whose count
 * was taken before a reset of the statistics is not stored: the deletes
 * between it and the reset are counted nowhere (a recovery halts on a
 * reset after the stored point, ob_recpointdb_facts()). The rule then
 * takes a new candidate an interval later. */
static bool
store(ob_recpointdb *r, ob_pgconn *p, const ob_config *cfg)
{
	ob_log_level level = r->failing ? OB_LOG_DEBUG : OB_LOG_WARNING;
	char xid[24], lsn[24], deletes[24];
	unsigned long long own = 0;
	ob_pgres *res = NULL;
	bool ok;

	snprintf(xid, sizeof(xid), "%" PRIu64, r->rule.cand_xid);
	snprintf(lsn, sizeof(lsn), OB_LSN_FMT, OB_LSN_ARGS(r->rule.cand_lsn));
	snprintf(deletes, sizeof(deletes), "%lld", r->cand_deletes);
	/* The CTE makes one row of none: the row may already hold a point as
	 * far (another process stored it) and then nothing is written. */
	ok = ob_pgsql_begin_upkeep(p, level) &&
	     ob_pgsql_query_row(
		 p, level, "store the recovery point", 2, &res,
		 "WITH u AS (UPDATE " TABLE_SQL " SET recovery_xid = %L::xid8, "
		 "recovery_lsn = %L::pg_lsn, recovery_at = now(), recovery_system = " SYSTEM_SQL
		 ", " STORE_DELETES_SQL ", recovery_leaves = %L::oid[], messages_seen_at = CASE "
		 "WHEN %L THEN now() ELSE messages_seen_at END WHERE slot_name = %L AND "
		 "(recovery_xid IS NULL OR recovery_xid < %L::xid8) AND coalesce(" STATS_RESET_SQL
		 "::text, '') = %L RETURNING pg_current_xact_id()::text AS x) SELECT (SELECT x "
		 "FROM u), coalesce(" STATS_RESET_SQL "::text, '') <> %L",
		 cfg->outbox.schema, xid, lsn, deletes, deletes, deletes, deletes, r->cand_leaves,
		 r->messages_seen ? "true" : "false", cfg->pg.slot, xid, r->cand_reset,
		 r->cand_reset);
	ok = ob_pgsql_end_upkeep(p, ok, level);
	if (ok && ob_pgres_value(res, 0, 1)[0] == 't') {
		ob_info("the statistics were reset after recovery point candidate %s was taken: "
			"taking another",
			xid);
		ob_recpoint_failed(&r->rule, ob_mono_ms());
	} else if (ok) {
		if (!ob_pgres_null(res, 0, 0))
			(void)sscanf(ob_pgres_value(res, 0, 0), "%llu", &own);
		ob_log_lsn(OB_LOG_DEBUG, r->rule.cand_lsn, NULL, 0,
			   "recovery point %s (taken at %s)%s", xid, lsn,
			   own != 0 ? "" : ": the row held one as far");
		ob_recpoint_stored(&r->rule, own, ob_mono_ms());
		/* Kept by this update, or by the one that held the point as far
		 * (a message is a transaction of its own, past that point). */
		r->messages_seen = false;
	}
	ob_pgres_free(res);
	return ok;
}

void
ob_recpointdb_poll(ob_recpointdb *r, ob_pgconn *p, const ob_config *cfg, ob_lsn confirmed)
{
	bool ok = true;

	if (p == NULL)
		return;
	switch (ob_recpoint_next(&r->rule, confirmed, ob_mono_ms())) {
	case OB_RECPOINT_WAIT:
		return;
	case OB_RECPOINT_CAPTURE:
		if (!r->checked)
			check_columns(r, p, cfg);
		if (!r->usable) {
			ob_recpoint_failed(&r->rule, ob_mono_ms());
			return;
		}
		ok = capture(r, p, cfg);
		break;
	case OB_RECPOINT_STORE:
		ok = store(r, p, cfg);
		/* Failures are told once until a point is stored again. */
		if (ok && r->failing)
			ob_info("recovery point of slot %s stored again", cfg->pg.slot);
		if (ok)
			r->failing = false;
		break;
	}
	if (!ok) {
		ob_recpoint_failed(&r->rule, ob_mono_ms());
		r->failing = true;
	}
}

/* The columns of read_point()'s row. */
enum {
	COL_MARKED,
	COL_XID,
	COL_LSN,
	COL_AT,
	COL_AGE,
	COL_NEXT_XID,
	COL_SYSTEM,
	COL_THIS_SYSTEM,
	COL_DELETES_AT,
	COL_DELETES_PAST,
	COL_MESSAGES_AT,
	COL_STATS_RESET,
	COL_REWRITTEN,
	COL_DROPPED,
	COL_DETACHED,
	COL_COUNT
};

/* Read the slot's row with its point into *res (the caller frees) and
 * say OB_PG_OK; when there is no table, or it cannot keep a point,
 * *res stays NULL and line says why: OB_PG_OK for a table not made yet,
 * OB_PG_FATAL (line names the statements) for one that lacks the columns
 * or the privilege. OB_PG_RETRY (logged) when a query failed. */
static ob_pg_status
read_point(ob_pgconn *p, const ob_config *cfg, ob_pgres **res, char *line, size_t size)
{
	bool exists, usable;
	char *fix;

	*res = NULL;
	if (!ob_pgsql_query_true(p, &exists, "SELECT to_regclass(m.t) IS NOT NULL FROM " TABLE_NAME,
				 cfg->outbox.schema) ||
	    (exists && !columns_usable(p, cfg, &usable)))
		goto failed;
	if (!exists) {
		snprintf(line, size,
			 "none: there is no table \"%s\"." OB_SLOTMARK_TABLE
			 " yet (outboxd makes it with the slot)",
			 cfg->outbox.schema);
		return OB_PG_OK;
	}
	if (!usable) {
		fix = ob_recpointdb_setup_sql(cfg, "<outboxd's role>");
		snprintf(line, size,
			 "none: \"%s\"." OB_SLOTMARK_TABLE
			 " lacks its columns or this role may not update it; have its owner run %s",
			 cfg->outbox.schema, fix);
		free(fix);
		return OB_PG_FATAL;
	}
	if (ob_pgsql_query_row(
		p, OB_LOG_WARNING, "read the recovery point", COL_COUNT, res,
		"SELECT r.slot_name IS NOT NULL, r.recovery_xid::text, r.recovery_lsn::text, "
		"date_trunc('second', r.recovery_at)::text, "
		"date_trunc('second', now() - r.recovery_at)::text, "
		"pg_snapshot_xmax(pg_current_snapshot())::text, r.recovery_system, " SYSTEM_SQL
		", date_trunc('second', r.deletes_seen_at)::text, " DELETES_SQL(
		    LEAVES_JUDGED_SQL) "::bigint - r.deletes_counted - coalesce(r.deletes_own, 0), "
				       "r.messages_seen_at IS NOT NULL, CASE WHEN " STATS_RESET_SQL
				       " > r.recovery_at THEN date_trunc('second', " STATS_RESET_SQL
				       ")::text END, " REWRITTEN_SQL ", " DROPPED_SQL
				       ", " DETACHED_SQL
				       " FROM (SELECT 1) AS one LEFT JOIN " TABLE_SQL
				       " AS r ON r.slot_name = %L",
		cfg->outbox.schema, cfg->outbox.table_name, cfg->outbox.schema,
		cfg->outbox.table_name, cfg->outbox.schema, cfg->outbox.table_name, "",
		cfg->outbox.schema, cfg->outbox.table_name, "NOT", cfg->outbox.schema,
		cfg->pg.slot))
		return OB_PG_OK;
failed:
	snprintf(line, size, "could not read it (see the log)");
	return OB_PG_RETRY;
}

/* The facts of read_point()'s row res (NULL: no point) for a recovery. */
static void
facts_from(const ob_pgres *res, const ob_config *cfg, ob_recovery_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->deletes_past = -1;
	if (res == NULL || ob_pgres_value(res, 0, COL_MARKED)[0] != 't' ||
	    ob_pgres_null(res, 0, COL_XID))
		return;
	f->has_point = true;
	/* Messages seen once may come again while the prefix is set. */
	f->messages = cfg->outbox.message_prefix[0] != '\0' &&
		      ob_pgres_value(res, 0, COL_MESSAGES_AT)[0] == 't';
	f->xid = strtoull(ob_pgres_value(res, 0, COL_XID), NULL, 10);
	f->next_xid = strtoull(ob_pgres_value(res, 0, COL_NEXT_XID), NULL, 10);
	f->other_system = (!ob_pgres_null(res, 0, COL_SYSTEM) &&
			   strcmp(ob_pgres_value(res, 0, COL_SYSTEM),
				  ob_pgres_value(res, 0, COL_THIS_SYSTEM)) != 0) ||
			  f->next_xid < f->xid;
	f->deletes_seen = !ob_pgres_null(res, 0, COL_DELETES_AT);
	snprintf(f->stats_reset_at, sizeof(f->stats_reset_at), "%s",
		 ob_pgres_value(res, 0, COL_STATS_RESET));
	snprintf(f->rewritten, sizeof(f->rewritten), "%s", ob_pgres_value(res, 0, COL_REWRITTEN));
	snprintf(f->dropped, sizeof(f->dropped), "%s", ob_pgres_value(res, 0, COL_DROPPED));
	snprintf(f->deletes_at, sizeof(f->deletes_at), "%s",
		 ob_pgres_value(res, 0, COL_DELETES_AT));
	/* A count below the stored one was started again (a crash, a
	 * promotion): what it missed is unknown. */
	if (!ob_pgres_null(res, 0, COL_DELETES_PAST))
		f->deletes_past = strtoll(ob_pgres_value(res, 0, COL_DELETES_PAST), NULL, 10);
	if (f->deletes_past < 0)
		f->deletes_past = -1;
}

/* Append item to the list in buf (size bytes), after a comma. */
static void
append_item(char *buf, size_t size, const char *item)
{
	size_t len = strlen(buf);

	if (len < size)
		snprintf(buf + len, size - len, "%s%s", len > 0 ? ", " : "", item);
}

/* Add to f->dropped each detached leaf of oids (space-separated, from
 * DETACHED_SQL) that may hold rows of events not yet published: one with
 * a row past the point, one this role may not read, or one gone since.
 * A detached leaf whose rows all lie before the point held published
 * events only: a partition rotation that keeps its tables (pg_partman's
 * retention_keep_table, by default) halts nothing. False (logged) when
 * a query failed: a lock held on the table past the connection's
 * lock_timeout, say; the judgment is then to be made again. */
static bool
judge_detached(ob_pgconn *p, const char *oids, ob_recovery_facts *f)
{
	char where[128], oid[16], item[160];
	ob_pgres *res = NULL;
	bool readable, past, ok = true;
	int n = 0;

	ob_recpoint_backlog_where(f->xid, where, sizeof(where));
	for (; ok && sscanf(oids, "%15s%n", oid, &n) == 1; oids += n) {
		ob_pgres_free(res);
		res = NULL;
		ok = ob_pgsql_query_rows(
		    p, OB_LOG_WARNING, "name a detached leaf of the outbox table", 2, &res,
		    "SELECT format('%%I.%%I', n.nspname, c.relname), has_table_privilege(c.oid, "
		    "'SELECT') FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = "
		    "c.relnamespace WHERE c.oid = %L::oid",
		    oid);
		if (!ok)
			break;
		past = true;
		readable = ob_pgres_rows(res) == 1 && ob_pgres_value(res, 0, 1)[0] == 't';
		if (ob_pgres_rows(res) == 0)
			snprintf(item, sizeof(item), "oid %s", oid);
		else if (readable && !(ok = ob_pgsql_query_true(
					   p, &past, "SELECT EXISTS (SELECT 1 FROM %s WHERE %s)",
					   ob_pgres_value(res, 0, 0), where)))
			break;
		else
			snprintf(item, sizeof(item), "%s (detached, %s)", ob_pgres_value(res, 0, 0),
				 readable ? "with rows past the point"
					  : "which this role may not read: GRANT SELECT on it");
		if (past)
			append_item(f->dropped, sizeof(f->dropped), item);
	}
	ob_pgres_free(res);
	return ok;
}

/* facts_from() of res read on p, with its detached leaves judged; false
 * (logged) when a query failed. */
static bool
facts_read(ob_pgconn *p, const ob_pgres *res, const ob_config *cfg, ob_recovery_facts *f)
{
	facts_from(res, cfg, f);
	return !f->has_point || ob_pgres_null(res, 0, COL_DETACHED) ||
	       judge_detached(p, ob_pgres_value(res, 0, COL_DETACHED), f);
}

void
ob_recpointdb_saw_message(ob_recpointdb *r)
{
	r->messages_seen = true;
}

ob_pg_status
ob_recpointdb_facts(ob_pgconn *p, const ob_config *cfg, ob_recovery_facts *f)
{
	ob_pgres *res = NULL;
	char line[512];
	ob_pg_status st = read_point(p, cfg, &res, line, sizeof(line));

	if (st != OB_PG_RETRY && !facts_read(p, res, cfg, f))
		st = OB_PG_RETRY;
	ob_pgres_free(res);
	return st == OB_PG_RETRY ? OB_PG_RETRY : OB_PG_OK;
}

/* The line of a stored point, from read_point()'s row res and its facts
 * f: the point, the outbox.backlog_where that selects the rows a
 * recovery publishes, and whether a recovery now would be complete.
 * OB_PG_FATAL when the point was stored on another system (a logical copy
 * of the database, or a dump restored: its rows were written again, by
 * this server's transactions), where it says nothing. */
static ob_pg_status
describe_point(const ob_pgres *res, const ob_recovery_facts *f, char *line, size_t size)
{
	char where[128], why[512];
	bool complete = ob_slotloss_recoverable(f, why, sizeof(why));

	if (f->other_system) {
		snprintf(line, size,
			 "xid %llu was stored on another PostgreSQL system (%s; this one is %s, "
			 "its next transaction id %llu): a logical copy or a restored dump, whose "
			 "rows were written again by this server's transactions, so the point "
			 "selects nothing here; a recovery needs a time (outbox.backlog_where on "
			 "created_at)",
			 (unsigned long long)f->xid,
			 ob_pgres_null(res, 0, COL_SYSTEM) ? "unknown"
							   : ob_pgres_value(res, 0, COL_SYSTEM),
			 ob_pgres_value(res, 0, COL_THIS_SYSTEM), (unsigned long long)f->next_xid);
		return OB_PG_FATAL;
	}
	ob_recpoint_backlog_where(f->xid, where, sizeof(where));
	snprintf(line, size,
		 "xid %llu (taken at %s, stored %s, %s ago); the rows not yet published are "
		 "among those of outbox.backlog_where=\"%s\"; %s%s",
		 (unsigned long long)f->xid, ob_pgres_value(res, 0, COL_LSN),
		 ob_pgres_value(res, 0, COL_AT), ob_pgres_value(res, 0, COL_AGE), where,
		 complete ? "a recovery now would be complete" : "a recovery now would halt: ",
		 complete ? "" : why);
	return OB_PG_OK;
}

ob_pg_status
ob_recpointdb_describe(ob_pgconn *p, const ob_config *cfg, char *line, size_t size)
{
	ob_pgres *res = NULL;
	ob_recovery_facts f;
	ob_pg_status st = read_point(p, cfg, &res, line, size);

	if (res == NULL)
		return st;
	if (!facts_read(p, res, cfg, &f)) {
		snprintf(line, size, "could not read it (see the log)");
		st = OB_PG_RETRY;
	} else if (ob_pgres_value(res, 0, COL_MARKED)[0] != 't')
		snprintf(line, size, "none: slot %s has no row in \"%s\"." OB_SLOTMARK_TABLE,
			 cfg->pg.slot, cfg->outbox.schema);
	else if (!f.has_point)
		snprintf(line, size, "none yet: outboxd stores one within seconds of streaming");
	else
		st = describe_point(res, &f, line, size);
	ob_pgres_free(res);
	return st;
}
