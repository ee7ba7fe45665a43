/*
 * test_timeline.c: timeline history files and the count of events handed
 * over past a switch point (timeline.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/timeline.h"

typedef struct switch_case {
	const char *history;
	int tli;
	bool found;
	ob_lsn expected;
} switch_case;

/* As PostgreSQL writes them: one line per ancestor, tab-separated. */
static const switch_case switch_cases[] = {
    {"1\t0/14D8E08\tno recovery target specified\n", 1, true, UINT64_C(0x14D8E08)},
    {"1\t0/14D8E08\tno recovery target specified\n", 2, false, 0},
    {"1\t0/3000060\tno recovery target specified\n"
     "\n"
     "2\t0/5000000\tno recovery target specified\n",
     2, true, UINT64_C(0x5000000)},
    {"1\t0/3000060\tno recovery target specified\n"
     "2\t0/5000000\tno recovery target specified\n",
     1, true, UINT64_C(0x3000060)},
    /* Comments and blank lines, as the server's own reader allows. */
    {"# a comment\n\n1\t1/A0\tat a target\n", 1, true, UINT64_C(0x1000000A0)},
    /* No trailing newline, spaces for tabs. */
    {"3 0/10 reason", 3, true, UINT64_C(0x10)},
    {"", 1, false, 0},
    {"x\t0/10\treason\n", 1, false, 0},
    {"1\tnot-an-lsn\treason\n", 1, false, 0},
    {"12\t0/10\treason\n", 1, false, 0},
};

static void
test_switch_point(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(switch_cases) / sizeof(switch_cases[0]); i++) {
		const switch_case *c = &switch_cases[i];
		ob_lsn got = 0;
		bool found = ob_timeline_switch_point(c->history, c->tli, &got);

		assert_int_equal(found, c->found);
		if (found)
			assert_int_equal(got, c->expected);
	}
}

/* Three transactions with events ending at 100, 200, 300, having handed
 * over 2, 5 and 9 events by their ends; 11 handed over in all (a cut-off
 * transaction's two). */
static void
fill(ob_timeline *tl)
{
	ob_timeline_init(tl);
	ob_timeline_committed(tl, 100, 2);
	ob_timeline_committed(tl, 200, 5);
	ob_timeline_committed(tl, 300, 9);
}

static void
test_forget_after_counts_what_lies_past(void **state)
{
	ob_timeline tl;
	bool exact = false;

	(void)state;
	fill(&tl);
	/* Past 250: the transaction ending at 300 and the cut-off one. */
	assert_int_equal(ob_timeline_forget_after(&tl, 250, 11, &exact), 6);
	assert_true(exact);
	/* Forgotten: the next fork counts from the mark at 200. */
	assert_int_equal(ob_timeline_forget_after(&tl, 250, 11, &exact), 6);
	ob_timeline_committed(&tl, 260, 12);
	assert_int_equal(ob_timeline_forget_after(&tl, 200, 12, &exact), 7);
	assert_true(exact);
	/* At a transaction's end: it lies before, not past. */
	ob_timeline_free(&tl);
	fill(&tl);
	assert_int_equal(ob_timeline_forget_after(&tl, 300, 9, &exact), 0);
	assert_true(exact);
	/* Before everything: all of them. */
	assert_int_equal(ob_timeline_forget_after(&tl, 50, 9, &exact), 9);
	assert_true(exact);
	ob_timeline_free(&tl);
}

static void
test_rebase_counts_events_handed_again_once(void **state)
{
	ob_timeline tl;
	bool exact = false;

	(void)state;
	fill(&tl);
	/* A new producer reads again from 150: the transactions ending at 200
	 * (3 events) and 300 (4) are handed over again, then 2 of one cut
	 * off, 20 in all; a fork at 250 counts those past it once: 4 + 2,
	 * not the 6 of the first reading as well. */
	ob_timeline_rebase(&tl, 150, 11);
	ob_timeline_committed(&tl, 200, 14);
	ob_timeline_committed(&tl, 300, 18);
	assert_int_equal(ob_timeline_forget_after(&tl, 250, 20, &exact), 6);
	assert_true(exact);
	ob_timeline_free(&tl);
}

static void
test_forgotten_marks_make_a_lower_bound(void **state)
{
	ob_timeline tl;
	bool exact = true;
	uint64_t n = OB_TIMELINE_MARKS_MAX + 10;

	(void)state;
	ob_timeline_init(&tl);
	for (uint64_t i = 1; i <= n; i++)
		ob_timeline_committed(&tl, 100 * i, 3 * i);
	/* The oldest ten marks were dropped; the rest are exact. */
	assert_int_equal(ob_timeline_forget_after(&tl, 100 * (n - 1), 3 * n, &exact), 3);
	assert_true(exact);
	/* Before the oldest kept mark: a lower bound. */
	assert_int_equal(ob_timeline_forget_after(&tl, 500, 3 * n, &exact), 3 * n);
	assert_false(exact);
	ob_timeline_free(&tl);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_switch_point),
	    cmocka_unit_test(test_forget_after_counts_what_lies_past),
	    cmocka_unit_test(test_rebase_counts_events_handed_again_once),
	    cmocka_unit_test(test_forgotten_marks_make_a_lower_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
