/*
 * Tests of the recovery point's rule (recpoint.h), with a model check.
 *
 * The model is a server's transactions as far as the rule rests on them:
 * transaction ids handed out in order as transactions (and their
 * subtransactions) first write; a commit inserts its record into the WAL
 * and only later leaves the proc array; a snapshot's xmin is the lowest id
 * still in the proc array, or the next id; the WAL insert position only
 * grows. Beside them runs outboxd: it confirms positions up to what was
 * inserted (the broker acknowledged every transaction committed below),
 * takes candidates in two steps that other transactions interleave with
 * (the snapshot, then the insert position) and stores the point in a
 * transaction of its own, when the rule says so.
 *
 * After every step the invariant is checked: every transaction with rows
 * that is not published (running, or committed at or past the confirmed
 * position) wrote them all with ids of the stored point or more. Random
 * histories of every mix of these steps, from fixed seeds, must keep it;
 * two broken variants of the protocol must break it (so the check can
 * fail): reading the insert position before the snapshot, and storing a
 * candidate before the stream confirmed its position.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/recpoint.h"
#include "rng.h"

/* --- the rule on its own ------------------------------------------------- */

static void
test_first_candidate_is_due_at_once(void **state)
{
	ob_recpoint rp;

	(void)state;
	ob_recpoint_init(&rp);
	assert_int_equal(ob_recpoint_next(&rp, 0, 0), OB_RECPOINT_CAPTURE);
}

static void
test_candidate_waits_for_its_position(void **state)
{
	ob_recpoint rp;

	(void)state;
	ob_recpoint_init(&rp);
	ob_recpoint_captured(&rp, 100, 5000, 0);
	assert_int_equal(ob_recpoint_next(&rp, 4999, 1), OB_RECPOINT_WAIT);
	assert_int_equal(ob_recpoint_next(&rp, 4999, 60000), OB_RECPOINT_WAIT);
	assert_int_equal(ob_recpoint_next(&rp, 5000, 60001), OB_RECPOINT_STORE);
	ob_recpoint_stored(&rp, 120, 60001);
	assert_int_equal(rp.stored_xid, 100);
	/* The next candidate an interval later. */
	assert_int_equal(ob_recpoint_next(&rp, 9000, 60002), OB_RECPOINT_WAIT);
	assert_int_equal(ob_recpoint_next(&rp, 9000, 60001 + OB_RECPOINT_INTERVAL_MS),
			 OB_RECPOINT_CAPTURE);
}

static void
test_idle_server_stores_nothing_more(void **state)
{
	ob_recpoint rp;
	int64_t t = 0;

	(void)state;
	ob_recpoint_init(&rp);
	ob_recpoint_captured(&rp, 100, 5000, t);
	assert_int_equal(ob_recpoint_next(&rp, 5000, t), OB_RECPOINT_STORE);
	/* Others' transactions 100 to 129 began before the update (130). */
	ob_recpoint_stored(&rp, 130, t);
	t += OB_RECPOINT_INTERVAL_MS;
	assert_int_equal(ob_recpoint_next(&rp, 6000, t), OB_RECPOINT_CAPTURE);
	ob_recpoint_captured(&rp, 131, 6000, t);
	/* The point would pass them: stored, by transaction 131. */
	assert_int_equal(ob_recpoint_next(&rp, 6000, t), OB_RECPOINT_STORE);
	ob_recpoint_stored(&rp, 131, t);
	/* Only that update has ended since: nothing more is stored. */
	t += OB_RECPOINT_INTERVAL_MS;
	assert_int_equal(ob_recpoint_next(&rp, 7000, t), OB_RECPOINT_CAPTURE);
	ob_recpoint_captured(&rp, 132, 7000, t);
	assert_int_equal(ob_recpoint_next(&rp, 7000, t), OB_RECPOINT_WAIT);
	assert_false(rp.have_cand);
	/* A candidate no further than the stored point is dropped too. */
	t += OB_RECPOINT_INTERVAL_MS;
	assert_int_equal(ob_recpoint_next(&rp, 7000, t), OB_RECPOINT_CAPTURE);
	ob_recpoint_captured(&rp, 120, 7000, t);
	assert_int_equal(ob_recpoint_next(&rp, 7000, t), OB_RECPOINT_WAIT);
	/* Another transaction began: the point moves. */
	t += OB_RECPOINT_INTERVAL_MS;
	ob_recpoint_captured(&rp, 134, 8000, t);
	assert_int_equal(ob_recpoint_next(&rp, 8000, t), OB_RECPOINT_STORE);
}

