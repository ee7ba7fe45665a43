/*
 * pgsql.c: the connection handle, the one query runner, results and
 * quoting (see pgsql.h).
 */
#include "outboxd/pgsql.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outboxd/log.h"
#include "outboxd/pglayer.h"

/* How long a query may run before outboxd says it is still waiting. */
#define SLOW_QUERY_MS 5000

const char *
ob_pgsql_trim(const char *msg, char *buf, size_t len)
{
	size_t n;

	snprintf(buf, len, "%s", msg ? msg : "unknown error");
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return buf;
}

ob_pg_status
ob_pgsql_connect(const ob_config *cfg, ob_pgconn_kind kind, ob_pgconn **out)
{
	PGconn *conn =
	    ob_pgconnect_open(kind == OB_PGCONN_INBOX ? cfg->inbox.conninfo : cfg->pg.conninfo,
			      kind == OB_PGCONN_REPLICATION,
			      kind == OB_PGCONN_INBOX ? "outboxd-inbox" : "outboxd", cfg);

	*out = NULL;
	if (conn == NULL)
		return OB_PG_RETRY;
	*out = ob_xcalloc(1, sizeof(**out));
	(*out)->conn = conn;
	(*out)->plain = kind != OB_PGCONN_REPLICATION;
	return OB_PG_OK;
}

void
ob_pgsql_close(ob_pgconn *c)
{
	if (c == NULL)
		return;
	if (c->copybuf != NULL)
		PQfreemem(c->copybuf);
	ob_recode_close(&c->recode);
	PQfinish(c->conn);
	free(c);
}

void
ob_pgsql_set_tick(ob_pgconn *c, ob_pgsql_tick_fn tick, void *ctx)
{
	c->tick = tick;
	c->tick_ctx = ctx;
}

/* Ask the server to cancel the running query. */
static void
cancel_query(ob_pgconn *c)
{
	PGcancel *cancel = PQgetCancel(c->conn);
	char err[256];

	if (cancel != NULL && !PQcancel(cancel, err, sizeof(err)))
		ob_warn("could not cancel query: %s", err);
	PQfreeCancel(cancel);
}

/*
 * Send the query, and while the server works (CREATE_REPLICATION_SLOT
 * waits for every running transaction to end) run the tick about every
 * second; when it returns false the query is cancelled. Returns the last
 * result (the COPY result for START_REPLICATION). On a plain connection
 * the query goes out with the extended protocol, which takes exactly one
 * statement: text from the configuration (the backlog's predicate) cannot
 * smuggle in a second one. A replication connection only speaks the
 * simple protocol.
 */
ob_pgres *
ob_pgsql_exec_params(ob_pgconn *c, const char *sql, int nparams, const char *const *values,
		     const int *lengths, const int *formats)
{
	int64_t started = ob_mono_ms(), cancelled_at = 0;
	bool said_slow = false;
	PGresult *res, *last = NULL;

	if (!(c->plain ? PQsendQueryParams(c->conn, sql, nparams, NULL, values, lengths, formats, 0)
		       : PQsendQuery(c->conn, sql)))
		return PQmakeEmptyPGresult(c->conn, PGRES_FATAL_ERROR);
	while (PQisBusy(c->conn)) {
		struct pollfd pfd = {PQsocket(c->conn), POLLIN, 0};

		if ((poll(&pfd, 1, 1000) < 0 && errno != EINTR) || !PQconsumeInput(c->conn))
			return PQmakeEmptyPGresult(c->conn, PGRES_FATAL_ERROR);
		if (!said_slow && ob_mono_ms() - started >= SLOW_QUERY_MS) {
			ob_info("still waiting for the server to answer \"%.60s\"%s", sql,
				strncmp(sql, "CREATE_REPLICATION_SLOT", 23) == 0
				    ? " (creating a slot waits for running transactions to end)"
				    : "");
			said_slow = true;
		}
		if (cancelled_at == 0 && c->tick != NULL && !c->tick(c->tick_ctx)) {
			cancel_query(c);
			cancelled_at = ob_mono_ms();
		}
		/* A cancel the server does not honour must not hold us: give up
		 * on the query; the caller drops the connection. */
		if (cancelled_at != 0 && ob_mono_ms() - cancelled_at >= SLOW_QUERY_MS) {
			ob_warn("the server did not cancel \"%.60s\"; closing the connection", sql);
			return PQmakeEmptyPGresult(c->conn, PGRES_FATAL_ERROR);
		}
	}
	while ((res = PQgetResult(c->conn)) != NULL) {
		PQclear(last);
		last = res;
		/* In COPY mode PQgetResult would return the COPY result forever. */
		if (PQresultStatus(res) == PGRES_COPY_BOTH || PQresultStatus(res) == PGRES_COPY_OUT)
			break;
	}
	return last != NULL ? last : PQmakeEmptyPGresult(c->conn, PGRES_FATAL_ERROR);
}

