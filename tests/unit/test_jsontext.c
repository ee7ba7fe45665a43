/*
 * test_jsontext.c: the raw-text JSON object scanner and the string
 * unescaper (jsontext.h) that logical messages and headers objects are
 * read with.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/jsontext.h"
#include "rng.h"

typedef struct member_want {
	const char *name;  /* raw text between the key's quotes */
	const char *value; /* raw text of the value (inside the quotes for strings) */
	bool is_string;
	bool name_escaped;
	bool value_escaped;
} member_want;

typedef struct iter_case {
	const char *text;
	bool init_ok;
	int end; /* what the call after the members returns: 0 or -1 */
	member_want members[8];
} iter_case;

static const iter_case iter_cases[] = {
    {"{}", true, 0},
    {" \t\r\n{ \n } \n", true, 0},
    {"{\"a\":1}", true, 0, {{"a", "1"}}},
    {"{ \"a\" : \"x\" , \"b\" :\t[1, {\"c\": \"]\"}] ,\"d\":{\"e\":null},\"f\":true,"
     "\"g\":-1.5e3 }",
     true,
     0,
     {{"a", "x", true},
      {"b", "[1, {\"c\": \"]\"}]"},
      {"d", "{\"e\":null}"},
      {"f", "true"},
      {"g", "-1.5e3"}}},
    {"{\"k\\\"q\":\"v\\\\n\"}", true, 0, {{"k\\\"q", "v\\\\n", true, true, true}}},
    {"{\"a\":\"}\",\"b\":\"{[\"}", true, 0, {{"a", "}", true}, {"b", "{[", true}}},
    {"{\"\":1}", true, 0, {{"", "1"}}},
    {"{\"a\":1,\"a\":2}", true, 0, {{"a", "1"}, {"a", "2"}}},
    {"{\"a\":{\"b\":{\"c\":[[[]]]}}}", true, 0, {{"a", "{\"b\":{\"c\":[[[]]]}}"}}},
    {"{\"a\":\"\"}", true, 0, {{"a", "", true}}},
    {"{\"n\":null}", true, 0, {{"n", "null"}}},
    {"{\"s\":\"null\"}", true, 0, {{"s", "null", true}}},
    /* Malformed: the members before the error, then -1. */
    {"{\"a\":1,}", true, -1}, /* the trailing comma is seen with "a" */
    {"{\"a\":1}}", true, -1, {{"a", "1"}}},
    {"{\"a\":1} x", true, -1, {{"a", "1"}}},
    {"{\"a\":1 \"b\":2}", true, -1},
    {"{\"a\":[1,2}", true, -1},
    {"{\"a\":{]}", true, -1},
    {"{\"a\":]", true, -1},
    {"{\"a\":}", true, -1},
    {"{\"a\"}", true, -1},
    {"{\"a\" 1}", true, -1},
    {"{a:1}", true, -1},
    {"{,}", true, -1},
    {"{\"a\":\"x", true, -1},
    {"{\"a\":\"x\x01\"}", true, -1},
    {"{\"a\":1", true, -1},
    {"{\"a\":1,", true, -1, {{"a", "1"}}},
    {"{", true, -1},
    {"{\"a\":nul l}", true, -1},
    {"{\"a\":\"x\\\"}", true, -1},
    /* Not an object at all. */
    {"", false},
    {"   ", false},
    {"[]", false},
    {"\"x\"", false},
    {"1", false},
    {"null", false},
};

static void
run_iter_case(size_t idx, const iter_case *c)
{
	ob_json_iter it;
	ob_json_member m;
	size_t n = 0;
	int r;

	if (ob_json_iter_init(&it, c->text, strlen(c->text)) != c->init_ok)
		fail_msg("case %zu \"%s\": init should return %d", idx, c->text, c->init_ok);
	if (!c->init_ok)
		return;
	while ((r = ob_json_iter_next(&it, &m)) == 1) {
		const member_want *w = &c->members[n];

		if (n >= OB_ARRAY_LEN(c->members) || w->name == NULL)
			fail_msg("case %zu \"%s\": unexpected member %zu \"%.*s\"", idx, c->text, n,
				 (int)m.name_len, m.name);
		if (m.name_len != strlen(w->name) || memcmp(m.name, w->name, m.name_len) != 0 ||
		    m.value_len != strlen(w->value) || memcmp(m.value, w->value, m.value_len) != 0)
			fail_msg("case %zu \"%s\": member %zu is \"%.*s\" = \"%.*s\", "
				 "expected \"%s\" = \"%s\"",
				 idx, c->text, n, (int)m.name_len, m.name, (int)m.value_len,
				 m.value, w->name, w->value);
		if (m.value_is_string != w->is_string || m.name_escaped != w->name_escaped ||
		    m.value_escaped != w->value_escaped)
			fail_msg("case %zu \"%s\": member %zu flags string %d name_escaped %d "
				 "value_escaped %d",
				 idx, c->text, n, m.value_is_string, m.name_escaped,
				 m.value_escaped);
		n++;
	}
	if (r != c->end)
		fail_msg("case %zu \"%s\": ended with %d, expected %d", idx, c->text, r, c->end);
	if (n < OB_ARRAY_LEN(c->members) && c->members[n].name != NULL)
		fail_msg("case %zu \"%s\": only %zu members", idx, c->text, n);
	/* A finished iteration stays finished. */
	if (r == 0)
		assert_int_equal(ob_json_iter_next(&it, &m), 0);
}

