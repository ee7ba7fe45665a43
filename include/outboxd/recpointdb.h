/*
 * recpointdb.h: the recovery point (recpoint.h) on the server.
 *
 * It lives in columns of the slot's row in outboxd_slots
 * (slotmark.h), which travels with the database through physical
 * replication and backups:
 *
 *   recovery_xid  xid8         the point: every outbox row not yet
 *                              published was written by a transaction
 *                              with this id or a later one
 *   recovery_lsn  pg_lsn       the WAL insert position its candidate was
 *                              taken at (the stream had confirmed it)
 *   recovery_at   timestamptz  when it was stored
 *   recovery_system text       the system identifier of the server it was
 *                              stored on (a physical standby or a backup
 *                              keeps it; a logical copy or a restored dump,
 *                              whose rows other transactions wrote again,
 *                              does not: the point means nothing there)
 *   deletes_counted bigint     the outbox table's deleted rows as the
 *                              statistics counted them from an epoch on
 *   deletes_own bigint         the rows outboxd's retention deleted since
 *                              (retention.h)
 *   deletes_seen_at timestamptz when the statistics were last found to
 *                              count more: rows are deleted by someone
 *                              else (slotloss.h); an operator clears it
 *                              once they no longer are
 *   messages_seen_at timestamptz when the stream last handed over an event
 *                              that came as a logical message (not a row)
 *   recovery_leaves oid[]      the outbox table's leaves when the point's
 *                              candidate was taken (the table itself when
 *                              not partitioned): one gone since was
 *                              dropped or detached with its rows
 *
 * ob_recpointdb_poll() runs on the stream's plain connection
 * (partitions.h), after the slot's reading (slotwatch.h): it takes a
 * candidate every OB_RECPOINT_INTERVAL_MS and stores it once the stream
 * confirmed its position, in an UPDATE that never lowers a stored point.
 * A table made before the point existed gets the columns from outboxd
 * when its role owns the table; otherwise outboxd warns once, naming the
 * statements for the owner, and streams on without a point. A slot
 * without a row (one outboxd could not write) has no point either.
 */
#ifndef OUTBOXD_RECPOINTDB_H
#define OUTBOXD_RECPOINTDB_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgsql.h"
#include "outboxd/recpoint.h"
#include "outboxd/slotloss.h"

typedef struct ob_recpointdb {
	ob_recpoint rule;
	bool checked;           /* the columns and the UPDATE privilege were looked at */
	bool usable;            /* ... and are there */
	bool failing;           /* the latest statement failed (logged once) */
	long long cand_deletes; /* the outbox table's deleted rows when the candidate was taken */
	char cand_reset[64];    /* ... and when the statistics were last reset then ("": never) */
	char *cand_leaves;      /* ... and the table's leaves then (an oid[] in text) */
	bool messages_seen;     /* an event came as a logical message since the last store */
} ob_recpointdb;

/* For each stream: a candidate belongs to the server it was taken on.
 * r is zeroed or was initialized before. */
void ob_recpointdb_init(ob_recpointdb *r);
/* What r holds, freed. */
void ob_recpointdb_free(ob_recpointdb *r);
/* Take or store the point on p when due (nothing when p is NULL);
 * confirmed is the position the stream has confirmed. A failure is
 * logged once while failures last and tried again an interval later. */
void ob_recpointdb_poll(ob_recpointdb *r, ob_pgconn *p, const ob_config *cfg, ob_lsn confirmed);
/* The stream handed over an event that came as a logical message: the
 * next stored point records it (slotloss.h). */
void ob_recpointdb_saw_message(ob_recpointdb *r);
/* The `recovery point` line of `check` and `slot status`, into line:
 * the point, where and when it was taken, or why there is none.
 * OB_PG_FATAL when it cannot be kept (the columns are missing or the role
 * may not update them: line names the statements) or was stored on
 * another system; OB_PG_RETRY (logged) when a query failed. */
ob_pg_status ob_recpointdb_describe(ob_pgconn *p, const ob_config *cfg, char *line, size_t size);
/* The facts of the slot's point that decide whether a recovery can be
 * complete (slotloss.h) into *f: f->has_point is false when no point is
 * kept. OB_PG_RETRY (logged) when a query failed. */
ob_pg_status ob_recpointdb_facts(ob_pgconn *p, const ob_config *cfg, ob_recovery_facts *f);
/* The statements that add the columns to a table made before them, and
 * let role update them; the caller frees. */
char *ob_recpointdb_setup_sql(const ob_config *cfg, const char *role);

#endif
