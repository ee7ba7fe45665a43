/*
 * tableprops.c: the outbox table's own properties that decide whether its
 * rows reach the WAL, and whether a moved row can be told from a new one
 * (see tableprops.h).
 */
#include "outboxd/tableprops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *
ob_tableprops_unlogged_sql(const char *table)
{
	/* A partitioned table holds no rows (and PostgreSQL 18 refuses to
	 * make one unlogged): only relkind 'r' counts. A table that is
	 * neither partitioned nor a partition has no partition tree. */
	return ob_xasprintf(
	    "SELECT coalesce(string_agg(format('%%I.%%I', n.nspname, c.relname), ', ' ORDER BY "
	    "n.nspname, c.relname), '') FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace "
	    "n ON n.oid = c.relnamespace WHERE c.relpersistence = 'u' AND c.relkind = 'r' AND "
	    "c.oid IN (SELECT relid FROM pg_partition_tree(%s) UNION ALL SELECT %s)",
	    table, table);
}

void
ob_tableprops_unlogged_detail(const char *unlogged, const char *schema, const char *table,
			      char *buf, size_t size)
{
	bool several = strstr(unlogged, ", ") != NULL;

	snprintf(buf, size,
		 "outbox table %s.%s: %s %s UNLOGGED, so the rows written to %s never reach the "
		 "WAL and no decoder sees them (SET LOGGED later rewrites the table, which "
		 "decoding skips): outboxd cannot publish them; run ALTER TABLE %s SET LOGGED%s",
		 schema, table, unlogged, several ? "are" : "is", several ? "them" : "it",
		 several ? "..." : unlogged, several ? " on each" : "");
}

/* The leaf partitions of table (regclass) whose replica identity does not
 * hold the column id_literal, as for ob_tableprops_unlogged_sql(). */
static char *
hidden_moves_sql(const char *table, const char *id_literal)
{
	return ob_xasprintf(
	    "SELECT coalesce(string_agg(format('%%I.%%I', n.nspname, c.relname), ', ' ORDER BY "
	    "n.nspname, c.relname), '') FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace "
	    "n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND c.oid IN (SELECT relid FROM "
	    "pg_partition_tree(%s)) AND c.relreplident <> 'f' AND NOT EXISTS (SELECT 1 FROM "
	    "pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND "
	    "a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid AND a.attname = %s AND CASE "
	    "c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE "
	    "false END)",
	    table, id_literal);
}

/* Run sql for its one value into *value ("" for NULL or no row). */
static bool
query_text(ob_pgconn *pg, const char *sql, char **value)
{
	if (!ob_pgsql_query_value(pg, sql, value))
		return false;
	if (*value == NULL)
		*value = ob_xstrdup("");
	return true;
}

ob_tableprops_result
ob_tableprops_check_logged(ob_pgconn *pg, const ob_config *cfg, const char *table_oid, char *detail,
			   size_t size)
{
	char *table = ob_xasprintf("%s::oid::regclass", table_oid);
	char *sql = ob_tableprops_unlogged_sql(table);
	char *unlogged = NULL;
	ob_tableprops_result out = OB_TABLEPROPS_QUERY_FAILED;

	snprintf(detail, size, "query failed (see the log)");
	if (query_text(pg, sql, &unlogged)) {
		out = unlogged[0] != '\0' ? OB_TABLEPROPS_FAIL : OB_TABLEPROPS_OK;
		if (out == OB_TABLEPROPS_FAIL)
			ob_tableprops_unlogged_detail(unlogged, cfg->outbox.schema,
						      cfg->outbox.table_name, detail, size);
		else
			snprintf(detail, size, "its rows are written to the WAL");
	}
	free(unlogged);
	free(sql);
	free(table);
	return out;
}

/* The warning of a partitioned outbox table whose moved rows are
 * published again: the partitions hidden names, or (hidden empty) that
 * pgoutput's publication does not publish deletes. */
static void
moves_warning(const ob_config *cfg, const char *hidden, char *buf, size_t size)
{
	static const char moves[] =
	    "(rows move only when an UPDATE changes their partition key: a table partitioned by "
	    "a column rows keep, such as created_at, has no moves)";
	bool several = strchr(hidden, ',') != NULL;

	if (hidden[0] == '\0')
		snprintf(buf, size,
			 "publication %s does not publish deletes, so a row that an UPDATE moves "
			 "into another partition of %s.%s is published again as a new event %s; "
			 "run: ALTER PUBLICATION %s SET (publish = 'insert, delete', "
			 "publish_via_partition_root = true);",
			 cfg->pg.publication, cfg->outbox.schema, cfg->outbox.table_name, moves,
			 cfg->pg.publication);
	else
		snprintf(buf, size,
			 "the replica identity of %s (of %s.%s) does not hold %s, so a row that an "
			 "UPDATE moves out of %s into another partition is published again as a "
			 "new event %s; give %s a primary key (or REPLICA IDENTITY USING INDEX) "
			 "that includes %s, or REPLICA IDENTITY FULL",
			 hidden, cfg->outbox.schema, cfg->outbox.table_name, cfg->outbox.id_column,
			 several ? "one of them" : "it", moves, several ? "each" : "it",
			 cfg->outbox.id_column);
}

ob_tableprops_result
ob_tableprops_check_moves(ob_pgconn *pg, const ob_config *cfg, const char *table_oid, char *detail,
			  size_t size)
{
	char *table = ob_xasprintf("%s::oid::regclass", table_oid);
	char *id = ob_pgsql_quote_literal(pg, cfg->outbox.id_column);
	char *sql = hidden_moves_sql(table, id);
	char *hidden = NULL, *deletes = NULL;
	ob_tableprops_result out = OB_TABLEPROPS_QUERY_FAILED;

	snprintf(detail, size, "query failed (see the log)");
	if (!query_text(pg, sql, &hidden) ||
	    (cfg->pg.plugin == OB_PLUGIN_PGOUTPUT &&
	     !ob_pgsql_query_valuef(pg, &deletes,
				    "SELECT pubdelete::text FROM pg_catalog.pg_publication WHERE "
				    "pubname = %L",
				    cfg->pg.publication)))
		goto done;
	/* A missing publication is made with deletes (publication.h). */
	out = hidden[0] != '\0' || (deletes != NULL && strcmp(deletes, "false") == 0)
		  ? OB_TABLEPROPS_WARN
		  : OB_TABLEPROPS_OK;
	if (out == OB_TABLEPROPS_WARN)
		moves_warning(cfg, hidden, detail, size);
	else
		snprintf(detail, size,
			 "a row that an UPDATE moves into another partition is not published "
			 "again (sql/README.md, \"Rows moved between partitions\")");
done:
	free(deletes);
	free(hidden);
	free(sql);
	free(id);
	free(table);
	return out;
}
