/*
 * replay.c: where a re-read stream resumes, and which records to retry
 * alone (see replay.h for the contract).
 */
#include "outboxd/replay.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void
ob_replay_init(ob_replay *r)
{
	memset(r, 0, sizeof(*r));
}

void
ob_replay_free(ob_replay *r)
{
	free(r->suspects);
	memset(r, 0, sizeof(*r));
}

int
ob_event_pos_cmp(ob_event_pos a, ob_event_pos b)
{
	if (a.unit != b.unit)
		return a.unit < b.unit ? -1 : 1;
	if (a.index != b.index)
		return a.index < b.index ? -1 : 1;
	return 0;
}

bool
ob_replay_begin(ob_replay *r, ob_pos unit)
{
	r->in_txn = true;
	r->unit = unit;
	r->done = 0;
	r->to_skip = 0;
	r->skip_txn = unit <= r->handed;
	if (!r->skip_txn && unit == r->partial)
		r->to_skip = r->partial_events;
	return !r->skip_txn;
}

/* Forget suspects before pos: the re-read passed them (they can only be
 * stale, since a suspect holds back the confirmed position). */
static void
drop_passed(ob_replay *r, ob_event_pos pos)
{
	size_t n = 0;

	while (n < r->suspects_len && ob_event_pos_cmp(r->suspects[n], pos) < 0)
		n++;
	if (n == 0)
		return;
	memmove(r->suspects, r->suspects + n, (r->suspects_len - n) * sizeof(*r->suspects));
	r->suspects_len -= n;
}

ob_replay_action
ob_replay_next(ob_replay *r, ob_event_pos *pos)
{
	assert(r->in_txn);
	pos->unit = r->unit;
	pos->index = r->done;
	if (r->skip_txn || r->to_skip > 0) {
		if (r->to_skip > 0)
			r->to_skip--;
		r->done++;
		return OB_REPLAY_SKIP;
	}
	drop_passed(r, *pos);
	if (r->suspects_len > 0 && ob_event_pos_cmp(r->suspects[0], *pos) == 0)
		return OB_REPLAY_ISOLATE;
	return OB_REPLAY_PUBLISH;
}

void
ob_replay_handed(ob_replay *r)
{
	assert(r->in_txn);
	r->done++;
	r->handed_events++;
}

void
ob_replay_commit(ob_replay *r)
{
	assert(r->in_txn);
	r->in_txn = false;
	if (!r->skip_txn)
		r->handed = r->unit;
}

void
ob_replay_cut(ob_replay *r)
{
	if (r->in_txn && !r->skip_txn) {
		r->partial = r->unit;
		/* What was handed over (or skipped) now, plus what the replay
		 * had still to skip. */
		r->partial_events = r->done + r->to_skip;
	}
	r->in_txn = false;
}

void
ob_replay_reset(ob_replay *r, ob_lsn confirmed)
{
	r->handed = ob_pos_bound(confirmed);
	r->partial = 0;
	r->partial_events = 0;
	r->in_txn = false;
}

void
ob_replay_rewind(ob_replay *r, ob_lsn lsn)
{
	ob_pos bound = ob_pos_bound(lsn);

	if (r->handed > bound)
		r->handed = bound;
	if (r->partial > bound) {
		r->partial = 0;
		r->partial_events = 0;
	}
	r->in_txn = false;
}

void
ob_replay_suspect(ob_replay *r, ob_event_pos pos)
{
	size_t i = r->suspects_len;

	/* Reports come mostly in order: search from the end. */
	while (i > 0 && ob_event_pos_cmp(r->suspects[i - 1], pos) > 0)
		i--;
	if (i > 0 && ob_event_pos_cmp(r->suspects[i - 1], pos) == 0)
		return;
	if (r->suspects_len == r->suspects_cap) {
		r->suspects_cap = r->suspects_cap ? r->suspects_cap * 2 : 16;
		r->suspects = ob_xrealloc(r->suspects, r->suspects_cap * sizeof(*r->suspects));
	}
	memmove(r->suspects + i + 1, r->suspects + i, (r->suspects_len - i) * sizeof(*r->suspects));
	r->suspects[i] = pos;
	r->suspects_len++;
}

void
ob_replay_settled(ob_replay *r, ob_event_pos pos)
{
	for (size_t i = 0; i < r->suspects_len; i++) {
		if (ob_event_pos_cmp(r->suspects[i], pos) == 0) {
			memmove(r->suspects + i, r->suspects + i + 1,
				(r->suspects_len - i - 1) * sizeof(*r->suspects));
			r->suspects_len--;
			return;
		}
	}
}

void
ob_replay_rebase(ob_replay *r, ob_pos old, ob_pos new)
{
	size_t first = 0, n = 0;

	while (first < r->suspects_len && r->suspects[first].unit < old)
		first++;
	while (first + n < r->suspects_len && r->suspects[first + n].unit == old)
		r->suspects[first + n++].unit = new;
	/* Keep position order: the moved run goes after everything else. */
	if (n > 0 && first + n < r->suspects_len) {
		ob_event_pos *moved = ob_xmalloc(n * sizeof(*moved));
		size_t rest = r->suspects_len - first - n;

		memcpy(moved, r->suspects + first, n * sizeof(*moved));
		memmove(r->suspects + first, r->suspects + first + n, rest * sizeof(*moved));
		memcpy(r->suspects + first + rest, moved, n * sizeof(*moved));
		free(moved);
	}
}

size_t
ob_replay_suspects(const ob_replay *r)
{
	return r->suspects_len;
}
