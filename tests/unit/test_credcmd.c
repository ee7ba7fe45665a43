/*
 * test_credcmd.c: credential commands and token JSON (credcmd.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/credcmd.h"

#define KEY "postgres.password_command"

typedef struct run_case {
	const char *command;
	int timeout_ms;
	const char *out;   /* NULL: the command fails */
	const char *error; /* a part of the error message */
} run_case;

static const run_case cases[] = {
    {"printf 'pw\\n'", 5000, "pw", NULL},
    {"printf 'pw\\r\\n'", 5000, "pw", NULL},
    {"printf 'a b'", 5000, "a b", NULL},
    {"printf 'pw\\n\\n'", 5000, "pw\n", NULL}, /* one trailing newline only */
    {"false", 5000, NULL, KEY " (\"false\") exited with status 1"},
    {"true", 5000, NULL, "(\"true\") exited with status 0 but printed nothing"},
    {"echo", 5000, NULL, "printed nothing"},
    {"printf 'a\\0b'", 5000, NULL, "printed a NUL byte"},
    {"echo nope >&2; echo other >&2; exit 3", 5000, NULL, "status 3: other"},
    {"sleep 5", 300, NULL, "(\"sleep\") timed out after 300 ms and was killed"},
    {"kill -TERM $$", 5000, NULL, "killed by signal 15"},
    {"/nonexistent/getpw --x", 5000, NULL, "(\"/nonexistent/getpw\") exited with status 127"},
    {"head -c 70000 /dev/zero | tr '\\0' x", 5000, NULL, "printed more than 65536 bytes"},
    {"cat", 5000, NULL, "printed nothing"}, /* stdin is /dev/null */
};

static void
test_runs(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const run_case *c = &cases[i];
		char err[512] = "", *out = NULL;
		bool ok = ob_credcmd_run(KEY, c->command, c->timeout_ms, NULL, NULL, &out, err,
					 sizeof(err));

		if (c->out != NULL) {
			assert_true(ok);
			assert_string_equal(out, c->out);
		} else {
			assert_false(ok);
			assert_null(out);
			if (strstr(err, c->error) == NULL)
				fail_msg("%s: \"%s\" lacks \"%s\"", c->command, err, c->error);
		}
		ob_credcmd_free(out);
	}
}

/* What a failing command printed on stdout is never in the message. */
static void
test_stdout_never_in_error(void **state)
{
	char err[512], *out = NULL;

	(void)state;
	assert_false(ob_credcmd_run(KEY, "printf hunter2; exit 2", 5000, NULL, NULL, &out, err,
				    sizeof(err)));
	assert_null(strstr(err, "hunter2"));
	assert_non_null(strstr(err, "status 2"));
}

/* A timeout kills the whole group: a child in the background holding
 * the pipe does not keep the caller waiting. */
static void
test_timeout_kills_the_group(void **state)
{
	char err[512], *out = NULL;
	int64_t t0 = ob_mono_ms();

	(void)state;
	assert_false(ob_credcmd_run(KEY, "sleep 30 & sleep 30; echo late", 500, NULL, NULL, &out,
				    err, sizeof(err)));
	assert_true(ob_mono_ms() - t0 < 3000);
	assert_non_null(strstr(err, "timed out"));
}

static int ticks;

/* The daemon's tick: says stop on its fifth call. */
static bool
tick_until_fifth(void)
{
	return ++ticks < 5;
}

/* While the command runs the caller's tick runs too, and a stop request
 * ends the command long before its timeout. */
static void
test_tick_runs_and_stops_the_command(void **state)
{
	char err[512], *out = NULL;
	int64_t t0 = ob_mono_ms();

	(void)state;
	ticks = 0;
	assert_false(
	    ob_credcmd_run(KEY, "sleep 30", 20000, NULL, tick_until_fifth, &out, err, sizeof(err)));
	assert_int_equal(ticks, 5);
	assert_true(ob_mono_ms() - t0 < 3000);
	assert_non_null(strstr(err, "(\"sleep\") was killed: outboxd is stopping"));
}

static void
test_environment(void **state)
{
	const char *env[] = {"PGHOST=db.example", "PGPORT=6432", NULL};
	char err[512], *out = NULL;

	(void)state;
	setenv("PGHOST", "other", 1);
	setenv("OB_TEST_KEPT", "kept", 1);
	assert_true(ob_credcmd_run(KEY,
				   "printf '%s:%s:%s' \"$PGHOST\" \"$PGPORT\" \"$OB_TEST_KEPT\"",
				   5000, env, NULL, &out, err, sizeof(err)));
	assert_string_equal(out, "db.example:6432:kept");
	ob_credcmd_free(out);
}

typedef struct token_case {
	const char *json;
	const char *error; /* NULL: parses */
} token_case;

static const token_case token_cases[] = {
    {"{\"token\":\"t1\",\"lifetime_ms\":3000,\"principal\":\"p\",\"other\":1}", NULL},
    {"{\"token\":\"t1\",\"lifetime_ms\":3000}", "no \"principal\""},
    {"{\"token\":\"\",\"lifetime_ms\":3000,\"principal\":\"p\"}", "no \"token\""},
    {"{\"token\":\"t\",\"lifetime_ms\":0,\"principal\":\"p\"}", "lifetime_ms"},
    {"{\"token\":\"t\",\"lifetime_ms\":\"5\",\"principal\":\"p\"}", "lifetime_ms"},
    {"[\"secret-token\"]", "not a JSON object"},
    {"secret-token", "not a JSON object"},
    {"", "not a JSON object"},
};

static void
test_tokens(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(token_cases) / sizeof(token_cases[0]); i++) {
		const token_case *c = &token_cases[i];
		ob_credtoken tok;
		char err[256] = "";
		bool ok = ob_credtoken_parse(c->json, strlen(c->json), &tok, err, sizeof(err));

		if (c->error == NULL) {
			assert_true(ok);
			assert_string_equal(tok.token, "t1");
			assert_int_equal(tok.lifetime_ms, 3000);
			assert_string_equal(tok.principal, "p");
		} else {
			assert_false(ok);
			if (strstr(err, c->error) == NULL)
				fail_msg("%s: \"%s\" lacks \"%s\"", c->json, err, c->error);
			assert_null(strstr(err, "secret"));
		}
		ob_credtoken_clear(&tok);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_runs),
	    cmocka_unit_test(test_stdout_never_in_error),
	    cmocka_unit_test(test_timeout_kills_the_group),
	    cmocka_unit_test(test_tick_runs_and_stops_the_command),
	    cmocka_unit_test(test_environment),
	    cmocka_unit_test(test_tokens),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
