/*
 * backlogsql.c: the backlog's query text and page sizes (backlogsql.h).
 */
#include "outboxd/backlogsql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/sqlstate.h"

char *
ob_backlogsql_quote_ident(const char *s)
{
	size_t len = strlen(s), n = 0;
	char *out = ob_xmalloc(2 * len + 3);

	out[n++] = '"';
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			out[n++] = '"';
		out[n++] = *p;
	}
	out[n++] = '"';
	out[n] = '\0';
	return out;
}

char *
ob_backlogsql_order(const ob_config *cfg, const char *identity)
{
	const char *ts = cfg->outbox.timestamp_column;
	char *id, *first = NULL, *order;

	if (cfg->outbox.backlog_order_by[0] != '\0')
		return ob_xstrdup(cfg->outbox.backlog_order_by);
	id = ob_backlogsql_quote_ident(cfg->outbox.id_column);
	if (identity != NULL && strcmp(identity, cfg->outbox.id_column) != 0)
		first = ob_backlogsql_quote_ident(identity);
	else if (identity == NULL && ts[0] != '\0')
		first = ob_backlogsql_quote_ident(ts);
	order = first != NULL ? ob_xasprintf("%s, %s", first, id) : ob_xstrdup(id);
	free(first);
	free(id);
	return order;
}

char *
ob_backlogsql_select(const ob_config *cfg, const char *what, const char *order)
{
	char *schema = ob_backlogsql_quote_ident(cfg->outbox.schema);
	char *table = ob_backlogsql_quote_ident(cfg->outbox.table_name);
	char *sql = ob_xasprintf("SELECT %s FROM %s.%s WHERE (\n%s\n)%s%s", what, schema, table,
				 cfg->outbox.backlog_where, order != NULL ? " ORDER BY " : "",
				 order != NULL ? order : "");

	free(table);
	free(schema);
	return sql;
}

/* "SELECT <what>" over the pg_class row c (and the pg_namespace row n) of
 * the table named by the quoted literals schema_lit and table_lit. */
static char *
table_query(const char *what, const char *schema_lit, const char *table_lit)
{
	return ob_xasprintf("SELECT %s FROM pg_class c JOIN pg_namespace n ON n.oid = "
			    "c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
			    what, schema_lit, table_lit);
}

char *
ob_backlogsql_identity_query(const char *schema_lit, const char *table_lit)
{
	return table_query(
	    "coalesce((SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid "
	    "= c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity <> '' "
	    "ORDER BY a.attnum LIMIT 1), '')",
	    schema_lit, table_lit);
}

char *
ob_backlogsql_grant_query(const char *schema_lit, const char *table_lit)
{
	return table_query(
	    "concat_ws(' ', CASE WHEN NOT has_schema_privilege(n.oid, 'USAGE') THEN "
	    "format('GRANT USAGE ON SCHEMA %I TO %I;', n.nspname, current_user) END, "
	    "CASE WHEN NOT has_table_privilege(c.oid, 'SELECT') THEN "
	    "format('GRANT SELECT ON TABLE %I.%I TO %I;', n.nspname, c.relname, "
	    "current_user) END)",
	    schema_lit, table_lit);
}

void
ob_backlogsql_select_denied(const ob_config *cfg, const char *grant, char *buf, size_t len)
{
	snprintf(buf, len,
		 "this role lacks SELECT on %s.%s, which the backlog (outbox.backlog_where) reads "
		 "when outboxd creates its slot; run: %s (sql/role.sql)",
		 cfg->outbox.schema, cfg->outbox.table_name, grant);
}

size_t
ob_backlogsql_page_rows(size_t current, size_t rows, size_t bytes)
{
	double next;

	if (rows == 0)
		return current;
	if (bytes == 0)
		return OB_BACKLOG_PAGE_MAX_ROWS;
	next = (double)OB_BACKLOG_PAGE_BYTES * (double)rows / (double)bytes;
	if (next < 1)
		return 1;
	return next > OB_BACKLOG_PAGE_MAX_ROWS ? OB_BACKLOG_PAGE_MAX_ROWS : (size_t)next;
}

bool
ob_backlogsql_transient(const char *s)
{
	return ob_sqlstate_transient(s);
}

int64_t
ob_backlogsql_plan_rows(const char *line)
{
	const char *rows = strstr(line, " rows=");
	char *end;
	long long n;

	if (rows == NULL)
		return -1;
	n = strtoll(rows + 6, &end, 10);
	return end == rows + 6 ? -1 : (int64_t)n;
}
