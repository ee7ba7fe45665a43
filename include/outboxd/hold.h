/*
 * hold.h: outbox.on_bad_event = hold_key (deploy/README.md, "Held keys and
 * dead letters").
 *
 * Once an event of key K for topic T becomes a dead letter (a bad event,
 * or a record the client or the broker refused for good) and the dead
 * letter names both (its original-topic header and its key), (T, K) is
 * held: every later event of it goes to the dead-letter topic too, as a
 * held record (reason "held", header held_behind naming the first dead
 * letter's id), until an operator releases it. Other keys flow untouched.
 * A dead letter naming no topic or no key holds nothing.
 *
 * The held set lives in the outbox database (holddb.h) and, while outboxd
 * runs, in memory. Held events are written there in batches on a plain
 * connection of the hold's own; until a unit's rows are committed, nothing
 * at or past it is confirmed (ob_hold_cap()), so after a crash the slot
 * sends the unit again and its rows are written again (a row of the same
 * place is kept once). Past outbox.hold_max_keys keys or
 * outbox.hold_max_events events it halts, confirming neither.
 *
 * A release (`outboxd dlq release`) marks the key's row; outboxd looks for
 * marks about once a second and publishes the key's held events in their
 * order (holdrelease.h), a chunk per loop turn, deleting each chunk once the
 * broker acknowledged it, while the key's new events are still held behind
 * them. Once none is left, the key's row goes and the key leaves the held
 * set in one step, so its next event is published after every released
 * one.
 */
#ifndef OUTBOXD_HOLD_H
#define OUTBOXD_HOLD_H

#include <jansson.h>

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"
#include "outboxd/holddb.h"
#include "outboxd/holdrelease.h"
#include "outboxd/outcome.h"
#include "outboxd/pgsql.h"
#include "outboxd/position.h"

typedef struct ob_hold {
	const ob_config *cfg;
	bool on;     /* on_bad_event = hold_key */
	bool loaded; /* the held set was read from the database */
	ob_pgconn *conn;
	json_t *keys;           /* "<topic>\x1f<key in hex>" -> the held-behind id */
	json_t *released;       /* the same names -> the position released through */
	int64_t next_forget_ms; /* when to forget released keys again */
	long long events;       /* held events written */
	ob_hold_row *pending;   /* rows not written yet, in stream order */
	size_t pending_len, pending_cap;
	size_t pending_held; /* of them, held events (not failed ones) */
	bool failing;        /* the last write failed (logged once) */
	int64_t next_try_ms; /* no write before (after a failure) */
	ob_event held_ev;    /* a held record being built, reused */
	ob_holdrelease release;
} ob_hold;

void ob_hold_init(ob_hold *h, const ob_config *cfg);
void ob_hold_free(ob_hold *h);

/* With hold_key on, before each stream (and the backlog): make sure of the
 * tables, write what waits (rows that cannot be written now wait on, their
 * keys held), and read the held set again (another process may have held
 * keys while this one waited as a standby). False with *out HALT (logged)
 * when the tables cannot be had or the server is a hot standby, RETRY on
 * a failed query. */
bool ob_hold_load(ob_hold *h, ob_outcome *out) OB_MUST_CHECK;

/* When ev (a mapped event, not a dead letter) is of a held key: build its
 * held record into h->held_ev, note the held event (at pos, lsn) to be
 * written, and set *held. False with *out HALT past hold_max_events. */
bool ob_hold_divert(ob_hold *h, const ob_event *ev, ob_pos unit, uint64_t index, ob_lsn lsn,
		    bool *held, ob_outcome *out) OB_MUST_CHECK;
/* A dead letter dlq (at unit, index, lsn) is about to be produced: with
 * hold_key, hold its topic and key (or add it to their hold as a failed
 * event). orig is the record it replaces (republished by a release with
 * --include-failed), NULL for a bad event that never was one. False with
 * *out HALT past the limits. */
bool ob_hold_dead_letter(ob_hold *h, const ob_event *dlq, const ob_record_view *orig, ob_pos unit,
			 uint64_t index, ob_lsn lsn, ob_outcome *out) OB_MUST_CHECK;

/* The highest position that may be confirmed while held rows wait to be
 * written (UINT64_MAX: none waits). */
ob_lsn ob_hold_cap(const ob_hold *h);

/* Once per loop turn: write the waiting rows (a failure is logged once and
 * tried again a second later), then move a release on. confirmed is the
 * position last confirmed to the slot: a release publishes only held
 * events the slot will not send again (holdrelease.h). */
void ob_hold_tick(ob_hold *h, ob_lsn confirmed);
/* The descriptor that turns readable when a release's reports wait, -1
 * when none waits (holdrelease.h). */
int ob_hold_wake_fd(const ob_hold *h);
/* At a stop: write the waiting rows, so that the last confirmation goes
 * as far as it can. */
void ob_hold_flush(ob_hold *h);
/* Write the waiting rows now, whatever the last failure: the backlog's,
 * before its slot is made (once it exists nothing sends the backlog again,
 * so ob_hold_cap() cannot keep it). False (logged once while failing)
 * when they could not be written. */
bool ob_hold_write(ob_hold *h) OB_MUST_CHECK;

#endif
