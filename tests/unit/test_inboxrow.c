/*
 * test_inboxrow.c: a Kafka record turned into an inbox row (inboxrow.h):
 * the id and type headers, the headers object, the JSON test of the value
 * and what makes a record bad.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/inboxrow.h"

typedef struct row_case {
	const char *name;
	const char *headers[8][2]; /* name, value (NULL value: a header without one) */
	const char *key;           /* NULL: no key */
	const char *value;         /* NULL: a tombstone */
	const char *bad_reason;    /* NULL: a row is built */
	const char *id;
	const char *type;
	const char *headers_json;
	bool json; /* the value is stored as payload */
} row_case;

static const row_case row_cases[] = {
    {"plain",
     {{"id", "e-1"}, {"type", "order.paid"}},
     "o-1",
     "{\"a\": 1}",
     NULL,
     "e-1",
     "order.paid",
     "{\"id\":\"e-1\",\"type\":\"order.paid\"}",
     true},
    {"no type, not JSON", {{"id", "e-2"}}, NULL, "hello", NULL, "e-2", NULL, "{\"id\":\"e-2\"}"},
    {"tombstone", {{"id", "e-3"}}, "k", NULL, NULL, "e-3", NULL, "{\"id\":\"e-3\"}"},
    {"JSON scalar", {{"id", "e-4"}}, NULL, "42", NULL, "e-4", NULL, "{\"id\":\"e-4\"}", true},
    {"repeated header",
     {{"id", "e-5"}, {"h", "1"}, {"h", "2"}, {"h", "3"}, {"n", NULL}},
     NULL,
     "[]",
     NULL,
     "e-5",
     NULL,
     "{\"id\":\"e-5\",\"h\":[\"1\",\"2\",\"3\"],\"n\":null}",
     true},
    {"first id wins",
     {{"id", "a"}, {"id", "b"}},
     NULL,
     "{}",
     NULL,
     "a",
     NULL,
     "{\"id\":[\"a\",\"b\"]}",
     true},
    {"missing id", {{"type", "t"}}, NULL, "{}", "missing-id"},
    {"empty id", {{"id", ""}}, NULL, "{}", "missing-id"},
    {"id without value", {{"id", NULL}}, NULL, "{}", "missing-id"},
    {"header not UTF-8", {{"id", "e"}, {"bin", "\xff"}}, NULL, "{}", "bad-header"},
    {"key not UTF-8", {{"id", "e"}}, "\xc3\x28", "{}", "bad-key"},
};

static void
fill_view(const row_case *c, ob_record_view *v)
{
	memset(v, 0, sizeof(*v));
	v->topic = "orders";
	v->topic_len = 6;
	v->has_key = c->key != NULL;
	v->key = c->key;
	v->key_len = c->key ? strlen(c->key) : 0;
	v->has_value = c->value != NULL;
	v->value = c->value;
	v->value_len = c->value ? strlen(c->value) : 0;
	for (size_t i = 0; i < 8 && c->headers[i][0] != NULL; i++) {
		v->header_names[i] = c->headers[i][0];
		v->header_values[i] = c->headers[i][1];
		v->header_value_lens[i] = c->headers[i][1] ? strlen(c->headers[i][1]) : 0;
		v->headers_len = i + 1;
	}
}

static void
test_row_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(row_cases); i++) {
		const row_case *c = &row_cases[i];
		ob_record_view v;
		ob_inbox_row row;
		ob_inbox_bad bad;
		bool ok;

		fill_view(c, &v);
		print_message("case %s\n", c->name);
		ok = ob_inbox_row_build(&v, 3, 77, "id", &row, &bad);
		if (c->bad_reason != NULL) {
			assert_false(ok);
			assert_string_equal(bad.reason, c->bad_reason);
			assert_null(row.id);
			continue;
		}
		assert_true(ok);
		assert_string_equal(row.id, c->id);
		assert_string_equal(row.topic, "orders");
		assert_int_equal(row.partition, 3);
		assert_int_equal(row.offset, 77);
		if (c->key)
			assert_string_equal(row.key, c->key);
		else
			assert_null(row.key);
		if (c->type)
			assert_string_equal(row.type, c->type);
		else
			assert_null(row.type);
		assert_string_equal(row.headers_json, c->headers_json);
		if (c->value == NULL) {
			assert_null(row.payload_json);
			assert_null(row.payload_raw);
		} else if (c->json) {
			assert_string_equal(row.payload_json, c->value);
			assert_null(row.payload_raw);
		} else {
			assert_null(row.payload_json);
			assert_memory_equal(row.payload_raw, c->value, strlen(c->value));
			assert_int_equal(row.payload_raw_len, strlen(c->value));
		}
		ob_inbox_row_free(&row);
	}
}

