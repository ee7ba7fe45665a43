/*
 * test_position.c: the naming rule of what the stream hands over
 * (position.h), checked on its own and, with replay.h and acktrack.h,
 * against a model of what Postgres sends again after a restart.
 *
 * The model check builds random WAL histories of transactions and
 * standalone logical messages, many of them directly before a commit
 * record (the message ends where the commit starts), with room for idle
 * keepalives between them. A simulated walsender sends, from a start
 * position, every unit Postgres would send (a transaction whose commit
 * record starts at or after it, a message whose record starts at or after
 * it), then keepalives. The relay side makes exactly the calls relay.c
 * makes: a position from position.h, replay to skip what was handed over,
 * the ack tracker for what may be confirmed. Acknowledgements come in
 * random order; the slot is confirmed at random moments; the connection
 * breaks, the producer is recreated and the process is killed at every
 * kind of point, mid-unit included. Checked after every confirmation: no
 * unit Postgres will never send again has an event the broker did not
 * acknowledge (no loss); at the end everything was acknowledged; inside
 * one producer, no event is handed over twice (no duplicates but those a
 * new producer or process makes).
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
#include "outboxd/position.h"
#include "outboxd/replay.h"

/* --- the rule itself ------------------------------------------------------ */

/* A message that ends where the next commit record starts sorts before
 * that transaction, after everything before it, and confirms no further
 * than that commit's start. */
static void
test_message_before_commit(void **state)
{
	ob_lsn m_end = 0x1517B78; /* the message's end, and the commit's start */

	(void)state;
	assert_true(ob_pos_message(m_end) < ob_pos_txn(m_end));
	assert_true(ob_pos_txn(m_end - 0x30) < ob_pos_message(m_end));
	assert_int_equal(ob_pos_message_confirms(m_end), m_end);
	/* Confirming the message's end leaves the transaction to be sent
	 * again: its position is past the bound of that confirmation. */
	assert_true(ob_pos_txn(m_end) > ob_pos_bound(ob_pos_message_confirms(m_end)));
	assert_true(ob_pos_message(m_end) <= ob_pos_bound(ob_pos_message_confirms(m_end)));
	assert_int_equal(ob_pos_lsn(ob_pos_txn(m_end)), m_end);
	assert_int_equal(ob_pos_lsn(ob_pos_message(m_end)), m_end);
}

/* The bound of a confirmed position covers exactly the transactions
 * whose commit starts before it and the messages that end at or before
 * it; the backlog sorts before everything its slot streams. */
static void
test_bound(void **state)
{
	(void)state;
	assert_true(ob_pos_txn(0xFF) <= ob_pos_bound(0x100));
	assert_true(ob_pos_txn(0x100) > ob_pos_bound(0x100));
	assert_true(ob_pos_message(0x100) <= ob_pos_bound(0x100));
	assert_true(ob_pos_message(0x101) > ob_pos_bound(0x100));
	assert_true(ob_pos_backlog(0x100) < ob_pos_txn(0x100));
	assert_true(ob_pos_backlog(0x100) <= ob_pos_bound(0x100));
	assert_int_equal(ob_pos_lsn(ob_pos_backlog(0x100)), 0x100);
}

/* --- the model check ------------------------------------------------------ */

enum { MAX_UNITS = 12, MAX_EVENTS = 3, MAX_FLAT = MAX_UNITS * MAX_EVENTS };

typedef enum unit_kind {
	UNIT_TXN,
	UNIT_MSG, /* a standalone message */
} unit_kind;

/* One unit of the WAL: its record spans [start, end) (a transaction's
 * commit record, a message's record); it carries events first ..
 * first + events - 1 of the flat numbering. */
typedef struct unit {
	unit_kind kind;
	ob_lsn start, end;
	size_t first, events;
} unit;

