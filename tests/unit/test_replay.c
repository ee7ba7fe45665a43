/*
 * test_replay.c: where a re-read replication stream resumes, and which
 * suspect records are retried alone (replay.h).
 *
 * Scenario tests are tables of calls made the way relay.c makes them; every
 * begin and next states what it must answer. The last test re-reads random
 * streams from a confirmed position, broken at random points, and checks
 * every answer against a brute-force model: each event is handed over
 * exactly once and in order across reconnects, and again after a reset.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rng.h"

#include "outboxd/replay.h"

/* The position of the transaction whose commit record ends at end: the
 * tables and the model below name transactions by their commit ends, and
 * give each commit record one byte, so it starts at end - 1. */
static ob_pos
txn_at(ob_lsn end)
{
	return ob_pos_txn(end - 1);
}

typedef enum op {
	OP_BEGIN,    /* begin(lsn); want: what it returns */
	OP_NEXT,     /* next(); want: the action, index: the event's ordinal */
	OP_HANDED,   /* handed() */
	OP_COMMIT,   /* commit() */
	OP_CUT,      /* cut() */
	OP_RESET,    /* reset(lsn = confirmed) */
	OP_REWIND,   /* rewind(lsn) */
	OP_SUSPECT,  /* suspect({lsn, index}) */
	OP_SETTLED,  /* settled({lsn, index}) */
	OP_SUSPECTS, /* suspects() must be index */
	OP_END,
} op;

typedef struct step {
	op op;
	ob_lsn lsn;
	uint64_t index;
	int want;
} step;

typedef struct scenario {
	const char *name;
	step steps[64];
} scenario;

#define BEGIN(end, fresh)                                                                          \
	{                                                                                          \
		OP_BEGIN, end, 0, fresh                                                            \
	}
#define NEXT(action, i)                                                                            \
	{                                                                                          \
		OP_NEXT, 0, i, action                                                              \
	}
#define PUB(i)  NEXT(OB_REPLAY_PUBLISH, i)
#define SKIP(i) NEXT(OB_REPLAY_SKIP, i)
#define ISOL(i) NEXT(OB_REPLAY_ISOLATE, i)
#define HANDED                                                                                     \
	{                                                                                          \
		OP_HANDED, 0, 0, 0                                                                 \
	}
/* The usual hand-over: published, then queued. */
#define HAND(i) PUB(i), HANDED
#define COMMIT                                                                                     \
	{                                                                                          \
		OP_COMMIT, 0, 0, 0                                                                 \
	}
#define CUT                                                                                        \
	{                                                                                          \
		OP_CUT, 0, 0, 0                                                                    \
	}
#define RESET(confirmed)                                                                           \
	{                                                                                          \
		OP_RESET, confirmed, 0, 0                                                          \
	}
#define REWIND(lsn)                                                                                \
	{                                                                                          \
		OP_REWIND, lsn, 0, 0                                                               \
	}
#define SUSPECT(end, i)                                                                            \
	{                                                                                          \
		OP_SUSPECT, end, i, 0                                                              \
	}
#define SETTLED(end, i)                                                                            \
	{                                                                                          \
		OP_SETTLED, end, i, 0                                                              \
	}
#define SUSPECTS(n)                                                                                \
	{                                                                                          \
		OP_SUSPECTS, 0, n, 0                                                               \
	}
#define END                                                                                        \
	{                                                                                          \
		OP_END, 0, 0, 0                                                                    \
	}

/* One line per read of a transaction. After every CUT the slot is read
 * again from a confirmed position at or before the first transaction the
 * scenario begins next. */
