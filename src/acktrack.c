/*
 * acktrack.c: the in-flight transaction FIFO and the confirmable LSN.
 */
#include "outboxd/acktrack.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define ACKTRACK_INITIAL_CAP 64
#define TAG_SEQ_MASK         ((UINT64_C(1) << OB_TAG_SEQ_BITS) - 1)

uint64_t
ob_tag_encode(uint64_t seq, uint64_t index, ob_record_kind kind)
{
	if (index > OB_TAG_INDEX_MAX)
		index = OB_TAG_INDEX_MAX;
	return ((seq & TAG_SEQ_MASK) << (OB_TAG_INDEX_BITS + OB_TAG_KIND_BITS)) |
	       (index << OB_TAG_KIND_BITS) | (uint64_t)kind;
}

ob_record_tag
ob_tag_decode(uint64_t tag, uint64_t head_seq)
{
	uint64_t low = tag >> (OB_TAG_INDEX_BITS + OB_TAG_KIND_BITS);
	ob_record_tag t;

	t.seq = head_seq + ((low - head_seq) & TAG_SEQ_MASK);
	t.index = (tag >> OB_TAG_KIND_BITS) & OB_TAG_INDEX_MAX;
	t.kind = (ob_record_kind)(tag & ((1u << OB_TAG_KIND_BITS) - 1));
	return t;
}

void
ob_acktrack_init(ob_acktrack *t, ob_lsn start_lsn)
{
	memset(t, 0, sizeof(*t));
	t->cap = ACKTRACK_INITIAL_CAP;
	t->ring = ob_xcalloc(t->cap, sizeof(*t->ring));
	t->confirmable = start_lsn;
}

void
ob_acktrack_free(ob_acktrack *t)
{
	free(t->ring);
	memset(t, 0, sizeof(*t));
}

void
ob_acktrack_reset(ob_acktrack *t)
{
	/* Acknowledgements served while the producer was torn down still
	 * count: take the acknowledged prefix before forgetting the rest. */
	(void)ob_acktrack_confirmable(t);
	t->head_seq = t->tail_seq;
	t->open = false;
	t->inflight = 0;
	t->idle_lsn = 0;
}

static ob_acktrack_txn *
entry(ob_acktrack *t, uint64_t seq)
{
	assert(seq >= t->head_seq && seq < t->tail_seq);
	return &t->ring[seq & (t->cap - 1)];
}

/* Double the ring, keeping every entry at the slot its sequence maps to. */
static void
grow(ob_acktrack *t)
{
	size_t new_cap = t->cap * 2;
	ob_acktrack_txn *ring = ob_xcalloc(new_cap, sizeof(*ring));

	for (uint64_t s = t->head_seq; s < t->tail_seq; s++)
		ring[s & (new_cap - 1)] = t->ring[s & (t->cap - 1)];
	free(t->ring);
	t->ring = ring;
	t->cap = new_cap;
}

uint64_t
ob_acktrack_begin(ob_acktrack *t, ob_pos unit, int64_t commit_us)
{
	ob_acktrack_txn *e;
	uint64_t seq;

	assert(!t->open);
	if (t->tail_seq - t->head_seq == t->cap)
		grow(t);
	seq = t->tail_seq++;
	e = entry(t, seq);
	memset(e, 0, sizeof(*e));
	e->unit = unit;
	e->commit_us = commit_us;
	t->open = true;
	return seq;
}

void
ob_acktrack_add(ob_acktrack *t, uint64_t seq)
{
	entry(t, seq)->pending++;
	t->inflight++;
}

void
ob_acktrack_commit(ob_acktrack *t, uint64_t seq, ob_lsn end_lsn)
{
	ob_acktrack_txn *e = entry(t, seq);

	assert(t->open && seq == t->tail_seq - 1);
	e->end_lsn = end_lsn;
	e->committed = true;
	t->open = false;
}

void
ob_acktrack_empty(ob_acktrack *t, ob_lsn end_lsn)
{
	ob_acktrack_txn *tail;

	assert(!t->open);
	if (t->head_seq == t->tail_seq) {
		if (end_lsn > t->confirmable)
			t->confirmable = end_lsn;
		return;
	}
	tail = entry(t, t->tail_seq - 1);
	if (tail->end_lsn != 0) {
		if (end_lsn > tail->end_lsn)
			tail->end_lsn = end_lsn;
		return;
	}
	(void)ob_acktrack_begin(t, 0, 0);
	ob_acktrack_commit(t, t->tail_seq - 1, end_lsn);
}

void
ob_acktrack_abort(ob_acktrack *t, uint64_t seq)
{
	ob_acktrack_txn *e = entry(t, seq);

	/* Its LSN must not be confirmed: the transaction is read again from
	 * the slot. With end_lsn 0 it confirms nothing, but its events still
	 * hold back every later transaction until they are acknowledged. */
	assert(t->open && seq == t->tail_seq - 1);
	e->end_lsn = 0;
	e->committed = true;
	t->open = false;
}

void
ob_acktrack_ack(ob_acktrack *t, uint64_t seq)
{
	/* Reports for transactions dropped by ob_acktrack_reset() are stale. */
	if (seq < t->head_seq || seq >= t->tail_seq)
		return;
	ob_acktrack_txn *e = entry(t, seq);
	assert(e->pending > 0);
	e->pending--;
	t->inflight--;
}

void
ob_acktrack_rewind(ob_acktrack *t, ob_lsn lsn)
{
	assert(!t->open);
	/* The acknowledged prefix counts up to where it ends; what follows
	 * is cut at lsn. */
	(void)ob_acktrack_confirmable(t);
	for (uint64_t s = t->head_seq; s < t->tail_seq; s++) {
		ob_acktrack_txn *e = entry(t, s);

		if (e->end_lsn > lsn)
			e->end_lsn = 0;
	}
	if (t->confirmable > lsn)
		t->confirmable = lsn;
	t->idle_lsn = 0;
}

bool
ob_acktrack_txn_info(ob_acktrack *t, uint64_t seq, ob_pos *unit, int64_t *commit_us)
{
	if (seq < t->head_seq || seq >= t->tail_seq)
		return false;
	*unit = entry(t, seq)->unit;
	*commit_us = entry(t, seq)->commit_us;
	return true;
}

void
ob_acktrack_keepalive(ob_acktrack *t, ob_lsn wal_end)
{
	if (wal_end > t->idle_lsn)
		t->idle_lsn = wal_end;
}

ob_lsn
ob_acktrack_confirmable(ob_acktrack *t)
{
	while (t->head_seq < t->tail_seq) {
		ob_acktrack_txn *e = entry(t, t->head_seq);

		if (!e->committed || e->pending > 0)
			break;
		if (e->end_lsn > t->confirmable)
			t->confirmable = e->end_lsn;
		t->head_seq++;
	}
	if (t->head_seq == t->tail_seq && t->idle_lsn > t->confirmable)
		t->confirmable = t->idle_lsn;
	return t->confirmable;
}

uint64_t
ob_acktrack_inflight(const ob_acktrack *t)
{
	return t->inflight;
}
