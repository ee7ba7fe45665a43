/*
 * partitions.c: reading the leaf partitions of the outbox table, once per
 * stream on the replication connection and about every second on a plain
 * connection while the stream runs (see partitions.h for the contract).
 */
#include "outboxd/partitions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/publication.h"
#include "outboxd/tableprops.h"

char *
ob_partitions_table_name(ob_pgconn *p, const ob_config *cfg)
{
	char *schema = ob_pgsql_quote_literal(p, cfg->outbox.schema);
	char *table = ob_pgsql_quote_literal(p, cfg->outbox.table_name);
	char *name = ob_xasprintf("format('%%I.%%I', %s, %s)", schema, table);

	free(table);
	free(schema);
	return name;
}

/* Run sql, which must succeed and return one row of one column; its
 * value, which the caller frees, goes into *value. */
static bool
query_value(ob_pgconn *p, const char *sql, char **value, char *err, size_t errlen)
{
	ob_pgres *res = ob_pgsql_exec(p, sql);
	bool ok = ob_pgres_tuples(res) && ob_pgres_rows(res) == 1 && ob_pgres_columns(res) == 1 &&
		  !ob_pgres_null(res, 0, 0);

	if (!ok)
		(void)ob_pgres_error(res, err, errlen);
	else
		*value = ob_xstrdup(ob_pgres_value(res, 0, 0));
	ob_pgres_free(res);
	return ok;
}

/* Run a statement that returns no rows. */
static bool
command(ob_pgconn *p, const char *sql, char *err, size_t errlen)
{
	ob_pgres *res = ob_pgsql_exec(p, sql);
	bool ok = ob_pgres_command(res);

	if (!ok)
		(void)ob_pgres_error(res, err, errlen);
	ob_pgres_free(res);
	return ok;
}

/* The position read first: the current WAL flush position (on a hot
 * standby the replayed one: every commit before it is visible there). */
static bool
read_position(ob_pgconn *p, ob_lsn *lsn, char *err, size_t errlen)
{
	char *value = NULL;
	bool ok = query_value(p, "SELECT " OB_SQL_WAL_FLUSH_LSN, &value, err, errlen);

	if (ok && !(ok = ob_lsn_parse(value, lsn)))
		snprintf(err, errlen, "unexpected WAL flush position \"%s\"", value);
	free(value);
	return ok;
}

/* The transactions running now that hold a lock on what the set is read
 * from, other than the locks of reading and writing rows: the outbox
 * table and its partitions (attaching, creating, detaching a partition,
 * renaming or dropping the table, SET UNLOGGED), and with pgoutput the
 * publication catalogs too. As an array literal of their 32-bit ids
 * ("{725,731}"), which the caller frees. A transaction holds its locks
 * until after it has become visible. */
static bool
read_writers(ob_pgconn *p, const ob_config *cfg, char **xids, char *err, size_t errlen)
{
	char *name = ob_partitions_table_name(p, cfg);
	char *pub = ob_pgsql_quote_literal(p, cfg->pg.publication);
	char *tables = ob_xasprintf(
	    "(l.locktype = 'relation' AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', "
	    "'RowExclusiveLock') AND l.relation IN (SELECT relid FROM "
	    "pg_partition_tree(to_regclass(%s)) UNION ALL SELECT to_regclass(%s)))",
	    name, name);
	char *locks =
	    cfg->pg.plugin == OB_PLUGIN_PGOUTPUT
		? ob_xasprintf("%s OR (l.locktype = 'object' AND l.classid = "
			       "'pg_catalog.pg_publication'::regclass AND l.objid = (SELECT oid "
			       "FROM pg_catalog.pg_publication WHERE pubname = %s))",
			       tables, pub)
		: ob_xstrdup(tables);
	char *sql = ob_xasprintf(
	    "SELECT array(SELECT DISTINCT x.transactionid::text FROM pg_locks x JOIN pg_locks l "
	    "ON l.virtualtransaction = x.virtualtransaction WHERE x.locktype = 'transactionid' "
	    "AND x.mode = 'ExclusiveLock' AND x.granted AND l.granted AND (%s))::text",
	    locks);
	bool ok = query_value(p, sql, xids, err, errlen);

	if (ok && strspn(*xids, "{},0123456789") != strlen(*xids)) {
		snprintf(err, errlen, "unexpected transaction ids \"%.64s\"", *xids);
		free(*xids);
		*xids = NULL;
		ok = false;
	}
	free(sql);
	free(locks);
	free(tables);
	free(pub);
	free(name);
	return ok;
}