/* Where a fault strikes. */
typedef enum fault {
	FAULT_NONE,
	FAULT_RECONNECT, /* the connection breaks; same producer, same process */
	FAULT_REPRODUCE, /* the producer is recreated; same process */
	FAULT_CRASH,     /* kill -9: everything not confirmed is read again */
	FAULT_KINDS,
} fault;

typedef struct world {
	uint64_t rng;
	size_t n_units;
	unit units[MAX_UNITS];
	size_t n_events;
	ob_lsn wal_end;

	/* Postgres: the slot's confirmed position. */
	ob_lsn slot;

	/* The broker: what it acknowledged, at least once. */
	bool acked[MAX_FLAT];

	/* The relay process. */
	ob_acktrack ack;
	ob_replay replay;
	bool in_unit;
	bool tracked;
	uint64_t seq;
	/* Events of this producer not acknowledged yet: (seq, event). */
	uint64_t pend_seq[MAX_FLAT * 4];
	size_t pend_event[MAX_FLAT * 4];
	size_t n_pend;
	/* Hand-overs of each event to this producer. */
	int handed[MAX_FLAT];

	int faults_left;
	uint64_t faults[FAULT_KINDS];
	uint64_t confirms, messages_before_commit;
} world;

/* A random WAL: units in order, some messages directly before the next
 * commit record, gaps where idle keepalives fall. */
static void
new_wal(world *w)
{
	ob_lsn lsn = 0x1000 + 8 * test_below(&w->rng, 0x20);

	w->n_units = 1 + (size_t)test_below(&w->rng, MAX_UNITS);
	w->n_events = 0;
	for (size_t i = 0; i < w->n_units; i++) {
		unit *u = &w->units[i];

		u->kind = test_below(&w->rng, 3) == 0 ? UNIT_MSG : UNIT_TXN;
		/* A gap (other databases' WAL, filtered transactions), or
		 * none: right after the previous record. */
		if (i == 0 || test_below(&w->rng, 2) == 0)
			lsn += 8 * (1 + test_below(&w->rng, 8));
		u->start = lsn;
		u->end = lsn + 8 * (1 + test_below(&w->rng, 4));
		lsn = u->end;
		u->first = w->n_events;
		u->events = u->kind == UNIT_MSG ? test_below(&w->rng, 2)
						: test_below(&w->rng, MAX_EVENTS + 1);
		w->n_events += u->events;
		if (i > 0 && w->units[i - 1].kind == UNIT_MSG && w->units[i - 1].end == u->start &&
		    u->kind == UNIT_TXN)
			w->messages_before_commit++;
	}
	w->wal_end = lsn + 8 * test_below(&w->rng, 4);
	w->slot = w->units[0].start - 8 * test_below(&w->rng, 4);
	memset(w->acked, 0, sizeof(w->acked));
	w->faults_left = (int)test_below(&w->rng, 10);
}

/* Does Postgres send unit u to a stream started at lsn? */
static bool
sent_from(const unit *u, ob_lsn lsn)
{
	return u->start >= lsn;
}

/* No loss: every event of a unit that no stream sends again any more was
 * acknowledged by the broker. */
static void
check_no_loss(world *w, uint64_t iter)
{
	for (size_t i = 0; i < w->n_units; i++) {
		const unit *u = &w->units[i];

		if (sent_from(u, w->slot))
			continue;
		for (size_t e = u->first; e < u->first + u->events; e++) {
			if (!w->acked[e])
				fail_msg(
				    "iteration %llu: slot confirmed at %llX past %s [%llX, %llX) "
				    "whose event %zu was never acknowledged",
				    (unsigned long long)iter, (unsigned long long)w->slot,
				    u->kind == UNIT_MSG ? "message" : "transaction",
				    (unsigned long long)u->start, (unsigned long long)u->end,
				    e - u->first);
		}
	}
}

/* A status update: the slot takes the confirmable position. */
static void
confirm(world *w, uint64_t iter)
{
	ob_lsn c = ob_acktrack_confirmable(&w->ack);

	if (c > w->slot)
		w->slot = c;
	w->confirms++;
	check_no_loss(w, iter);
}