/* clang-format off */
static const scenario scenarios[] = {
    {"reconnect after whole transactions", {
	BEGIN(0x100, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x180, 1), COMMIT, /* all its changes filtered out */
	BEGIN(0x200, 1), HAND(0), COMMIT,
	CUT, /* between transactions; nothing acknowledged yet */
	BEGIN(0x100, 0), SKIP(0), SKIP(1), COMMIT,
	BEGIN(0x180, 0), COMMIT,
	BEGIN(0x200, 0), SKIP(0), COMMIT,
	BEGIN(0x300, 1), HAND(0), COMMIT,
	CUT, /* 0x200 was confirmed meanwhile: the re-read starts past it */
	BEGIN(0x300, 0), SKIP(0), COMMIT,
	BEGIN(0x400, 1), HAND(0), COMMIT,
	END,
    }},
    {"transaction cut in the middle", {
	BEGIN(0x100, 1), HAND(0), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1),
	CUT,
	BEGIN(0x100, 0), SKIP(0), COMMIT,
	/* Not whole: its commit was never read. */
	BEGIN(0x200, 1), SKIP(0), SKIP(1), HAND(2), HAND(3), COMMIT,
	BEGIN(0x300, 1), HAND(0),
	CUT,
	BEGIN(0x200, 0), SKIP(0), SKIP(1), SKIP(2), SKIP(3), COMMIT,
	BEGIN(0x300, 1), SKIP(0), HAND(1), COMMIT,
	END,
    }},
    {"cut after the last event, before the commit", {
	BEGIN(0x100, 1), HAND(0), HAND(1),
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), COMMIT,
	CUT,
	BEGIN(0x100, 0), SKIP(0), SKIP(1), COMMIT,
	BEGIN(0x200, 1), HAND(0), COMMIT,
	END,
    }},
    {"cut before the first event", {
	BEGIN(0x100, 1),
	CUT,
	BEGIN(0x100, 1), HAND(0), COMMIT,
	END,
    }},
    {"cut twice in the same transaction", {
	BEGIN(0x100, 1), HAND(0),
	CUT,
	BEGIN(0x100, 1), SKIP(0), HAND(1), HAND(2),
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), SKIP(2), HAND(3), COMMIT,
	CUT,
	BEGIN(0x100, 0), SKIP(0), SKIP(1), SKIP(2), SKIP(3), COMMIT,
	END,
    }},
    /* The second read breaks before it skipped all it had to: the next
     * must still skip everything the first handed over. */
    {"cut again while still skipping", {
	BEGIN(0x100, 1), HAND(0), HAND(1), HAND(2),
	CUT,
	BEGIN(0x100, 1), SKIP(0),
	CUT,
	BEGIN(0x100, 1), /* not even the first event this time */
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), SKIP(2), HAND(3),
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), SKIP(2), SKIP(3), HAND(4), COMMIT,
	END,
    }},
    /* 0x200 was cut off; the re-read breaks again while still skipping
     * 0x100, handed over whole. That cut must not replace 0x200's. */
    {"cut inside a transaction handed over whole", {
	BEGIN(0x100, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1),
	CUT,
	BEGIN(0x100, 0), SKIP(0),
	CUT,
	BEGIN(0x100, 0), SKIP(0), SKIP(1), COMMIT,
	BEGIN(0x200, 1), SKIP(0), SKIP(1), HAND(2), COMMIT,
	END,
    }},
    /* next() without handed(): the queue was full, then the stream broke.
     * The event was not handed over, so it is read again. */
    {"hand-over cut short", {
	BEGIN(0x100, 1), HAND(0), PUB(1),
	CUT,
	BEGIN(0x100, 1), SKIP(0), PUB(1), HANDED, PUB(2),
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), HAND(2), COMMIT,
	END,
    }},
    /* The producer was recreated with 0x100 acknowledged: everything after
     * it, whole or cut off, is handed over again. */
    {"reset after the producer was recreated", {
	BEGIN(0x100, 1), HAND(0), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x300, 1), HAND(0), HAND(1),
	CUT,
	RESET(0x100),
	/* Should the server send the confirmed transaction again. */
	BEGIN(0x100, 0), SKIP(0), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x300, 1), HAND(0), HAND(1), HAND(2),
	CUT, /* a plain reconnect skips again */
	BEGIN(0x200, 0), SKIP(0), SKIP(1), COMMIT,
	BEGIN(0x300, 1), SKIP(0), SKIP(1), SKIP(2), HAND(3), COMMIT,
	END,
    }},
    /* An idle slot is confirmed past its last transaction. */
    {"reset to a keepalive position", {
	BEGIN(0x100, 1), HAND(0), COMMIT,
	CUT,
	RESET(0x180),
	BEGIN(0x200, 1), HAND(0), COMMIT,
	END,
    }},
    {"reset with a transaction open", {
	BEGIN(0x100, 1), HAND(0), HAND(1),
	RESET(0x80),
	CUT, /* nothing open any more: changes nothing */
	BEGIN(0x100, 1), HAND(0), HAND(1), COMMIT,
	END,
    }},
    {"suspect isolated at its position", {
	BEGIN(0x100, 1), HAND(0), HAND(1), HAND(2), COMMIT,
	BEGIN(0x200, 1), HAND(0), COMMIT,
	CUT,
	SUSPECT(0x100, 1), SUSPECTS(1),
	RESET(0x80), SUSPECTS(1),
	BEGIN(0x100, 1), HAND(0), ISOL(1), HANDED, SETTLED(0x100, 1), SUSPECTS(0),
	    HAND(2), COMMIT,
	BEGIN(0x200, 1), HAND(0), COMMIT,
	/* Settled: another reset hands it over with the others. */
	CUT,
	RESET(0x80),
	BEGIN(0x100, 1), HAND(0), HAND(1), HAND(2), COMMIT,
	END,
    }},
    /* Reported out of order, one twice. */
    {"suspects in several transactions", {
	BEGIN(0x100, 1), HAND(0), HAND(1), HAND(2), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x300, 1), HAND(0), COMMIT,
	CUT,
	SUSPECT(0x300, 0), SUSPECT(0x100, 2), SUSPECT(0x200, 1), SUSPECT(0x100, 0),
	SUSPECT(0x200, 1), SUSPECTS(4),
	RESET(0x80),
	BEGIN(0x100, 1), ISOL(0), HANDED, SETTLED(0x100, 0), HAND(1),
	    ISOL(2), HANDED, SETTLED(0x100, 2), COMMIT,
	SUSPECTS(2),
	BEGIN(0x200, 1), HAND(0), ISOL(1), HANDED, SETTLED(0x200, 1), COMMIT,
	BEGIN(0x300, 1), ISOL(0), HANDED, SETTLED(0x300, 0), COMMIT,
	SUSPECTS(0),
	END,
    }},
    /* The isolated record was not queued before the stream broke: it is
     * isolated again. Queued but never settled (its report went with the
     * producer): after the reset it is isolated again too. */
    {"isolated hand-over cut short", {
	BEGIN(0x100, 1), HAND(0), HAND(1), COMMIT,
	CUT,
	SUSPECT(0x100, 1),
	RESET(0x80),
	BEGIN(0x100, 1), HAND(0), ISOL(1),
	CUT,
	BEGIN(0x100, 1), SKIP(0), ISOL(1), HANDED,
	CUT,
	RESET(0x80), SUSPECTS(1),
	BEGIN(0x100, 1), HAND(0), ISOL(1), HANDED, SETTLED(0x100, 1), COMMIT,
	SUSPECTS(0),
	END,
    }},
    /* Queued alone but not settled, then a plain reconnect: the re-read
     * skips it (it is in flight), and forgets it once past it. Should it
     * be refused, its report makes it a suspect again. */
    {"suspect passed by a reconnect", {
	BEGIN(0x100, 1), HAND(0), HAND(1), HAND(2), COMMIT,
	CUT,
	SUSPECT(0x100, 1),
	RESET(0x80),
	BEGIN(0x100, 1), HAND(0), ISOL(1), HANDED,
	CUT,
	BEGIN(0x100, 1), SKIP(0), SKIP(1), SUSPECTS(1), HAND(2), SUSPECTS(0), COMMIT,
	END,
    }},
    /* A new partition was found with 0x100 confirmed and the stream read
     * up to 0x300 (0x300 cut off): 0x200 ends before the rewind point and
     * is still skipped; 0x300 and 0x400 are handed over again, whole,
     * since they may now hold more events. */
    {"rewind for a new partition", {
	BEGIN(0x100, 1), HAND(0), COMMIT,
	BEGIN(0x200, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x280, 1), HAND(0), COMMIT,
	BEGIN(0x300, 1), HAND(0), HAND(1),
	CUT,
	REWIND(0x250),
	BEGIN(0x200, 0), SKIP(0), SKIP(1), COMMIT,
	BEGIN(0x280, 1), HAND(0), HAND(1), COMMIT,
	BEGIN(0x300, 1), HAND(0), HAND(1), HAND(2), COMMIT,
	END,
    }},
    /* Rewinding to a point past everything handed over changes nothing:
     * the cut-off transaction ends before it and still skips its first
     * events. */
    {"rewind past what was handed over", {
	BEGIN(0x100, 1), HAND(0), COMMIT,
	BEGIN(0x200, 1), HAND(0),
	CUT,
	REWIND(0x300),
	BEGIN(0x100, 0), SKIP(0), COMMIT,
	BEGIN(0x200, 1), SKIP(0), HAND(1), COMMIT,
	END,
    }},
    {"rewind keeps suspects", {
	BEGIN(0x100, 1), HAND(0), HAND(1), COMMIT,
	CUT,
	SUSPECT(0x100, 1),
	REWIND(0x80), SUSPECTS(1),
	BEGIN(0x100, 1), HAND(0), ISOL(1), HANDED, SETTLED(0x100, 1), COMMIT,
	END,
    }},
    {"settling what is no suspect changes nothing", {
	SUSPECT(0x100, 1),
	SETTLED(0x100, 2), SETTLED(0x200, 1), SETTLED(0x80, 1), SUSPECTS(1),
	SETTLED(0x100, 1), SUSPECTS(0),
	SETTLED(0x100, 1), SUSPECTS(0),
	END,
    }},
};
/* clang-format on */

