/*
 * test_pgrefusal.c: telling a refused Postgres connection from other
 * failures, by SQLSTATE and libpq's own TLS wording, and the fix written
 * for each refusal (pgrefusal.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/pgrefusal.h"

#define AT "connection to server at \"10.0.0.7\", port 5432 failed: "

typedef struct classify_case {
	const char *message; /* as libpq 15 writes it with PQERRORS_VERBOSE */
	bool password_needed;
	ob_pg_refusal expected;
	bool password_sent; /* the server asked for a password and got one */
} classify_case;

static const classify_case classify_cases[] = {
    /* The three server refusals, by SQLSTATE. */
    {AT "FATAL:  28P01: password authentication failed for user \"ob\"\n"
	"LOCATION:  auth_failed, auth.c:334\n",
     false, OB_PG_REFUSAL_PASSWORD},
    {AT "FATAL:  28000: no pg_hba.conf entry for host \"10.0.0.9\", user \"ob\", database "
	"\"app\", no encryption\nLOCATION:  ClientAuthentication, auth.c:544\n",
     false, OB_PG_REFUSAL_PG_HBA},
    {AT "FATAL:  42501: must be superuser or replication role to start walsender\n"
	"LOCATION:  InitPostgres, postinit.c:896\n",
     false, OB_PG_REFUSAL_PRIVILEGE},
    /* A server with lc_messages in another language: same SQLSTATEs. */
    {AT "SCHWERWIEGEND:  28P01: Passwort-Authentifizierung für Benutzer »ob« "
	"fehlgeschlagen\n",
     false, OB_PG_REFUSAL_PASSWORD},
    {AT "FATAL:  28000: aucune entrée dans pg_hba.conf pour l'hôte « 10.0.0.9 »\n", false,
     OB_PG_REFUSAL_PG_HBA},
    {AT "ОШИБКА:  42501: нужно быть суперпользователем или иметь роль репликации\n", false,
     OB_PG_REFUSAL_PRIVILEGE},
    /* Server errors that waiting cures, or that are not about access. */
    {AT "FATAL:  57P03: the database system is starting up\n", false, OB_PG_REFUSAL_NONE},
    {AT "FATAL:  53300: sorry, too many clients already\n", false, OB_PG_REFUSAL_NONE},
    {AT "FATAL:  3D000: database \"app\" does not exist\n", false, OB_PG_REFUSAL_NONE},
    /* Several hosts: the last server error decides. */
    {AT "FATAL:  57P03: the database system is starting up\n" AT
	"FATAL:  28000: no pg_hba.conf entry for host \"10.0.0.9\"\n",
     false, OB_PG_REFUSAL_PG_HBA},
    /* The server's text is never read: without a SQLSTATE (a message
     * written without PQERRORS_VERBOSE) it is no refusal. */
    {AT "FATAL:  password authentication failed for user \"ob\"\n", false, OB_PG_REFUSAL_NONE},
    /* A server error naming a certificate is judged by its SQLSTATE. */
    {AT "FATAL:  28000: certificate authentication failed for user \"ob\"\n", false,
     OB_PG_REFUSAL_PG_HBA},
    /* PAM (RDS's IAM authentication among them), LDAP and RADIUS refuse a
     * password with 28000: once the server asked for it and got it, the
     * password was refused, in any language. */
    {AT "FATAL:  28000: PAM authentication failed for user \"ob\"\n", false, OB_PG_REFUSAL_PASSWORD,
     true},
    {AT "FATAL:  28000: LDAP-Authentifizierung für Benutzer »ob« fehlgeschlagen\n", false,
     OB_PG_REFUSAL_PASSWORD, true},
    /* ... but a role that may not log in (NOLOGIN), or is missing, is
     * refused with 28000 after the password was checked and found right:
     * the server raised it in InitializeSessionUserId, not auth_failed
     * (libpq's verbose message names the function, never translated). */
    {AT "FATAL:  28000: role \"ob\" is not permitted to log in\n"
	"LOCATION:  InitializeSessionUserId, miscinit.c:735\n",
     false, OB_PG_REFUSAL_PG_HBA, true},
    {AT "FATAL:  28000: la rôle « ob » n'est pas autorisé à se connecter\n"
	"LOCATION:  InitializeSessionUserId, miscinit.c:735\n",
     false, OB_PG_REFUSAL_PG_HBA, true},
    {AT "FATAL:  28000: PAM authentication failed for user \"ob\"\n"
	"LOCATION:  auth_failed, auth.c:370\n",
     false, OB_PG_REFUSAL_PASSWORD, true},
    /* No password at hand (PQconnectionNeedsPassword). */
    {AT "fe_sendauth: no password supplied\n", true, OB_PG_REFUSAL_PASSWORD},
    /* libpq's own TLS failures. */
    {AT "SSL error: certificate verify failed\n", false, OB_PG_REFUSAL_TLS},
    {AT "server certificate for \"db.example\" does not match host name \"10.0.0.7\"\n", false,
     OB_PG_REFUSAL_TLS},
    {AT "root certificate file \"/etc/ca.crt\" does not exist\nEither provide the file or "
	"change sslmode to disable server certificate verification.\n",
     false, OB_PG_REFUSAL_TLS},
    {AT "could not load private key file \"/k\": bad decrypt\n", false, OB_PG_REFUSAL_TLS},
    {AT "server does not support SSL, but SSL was required\n", false, OB_PG_REFUSAL_TLS},
    /* Broken or missing connections: retrying cures them. */
    {AT "SSL SYSCALL error: EOF detected\n", false, OB_PG_REFUSAL_NONE},
    {AT "Connection refused\n\tIs the server running on that host and accepting TCP/IP "
	"connections?\n",
     false, OB_PG_REFUSAL_NONE},
    {"could not translate host name \"db\" to address: Name or service not known\n", false,
     OB_PG_REFUSAL_NONE},
    {AT "timeout expired\n", false, OB_PG_REFUSAL_NONE},
    {"", false, OB_PG_REFUSAL_NONE},
};

