/*
 * backlog.c: reading the outbox rows of the slot's snapshot (backlog.h).
 *
 * One plain connection per backlog, every transaction on it read-only,
 * every query sent as exactly one statement and waited for with the
 * relay's tick running (pgrepl.h), so the predicate can neither write nor
 * add statements of its own, and a long sort or scan holds neither the
 * loop, nor its health, nor SIGTERM. The rows come from a NO SCROLL cursor
 * over SELECT * (every column, as wal2json sends a row; backlogsql.h) in
 * pages of about OB_BACKLOG_PAGE_BYTES: only one page is held at once,
 * whatever the size of the rows.
 */
#include "outboxd/backlog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/backlogsql.h"
#include "outboxd/log.h"
#include "outboxd/sqlstate.h"

struct ob_backlog {
	const ob_config *cfg;
	ob_pgconn *pg;
	int64_t estimate;
	char *order;      /* the ORDER BY list, settled by ob_backlog_verify */
	char error[1024]; /* why the last OB_PG_FATAL */
	ob_pgres *page;   /* the current page; NULL before the first */
	int page_row;     /* the next row of page to hand out */
	size_t page_rows; /* the rows the next FETCH asks for */
	bool done;        /* the cursor is exhausted */
	/* The row handed out, pointing into page. */
	ob_text_row row;
	const char **names;
	ob_text_kind *kinds;
	const char **values;
	size_t *lengths;
	size_t cap; /* entries allocated in each array above */
};

/* The message of a failed result into buf: the server's primary message
 * (one line, without the "ERROR:" prefix and the statement excerpt
 * libpq adds), else libpq's own without its trailing newline. */
static const char *
result_error(const ob_pgres *res, char *buf, size_t len)
{
	const char *primary = ob_pgres_field_of(res, OB_PGRES_PRIMARY);

	if (primary == NULL)
		return ob_pgres_error(res, buf, len);
	snprintf(buf, len, "%s", primary);
	return buf;
}

/* Whether a failed command failed for a reason of the moment
 * (ob_backlogsql_transient). */
static bool
transient_failure(const ob_pgres *res)
{
	return ob_backlogsql_transient(ob_pgres_field_of(res, OB_PGRES_SQLSTATE));
}

/* Run one command; false (logged as "could not <what>") unless it
 * succeeded. */
static bool
exec_ok(ob_backlog *b, const char *sql, const char *what)
{
	ob_pgres *res = ob_pgsql_exec(b->pg, sql);
	bool ok = ob_pgres_command(res);
	char err[512];

	if (!ok)
		ob_error("could not %s: %s", what, result_error(res, err, sizeof(err)));
	ob_pgres_free(res);
	return ok;
}

/* The query failed for good, with message err: keep why, naming the keys
 * (the server does not say which of the two is at fault), and return
 * OB_PG_FATAL. */
static ob_pg_status
refused(ob_backlog *b, const char *err)
{
	snprintf(b->error, sizeof(b->error),
		 "outbox.backlog_where \"%s\" (or outbox.backlog_order_by \"%s\") failed on the "
		 "outbox rows: %s",
		 b->cfg->outbox.backlog_where, b->cfg->outbox.backlog_order_by, err);
	return OB_PG_FATAL;
}

ob_pg_status
ob_backlog_connect(const ob_config *cfg, ob_pgsql_tick_fn tick, void *ctx, ob_backlog **out)
{
	ob_backlog *b;

	*out = NULL;
	b = ob_xcalloc(1, sizeof(*b));
	b->cfg = cfg;
	b->estimate = -1;
	b->page_rows = OB_BACKLOG_PAGE_FIRST_ROWS;
	if (ob_pgsql_connect(cfg, OB_PGCONN_PLAIN, &b->pg) != OB_PG_OK) {
		free(b);
		return OB_PG_RETRY;
	}
	ob_pgsql_set_tick(b->pg, tick, ctx);
	/* Every transaction of this session is read-only: the predicate runs
	 * with the role's privileges and cannot write even where they would
	 * allow it. (No timeout cuts the backlog short: pgrepl pins them to 0
	 * on every connection.) */
	if (!exec_ok(b, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
		     "make the backlog's session read-only")) {
		ob_backlog_close(b);
		return OB_PG_RETRY;
	}
	*out = b;
	return OB_PG_OK;
}

/* The one value of the catalog query that build makes of the outbox
 * table's quoted names (backlogsql.h) into *value (NULL: no row); false
 * (logged) when the query failed. */
static bool
catalog_value(ob_backlog *b, char *(*build)(const char *, const char *), char **value)
{
	char *schema = ob_pgsql_quote_literal(b->pg, b->cfg->outbox.schema);
	char *table = ob_pgsql_quote_literal(b->pg, b->cfg->outbox.table_name);
	char *sql = build(schema, table);
	bool ok = ob_pgsql_query_value(b->pg, sql, value);

	free(sql);
	free(table);
	free(schema);
	return ok;
}

