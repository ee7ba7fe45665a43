/*
 * retention.c: the outbox rows outboxd no longer needs, deleted
 * (retention.h).
 */
#include "outboxd/retention.h"

#include "ob_build.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "outboxd/log.h"
#include "outboxd/metrics.h"
#include "outboxd/slotmark.h"

/* How often the rows deleted are said at info level. */
#define REPORT_INTERVAL_MS 60000
/* The most leaf tables one pass reads. */
#define MAX_LEAVES         1024

void
ob_retention_init(ob_retention *rt)
{
	rt->next_ms = 0;
	rt->idle_ms = OB_RETENTION_IDLE_MS;
	rt->failing = false;
	rt->unreported = 0;
	rt->reported_ms = ob_mono_ms();
#if OB_TEST_HOOKS
	/* Test builds (meson -Dtest_hooks=true): OUTBOXD_TEST_RETENTION_MS
	 * makes the idle pause that short, so tests wait less. */
	if (getenv("OUTBOXD_TEST_RETENTION_MS") != NULL)
		rt->idle_ms = atol(getenv("OUTBOXD_TEST_RETENTION_MS"));
#endif
}

/* The outbox table's leaf tables (the table itself when it is not
 * partitioned), as quoted names, into *res. */
static bool
leaves(ob_pgconn *p, const ob_config *cfg, ob_log_level level, ob_pgres **res)
{
	char *sql = ob_pgsql_format(
	    p,
	    "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c "
	    "JOIN pg_namespace n ON n.oid = c.relnamespace, (SELECT to_regclass(quote_ident(%L) "
	    "|| '.' || quote_ident(%L)) AS rel) AS o WHERE c.relkind = 'r' AND (c.oid = o.rel "
	    "OR c.oid IN (SELECT relid FROM pg_partition_tree(o.rel) WHERE isleaf)) "
	    "LIMIT " OB_STRINGIFY(MAX_LEAVES),
	    cfg->outbox.schema, cfg->outbox.table_name);
	char buf[512];

	*res = ob_pgsql_exec(p, sql);
	free(sql);
	if (ob_pgres_tuples(*res))
		return true;
	ob_log(level, "retention: could not list the outbox table's leaves: %s",
	       ob_pgres_error(*res, buf, sizeof(buf)));
	ob_pgres_free(*res);
	*res = NULL;
	return false;
}

/* The point's h (xid modulo 2^32), from the schema (%I) and slot (%L)
 * of its row, and the rows of leaf (%s) older than the retention (the
 * timestamp column, %I; the retention, %L, an interval) and behind the
 * point, at most %s of them. A row behind the point: its xmin (kept
 * modulo 2^32, frozen or not) lies outside the 2^31 ids from the point on
 * (recpoint.h). */
#define POINT_SQL                                                                                  \
	"pt AS (SELECT recovery_xid::text::bigint %% 4294967296 AS h FROM " OB_SLOTMARK_SQL        \
	" WHERE slot_name = %L AND recovery_xid IS NOT NULL)"
#define OLD_ROWS_SQL                                                                               \
	"SELECT o.ctid FROM %s AS o, pt WHERE o.%I < now() - %L::interval AND "                    \
	"(o.xmin::text::bigint - pt.h + 4294967296) %% 4294967296 >= 2147483648 LIMIT %s"
/* How many rows a batch will delete (k), added to deletes_own first, in a
 * transaction of its own (then the schema and slot again). The
 * statistics count the rows of an aborted DELETE too (a lock timeout, a
 * kill): counted before, they are never taken for someone else's. */
#define RESERVE_SQL                                                                                \
	"WITH " POINT_SQL ", k AS (SELECT count(*) AS c FROM (" OLD_ROWS_SQL ") AS s), u AS "      \
	"(UPDATE " OB_SLOTMARK_SQL " AS m SET deletes_own = coalesce(m.deletes_own, 0) + k.c "     \
	"FROM k WHERE m.slot_name = %L AND k.c > 0) SELECT c FROM k"
/* Delete at most k of those rows (the leaf's name first), and give back
 * what was reserved and not deleted (the schema, k, the slot, k). */
