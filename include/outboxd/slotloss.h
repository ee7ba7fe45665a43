/*
 * slotloss.h: what was lost when the slot was, and whether the outbox
 * table alone can give it back (deploy/README.md, "Recovering from a lost
 * or invalidated slot").
 *
 * A recovery publishes again every outbox row past the recovery point
 * (recpoint.h) visible in a new slot's snapshot. That finds every event
 * not yet published only while the table still holds them all as rows
 * past the point: not when no point was stored, nor one stored on another
 * system (its transaction ids mean nothing here), nor once 2^31 ids have
 * passed since it (a row's xmin is kept modulo 2^32), nor when events are
 * written as logical messages (outbox.message_prefix: not rows at all),
 * nor when rows of the table were deleted by anyone but outboxd (rows of
 * unpublished events may be among them; an insert-then-delete outbox keeps
 * none), nor when the statistics that count those deletes were reset
 * (pg_stat_reset()) since the point was stored, nor when a leaf of the
 * table was truncated (or rewritten: the two look alike), dropped or
 * detached since it. When
 * any of these holds, a recovery would guess: the slot is not recovered,
 * and the reason is said instead.
 *
 * The judgment alone, with no I/O: recpointdb.h reads the facts,
 * slotrecover.h acts on them, `check` prints them.
 */
#ifndef OUTBOXD_SLOTLOSS_H
#define OUTBOXD_SLOTLOSS_H

#include "outboxd/common.h"

/* How the slot was lost: the label of outboxd_slot_recoveries_total. */
typedef enum ob_slot_loss {
	OB_SLOT_LOSS_NONE = 0,
	OB_SLOT_LOSS_MISSING,     /* gone while its marker row is there (dropped, a restore) */
	OB_SLOT_LOSS_INVALIDATED, /* wal_status lost: max_slot_wal_keep_size, 18's idle timeout */
	OB_SLOT_LOSS_PROMOTED,    /* gone on a server promoted while this process streamed */
	OB_SLOT_LOSS_UNDECODABLE, /* its stream fails at one change (ob_slotloss_undecodable) */
	OB_SLOT_LOSS_KINDS
} ob_slot_loss;

/* The label's word ("missing", ...); "" for OB_SLOT_LOSS_NONE. */
const char *ob_slot_loss_name(ob_slot_loss loss);

/* What the server says of the slot's recovery point. */
typedef struct ob_recovery_facts {
	bool has_point;       /* a point is stored in the slot's row */
	bool other_system;    /* ... by another PostgreSQL system */
	uint64_t xid;         /* the point */
	uint64_t next_xid;    /* the server's next transaction id */
	bool messages;        /* events came as logical messages, and still may */
	bool deletes_seen;    /* rows were deleted between two stored points */
	char deletes_at[40];  /* ... last seen then (text) */
	int64_t deletes_past; /* rows deleted since the point was stored (-1: unknown) */
	/* When the database's statistics were reset (pg_stat_reset(),
	 * pg_stat_reset_single_table_counters()) after the point was stored
	 * (text; "": not): deletes_past then misses the deletes before the
	 * reset. A count started again by a crash or on a promoted standby
	 * leaves no such time, and is taken as it is (deletes_past -1). */
	char stats_reset_at[40];
	/* The outbox table's leaves truncated or rewritten since the point
	 * ("": none): a TRUNCATE counts in no statistics, and a cleanup job
	 * that truncates takes rows of events not yet published with it. */
	char rewritten[160];
	/* The leaves the point's candidate saw that are leaves of the table
	 * no more ("": none): a partition dropped or detached, the table
	 * dropped and made again; their rows are in no table a recovery
	 * reads, and in no count of deleted rows. */
	char dropped[256];
} ob_recovery_facts;

/* Whether a server error (SQLSTATE state, message msg) met again and
 * again at one stream position says the slot cannot be decoded: a
 * PostgreSQL bug of new slots (15 to 18 at least). Rebuilding its catalog
 * view from the WAL after its creation point, the snapshot builder misses
 * a transaction that committed early in that WAL, while the slot was
 * being made, and had given a relation a new file (a TRUNCATE, a new
 * partition, a table rewrite); the first later change of that relation
 * before the builder's horizon passes it fails ("could not map filenode
 * ... to relation OID", XX000; "filenumber" from 16 on). Every session
 * rebuilds the same view from the same WAL, so the slot never gets past
 * it: it is dead, and is recovered as lost. The server's message must be in English (its
 * lc_messages); another language halts as any repeated error does. */
bool ob_slotloss_undecodable(const char *state, const char *msg);

/* Whether a recovery from f would publish every event not yet
 * published; when not, why into why (a clause: "no recovery point was
 * stored ..."). */
bool ob_slotloss_recoverable(const ob_recovery_facts *f, char *why, size_t size);

#endif