/* The broker acknowledges one random event in flight. */
static void
ack_one(world *w)
{
	size_t k;

	if (w->n_pend == 0)
		return;
	k = (size_t)test_below(&w->rng, w->n_pend);
	w->acked[w->pend_event[k]] = true;
	ob_acktrack_ack(&w->ack, w->pend_seq[k]);
	w->pend_seq[k] = w->pend_seq[w->n_pend - 1];
	w->pend_event[k] = w->pend_event[w->n_pend - 1];
	w->n_pend--;
}

/* Background: acknowledgements and status updates, now and then. */
static void
tick(world *w, uint64_t iter)
{
	while (w->n_pend > 0 && test_below(&w->rng, 3) != 0)
		ack_one(w);
	if (test_below(&w->rng, 3) == 0)
		confirm(w, iter);
}

/* Does a fault strike here, and which? */
static fault
strikes(world *w)
{
	if (w->faults_left == 0 || test_below(&w->rng, 6) != 0)
		return FAULT_NONE;
	w->faults_left--;
	return (fault)(1 + test_below(&w->rng, FAULT_KINDS - 1));
}

/* The relay's begin_txn(): a unit at pos begins. */
static void
relay_begin(world *w, ob_pos pos)
{
	w->in_unit = true;
	w->tracked = false;
	(void)ob_replay_begin(&w->replay, pos);
}

/* The relay's handle_event() for event e of the open unit. */
static void
relay_event(world *w, size_t e, uint64_t iter)
{
	ob_event_pos pos;

	if (ob_replay_next(&w->replay, &pos) == OB_REPLAY_SKIP)
		return;
	if (!w->tracked) {
		w->seq = ob_acktrack_begin(&w->ack, w->replay.unit, 0);
		w->tracked = true;
	}
	ob_acktrack_add(&w->ack, w->seq);
	ob_replay_handed(&w->replay);
	if (++w->handed[e] > 1)
		fail_msg("iteration %llu: event %zu handed to one producer %d times",
			 (unsigned long long)iter, e, w->handed[e]);
	w->pend_seq[w->n_pend] = w->seq;
	w->pend_event[w->n_pend] = e;
	w->n_pend++;
}

/* The relay's commit_txn(): the open unit confirms end_lsn. */
static void
relay_commit(world *w, ob_lsn end_lsn)
{
	bool skipped = w->replay.skip_txn;

	ob_replay_commit(&w->replay);
	w->in_unit = false;
	if (skipped)
		return;
	if (w->tracked)
		ob_acktrack_commit(&w->ack, w->seq, end_lsn);
	else
		ob_acktrack_empty(&w->ack, end_lsn);
}

/* The relay's disconnect(), then what the fault does beyond it. */
static void
relay_fault(world *w, fault f)
{
	w->faults[f]++;
	if (w->in_unit && !w->replay.skip_txn && w->tracked)
		ob_acktrack_abort(&w->ack, w->seq);
	ob_replay_cut(&w->replay);
	w->in_unit = false;
	switch (f) {
	case FAULT_NONE:
	case FAULT_KINDS:
	case FAULT_RECONNECT:
		break;
	case FAULT_REPRODUCE:
		ob_acktrack_reset(&w->ack);
		ob_replay_reset(&w->replay, ob_acktrack_confirmable(&w->ack));
		w->n_pend = 0;
		memset(w->handed, 0, sizeof(w->handed));
		break;
	case FAULT_CRASH:
		ob_acktrack_free(&w->ack);
		ob_replay_free(&w->replay);
		ob_acktrack_init(&w->ack, w->slot);
		ob_replay_init(&w->replay);
		w->n_pend = 0;
		memset(w->handed, 0, sizeof(w->handed));
		break;
	}
}

/* One unit as the walsender sends it and the relay reads it; false when a
 * fault ended the connection. */
