/*
 * test_lsn.c: parsing and printing "X/X" LSNs (lsn.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/lsn.h"

typedef struct parse_case {
	const char *text;
	bool ok;
	ob_lsn expected;
} parse_case;

static const parse_case parse_cases[] = {
    {"0/0", true, 0},
    {"16/B374D848", true, UINT64_C(0x16B374D848)},
    {"16/b374d848", true, UINT64_C(0x16B374D848)},
    {"FFFFFFFF/FFFFFFFF", true, UINT64_MAX},
    {"0/152D630", true, UINT64_C(0x152D630)},
    {"1/0", true, UINT64_C(0x100000000)},
    {"00000001/00000002", true, UINT64_C(0x100000002)},
    {"", false, 0},
    {"0", false, 0},
    {"/1", false, 0},
    {"1/", false, 0},
    {"/", false, 0},
    {"1/2x", false, 0},
    {"x1/2", false, 0},
    {"123456789/0", false, 0},
    {"0/123456789", false, 0},
    {" 0/0", false, 0},
    {"0/0 ", false, 0},
    {"1//2", false, 0},
    {"1/2/3", false, 0},
    {"-1/0", false, 0},
    {"+1/0", false, 0},
    {"0x1/0", false, 0},
    {"G/0", false, 0},
    {"0/G", false, 0},
    {"1:2", false, 0},
};

static void
test_parse_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(parse_cases); i++) {
		const parse_case *c = &parse_cases[i];
		ob_lsn got = UINT64_C(0xdeadbeef), got_n = UINT64_C(0xdeadbeef);
		bool ok = ob_lsn_parse(c->text, &got);
		/* The length-bounded parser agrees on the whole string. */
		bool ok_n = ob_lsn_parse_n(c->text, strlen(c->text), &got_n);

		if (ok != c->ok || ok_n != c->ok)
			fail_msg("\"%s\": parse %s, parse_n %s, expected %s", c->text,
				 ok ? "accepted" : "refused", ok_n ? "accepted" : "refused",
				 c->ok ? "accepted" : "refused");
		if (c->ok && (got != c->expected || got_n != c->expected))
			fail_msg("\"%s\": got %llx / %llx, expected %llx", c->text,
				 (unsigned long long)got, (unsigned long long)got_n,
				 (unsigned long long)c->expected);
	}
}

static void
test_parse_n_stops_at_len(void **state)
{
	/* Not NUL-terminated after the LSN: the bytes past len are junk. */
	const char buf[] = {'1', '6', '/', 'B', '3', '7', '4', 'D', '8', '4', '8', 'Z', 'Z'};
	ob_lsn got = 0;

	(void)state;
	assert_true(ob_lsn_parse_n(buf, 11, &got));
	assert_int_equal(got, UINT64_C(0x16B374D848));
	assert_false(ob_lsn_parse_n(buf, 12, &got));
	/* A prefix that is not a whole LSN. */
	assert_false(ob_lsn_parse_n(buf, 3, &got));
	assert_false(ob_lsn_parse_n(buf, 2, &got));
	assert_false(ob_lsn_parse_n(buf, 0, &got));
	/* "1/2" cut to "1/". */
	assert_false(ob_lsn_parse_n("1/2", 2, &got));
	assert_true(ob_lsn_parse_n("1/2", 3, &got));
	assert_int_equal(got, UINT64_C(0x100000002));
}

typedef struct format_case {
	ob_lsn lsn;
	const char *text;
} format_case;

static const format_case format_cases[] = {
    {0, "0/0"},
    {UINT64_C(0x16B374D848), "16/B374D848"},
    {UINT64_MAX, "FFFFFFFF/FFFFFFFF"},
    {UINT64_C(0x152D660), "0/152D660"},
    {UINT64_C(0x100000000), "1/0"},
    {UINT64_C(0xABCDEF0012345678), "ABCDEF00/12345678"},
};

static void
test_format_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(format_cases); i++) {
		char buf[OB_LSN_BUFLEN];
		char *ret;

		memset(buf, 'x', sizeof(buf));
		ret = ob_lsn_format(format_cases[i].lsn, buf);
		assert_ptr_equal(ret, buf);
		assert_string_equal(buf, format_cases[i].text);
	}
	/* The longest text fits the documented buffer with its terminator. */
	assert_int_equal(strlen("FFFFFFFF/FFFFFFFF") + 1, OB_LSN_BUFLEN);
}

/* xorshift64*: a fixed-seed generator so failures reproduce. */
static uint64_t
next_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

static void
test_round_trip(void **state)
{
	uint64_t seed = UINT64_C(0x9E3779B97F4A7C15);

	(void)state;
	for (int i = 0; i < 10000; i++) {
		uint64_t v = next_random(&seed);
		char buf[OB_LSN_BUFLEN];
		ob_lsn back = 0;

		/* Mix in values with an empty high or low half. */
		if (i % 4 == 1)
			v &= UINT64_C(0xffffffff);
		else if (i % 4 == 2)
			v &= UINT64_C(0xffffffff00000000);
		ob_lsn_format(v, buf);
		assert_true(ob_lsn_parse(buf, &back));
		assert_int_equal(back, v);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_table),
	    cmocka_unit_test(test_parse_n_stops_at_len),
	    cmocka_unit_test(test_format_table),
	    cmocka_unit_test(test_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
