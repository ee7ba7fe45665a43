/*
 * pgrefusal.h: why Postgres would not let outboxd connect, and what fixes
 * it.
 *
 * A refusal is a failed connection that waiting alone does not cure: no
 * pg_hba.conf line admits the connection, the password is wrong or
 * missing, the role may not open a replication connection, or TLS could
 * not be set up. outboxd keeps retrying (the operator may be fixing it),
 * but says once what is missing and the statement or pg_hba.conf line that
 * fixes it.
 *
 * Refusals the server sends are told apart by their SQLSTATE, never by the
 * server's wording, which follows its lc_messages. libpq 15 puts the
 * SQLSTATE of a connection failure only into the message of a connection
 * made with PQERRORS_VERBOSE ("FATAL:  28P01: password authentication
 * failed ..."); pgconnect.c gets such a message. TLS failures happen in
 * libpq itself and carry no SQLSTATE: they are recognised by libpq's own
 * client-side wording, which is never translated here because outboxd
 * never calls setlocale().
 *
 * Nothing here touches libpq or a socket: the unit tests feed messages.
 */
#ifndef OUTBOXD_PGREFUSAL_H
#define OUTBOXD_PGREFUSAL_H

#include <stddef.h>

#include "outboxd/common.h"

typedef enum ob_pg_refusal {
	OB_PG_REFUSAL_NONE = 0,  /* not a refusal: unreachable, restarting, ... */
	OB_PG_REFUSAL_PG_HBA,    /* SQLSTATE 28000: no pg_hba.conf line (or no login) */
	OB_PG_REFUSAL_PASSWORD,  /* SQLSTATE 28P01, or the server wants a password */
	OB_PG_REFUSAL_PRIVILEGE, /* SQLSTATE 42501: the role lacks REPLICATION */
	OB_PG_REFUSAL_TLS,       /* libpq could not set up or verify TLS */
} ob_pg_refusal;

#define OB_PG_REFUSAL_COUNT 5

/* What the fix is written for: the connection's role and database, and
 * the pg_hba.conf address of this host ("10.1.2.3/32"; NULL when
 * connecting over a Unix socket). sslmode and sslrootcert are the
 * connection's (NULL when unknown). */
typedef struct ob_pg_refusal_ctx {
	const char *user;
	const char *dbname;
	const char *hba_address;
	const char *sslmode;
	const char *sslrootcert;
	bool password_given;   /* false: the server asked and there was none */
	bool password_command; /* the password came from postgres.password_command */
	bool aws_iam;          /* the password was an RDS IAM token (postgres.auth = aws_iam) */
} ob_pg_refusal_ctx;

/* The SQLSTATE of the last server error in a libpq connection failure
 * message made with PQERRORS_VERBOSE ("...: SEVERITY:  <SQLSTATE>: text"),
 * copied into state. False when the message has none. */
bool ob_pg_refusal_sqlstate(const char *message, char state[6]) OB_MUST_CHECK;

/* Classify a failed connection from libpq's message,
 * PQconnectionNeedsPassword() and PQconnectionUsedPassword() (the server
 * asked for a password, and got one). OB_PG_REFUSAL_NONE for every
 * failure that is not a refusal. */
ob_pg_refusal ob_pg_refusal_classify(const char *message, bool password_needed, bool password_sent);

/* The reason's label for /metrics and `check`: "pg_hba", "password",
 * "privilege" or "tls" ("" for OB_PG_REFUSAL_NONE). */
const char *ob_pg_refusal_name(ob_pg_refusal refusal);

/* Write into buf what is missing and the statement, pg_hba.conf line or
 * setting that fixes it. Names are double-quoted in SQL statements and,
 * where pg_hba.conf needs it, in the pg_hba.conf line. */
void ob_pg_refusal_fix(ob_pg_refusal refusal, const ob_pg_refusal_ctx *ctx, char *buf, size_t size);

#endif
