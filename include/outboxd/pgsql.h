/*
 * pgsql.h: every connection outboxd opens to Postgres, and SQL on it.
 *
 * The Postgres layer is three modules, and only they include libpq-fe.h:
 * pgconnect.c (how a connection is made: keywords, pinned session
 * settings, refusals judged and told once), pgsql.c (this: the connection
 * handle, the one query runner, results and quoting) and pgrepl.c
 * (replication commands and the CopyBoth stream). Every other module
 * speaks SQL through this header; a result is an opaque ob_pgres.
 *
 * The query runner keeps the caller's loop alive while the server works:
 * the tick set on a connection runs about every second, and when it
 * returns false the query is cancelled. Errors are classified by
 * SQLSTATE (sqlstate.h), never by the server's wording.
 */
#ifndef OUTBOXD_PGSQL_H
#define OUTBOXD_PGSQL_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/log.h"

/* A connection: replication, plain or the inbox's. */
typedef struct ob_pgconn ob_pgconn;
/* A query's result (libpq's, opaque here); freed with ob_pgres_free(). */
typedef struct pg_result ob_pgres;

typedef enum ob_pg_status {
	OB_PG_OK,
	OB_PG_RETRY,   /* transient: reconnect with backoff */
	OB_PG_STANDBY, /* the slot is held by another process */
	OB_PG_FATAL,   /* needs an operator: exit 1 */
} ob_pg_status;

typedef enum ob_pgconn_kind {
	OB_PGCONN_REPLICATION, /* postgres.conninfo, replication=database (pgrepl.h) */
	OB_PGCONN_PLAIN,       /* postgres.conninfo, SQL only */
	OB_PGCONN_INBOX,       /* inbox.conninfo, SQL only */
} ob_pgconn_kind;

/* Called about every second while a query runs; returning false cancels
 * the query (it then fails). */
typedef bool (*ob_pgsql_tick_fn)(void *ctx);

/* Connect (pgconnect.c's settings; a refusal is logged and shown on
 * /readyz). OB_PG_RETRY (logged) on failure. A replication connection is
 * opened with ob_pgrepl_connect(). */
ob_pg_status ob_pgsql_connect(const ob_config *cfg, ob_pgconn_kind kind, ob_pgconn **out);
/* Close the connection; NULL is a no-op. */
void ob_pgsql_close(ob_pgconn *c);
/* Keep tick running while queries wait for the server (NULL: none). */
void ob_pgsql_set_tick(ob_pgconn *c, ob_pgsql_tick_fn tick, void *ctx);
/* Run one statement, keeping the tick running, and return its last
 * result, which the caller checks and frees; nothing is logged. On a
 * plain connection the statement goes out with the extended protocol,
 * which takes exactly one statement, with nparams parameters (values[i]
 * NULL: SQL NULL; formats[i] 1: binary, of lengths[i] bytes; lengths and
 * formats may be NULL: all text). */
ob_pgres *ob_pgsql_exec(ob_pgconn *c, const char *sql);
ob_pgres *ob_pgsql_exec_params(ob_pgconn *c, const char *sql, int nparams,
			       const char *const *values, const int *lengths, const int *formats);
/* Run a query and copy the first column of the first row into *out (the
 * caller frees; NULL for no row or SQL NULL). False (logged, and kept as
 * the connection's last error) on error. */
bool ob_pgsql_query_value(ob_pgconn *c, const char *sql, char **out) OB_MUST_CHECK;
/* Quote s as an SQL literal or identifier; the caller frees. */
char *ob_pgsql_quote_literal(ob_pgconn *c, const char *s);
char *ob_pgsql_quote_ident(ob_pgconn *c, const char *s);
/* The SQL of template, as PostgreSQL's format() makes it: each %L takes
 * the next argument (a const char *) quoted as a literal, each %I quoted
 * as an identifier, each %s as it is, and %% is a percent sign; the
 * caller frees. Values go into the text quoted rather than as parameters
 * so that the statement also runs on a replication connection, whose
 * simple protocol takes none. */
char *ob_pgsql_format(ob_pgconn *c, const char *template, ...);
/* Run the query ob_pgsql_format() makes of template and its arguments
 * and, when it answers exactly one row of columns columns, set *res to
 * that result (the caller frees it) and return true. Otherwise *res is
 * NULL, and the failure is logged at level as "could not <what>: <the
 * server's error, or \"unexpected answer\">" (and nothing is kept as the
 * connection's last error). */
bool ob_pgsql_query_row(ob_pgconn *c, ob_log_level level, const char *what, int columns,
			ob_pgres **res, const char *template, ...) OB_MUST_CHECK;
/* As ob_pgsql_query_row(), for any number of rows (none too). */
bool ob_pgsql_query_rows(ob_pgconn *c, ob_log_level level, const char *what, int columns,
			 ob_pgres **res, const char *template, ...) OB_MUST_CHECK;
