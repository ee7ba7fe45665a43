/*
 * backlog.c: reading the outbox rows of the slot's snapshot (backlog.h).
 *
 * One plain connection per backlog: BEGIN ISOLATION LEVEL REPEATABLE READ,
 * READ ONLY; SET TRANSACTION SNAPSHOT; a NO SCROLL cursor over SELECT *
 * (every column, as wal2json sends a row) of the matching rows, fetched
 * a page of 1000 rows at a time. Only one page is held at once.
 */
#include "outboxd/backlog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"

/* One page: the rows fetched from the cursor at once. */
#define FETCH_PAGE_SQL "FETCH FORWARD 1000 FROM ob_backlog"

struct ob_backlog {
	PGconn *conn;
	int64_t estimate;
	PGresult *page; /* the current page; NULL before the first */
	int page_row;   /* the next row of page to hand out */
	bool done;      /* the cursor is exhausted */
	/* The row handed out, pointing into page. */
	ob_text_row row;
	const char **names;
	ob_text_kind *kinds;
	const char **values;
	size_t *lengths;
	size_t cap; /* entries allocated in each array above */
};

/* The message of a failed result, without libpq's trailing newline, into
 * buf. */
static const char *
result_error(const PGresult *res, char *buf, size_t len)
{
	size_t n;

	snprintf(buf, len, "%s", PQresultErrorMessage(res));
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return buf;
}

/* Run one command; false (logged as "could not <what>") unless its result
 * has the status wanted. */
static bool
exec_ok(PGconn *conn, const char *sql, ExecStatusType want, const char *what)
{
	PGresult *res = PQexec(conn, sql);
	bool ok = PQresultStatus(res) == want;
	char err[512];

	if (!ok)
		ob_error("could not %s: %s", what, result_error(res, err, sizeof(err)));
	PQclear(res);
	return ok;
}

/* The backlog's query: SELECT <what> FROM the outbox table WHERE
 * (backlog_where) ORDER BY backlog_order_by, or by the timestamp column
 * then the id column. The caller frees. */
static char *
backlog_sql(PGconn *conn, const ob_config *cfg, const char *what)
{
	const char *ts = cfg->outbox.timestamp_column;
	char *schema = PQescapeIdentifier(conn, cfg->outbox.schema, strlen(cfg->outbox.schema));
	char *table =
	    PQescapeIdentifier(conn, cfg->outbox.table_name, strlen(cfg->outbox.table_name));
	char *id = PQescapeIdentifier(conn, cfg->outbox.id_column, strlen(cfg->outbox.id_column));
	char *tsq = ts[0] != '\0' ? PQescapeIdentifier(conn, ts, strlen(ts)) : NULL;
	char *order, *sql;

	if (schema == NULL || table == NULL || id == NULL || (ts[0] != '\0' && tsq == NULL)) {
		ob_error("could not quote the outbox table's names: %s", PQerrorMessage(conn));
		abort(); /* only on out-of-memory or an invalid encoding */
	}
	if (cfg->outbox.backlog_order_by[0] != '\0')
		order = ob_xstrdup(cfg->outbox.backlog_order_by);
	else if (tsq != NULL)
		order = ob_xasprintf("%s, %s", tsq, id);
	else
		order = ob_xstrdup(id);
	sql = ob_xasprintf("SELECT %s FROM %s.%s WHERE (%s) ORDER BY %s", what, schema, table,
			   cfg->outbox.backlog_where, order);
	free(order);
	PQfreemem(schema);
	PQfreemem(table);
	PQfreemem(id);
	PQfreemem(tsq);
	return sql;
}

/* Whether a failed command's SQLSTATE says the server could not answer
 * now (connection, shutdown, resources, a lock or statement timeout,
 * serialization) rather than that the command is wrong. */
static bool
transient_state(PGconn *conn, const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (PQstatus(conn) != CONNECTION_OK || s == NULL)
		return true;
	return strncmp(s, "08", 2) == 0 || strncmp(s, "57", 2) == 0 || strncmp(s, "53", 2) == 0 ||
	       strncmp(s, "40", 2) == 0 || strcmp(s, "55P03") == 0;
}

/* The planner's row estimate: the first "rows=" of EXPLAIN's first line. */
static int64_t
plan_rows(const PGresult *res)
{
	const char *line = PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "";
	const char *rows = strstr(line, "rows=");

	return rows != NULL ? strtoll(rows + 5, NULL, 10) : -1;
}

ob_pg_status
ob_backlog_verify(const ob_config *cfg, char *detail, size_t detail_len)
{
	PGconn *conn = ob_pgrepl_connect_plain(cfg);
	ob_pg_status st = OB_PG_OK;
	char *select, *sql;
	PGresult *res;

	detail[0] = '\0';
	if (conn == NULL)
		return OB_PG_RETRY;
	select = backlog_sql(conn, cfg, "1");
	sql = ob_xasprintf("EXPLAIN %s", select);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		result_error(res, detail, detail_len);
		if (transient_state(conn, res)) {
			ob_error("could not check outbox.backlog_where: %s", detail);
			st = OB_PG_RETRY;
		} else {
			st = OB_PG_FATAL;
		}
	}
	PQclear(res);
	free(sql);
	free(select);
	PQfinish(conn);
	return st;
}