static const char *
action_name(int a)
{
	switch (a) {
	case OB_REPLAY_PUBLISH:
		return "publish";
	case OB_REPLAY_SKIP:
		return "skip";
	case OB_REPLAY_ISOLATE:
		return "isolate";
	default:
		return "?";
	}
}

static void
run_scenario(const scenario *sc)
{
	ob_replay r;
	ob_pos txn = 0;
	bool fresh = false; /* what the last begin() said */

	ob_replay_init(&r);
	assert_int_equal(ob_replay_suspects(&r), 0);
	for (size_t i = 0; sc->steps[i].op != OP_END; i++) {
		const step *s = &sc->steps[i];
		ob_event_pos pos = {0, 0};
		ob_replay_action a;

		switch (s->op) {
		case OP_BEGIN:
			txn = txn_at(s->lsn);
			fresh = ob_replay_begin(&r, txn);
			if (fresh != (s->want != 0))
				fail_msg("%s, step %zu: begin(%llX) says %s", sc->name, i,
					 (unsigned long long)s->lsn,
					 fresh ? "fresh" : "handed over whole");
			break;
		case OP_NEXT:
			a = ob_replay_next(&r, &pos);
			if ((int)a != s->want || pos.unit != txn || pos.index != s->index)
				fail_msg("%s, step %zu: next() says %s at %llX#%llu, expected %s "
					 "at %llX#%llu",
					 sc->name, i, action_name((int)a),
					 (unsigned long long)pos.unit,
					 (unsigned long long)pos.index, action_name(s->want),
					 (unsigned long long)txn, (unsigned long long)s->index);
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
			ob_replay_reset(&r, s->lsn);
			break;
		case OP_REWIND:
			ob_replay_rewind(&r, s->lsn);
			break;
		case OP_SUSPECT:
			ob_replay_suspect(&r, (ob_event_pos){txn_at(s->lsn), s->index});
			break;
		case OP_SETTLED:
			ob_replay_settled(&r, (ob_event_pos){txn_at(s->lsn), s->index});
			break;
		case OP_SUSPECTS:
			if (ob_replay_suspects(&r) != s->index)
				fail_msg("%s, step %zu: %zu suspects, expected %llu", sc->name, i,
					 ob_replay_suspects(&r), (unsigned long long)s->index);
			break;
		case OP_END:
			break;
		}
		/* relay.c reads the open transaction from the struct. */
		if (s->op == OP_BEGIN || s->op == OP_NEXT || s->op == OP_HANDED) {
			assert_true(r.in_txn);
			assert_int_equal(r.unit, txn);
			assert_int_equal(r.skip_txn, !fresh);
		} else if (s->op == OP_COMMIT || s->op == OP_CUT || s->op == OP_RESET ||
			   s->op == OP_REWIND) {
			assert_false(r.in_txn);
		}
	}
	ob_replay_free(&r);
}