/* How many of the transactions xids (read_writers()) the transaction's
 * snapshot does not see: they may have written their commit records, but
 * are not visible yet (see partitions.h). So are those that updated or
 * deleted a catalog row that names what the stream reads, which such a
 * change leaves as its only trace (it takes no lock on the tables): with
 * pgoutput the publication's row (a change of its options), with wal2json
 * the schemas of the table and its partitions (ALTER SCHEMA … RENAME: the
 * rows decoded after it carry the new name, which wal2json's filter of
 * the old names drops). A 32-bit id is widened to the full id nearest the
 * snapshot's xmax. */
static bool
read_unsettled(ob_pgconn *p, const ob_config *cfg, const char *xids, long *unsettled, char *err,
	       size_t errlen)
{
	char *pub = ob_pgsql_quote_literal(p, cfg->pg.publication);
	char *name = ob_partitions_table_name(p, cfg);
	char *updater =
	    cfg->pg.plugin == OB_PLUGIN_PGOUTPUT
		? ob_xasprintf(" UNION ALL SELECT xmax::text::bigint FROM "
			       "pg_catalog.pg_publication WHERE pubname = %s",
			       pub)
		: ob_xasprintf(" UNION ALL SELECT n.xmax::text::bigint FROM "
			       "pg_catalog.pg_namespace n WHERE n.oid IN (SELECT "
			       "c.relnamespace FROM pg_partition_tree(%s::regclass) t JOIN "
			       "pg_catalog.pg_class c ON c.oid = t.relid)",
			       name);
	char *sql = ob_xasprintf(
	    "SELECT count(*) FROM (SELECT pg_current_snapshot() AS s) snap, LATERAL ("
	    "SELECT (pg_snapshot_xmax(s)::text::bigint + ((x - "
	    "pg_snapshot_xmax(s)::text::bigint) %% 4294967296 + 6442450944) %% 4294967296 - "
	    "2147483648)::text::xid8 AS x8 FROM (SELECT unnest('%s'::bigint[])%s) t(x) "
	    "WHERE x <> 0) w WHERE NOT pg_visible_in_snapshot(x8, s)",
	    xids, updater);
	char *value = NULL;
	bool ok = query_value(p, sql, &value, err, errlen);

	if (ok)
		*unsettled = strtol(value, NULL, 10);
	free(value);
	free(sql);
	free(updater);
	free(name);
	free(pub);
	return ok;
}

/* The leaves and the table itself, in a statement of its own. A table
 * that is neither partitioned nor a partition has no partition tree: it
 * is added by name. */
static bool
read_leaves(ob_pgconn *p, const ob_config *cfg, ob_leafset *set, char *err, size_t errlen)
{
	char *name = ob_partitions_table_name(p, cfg);
	char *sql = ob_xasprintf(
	    "SELECT n.nspname, c.relname, t.isleaf, t.level = 0 "
	    "FROM pg_partition_tree(%s::regclass) t "
	    "JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
	    "WHERE t.isleaf OR t.level = 0",
	    name);
	ob_pgres *res = ob_pgsql_exec(p, sql);
	bool ok = ob_pgres_tuples(res) && ob_pgres_columns(res) == 4;

	if (!ok)
		(void)ob_pgres_error(res, err, errlen);
	ob_leafset_add(set, cfg->outbox.schema, cfg->outbox.table_name);
	for (int i = 0; ok && i < ob_pgres_rows(res); i++) {
		bool leaf = strcmp(ob_pgres_value(res, i, 2), "t") == 0;
		bool root = strcmp(ob_pgres_value(res, i, 3), "t") == 0;

		ob_leafset_add(set, ob_pgres_value(res, i, 0), ob_pgres_value(res, i, 1));
		if (root)
			set->partitioned = !leaf;
	}
	ob_pgres_free(res);
	free(sql);
	free(name);
	return ok;
}

/* The unlogged tables of the outbox into set->unlogged. */
static bool
read_unlogged(ob_pgconn *p, const ob_config *cfg, ob_leafset *set, char *err, size_t errlen)
{
	char *name = ob_partitions_table_name(p, cfg);
	char *table = ob_xasprintf("%s::regclass", name);
	char *sql = ob_tableprops_unlogged_sql(table);
	char *value = NULL;
	bool ok = query_value(p, sql, &value, err, errlen);

	if (ok)
		snprintf(set->unlogged, sizeof(set->unlogged), "%s", value);
	free(value);
	free(sql);
	free(table);
	free(name);
	return ok;
}

