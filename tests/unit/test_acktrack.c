/*
 * test_acktrack.c: the in-flight transaction FIFO and the confirmable LSN
 * (acktrack.h; deploy/README.md, "Delivery guarantees" "No loss" and "Idle slots advance").
 *
 * Scenario tests are tables of steps run against one tracker; every step
 * states the confirmable LSN and the in-flight count expected after it. The
 * last test drives thousands of transactions in random ack order and checks
 * every step against a brute-force model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rng.h"

#include "outboxd/acktrack.h"

typedef enum op {
	OP_BEGIN,     /* begin(arg = end LSN); the txn gets the next index */
	OP_ADD,       /* add one event to txn index */
	OP_COMMIT,    /* commit txn index */
	OP_ABORT,     /* abort txn index */
	OP_ACK,       /* ack one event of txn index */
	OP_KEEPALIVE, /* keepalive(arg) */
	OP_RESET,     /* reset() */
	OP_REWIND,    /* rewind(arg) */
	OP_END,
} op;

typedef struct step {
	op op;
	int txn;     /* index of the transaction, in begin order */
	ob_lsn arg;  /* end LSN for OP_BEGIN, WAL end for OP_KEEPALIVE */
	ob_lsn conf; /* confirmable expected after the step */
	uint64_t inflight;
} step;

typedef struct scenario {
	const char *name;
	ob_lsn start;
	step steps[40];
} scenario;

#define BEGIN(i, end, c, n)                                                                        \
	{                                                                                          \
		OP_BEGIN, i, end, c, n                                                             \
	}
#define ADD(i, c, n)                                                                               \
	{                                                                                          \
		OP_ADD, i, 0, c, n                                                                 \
	}
#define COMMIT(i, c, n)                                                                            \
	{                                                                                          \
		OP_COMMIT, i, 0, c, n                                                              \
	}
#define ABORT(i, c, n)                                                                             \
	{                                                                                          \
		OP_ABORT, i, 0, c, n                                                               \
	}
#define ACK(i, c, n)                                                                               \
	{                                                                                          \
		OP_ACK, i, 0, c, n                                                                 \
	}
#define KEEPALIVE(l, c, n)                                                                         \
	{                                                                                          \
		OP_KEEPALIVE, -1, l, c, n                                                          \
	}
#define RESET(c)                                                                                   \
	{                                                                                          \
		OP_RESET, -1, 0, c, 0                                                              \
	}
#define REWIND(l, c, n)                                                                            \
	{                                                                                          \
		OP_REWIND, -1, l, c, n                                                             \
	}
#define END                                                                                        \
	{                                                                                          \
		OP_END, -1, 0, 0, 0                                                                \
	}

/* The LSN transaction seq was opened with: the LSN it confirms when, as
 * with wal2json, that is already its commit end. */
static ob_lsn
end_of(ob_acktrack *t, uint64_t seq)
{
	ob_lsn lsn = 0;
	int64_t us;

	assert_true(ob_acktrack_txn_info(t, seq, &lsn, &us));
	return lsn;
}