static void
test_scenarios(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(scenarios); i++) {
		print_message("scenario: %s\n", scenarios[i].name);
		run_scenario(&scenarios[i]);
	}
}

static void
test_pos_cmp(void **state)
{
	static const struct {
		ob_event_pos a, b;
		int want;
	} cases[] = {
	    {{0x100, 0}, {0x100, 0}, 0},
	    {{0x100, 0}, {0x100, 1}, -1},
	    {{0x100, 7}, {0x100, 1}, 1},
	    {{0x100, 99}, {0x200, 0}, -1}, /* the transaction comes first */
	    {{0x200, 0}, {0x100, 99}, 1},
	    {{UINT64_MAX, 0}, {0, UINT64_MAX}, 1}, /* no overflow in the difference */
	    {{0, UINT64_MAX}, {0, 0}, 1},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		int got = ob_event_pos_cmp(cases[i].a, cases[i].b);

		if ((got > 0) - (got < 0) != cases[i].want)
			fail_msg("case %zu: %d, expected the sign of %d", i, got, cases[i].want);
	}
}

/* More suspects than the first allocation holds, reported in a scrambled
 * order with repeats, are isolated in stream order. */
static void
test_many_suspects(void **state)
{
	enum { TXNS = 40, EVENTS = 5 };
	ob_replay r;

	(void)state;
	ob_replay_init(&r);
	for (uint64_t k = 0; k < 2 * TXNS * EVENTS; k++) {
		uint64_t n = (k * 37) % (TXNS * EVENTS); /* 37 is prime to 200 */

		if (n % 2 == 0) /* every other event is a suspect */
			ob_replay_suspect(&r,
					  (ob_event_pos){0x1000 + 0x10 * (n / EVENTS), n % EVENTS});
	}
	assert_int_equal(ob_replay_suspects(&r), TXNS * EVENTS / 2);
	ob_replay_reset(&r, 0x400); /* ob_pos_bound(0x400) is 0x800 */
	for (uint64_t t = 0; t < TXNS; t++) {
		assert_true(ob_replay_begin(&r, 0x1000 + 0x10 * t));
		for (uint64_t e = 0; e < EVENTS; e++) {
			ob_event_pos pos;
			uint64_t n = t * EVENTS + e;
			ob_replay_action a = ob_replay_next(&r, &pos);

			assert_int_equal(a, n % 2 == 0 ? OB_REPLAY_ISOLATE : OB_REPLAY_PUBLISH);
			assert_int_equal(pos.unit, 0x1000 + 0x10 * t);
			assert_int_equal(pos.index, e);
			ob_replay_handed(&r);
			if (a == OB_REPLAY_ISOLATE)
				ob_replay_settled(&r, pos);
		}
		ob_replay_commit(&r);
	}
	assert_int_equal(ob_replay_suspects(&r), 0);
	ob_replay_free(&r);
}