static void
test_classify_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(classify_cases); i++) {
		const classify_case *c = &classify_cases[i];
		ob_pg_refusal got =
		    ob_pg_refusal_classify(c->message, c->password_needed, c->password_sent);

		if (got != c->expected)
			fail_msg("case %zu: \"%s\" is \"%s\", expected \"%s\"", i, c->message,
				 ob_pg_refusal_name(got), ob_pg_refusal_name(c->expected));
	}
}

static void
test_sqlstate(void **state)
{
	char st[6] = "";

	(void)state;
	assert_true(
	    ob_pg_refusal_sqlstate(AT "FATAL:  28P01: x\nLOCATION:  auth_failed, a.c:1\n", st));
	assert_string_equal(st, "28P01");
	/* The last of several. */
	assert_true(ob_pg_refusal_sqlstate("FATAL:  57P03: a\nFATAL:  42501: b\n", st));
	assert_string_equal(st, "42501");
	/* Not a SQLSTATE: lower case, too short, no colon after it. */
	assert_false(ob_pg_refusal_sqlstate("LOCATION:  auth_failed, auth.c:334", st));
	assert_false(ob_pg_refusal_sqlstate("FATAL:  2800: x", st));
	assert_false(ob_pg_refusal_sqlstate("FATAL:  28000 x", st));
	assert_false(ob_pg_refusal_sqlstate("FATAL:  28000", st));
	assert_false(ob_pg_refusal_sqlstate("fe_sendauth: no password supplied", st));
}

static void
test_names(void **state)
{
	(void)state;
	assert_string_equal(ob_pg_refusal_name(OB_PG_REFUSAL_NONE), "");
	assert_string_equal(ob_pg_refusal_name(OB_PG_REFUSAL_PG_HBA), "pg_hba");
	assert_string_equal(ob_pg_refusal_name(OB_PG_REFUSAL_PASSWORD), "password");
	assert_string_equal(ob_pg_refusal_name(OB_PG_REFUSAL_PRIVILEGE), "privilege");
	assert_string_equal(ob_pg_refusal_name(OB_PG_REFUSAL_TLS), "tls");
}