static void
test_failure_retries_an_interval_later(void **state)
{
	ob_recpoint rp;

	(void)state;
	ob_recpoint_init(&rp);
	ob_recpoint_captured(&rp, 100, 5000, 0);
	ob_recpoint_failed(&rp, 10);
	assert_false(rp.have_cand);
	assert_int_equal(ob_recpoint_next(&rp, 9000, 11), OB_RECPOINT_WAIT);
	assert_int_equal(ob_recpoint_next(&rp, 9000, 10 + OB_RECPOINT_INTERVAL_MS),
			 OB_RECPOINT_CAPTURE);
	assert_int_equal(rp.stored_xid, 0);
}

static void
test_backlog_where_selects_the_window(void **state)
{
	char where[128];

	(void)state;
	ob_recpoint_backlog_where(766, where, sizeof(where));
	assert_string_equal(where,
			    "(xmin::text::bigint - 766 + 4294967296) % 4294967296 < 2147483648");
	/* An xid8 past the first epoch: its low 32 bits, as xmin keeps them. */
	ob_recpoint_backlog_where((UINT64_C(3) << 32) + 5, where, sizeof(where));
	assert_string_equal(where,
			    "(xmin::text::bigint - 5 + 4294967296) % 4294967296 < 2147483648");
	assert_true(ob_recpoint_exact(766, 766));
	assert_true(ob_recpoint_exact(766, 766 + (UINT64_C(1) << 31) - 1));
	assert_false(ob_recpoint_exact(766, 766 + (UINT64_C(1) << 31)));
}

/* --- the model check ----------------------------------------------------- */

#define MAX_TXNS 64
#define STEPS    90
#define RUNS     20000

typedef enum { RUNNING, COMMITTED, ENDED, ABORTED } txn_state;

typedef struct txn {
	txn_state state;
	uint64_t top, sub; /* sub 0: none */
	uint64_t min_row;  /* the lowest id that wrote one of its rows (0: none) */
	uint64_t commit;   /* its commit record's position */
} txn;

typedef enum { CORRECT, LSN_FIRST, UNCONFIRMED } variant;

typedef struct model {
	txn t[MAX_TXNS];
	int n;
	uint64_t next_xid;
	uint64_t wal; /* the insert position */
	uint64_t confirmed;
	uint64_t durable; /* the point stored, as a recovery would read it */
	ob_recpoint rp;
	int64_t now;
	/* A candidate taken in two steps. */
	int capture_step; /* 0: none; 1: first half taken */
	uint64_t half;    /* the snapshot's xmin, or (LSN_FIRST) the position */
} model;

static uint64_t
snapshot_xmin(const model *m)
{
	uint64_t xmin = m->next_xid;

	for (int i = 0; i < m->n; i++) {
		if ((m->t[i].state == RUNNING || m->t[i].state == COMMITTED) && m->t[i].top < xmin)
			xmin = m->t[i].top;
	}
	return xmin;
}

/* An index of a transaction in state s, or -1. */
static int
pick(const model *m, txn_state s, uint64_t *rng)
{
	int start = m->n > 0 ? (int)test_below(rng, (uint64_t)m->n) : 0;

	for (int k = 0; k < m->n; k++) {
		int i = (start + k) % m->n;

		if (m->t[i].state == s)
			return i;
	}
	return -1;
}

/* outboxd's own transaction storing the candidate: one id, one commit. */
static void
store(model *m)
{
	uint64_t own = m->next_xid++;

	m->wal += 1 + (uint64_t)(m->wal % 3);
	m->durable = m->rp.cand_xid;
	ob_recpoint_stored(&m->rp, own, m->now);
}

/* The invariant; false (with what broke it printed when loud) when it
 * does not hold. */
static bool
holds(const model *m, uint64_t seed, int step, bool loud)
{
	for (int i = 0; i < m->n; i++) {
		const txn *x = &m->t[i];
		bool unpublished =
		    x->state == RUNNING ||
		    ((x->state == COMMITTED || x->state == ENDED) && x->commit >= m->confirmed);

		if (x->min_row == 0 || x->state == ABORTED || !unpublished ||
		    x->min_row >= m->durable)
			continue;
		if (loud)
			print_message(
			    "seed %llu step %d: txn %llu (row id %llu, commit %llu) is not "
			    "published (confirmed %llu) but below the point %llu\n",
			    (unsigned long long)seed, step, (unsigned long long)x->top,
			    (unsigned long long)x->min_row, (unsigned long long)x->commit,
			    (unsigned long long)m->confirmed, (unsigned long long)m->durable);
		return false;
	}
	return true;
}

