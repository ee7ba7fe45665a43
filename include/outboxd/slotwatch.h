/*
 * slotwatch.h: the stream's slot as the server sees it (deploy/README.md, "Metrics
 * and health"), read about every second on the stream's plain connection
 * (partitions.h), right after the partitions: the WAL the slot retains,
 * its wal_status, whether outbox rows were committed in WAL the stream
 * has not read yet, and (about every 10 s) whether the slot is
 * failover-ready (failover.h).
 *
 * That last one is what tells a quiet outbox from a stalled stream (a
 * walsender that sends nothing): the outbox table's insert counter (the
 * statistics of it and its partitions) is read, then the server's current
 * WAL position. When the counter grew since the previous reading, the rows
 * it counts were committed before that position, which is kept as a mark
 * with the time it was first seen. A mark is dropped once the stream has
 * read up to it (the relay's position: every record and keepalive before
 * it was received, so its events are the relay's to track) or the slot has
 * confirmed past it. The oldest mark left says since when rows wait unread.
 * The counter also counts rows of transactions that rolled back: their
 * marks go as soon as the stream passes them. Rows committed while outboxd
 * was down, and logical messages, are seen only once the stream reads them.
 */
#ifndef OUTBOXD_SLOTWATCH_H
#define OUTBOXD_SLOTWATCH_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/failover.h"
#include "outboxd/lsn.h"
#include "outboxd/pgrepl.h"

/* Marks kept at most; past that, every second one after the oldest goes
 * (a later mark covers the rows of a dropped one, so only the age of the
 * oldest rows is underestimated, never whether rows wait). */
#define OB_SLOTWATCH_MARKS 32

typedef struct ob_slotwatch_mark {
	ob_lsn lsn;      /* rows were committed before this position */
	int64_t seen_us; /* when the counter was first seen grown (µs since the epoch) */
} ob_slotwatch_mark;

typedef struct ob_slotwatch {
	bool counted;    /* inserts holds a reading */
	int64_t inserts; /* the outbox's insert counter at the latest reading */
	ob_slotwatch_mark marks[OB_SLOTWATCH_MARKS]; /* oldest first */
	size_t n_marks;
	bool failing;    /* the latest reading failed (logged once) */
	int64_t next_ms; /* when the next reading is due (at most one a second) */
	/* Whether the slot survives a promotion (failover.h), read about
	 * every 10 s: the latest verdict, and when the next reading is due. */
	bool failover_read;
	ob_failover_verdict failover;
	int64_t next_failover_ms;
} ob_slotwatch;

void ob_slotwatch_init(ob_slotwatch *w);
/* Read the slot on p (a plain connection; nothing is done when it is
 * NULL, or when the last reading is less than a second old) and hand what
 * it says to metrics.h; read_lsn is the position the
 * stream has read up to. A failed reading is logged, once while failures
 * last, and leaves the metrics as they were. */
void ob_slotwatch_poll(ob_slotwatch *w, ob_pgconn *p, const ob_config *cfg, ob_lsn read_lsn);

#endif
