/*
 * test_recode.c: a database's encoding to UTF-8 (recode.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/recode.h"

typedef struct recode_case {
	const char *encoding;
	const char *in;
	const char *utf8; /* NULL: not valid text of the encoding */
} recode_case;

static const recode_case cases[] = {
    {"LATIN1", "{\"key\":\"Zo\xeb\"}", "{\"key\":\"Zo\xc3\xab\"}"},
    {"LATIN9", "\xa4", "\xe2\x82\xac"},      /* the euro sign */
    {"WIN1252", "\x80 5", "\xe2\x82\xac 5"}, /* the euro sign elsewhere */
    {"WIN1251", "\xcf\xf0\xe8", "\xd0\x9f\xd1\x80\xd0\xb8"},
    {"KOI8R", "\xf0", "\xd0\x9f"},
    {"EUC_KR", "\xb0\xa1", "\xea\xb0\x80"},
    {"EUC_KR", "\xb0", NULL},                  /* a character cut short */
    {"WIN1252", "Zo\x81", NULL},               /* a byte WIN1252 leaves undefined */
    {"SQL_ASCII", "Zo\xc3\xab", "Zo\xc3\xab"}, /* UTF-8 passes as it is */
    {"SQL_ASCII", "Zo\xe9", NULL},             /* other bytes do not */
    {"LATIN1", "", ""},
};

static void
test_converts(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const recode_case *c = &cases[i];
		ob_recode r;
		const char *out;
		size_t out_len;

		assert_int_equal(ob_recode_need_of(c->encoding), OB_RECODE_CONVERT);
		assert_true(ob_recode_open(&r, c->encoding));
		if (c->utf8 == NULL) {
			assert_false(ob_recode_to_utf8(&r, c->in, strlen(c->in), &out, &out_len));
		} else {
			assert_true(ob_recode_to_utf8(&r, c->in, strlen(c->in), &out, &out_len));
			assert_int_equal(out_len, strlen(c->utf8));
			assert_memory_equal(out, c->utf8, out_len);
		}
		ob_recode_close(&r);
	}
}

static void
test_what_each_encoding_needs(void **state)
{
	ob_recode r = {0};

	(void)state;
	assert_int_equal(ob_recode_need_of("UTF8"), OB_RECODE_NONE);
	assert_int_equal(ob_recode_need_of("SQL_ASCII"), OB_RECODE_CONVERT);
	assert_int_equal(ob_recode_need_of("MULE_INTERNAL"), OB_RECODE_UNABLE);
	/* glibc converts these otherwise than PostgreSQL: refused */
	assert_int_equal(ob_recode_need_of("EUC_JP"), OB_RECODE_UNABLE);
	assert_int_equal(ob_recode_need_of("EUC_JIS_2004"), OB_RECODE_UNABLE);
	assert_int_equal(ob_recode_need_of("WIN1258"), OB_RECODE_UNABLE);
	assert_int_equal(ob_recode_need_of("NOT_AN_ENCODING"), OB_RECODE_UNABLE);
	assert_false(ob_recode_open(&r, "MULE_INTERNAL"));
	ob_recode_close(&r);
	ob_recode_close(&r); /* closing a closed one is harmless */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_converts),
	    cmocka_unit_test(test_what_each_encoding_needs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