#define assert_contains(haystack, needle)                                                          \
	do {                                                                                       \
		if (strstr((haystack), (needle)) == NULL)                                          \
			fail_msg("\"%s\" not in \"%s\"", (needle), (haystack));                    \
	} while (0)

static void
test_fix_names_the_statement_or_line(void **state)
{
	ob_pg_refusal_ctx ctx = {"ob", "app", "10.0.0.9/32", "verify-full", "/etc/ca.crt", true};
	char fix[1024];

	(void)state;
	ob_pg_refusal_fix(OB_PG_REFUSAL_PG_HBA, &ctx, fix, sizeof(fix));
	assert_contains(fix, "\"host app ob 10.0.0.9/32 scram-sha-256\"");
	assert_contains(fix, "SELECT pg_reload_conf()");
	assert_contains(fix, "CREATE ROLE \"ob\" LOGIN REPLICATION");

	ob_pg_refusal_fix(OB_PG_REFUSAL_PASSWORD, &ctx, fix, sizeof(fix));
	assert_contains(fix, "ALTER ROLE \"ob\" PASSWORD");
	assert_contains(fix, "PGPASSWORD");
	/* A password from postgres.password_command: the command is to fix. */
	ctx.password_command = true;
	ob_pg_refusal_fix(OB_PG_REFUSAL_PASSWORD, &ctx, fix, sizeof(fix));
	assert_contains(fix, "postgres.password_command gave for role \"ob\"");
	assert_contains(fix, "ALTER ROLE \"ob\" PASSWORD");
	ctx.password_command = false;
	ctx.password_given = false;
	ob_pg_refusal_fix(OB_PG_REFUSAL_PASSWORD, &ctx, fix, sizeof(fix));
	assert_contains(fix, "has none");
	assert_contains(fix, "PGPASSWORD");
	assert_null(strstr(fix, "ALTER ROLE"));

	ob_pg_refusal_fix(OB_PG_REFUSAL_PRIVILEGE, &ctx, fix, sizeof(fix));
	assert_contains(fix, "ALTER ROLE \"ob\" REPLICATION");
	assert_contains(fix, "GRANT CONNECT ON DATABASE \"app\" TO \"ob\"");

	ob_pg_refusal_fix(OB_PG_REFUSAL_TLS, &ctx, fix, sizeof(fix));
	assert_contains(fix, "TLS");
	assert_contains(fix, "sslmode=verify-full");
	assert_contains(fix, "sslrootcert (now /etc/ca.crt");
	assert_contains(fix, "PGSSLROOTCERT");
	assert_contains(fix, "sslcert and sslkey");

	ob_pg_refusal_fix(OB_PG_REFUSAL_NONE, &ctx, fix, sizeof(fix));
	assert_string_equal(fix, "");
}

static void
test_fix_quotes_names(void **state)
{
	ob_pg_refusal_ctx ctx = {"My \"Role\"", "replication", NULL, NULL, NULL, true};
	char fix[1024];

	(void)state;
	/* A Unix socket gets a local line; a pg_hba.conf keyword and a name
	 * with spaces or quotes are quoted there, as in SQL. */
	ob_pg_refusal_fix(OB_PG_REFUSAL_PG_HBA, &ctx, fix, sizeof(fix));
	assert_contains(fix, "\"local \"replication\" \"My \"\"Role\"\"\" scram-sha-256\"");
	ob_pg_refusal_fix(OB_PG_REFUSAL_PRIVILEGE, &ctx, fix, sizeof(fix));
	assert_contains(fix, "ALTER ROLE \"My \"\"Role\"\"\" REPLICATION");
	/* Defaults when the connection does not say. */
	ob_pg_refusal_fix(OB_PG_REFUSAL_TLS, &ctx, fix, sizeof(fix));
	assert_contains(fix, "sslmode=prefer");
	assert_contains(fix, "~/.postgresql/root.crt");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_classify_table),
	    cmocka_unit_test(test_sqlstate),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_fix_names_the_statement_or_line),
	    cmocka_unit_test(test_fix_quotes_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