static const scenario scenarios[] = {
    {"in-order acks",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 ADD(0, 0x100, 2),
	 COMMIT(0, 0x100, 2),
	 ACK(0, 0x100, 1),
	 ACK(0, 0x200, 0),
	 BEGIN(1, 0x300, 0x200, 0),
	 ADD(1, 0x200, 1),
	 COMMIT(1, 0x200, 1),
	 ACK(1, 0x300, 0),
	 END,
     }},
    /* txn 2 is acked before txn 1 (another partition answered first). */
    {"out-of-order across partitions",
     0x50,
     {
	 BEGIN(0, 0x100, 0x50, 0),
	 ADD(0, 0x50, 1),
	 COMMIT(0, 0x50, 1),
	 BEGIN(1, 0x200, 0x50, 1),
	 ADD(1, 0x50, 2),
	 ADD(1, 0x50, 3),
	 COMMIT(1, 0x50, 3),
	 BEGIN(2, 0x300, 0x50, 3),
	 ADD(2, 0x50, 4),
	 COMMIT(2, 0x50, 4),
	 ACK(0, 0x100, 3),
	 ACK(2, 0x100, 2),
	 ACK(1, 0x100, 1),
	 ACK(1, 0x300, 0),
	 END,
     }},
    /* B and C of a transaction whose changes were all filtered out. */
    {"empty transactions",
     0x10,
     {
	 BEGIN(0, 0x20, 0x10, 0),
	 COMMIT(0, 0x20, 0),
	 BEGIN(1, 0x30, 0x20, 0),
	 ADD(1, 0x20, 1),
	 COMMIT(1, 0x20, 1),
	 BEGIN(2, 0x40, 0x20, 1),
	 COMMIT(2, 0x20, 1), /* empty, but behind txn 1 */
	 BEGIN(3, 0x50, 0x20, 1),
	 COMMIT(3, 0x20, 1),
	 ACK(1, 0x50, 0),
	 END,
     }},
    /* Events acknowledged before their transaction's C record. */
    {"acked while open",
     0,
     {
	 BEGIN(0, 0x100, 0, 0),
	 ADD(0, 0, 1),
	 ACK(0, 0, 0),
	 ADD(0, 0, 1),
	 ACK(0, 0, 0),
	 COMMIT(0, 0x100, 0),
	 END,
     }},
    /* Replayed transactions below the confirmed position change nothing. */
    {"never decreases",
     0x500,
     {
	 BEGIN(0, 0x300, 0x500, 0),
	 ADD(0, 0x500, 1),
	 COMMIT(0, 0x500, 1),
	 ACK(0, 0x500, 0),
	 KEEPALIVE(0x400, 0x500, 0),
	 BEGIN(1, 0x600, 0x500, 0),
	 COMMIT(1, 0x600, 0),
	 KEEPALIVE(0x550, 0x600, 0),
	 END,
     }},
    {"keepalive only when idle",
     0x100,
     {
	 KEEPALIVE(0x1000, 0x1000, 0), /* nothing in flight: idle slot advances */
	 KEEPALIVE(0x0800, 0x1000, 0), /* older keepalive: no step back */
	 BEGIN(0, 0x2000, 0x1000, 0),
	 KEEPALIVE(0x1800, 0x1000, 0), /* a transaction is open */
	 ADD(0, 0x1000, 1),
	 COMMIT(0, 0x1000, 1),
	 KEEPALIVE(0x2100, 0x1000, 1), /* an event is in flight */
	 ACK(0, 0x2100, 0),
	 KEEPALIVE(0x2200, 0x2200, 0),
	 BEGIN(1, 0x3000, 0x2200, 0),
	 COMMIT(1, 0x3000, 0),
	 KEEPALIVE(0x2f00, 0x3000, 0),
	 END,
     }},
    /* The stream broke inside txn 1: its end is unknown to be complete,
     * so it confirms nothing itself, and its events hold back txn 2. */
    {"abort holds back later transactions",
     0,
     {
	 BEGIN(0, 0x100, 0, 0),
	 ADD(0, 0, 1),
	 COMMIT(0, 0, 1),
	 ACK(0, 0x100, 0),
	 BEGIN(1, 0x200, 0x100, 0),
	 ADD(1, 0x100, 1),
	 ADD(1, 0x100, 2),
	 ABORT(1, 0x100, 2),
	 BEGIN(2, 0x300, 0x100, 2),
	 ADD(2, 0x100, 3),
	 COMMIT(2, 0x100, 3),
	 ACK(2, 0x100, 2),
	 ACK(1, 0x100, 1),
	 ACK(1, 0x300, 0),
	 END,
     }},
    {"abort never confirms its own end",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 ABORT(0, 0x100, 1),
	 ACK(0, 0x100, 0),
	 BEGIN(1, 0x300, 0x100, 0), /* the replay of an aborted txn, say */
	 ABORT(1, 0x100, 0),        /* cut off again, with no events */
	 END,
     }},
    {"reset drops everything",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 COMMIT(0, 0x100, 1),
	 BEGIN(1, 0x300, 0x100, 1),
	 ADD(1, 0x100, 2),
	 ADD(1, 0x100, 3),
	 COMMIT(1, 0x100, 3),
	 ACK(0, 0x200, 2),
	 KEEPALIVE(0x400, 0x200, 2),
	 /* The producer is gone: txn 1 is read again from 0x200. The
	  * keepalive seen meanwhile must not be confirmed: it is past
	  * txn 1, which was never acknowledged. */
	 RESET(0x200),
	 ACK(1, 0x200, 0), /* stale report of the old producer */
	 ACK(1, 0x200, 0),
	 BEGIN(2, 0x300, 0x200, 0),
	 ADD(2, 0x200, 1),
	 COMMIT(2, 0x200, 1),
	 ACK(2, 0x300, 0),
	 KEEPALIVE(0x500, 0x500, 0),
	 END,
     }},
    {"reset with an open transaction",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 RESET(0x100),
	 BEGIN(1, 0x200, 0x100, 0), /* allowed: nothing is open any more */
	 ADD(1, 0x100, 1),
	 ACK(0, 0x100, 1), /* stale */
	 COMMIT(1, 0x100, 1),
	 ACK(1, 0x200, 0),
	 END,
     }},
    /* A partition was found that the stream did not read: txns 1 and 2
     * end after the rewind point and are read again (as txn 3, 4); their
     * old entries confirm nothing, but their events in flight still hold
     * back what follows. */
    {"rewind keeps events in flight but not their ends",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 COMMIT(0, 0x100, 1),
	 BEGIN(1, 0x300, 0x100, 1),
	 ADD(1, 0x100, 2),
	 COMMIT(1, 0x100, 2),
	 BEGIN(2, 0x400, 0x100, 2),
	 ADD(2, 0x100, 3),
	 COMMIT(2, 0x100, 3),
	 ACK(1, 0x100, 2),
	 REWIND(0x250, 0x100, 2),
	 ACK(0, 0x200, 1), /* txn 0 ends before the rewind point: it counts */
	 BEGIN(3, 0x300, 0x200, 1),
	 ADD(3, 0x200, 2),
	 COMMIT(3, 0x200, 2),
	 BEGIN(4, 0x400, 0x200, 2),
	 COMMIT(4, 0x200, 2), /* no events now: behind txn 3 */
	 ACK(3, 0x200, 1),    /* txn 2's old event holds back txns 3 and 4 */
	 ACK(2, 0x400, 0),
	 END,
     }},
    {"rewind below the confirmable position",
     0x100,
     {
	 BEGIN(0, 0x200, 0x100, 0),
	 ADD(0, 0x100, 1),
	 COMMIT(0, 0x100, 1),
	 ACK(0, 0x200, 0),
	 KEEPALIVE(0x500, 0x500, 0),
	 REWIND(0x180, 0x180, 0),   /* drops to the rewind point ... */
	 REWIND(0x400, 0x180, 0),   /* ... and never rises by one */
	 BEGIN(1, 0x200, 0x180, 0), /* txn 0 again */
	 ADD(1, 0x180, 1),
	 COMMIT(1, 0x180, 1),
	 KEEPALIVE(0x300, 0x180, 1), /* the old keepalive was forgotten */
	 ACK(1, 0x300, 0),
	 KEEPALIVE(0x600, 0x600, 0),
	 END,
     }},
};

