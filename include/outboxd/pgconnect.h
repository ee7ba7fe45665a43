/*
 * pgconnect.h: every Postgres connection outboxd opens, what the outcome
 * of an attempt means, and who is told.
 *
 * ob_pgconnect_open() opens the publisher's connections (pgrepl.c) and
 * the inbox's (inboxdb.c) with the same settings, and hands every
 * connection libpq made (or failed to make) to ob_pgconnect_ok(). A refusal (pgrefusal.h) is logged
 * once with its fix while it lasts, shown on /readyz ("postgres-refused") and in
 * outboxd_postgres_refused{reason}, and kept for `outboxd check` to print;
 * every other failure is logged each time, as a reconnect is.
 */
#ifndef OUTBOXD_PGCONNECT_H
#define OUTBOXD_PGCONNECT_H

#include <libpq-fe.h>

#include "outboxd/common.h"
#include "outboxd/pgrefusal.h"

/* Connect to conninfo (a connection string or URI; libpq's environment
 * fills the rest) as a replication connection (replication=database) or a
 * plain one, with outboxd's connection timeouts and keepalives,
 * fallback_application_name application_name, and the pinned session
 * settings of pgconnect.c (among them statement_timeout,
 * idle_in_transaction_session_timeout and idle_session_timeout 0,
 * whatever the database or role sets). The connection, the caller's to
 * PQfinish(); NULL when ob_pgconnect_ok() found it failed (logged). */
/* This process runs a command that connects once (check, slot) rather
 * than a daemon that retries: refusals are logged without "retrying". */
void ob_pgconnect_one_shot(void);
PGconn *ob_pgconnect_open(const char *conninfo, bool replication,
			  const char *application_name) OB_MUST_CHECK;

/* True if conn is connected. When the server itself turned the attempt
 * down, the attempt is repeated once on conn with PQERRORS_VERBOSE
 * (PQreset: libpq's connect_timeout and host list apply as before), since
 * only then does libpq 15 show the SQLSTATE; true if that attempt
 * connects. Otherwise false, with the failure logged and classified as
 * described above. The caller still owns conn either way. */
bool ob_pgconnect_ok(PGconn *conn) OB_MUST_CHECK;

/* The refusal of the latest failed attempt (OB_PG_REFUSAL_NONE when it
 * was not one, or the latest attempt connected) and, in *fix, what fixes
 * it ("" when none). */
ob_pg_refusal ob_pgconnect_refusal(const char **fix);

#endif
