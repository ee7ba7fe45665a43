/*
 * pglayer.h: the Postgres layer's own header, with libpq's types. Only
 * pgconnect.c, pgsql.c and pgrepl.c include it; everything else speaks to
 * Postgres through pgsql.h and pgrepl.h.
 */
#ifndef OUTBOXD_PGLAYER_H
#define OUTBOXD_PGLAYER_H

#include <libpq-fe.h>

#include "outboxd/common.h"
#include "outboxd/pgsql.h"
#include "outboxd/recode.h"

/* A connection (pgsql.h), with the state of its replication stream. */
struct ob_pgconn {
	PGconn *conn;
	ob_pgsql_tick_fn tick; /* called about every second while waiting */
	void *tick_ctx;
	bool plain; /* not a replication connection: see ob_pgsql_exec() */
	/* The last error the server reported on this connection. */
	char err_state[6]; /* its SQLSTATE; empty for a lost connection */
	char err_msg[256];

	/* The replication stream (pgrepl.c). */
	char *copybuf;    /* the last message from PQgetCopyData, owned */
	ob_recode recode; /* wal2json's text to UTF-8, when the database is not */
	bool streaming;   /* START_REPLICATION sent and not refused: the COPY is open */
	/* A warning while streaming that a publication was passed over
	 * (PostgreSQL 18), and the notice receiver it chains to. */
	bool pub_skipped;
	char pub_skipped_msg[256];
	PQnoticeReceiver prev_notice;
};

/* Connect to conninfo (a connection string or URI; libpq's environment
 * fills the rest) as a replication connection (replication=database) or a
 * plain one, with outboxd's settings (pgconnect.h). When
 * postgres.password_command is set, it runs first (for at most
 * postgres.credential_timeout_ms; credcmd.h) and what it prints is the
 * password; with postgres.auth = aws_iam, the password is an RDS IAM
 * token signed for the connection's host, port and user (awsiam.h). The
 * connection, the caller's to PQfinish(); NULL when the password could
 * not be had or ob_pgconnect_ok() found the connection failed (logged). */
PGconn *ob_pgconnect_open(const char *conninfo, bool replication, const char *application_name,
			  const ob_config *cfg) OB_MUST_CHECK;

/* True if conn is connected. When the server itself turned the attempt
 * down, the attempt is repeated once on conn with PQERRORS_VERBOSE
 * (PQreset: libpq's connect_timeout and host list apply as before), since
 * only then does libpq 15 show the SQLSTATE; true if that attempt
 * connects. Otherwise false, with the failure logged and classified. The
 * caller still owns conn either way. */
bool ob_pgconnect_ok(PGconn *conn) OB_MUST_CHECK;

/* msg (libpq's) without its trailing newline, into buf ("unknown error"
 * for NULL). Returns buf. */
const char *ob_pgsql_trim(const char *msg, char *buf, size_t len);

#endif