static void
test_iter_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(iter_cases); i++)
		run_iter_case(i, &iter_cases[i]);
}

/* The scanner reads len bytes, not up to a NUL. */
static void
test_iter_uses_len(void **state)
{
	static const char text[] = "{\"a\":1}{\"b\":2}";
	ob_json_iter it;
	ob_json_member m;

	(void)state;
	assert_true(ob_json_iter_init(&it, text, 7));
	assert_int_equal(ob_json_iter_next(&it, &m), 1);
	assert_int_equal(m.name_len, 1);
	assert_int_equal(ob_json_iter_next(&it, &m), 0);
	/* Cut inside the value. */
	assert_true(ob_json_iter_init(&it, text, 5));
	assert_int_equal(ob_json_iter_next(&it, &m), -1);
}

/* A NUL byte ends a bare literal, and the member with it. */
static void
test_literal_nul(void **state)
{
	static const char text[] = "{\"a\":1\0}";
	ob_json_iter it;
	ob_json_member m;

	(void)state;
	assert_true(ob_json_iter_init(&it, text, sizeof(text) - 1));
	assert_int_equal(ob_json_iter_next(&it, &m), -1);
}

/* Nesting up to 256 levels inside a value is scanned; deeper is refused. */
static void
test_iter_depth(void **state)
{
	(void)state;
	for (int depth = 255; depth <= 257; depth++) {
		size_t len = 6 + 2 * (size_t)depth + 1;
		char *text = malloc(len + 1);
		ob_json_iter it;
		ob_json_member m;
		size_t p = 0;
		int r;

		memcpy(text, "{\"a\":", 5);
		p = 5;
		for (int i = 0; i < depth; i++)
			text[p++] = '[';
		for (int i = 0; i < depth; i++)
			text[p++] = ']';
		text[p++] = '}';
		text[p] = '\0';
		assert_true(ob_json_iter_init(&it, text, p));
		r = ob_json_iter_next(&it, &m);
		if (depth <= 256) {
			assert_int_equal(r, 1);
			assert_int_equal(m.value_len, 2 * (size_t)depth);
			assert_int_equal(ob_json_iter_next(&it, &m), 0);
		} else {
			assert_int_equal(r, -1);
		}
		free(text);
	}
}

/* The string scan, stated a byte at a time: where the string that opens
 * at s[0] ends (just past its closing quote), or 0 when it is not a JSON
 * string (no closing quote, or a raw control character, escaped or not);
 * *escaped says whether it holds a backslash. */
static size_t
reference_string_end(const unsigned char *s, size_t len, bool *escaped)
{
	*escaped = false;
	for (size_t i = 1; i < len; i++) {
		if (s[i] == '"')
			return i + 1;
		if (s[i] < 0x20)
			return 0;
		if (s[i] == '\\') {
			*escaped = true;
			if (++i >= len || s[i] < 0x20)
				return 0;
		}
	}
	return 0;
}

/* The scanner reads 64-byte blocks, whose escapes it works out from the
 * backslashes all at once, and the last bytes one by one: random strings
 * of quotes, backslashes (in runs of any length) and control characters
 * among other bytes (UTF-8, DEL), of every length up to a few blocks, so
 * that each falls at every place in a block and runs cross from one block
 * to the next, agree with the byte-at-a-time statement above. */
static void
test_iter_strings_random(void **state)
{
	/* Backslashes come often (runs of every length), control characters
	 * rarely (each one ends the scan). */
	static const unsigned char specials[] = {'"', '\\', '\\', '\\', '\\', '\\', 0x01, 0x1f};
	static const unsigned char plain[] = {'a', 'u', 'n', 0x7f, 0x80, 0xc3, 0xff, '!'};
	uint64_t seed = 42;

	(void)state;
	for (int iter = 0; iter < 200000; iter++) {
		unsigned char text[256];
		size_t n = (size_t)test_below(&seed, 240), len, end;
		/* One byte in 2 to 64 is special. */
		uint64_t density = 2 + test_below(&seed, 63);
		ob_json_iter it;
		ob_json_member m;
		bool escaped;
		int r;

		memcpy(text, "{\"a\":\"", 6);
		for (size_t i = 0; i < n; i++)
			text[6 + i] = test_below(&seed, density) == 0
					  ? specials[test_below(&seed, sizeof(specials))]
					  : plain[test_below(&seed, sizeof(plain))];
		memcpy(text + 6 + n, "\"}", 2);
		len = 6 + n + 2;
		end = reference_string_end(text + 5, len - 5, &escaped);
		assert_true(ob_json_iter_init(&it, (const char *)text, len));
		r = ob_json_iter_next(&it, &m);
		/* A string that ends before the last quote is followed by a
		 * byte no separator is: the member is refused there. */
		if (end == 0 ? r != -1 : r != (end == n + 2 ? 1 : -1) || it.pos != 5 + end)
			fail_msg("iteration %d: %d at %zu, expected the string to end at %zu", iter,
				 r, it.pos, end == 0 ? 0 : 5 + end);
		if (r == 1 && (m.value_len != n || m.value != (const char *)text + 6 ||
			       m.value_escaped != escaped || !m.value_is_string))
			fail_msg("iteration %d: wrong value span or flags", iter);
	}
}

