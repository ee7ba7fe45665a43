/*
 * recpoint.h: the recovery point (deploy/README.md, "The recovery
 * point"): a transaction id H such that every outbox row not yet
 * published was written by a transaction whose id is H or later. With it
 * the outbox table alone finds every such row when the slot is lost.
 *
 * How it is found. A candidate is taken in one statement: the xmin of a
 * fresh snapshot (every transaction with a lower id had ended when it was
 * taken), then the server's WAL insert position L. PostgreSQL inserts a
 * transaction's commit record before the transaction leaves the proc
 * array, so every transaction that ended before the snapshot committed
 * below L, and every transaction that commits at or past L has an id of
 * xmin or more; so have its subtransactions, whose ids come after their
 * parent's. The candidate becomes the recovery point once the stream has
 * confirmed L, that is once the broker acknowledged every event of the
 * transactions committed below L: from then on, a row not yet published
 * belongs to a transaction that commits at or past the confirmed
 * position, so at or past L, so with an id of H or more. A point is never
 * taken from an unconfirmed candidate, and lowering it is always safe (it
 * only makes a recovery publish more rows again). tests/unit/
 * test_recpoint.c checks the rule against a model of the server's
 * transactions, and that the model catches the rule broken.
 *
 * This module is the rule alone, with no I/O: recpointdb.h takes the
 * candidates and stores the point in the slot's row of outboxd_slots, at
 * most every OB_RECPOINT_INTERVAL_MS, never per event.
 */
#ifndef OUTBOXD_RECPOINT_H
#define OUTBOXD_RECPOINT_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* How often a candidate is taken (and so at most how often the point is
 * stored). */
#define OB_RECPOINT_INTERVAL_MS 5000

typedef struct ob_recpoint {
	uint64_t stored_xid; /* the point stored last (0: none yet) */
	bool have_cand;      /* a candidate waits for the stream to confirm cand_lsn */
	uint64_t cand_xid;
	ob_lsn cand_lsn;
	uint64_t own_xid;    /* the transaction that stored the point last (0: none) */
	int64_t next_ms;     /* when the next candidate is due */
	int64_t interval_ms; /* OB_RECPOINT_INTERVAL_MS (tests shorten it) */
} ob_recpoint;

typedef enum ob_recpoint_step {
	OB_RECPOINT_WAIT,    /* nothing to do now */
	OB_RECPOINT_CAPTURE, /* take a candidate: ob_recpoint_captured() */
	OB_RECPOINT_STORE,   /* store cand_xid: ob_recpoint_stored() */
} ob_recpoint_step;

/* A point with nothing known, taken every OB_RECPOINT_INTERVAL_MS: the
 * first candidate is due at once. Called
 * again for each stream, since a candidate's position belongs to the
 * server it was taken on. */
void ob_recpoint_init(ob_recpoint *rp);
/* What to do now, with confirmed the position the stream has confirmed
 * (ob_tableset_confirmable()). A confirmed candidate is stored unless
 * the point would not move, or would pass nothing but the update that
 * stored the point last (the stored point covered every id before that
 * update's, and the candidate is the id right after it): storing it
 * would take another transaction id, and so on every interval on an idle
 * server. */
ob_recpoint_step ob_recpoint_next(ob_recpoint *rp, ob_lsn confirmed, int64_t now_ms);
/* A candidate was taken: snapshot xmin xmin, then insert position lsn. */
void ob_recpoint_captured(ob_recpoint *rp, uint64_t xmin, ob_lsn lsn, int64_t now_ms);
/* The candidate was stored, by transaction own_xid (0 when the row
 * already held a point as far: nothing was written). */
void ob_recpoint_stored(ob_recpoint *rp, uint64_t own_xid, int64_t now_ms);
/* Taking or storing the candidate failed (logged by the caller): try
 * again an interval later. */
void ob_recpoint_failed(ob_recpoint *rp, int64_t now_ms);

/* The outbox.backlog_where that selects the rows a recovery from point
 * xid publishes, into buf: the rows whose xmin (a row keeps its
 * transaction id modulo 2^32, frozen or not) lies in the 2^31 ids from
 * xid on. Exact while fewer than 2^31 ids were handed out since xid
 * (ob_recpoint_exact()); a row older than that window can alias into it
 * and be published again: a duplicate, never a loss. */
void ob_recpoint_backlog_where(uint64_t xid, char *buf, size_t size);
/* Whether that condition is exact with next_xid the next transaction id
 * of the server (pg_snapshot_xmax(pg_current_snapshot())). */
bool ob_recpoint_exact(uint64_t xid, uint64_t next_xid);

#endif
