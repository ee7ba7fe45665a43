/*
 * retention.h: outboxd deletes the outbox rows it no longer needs
 * (deploy/README.md, "Retention"), in place of an insert-then-delete
 * outbox or a cleanup job.
 *
 * With outbox.retention set, a row is deleted once it is both older than
 * the retention (by outbox.timestamp_column) and published: behind the
 * slot's stored recovery point (recpoint.h), so that a recovery never
 * needs it. The point is read in the DELETE itself, from the slot's row.
 * Deletes run on the stream's plain connection, leaf table by leaf table,
 * in batches of OB_RETENTION_BATCH rows, each a transaction of outboxd's
 * own upkeep (pgsql.h: a lock waits at most 1 s). The rows a batch will
 * delete are first added to the slot row's deletes_own in a transaction
 * of their own, and what it did not delete is given back in its own, so
 * the deleted-rows check of a recovery (slotloss.h) tells outboxd's
 * deletes from anyone else's, also those of a batch that was aborted
 * (which the statistics count too). A pass deletes
 * for at most OB_RETENTION_PASS_MS; the next comes a second later while
 * batches come back full, else OB_RETENTION_IDLE_MS later. Nothing runs
 * on a hot standby or without a point.
 */
#ifndef OUTBOXD_RETENTION_H
#define OUTBOXD_RETENTION_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgsql.h"
#include "outboxd/recpointdb.h"

#define OB_RETENTION_BATCH   1000
#define OB_RETENTION_PASS_MS 200
#define OB_RETENTION_IDLE_MS 60000

typedef struct ob_retention {
	int64_t next_ms;     /* when the next pass is due */
	int64_t idle_ms;     /* OB_RETENTION_IDLE_MS (tests shorten it) */
	bool failing;        /* the latest pass failed (logged once) */
	uint64_t unreported; /* rows deleted since the last log line */
	int64_t reported_ms; /* when that line was written */
} ob_retention;

void ob_retention_init(ob_retention *rt);
/* A pass on p when due and retention is on, once rp keeps the point.
 * A failure is logged once while failures last; the next pass comes
 * OB_RETENTION_IDLE_MS later. */
void ob_retention_poll(ob_retention *rt, ob_pgconn *p, const ob_config *cfg,
		       const ob_recpointdb *rp);

#endif