static void
outboxd_step(model *m, variant v, uint64_t *rng)
{
	switch (test_below(rng, 3)) {
	case 0: /* the stream confirms up to some position already inserted */
		if (m->wal > m->confirmed)
			m->confirmed += test_below(rng, m->wal - m->confirmed + 1);
		return;
	case 1: /* half of a candidate, or the other half */
		if (m->rp.have_cand)
			return;
		if (m->capture_step == 0) {
			if (ob_recpoint_next(&m->rp, m->confirmed, m->now) != OB_RECPOINT_CAPTURE)
				return;
			m->half = v == LSN_FIRST ? m->wal : snapshot_xmin(m);
			m->capture_step = 1;
		} else {
			if (v == LSN_FIRST)
				ob_recpoint_captured(&m->rp, snapshot_xmin(m), m->half, m->now);
			else
				ob_recpoint_captured(&m->rp, m->half, m->wal, m->now);
			m->capture_step = 0;
		}
		return;
	default: /* the rule's verdict */
		if (v == UNCONFIRMED && m->rp.have_cand && m->rp.cand_xid > m->durable) {
			store(m);
			return;
		}
		if (ob_recpoint_next(&m->rp, m->confirmed, m->now) == OB_RECPOINT_STORE)
			store(m);
		return;
	}
}

static void
server_step(model *m, uint64_t *rng)
{
	int i;

	switch (test_below(rng, 6)) {
	case 0: /* a transaction writes its first row */
		if (m->n == MAX_TXNS)
			return;
		m->t[m->n] = (txn){.state = RUNNING, .top = m->next_xid};
		m->t[m->n].min_row = test_below(rng, 4) == 0 ? 0 : m->next_xid;
		m->next_xid++;
		m->n++;
		return;
	case 1: /* a subtransaction writes a row */
		if ((i = pick(m, RUNNING, rng)) < 0 || m->t[i].sub != 0)
			return;
		m->t[i].sub = m->next_xid++;
		if (m->t[i].min_row == 0)
			m->t[i].min_row = m->t[i].sub;
		return;
	case 2: /* a commit record is inserted */
		if ((i = pick(m, RUNNING, rng)) < 0)
			return;
		m->t[i].commit = m->wal;
		m->wal += 1 + test_below(rng, 3);
		m->t[i].state = COMMITTED;
		return;
	case 3: /* a committed transaction leaves the proc array */
		if ((i = pick(m, COMMITTED, rng)) >= 0)
			m->t[i].state = ENDED;
		return;
	case 4:
		if ((i = pick(m, RUNNING, rng)) >= 0 && test_below(rng, 4) == 0)
			m->t[i].state = ABORTED;
		return;
	default: /* other WAL */
		m->wal += test_below(rng, 3);
		return;
	}
}

/* Runs RUNS random histories of variant v; returns how many broke the
 * invariant (the first printed), and how many stored a point in *stored. */
static int
check_model(variant v, int *stored)
{
	int broken = 0;

	*stored = 0;
	for (uint64_t seed = 1; seed <= RUNS; seed++) {
		uint64_t rng = seed * UINT64_C(0x9e3779b97f4a7c15);
		model m = {.next_xid = 3, .wal = 100};

		ob_recpoint_init(&m.rp);
		for (int step = 0; step < STEPS; step++) {
			m.now += (int64_t)test_below(&rng, OB_RECPOINT_INTERVAL_MS);
			if (test_below(&rng, 2) == 0)
				server_step(&m, &rng);
			else
				outboxd_step(&m, v, &rng);
			if (!holds(&m, seed, step, broken == 0)) {
				broken++;
				break;
			}
		}
		*stored += m.durable != 0;
	}
	return broken;
}

static void
test_model_keeps_the_invariant(void **state)
{
	int stored;

	(void)state;
	assert_int_equal(check_model(CORRECT, &stored), 0);
	/* Not vacuous: most histories stored a point. */
	assert_true(stored > RUNS / 2);
}

static void
test_model_catches_the_position_read_first(void **state)
{
	int stored;

	(void)state;
	assert_true(check_model(LSN_FIRST, &stored) > 0);
}

static void
test_model_catches_an_unconfirmed_point(void **state)
{
	int stored;

	(void)state;
	assert_true(check_model(UNCONFIRMED, &stored) > 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_first_candidate_is_due_at_once),
	    cmocka_unit_test(test_candidate_waits_for_its_position),
	    cmocka_unit_test(test_idle_server_stores_nothing_more),
	    cmocka_unit_test(test_failure_retries_an_interval_later),
	    cmocka_unit_test(test_backlog_where_selects_the_window),
	    cmocka_unit_test(test_model_keeps_the_invariant),
	    cmocka_unit_test(test_model_catches_the_position_read_first),
	    cmocka_unit_test(test_model_catches_an_unconfirmed_point),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
