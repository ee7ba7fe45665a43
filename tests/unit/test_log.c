/*
 * test_log.c: the logger (log.h): one line per call on stderr, text or one
 * JSON object per line with "ts", "level", "msg" and the fields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "capture.h"
#include "outboxd/log.h"
#include "outboxd/wal2json.h"

/* Parse a captured output that must be exactly one JSON object line. */
static json_t *
parse_line(const char *out)
{
	size_t len = strlen(out);
	json_error_t err;
	json_t *obj;

	if (len == 0 || out[len - 1] != '\n')
		fail_msg("log output is not one terminated line: \"%s\"", out);
	if (memchr(out, '\n', len - 1) != NULL)
		fail_msg("log output spans several lines: \"%s\"", out);
	obj = json_loadb(out, len - 1, JSON_REJECT_DUPLICATES, &err);
	if (!json_is_object(obj))
		fail_msg("log line is not a JSON object (%s at %d): %.200s...", err.text,
			 err.position, out);
	return obj;
}

static const char *
get_str(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_string(v))
		fail_msg("log line has no string \"%s\"", key);
	return json_string_value(v);
}

static void
test_parse_level_and_format(void **state)
{
	static const struct {
		const char *text;
		bool ok;
		ob_log_level level;
	} levels[] = {
	    {"debug", true, OB_LOG_DEBUG},
	    {"info", true, OB_LOG_INFO},
	    {"warning", true, OB_LOG_WARNING},
	    {"error", true, OB_LOG_ERROR},
	    {"warn", false},
	    {"INFO", false},
	    {"", false},
	    {"fatal", false},
	};
	static const struct {
		const char *text;
		bool ok;
		ob_log_format format;
	} formats[] = {
	    {"text", true, OB_LOG_TEXT},
	    {"json", true, OB_LOG_JSON},
	    {"JSON", false},
	    {"logfmt", false},
	    {"", false},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(levels); i++) {
		ob_log_level l = (ob_log_level)99;
		bool ok = ob_log_level_parse(levels[i].text, &l);

		if (ok != levels[i].ok || (ok && l != levels[i].level))
			fail_msg("level \"%s\": ok %d level %d", levels[i].text, ok, l);
	}
	for (size_t i = 0; i < OB_ARRAY_LEN(formats); i++) {
		ob_log_format f = (ob_log_format)99;
		bool ok = ob_log_format_parse(formats[i].text, &f);

		if (ok != formats[i].ok || (ok && f != formats[i].format))
			fail_msg("format \"%s\": ok %d format %d", formats[i].text, ok, f);
	}
}

static void
test_json_line(void **state)
{
	static const ob_log_field fields[] = {
	    {"lsn", "0/152D660"}, {"quote", "a\"b\\c"}, {"newline", "x\ny\tz"},
	    {"skipped", NULL},    {NULL, NULL},
	};
	int64_t before = ob_now_us() / 1000, ts;
	char *out;
	json_t *obj;

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_DEBUG);
	capture_start();
	ob_log_kv(OB_LOG_WARNING, fields, "could not %s %s: %d", "reach", "kafka", 5);
	out = capture_end();
	obj = parse_line(out);
	assert_string_equal(get_str(obj, "level"), "warning");
	assert_string_equal(get_str(obj, "msg"), "could not reach kafka: 5");
	assert_string_equal(get_str(obj, "lsn"), "0/152D660");
	assert_string_equal(get_str(obj, "quote"), "a\"b\\c");
	assert_string_equal(get_str(obj, "newline"), "x\ny\tz");
	assert_null(json_object_get(obj, "skipped"));
	/* ts is ISO 8601 UTC with milliseconds, and it is now. */
	assert_int_equal(strlen(get_str(obj, "ts")), strlen("2026-11-22T03:07:11.206Z"));
	assert_true(ob_pg_timestamp_to_ms(get_str(obj, "ts"), &ts));
	assert_true(ts >= before - 1000 && ts <= ob_now_us() / 1000 + 1000);
	/* ts, level, msg come first, in that order. */
	assert_true(strncmp(out, "{\"ts\":\"", 7) == 0);
	assert_true(strstr(out, "\"level\"") < strstr(out, "\"msg\""));
	assert_true(strstr(out, "\"msg\"") < strstr(out, "\"lsn\""));
	json_decref(obj);
	free(out);
}