static void
run_scenario(const scenario *sc)
{
	ob_acktrack t;
	uint64_t seqs[64];
	int n_txns = 0;

	ob_acktrack_init(&t, sc->start);
	assert_int_equal(ob_acktrack_confirmable(&t), sc->start);
	assert_int_equal(ob_acktrack_inflight(&t), 0);
	for (size_t i = 0; sc->steps[i].op != OP_END; i++) {
		const step *s = &sc->steps[i];
		ob_lsn conf;

		switch (s->op) {
		case OP_BEGIN:
			assert_int_equal(s->txn, n_txns);
			seqs[n_txns++] = ob_acktrack_begin(&t, s->arg, 1000000 + s->txn);
			break;
		case OP_ADD:
			ob_acktrack_add(&t, seqs[s->txn]);
			break;
		case OP_COMMIT:
			ob_acktrack_commit(&t, seqs[s->txn], end_of(&t, seqs[s->txn]));
			break;
		case OP_ABORT:
			ob_acktrack_abort(&t, seqs[s->txn]);
			break;
		case OP_ACK:
			ob_acktrack_ack(&t, seqs[s->txn]);
			break;
		case OP_KEEPALIVE:
			ob_acktrack_keepalive(&t, s->arg);
			break;
		case OP_RESET:
			ob_acktrack_reset(&t);
			break;
		case OP_REWIND:
			ob_acktrack_rewind(&t, s->arg);
			break;
		case OP_END:
			break;
		}
		conf = ob_acktrack_confirmable(&t);
		if (conf != s->conf || ob_acktrack_inflight(&t) != s->inflight)
			fail_msg("%s, step %zu: confirmable %llX inflight %llu, expected %llX and "
				 "%llu",
				 sc->name, i, (unsigned long long)conf,
				 (unsigned long long)ob_acktrack_inflight(&t),
				 (unsigned long long)s->conf, (unsigned long long)s->inflight);
		/* Asking again changes nothing. */
		assert_int_equal(ob_acktrack_confirmable(&t), conf);
	}
	ob_acktrack_free(&t);
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

/* Sequence numbers are consecutive and txn_info reports the end LSN and
 * commit time (µs) begin was given, until the transaction is confirmed and
 * leaves the FIFO. */
static void
test_txn_info(void **state)
{
	ob_acktrack t;
	uint64_t s0, s1, s2;
	ob_lsn end = 0;
	int64_t us = 0;

	(void)state;
	ob_acktrack_init(&t, 0);
	s0 = ob_acktrack_begin(&t, 0x100, INT64_C(1795316831206737));
	ob_acktrack_add(&t, s0);
	ob_acktrack_commit(&t, s0, end_of(&t, s0));
	s1 = ob_acktrack_begin(&t, 0x200, 222);
	ob_acktrack_add(&t, s1);
	ob_acktrack_abort(&t, s1);
	s2 = ob_acktrack_begin(&t, 0x300, 333);
	assert_int_equal(s1, s0 + 1);
	assert_int_equal(s2, s1 + 1);

	assert_true(ob_acktrack_txn_info(&t, s0, &end, &us));
	assert_int_equal(end, 0x100);
	assert_int_equal(us, INT64_C(1795316831206737));
	assert_true(ob_acktrack_txn_info(&t, s1, &end, &us));
	assert_int_equal(end, 0x200); /* its own end, though abandoned (confirms nothing) */
	assert_int_equal(us, 222);
	assert_true(ob_acktrack_txn_info(&t, s2, &end, &us));
	assert_int_equal(end, 0x300);
	assert_int_equal(us, 333);
	assert_false(ob_acktrack_txn_info(&t, s2 + 1, &end, &us));

	ob_acktrack_ack(&t, s0);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x100);
	assert_false(ob_acktrack_txn_info(&t, s0, &end, &us));
	assert_true(ob_acktrack_txn_info(&t, s1, &end, &us));

	ob_acktrack_reset(&t);
	assert_false(ob_acktrack_txn_info(&t, s1, &end, &us));
	assert_false(ob_acktrack_txn_info(&t, s2, &end, &us));
	/* After a reset, numbering goes on: old reports cannot hit new txns. */
	assert_true(ob_acktrack_begin(&t, 0x400, 444) > s2);
	ob_acktrack_free(&t);
}

