/*
 * slotrecover.h: a lost slot recovered from the outbox table
 * (deploy/README.md, "Recovering from a lost or invalidated slot").
 *
 * With postgres.on_slot_lost = recover, a slot found lost (slotprep.h,
 * cutover.h: missing while its marker row is there or after streaming
 * from it, invalidated, gone on a promoted server) is recovered: when the
 * recovery point proves that the table holds every event not yet
 * published (slotloss.h), an invalidated slot is dropped and the cutover
 * (cutover.h) publishes the rows past the point in a new temporary slot's
 * snapshot, waits for the broker's acknowledgement of them all, and only
 * then makes the permanent slot at that snapshot's consistent point. Rows
 * committed after it are in the new slot's stream. Events published
 * before among those rows are published again: duplicates, never a loss.
 * A crash at any step leaves the slot missing and its marker row and
 * point in place, so the next start recovers again from the same point.
 * When the point proves nothing, outboxd halts and says why.
 */
#ifndef OUTBOXD_SLOTRECOVER_H
#define OUTBOXD_SLOTRECOVER_H

#include "outboxd/cutover.h"
#include "outboxd/outcome.h"

/* Recover the slot c->lost says was lost (and clear it). OB_OUTCOME_LOST
 * when the slot was made here: the stream connects at once;
 * OB_OUTCOME_RETRY when a slot is there that this process did not make
 * (another process made it meanwhile, or the invalidated one is still
 * held): the next connection comes after a backoff; OB_OUTCOME_HALT (logged, naming
 * why and the recovery by hand) when the table cannot prove completeness;
 * otherwise what the cutover's attempt ended with. */
ob_outcome ob_slotrecover_run(ob_cutover *c);
/* The stream failed times times in a row at position at with the server
 * error state, msg: the recovery of an undecodable slot (slotloss.h) when
 * postgres.on_slot_lost = recover (its outcome as ob_slotrecover_run());
 * otherwise OB_OUTCOME_HALT, logged. */
ob_outcome ob_slotrecover_stuck(ob_cutover *c, const char *state, const char *msg, ob_lsn at,
				int times);
/* During the recovery of c->recovering, once its backlog is acknowledged
 * and before the slot is made: whether the table still proves
 * completeness, judged again (rows deleted, a TRUNCATE, a reset of the
 * statistics since the point may have come while the recovery waited for
 * its snapshot, and a row deleted before the snapshot is in neither the
 * backlog nor the stream). It judges no sooner than the statistics
 * report a delete committed before the snapshot (a backend holds its
 * counts back for up to 10 s), waiting with the producer served.
 * False with *out set: OB_OUTCOME_HALT (logged, as the first judgment;
 * no slot is made), OB_OUTCOME_STOP when a stop came during the wait, or
 * OB_OUTCOME_RETRY on a failed query. A delete after the snapshot halts
 * too: the two look alike. */
bool ob_slotrecover_recheck(ob_cutover *c, ob_outcome *out) OB_MUST_CHECK;

#endif
