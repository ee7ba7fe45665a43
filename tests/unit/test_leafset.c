/*
 * test_leafset.c: the leaf partitions of the outbox table as a set of
 * names (leafset.h): membership, coverage with the names missing, and
 * wal2json's add-tables list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/leafset.h"

/* Names added out of order and twice, and names that differ only in
 * where the schema ends, are kept apart and found. */
static void
test_add_and_has(void **state)
{
	ob_leafset s;

	(void)state;
	ob_leafset_init(&s);
	ob_leafset_add(&s, "public", "outbox_p2");
	ob_leafset_add(&s, "public", "outbox");
	ob_leafset_add(&s, "public", "outbox_p1");
	ob_leafset_add(&s, "public", "outbox_p2");
	ob_leafset_add(&s, "a.b", "c");
	ob_leafset_add(&s, "a", "b.c");
	assert_int_equal(s.len, 5);
	assert_true(ob_leafset_has(&s, "public", "outbox"));
	assert_true(ob_leafset_has(&s, "public", "outbox_p1"));
	assert_true(ob_leafset_has(&s, "public", "outbox_p2"));
	assert_true(ob_leafset_has(&s, "a.b", "c"));
	assert_true(ob_leafset_has(&s, "a", "b.c"));
	assert_false(ob_leafset_has(&s, "public", "outbox_p3"));
	assert_false(ob_leafset_has(&s, "other", "outbox"));
	assert_false(ob_leafset_has(&s, "a", "b"));
	assert_false(ob_leafset_has(&s, "", ""));
	for (size_t i = 1; i < s.len; i++) {
		int c = strcmp(s.leaves[i - 1].schema, s.leaves[i].schema);

		assert_true(c < 0 ||
			    (c == 0 && strcmp(s.leaves[i - 1].table, s.leaves[i].table) < 0));
	}
	ob_leafset_free(&s);
}

/* Many names: each one found, and none that was not added. */
static void
test_many(void **state)
{
	ob_leafset s;
	char name[32];

	(void)state;
	ob_leafset_init(&s);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "p%d", (i * 7919) % 1000);
		ob_leafset_add(&s, "public", name);
	}
	assert_int_equal(s.len, 1000);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		assert_true(ob_leafset_has(&s, "public", name));
		snprintf(name, sizeof(name), "q%d", i);
		assert_false(ob_leafset_has(&s, "public", name));
	}
	ob_leafset_free(&s);
}

/* missing() counts the names not covered and lists them, cut short with
 * "..." when the buffer is too small, and works without a buffer. */
static void
test_missing(void **state)
{
	ob_leafset stream, now;
	char buf[64];
	char tiny[24];

	(void)state;
	ob_leafset_init(&stream);
	ob_leafset_init(&now);
	ob_leafset_add(&stream, "public", "outbox");
	ob_leafset_add(&stream, "public", "outbox_d1");
	ob_leafset_add(&now, "public", "outbox");
	ob_leafset_add(&now, "public", "outbox_d1");
	assert_int_equal(ob_leafset_missing(&now, &stream, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");

	/* A partition detached from the table: still covered. */
	ob_leafset_clear(&now);
	ob_leafset_add(&now, "public", "outbox");
	assert_int_equal(ob_leafset_missing(&now, &stream, buf, sizeof(buf)), 0);

	ob_leafset_add(&now, "public", "outbox_d2");
	ob_leafset_add(&now, "sales", "outbox_d3");
	assert_int_equal(ob_leafset_missing(&now, &stream, buf, sizeof(buf)), 2);
	assert_string_equal(buf, "public.outbox_d2, sales.outbox_d3");
	assert_int_equal(ob_leafset_missing(&now, &stream, NULL, 0), 2);
	assert_int_equal(ob_leafset_missing(&now, &stream, tiny, sizeof(tiny)), 2);
	assert_string_equal(tiny, "public.outbox_d2, ...");
	assert_int_equal(ob_leafset_missing(&now, &stream, tiny, 8), 2);
	assert_string_equal(tiny, "...");
	assert_int_equal(ob_leafset_missing(&now, &stream, tiny, 3), 2);
	assert_string_equal(tiny, "");
	/* The other way round: the stream reads one the table lost. */
	assert_int_equal(ob_leafset_missing(&stream, &now, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "public.outbox_d1");
	ob_leafset_free(&stream);
	ob_leafset_free(&now);
}

/* The add-tables list names every table, escaped the way wal2json reads
 * it, with single quotes doubled for the quoted option. */
static void
test_add_tables(void **state)
{
	ob_leafset s;
	char *list;

	(void)state;
	ob_leafset_init(&s);
	list = ob_leafset_add_tables(&s);
	assert_string_equal(list, "");
	free(list);
	ob_leafset_add(&s, "public", "outbox");
	list = ob_leafset_add_tables(&s);
	assert_string_equal(list, "public.outbox");
	free(list);
	ob_leafset_add(&s, "public", "outbox_2024.01");
	ob_leafset_add(&s, "my schema", "it's*");
	ob_leafset_add(&s, "back\\slash", "a,b");
	list = ob_leafset_add_tables(&s);
	assert_string_equal(list, "back\\\\slash.a\\,b,my\\ schema.it\\''s\\*,public.outbox,"
				  "public.outbox_2024\\.01");
	free(list);
	ob_leafset_clear(&s);
	/* wal2json splits at whitespace too: a tab or newline in a name
	 * (before: the whole list refused, START_REPLICATION failing) */
	ob_leafset_add(&s, "public", "t\tab");
	ob_leafset_add(&s, "new\nline", "x");
	list = ob_leafset_add_tables(&s);
	assert_string_equal(list, "new\\\nline.x,public.t\\\tab");
	free(list);
	ob_leafset_free(&s);
}

/* A long list grows its buffer as it goes. */
static void
test_add_tables_long(void **state)
{
	ob_leafset s;
	char name[64], *list;

	(void)state;
	ob_leafset_init(&s);
	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "outbox_%04d'''", i);
		ob_leafset_add(&s, "public", name);
	}
	list = ob_leafset_add_tables(&s);
	/* Each: "public.outbox_NNNN" + 3 quotes as \'' (9 bytes), and a comma. */
	assert_int_equal(strlen(list), 500 * (18 + 9) + 499);
	assert_memory_equal(list, "public.outbox_0000\\''\\''\\'',public.outbox_0001", 46);
	free(list);
	ob_leafset_free(&s);
}

/* clear() forgets the position and the kind; swap() exchanges whole sets. */
static void
test_clear_and_swap(void **state)
{
	ob_leafset a, b;

	(void)state;
	ob_leafset_init(&a);
	ob_leafset_init(&b);
	ob_leafset_add(&a, "public", "outbox");
	a.verified = 0x100;
	a.partitioned = true;
	ob_leafset_swap(&a, &b);
	assert_int_equal(a.len, 0);
	assert_int_equal(b.len, 1);
	assert_int_equal(b.verified, 0x100);
	assert_true(b.partitioned);
	ob_leafset_clear(&b);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.verified, 0);
	assert_false(b.partitioned);
	assert_false(ob_leafset_has(&b, "public", "outbox"));
	ob_leafset_add(&b, "public", "outbox_p1");
	assert_true(ob_leafset_has(&b, "public", "outbox_p1"));
	ob_leafset_free(&a);
	ob_leafset_free(&b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_add_and_has),     cmocka_unit_test(test_many),
	    cmocka_unit_test(test_missing),         cmocka_unit_test(test_add_tables),
	    cmocka_unit_test(test_add_tables_long), cmocka_unit_test(test_clear_and_swap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
