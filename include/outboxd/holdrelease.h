/*
 * holdrelease.h: publishing a held key's events on release (hold.h).
 *
 * About once a second the hold looks for a release asked for (the oldest
 * mark first); then a step hands the key's next OB_HOLDRELEASE_CHUNK held
 * events in their stream order to a producer of its own (idempotent, with
 * the gapless guarantee: a chunk is written in order or not past its first
 * failure), and the steps after it, one per loop turn, wait for the
 * broker's acknowledgement without blocking the stream (other keys flow
 * while a release waits for its broker) and then delete them. Failed
 * events (the dead letters) are skipped unless the release includes them,
 * and then published as the record they were (a bad event that never was
 * one is skipped, with a warning). A record refused ends the release: the
 * key stays held, the mark is cleared and the error kept in release_error
 * for `outboxd dlq list` to show.
 *
 * A held event is published only once the slot was confirmed past its
 * transaction: until then the slot may send it again, with the key's
 * events before it (still in flight in the stream's producer, so a release
 * would overtake them) and the dead letter it is held behind (which would
 * hold the key again once released).
 */
#ifndef OUTBOXD_HOLDRELEASE_H
#define OUTBOXD_HOLDRELEASE_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"
#include "outboxd/pgsql.h"
#include "outboxd/position.h"
#include "outboxd/producer.h"

#define OB_HOLDRELEASE_CHUNK 1000

typedef struct ob_holdrelease {
	bool active;
	char *topic;
	char *key_hex;
	bool include_failed;
	char after_unit[32]; /* the last event released: (unit, index) */
	char after_index[24];
	long long released;
	int64_t started_ms;
	int64_t next_look_ms; /* when to look for a mark again */
	ob_producer *producer;
	bool in_flight;      /* a chunk was handed over, its acknowledgements wait */
	size_t sent;         /* records of the chunk handed over */
	int64_t deadline_ms; /* the chunk is refused unless acknowledged by then */
	char last_unit[32];  /* the chunk's last event: (unit, index) */
	char last_index[24];
	size_t acked;    /* records of the chunk acknowledged */
	char error[512]; /* the first refusal of the chunk ("" none) */
	ob_event ev;     /* a record read back, reused */
} ob_holdrelease;

void ob_holdrelease_init(ob_holdrelease *r);
void ob_holdrelease_free(ob_holdrelease *r);

/* One step on p: look for a mark when none is active and it is time, or
 * publish the active release's next chunk, of the held events at or before
 * position upto (ob_pos_bound() of the confirmed position), waiting while
 * the next is past it (*deleted: its held events deleted once
 * acknowledged). *drained is set when the active release
 * found no held event left: the caller ends it (the key's row and its
 * place in the held set go together) with ob_holdrelease_end(). False
 * (logged) on a failed query or a producer that could not be made; the
 * step is tried again later. */
bool ob_holdrelease_step(ob_holdrelease *r, ob_pgconn *p, const ob_config *cfg, ob_pos upto,
			 bool *drained, long long *deleted);
/* The active release is over (done: the key was released). */
void ob_holdrelease_end(ob_holdrelease *r, bool done);
/* The descriptor that turns readable when a chunk's reports wait (for the
 * caller's poll()), -1 when no chunk is in flight. */
int ob_holdrelease_wake_fd(const ob_holdrelease *r);

#endif
