/*
 * replay.h: where a re-read stream resumes, and which records to retry
 * alone.
 *
 * The slot is read again from its confirmed position whenever the
 * replication connection breaks or the producer is recreated. This module
 * decides, for each transaction and event read, whether it was already
 * handed to the producer (skip it), must be handed over now, or must be
 * produced alone and awaited before anything else (isolate it).
 *
 * Positions: a unit the stream hands over (a transaction, a standalone
 * message, the backlog) is named by its ob_pos (position.h, the one rule
 * for it), an event by its unit and its ordinal among the published events
 * of that unit (0, 1, ...), which is the same every time the unit is
 * decoded.
 *
 * - Across a reconnect inside one process, units handed over whole are
 *   skipped by their position, and a unit cut off in the middle skips the
 *   events handed over before the cut.
 * - After the producer was recreated, everything after the confirmed
 *   position is handed over again (ob_replay_reset).
 * - A broker error on one produce request fails every record of that batch
 *   with the same code, so such a record is only a suspect: its position is
 *   remembered (ob_replay_suspect), and when the re-read reaches it, it is
 *   produced alone; only an error it then gets alone is its own.
 *
 * Pure bookkeeping: no I/O, no logging.
 */
#ifndef OUTBOXD_REPLAY_H
#define OUTBOXD_REPLAY_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"
#include "outboxd/position.h"

/* An event's position: its unit's and its ordinal in it. */
typedef struct ob_event_pos {
	ob_pos unit;
	uint64_t index;
} ob_event_pos;

typedef enum ob_replay_action {
	OB_REPLAY_PUBLISH, /* hand the event over */
	OB_REPLAY_SKIP,    /* it was handed over before the stream broke */
	OB_REPLAY_ISOLATE, /* a suspect: produce it alone, then go on */
} ob_replay_action;

typedef struct ob_replay {
	/* How far the producer got, across reconnects. */
	ob_pos handed;           /* the last unit handed over whole */
	ob_pos partial;          /* a unit cut off by a broken stream ... */
	uint64_t partial_events; /* ... and how many of its events were handed over */
	uint64_t handed_events;  /* events handed over in all (timeline.h's count) */

	/* The unit being read. */
	bool in_txn;
	bool skip_txn;    /* handed over whole before a reconnect */
	ob_pos unit;      /* its position */
	uint64_t done;    /* events of it handed over (or skipped as such) */
	uint64_t to_skip; /* events still to skip of a replayed cut-off txn */

	/* Suspects in position order; owned. */
	ob_event_pos *suspects;
	size_t suspects_len;
	size_t suspects_cap;
} ob_replay;

void ob_replay_init(ob_replay *r);
void ob_replay_free(ob_replay *r);

/* The unit at unit begins. False when it was handed over whole before:
 * all its events are then skipped. */
bool ob_replay_begin(ob_replay *r, ob_pos unit);
/* What to do with the next event of the open transaction; *pos gets its
 * position. OB_REPLAY_SKIP counts it at once; after OB_REPLAY_PUBLISH or
 * OB_REPLAY_ISOLATE the caller calls ob_replay_handed() once the event is
 * queued, so an event whose hand-over was cut short is read again. */
ob_replay_action ob_replay_next(ob_replay *r, ob_event_pos *pos);
/* The event last returned by ob_replay_next() was handed over. */
void ob_replay_handed(ob_replay *r);
/* The open transaction committed: every event of it was handed over. */
void ob_replay_commit(ob_replay *r);
/* The stream broke: remember how far the open transaction got, so its
 * replay skips what was handed over. */
void ob_replay_cut(ob_replay *r);
/* The producer was recreated: nothing is handed over past confirmed, the
 * WAL position the slot is read again from (ob_pos_bound). Suspects are
 * kept. */
void ob_replay_reset(ob_replay *r, ob_lsn confirmed);
/* The stream is read again from the WAL position lsn (at most the
 * confirmed position) with more tables than before: a unit after lsn
 * (past ob_pos_bound(lsn)) may have events that were never read, and its
 * events are numbered anew, so it is handed over again, whole; what lies
 * before lsn is still skipped. Suspects are kept. */
void ob_replay_rewind(ob_replay *r, ob_lsn lsn);

/* The record at pos failed in a batch: isolate it when it is read again.
 * Adding a position twice keeps one. */
void ob_replay_suspect(ob_replay *r, ob_event_pos pos);
/* The suspect at pos was produced alone and settled (delivered or
 * dead-lettered): forget it. */
void ob_replay_settled(ob_replay *r, ob_event_pos pos);
/* The events of the unit at old are read again under another position,
 * new (the backlog, published again from a newer snapshot): its suspects
 * move there, so they are still produced alone. new must come after every
 * other suspect's unit. */
void ob_replay_rebase(ob_replay *r, ob_pos old, ob_pos new);
/* Suspects not yet settled. */
size_t ob_replay_suspects(const ob_replay *r);

/* Order of positions: negative, zero or positive as a is before, at or
 * after b. */
int ob_event_pos_cmp(ob_event_pos a, ob_event_pos b);

#endif