static void
test_member_is_null(void **state)
{
	static const struct {
		const char *text;
		bool is_null;
	} cases[] = {
	    {"{\"a\":null}", true},   {"{\"a\": null }", true}, {"{\"a\":\"null\"}", false},
	    {"{\"a\":nullx}", false}, {"{\"a\":0}", false},     {"{\"a\":{}}", false},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		ob_json_iter it;
		ob_json_member m;

		assert_true(ob_json_iter_init(&it, cases[i].text, strlen(cases[i].text)));
		assert_int_equal(ob_json_iter_next(&it, &m), 1);
		if (ob_json_member_is_null(&m) != cases[i].is_null)
			fail_msg("\"%s\": is_null should be %d", cases[i].text, cases[i].is_null);
	}
}

typedef struct unescape_case {
	const char *in; /* the inner text of a JSON string */
	long len;       /* -1: refused */
	const char *out;
} unescape_case;

static const unescape_case unescape_cases[] = {
    {"", 0, ""},
    {"plain text", 10, "plain text"},
    {"\\\"\\\\\\/\\b\\f\\n\\r\\t", 8, "\"\\/\b\f\n\r\t"},
    {"a\\u0041b", 3, "aAb"},
    {"\\u00e9", 2, "\xc3\xa9"},
    {"\\u00E9", 2, "\xc3\xa9"},
    {"\\u20ac", 3, "\xe2\x82\xac"},
    {"\\ud83d\\ude00", 4, "\xf0\x9f\x98\x80"},
    {"x\\u0000y", 3, "x\0y"},
    {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
    {"\\q", -1},
    {"\\", -1},
    {"abc\\", -1},
    {"\\u12", -1},
    {"\\u12G4", -1},
    {"\\ud83d", -1},
    {"\\ud83dx", -1},
    {"\\ud83d\\u0041", -1},
    {"\\ud83d\\ud83d", -1},
    {"\\ude00", -1},
};

static void
test_unescape_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(unescape_cases); i++) {
		const unescape_case *c = &unescape_cases[i];
		size_t in_len = strlen(c->in);
		/* Exactly in_len bytes, as the contract promises is enough. */
		char *out = malloc(in_len ? in_len : 1);
		long n = ob_json_unescape(c->in, in_len, out);

		if (n != c->len)
			fail_msg("unescape \"%s\": %ld bytes, expected %ld", c->in, n, c->len);
		if (n > 0 && memcmp(out, c->out, (size_t)n) != 0)
			fail_msg("unescape \"%s\": wrong bytes", c->in);
		free(out);
	}
}

/* Unescaping copies the runs between escapes a word at a time: random
 * strings of plain bytes and escapes, of every length up to a few words,
 * decode to what they stand for. */
static void
test_unescape_random(void **state)
{
	static const struct {
		const char *in, *out;
	} tokens[] = {{"a", "a"},    {"\xc3", "\xc3"}, {"\\\"", "\""}, {"\\\\", "\\"},
		      {"\\n", "\n"}, {"\\u0041", "A"}, {"/", "/"},     {"\\/", "/"}};
	uint64_t seed = 7;

	(void)state;
	for (int iter = 0; iter < 100000; iter++) {
		char in[256], want[256], out[256];
		size_t in_len = 0, want_len = 0, n = (size_t)test_below(&seed, 40);
		long got;

		for (size_t i = 0; i < n; i++) {
			size_t t = (size_t)test_below(&seed, OB_ARRAY_LEN(tokens));

			memcpy(in + in_len, tokens[t].in, strlen(tokens[t].in));
			in_len += strlen(tokens[t].in);
			memcpy(want + want_len, tokens[t].out, strlen(tokens[t].out));
			want_len += strlen(tokens[t].out);
		}
		got = ob_json_unescape(in, in_len, out);
		if (got != (long)want_len || memcmp(out, want, want_len) != 0)
			fail_msg("iteration %d: \"%.*s\" decoded wrong", iter, (int)in_len, in);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_iter_table),      cmocka_unit_test(test_iter_uses_len),
	    cmocka_unit_test(test_iter_depth),      cmocka_unit_test(test_member_is_null),
	    cmocka_unit_test(test_unescape_table),  cmocka_unit_test(test_iter_strings_random),
	    cmocka_unit_test(test_unescape_random), cmocka_unit_test(test_literal_nul),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