static void
test_custom_id_header(void **state)
{
	row_case c = {"event-id", {{"id", "not this"}, {"event-id", "x-1"}}, NULL, "{}"};
	ob_record_view v;
	ob_inbox_row row;
	ob_inbox_bad bad;

	(void)state;
	fill_view(&c, &v);
	assert_true(ob_inbox_row_build(&v, 0, 0, "event-id", &row, &bad));
	assert_string_equal(row.id, "x-1");
	ob_inbox_row_free(&row);
}

typedef struct json_case {
	const char *text;
	size_t len; /* 0: strlen */
	bool json;
} json_case;

static const json_case json_cases[] = {
    {"{}", 0, true},
    {" [1, 2.5, \"x\", null, true] ", 0, true},
    {"\"caf\xc3\xa9\"", 0, true},
    {"-0.5e3", 0, true},
    {"null", 0, true},
    {"", 0, false},
    {"{", 0, false},
    {"{} {}", 0, false},
    {"hello", 0, false},
    {"\"\\u0000\"", 0, false},                   /* jsonb refuses \u0000 */
    {"\"\xff\"", 0, false},                      /* not UTF-8 */
    {"{\"a\":1}\0", 8, false},                   /* a NUL byte after the value */
    {"123456789012345678901234567890", 0, true}, /* numeric holds it, a double not */
    {"{\"x\": 1e400}", 0, true},
    /* numeric's limits, as PostgreSQL 15 takes them in a jsonb column. */
    {"1e131071", 0, true},
    {"1e131072", 0, false},
    {"0.0001e131075", 0, true},
    {"1e-16383", 0, true},
    {"1e-16384", 0, false},
    {"1.5e-16382", 0, true},
    {"1.55e-16382", 0, false},
    {"0e999999999", 0, true},
    {"0.0e-16383", 0, false},
    {"1e999999999", 0, false},
    {"01", 0, false},
    {"1.", 0, false},
    {".5", 0, false},
    {"[1,]", 0, false},
    {"{\"a\" 1}", 0, false},
    {"{\"a\":1,}", 0, false},
    {"[[[]]]", 0, true},
    {"{\"a\":[{\"b\":{}}],\"c\":\"\\ud83d\\ude00\"}", 0, true},
    {"\"\\ud83d\"", 0, false}, /* an unpaired surrogate */
    {"\"\\ude00\"", 0, false},
    {"\"a\tb\"", 0, false}, /* a control character unescaped */
    {"\"\\x\"", 0, false},
    {"tru", 0, false},
    {"\ftrue", 0, false}, /* form feed is not JSON white space */
};

static void
test_json_detection(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(json_cases); i++) {
		const json_case *c = &json_cases[i];
		size_t len = c->len ? c->len : strlen(c->text);

		print_message("case %zu\n", i);
		assert_int_equal(ob_inbox_value_is_json(c->text, len), c->json);
	}
}

typedef struct text_case {
	const char *text;
	size_t len;
	bool ok;
} text_case;

static const text_case text_cases[] = {
    {"abc", 3, true},
    {"", 0, true},
    {"\xc3\xa9", 2, true},
    {"\xe2\x82\xac", 3, true},
    {"\xf0\x9f\x98\x80", 4, true},
    {"a\0b", 3, false},
    {"\xc3", 1, false},             /* cut short */
    {"\xc0\xaf", 2, false},         /* overlong */
    {"\xed\xa0\x80", 3, false},     /* a surrogate */
    {"\xf4\x90\x80\x80", 4, false}, /* past U+10FFFF */
    {"\x80", 1, false},
};

static void
test_text_ok(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(text_cases); i++) {
		print_message("case %zu\n", i);
		assert_int_equal(ob_inbox_text_ok(text_cases[i].text, text_cases[i].len),
				 text_cases[i].ok);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_row_cases),
	    cmocka_unit_test(test_custom_id_header),
	    cmocka_unit_test(test_json_detection),
	    cmocka_unit_test(test_text_ok),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