ob_pgres *
ob_pgsql_exec(ob_pgconn *c, const char *sql)
{
	return ob_pgsql_exec_params(c, sql, 0, NULL, NULL, NULL);
}

const char *
ob_pgsql_keep_error(ob_pgconn *c, const ob_pgres *res)
{
	static char buf[1024];
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = ob_pgsql_trim(res ? PQresultErrorMessage(res) : PQerrorMessage(c->conn),
					buf, sizeof(buf));

	snprintf(c->err_state, sizeof(c->err_state), "%s", state ? state : "");
	snprintf(c->err_msg, sizeof(c->err_msg), "%s", msg);
	return msg;
}

const char *
ob_pgsql_error_state(const ob_pgconn *c)
{
	return c->err_state;
}

const char *
ob_pgsql_error_message(const ob_pgconn *c)
{
	return c->err_msg;
}

bool
ob_pgsql_query_value(ob_pgconn *c, const char *sql, char **out)
{
	ob_pgres *res = ob_pgsql_exec(c, sql);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;

	*out = NULL;
	if (!ok)
		ob_error("could not run query \"%s\": %s", sql, ob_pgsql_keep_error(c, res));
	else if (PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0))
		*out = ob_xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return ok;
}

/* s quoted by libpq (escape: PQescapeLiteral or PQescapeIdentifier),
 * copied into memory of our own. */
static char *
quote(ob_pgconn *c, const char *s, char *(*escape)(PGconn *, const char *, size_t))
{
	char *q = escape(c->conn, s, strlen(s));
	char buf[1024];
	char *out;

	if (q == NULL) {
		/* Only fails on out-of-memory or invalid encoding. */
		ob_error("could not quote \"%s\": %s", s,
			 ob_pgsql_trim(PQerrorMessage(c->conn), buf, sizeof(buf)));
		abort();
	}
	out = ob_xstrdup(q);
	PQfreemem(q);
	return out;
}

char *
ob_pgsql_quote_literal(ob_pgconn *c, const char *s)
{
	return quote(c, s, PQescapeLiteral);
}

char *
ob_pgsql_quote_ident(ob_pgconn *c, const char *s)
{
	return quote(c, s, PQescapeIdentifier);
}

/* ob_pgsql_format() with its arguments in ap. */
static char *
vformat(ob_pgconn *c, const char *template, va_list ap)
{
	size_t len = 0, cap = strlen(template) + 64;
	char *out = ob_xmalloc(cap);

	for (const char *t = template; *t != '\0'; t++) {
		char *quoted = NULL;
		const char *piece = t;
		size_t n = 1;

		if (t[0] == '%' && t[1] != '\0') {
			t++;
			if (*t == 'L' || *t == 'I' || *t == 's') {
				const char *arg = va_arg(ap, const char *);

				quoted = *t == 'L'   ? ob_pgsql_quote_literal(c, arg)
					 : *t == 'I' ? ob_pgsql_quote_ident(c, arg)
						     : NULL;
				piece = quoted != NULL ? quoted : arg;
				n = strlen(piece);
			} else {
				piece = t; /* %% and anything else: the character itself */
			}
		}
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			out = ob_xrealloc(out, cap);
		}
		memcpy(out + len, piece, n);
		len += n;
		free(quoted);
	}
	out[len] = '\0';
	return out;
}

