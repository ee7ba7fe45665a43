/*
 * test_replay.c: where a re-read stream resumes and which suspects are
 * produced alone (replay.h).
 *
 * Scenario tests are tables of steps run against one ob_replay; every
 * begin and next step states what it must return. The last test drives
 * thousands of random streams, broken at random points and read again
 * after reconnects and producer resets, and checks them against a model:
 * each producer's life hands every event over at most once and in stream
 * order, and when the stream ends every event is held by the producer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/replay.h"

typedef enum op {
	OP_BEGIN,   /* begin(lsn) must return want (1: read it, 0: skip it) */
	OP_NEXT,    /* next() must return action want at index idx */
	OP_HANDED,  /* handed() */
	OP_COMMIT,  /* commit() */
	OP_CUT,     /* cut() */
	OP_RESET,   /* reset(lsn) */
	OP_SUSPECT, /* suspect({lsn, idx}) */
	OP_SETTLED, /* settled({lsn, idx}) */
	OP_COUNT,   /* suspects() must return want */
	OP_END,
} op;

typedef struct step {
	op op;
	ob_lsn lsn;
	int want;
	uint64_t idx;
} step;

typedef struct scenario {
	const char *name;
	step steps[40];
	size_t suspects_left;
} scenario;

#define P OB_REPLAY_PUBLISH
#define S OB_REPLAY_SKIP
#define I OB_REPLAY_ISOLATE

/* next() that returns PUBLISH or ISOLATE, followed by handed(). */
#define HAND(action, idx)                                                                          \
	{OP_NEXT, 0, action, idx},                                                                 \
	{                                                                                          \
		OP_HANDED, 0, 0, 0                                                                 \
	}