/* Acknowledgements served while the producer is torn down arrive after
 * the relay last asked for the confirmable LSN; a reset must still count
 * them, or their transactions are published again for nothing. */
static void
test_reset_counts_acks_not_yet_asked_for(void **state)
{
	ob_acktrack t;
	uint64_t s0, s1;

	(void)state;
	ob_acktrack_init(&t, 0x100);
	s0 = ob_acktrack_begin(&t, 0x200, 1);
	ob_acktrack_add(&t, s0);
	ob_acktrack_commit(&t, s0, end_of(&t, s0));
	s1 = ob_acktrack_begin(&t, 0x300, 2);
	ob_acktrack_add(&t, s1);
	ob_acktrack_commit(&t, s1, end_of(&t, s1));
	assert_int_equal(ob_acktrack_confirmable(&t), 0x100);
	ob_acktrack_ack(&t, s0); /* served during teardown: nobody asks */
	ob_acktrack_reset(&t);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x200);
	assert_int_equal(ob_acktrack_inflight(&t), 0);
	ob_acktrack_free(&t);
}

/* --- randomised check against a brute-force model ------------------------ */

typedef struct model_txn {
	ob_lsn end;
	uint64_t pending;
	bool committed;
} model_txn;

typedef struct model {
	model_txn *txns;
	size_t n;
	ob_lsn start;
	ob_lsn idle; /* highest keepalive */
	bool open;
} model;

