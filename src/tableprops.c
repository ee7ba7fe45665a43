/*
 * tableprops.c: the outbox table's own properties that decide whether its
 * rows reach the WAL (see tableprops.h).
 */
#include "outboxd/tableprops.h"

#include <stdio.h>
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
