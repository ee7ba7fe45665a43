/*
 * pgrefusal.c: classify a refused Postgres connection and write its fix.
 */
#include "outboxd/pgrefusal.h"

#include <stdio.h>
#include <string.h>

#include "outboxd/sqlstate.h"

/* libpq's own words for a failure to set up or verify TLS (libpq 15,
 * untranslated): "SSL error: certificate verify failed", "server
 * certificate for "x" does not match host name "y"", "root certificate
 * file "f" does not exist", "could not load private key file", "server
 * does not support SSL, but SSL was required", ... "SSL SYSCALL error" is
 * left out on purpose: it is a broken connection during the handshake,
 * which retrying cures. */
static const char *const tls_marks[] = {
    "SSL error:", "certificate", "private key", "does not support SSL", "could not establish SSL",
};

/* pg_hba.conf words that a name must be quoted not to mean. */
static const char *const hba_keywords[] = {
    "all", "sameuser", "samerole", "samegroup", "replication",
};

bool
ob_pg_refusal_sqlstate(const char *message, char state[6])
{
	bool found = false;

	/* libpq writes a server error as "SEVERITY:  " then, when verbose,
	 * "<SQLSTATE>: "; the severity is translated, the layout is not. */
	for (const char *p = strstr(message, ":  "); p != NULL; p = strstr(p + 1, ":  ")) {
		const char *s = p + 3;
		size_t i = 0;

		while (i < 5 && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z')))
			i++;
		if (i == 5 && s[5] == ':') {
			memcpy(state, s, 5);
			state[5] = '\0';
			found = true;
		}
	}
	return found;
}

ob_pg_refusal
ob_pg_refusal_classify(const char *message, bool password_needed, bool password_sent)
{
	char state[6];

	if (password_needed)
		return OB_PG_REFUSAL_PASSWORD;
	if (ob_pg_refusal_sqlstate(message, state)) {
		/* PAM, LDAP, RADIUS and BSD authentication ask for the password
		 * and refuse it with 28000, not 28P01 (an RDS IAM token that
		 * RDS's PAM turns down too): once a password went, it was the
		 * password. Not when the server raised it after authentication,
		 * in InitializeSessionUserId (a role that may not log in or does
		 * not exist, its password right): a verbose message names the
		 * function, which is never translated. */
		if (ob_sqlstate_is(state, OB_SQLSTATE_INVALID_AUTHORIZATION))
			return password_sent &&
				       strstr(message, "LOCATION:  InitializeSessionUserId") == NULL
				   ? OB_PG_REFUSAL_PASSWORD
				   : OB_PG_REFUSAL_PG_HBA;
		if (ob_sqlstate_is(state, OB_SQLSTATE_INVALID_PASSWORD))
			return OB_PG_REFUSAL_PASSWORD;
		if (ob_sqlstate_is(state, OB_SQLSTATE_INSUFFICIENT_PRIVILEGE))
			return OB_PG_REFUSAL_PRIVILEGE;
		return OB_PG_REFUSAL_NONE;
	}
	for (size_t i = 0; i < OB_ARRAY_LEN(tls_marks); i++) {
		if (strstr(message, tls_marks[i]) != NULL)
			return OB_PG_REFUSAL_TLS;
	}
	return OB_PG_REFUSAL_NONE;
}

const char *
ob_pg_refusal_name(ob_pg_refusal refusal)
{
	switch (refusal) {
	case OB_PG_REFUSAL_PG_HBA:
		return "pg_hba";
	case OB_PG_REFUSAL_PASSWORD:
		return "password";
	case OB_PG_REFUSAL_PRIVILEGE:
		return "privilege";
	case OB_PG_REFUSAL_TLS:
		return "tls";
	case OB_PG_REFUSAL_NONE:
		break;
	}
	return "";
}

/* An SQL identifier: always double-quoted, embedded quotes doubled
 * (size is at least 4). */
static void
sql_ident(const char *name, char *buf, size_t size)
{
	size_t len = 0;

	buf[len++] = '"';
	for (const char *s = name; *s && len + 3 < size; s++) {
		if (*s == '"')
			buf[len++] = '"';
		buf[len++] = *s;
	}
	buf[len++] = '"';
	buf[len] = '\0';
}

/* A pg_hba.conf name: as is when plain, else double-quoted. */
static void
hba_name(const char *name, char *buf, size_t size)
{
	bool plain =
	    name[0] != '\0' && name[0] != '+' && name[0] != '@' &&
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
		strlen(name);

	for (size_t i = 0; plain && i < OB_ARRAY_LEN(hba_keywords); i++)
		plain = strcmp(name, hba_keywords[i]) != 0;
	if (plain)
		snprintf(buf, size, "%s", name);
	else
		sql_ident(name, buf, size);
}

void
ob_pg_refusal_fix(ob_pg_refusal refusal, const ob_pg_refusal_ctx *ctx, char *buf, size_t size)
{
	char role[160], db[160], hba_role[160], hba_db[160], line[512];

	sql_ident(ctx->user ? ctx->user : "", role, sizeof(role));
	sql_ident(ctx->dbname ? ctx->dbname : "", db, sizeof(db));
	hba_name(ctx->user ? ctx->user : "", hba_role, sizeof(hba_role));
	hba_name(ctx->dbname ? ctx->dbname : "", hba_db, sizeof(hba_db));
	switch (refusal) {
	case OB_PG_REFUSAL_PG_HBA:
		if (ctx->hba_address != NULL)
			snprintf(line, sizeof(line), "host %s %s %s scram-sha-256", hba_db,
				 hba_role, ctx->hba_address);
		else
			snprintf(line, sizeof(line), "local %s %s scram-sha-256", hba_db, hba_role);
		snprintf(buf, size,
			 "no pg_hba.conf line admits role %s to database %s from this host (or the "
			 "role does not exist or may not log in): add the line \"%s\" to the "
			 "server's pg_hba.conf (a logical replication connection is matched by its "
			 "database name, not by the keyword replication) and reload it with SELECT "
			 "pg_reload_conf(); a missing role is created with CREATE ROLE %s LOGIN "
			 "REPLICATION (sql/role.sql)",
			 role, db, line, role);
		break;
	case OB_PG_REFUSAL_PASSWORD:
		if (!ctx->password_given)
			snprintf(
			    buf, size,
			    "the server wants a password for role %s and outboxd has none: give "
			    "it in postgres.conninfo (password=${NAME} keeps it out of the "
			    "file), in PGPASSWORD or in ~/.pgpass",
			    role);
		else if (ctx->aws_iam)
			snprintf(
			    buf, size,
			    "the server rejected the RDS IAM token outboxd signed for role %s "
			    "(postgres.auth = aws_iam): the role needs GRANT rds_iam TO %s, the "
			    "AWS identity of the credentials needs rds-db:connect on this "
			    "database user, the region must be the database's, and the "
			    "connection must use SSL (sslmode=require or verify-full)",
			    role, role);
		else if (ctx->password_command)
			snprintf(
			    buf, size,
			    "the server rejected the password postgres.password_command gave for "
			    "role %s: make the command print the role's current password or "
			    "token (it gets PGHOST, PGPORT, PGUSER and PGDATABASE), or set a "
			    "new one on the server with ALTER ROLE %s PASSWORD '...'",
			    role, role);
		else
			snprintf(
			    buf, size,
			    "the server rejected the password of role %s: give outboxd the "
			    "role's password (postgres.conninfo, PGPASSWORD or ~/.pgpass) or set "
			    "a new one on the server with ALTER ROLE %s PASSWORD '...'",
			    role, role);
		break;
	case OB_PG_REFUSAL_PRIVILEGE:
		snprintf(buf, size,
			 "role %s may not open a replication connection to database %s: grant it "
			 "with ALTER ROLE %s REPLICATION (sql/role.sql); if it has REPLICATION "
			 "already, it lacks CONNECT: GRANT CONNECT ON DATABASE %s TO %s",
			 role, db, role, db, role);
		break;
	case OB_PG_REFUSAL_TLS:
		snprintf(
		    buf, size,
		    "TLS to the server could not be set up (sslmode=%s): the server's "
		    "certificate must be signed by the CA whose certificate is in sslrootcert "
		    "(now %s; PGSSLROOTCERT sets it too) and, with sslmode=verify-full, name the "
		    "host that postgres.conninfo connects to; a client certificate and its key "
		    "go in sslcert and sslkey (PGSSLCERT, PGSSLKEY)",
		    ctx->sslmode ? ctx->sslmode : "prefer",
		    ctx->sslrootcert ? ctx->sslrootcert : "~/.postgresql/root.crt");
		break;
	case OB_PG_REFUSAL_NONE:
		snprintf(buf, size, "%s", "");
		break;
	}
}