/* The answer from first principles: the end LSN of the longest prefix of
 * committed transactions with nothing pending (never below the start), and
 * the keepalive when that prefix is everything. */
static ob_lsn
model_confirmable(const model *m)
{
	ob_lsn conf = m->start;
	size_t i;

	for (i = 0; i < m->n; i++) {
		if (!m->txns[i].committed || m->txns[i].pending > 0)
			break;
		if (m->txns[i].end > conf)
			conf = m->txns[i].end;
	}
	if (i == m->n && !m->open && m->idle > conf)
		conf = m->idle;
	return conf;
}

static void
test_random_against_model(void **state)
{
	enum { N_TXNS = 6000, PREFILL = 3000 };
	uint64_t rng = 42;
	ob_acktrack t;
	model m = {0};
	uint64_t *seqs = calloc(N_TXNS, sizeof(*seqs));
	size_t *pending = NULL; /* one entry per unacknowledged event: its txn */
	size_t n_pending = 0, cap_pending = 0;
	size_t begun = 0;
	ob_lsn last_conf, lsn = 0x1000;
	uint64_t steps = 0;

	(void)state;
	m.txns = calloc(N_TXNS, sizeof(*m.txns));
	ob_acktrack_init(&t, lsn);
	/* Move the FIFO's head off slot 0 first, so that the ring wraps around
	 * when it grows. */
	for (int i = 0; i < 77; i++) {
		uint64_t s = ob_acktrack_begin(&t, lsn += 0x10, 0);

		ob_acktrack_add(&t, s);
		ob_acktrack_commit(&t, s, end_of(&t, s));
		ob_acktrack_ack(&t, s);
	}
	assert_int_equal(ob_acktrack_confirmable(&t), lsn);
	m.start = lsn;
	last_conf = lsn;

	while (begun < N_TXNS || n_pending > 0 || m.open) {
		uint64_t r = test_random(&rng);
		bool may_begin = begun < N_TXNS && !m.open;

		if (m.open && (r % 3 == 0 || n_pending == 0)) {
			/* Close the open transaction. */
			ob_acktrack_commit(&t, seqs[begun - 1], m.txns[begun - 1].end);
			m.txns[begun - 1].committed = true;
			m.open = false;
		} else if (may_begin && (begun < PREFILL || r % 2 == 0 || n_pending == 0)) {
			size_t events = (size_t)(test_random(&rng) % 4); /* 0..3 */

			lsn += 0x10 + test_random(&rng) % 0x100;
			seqs[begun] = ob_acktrack_begin(&t, lsn, (int64_t)begun);
			m.txns[begun].end = lsn;
			m.txns[begun].pending = events;
			m.n = begun + 1;
			m.open = true;
			for (size_t e = 0; e < events; e++) {
				ob_acktrack_add(&t, seqs[begun]);
				if (n_pending == cap_pending) {
					cap_pending = cap_pending ? cap_pending * 2 : 1024;
					pending = realloc(pending, cap_pending * sizeof(*pending));
				}
				pending[n_pending++] = begun;
			}
			begun++;
			/* Most transactions close at once; some stay open a while. */
			if (test_random(&rng) % 4 != 0) {
				ob_acktrack_commit(&t, seqs[begun - 1], m.txns[begun - 1].end);
				m.txns[begun - 1].committed = true;
				m.open = false;
			}
		} else if (n_pending > 0 && begun >= PREFILL) {
			/* Acknowledge a random event in flight. */
			size_t k = (size_t)(test_random(&rng) % n_pending);
			size_t txn = pending[k];

			pending[k] = pending[--n_pending];
			ob_acktrack_ack(&t, seqs[txn]);
			m.txns[txn].pending--;
		}
		if (r % 97 == 0) {
			/* The server's WAL end is at least what was received. */
			ob_lsn wal_end = lsn + r % 0x40;

			ob_acktrack_keepalive(&t, wal_end);
			if (wal_end > m.idle)
				m.idle = wal_end;
		}

		ob_lsn want = model_confirmable(&m);
		ob_lsn got = ob_acktrack_confirmable(&t);

		if (got != want)
			fail_msg("step %llu: confirmable %llX, brute force says %llX",
				 (unsigned long long)steps, (unsigned long long)got,
				 (unsigned long long)want);
		assert_true(got >= last_conf);
		assert_int_equal(ob_acktrack_inflight(&t), n_pending);
		last_conf = got;
		steps++;
	}
	/* Everything acknowledged: the last transaction's end, or a later
	 * keepalive. */
	assert_true(ob_acktrack_confirmable(&t) >= lsn);
	assert_int_equal(ob_acktrack_confirmable(&t), model_confirmable(&m));
	/* The ring really grew past its first 64 entries. */
	assert_true(t.cap >= PREFILL);

	ob_acktrack_free(&t);
	free(pending);
	free(seqs);
	free(m.txns);
}

