/*
 * pgconnect.h: what the latest connection attempt to Postgres came to.
 *
 * Every Postgres connection outboxd opens (pgsql.h: the publisher's
 * replication and plain connections and the inbox's) is made the same way
 * by pgconnect.c: outboxd's connection timeouts and keepalives,
 * fallback_application_name, and the pinned session settings (among them
 * statement_timeout, idle_in_transaction_session_timeout and
 * idle_session_timeout 0, whatever the database or role sets). A refusal
 * (pgrefusal.h) is logged once with its fix while it lasts, shown on
 * /readyz ("postgres-refused") and in outboxd_postgres_refused{reason},
 * and kept for `outboxd check` to print; every other failure is logged
 * each time, as a reconnect is. With postgres.password_command set, the
 * command runs before every attempt (credcmd.h) and gives the password;
 * one that fails is such a failure.
 */
#ifndef OUTBOXD_PGCONNECT_H
#define OUTBOXD_PGCONNECT_H

#include "outboxd/common.h"
#include "outboxd/pgrefusal.h"

/* This process runs a command that connects once (check, slot) rather
 * than a daemon that retries: refusals are logged without "retrying". */
void ob_pgconnect_one_shot(void);

/* The refusal of the latest failed attempt (OB_PG_REFUSAL_NONE when it
 * was not one, or the latest attempt connected) and, in *fix, what fixes
 * it ("" when none). */
ob_pg_refusal ob_pgconnect_refusal(const char **fix);

/* The `postgres auth` line of `outboxd check`, into buf: where the
 * latest attempt's password came from (postgres.password_command, or
 * libpq's own sources) and whether the server accepted it. False when the command failed or the
 * server refused the password. */
bool ob_pgconnect_auth(char *buf, size_t size);

/* conninfo (a connection string or URI) when it names several hosts,
 * asking for a standby among them (target_session_attrs=standby, which
 * wins over an earlier setting); NULL when it names one host (or cannot be
 * parsed). The caller frees. */
char *ob_pgconnect_standby_conninfo(const char *conninfo);

#endif
