/*
 * test_policy.c: the pure rules of the daemons' loops (policy.h), as
 * tables: the backoff's waits, when a standby status update is due and
 * how long the stream may wait before one is, and the count of a server
 * error repeated at one stream position that stops the relay.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "outboxd/policy.h"
#include "outboxd/sqlstate.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* A run of the backoff: 'n' takes the next wait, 'r' resets. */
typedef struct backoff_case {
	const char *name;
	int64_t first_ms;
	int64_t max_ms;
	const char *steps;
	int64_t waits[10]; /* the wait each 'n' returns, in order */
} backoff_case;

static const backoff_case backoff_cases[] = {
    {"doubles up to the maximum", 100, 2000, "nnnnnnn", {100, 200, 400, 800, 1600, 2000, 2000}},
    {"a maximum that is no power of two caps", 100, 1000, "nnnnn", {100, 200, 400, 800, 1000}},
    {"reset starts from the first again", 100, 2000, "nnnrnn", {100, 200, 400, 100, 200}},
    {"reset before any wait", 50, 400, "rnn", {50, 100}},
    {"a first wait at the maximum stays", 500, 500, "nnn", {500, 500, 500}},
    {"a first wait above the maximum is taken once", 3000, 2000, "nnn", {3000, 2000, 2000}},
    {"a wait of 1 ms doubles", 1, 8, "nnnnnn", {1, 2, 4, 8, 8, 8}},
    {"the relay's reconnects",
     100,
     60000,
     "nnnnnnnnnn",
     {100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200}},
};

static void
test_backoff(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(backoff_cases); i++) {
		const backoff_case *c = &backoff_cases[i];
		ob_backoff b;
		size_t w = 0;

		ob_backoff_init(&b, c->first_ms, c->max_ms);
		for (const char *s = c->steps; *s != '\0'; s++) {
			if (*s == 'r') {
				ob_backoff_reset(&b);
				continue;
			}
			int64_t got = ob_backoff_next(&b);

			if (got != c->waits[w])
				fail_msg("%s: wait %zu is %lld ms, should be %lld", c->name, w,
					 (long long)got, (long long)c->waits[w]);
			w++;
		}
	}
}

typedef struct status_case {
	const char *name;
	bool force;
	bool asked;
	bool moved;
	int64_t since_ms;
	int64_t interval_ms;
	bool due;
	int64_t wait_ms; /* ob_status_wait_ms() */
} status_case;

static const status_case status_cases[] = {
    {"nothing: not yet", false, false, false, 10, 1000, false, 990},
    {"the interval passed", false, false, false, 1000, 1000, true, 0},
    {"long past the interval", false, false, false, 5000, 1000, true, -4000},
    {"just before the interval", false, false, false, 999, 1000, false, 1},
    {"forced", true, false, false, 0, 1000, true, 1000},
    {"the server asked", false, true, false, 0, 1000, true, 1000},
    {"moved, too soon", false, false, true, OB_STATUS_MIN_INTERVAL_MS - 1, 1000, false,
     OB_STATUS_MIN_INTERVAL_MS},
    {"moved, the minimum gap passed", false, false, true, OB_STATUS_MIN_INTERVAL_MS, 1000, true,
     OB_STATUS_MIN_INTERVAL_MS},
    {"moved, an interval shorter than the gap", false, false, true, 10, 10, true,
     OB_STATUS_MIN_INTERVAL_MS},
    {"not moved, an interval shorter than the gap", false, false, false, 10, 10, true, 0},
    {"the first update (since the epoch of the clock)", false, false, false, 123456, 1000, true,
     1000 - 123456},
};

static void
test_status_due(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(status_cases); i++) {
		const status_case *c = &status_cases[i];
		bool due = ob_status_due(c->force, c->asked, c->moved, c->since_ms, c->interval_ms);
		int64_t wait = ob_status_wait_ms(c->moved, c->since_ms, c->interval_ms);

		if (due != c->due)
			fail_msg("%s: due should be %d", c->name, c->due);
		if (wait != c->wait_ms)
			fail_msg("%s: the wait is %lld ms, should be %lld", c->name,
				 (long long)wait, (long long)c->wait_ms);
	}
}

/* One error met: its SQLSTATE (NULL: none) and the stream's position,
 * and the count it must give. */
typedef struct error_step {
	const char *state;
	ob_lsn lsn;
	int count;
} error_step;

typedef struct error_case {
	const char *name;
	error_step steps[8];
	size_t n;
} error_case;

static const error_case error_cases[] = {
    {"the same error at one position counts up to the limit",
     {{"XX000", 0x100, 1},
      {"XX000", 0x100, 2},
      {"XX000", 0x100, 3},
      {"XX000", 0x100, 4},
      {"XX000", 0x100, OB_ERROR_REPEAT_LIMIT}},
     5},
    {"the stream moved on: the count starts again",
     {{"XX000", 0x100, 1}, {"XX000", 0x100, 2}, {"XX000", 0x200, 1}, {"XX000", 0x200, 2}},
     4},
    {"another SQLSTATE at the same position counts on",
     {{"XX000", 0x100, 1}, {"22P02", 0x100, 2}, {"42704", 0x100, 3}},
     3},
    {"a lost connection starts again",
     {{"XX000", 0x100, 1}, {"XX000", 0x100, 2}, {NULL, 0x100, 0}, {"XX000", 0x100, 1}},
     4},
    {"no SQLSTATE (\"\") never counts", {{"", 0x100, 0}, {"", 0x100, 0}, {"XX000", 0x100, 1}}, 3},
    {"connection errors and shutdowns never count",
     {{"XX000", 0x100, 1},
      {"08006", 0x100, 0},
      {OB_SQLSTATE_ADMIN_SHUTDOWN, 0x100, 0},
      {OB_SQLSTATE_CRASH_SHUTDOWN, 0x100, 0},
      {OB_SQLSTATE_CANNOT_CONNECT_NOW, 0x100, 0},
      {"XX000", 0x100, 1}},
     6},
    {"a query cancelled counts (class 57, not a shutdown)",
     {{"57014", 0x100, 1}, {"57014", 0x100, 2}},
     2},
    {"past the limit it keeps counting",
     {{"XX000", 0x5, 1},
      {"XX000", 0x5, 2},
      {"XX000", 0x5, 3},
      {"XX000", 0x5, 4},
      {"XX000", 0x5, 5},
      {"XX000", 0x5, 6}},
     6},
};

static void
test_error_repeat(void **state)
{
	(void)state;
	for (size_t i = 0; i < N(error_cases); i++) {
		const error_case *c = &error_cases[i];
		ob_error_repeat r = {0};

		for (size_t s = 0; s < c->n; s++) {
			const error_step *e = &c->steps[s];
			int got = ob_error_repeat_note(&r, e->state, e->lsn);

			if (got != e->count)
				fail_msg("%s: error %zu counts %d, should be %d", c->name, s, got,
					 e->count);
		}
	}
}

static void
test_error_repeat_reset(void **state)
{
	ob_error_repeat r = {0};

	(void)state;
	assert_int_equal(ob_error_repeat_note(&r, "XX000", 0x100), 1);
	assert_int_equal(ob_error_repeat_note(&r, "XX000", 0x100), 2);
	ob_error_repeat_reset(&r); /* a race for the slot lost */
	assert_int_equal(ob_error_repeat_note(&r, "XX000", 0x100), 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_backoff),
	    cmocka_unit_test(test_status_due),
	    cmocka_unit_test(test_error_repeat),
	    cmocka_unit_test(test_error_repeat_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