char *
ob_pgsql_format(ob_pgconn *c, const char *template, ...)
{
	va_list ap;
	char *sql;

	va_start(ap, template);
	sql = vformat(c, template, ap);
	va_end(ap);
	return sql;
}

/* ob_pgsql_command_count() with its arguments in ap. */
static bool
vcommand(ob_pgconn *c, ob_log_level level, const char *what, long long *affected,
	 const char *template, va_list ap)
{
	char *sql = vformat(c, template, ap);
	char err[1024];
	ob_pgres *res = ob_pgsql_exec(c, sql);
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (ok && affected != NULL)
		*affected = ob_pgres_affected(res);
	if (!ok)
		ob_log(level, "could not %s: %s", what, ob_pgres_error(res, err, sizeof(err)));
	PQclear(res);
	free(sql);
	return ok;
}

bool
ob_pgsql_command(ob_pgconn *c, ob_log_level level, const char *what, const char *template, ...)
{
	va_list ap;
	bool ok;

	va_start(ap, template);
	ok = vcommand(c, level, what, NULL, template, ap);
	va_end(ap);
	return ok;
}

bool
ob_pgsql_command_count(ob_pgconn *c, ob_log_level level, const char *what, long long *affected,
		       const char *template, ...)
{
	va_list ap;
	bool ok;

	va_start(ap, template);
	ok = vcommand(c, level, what, affected, template, ap);
	va_end(ap);
	return ok;
}

bool
ob_pgsql_query_valuef(ob_pgconn *c, char **out, const char *template, ...)
{
	va_list ap;
	char *sql;
	bool ok;

	va_start(ap, template);
	sql = vformat(c, template, ap);
	va_end(ap);
	ok = ob_pgsql_query_value(c, sql, out);
	free(sql);
	return ok;
}

bool
ob_pgsql_query_true(ob_pgconn *c, bool *out, const char *template, ...)
{
	va_list ap;
	char *sql, *value = NULL;
	bool ok;

	va_start(ap, template);
	sql = vformat(c, template, ap);
	va_end(ap);
	ok = ob_pgsql_query_value(c, sql, &value);
	*out = ok && value != NULL && strcmp(value, "t") == 0;
	free(value);
	free(sql);
	return ok;
}

/* ob_pgsql_query_row() (one_row) or ob_pgsql_query_rows() with its
 * arguments in ap. */
static bool
vquery(ob_pgconn *c, ob_log_level level, const char *what, int columns, bool one_row,
       ob_pgres **res, const char *template, va_list ap)
{
	char *sql = vformat(c, template, ap);
	char err[1024];
	bool ok;

	*res = ob_pgsql_exec(c, sql);
	ok = PQresultStatus(*res) == PGRES_TUPLES_OK && (!one_row || PQntuples(*res) == 1) &&
	     PQnfields(*res) == columns;
	if (!ok) {
		ob_log(level, "could not %s: %s", what,
		       PQresultStatus(*res) == PGRES_TUPLES_OK
			   ? "unexpected answer"
			   : ob_pgres_error(*res, err, sizeof(err)));
		PQclear(*res);
		*res = NULL;
	}
	free(sql);
	return ok;
}

bool
ob_pgsql_query_row(ob_pgconn *c, ob_log_level level, const char *what, int columns, ob_pgres **res,
		   const char *template, ...)
{
	va_list ap;
	bool ok;

	va_start(ap, template);
	ok = vquery(c, level, what, columns, true, res, template, ap);
	va_end(ap);
	return ok;
}

