/*
 * backlogsql.h: the text of the backlog's queries and the sizes of its
 * pages, apart from any connection (backlog.c runs them).
 *
 * The backlog reads SELECT * FROM the outbox table WHERE (backlog_where)
 * ORDER BY backlog_order_by (or, when that is empty, the table's identity
 * column) through a cursor. The predicate and the order
 * are the operator's SQL, placed as they are; names from [outbox] are
 * quoted. Pure: no I/O, no logging.
 */
#ifndef OUTBOXD_BACKLOGSQL_H
#define OUTBOXD_BACKLOGSQL_H

#include "outboxd/common.h"
#include "outboxd/config.h"

/* The rows a page aims at holding, in bytes of row text; and the bounds of
 * a page in rows. */
#define OB_BACKLOG_PAGE_BYTES      (1024 * 1024)
#define OB_BACKLOG_PAGE_MAX_ROWS   1000
#define OB_BACKLOG_PAGE_FIRST_ROWS 16

/* The backlog's ORDER BY list: backlog_order_by as written; when it is
 * empty, the table's identity column identity (NULL: it has none), then
 * the id column; without an identity column, the timestamp column, then
 * the id column (the id column alone without a timestamp column). Names
 * are quoted. The caller frees. */
char *ob_backlogsql_order(const ob_config *cfg, const char *identity);

/* "SELECT <what> FROM <schema>.<table> WHERE (<backlog_where>)", then,
 * unless order is NULL, " ORDER BY " and order (ob_backlogsql_order). The
 * predicate stands on lines of its own, so a trailing "--" comment in it
 * cannot swallow the closing parenthesis. The caller frees. */
char *ob_backlogsql_select(const ob_config *cfg, const char *what, const char *order);

/* The catalog query whose one value is the name of the first identity
 * column (by position) of the table named by the quoted literals
 * schema_lit and table_lit, or "" when it has none; no row when there is
 * no such table. The caller frees. */
char *ob_backlogsql_identity_query(const char *schema_lit, const char *table_lit);

/* The catalog query whose one value is "" when the current role may
 * SELECT from the table named by the quoted literals schema_lit and
 * table_lit, else the GRANT statements that let it ("GRANT USAGE ON SCHEMA
 * s TO role;" when it lacks that, "GRANT SELECT ON TABLE s.t TO role;"
 * when it lacks this; names quoted as SQL needs); no row when there is no
 * such table. The caller frees. */
char *ob_backlogsql_grant_query(const char *schema_lit, const char *table_lit);

/* The sentence saying that the role may not SELECT the outbox table,
 * which the backlog reads, and the statement grant that fixes it, into
 * buf. */
void ob_backlogsql_select_denied(const ob_config *cfg, const char *grant, char *buf, size_t len);

/* s as a quoted SQL identifier (double quotes, inner ones doubled). The
 * caller frees. */
char *ob_backlogsql_quote_ident(const char *s);

/* The rows the next FETCH asks for, after a page of rows rows that held
 * bytes bytes of text: about OB_BACKLOG_PAGE_BYTES, between one row and
 * OB_BACKLOG_PAGE_MAX_ROWS. An empty page (the end) keeps current. */
size_t ob_backlogsql_page_rows(size_t current, size_t rows, size_t bytes);

/* Whether a failed query's SQLSTATE (NULL: libpq's own failure, the
 * connection is gone) says the server could not answer now (connection,
 * shutdown or cancel, resources, a lock or statement timeout,
 * serialization), rather than that the query or the data is wrong. */
bool ob_backlogsql_transient(const char *sqlstate);

/* The planner's row estimate in EXPLAIN's first line ("... rows=N ..."),
 * or -1 when it has none. */
int64_t ob_backlogsql_plan_rows(const char *line);

#endif