/* Run the command ob_pgsql_format() makes of template and its arguments;
 * false unless it succeeded, logged at level as "could not <what>: <the
 * server's error>" (and not kept as the connection's last error). */
bool ob_pgsql_command(ob_pgconn *c, ob_log_level level, const char *what, const char *template,
		      ...) OB_MUST_CHECK;
/* As ob_pgsql_command(), setting *affected to the rows it changed. */
bool ob_pgsql_command_count(ob_pgconn *c, ob_log_level level, const char *what, long long *affected,
			    const char *template, ...) OB_MUST_CHECK;
/* ob_pgsql_query_value() of the query ob_pgsql_format() makes of
 * template and its arguments. */
bool ob_pgsql_query_valuef(ob_pgconn *c, char **out, const char *template, ...) OB_MUST_CHECK;
/* Run the query ob_pgsql_format() makes of template and its arguments as
 * ob_pgsql_query_value() does (false, logged and kept as the
 * connection's last error, on error), and set *out to whether its first
 * value is boolean true (false for no row or SQL NULL). */
bool ob_pgsql_query_true(ob_pgconn *c, bool *out, const char *template, ...) OB_MUST_CHECK;
/* The server's version number (150005 for 15.5). */
int ob_pgsql_server_version(const ob_pgconn *c);
/* The database connected to. */
const char *ob_pgsql_dbname(const ob_pgconn *c);
/* True while the connection is up. */
bool ob_pgsql_connected(const ob_pgconn *c);
/* True inside a transaction block (also a failed one). */
bool ob_pgsql_in_transaction(const ob_pgconn *c);
/* Begin a short transaction of outboxd's own upkeep (the recovery point,
 * retention) on c: its commit does not wait for a synchronous standby (one
 * that is down would hold it, and the stream waiting on it, for as long)
 * and its locks wait at most 1 s. Both settings are the transaction's
 * alone. False (logged at level, nothing left open) on failure. */
bool ob_pgsql_begin_upkeep(ob_pgconn *c, ob_log_level level) OB_MUST_CHECK;
/* End it: commit when commit and nothing failed, else roll back. True
 * when it committed; a failed COMMIT is logged at level. */
bool ob_pgsql_end_upkeep(ob_pgconn *c, bool commit, ob_log_level level);

/* The SQLSTATE of the last error the server reported on this connection
 * that was kept (a failed command of ob_pgsql_query_value(), pgrepl.h's
 * commands, or the end of the stream); "" when there was none or the
 * connection was lost. */
const char *ob_pgsql_error_state(const ob_pgconn *c);
/* That error's message. */
const char *ob_pgsql_error_message(const ob_pgconn *c);
/* Keep the error of res (NULL: the connection's own, which has no
 * SQLSTATE) as the connection's last error, and return its message,
 * cleaned, valid until the next call. */
const char *ob_pgsql_keep_error(ob_pgconn *c, const ob_pgres *res);

/* Results. */
bool ob_pgres_tuples(const ob_pgres *r);  /* rows came back (PGRES_TUPLES_OK) */
bool ob_pgres_command(const ob_pgres *r); /* a command succeeded (PGRES_COMMAND_OK) */
int ob_pgres_rows(const ob_pgres *r);
int ob_pgres_columns(const ob_pgres *r);
/* A value in text format ("" for SQL NULL), its length, and whether it is
 * NULL. */
const char *ob_pgres_value(const ob_pgres *r, int row, int column);
size_t ob_pgres_length(const ob_pgres *r, int row, int column);
bool ob_pgres_null(const ob_pgres *r, int row, int column);
/* Whether a value is boolean true ("t"; not SQL NULL). */
bool ob_pgres_true(const ob_pgres *r, int row, int column);
/* A column's name and type OID. */
const char *ob_pgres_name(const ob_pgres *r, int column);
unsigned int ob_pgres_type(const ob_pgres *r, int column);
/* Rows a command affected. */
long ob_pgres_affected(const ob_pgres *r);

typedef enum ob_pgres_field {
	OB_PGRES_SQLSTATE,
	OB_PGRES_PRIMARY, /* the primary message alone */
	OB_PGRES_COLUMN,  /* the column an error is about */
	OB_PGRES_TABLE,   /* the table an error is about */
} ob_pgres_field;

/* A field of a failed result; NULL when it has none. */
const char *ob_pgres_field_of(const ob_pgres *r, ob_pgres_field field);
/* The error message of r into buf, without libpq's trailing newline; "no
 * answer" when it has none (a result of the wrong shape). Returns buf. */
const char *ob_pgres_error(const ob_pgres *r, char *buf, size_t len);
void ob_pgres_free(ob_pgres *r);

#endif
