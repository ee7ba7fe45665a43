/*
 * test_slotloss.c: whether a lost slot can be recovered from the outbox
 * table (slotloss.h), as a table: each reason a recovery would guess,
 * which one is said when several hold, and the point at both edges of
 * the 2^31-id window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/slotloss.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct loss_case {
	const char *name;
	ob_recovery_facts facts;
	const char *why; /* NULL: recoverable; else a word the reason holds */
} loss_case;

#define POINT(x, next) .has_point = true, .xid = (x), .next_xid = (next)

static const loss_case cases[] = {
    {"a fresh point", {POINT(1000, 1200)}, NULL},
    {"deletes not known (a crash, a promotion)", {POINT(1000, 1200), .deletes_past = -1}, NULL},
    {"statistics reset since the point",
     {POINT(1000, 1200), .deletes_past = -1, .stats_reset_at = "2026-11-29 08:50:00+00"},
     "were reset at 2026-11-29 08:50:00+00"},
    {"a reset said before deletes past it",
     {POINT(1000, 1200), .deletes_past = 2, .stats_reset_at = "2026-11-29 08:50:00+00"},
     "were reset"},
    {"a truncated leaf",
     {POINT(1000, 1200), .rewritten = "outbox_d0"},
     "(outbox_d0) was truncated"},
    {"a truncated leaf said before a reset",
     {POINT(1000, 1200), .rewritten = "outbox", .stats_reset_at = "2026-11-29 08:50:00+00"},
     "truncated"},
    {"a dropped partition",
     {POINT(1000, 1200), .dropped = "oid 16400, outbox_d1 (detached)"},
     "(oid 16400, outbox_d1 (detached)) were dropped or detached"},
    {"a dropped partition said before a reset",
     {POINT(1000, 1200), .dropped = "oid 16400", .stats_reset_at = "2026-11-29 08:50:00+00"},
     "dropped"},
    {"deletes seen said before a reset",
     {POINT(1000, 1200), .deletes_seen = true, .stats_reset_at = "2026-11-29 08:50:00+00"},
     "insert-then-delete"},
    {"no point", {.deletes_past = -1}, "no recovery point"},
    {"no point wins over messages", {.messages = true, .deletes_past = -1}, "no recovery point"},
    {"another system", {POINT(1000, 1200), .other_system = true}, "another PostgreSQL system"},
    {"2^31 - 1 ids since", {POINT(1000, 1000 + (UINT64_C(1) << 31) - 1)}, NULL},
    {"2^31 ids since", {POINT(1000, 1000 + (UINT64_C(1) << 31))}, "2^31"},
    {"logical messages", {POINT(1000, 1200), .messages = true}, "logical messages"},
    {"deletes seen before", {POINT(1000, 1200), .deletes_seen = true}, "insert-then-delete"},
    {"deletes since the point", {POINT(1000, 1200), .deletes_past = 3}, "3 rows"},
    {"messages said before deletes",
     {POINT(1000, 1200), .messages = true, .deletes_past = 3},
     "logical messages"},
};

static void
test_judge(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(cases); i++) {
		char why[512] = "";
		bool ok = ob_slotloss_recoverable(&cases[i].facts, why, sizeof(why));

		if (ok != (cases[i].why == NULL) ||
		    (cases[i].why != NULL && strstr(why, cases[i].why) == NULL))
			fail_msg("%s: recoverable %d, why \"%s\"", cases[i].name, ok, why);
	}
}

static void
test_loss_names(void **state)
{
	(void)state;
	assert_string_equal(ob_slot_loss_name(OB_SLOT_LOSS_MISSING), "missing");
	assert_string_equal(ob_slot_loss_name(OB_SLOT_LOSS_INVALIDATED), "invalidated");
	assert_string_equal(ob_slot_loss_name(OB_SLOT_LOSS_PROMOTED), "promoted");
	assert_string_equal(ob_slot_loss_name(OB_SLOT_LOSS_UNDECODABLE), "undecodable");
	assert_string_equal(ob_slot_loss_name(OB_SLOT_LOSS_NONE), "");
}

/* The snapshot builder's bug, as 15 and as 16+ name it; nothing else. */
static void
test_undecodable(void **state)
{
	(void)state;
	assert_true(ob_slotloss_undecodable(
	    "XX000", "ERROR:  could not map filenode \"base/5/16477\" to relation OID"));
	assert_true(ob_slotloss_undecodable(
	    "XX000", "ERROR:  could not map filenumber \"base/5/16451\" to relation OID"));
	assert_false(ob_slotloss_undecodable(
	    "58P01", "ERROR:  could not map filenode \"base/5/16477\" to relation OID"));
	assert_false(ob_slotloss_undecodable("XX000", "ERROR:  could not read block 0"));
	assert_false(ob_slotloss_undecodable("", ""));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_judge),
	    cmocka_unit_test(test_loss_names),
	    cmocka_unit_test(test_undecodable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