/* Settle b->order (ob_backlogsql_order): with backlog_order_by empty, the
 * table's identity column leads it when the table has one; when it has
 * none, warn that the order falls back to the timestamp column, which
 * does not keep one transaction's events of a key in the order the stream
 * gives them. False (logged) when the catalog could not be read. */
static bool
settle_order(ob_backlog *b)
{
	const ob_config *cfg = b->cfg;
	char *identity = NULL;
	bool none;

	free(b->order);
	b->order = NULL;
	if (cfg->outbox.backlog_order_by[0] == '\0' &&
	    !catalog_value(b, ob_backlogsql_identity_query, &identity))
		return false;
	/* identity NULL: backlog_order_by is set, or there is no such table
	 * (EXPLAIN names that fault); "": the table has no identity column. */
	none = identity != NULL && identity[0] == '\0';
	b->order = ob_backlogsql_order(cfg, none ? NULL : identity);
	if (none)
		ob_warn(
		    "%s.%s has no identity column: the backlog is ordered by %s, which does not "
		    "keep the order in which one transaction wrote the events of one key (the "
		    "stream does); add one (seq bigint GENERATED BY DEFAULT AS IDENTITY, as in "
		    "sql/outbox.sql) or set outbox.backlog_order_by",
		    cfg->outbox.schema, cfg->outbox.table_name, b->order);
	free(identity);
	return true;
}

/* EXPLAIN the backlog's query (without its ORDER BY when without_order).
 * The result is the caller's to check and clear. */
static ob_pgres *
explain(ob_backlog *b, bool without_order)
{
	char *select = ob_backlogsql_select(b->cfg, "1", without_order ? NULL : b->order);
	char *sql = ob_xasprintf("EXPLAIN %s", select);
	ob_pgres *res = ob_pgsql_exec(b->pg, sql);

	free(sql);
	free(select);
	return res;
}

/* Whether the server refused the backlog's query (res) because this role
 * may not SELECT the outbox table; if so, b->error says so and gives the
 * GRANT that fixes it. */
static bool
select_denied(ob_backlog *b, const ob_pgres *res)
{
	const char *state = ob_pgres_field_of(res, OB_PGRES_SQLSTATE);
	char *grant = NULL;
	bool denied;

	if (!ob_sqlstate_is(state, OB_SQLSTATE_INSUFFICIENT_PRIVILEGE) ||
	    !catalog_value(b, ob_backlogsql_grant_query, &grant))
		return false;
	denied = grant != NULL && grant[0] != '\0';
	if (denied)
		ob_backlogsql_select_denied(b->cfg, grant, b->error, sizeof(b->error));
	free(grant);
	return denied;
}

ob_pg_status
ob_backlog_verify(ob_backlog *b)
{
	const ob_config *cfg = b->cfg;
	ob_pgres *res;
	ob_pg_status st = OB_PG_OK;
	char err[512], order[300] = "";

	if (!settle_order(b))
		return OB_PG_RETRY;
	res = explain(b, false);
	if (ob_pgres_tuples(res)) {
		b->estimate = ob_backlogsql_plan_rows(
		    ob_pgres_rows(res) > 0 ? ob_pgres_value(res, 0, 0) : "");
	} else if (transient_failure(res)) {
		ob_error("could not check outbox.backlog_where: %s",
			 result_error(res, err, sizeof(err)));
		st = OB_PG_RETRY;
	} else if (select_denied(b, res)) {
		st = OB_PG_FATAL;
	} else {
		/* Which key is wrong: the query without its ORDER BY tells. */
		ob_pgres *where = explain(b, true);
		bool where_ok = ob_pgres_tuples(where);

		result_error(where_ok ? res : where, err, sizeof(err));
		if (cfg->outbox.backlog_order_by[0] == '\0')
			snprintf(order, sizeof(order), " (empty: ordered by %s)", b->order);
		if (where_ok)
			snprintf(b->error, sizeof(b->error),
				 "invalid value \"%s\" for outbox.backlog_order_by%s: %s",
				 cfg->outbox.backlog_order_by, order, err);
		else
			snprintf(b->error, sizeof(b->error),
				 "invalid value \"%s\" for outbox.backlog_where: %s",
				 cfg->outbox.backlog_where, err);
		ob_pgres_free(where);
		st = OB_PG_FATAL;
	}
	ob_pgres_free(res);
	return st;
}

