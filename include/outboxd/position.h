/*
 * position.h: the one naming rule for what the stream hands over, and what
 * each thing confirms.
 *
 * The slot hands outboxd three kinds of unit: transactions (Begin ... Commit,
 * with either decoder), standalone logical messages (non-transactional,
 * outside any transaction), and, when outboxd creates its slot with a
 * backlog, the backlog (the table's rows in the slot's snapshot). Idle
 * keepalives hand nothing over; they only confirm. Replay (replay.h) must
 * tell whether a unit read again was already handed to the producer, and
 * the ack tracker (acktrack.h) what may be confirmed once it is
 * acknowledged. Both compare units by their ob_pos, made here and only
 * here.
 *
 * The Postgres facts the rule rests on (checked on PostgreSQL 15-18 with
 * wal2json 2.5 and pgoutput):
 *
 * 1. A restarted stream skips a transaction whose commit record STARTS
 *    before the confirmed position, and a standalone message whose record
 *    STARTS before it (logical decoding's SnapBuildXactNeedsSkip on the
 *    record's start). Everything else is sent again.
 * 2. Both decoders say where a transaction's commit record starts, at its
 *    Begin: pgoutput's Begin final_lsn, wal2json's B "lsn" (with
 *    include-lsn). Its end (what to confirm) comes with the commit:
 *    pgoutput's Commit end_lsn, wal2json's C "nextlsn".
 * 3. Both decoders give a logical message the LSN where its record ENDS.
 *    When a commit record directly follows it (a message emitted right
 *    before a COMMIT, or a heartbeat of another tool), that end is exactly
 *    the next transaction's commit start. Its own start is not reported.
 * 4. Confirmed positions that outboxd sends are record boundaries (commit
 *    ends, message ends, a keepalive's WAL end), never inside a record.
 *
 * The rule: a unit's position is twice the LSN that places it, plus one
 * for a transaction: a transaction at 2 * commit_start + 1, a standalone
 * message at 2 * record_end. Units then sort in stream order and never
 * collide: a message that ends where a commit record starts sorts just
 * before that transaction. A standalone message confirms its record end
 * (not one past it: that would pass the next commit's start and skip that
 * transaction on a restart, fact 1); a transaction confirms its commit
 * end.
 *
 * ob_pos_bound(C) is the last position a stream started at confirmed
 * position C does not send again: a transaction is sent again exactly when
 * commit_start >= C, that is when its position > 2C; a message exactly
 * when its start >= C, which by fact 4 means record_end > C, that is when
 * its position > 2C. The same bound serves any verified WAL position V
 * (a record boundary read from the server): the units wholly before V are
 * those at or below ob_pos_bound(V).
 *
 * The backlog is placed at 2 * consistent_point: the slot streams only
 * what starts at or after its consistent point, so every streamed unit
 * sorts after it.
 */
#ifndef OUTBOXD_POSITION_H
#define OUTBOXD_POSITION_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* A unit's place in the stream (see above); compare with <, ==, >. */
typedef uint64_t ob_pos;

/* A transaction whose commit record starts at commit_start. */
ob_pos ob_pos_txn(ob_lsn commit_start);
/* A standalone logical message whose record ends at record_end. */
ob_pos ob_pos_message(ob_lsn record_end);
/* The backlog published from a slot whose consistent point is consistent. */
ob_pos ob_pos_backlog(ob_lsn consistent);
/* The last position a stream started at lsn does not send again (lsn a
 * confirmed or verified WAL position, a record boundary). */
ob_pos ob_pos_bound(ob_lsn lsn);
/* The LSN that places pos: a transaction's commit start, a message's
 * record end, the backlog's consistent point. For logs and the
 * source-lsn header, never for comparisons. */
ob_lsn ob_pos_lsn(ob_pos pos);
/* What a standalone message confirms once handled: its record end. */
ob_lsn ob_pos_message_confirms(ob_lsn record_end);

#endif
