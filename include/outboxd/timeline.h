/*
 * timeline.h: where a promoted server's history left the stream's
 * (README, "Failover"), and how many events were handed over past it.
 *
 * A standby promoted to primary starts a new timeline at a switch point:
 * the end of the WAL it had received. When it lagged, the old primary's
 * WAL past that point (which outboxd may have read, published and even
 * confirmed) is not on the new timeline; the new timeline's own commits
 * take those positions instead. fork.h decides from the switch point what
 * the stream must read again; this module holds the pure parts: reading a
 * timeline history file, and a bounded record of how many events had been
 * handed over by the end of each recent transaction with events, so that
 * the events past a switch point can be counted.
 *
 * Pure bookkeeping: no I/O, no logging.
 */
#ifndef OUTBOXD_TIMELINE_H
#define OUTBOXD_TIMELINE_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* Transactions with events remembered, at most (16 bytes each). */
#define OB_TIMELINE_MARKS_MAX 65536

/* By the end of the transaction committed at end_lsn, handed events had
 * been handed over in all. */
typedef struct ob_timeline_mark {
	ob_lsn end_lsn;
	uint64_t handed;
} ob_timeline_mark;

typedef struct ob_timeline {
	int tli; /* the timeline streamed from last; 0 before the first stream */
	/* A ring of the latest marks, oldest at first, len of them. */
	ob_timeline_mark *marks;
	size_t cap, first, len;
	bool forgot; /* a mark was dropped to make room */
} ob_timeline;

void ob_timeline_init(ob_timeline *tl);
void ob_timeline_free(ob_timeline *tl);

/* A transaction with events committed at end_lsn; handed counts every
 * event handed over so far (never decreases). The oldest mark goes when
 * OB_TIMELINE_MARKS_MAX are kept. */
void ob_timeline_committed(ob_timeline *tl, ob_lsn end_lsn, uint64_t handed);

/* Events handed over in transactions ending past lsn (and in a transaction
 * cut off unfinished), of handed_now handed over in all. *exact is false
 * when the marks no longer reach back to lsn: the count is then a lower
 * bound. The marks past lsn are forgotten (those transactions are not on
 * the timeline the stream goes on with). */
uint64_t ob_timeline_forget_after(ob_timeline *tl, ob_lsn lsn, uint64_t handed_now, bool *exact);

/* The stream is read again from lsn with a new producer, handed events
 * handed over in all so far: the marks past lsn are forgotten, and what is
 * handed over again from there counts from handed, not twice. */
void ob_timeline_rebase(ob_timeline *tl, ob_lsn lsn, uint64_t handed);

/* The position where timeline tli ended, from the text of a later
 * timeline's history file (TIMELINE_HISTORY: lines "parent-tli
 * switch-point reason", one per ancestor). False when tli is not one of
 * its ancestors or the text does not parse. */
bool ob_timeline_switch_point(const char *history, int tli, ob_lsn *switch_point) OB_MUST_CHECK;

#endif
