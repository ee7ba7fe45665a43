/*
 * test_inifile.c: INI files with lines of any length (inifile.h).
 *
 * Long values, comments and continuation lines come back whole; short
 * lines give exactly what inih's own ini_parse() gives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/inifile.h"

/* The entries a parse gave, one "[section] name=value" line each. */
static char got[1 << 16];

static int
collect(void *user, const char *section, const char *name, const char *value)
{
	size_t len = strlen(got);

	(void)user;
	snprintf(got + len, sizeof(got) - len, "[%s] %s=%s\n", section, name, value);
	return 1;
}

static int
parse_text(const char *text)
{
	char path[] = "/tmp/outboxd-test-inifile-XXXXXX";
	int fd = mkstemp(path), rc;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	got[0] = '\0';
	rc = ob_ini_parse(path, collect, NULL);
	unlink(path);
	return rc;
}

static char *
repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void
test_long_values_whole(void **state)
{
	char *brokers = repeat('b', 600), *token = repeat('T', 1500), *note = repeat('x', 300);
	char *text = ob_xasprintf("[kafka]\nbootstrap.servers = %s\n"
				  "; %s\n"
				  "# %s\n"
				  "linger.ms = 5\n"
				  "[default]\naws_session_token=%s   ; a comment\r\n"
				  "region : eu-west-1\n",
				  brokers, note, note, token);
	char *want = ob_xasprintf("[kafka] bootstrap.servers=%s\n[kafka] linger.ms=5\n"
				  "[default] aws_session_token=%s\n[default] region=eu-west-1\n",
				  brokers, token);

	(void)state;
	assert_int_equal(parse_text(text), 0);
	assert_string_equal(got, want);
	free(brokers);
	free(token);
	free(note);
	free(text);
	free(want);
}

/* Short lines are inih's own: the same entries as ini_parse() gives. */
static void
test_short_lines_as_inih(void **state)
{
	static const char text[] = "[s]\nk = a ;b\nk2 = a;b\nk3 = a #c\n  more\n; c\n";
	char path[] = "/tmp/outboxd-test-inifile-XXXXXX";
	int fd = mkstemp(path);
	char mine[sizeof(got)];

	(void)state;
	assert_int_equal(parse_text(text), 0);
	snprintf(mine, sizeof(mine), "%s", got);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	got[0] = '\0';
	assert_int_equal(ini_parse(path, collect, NULL), 0);
	unlink(path);
	assert_string_equal(mine, got);
	assert_string_equal(mine, "[s] k=a\n[s] k2=a;b\n[s] k3=a #c\n[s] k3=more\n");
}

/* A long continuation line continues the value, as a short one does;
 * inih cuts no inline comment from a continuation line, short or long. */
static void
test_long_continuation(void **state)
{
	char *tail = repeat('c', 250);
	char *text = ob_xasprintf("[s]\nk = first\n   %s\n  %.170s ;kept\n", tail, tail);
	char *want = ob_xasprintf("[s] k=first\n[s] k=%s\n[s] k=%.170s ;kept\n", tail, tail);

	(void)state;
	assert_int_equal(parse_text(text), 0);
	assert_string_equal(got, want);
	free(tail);
	free(text);
	free(want);
}

/* An indented name = value line with no name before it in its section is
 * a name = value line to inih, not a continuation: long, it parses as it
 * did when it was short enough for inih alone. */
static void
test_long_indented_first_key(void **state)
{
	char *v170 = repeat('a', 170), *v400 = repeat('b', 400);
	char *text = ob_xasprintf("[postgres]\n    conninfo = %s\n[kafka]\n\tbootstrap.servers = "
				  "%s\nclient.id = x\n",
				  v170, v400);
	char *want = ob_xasprintf("[postgres] conninfo=%s\n[kafka] bootstrap.servers=%s\n"
				  "[kafka] client.id=x\n",
				  v170, v400);

	(void)state;
	assert_int_equal(parse_text(text), 0);
	assert_string_equal(got, want);
	free(v170);
	free(v400);
	free(text);
	free(want);
}

/* Errors keep the file's line numbers, long lines before them or not. */
static void
test_errors_name_the_line(void **state)
{
	char *value = repeat('v', 400);
	char *text = ob_xasprintf("[s]\nk = %s\nno separator here\n", value);
	char *mark = ob_xasprintf("[s]\nk = v\nj = \x1e"
				  "0\n");

	(void)state;
	assert_int_equal(parse_text(text), 3);
	assert_int_equal(parse_text(mark), 3); /* the placeholders' byte */
	assert_int_equal(ob_ini_parse("/nonexistent/file.ini", collect, NULL), -1);
	free(value);
	free(text);
	free(mark);
}

/* outboxd's configuration file takes a long value whole: six MSK brokers
 * and a conninfo with certificate paths. */
static void
test_config_file(void **state)
{
	static const char brokers[] =
	    "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.orders.abc123.c2.kafka.eu-"
	    "west-1.amazonaws.com:9098,b-3.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-4."
	    "orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-5.orders.abc123.c2.kafka.eu-"
	    "west-"
	    "1.amazonaws.com:9098,b-6.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098";
	static const char conninfo[] =
	    "host=orders.cluster-abc123.eu-west-1.rds.amazonaws.com port=5432 dbname=app "
	    "user=outboxd sslmode=verify-full sslrootcert=/etc/outboxd/certs/rds-global-bundle.pem "
	    "application_name=outboxd-orders-eu-west-1";
	char path[] = "/tmp/outboxd-test-inifile-XXXXXX";
	int fd = mkstemp(path);
	char *text = ob_xasprintf("[postgres]\nconninfo = %s\n[kafka]\nbootstrap.servers = %s\n",
				  conninfo, brokers);
	ob_config cfg;

	(void)state;
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	ob_config_init(&cfg);
	assert_true(ob_config_load_file(&cfg, path));
	assert_string_equal(cfg.pg.conninfo, conninfo);
	assert_string_equal(ob_config_kafka_get(&cfg, "bootstrap.servers"), brokers);
	ob_config_free(&cfg);
	unlink(path);
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_long_values_whole),
	    cmocka_unit_test(test_short_lines_as_inih),
	    cmocka_unit_test(test_long_continuation),
	    cmocka_unit_test(test_errors_name_the_line),
	    cmocka_unit_test(test_config_file),
	    cmocka_unit_test(test_long_indented_first_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