ob_pg_status
ob_backlog_open(const ob_config *cfg, const char *snapshot, ob_backlog **out)
{
	ob_backlog *b = ob_xcalloc(1, sizeof(*b));
	char *select = NULL, *sql = NULL, *lit = NULL;
	PGresult *res = NULL;
	bool ok = false;

	*out = NULL;
	b->conn = ob_pgrepl_connect_plain(cfg);
	if (b->conn == NULL)
		goto free_backlog;
	lit = PQescapeLiteral(b->conn, snapshot, strlen(snapshot));
	select = backlog_sql(b->conn, cfg, "*");
	sql = ob_xasprintf("SET TRANSACTION SNAPSHOT %s", lit != NULL ? lit : "''");
	if (!exec_ok(b->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", PGRES_COMMAND_OK,
		     "begin the backlog's transaction") ||
	    !exec_ok(b->conn, sql, PGRES_COMMAND_OK, "import the slot's snapshot"))
		goto free_sql;
	free(sql);
	sql = ob_xasprintf("EXPLAIN %s", select);
	res = PQexec(b->conn, sql);
	b->estimate = PQresultStatus(res) == PGRES_TUPLES_OK ? plan_rows(res) : -1;
	free(sql);
	sql = ob_xasprintf("DECLARE ob_backlog NO SCROLL CURSOR FOR %s", select);
	ok = exec_ok(b->conn, sql, PGRES_COMMAND_OK, "open the backlog's cursor");
free_sql:
	PQclear(res);
	free(sql);
	free(select);
	PQfreemem(lit);
free_backlog:
	if (!ok) {
		ob_backlog_close(b);
		return OB_PG_RETRY;
	}
	*out = b;
	return OB_PG_OK;
}

int64_t
ob_backlog_estimate(const ob_backlog *b)
{
	return b->estimate;
}

/* Fetch the next page and describe its columns; false (logged) on error. */
static bool
fetch_page(ob_backlog *b)
{
	char err[512];
	size_t n;

	PQclear(b->page);
	b->page_row = 0;
	b->page = PQexec(b->conn, FETCH_PAGE_SQL);
	if (PQresultStatus(b->page) != PGRES_TUPLES_OK) {
		ob_error("could not read the backlog: %s", result_error(b->page, err, sizeof(err)));
		return false;
	}
	n = (size_t)PQnfields(b->page);
	if (n > b->cap) {
		b->names = ob_xrealloc(b->names, n * sizeof(*b->names));
		b->kinds = ob_xrealloc(b->kinds, n * sizeof(*b->kinds));
		b->values = ob_xrealloc(b->values, n * sizeof(*b->values));
		b->lengths = ob_xrealloc(b->lengths, n * sizeof(*b->lengths));
		b->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		b->names[i] = PQfname(b->page, (int)i);
		b->kinds[i] = ob_text_kind_for_type(PQftype(b->page, (int)i));
	}
	b->row = (ob_text_row){b->names, b->kinds, b->values, b->lengths, n};
	b->done = PQntuples(b->page) == 0;
	return true;
}

int
ob_backlog_next(ob_backlog *b, const ob_text_row **row)
{
	int r = b->page_row;

	if (b->done)
		return 0;
	if (b->page == NULL || r >= PQntuples(b->page)) {
		if (!fetch_page(b))
			return -1;
		if (b->done)
			return 0;
		r = 0;
	}
	for (size_t i = 0; i < b->row.columns_len; i++) {
		bool null = PQgetisnull(b->page, r, (int)i);

		b->values[i] = null ? NULL : PQgetvalue(b->page, r, (int)i);
		b->lengths[i] = null ? 0 : (size_t)PQgetlength(b->page, r, (int)i);
	}
	b->page_row = r + 1;
	*row = &b->row;
	return 1;
}

bool
ob_backlog_copy_slot(ob_backlog *b, const char *tmp, const char *slot)
{
	/* config.c allows only [a-z0-9_] in slot names, and tmp is built from
	 * one: no quoting needed. */
	char *sql =
	    ob_xasprintf("SELECT pg_copy_logical_replication_slot('%s', '%s', false)", tmp, slot);
	bool ok = exec_ok(b->conn, "COMMIT", PGRES_COMMAND_OK, "end the backlog's transaction") &&
		  exec_ok(b->conn, sql, PGRES_TUPLES_OK, "copy the temporary replication slot");

	free(sql);
	return ok;
}

void
ob_backlog_close(ob_backlog *b)
{
	if (b == NULL)
		return;
	PQclear(b->page);
	PQfinish(b->conn);
	free(b->names);
	free(b->kinds);
	free(b->values);
	free(b->lengths);
	free(b);
}