/* The catalog read of ob_partitions_read(), in the transaction it opened:
 * the set (or the publication's stamp), its unlogged tables, and how many
 * of the writers xids are unsettled in the same snapshot. */
static bool
read_in_snapshot(ob_pgconn *p, const ob_config *cfg, const char *xids, ob_leafset *set,
		 long *unsettled, char *err, size_t errlen)
{
	if (cfg->pg.plugin == OB_PLUGIN_PGOUTPUT) {
		/* pgoutput follows partitions itself; what can change under
		 * it is the publication. */
		ob_leafset_add(set, cfg->outbox.schema, cfg->outbox.table_name);
		if (!ob_publication_stamp(p, cfg, set->stamp, sizeof(set->stamp), err, errlen))
			return false;
	} else if (!read_leaves(p, cfg, set, err, errlen)) {
		return false;
	}
	return read_unlogged(p, cfg, set, err, errlen) &&
	       read_unsettled(p, cfg, xids, unsettled, err, errlen);
}

bool
ob_partitions_read(ob_pgconn *p, const ob_config *cfg, ob_leafset *set, char *err, size_t errlen)
{
	ob_lsn position = 0;
	long unsettled = 0;
	char *xids = NULL;
	bool ok;

	ob_leafset_clear(set);
	/* The position, then the writers, then the catalog in a later
	 * snapshot: see partitions.h. */
	if (!read_position(p, &position, err, errlen) || !read_writers(p, cfg, &xids, err, errlen))
		return false;
	ok = command(p, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen);
	if (ok) {
		ok = read_in_snapshot(p, cfg, xids, set, &unsettled, err, errlen);
		/* A failed read leaves the transaction aborted: end it
		 * either way, keeping the first error. */
		ok = command(p, ok ? "COMMIT" : "ROLLBACK", err, ok ? errlen : 0) && ok;
	}
	if (ok)
		set->verified = unsettled == 0 ? position : 0;
	free(xids);
	return ok;
}

void
ob_partwatch_init(ob_partwatch *w, const ob_config *cfg, ob_pgsql_tick_fn tick, void *ctx)
{
	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->tick = tick;
	w->tick_ctx = ctx;
	ob_backoff_init(&w->backoff, OB_PARTITIONS_INTERVAL_MS, cfg->pg.reconnect_max_backoff_ms);
}

bool
ob_partwatch_failing(const ob_partwatch *w)
{
	return w->failing;
}

void
ob_partwatch_close(ob_partwatch *w)
{
	ob_pgsql_close(w->conn);
	w->conn = NULL;
	w->next_ms = 0;
}

bool
ob_partwatch_read(ob_partwatch *w, ob_leafset *set, char *err, size_t errlen)
{
	if (w->conn == NULL) {
		if (ob_pgsql_connect(w->cfg, OB_PGCONN_PLAIN, &w->conn) != OB_PG_OK) {
			snprintf(err, errlen, "no connection (see above)");
			return false;
		}
		ob_pgsql_set_tick(w->conn, w->tick, w->tick_ctx);
	}
	return ob_partitions_read(w->conn, w->cfg, set, err, errlen);
}

bool
ob_partwatch_poll(ob_partwatch *w, ob_leafset *set)
{
	const char *what = w->cfg->pg.plugin == OB_PLUGIN_PGOUTPUT ? "publication" : "partitions";
	int64_t now = ob_mono_ms();
	char err[512];

	if (now < w->next_ms)
		return false;
	if (ob_partwatch_read(w, set, err, sizeof(err))) {
		if (w->failing)
			ob_info("read the %s of %s.%s again", what, w->cfg->outbox.schema,
				w->cfg->outbox.table_name);
		w->failing = false;
		ob_backoff_reset(&w->backoff);
		w->next_ms = now + OB_PARTITIONS_INTERVAL_MS;
		w->last_ms = now;
		return true;
	}
	if (!w->failing)
		ob_warn("could not read the %s of %s.%s: %s; the slot is not confirmed further "
			"until they are read, and the stream ends until then",
			what, w->cfg->outbox.schema, w->cfg->outbox.table_name, err);
	w->failing = true;
	ob_pgsql_close(w->conn);
	w->conn = NULL;
	w->next_ms = now + ob_backoff_next(&w->backoff);
	return false;
}

void
ob_partwatch_hurry(ob_partwatch *w, int64_t min_gap_ms)
{
	if (!w->failing && w->last_ms + min_gap_ms < w->next_ms)
		w->next_ms = w->last_ms + min_gap_ms;
}

int64_t
ob_partwatch_due_ms(const ob_partwatch *w)
{
	return w->next_ms;
}