/* Every level's name; messages with characters JSON must escape. */
static void
test_json_levels_and_escaping(void **state)
{
	static const struct {
		ob_log_level level;
		const char *name;
	} levels[] = {
	    {OB_LOG_DEBUG, "debug"},
	    {OB_LOG_INFO, "info"},
	    {OB_LOG_WARNING, "warning"},
	    {OB_LOG_ERROR, "error"},
	};
	static const char *const messages[] = {
	    "plain", "quote \" and backslash \\", "control \x01\x1f chars", "utf-8 \xc3\xa9", "",
	};

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_DEBUG);
	for (size_t i = 0; i < OB_ARRAY_LEN(levels); i++) {
		for (size_t k = 0; k < OB_ARRAY_LEN(messages); k++) {
			char *out;
			json_t *obj;

			capture_start();
			ob_log(levels[i].level, "%s", messages[k]);
			out = capture_end();
			obj = parse_line(out);
			assert_string_equal(get_str(obj, "level"), levels[i].name);
			assert_string_equal(get_str(obj, "msg"), messages[k]);
			json_decref(obj);
			free(out);
		}
	}
}

/* A message with line breaks (libpq's have them) is still one line. */
static void
test_json_multiline_message(void **state)
{
	char *out;
	json_t *obj;
	const char *msg;

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_INFO);
	capture_start();
	ob_error("could not connect: %s", "connection refused\n\tIs the server running?\n");
	out = capture_end();
	obj = parse_line(out);
	msg = get_str(obj, "msg");
	assert_true(strncmp(msg, "could not connect: connection refused", 37) == 0);
	assert_non_null(strstr(msg, "Is the server running?"));
	json_decref(obj);
	free(out);
}

static void
test_level_filter(void **state)
{
	char *out;

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_WARNING);
	assert_false(ob_log_enabled(OB_LOG_DEBUG));
	assert_false(ob_log_enabled(OB_LOG_INFO));
	assert_true(ob_log_enabled(OB_LOG_WARNING));
	assert_true(ob_log_enabled(OB_LOG_ERROR));
	capture_start();
	ob_debug("hidden %d", 1);
	ob_info("hidden %d", 2);
	ob_warn("shown %d", 3);
	ob_error("shown %d", 4);
	out = capture_end();
	assert_null(strstr(out, "hidden"));
	assert_non_null(strstr(out, "shown 3"));
	assert_non_null(strstr(out, "shown 4"));
	free(out);

	ob_log_configure(OB_LOG_JSON, OB_LOG_DEBUG);
	assert_true(ob_log_enabled(OB_LOG_DEBUG));
	capture_start();
	ob_debug("visible");
	out = capture_end();
	assert_non_null(strstr(out, "visible"));
	free(out);
}

/* ob_log_hold(): the thread's warnings and errors go to the buffer, "; "
 * between them, cut at its size; other levels are written; after
 * ob_log_hold(NULL, 0) everything is written again. */
static void
test_hold(void **state)
{
	char held[32];
	char *out;

	(void)state;
	ob_log_configure(OB_LOG_TEXT, OB_LOG_INFO);
	capture_start();
	ob_log_hold(held, sizeof(held));
	ob_info("written %d", 1);
	ob_warn("held %d", 2);
	ob_error("held %d", 3);
	ob_error("a long message that does not fit whole");
	ob_log_hold(NULL, 0);
	ob_error("written %d", 4);
	out = capture_end();
	assert_string_equal(held, "held 2; held 3; a long message ");
	assert_non_null(strstr(out, "written 1"));
	assert_non_null(strstr(out, "written 4"));
	assert_null(strstr(out, "held"));
	free(out);
}

