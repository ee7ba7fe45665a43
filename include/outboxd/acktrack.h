/*
 * acktrack.h: which WAL position may be confirmed.
 *
 * A FIFO of the transactions handed to the producer, in commit order, each
 * with its commit end LSN and the number of its events the broker has not
 * acknowledged yet. The confirmable LSN is the end LSN of the longest prefix
 * of committed transactions whose counts are all zero; delivery reports may
 * arrive in any order across partitions and only ever shrink counts.
 *
 * With nothing in flight and no transaction open, the confirmable LSN is
 * the WAL end of the server's latest keepalive: every change before it was
 * already received, so confirming it lets an idle slot release WAL.
 *
 * Transactions are named by a sequence number that stays valid while the
 * FIFO grows; it is what delivery reports carry back.
 */
#ifndef OUTBOXD_ACKTRACK_H
#define OUTBOXD_ACKTRACK_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"
#include "outboxd/position.h"

typedef struct ob_acktrack_txn {
	ob_lsn end_lsn;    /* LSN it confirms; 0 while open and when abandoned */
	ob_pos unit;       /* the position it was opened with (position.h) */
	int64_t commit_us; /* commit time (µs), for publish latency */
	uint64_t pending;  /* events handed over and not yet acknowledged */
	bool committed;    /* all its events were handed over */
} ob_acktrack_txn;

typedef struct ob_acktrack {
	ob_acktrack_txn *ring; /* owned; capacity is a power of two */
	size_t cap;
	uint64_t head_seq; /* sequence number of ring's oldest entry */
	uint64_t tail_seq; /* one past the newest */
	bool open;         /* the newest entry is an open transaction */
	ob_lsn confirmable;
	ob_lsn idle_lsn;   /* the latest keepalive WAL end */
	uint64_t inflight; /* events handed over and not acknowledged, all txns */
} ob_acktrack;

/*
 * A record's tag, which its delivery report carries back (producer.h):
 * its transaction's sequence number, its index in the transaction and
 * what kind of record it is. Only the low OB_TAG_SEQ_BITS of the sequence
 * number travel; ob_tag_decode() rebuilds the rest from the tracker's
 * oldest entry, since far fewer transactions are ever tracked at once. An
 * index past OB_TAG_INDEX_MAX saturates there. Pure functions.
 */
#define OB_TAG_KIND_BITS  2
#define OB_TAG_INDEX_BITS 31
#define OB_TAG_SEQ_BITS   31
#define OB_TAG_INDEX_MAX  ((UINT64_C(1) << OB_TAG_INDEX_BITS) - 1)

typedef enum ob_record_kind {
	OB_RECORD_EVENT,            /* an outbox event */
	OB_RECORD_DLQ,              /* a dead-letter record */
	OB_RECORD_DLQ_HEADERS_ONLY, /* a dead-letter record that did not fit, cut down */
} ob_record_kind;

typedef struct ob_record_tag {
	uint64_t seq;
	uint64_t index;
	ob_record_kind kind;
} ob_record_tag;

uint64_t ob_tag_encode(uint64_t seq, uint64_t index, ob_record_kind kind);
/* The tag's fields; head_seq is the tracker's oldest sequence number
 * (ob_acktrack.head_seq), at or below the tagged one. */
ob_record_tag ob_tag_decode(uint64_t tag, uint64_t head_seq);

/* Start tracking from start_lsn (the position already confirmed). */
void ob_acktrack_init(ob_acktrack *t, ob_lsn start_lsn);
void ob_acktrack_free(ob_acktrack *t);
/* Forget everything in flight (the producer that held it is gone) and
 * start again from the confirmable position, which first advances over
 * every transaction acknowledged so far (reports served while the
 * producer was being destroyed count). */
void ob_acktrack_reset(ob_acktrack *t);

/* Open a unit (a transaction, a standalone message or the backlog) at
 * position unit (position.h) committed at commit_us (µs since the epoch);
 * returns its sequence number. Only one is open, and it confirms nothing
 * until its commit. */
uint64_t ob_acktrack_begin(ob_acktrack *t, ob_pos unit, int64_t commit_us);
/* Count one more event of the open transaction seq. */
void ob_acktrack_add(ob_acktrack *t, uint64_t seq);
/* Close unit seq, which confirms end_lsn (a transaction's commit end, a
 * message's record end: position.h): all its events were handed over. */
void ob_acktrack_commit(ob_acktrack *t, uint64_t seq, ob_lsn end_lsn);
/* A transaction ending at end_lsn committed without events (wal2json
 * filtered all its changes out). It takes no entry: with nothing in flight
 * it is confirmable at once; otherwise the newest committed entry's end
 * moves up to it, since confirming that entry confirms this one too. Only
 * after an abandoned entry (which confirms nothing) does it need its own. */
void ob_acktrack_empty(ob_acktrack *t, ob_lsn end_lsn);
/* Abandon the open transaction seq; its events stay counted, so nothing
 * after it is confirmed until they are acknowledged. Used when the stream
 * breaks mid-transaction. */
void ob_acktrack_abort(ob_acktrack *t, uint64_t seq);
/* One event of transaction seq was acknowledged (or dead-lettered). */
void ob_acktrack_ack(ob_acktrack *t, uint64_t seq);
/* The stream is read again from lsn with more tables than before (a
 * partition wal2json was not told about): a transaction ending after lsn
 * may have had events that were never read, so none of those confirms its
 * end any more. Their entries stay, and their events, still in flight,
 * hold back every later transaction until acknowledged; the confirmable
 * LSN drops to lsn when it is above it, and the latest keepalive is
 * forgotten. No transaction may be open. */
void ob_acktrack_rewind(ob_acktrack *t, ob_lsn lsn);
/* The position unit seq was opened with (its own, even when empty
 * transactions after it were merged into its entry) and its commit time;
 * false if it is no longer tracked. */
bool ob_acktrack_txn_info(ob_acktrack *t, uint64_t seq, ob_pos *unit, int64_t *commit_us);
/* A keepalive said the server's WAL ends at wal_end. */
void ob_acktrack_keepalive(ob_acktrack *t, ob_lsn wal_end);

/* The highest LSN that may be confirmed now. Never decreases, except by
 * ob_acktrack_rewind(). It also
 * removes the acknowledged prefix of the FIFO: the sequence numbers of
 * those transactions are no longer tracked afterwards. */
ob_lsn ob_acktrack_confirmable(ob_acktrack *t);
/* Events handed over and not yet acknowledged. */
uint64_t ob_acktrack_inflight(const ob_acktrack *t);

#endif