ob_pg_status
ob_backlog_start(ob_backlog *b, const char *snapshot)
{
	ob_pg_status st = OB_PG_RETRY;
	char *lit = ob_pgsql_quote_literal(b->pg, snapshot);
	char *import = ob_xasprintf("SET TRANSACTION SNAPSHOT %s", lit);
	char *select = ob_backlogsql_select(b->cfg, "*", b->order);
	char *declare = ob_xasprintf("DECLARE ob_backlog NO SCROLL CURSOR FOR %s", select);
	ob_pgres *res;
	char err[512];

	/* Importing must come first in the transaction, and while the
	 * exporting connection is idle. */
	if (!exec_ok(b, "BEGIN ISOLATION LEVEL REPEATABLE READ",
		     "begin the backlog's transaction") ||
	    !exec_ok(b, import, "import the slot's snapshot"))
		goto out;
	res = ob_pgsql_exec(b->pg, declare);
	if (ob_pgres_command(res)) {
		st = OB_PG_OK;
	} else if (transient_failure(res)) {
		ob_error("could not open the backlog's cursor: %s",
			 result_error(res, err, sizeof(err)));
	} else {
		st = refused(b, result_error(res, err, sizeof(err)));
	}
	ob_pgres_free(res);
out:
	free(declare);
	free(select);
	free(import);
	free(lit);
	return st;
}

const char *
ob_backlog_order(const ob_backlog *b)
{
	return b->order;
}

int64_t
ob_backlog_estimate(const ob_backlog *b)
{
	return b->estimate;
}

const char *
ob_backlog_error(const ob_backlog *b)
{
	return b->error;
}

/* Size the next page from the bytes of this one. */
static void
size_next_page(ob_backlog *b)
{
	int rows = ob_pgres_rows(b->page), fields = ob_pgres_columns(b->page);
	size_t bytes = 0;

	for (int r = 0; r < rows; r++) {
		for (int f = 0; f < fields; f++)
			bytes += (size_t)ob_pgres_length(b->page, r, f);
	}
	b->page_rows = ob_backlogsql_page_rows(b->page_rows, (size_t)rows, bytes);
}

/* Fetch the next page and describe its columns. */
static ob_pg_status
fetch_page(ob_backlog *b)
{
	char sql[64], err[512];
	size_t n;

	ob_pgres_free(b->page);
	b->page_row = 0;
	snprintf(sql, sizeof(sql), "FETCH FORWARD %zu FROM ob_backlog", b->page_rows);
	b->page = ob_pgsql_exec(b->pg, sql);
	if (!ob_pgres_tuples(b->page)) {
		result_error(b->page, err, sizeof(err));
		if (transient_failure(b->page)) {
			ob_error("could not read the backlog: %s", err);
			return OB_PG_RETRY;
		}
		/* The predicate or the order failed on a row (a division by
		 * zero, a cast, a write refused in the read-only transaction):
		 * reading again would fail again. */
		return refused(b, err);
	}
	n = (size_t)ob_pgres_columns(b->page);
	if (n > b->cap) {
		b->names = ob_xrealloc(b->names, n * sizeof(*b->names));
		b->kinds = ob_xrealloc(b->kinds, n * sizeof(*b->kinds));
		b->values = ob_xrealloc(b->values, n * sizeof(*b->values));
		b->lengths = ob_xrealloc(b->lengths, n * sizeof(*b->lengths));
		b->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		b->names[i] = ob_pgres_name(b->page, (int)i);
		b->kinds[i] = ob_text_kind_for_type(ob_pgres_type(b->page, (int)i));
	}
	b->row = (ob_text_row){b->names, b->kinds, b->values, b->lengths, n};
	b->done = ob_pgres_rows(b->page) == 0;
	size_next_page(b);
	return OB_PG_OK;
}

ob_pg_status
ob_backlog_next(ob_backlog *b, const ob_text_row **row)
{
	int r = b->page_row;
	ob_pg_status st;

	*row = NULL;
	if (b->done)
		return OB_PG_OK;
	if (b->page == NULL || r >= ob_pgres_rows(b->page)) {
		if ((st = fetch_page(b)) != OB_PG_OK || b->done)
			return st;
		r = 0;
	}
	for (size_t i = 0; i < b->row.columns_len; i++) {
		bool null = ob_pgres_null(b->page, r, (int)i);

		b->values[i] = null ? NULL : ob_pgres_value(b->page, r, (int)i);
		b->lengths[i] = null ? 0 : (size_t)ob_pgres_length(b->page, r, (int)i);
	}
	b->page_row = r + 1;
	*row = &b->row;
	return OB_PG_OK;
}

void
ob_backlog_close(ob_backlog *b)
{
	if (b == NULL)
		return;
	ob_pgres_free(b->page);
	ob_pgsql_close(b->pg);
	free(b->order);
	free(b->names);
	free(b->kinds);
	free(b->values);
	free(b->lengths);
	free(b);
}