/* Thousands in flight, then acked newest first: nothing moves until the
 * oldest is acked, then everything is confirmed at once. The FIFO's head is
 * first moved off slot 0, so growing must move entries that wrap around. */
static void
test_growth_reverse_acks(void **state)
{
	enum { N = 5000, WARMUP = 1037 };
	ob_acktrack t;
	uint64_t *seqs = calloc(N, sizeof(*seqs));

	(void)state;
	ob_acktrack_init(&t, 1);
	for (size_t i = 0; i < WARMUP; i++) {
		uint64_t s = ob_acktrack_begin(&t, 1, 0);

		ob_acktrack_add(&t, s);
		ob_acktrack_commit(&t, s, end_of(&t, s));
		ob_acktrack_ack(&t, s);
		assert_int_equal(ob_acktrack_confirmable(&t), 1);
	}
	for (size_t i = 0; i < N; i++) {
		seqs[i] = ob_acktrack_begin(&t, 100 + 10 * i, 0);
		ob_acktrack_add(&t, seqs[i]);
		ob_acktrack_add(&t, seqs[i]);
		ob_acktrack_commit(&t, seqs[i], end_of(&t, seqs[i]));
	}
	assert_int_equal(ob_acktrack_inflight(&t), 2 * N);
	for (size_t i = N; i-- > 1;) {
		ob_acktrack_ack(&t, seqs[i]);
		ob_acktrack_ack(&t, seqs[i]);
		assert_int_equal(ob_acktrack_confirmable(&t), 1);
	}
	ob_acktrack_ack(&t, seqs[0]);
	assert_int_equal(ob_acktrack_confirmable(&t), 1);
	ob_acktrack_ack(&t, seqs[0]);
	assert_int_equal(ob_acktrack_confirmable(&t), 100 + 10 * (N - 1));
	assert_int_equal(ob_acktrack_inflight(&t), 0);
	ob_acktrack_free(&t);
	free(seqs);
}

/* Transactions without events take no entry (ob_acktrack_empty): they
 * are confirmable at once when nothing is in flight, move the newest
 * committed entry's end otherwise, and need an entry of their own only
 * after an abandoned one. Thousands of them while an event waits leave the
 * ring at its initial size. */
static void
test_empty_transactions_take_no_entry(void **state)
{
	ob_acktrack t;
	uint64_t a, b;

	(void)state;
	ob_acktrack_init(&t, 0x10);
	ob_acktrack_empty(&t, 0x20);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x20);

	a = ob_acktrack_begin(&t, 0x30, 0);
	ob_acktrack_add(&t, a);
	ob_acktrack_commit(&t, a, end_of(&t, a));
	for (ob_lsn l = 0x40; l < 0x40 + 10000; l++)
		ob_acktrack_empty(&t, l);
	assert_int_equal(t.cap, 64);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x20);
	ob_acktrack_ack(&t, a);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x40 + 10000 - 1);

	/* Merging moves what an entry confirms, not the LSN reports name. */
	{
		ob_lsn end;
		int64_t us;
		uint64_t c = ob_acktrack_begin(&t, 0x8000, 7);

		ob_acktrack_add(&t, c);
		ob_acktrack_commit(&t, c, 0x8000);
		ob_acktrack_empty(&t, 0x8800);
		assert_true(ob_acktrack_txn_info(&t, c, &end, &us));
		assert_int_equal(end, 0x8000);
		ob_acktrack_ack(&t, c);
		assert_int_equal(ob_acktrack_confirmable(&t), 0x8800);
	}

	/* After an abandoned entry an empty transaction keeps its own end. */
	b = ob_acktrack_begin(&t, 0x9000, 0);
	ob_acktrack_add(&t, b);
	ob_acktrack_abort(&t, b);
	ob_acktrack_empty(&t, 0x9100);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x8800);
	ob_acktrack_ack(&t, b);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x9100);
	ob_acktrack_free(&t);
}

