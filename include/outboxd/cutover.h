/*
 * cutover.h: the backlog cutover, run before the first stream on
 * connections of its own (README, "Publishing existing rows").
 *
 * When the slot is missing, outboxd may create it, and
 * outbox.backlog_where is set (or `outboxd slot create` runs): check the
 * predicate (a refused one is a configuration error, found before any slot
 * exists), create a temporary slot exporting its snapshot, publish the
 * outbox rows the predicate selects in that snapshot (backlog.h) as one
 * unit known by the slot's consistent point, wait until the broker
 * acknowledged them all, and only then copy the temporary slot into the
 * permanent one. Until the copy nothing outlives this process: a crash
 * leaves no slot, and the next start publishes the backlog again. The
 * stream then starts at the slot's own confirmed position.
 *
 * A lost slot's recovery (slotrecover.h) runs the same steps, with the
 * rows past the recovery point as the backlog.
 *
 * It shares only "hand over, settle" with the stream (delivery.h), as
 * pg_recvlogical calls streamutil.c's slot set-up before its loop.
 */
#ifndef OUTBOXD_CUTOVER_H
#define OUTBOXD_CUTOVER_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/delivery.h"
#include "outboxd/outcome.h"
#include "outboxd/slotloss.h"

typedef struct ob_cutover {
	const ob_config *cfg;
	ob_deliveries *deliveries; /* not owned */
	bool create_only;          /* `slot create`: create the slot even without create_slot */
	ob_lsn backlog_end;        /* the consistent point of the latest attempt (0: none) */
	/* The loss the backlog recovers from (slotrecover.h; OB_SLOT_LOSS_NONE:
	 * not a recovery): once its rows are acknowledged, the table is
	 * judged again (ob_slotrecover_recheck()) before the slot is made. */
	ob_slot_loss recovering;
	int64_t snapshot_ms; /* when the latest attempt's snapshot was taken (monotonic) */
	ob_slot_loss lost;   /* a lost slot to recover, found by the stream or here */
	uint64_t published;  /* rows of the latest backlog acknowledged */
} ob_cutover;

void ob_cutover_init(ob_cutover *c, const ob_config *cfg, ob_deliveries *d, bool create_only);
/* Publish the backlog and create the slot, when the slot is missing and
 * outboxd may create it. *created says whether the slot was created here;
 * true also when there was nothing to do, or when another process created
 * the slot meanwhile (*created false). False with *out set when this
 * connection attempt ends (a failed copy is tried again with backoff while
 * the temporary slot lives; once it is gone, the next attempt publishes
 * the backlog again). A slot lost that postgres.on_slot_lost = recover
 * lets outboxd recover is not replaced here: false with c->lost set, for
 * the caller to run the recovery instead (its rows, not backlog_where's). */
bool ob_cutover_run(ob_cutover *c, bool *created, ob_outcome *out) OB_MUST_CHECK;

#endif