#define DELETE_SQL                                                                                 \
	"WITH " POINT_SQL ", gone AS (DELETE FROM %s AS t WHERE t.ctid = ANY (ARRAY(" OLD_ROWS_SQL \
	")) RETURNING 1), n AS (SELECT count(*) AS c FROM gone), u AS (UPDATE " OB_SLOTMARK_SQL    \
	" AS m SET deletes_own = greatest(m.deletes_own - (%s - n.c), 0) FROM n "                  \
	"WHERE m.slot_name = %L AND n.c < %s) SELECT c FROM n"

/* One batch on leaf: reserve, then delete up to OB_RETENTION_BATCH rows
 * older than the retention and behind the stored point, each in an upkeep
 * transaction; *n the rows deleted. */
static bool
batch(ob_pgconn *p, const ob_config *cfg, const char *leaf, ob_log_level level, long long *n)
{
	const char *schema = cfg->outbox.schema, *slot = cfg->pg.slot;
	const char *ts = cfg->outbox.timestamp_column;
	char age[32], k[24];
	ob_pgres *res = NULL;
	bool ok;

	*n = 0;
	snprintf(age, sizeof(age), "%" PRId64 " seconds", cfg->outbox.retention_s);
	ok = ob_pgsql_begin_upkeep(p, level) &&
	     ob_pgsql_query_row(p, level, "count outbox rows past the retention", 1, &res,
				RESERVE_SQL, schema, slot, leaf, ts, age,
				OB_STRINGIFY(OB_RETENTION_BATCH), schema, slot);
	if (!ob_pgsql_end_upkeep(p, ok, level)) {
		ob_pgres_free(res);
		return false;
	}
	snprintf(k, sizeof(k), "%s", ob_pgres_value(res, 0, 0));
	ob_pgres_free(res);
	res = NULL;
	if (atoll(k) == 0)
		return true;
	ok = ob_pgsql_begin_upkeep(p, level) &&
	     ob_pgsql_query_row(p, level, "delete outbox rows past the retention", 1, &res,
				DELETE_SQL, schema, slot, leaf, leaf, ts, age, k, schema, k, slot,
				k);
	ok = ob_pgsql_end_upkeep(p, ok, level);
	*n = ok ? atoll(ob_pgres_value(res, 0, 0)) : 0;
	ob_pgres_free(res);
	return ok;
}

/* Delete on every leaf while batches come back full, for at most
 * OB_RETENTION_PASS_MS; whether a batch came back full into *more. */
static bool
pass(ob_retention *rt, ob_pgconn *p, const ob_config *cfg, bool *more)
{
	ob_log_level level = rt->failing ? OB_LOG_DEBUG : OB_LOG_WARNING;
	int64_t until = ob_mono_ms() + OB_RETENTION_PASS_MS;
	ob_pgres *tables = NULL;
	long long n = 0;
	bool ok = leaves(p, cfg, level, &tables);

	*more = false;
	for (int i = 0; ok && i < ob_pgres_rows(tables); i++) {
		do {
			ok = batch(p, cfg, ob_pgres_value(tables, i, 0), level, &n);
			if (n > 0) {
				ob_metrics_rows_deleted((uint64_t)n);
				rt->unreported += (uint64_t)n;
			}
			*more = *more || n >= OB_RETENTION_BATCH;
		} while (ok && n >= OB_RETENTION_BATCH && ob_mono_ms() < until);
	}
	ob_pgres_free(tables);
	return ok;
}

void
ob_retention_poll(ob_retention *rt, ob_pgconn *p, const ob_config *cfg, const ob_recpointdb *rp)
{
	int64_t now = ob_mono_ms();
	bool more = false;

	if (p == NULL || cfg->outbox.retention_s == 0 || !rp->usable || now < rt->next_ms)
		return;
	if (pass(rt, p, cfg, &more)) {
		if (rt->failing)
			ob_info("retention: deleting again");
		rt->failing = false;
	} else {
		rt->failing = true;
	}
	now = ob_mono_ms();
	rt->next_ms = now + (more ? 1000 : rt->idle_ms);
	if (rt->unreported > 0 && (!more || now - rt->reported_ms >= REPORT_INTERVAL_MS)) {
		ob_info("retention: deleted %" PRIu64 " published outbox rows older than %" PRId64
			" s",
			rt->unreported, cfg->outbox.retention_s);
		rt->unreported = 0;
		rt->reported_ms = now;
	}
}