/* pgoutput names a transaction by one past where its commit record starts
 * and learns the LSN it confirms only at the commit: the entry confirms
 * that, and reports still find it by the LSN it was opened with. */
static void
test_commit_moves_the_confirmed_end(void **state)
{
	ob_acktrack t;
	ob_lsn lsn;
	int64_t us;
	uint64_t s;

	(void)state;
	ob_acktrack_init(&t, 0x100);
	s = ob_acktrack_begin(&t, 0x201, 7);
	ob_acktrack_add(&t, s);
	ob_acktrack_commit(&t, s, 0x258);
	assert_true(ob_acktrack_txn_info(&t, s, &lsn, &us));
	assert_int_equal(lsn, 0x201);
	assert_int_equal(us, 7);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x100);
	ob_acktrack_ack(&t, s);
	assert_int_equal(ob_acktrack_confirmable(&t), 0x258);
	ob_acktrack_free(&t);
}

/* The record tag: what a delivery report carries back decodes to what was
 * encoded, the index saturates, and the sequence number is rebuilt from
 * the tracker's oldest entry across the wrap of its low bits. */
typedef struct tag_case {
	uint64_t seq, index;
	ob_record_kind kind;
	uint64_t head_seq;   /* the oldest tracked when the report comes */
	uint64_t want_index; /* the index decoded */
} tag_case;

static const tag_case tag_cases[] = {
    {0, 0, OB_RECORD_EVENT, 0, 0},
    {1, 2, OB_RECORD_DLQ, 0, 2},
    {7, 3, OB_RECORD_DLQ_HEADERS_ONLY, 5, 3},
    {5, OB_TAG_INDEX_MAX, OB_RECORD_EVENT, 5, OB_TAG_INDEX_MAX},
    {5, OB_TAG_INDEX_MAX + 1, OB_RECORD_EVENT, 5, OB_TAG_INDEX_MAX},
    {5, UINT64_MAX, OB_RECORD_DLQ, 1, OB_TAG_INDEX_MAX},
    /* the low 31 bits wrap between head and seq */
    {(UINT64_C(1) << 31) + 4, 9, OB_RECORD_EVENT, (UINT64_C(1) << 31) - 3, 9},
    {(UINT64_C(5) << 31) + 1, 1, OB_RECORD_DLQ, (UINT64_C(5) << 31) - 100, 1},
    /* far above 2^31, with head equal to seq */
    {(UINT64_C(1) << 40) + 77, 0, OB_RECORD_DLQ_HEADERS_ONLY, (UINT64_C(1) << 40) + 77, 0},
};

static void
test_tag_codec(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(tag_cases) / sizeof(tag_cases[0]); i++) {
		const tag_case *c = &tag_cases[i];
		ob_record_tag t =
		    ob_tag_decode(ob_tag_encode(c->seq, c->index, c->kind), c->head_seq);

		assert_int_equal(t.seq, c->seq);
		assert_int_equal(t.index, c->want_index);
		assert_int_equal(t.kind, c->kind);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_scenarios),
	    cmocka_unit_test(test_txn_info),
	    cmocka_unit_test(test_reset_counts_acks_not_yet_asked_for),
	    cmocka_unit_test(test_random_against_model),
	    cmocka_unit_test(test_growth_reverse_acks),
	    cmocka_unit_test(test_empty_transactions_take_no_entry),
	    cmocka_unit_test(test_commit_moves_the_confirmed_end),
	    cmocka_unit_test(test_tag_codec),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