bool
ob_pgsql_query_rows(ob_pgconn *c, ob_log_level level, const char *what, int columns, ob_pgres **res,
		    const char *template, ...)
{
	va_list ap;
	bool ok;

	va_start(ap, template);
	ok = vquery(c, level, what, columns, false, res, template, ap);
	va_end(ap);
	return ok;
}

int
ob_pgsql_server_version(const ob_pgconn *c)
{
	return PQserverVersion(c->conn);
}

const char *
ob_pgsql_dbname(const ob_pgconn *c)
{
	return PQdb(c->conn);
}

bool
ob_pgsql_connected(const ob_pgconn *c)
{
	return PQstatus(c->conn) == CONNECTION_OK;
}

bool
ob_pgsql_in_transaction(const ob_pgconn *c)
{
	return PQtransactionStatus(c->conn) != PQTRANS_IDLE;
}

bool
ob_pgsql_begin_upkeep(ob_pgconn *c, ob_log_level level)
{
	ob_pgres *settings = NULL;
	bool ok =
	    ob_pgsql_command(c, level, "begin a transaction of outboxd's own", "BEGIN") &&
	    ob_pgsql_query_row(c, level, "set a transaction of outboxd's own up", 2, &settings,
			       "SELECT set_config('synchronous_commit', 'local', true), "
			       "set_config('lock_timeout', '1s', true)");

	ob_pgres_free(settings);
	if (!ok)
		ob_pgsql_end_upkeep(c, false, level);
	return ok;
}

bool
ob_pgsql_end_upkeep(ob_pgconn *c, bool commit, ob_log_level level)
{
	if (commit && ob_pgsql_command(c, level, "commit a transaction of outboxd's own", "COMMIT"))
		return true;
	if (ob_pgsql_in_transaction(c))
		ob_pgres_free(ob_pgsql_exec(c, "ROLLBACK"));
	return false;
}

/* ---- results ------------------------------------------------------------ */

bool
ob_pgres_tuples(const ob_pgres *r)
{
	return PQresultStatus(r) == PGRES_TUPLES_OK;
}

bool
ob_pgres_command(const ob_pgres *r)
{
	return PQresultStatus(r) == PGRES_COMMAND_OK;
}

int
ob_pgres_rows(const ob_pgres *r)
{
	return PQntuples(r);
}

int
ob_pgres_columns(const ob_pgres *r)
{
	return PQnfields(r);
}

const char *
ob_pgres_value(const ob_pgres *r, int row, int column)
{
	return PQgetvalue(r, row, column);
}

size_t
ob_pgres_length(const ob_pgres *r, int row, int column)
{
	return (size_t)PQgetlength(r, row, column);
}

bool
ob_pgres_null(const ob_pgres *r, int row, int column)
{
	return PQgetisnull(r, row, column);
}

bool
ob_pgres_true(const ob_pgres *r, int row, int column)
{
	return !PQgetisnull(r, row, column) && strcmp(PQgetvalue(r, row, column), "t") == 0;
}

const char *
ob_pgres_name(const ob_pgres *r, int column)
{
	return PQfname(r, column);
}

unsigned int
ob_pgres_type(const ob_pgres *r, int column)
{
	return PQftype(r, column);
}

long
ob_pgres_affected(const ob_pgres *r)
{
	return atol(PQcmdTuples((ob_pgres *)r));
}

const char *
ob_pgres_field_of(const ob_pgres *r, ob_pgres_field field)
{
	static const int codes[] = {PG_DIAG_SQLSTATE, PG_DIAG_MESSAGE_PRIMARY, PG_DIAG_COLUMN_NAME,
				    PG_DIAG_TABLE_NAME};

	return r != NULL ? PQresultErrorField(r, codes[field]) : NULL;
}

const char *
ob_pgres_error(const ob_pgres *r, char *buf, size_t len)
{
	const char *msg = r != NULL ? PQresultErrorMessage(r) : NULL;

	return ob_pgsql_trim(msg != NULL && msg[0] != '\0' ? msg : "no answer", buf, len);
}

void
ob_pgres_free(ob_pgres *r)
{
	PQclear(r);
}