/* --- re-reading random streams against a brute-force model -------------- */

enum { MAX_TXNS = 10, MAX_EVENTS = 4, MAX_FLAT = MAX_TXNS * MAX_EVENTS };

/* Where a connection broke. */
typedef enum brk {
	BRK_BEFORE_BEGIN,  /* between transactions */
	BRK_BEFORE_NEXT,   /* mid-transaction, the last event handed over */
	BRK_NOT_HANDED,    /* next() said publish, handed() never came */
	BRK_NOT_SETTLED,   /* isolated and queued, but not settled */
	BRK_BEFORE_COMMIT, /* every event handed over, commit not read */
	BRK_KINDS,
} brk;

typedef struct model {
	/* The stream: transaction t ends at end[t], its events are the flat
	 * ordinals first[t] .. first[t] + events[t] - 1. */
	size_t n_txns;
	ob_lsn end[MAX_TXNS];
	uint64_t events[MAX_TXNS];
	size_t first[MAX_TXNS + 1];

	ob_lsn confirmed;    /* the slot is re-read from here */
	size_t committed;    /* transactions committed to this producer */
	size_t next;         /* the one event this producer may take next */
	int times[MAX_FLAT]; /* times each event was handed to this producer */
	bool suspect[MAX_FLAT];
	size_t n_suspects;

	uint64_t rng;
	int breaks_left;
	uint64_t breaks[BRK_KINDS];
	uint64_t resets, isolated;
} model;