static bool
read_unit(world *w, const unit *u, uint64_t iter)
{
	fault f;

	relay_begin(w, u->kind == UNIT_MSG ? ob_pos_message(u->end) : ob_pos_txn(u->start));
	for (size_t e = u->first; e < u->first + u->events; e++) {
		if ((f = strikes(w)) != FAULT_NONE) {
			relay_fault(w, f);
			return false;
		}
		relay_event(w, e, iter);
		tick(w, iter);
	}
	if ((f = strikes(w)) != FAULT_NONE) {
		relay_fault(w, f);
		return false;
	}
	relay_commit(w, u->kind == UNIT_MSG ? ob_pos_message_confirms(u->end) : u->end);
	return true;
}

/* One connection from the relay's confirmable position: every unit
 * Postgres sends from there, with a keepalive after some; true when it
 * reached the end of the WAL. */
static bool
read_stream(world *w, uint64_t iter)
{
	ob_lsn start = ob_acktrack_confirmable(&w->ack);

	/* The server starts at the later of the requested and the slot's
	 * confirmed position. */
	if (w->slot > start)
		start = w->slot;
	for (size_t i = 0; i < w->n_units; i++) {
		const unit *u = &w->units[i];

		if (!sent_from(u, start))
			continue;
		if (!read_unit(w, u, iter))
			return false;
		/* An idle keepalive: the WAL end somewhere before the next
		 * unit's record (or the end of the WAL). */
		if (test_below(&w->rng, 3) == 0) {
			ob_lsn next = i + 1 < w->n_units ? w->units[i + 1].start : w->wal_end;

			ob_acktrack_keepalive(&w->ack,
					      u->end + test_below(&w->rng, next - u->end + 1));
		}
		tick(w, iter);
	}
	ob_acktrack_keepalive(&w->ack, w->wal_end);
	return true;
}

static void
test_restarts_against_model(void **state)
{
	enum { ITERATIONS = 40000 };
	world *w = calloc(1, sizeof(*w));
	uint64_t events = 0;

	(void)state;
	w->rng = 20261125;
	for (uint64_t iter = 0; iter < ITERATIONS; iter++) {
		new_wal(w);
		ob_acktrack_init(&w->ack, w->slot);
		ob_replay_init(&w->replay);
		w->n_pend = 0;
		memset(w->handed, 0, sizeof(w->handed));
		while (!read_stream(w, iter))
			tick(w, iter);
		/* Quiesce: every report comes, the slot is confirmed. */
		while (w->n_pend > 0)
			ack_one(w);
		confirm(w, iter);
		if (w->slot < w->wal_end)
			fail_msg("iteration %llu: slot confirmed to %llX only, WAL ends at %llX",
				 (unsigned long long)iter, (unsigned long long)w->slot,
				 (unsigned long long)w->wal_end);
		for (size_t e = 0; e < w->n_events; e++)
			assert_true(w->acked[e]);
		events += w->n_events;
		ob_acktrack_free(&w->ack);
		ob_replay_free(&w->replay);
	}
	for (int f = FAULT_RECONNECT; f < FAULT_KINDS; f++) {
		if (w->faults[f] < 1000)
			fail_msg("fault kind %d struck %llu times only", f,
				 (unsigned long long)w->faults[f]);
	}
	assert_true(w->messages_before_commit > 1000);
	print_message("%llu events, %llu confirmations, %llu messages right before a commit; "
		      "faults: %llu reconnects, %llu new producers, %llu crashes\n",
		      (unsigned long long)events, (unsigned long long)w->confirms,
		      (unsigned long long)w->messages_before_commit,
		      (unsigned long long)w->faults[FAULT_RECONNECT],
		      (unsigned long long)w->faults[FAULT_REPRODUCE],
		      (unsigned long long)w->faults[FAULT_CRASH]);
	free(w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_message_before_commit),
	    cmocka_unit_test(test_bound),
	    cmocka_unit_test(test_restarts_against_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
