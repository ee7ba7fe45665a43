/*
 * tableset.h: the tables the stream reads, and so what it may confirm
 * (README, "Partitioned outbox tables").
 *
 * With wal2json each stream reads the outbox table and the leaf
 * partitions named when it started (add-tables, partitions.h); with
 * pgoutput, the publication. Both are read again about every second while
 * the stream runs, on a plain connection of their own, with the slot right
 * after them (slotwatch.h). The ceiling is the verified position of the
 * latest set the stream's tables cover: nothing above it is confirmed or
 * streamed from, whatever the acknowledgements say
 * (ob_tableset_confirmable(): "what may I confirm?"). A set with a leaf
 * the stream does not read (a partition created or attached, a plain table
 * replaced by a partitioned one) ends the stream (OB_OUTCOME_REFILTER);
 * the next stream reads it, and what was read after the ceiling is read
 * and handed over again. A changed publication halts: pgoutput decodes
 * each change with the publication of its time, so rows written while it
 * left the outbox out are never sent. So does a table of the outbox that
 * turned UNLOGGED (tableprops.h), for either decoder. With a partitioned table and
 * wal2json, no event is handed over above the ceiling
 * (ob_tableset_cover()), so reading again never publishes an earlier
 * transaction's events after a later one's.
 *
 * Like RelationSyncEntry in PostgreSQL's pgoutput.c, it is the stream's
 * one answer to "which tables, as of which position".
 */
#ifndef OUTBOXD_TABLESET_H
#define OUTBOXD_TABLESET_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/delivery.h"
#include "outboxd/leafset.h"
#include "outboxd/outcome.h"
#include "outboxd/partitions.h"
#include "outboxd/pgrepl.h"
#include "outboxd/recpointdb.h"
#include "outboxd/retention.h"
#include "outboxd/slotwatch.h"

typedef struct ob_tableset {
	const ob_config *cfg;
	ob_deliveries *deliveries; /* its ack tracker and replay; not owned */
	/* The tables the stream reads (wal2json's add-tables), kept after it
	 * ends to compare the next stream's with, and the latest set read. */
	ob_leafset tables;
	bool have_tables;
	ob_leafset latest;
	ob_lsn ceiling;    /* see above; OB_TABLESET_NO_CEILING before the first stream */
	ob_lsn events_end; /* what the latest unit with events confirms */
	bool halted;       /* a read halted the stream (logged) */
	ob_partwatch watch;
	ob_slotwatch slots;     /* the slot as the server sees it, read after the set */
	ob_recpointdb recpoint; /* kept after the slot's reading */
	ob_retention retention; /* after the point, which it deletes behind */
} ob_tableset;

/* The ceiling before the first stream read its tables (the backlog). */
#define OB_TABLESET_NO_CEILING UINT64_MAX

/* tick runs while the reads wait for the server. */
void ob_tableset_init(ob_tableset *ts, const ob_config *cfg, ob_deliveries *d,
		      ob_pgsql_tick_fn tick, void *tick_ctx);
void ob_tableset_free(ob_tableset *ts);

/* The highest position that may be confirmed or streamed from: the ack
 * tracker's, held at the ceiling. */
ob_lsn ob_tableset_confirmable(ob_tableset *ts);

/* Before a stream starts on pg: read the tables it will read (wal2json:
 * on pg itself; pgoutput: the publication, on the watch's connection) and
 * set the ceiling. When they include one the last stream did not read,
 * what that stream read after its ceiling may lack rows of it: the ack
 * tracker and replay go back to that ceiling, so it is read and handed
 * over again (published twice where it was published already). An
 * unlogged table of the outbox is fatal (logged). */
ob_pg_status ob_tableset_start(ob_tableset *ts, ob_pgconn *pg);
/* While streaming, read the set again when due: while the stream's tables
 * are unchanged the ceiling moves up to its verified position. False with
 * *out set when the stream must end: a leaf it does not read (REFILTER),
 * a changed publication or an unlogged table (HALT), reads that keep failing (RETRY: nothing
 * past the ceiling could be confirmed meanwhile, and a server shutting
 * down, which refuses the read's connection, waits for its walsenders to
 * be confirmed to the end of the WAL before it stops). wal_end is the
 * server's WAL end, for the slot's reading. */
bool ob_tableset_watch(ob_tableset *ts, ob_lsn wal_end, ob_outcome *out) OB_MUST_CHECK;
/* With wal2json and a partitioned table, wait until the stream's leaves
 * are verified past the open unit before its events are handed over (a
 * transaction before it may have written into a partition the stream does
 * not read yet). Reads the set now, and again every few milliseconds while
 * a commit before the unit is not visible yet, serving delivery reports
 * meanwhile. False with *out set when the stream must end. */
bool ob_tableset_cover(ob_tableset *ts, ob_outcome *out) OB_MUST_CHECK;
/* A unit with events committed; it confirms end_lsn. */
void ob_tableset_committed(ob_tableset *ts, ob_lsn end_lsn);
/* How long the stream may sleep, at most wait_ms: until the next read is
 * due; when the stream is idle (drained) and acknowledgements wait on the
 * verified position, the read comes soon, not a second later. */
int64_t ob_tableset_wait_ms(ob_tableset *ts, bool drained, int64_t wait_ms);
/* At shutdown: read the set once more before the last confirmation, so
 * that it goes as far as the acknowledgements do (a set that changed
 * leaves the ceiling where it is). False when the publication changed
 * (logged). */
bool ob_tableset_final_read(ob_tableset *ts);
/* The stream ended: close the reads' connection. */
void ob_tableset_close(ob_tableset *ts);

#endif