/* Does the connection break at this point? */
static bool
breaks(model *m, brk kind)
{
	if (m->breaks_left == 0 || test_below(&m->rng, 5) != 0)
		return false;
	m->breaks_left--;
	m->breaks[kind]++;
	return true;
}

static void
new_stream(model *m)
{
	ob_lsn lsn = 0x1000 + test_below(&m->rng, 0x100);

	memset(m->times, 0, sizeof(m->times));
	memset(m->suspect, 0, sizeof(m->suspect));
	m->n_suspects = 0;
	m->n_txns = 1 + (size_t)test_below(&m->rng, MAX_TXNS);
	m->first[0] = 0;
	for (size_t t = 0; t < m->n_txns; t++) {
		lsn += 2 + test_below(&m->rng, 0x40); /* room for a keepalive between two */
		m->end[t] = lsn;
		m->events[t] = test_below(&m->rng, MAX_EVENTS + 1);
		m->first[t + 1] = m->first[t] + m->events[t];
	}
	m->confirmed = m->end[0] - 1 - test_below(&m->rng, 0x100);
	m->committed = 0;
	m->next = 0;
	m->breaks_left = (int)test_below(&m->rng, 12);
}

/* Transactions at or before lsn. */
static size_t
txns_upto(const model *m, ob_lsn lsn)
{
	size_t t = 0;

	while (t < m->n_txns && m->end[t] <= lsn)
		t++;
	return t;
}

/* What the acknowledgements confirmed meanwhile: no further than the last
 * transaction committed to this producer, or an idle position short of the
 * next transaction's end. */
static void
advance_confirmed(model *m)
{
	size_t t = txns_upto(m, m->confirmed);
	ob_lsn c;

	t += (size_t)test_below(&m->rng, m->committed - t + 1);
	if (t == 0)
		return;
	c = m->end[t - 1];
	if (test_below(&m->rng, 3) == 0)
		c += test_below(&m->rng, (t < m->n_txns ? m->end[t] : c + 0x10) - c);
	if (c > m->confirmed)
		m->confirmed = c;
}

/* The producer is recreated; records of this one still past the new
 * confirmed position were refused with their batch, some of them. */