static const scenario scenarios[] = {
    {"whole transactions are skipped after a reconnect",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_CUT, 0, 0, 0},
      /* reconnect from 0: both come again */
      {OP_BEGIN, 100, 0, 0},
      {OP_NEXT, 0, S, 0},
      {OP_NEXT, 0, S, 1},
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 0, 0},
      {OP_NEXT, 0, S, 0},
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 300, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"a transaction cut mid-way skips what it handed over",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      {OP_CUT, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      {OP_NEXT, 0, S, 0},
      {OP_NEXT, 0, S, 1},
      HAND(P, 2),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"a hand-over cut short is read again",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      {OP_NEXT, 0, P, 1},
      {OP_CUT, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      {OP_NEXT, 0, S, 0},
      HAND(P, 1),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"cut twice in one transaction, the second time while still skipping",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      HAND(P, 2),
      {OP_CUT, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      {OP_NEXT, 0, S, 0},
      {OP_CUT, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      {OP_NEXT, 0, S, 0},
      {OP_NEXT, 0, S, 1},
      {OP_NEXT, 0, S, 2},
      HAND(P, 3),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"a reset hands everything after confirmed over again",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(P, 0),
      {OP_CUT, 0, 0, 0},
      {OP_RESET, 100, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"a suspect is isolated where it is read again, once",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      HAND(P, 2),
      {OP_COMMIT, 0, 0, 0},
      {OP_SUSPECT, 100, 0, 1},
      {OP_SUSPECT, 100, 0, 1},
      {OP_COUNT, 0, 1, 0},
      {OP_RESET, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(I, 1),
      {OP_SETTLED, 100, 0, 1},
      {OP_COUNT, 0, 0, 0},
      {OP_CUT, 0, 0, 0},
      {OP_RESET, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      HAND(P, 2),
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"suspects in several transactions, reported out of order",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_SUSPECT, 200, 0, 0},
      {OP_SUSPECT, 100, 0, 1},
      {OP_SUSPECT, 100, 0, 0},
      {OP_RESET, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      HAND(I, 0),
      {OP_SETTLED, 100, 0, 0},
      HAND(I, 1),
      {OP_SETTLED, 100, 0, 1},
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(I, 0),
      {OP_SETTLED, 200, 0, 0},
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
    {"a suspect before the resumed position is dropped, a later one kept",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      HAND(P, 0),
      {OP_COMMIT, 0, 0, 0},
      {OP_SUSPECT, 100, 0, 0},
      {OP_SUSPECT, 200, 0, 0},
      {OP_RESET, 100, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      {OP_NEXT, 0, I, 0},
      {OP_CUT, 0, 0, 0},
      {OP_RESET, 100, 0, 0},
      {OP_BEGIN, 200, 1, 0},
      {OP_NEXT, 0, I, 0},
      {OP_END, 0, 0, 0}},
     1},
    {"a suspect cut before its hand-over stays a suspect across a reconnect",
     {{OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      HAND(P, 1),
      {OP_COMMIT, 0, 0, 0},
      {OP_SUSPECT, 100, 0, 1},
      {OP_RESET, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      HAND(P, 0),
      {OP_NEXT, 0, I, 1},
      {OP_CUT, 0, 0, 0},
      {OP_BEGIN, 100, 1, 0},
      {OP_NEXT, 0, S, 0},
      HAND(I, 1),
      {OP_SETTLED, 100, 0, 1},
      {OP_COMMIT, 0, 0, 0},
      {OP_END, 0, 0, 0}},
     0},
};

static void
run_scenario(const scenario *sc)
{
	ob_replay r;
	ob_event_pos pos;

	ob_replay_init(&r);
	for (size_t i = 0; sc->steps[i].op != OP_END; i++) {
		const step *st = &sc->steps[i];
		ob_replay_action action;
		bool read;

		switch (st->op) {
		case OP_BEGIN:
			read = ob_replay_begin(&r, st->lsn);
			if (read != (st->want != 0))
				fail_msg("%s, step %zu: begin(%llu) gave %d", sc->name, i,
					 (unsigned long long)st->lsn, read);
			break;
		case OP_NEXT:
			action = ob_replay_next(&r, &pos);
			if ((int)action != st->want || pos.index != st->idx)
				fail_msg("%s, step %zu: next gave action %d index %llu, want %d "
					 "index %llu",
					 sc->name, i, action, (unsigned long long)pos.index,
					 st->want, (unsigned long long)st->idx);
			break;
		case OP_HANDED:
			ob_replay_handed(&r);
			break;
		case OP_COMMIT:
			ob_replay_commit(&r);
			break;
		case OP_CUT:
			ob_replay_cut(&r);
			break;
		case OP_RESET:
			ob_replay_reset(&r, st->lsn);
			break;
		case OP_SUSPECT:
			ob_replay_suspect(&r, (ob_event_pos){st->lsn, st->idx});
			break;
		case OP_SETTLED:
			ob_replay_settled(&r, (ob_event_pos){st->lsn, st->idx});
			break;
		case OP_COUNT:
			if (ob_replay_suspects(&r) != (size_t)st->want)
				fail_msg("%s, step %zu: %zu suspects, want %d", sc->name, i,
					 ob_replay_suspects(&r), st->want);
			break;
		case OP_END:
			break;
		}
	}
	if (ob_replay_suspects(&r) != sc->suspects_left)
		fail_msg("%s: %zu suspects left, want %zu", sc->name, ob_replay_suspects(&r),
			 sc->suspects_left);
	ob_replay_free(&r);
}

static void
test_scenarios(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		run_scenario(&scenarios[i]);
}

/* Positions are compared by transaction first, then by index. */
static void
test_pos_order(void **state)
{
	(void)state;
	assert_true(ob_event_pos_cmp((ob_event_pos){100, 5}, (ob_event_pos){200, 0}) < 0);
	assert_true(ob_event_pos_cmp((ob_event_pos){200, 0}, (ob_event_pos){100, 5}) > 0);
	assert_true(ob_event_pos_cmp((ob_event_pos){100, 1}, (ob_event_pos){100, 2}) < 0);
	assert_int_equal(ob_event_pos_cmp((ob_event_pos){100, 1}, (ob_event_pos){100, 1}), 0);
}

/* --- the model check --------------------------------------------------- */

#define MAX_TXNS   12
#define MAX_EVENTS 4

/* A random stream: transaction t ends at (t + 1) * 16 and has events[t]
 * events (0 to MAX_EVENTS). */
typedef struct stream {
	size_t txns;
	int events[MAX_TXNS];
} stream;

/* The model of the producer: which positions it holds (handed over in its
 * life, or confirmed before it), and which are suspects. */
typedef struct model {
	bool held[MAX_TXNS][MAX_EVENTS];
	bool committed[MAX_TXNS]; /* every event handed over and the commit read */
	bool suspect[MAX_TXNS][MAX_EVENTS];
	ob_event_pos last; /* the last position handed over in this life */
	bool any;
} model;

static ob_lsn
txn_end(size_t t)
{
	return (ob_lsn)(t + 1) * 16;
}

/* The highest transaction end the slot may have confirmed: every event of
 * every transaction up to it is held and its commit was read. */
static ob_lsn
max_confirmable(const stream *s, const model *m, ob_lsn confirmed)
{
	ob_lsn best = confirmed;

	for (size_t t = 0; t < s->txns; t++) {
		if (txn_end(t) <= confirmed)
			continue;
		if (!m->committed[t])
			break;
		best = txn_end(t);
	}
	return best;
}

static unsigned
rnd(unsigned *seed, unsigned n)
{
	*seed = *seed * 1103515245u + 12345u;
	return (*seed >> 16) % n;
}

/* Read the stream from confirmed, breaking off at random (at most
 * *breaks_left more times); returns true when it was read to the end. */
static bool
read_stream(ob_replay *r, const stream *s, model *m, ob_lsn confirmed, unsigned *seed,
	    int *breaks_left, unsigned iter)
{
	for (size_t t = 0; t < s->txns; t++) {
		if (txn_end(t) <= confirmed)
			continue; /* the slot does not send it again */
		if (*breaks_left > 0 && rnd(seed, 8) == 0) {
			(*breaks_left)--;
			ob_replay_cut(r); /* between transactions */
			return false;
		}
		if (!ob_replay_begin(r, txn_end(t))) {
			for (int e = 0; e < s->events[t]; e++) {
				ob_event_pos pos;

				if (ob_replay_next(r, &pos) != OB_REPLAY_SKIP)
					fail_msg("iteration %u: a transaction skipped whole gave "
						 "an event to publish",
						 iter);
				if (!m->held[t][e])
					fail_msg("iteration %u: event %zu/%d skipped but never "
						 "handed over",
						 iter, t, e);
			}
			ob_replay_commit(r);
			continue;
		}
		for (int e = 0; e < s->events[t]; e++) {
			ob_event_pos pos;
			ob_replay_action action = ob_replay_next(r, &pos);

			if (pos.txn_end != txn_end(t) || pos.index != (uint64_t)e)
				fail_msg("iteration %u: event %zu/%d named %llu/%llu", iter, t, e,
					 (unsigned long long)pos.txn_end,
					 (unsigned long long)pos.index);
			if (action == OB_REPLAY_SKIP) {
				if (!m->held[t][e])
					fail_msg("iteration %u: event %zu/%d skipped but not held "
						 "(lost)",
						 iter, t, e);
				continue;
			}
			if ((action == OB_REPLAY_ISOLATE) != m->suspect[t][e])
				fail_msg("iteration %u: event %zu/%d isolate=%d, suspect=%d", iter,
					 t, e, action == OB_REPLAY_ISOLATE, m->suspect[t][e]);
			if (*breaks_left > 0 && rnd(seed, 6) == 0) {
				(*breaks_left)--;
				ob_replay_cut(r); /* before its hand-over completed */
				return false;
			}
			if (m->held[t][e])
				fail_msg("iteration %u: event %zu/%d handed over twice", iter, t,
					 e);
			if (m->any && ob_event_pos_cmp(m->last, pos) >= 0)
				fail_msg("iteration %u: event %zu/%d handed over out of order",
					 iter, t, e);
			ob_replay_handed(r);
			m->held[t][e] = true;
			m->last = pos;
			m->any = true;
			if (action == OB_REPLAY_ISOLATE) {
				ob_replay_settled(r, pos);
				m->suspect[t][e] = false;
			}
			if (*breaks_left > 0 && rnd(seed, 6) == 0) {
				(*breaks_left)--;
				ob_replay_cut(r); /* mid-transaction */
				return false;
			}
		}
		ob_replay_commit(r);
		m->committed[t] = true;
	}
	return true;
}

/* A reset: the producer's records after confirmed are dropped; some of
 * the ones it held become suspects (a batch was refused). */
static void
reset_model(ob_replay *r, const stream *s, model *m, ob_lsn confirmed, unsigned *seed)
{
	for (size_t t = 0; t < s->txns; t++) {
		if (txn_end(t) <= confirmed)
			continue;
		for (int e = 0; e < s->events[t]; e++) {
			if (m->held[t][e] && rnd(seed, 4) == 0) {
				ob_replay_suspect(r, (ob_event_pos){txn_end(t), (uint64_t)e});
				m->suspect[t][e] = true;
			}
			m->held[t][e] = false;
		}
		m->committed[t] = false;
	}
	m->any = false;
	ob_replay_reset(r, confirmed);
}

static void
test_model(void **state)
{
	unsigned seed = 12345;

	(void)state;
	for (unsigned iter = 0; iter < 20000; iter++) {
		stream s;
		model m;
		ob_replay r;
		ob_lsn confirmed = 0;
		int breaks_left = (int)rnd(&seed, 6);

		memset(&m, 0, sizeof(m));
		s.txns = 1 + rnd(&seed, MAX_TXNS);
		for (size_t t = 0; t < s.txns; t++)
			s.events[t] = (int)rnd(&seed, MAX_EVENTS + 1);
		ob_replay_init(&r);
		while (!read_stream(&r, &s, &m, confirmed, &seed, &breaks_left, iter)) {
			ob_lsn most = max_confirmable(&s, &m, confirmed);

			/* The slot confirmed somewhere between where it was and
			 * what the producer has acknowledged. */
			if (most > confirmed)
				confirmed +=
				    16 * rnd(&seed, (unsigned)((most - confirmed) / 16) + 1);
			if (rnd(&seed, 2) == 0)
				reset_model(&r, &s, &m, confirmed, &seed);
		}
		for (size_t t = 0; t < s.txns; t++) {
			for (int e = 0; e < s.events[t]; e++) {
				if (txn_end(t) > confirmed && !m.held[t][e])
					fail_msg("iteration %u: event %zu/%d never handed over",
						 iter, t, e);
				if (m.suspect[t][e])
					fail_msg("iteration %u: suspect %zu/%d never isolated",
						 iter, t, e);
			}
		}
		ob_replay_free(&r);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_scenarios),
	    cmocka_unit_test(test_pos_order),
	    cmocka_unit_test(test_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
