/*
 * backlogsql.c: the backlog's query text and page sizes (backlogsql.h).
 */
#include "outboxd/backlogsql.h"

#include <stdlib.h>
#include <string.h>

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
ob_backlogsql_select(const ob_config *cfg, const char *what, bool with_order)
{
	const char *ts = cfg->outbox.timestamp_column;
	char *schema = ob_backlogsql_quote_ident(cfg->outbox.schema);
	char *table = ob_backlogsql_quote_ident(cfg->outbox.table_name);
	char *id = ob_backlogsql_quote_ident(cfg->outbox.id_column);
	char *tsq = ts[0] != '\0' ? ob_backlogsql_quote_ident(ts) : NULL;
	char *order, *sql;

	if (!with_order)
		order = ob_xstrdup("");
	else if (cfg->outbox.backlog_order_by[0] != '\0')
		order = ob_xasprintf(" ORDER BY %s", cfg->outbox.backlog_order_by);
	else if (tsq != NULL)
		order = ob_xasprintf(" ORDER BY %s, %s", tsq, id);
	else
		order = ob_xasprintf(" ORDER BY %s", id);
	sql = ob_xasprintf("SELECT %s FROM %s.%s WHERE (\n%s\n)%s", what, schema, table,
			   cfg->outbox.backlog_where, order);
	free(order);
	free(tsq);
	free(id);
	free(table);
	free(schema);
	return sql;
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
	if (s == NULL)
		return true;
	return strncmp(s, "08", 2) == 0 || strncmp(s, "57", 2) == 0 || strncmp(s, "53", 2) == 0 ||
	       strncmp(s, "40", 2) == 0 || strcmp(s, "55P03") == 0;
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