static void
reproduce(model *m, ob_replay *r)
{
	size_t from;

	advance_confirmed(m);
	from = m->first[txns_upto(m, m->confirmed)];
	for (size_t f = from; f < m->next; f++) {
		size_t t = 0;

		if (test_below(&m->rng, 4) != 0)
			continue;
		while (m->first[t + 1] <= f)
			t++;
		ob_replay_suspect(r, (ob_event_pos){txn_at(m->end[t]), f - m->first[t]});
		if (test_below(&m->rng, 4) == 0) /* another batch reported it too */
			ob_replay_suspect(r, (ob_event_pos){txn_at(m->end[t]), f - m->first[t]});
		if (!m->suspect[f]) {
			m->suspect[f] = true;
			m->n_suspects++;
		}
	}
	ob_replay_reset(r, m->confirmed);
	m->committed = txns_upto(m, m->confirmed);
	m->next = m->first[m->committed];
	for (size_t f = m->next; f < MAX_FLAT; f++)
		m->times[f] = 0;
	m->resets++;
}

/* One event read from the stream; false when the connection broke. */
static bool
read_event(model *m, ob_replay *r, size_t t, size_t f, uint64_t iter)
{
	ob_replay_action want, got;
	ob_event_pos pos;

	if (breaks(m, BRK_BEFORE_NEXT))
		return false;
	if (f < m->next)
		want = OB_REPLAY_SKIP;
	else if (m->suspect[f])
		want = OB_REPLAY_ISOLATE;
	else
		want = OB_REPLAY_PUBLISH;
	got = ob_replay_next(r, &pos);
	if (got != want || pos.unit != txn_at(m->end[t]) || pos.index != f - m->first[t])
		fail_msg("iteration %llu: next() says %s at %llX#%llu, the model %s at "
			 "%llX#%llu",
			 (unsigned long long)iter, action_name((int)got),
			 (unsigned long long)pos.unit, (unsigned long long)pos.index,
			 action_name((int)want), (unsigned long long)m->end[t],
			 (unsigned long long)(f - m->first[t]));
	if (got == OB_REPLAY_SKIP)
		return true;
	/* Reading on past a suspect forgets it: only one handed over, not
	 * settled and not refused again, can be passed. */
	for (size_t g = 0; g < f; g++) {
		if (m->suspect[g]) {
			m->suspect[g] = false;
			m->n_suspects--;
		}
	}
	if (breaks(m, BRK_NOT_HANDED))
		return false;
	assert_int_equal(f, m->next); /* in order, none lost */
	ob_replay_handed(r);
	m->next++;
	if (++m->times[f] != 1)
		fail_msg("iteration %llu: event %zu handed over %d times", (unsigned long long)iter,
			 f, m->times[f]);
	if (got == OB_REPLAY_ISOLATE) {
		m->isolated++;
		if (breaks(m, BRK_NOT_SETTLED))
			return false;
		ob_replay_settled(r, pos);
		m->suspect[f] = false;
		m->n_suspects--;
	}
	assert_int_equal(ob_replay_suspects(r), m->n_suspects);
	return true;
}

/* One connection: read from the confirmed position until the end of the
 * stream (true) or a break. */
static bool
read_stream(model *m, ob_replay *r, uint64_t iter)
{
	size_t t = txns_upto(m, m->confirmed);

	/* The transaction ending at the confirmed position is not sent again;
	 * should it be, it was handed over. */
	if (t > 0 && m->end[t - 1] == m->confirmed && test_below(&m->rng, 2) == 0)
		t--;
	for (; t < m->n_txns; t++) {
		bool fresh;

		if (breaks(m, BRK_BEFORE_BEGIN))
			return false;
		fresh = ob_replay_begin(r, txn_at(m->end[t]));
		if (fresh != (t >= m->committed))
			fail_msg("iteration %llu: begin(%llX) says %s, %zu of %zu committed",
				 (unsigned long long)iter, (unsigned long long)m->end[t],
				 fresh ? "fresh" : "handed over whole", m->committed, m->n_txns);
		for (size_t f = m->first[t]; f < m->first[t + 1]; f++) {
			if (!read_event(m, r, t, f, iter))
				return false;
		}
		if (breaks(m, BRK_BEFORE_COMMIT))
			return false;
		ob_replay_commit(r);
		assert_false(r->in_txn);
		if (fresh) {
			assert_int_equal(t, m->committed);
			m->committed++;
		}
	}
	return true;
}

