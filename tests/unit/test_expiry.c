/*
 * test_expiry.c: records waiting too long for the broker (expiry.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "outboxd/expiry.h"

static void
test_due_only_after_the_timeout_without_progress(void **state)
{
	ob_expiry e = {0};

	(void)state;
	assert_false(ob_expiry_due(&e, 1000, 5000)); /* nothing outstanding */
	ob_expiry_produced(&e, 1000);
	ob_expiry_produced(&e, 1900); /* not a move: one was outstanding */
	assert_false(ob_expiry_due(&e, 1000, 1999));
	assert_true(ob_expiry_due(&e, 1000, 2000));
	ob_expiry_reported(&e, 2500); /* a report moves them */
	assert_false(ob_expiry_due(&e, 1000, 3499));
	assert_true(ob_expiry_due(&e, 1000, 3500));
	ob_expiry_reported(&e, 3600);
	assert_false(ob_expiry_due(&e, 1000, 99999)); /* all reported */
	/* Produced onto none: counted from then, not from the last report. */
	ob_expiry_produced(&e, 50000);
	assert_false(ob_expiry_due(&e, 1000, 50999));
	assert_true(ob_expiry_due(&e, 1000, 51000));
}

static void
test_no_timeout_never_expires(void **state)
{
	ob_expiry e = {0};

	(void)state;
	ob_expiry_produced(&e, 0);
	assert_false(ob_expiry_due(&e, 0, INT64_MAX));
	/* A report past the count (a purge's) does not wrap it. */
	ob_expiry_reported(&e, 1);
	ob_expiry_reported(&e, 2);
	assert_int_equal(e.outstanding, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_due_only_after_the_timeout_without_progress),
	    cmocka_unit_test(test_no_timeout_never_expires),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