static void
test_context_fields(void **state)
{
	static const ob_log_field fields[] = {{"k", "v"}, {NULL, NULL}};
	char *out;
	json_t *obj;

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_INFO);
	ob_log_set_context("slot", "orders");
	capture_start();
	ob_log_kv(OB_LOG_INFO, fields, "with context");
	out = capture_end();
	obj = parse_line(out);
	assert_string_equal(get_str(obj, "slot"), "orders");
	assert_string_equal(get_str(obj, "k"), "v");
	json_decref(obj);
	free(out);

	/* Setting it again replaces the value. */
	ob_log_set_context("slot", "billing");
	capture_start();
	ob_info("replaced");
	out = capture_end();
	obj = parse_line(out);
	assert_string_equal(get_str(obj, "slot"), "billing");
	json_decref(obj);
	free(out);

	/* NULL clears it. */
	ob_log_set_context("slot", NULL);
	capture_start();
	ob_info("without context");
	out = capture_end();
	obj = parse_line(out);
	assert_null(json_object_get(obj, "slot"));
	json_decref(obj);
	free(out);
}

static void
test_text_line(void **state)
{
	static const ob_log_field fields[] = {{"lsn", "0/1"}, {NULL, NULL}};
	char *out;
	int64_t ts;
	char stamp[32];

	(void)state;
	ob_log_configure(OB_LOG_TEXT, OB_LOG_INFO);
	capture_start();
	ob_log_kv(OB_LOG_INFO, fields, "streaming from %s", "0/1");
	out = capture_end();
	/* "2026-11-22T03:07:11.206Z info...streaming from 0/1 lsn=0/1\n" */
	assert_true(strlen(out) > 25);
	memcpy(stamp, out, 24);
	stamp[24] = '\0';
	assert_true(ob_pg_timestamp_to_ms(stamp, &ts));
	assert_true(out[24] == ' ');
	assert_non_null(strstr(out + 25, "info"));
	assert_non_null(strstr(out, "streaming from 0/1"));
	assert_non_null(strstr(out, " lsn=0/1"));
	assert_int_equal(out[strlen(out) - 1], '\n');
	assert_null(memchr(out, '\n', strlen(out) - 1));
	free(out);
}

/* A message longer than a line is cut, and the line stays one valid JSON
 * object (deploy/README.md "Configuration reference": format = json gives one JSON object per
 * line). */
static void
test_json_long_message_stays_valid(void **state)
{
	static const size_t sizes[] = {4000, 4090, 5000, 10000};

	(void)state;
	ob_log_configure(OB_LOG_JSON, OB_LOG_INFO);
	for (size_t i = 0; i < OB_ARRAY_LEN(sizes); i++) {
		char *msg = malloc(sizes[i] + 1);
		char *out;
		json_t *obj;

		memset(msg, 'a', sizes[i]);
		msg[sizes[i]] = '\0';
		capture_start();
		ob_info("%s", msg);
		out = capture_end();
		print_message("message of %zu bytes\n", sizes[i]);
		obj = parse_line(out);
		assert_string_equal(get_str(obj, "level"), "info");
		assert_true(strncmp(get_str(obj, "msg"), "aaaa", 4) == 0);
		json_decref(obj);
		free(out);
		free(msg);
	}
}

/* Escapes near the cut must not leave half an escape sequence behind. */
static void
test_json_long_escaped_field_stays_valid(void **state)
{
	char *value = malloc(6001);
	ob_log_field fields[] = {{"detail", value}, {NULL, NULL}};
	char *out;
	json_t *obj;

	(void)state;
	for (size_t i = 0; i < 6000; i++)
		value[i] = i % 2 ? '"' : '\\';
	value[6000] = '\0';
	ob_log_configure(OB_LOG_JSON, OB_LOG_INFO);
	capture_start();
	ob_log_kv(OB_LOG_INFO, fields, "long field");
	out = capture_end();
	obj = parse_line(out);
	assert_string_equal(get_str(obj, "msg"), "long field");
	json_decref(obj);
	free(out);
	free(value);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_level_and_format),
	    cmocka_unit_test(test_json_line),
	    cmocka_unit_test(test_json_levels_and_escaping),
	    cmocka_unit_test(test_json_multiline_message),
	    cmocka_unit_test(test_level_filter),
	    cmocka_unit_test(test_hold),
	    cmocka_unit_test(test_context_fields),
	    cmocka_unit_test(test_text_line),
	    cmocka_unit_test(test_json_long_message_stays_valid),
	    cmocka_unit_test(test_json_long_escaped_field_stays_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