static void
test_rereads_against_model(void **state)
{
	enum { ITERATIONS = 50000 };
	model m;
	uint64_t events = 0;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.rng = 20240611;
	for (uint64_t iter = 0; iter < ITERATIONS; iter++) {
		ob_replay r;

		ob_replay_init(&r);
		new_stream(&m);
		while (!read_stream(&m, &r, iter)) {
			ob_replay_cut(&r);
			assert_false(r.in_txn);
			if (test_below(&m.rng, 3) == 0)
				reproduce(&m, &r);
			else
				advance_confirmed(&m);
		}
		/* The last connection read to the end: everything was handed
		 * over to the last producer, each event once. */
		assert_int_equal(m.committed, m.n_txns);
		assert_int_equal(m.next, m.first[m.n_txns]);
		for (size_t f = 0; f < m.next; f++) {
			if (m.times[f] != 1)
				fail_msg("iteration %llu: event %zu handed over %d times",
					 (unsigned long long)iter, f, m.times[f]);
		}
		assert_int_equal(ob_replay_suspects(&r), m.n_suspects);
		events += m.next;
		ob_replay_free(&r);
	}
	/* Every kind of break happened, and often. */
	for (int k = 0; k < BRK_KINDS; k++) {
		if (m.breaks[k] < 1000)
			fail_msg("break kind %d happened %llu times only", k,
				 (unsigned long long)m.breaks[k]);
	}
	assert_true(m.resets > 1000);
	assert_true(m.isolated > 1000);
	print_message("%llu events, %llu resets, %llu isolated; breaks: %llu %llu %llu %llu %llu\n",
		      (unsigned long long)events, (unsigned long long)m.resets,
		      (unsigned long long)m.isolated, (unsigned long long)m.breaks[0],
		      (unsigned long long)m.breaks[1], (unsigned long long)m.breaks[2],
		      (unsigned long long)m.breaks[3], (unsigned long long)m.breaks[4]);
}

/* The backlog published again from a newer snapshot: its suspects move to
 * the new consistent point, after an earlier transaction's suspect, and
 * are isolated where the new read reaches them. */
static void
test_rebase(void **state)
{
	ob_replay r;
	ob_event_pos pos;

	(void)state;
	ob_replay_init(&r);
	ob_replay_suspect(&r, (ob_event_pos){100, 2});
	ob_replay_suspect(&r, (ob_event_pos){100, 0});
	ob_replay_suspect(&r, (ob_event_pos){50, 1});
	ob_replay_suspect(&r, (ob_event_pos){200, 0});
	ob_replay_rebase(&r, 100, 300);
	ob_replay_rebase(&r, 999, 1000); /* no suspects there: nothing moves */
	assert_int_equal(ob_replay_suspects(&r), 4);
	assert_int_equal(r.suspects[0].unit, 50);
	assert_int_equal(r.suspects[1].unit, 200);
	assert_int_equal(r.suspects[2].unit, 300);
	assert_int_equal(r.suspects[2].index, 0);
	assert_int_equal(r.suspects[3].unit, 300);
	assert_int_equal(r.suspects[3].index, 2);
	ob_replay_settled(&r, (ob_event_pos){50, 1});
	ob_replay_settled(&r, (ob_event_pos){200, 0});
	assert_true(ob_replay_begin(&r, 300));
	assert_int_equal(ob_replay_next(&r, &pos), OB_REPLAY_ISOLATE);
	ob_replay_handed(&r);
	assert_int_equal(ob_replay_next(&r, &pos), OB_REPLAY_PUBLISH);
	ob_replay_handed(&r);
	assert_int_equal(ob_replay_next(&r, &pos), OB_REPLAY_ISOLATE);
	assert_int_equal(pos.index, 2);
	ob_replay_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_scenarios),
	    cmocka_unit_test(test_pos_cmp),
	    cmocka_unit_test(test_many_suspects),
	    cmocka_unit_test(test_rebase),
	    cmocka_unit_test(test_rereads_against_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
