/*
 * partitions.h: the leaf partitions of the outbox table, read from the
 * server when a wal2json stream starts and about every second while it
 * runs (sql/README.md, "Partitioned outbox tables").
 *
 * A read takes the WAL flush position first; then the transactions
 * running with a lock on what the set is read from, other than the locks
 * of reading and writing rows (attaching, creating or detaching a
 * partition, renaming or dropping the table, making it or a partition
 * UNLOGGED; with pgoutput, also adding or dropping tables of the
 * publication or dropping it); then, in a REPEATABLE READ transaction of
 * its own and so in a later snapshot, the leaves, those of the tables
 * holding rows that are UNLOGGED (tableprops.h: their rows never reach
 * the WAL), and which of those transactions that snapshot does not see
 * (with pgoutput, also the one that updated the publication's row, as a
 * change of its options does without keeping a lock). Postgres writes (and a walsender decodes) a
 * commit record before the transaction becomes visible; with synchronous
 * replication the gap lasts as long as the standby wait. A transaction
 * that changed the set keeps its locks until after it became visible, so
 * if its commit record is before the position, it is either visible to
 * the snapshot or among those transactions. When the snapshot sees them
 * all, the position is the set's verified position (leafset.h): every
 * transaction whose commit record starts before it wrote only into
 * partitions of the set, since a transaction that inserts into a
 * partition the set lacks must have seen that partition, which became
 * visible only after the snapshot. When it does not, the set is read but
 * verifies no position (verified 0), and the next read tries again: a
 * long schema change of the outbox table (a CREATE INDEX) holds back
 * confirmations while it runs.
 *
 * With pgoutput the set is the table alone (pgoutput sends a partition's
 * rows under it) and the catalog read is the publication's stamp instead
 * (publication.h), under the same rule: a change of the publication
 * committed after the verified position, so rows it left out come after
 * that position.
 */
#ifndef OUTBOXD_PARTITIONS_H
#define OUTBOXD_PARTITIONS_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/leafset.h"
#include "outboxd/pgrepl.h"
#include "outboxd/runtime.h"

/* How often a stream's set is read again. */
#define OB_PARTITIONS_INTERVAL_MS 1000

/* Read the set of the outbox table on p into set (emptied first): the
 * table itself, so that the set is never empty, and its leaf partitions
 * when it is partitioned; whether it is; its unlogged tables; and the
 * verified position. False
 * on failure, with the reason (the server's message) in err: the caller
 * logs it. */
bool ob_partitions_read(ob_pgconn *p, const ob_config *cfg, ob_leafset *set, char *err,
			size_t errlen) OB_MUST_CHECK;

/* The outbox table's qualified name as an SQL expression of type text,
 * "format('%I.%I', '<schema>', '<table>')" with both names quoted as
 * literals on p, for to_regclass() or ::regclass; the caller frees. */
char *ob_partitions_table_name(ob_pgconn *p, const ob_config *cfg);

/* The reads while a stream runs, on a plain connection of their own
 * (a replication connection that streams takes no SQL), opened on first
 * use and closed with the stream. */
typedef struct ob_partwatch {
	const ob_config *cfg;
	ob_pgsql_tick_fn tick; /* kept running while a read waits */
	void *tick_ctx;
	ob_pgconn *conn;    /* NULL until the first read, and after a failure */
	int64_t next_ms;    /* when the next read is due */
	int64_t last_ms;    /* when the latest read succeeded */
	ob_backoff backoff; /* the wait after a failed read; doubles */
	bool failing;       /* the latest read failed (said once) */
} ob_partwatch;

void ob_partwatch_init(ob_partwatch *w, const ob_config *cfg, ob_pgsql_tick_fn tick, void *ctx);
/* Read the set into *set when a read is due: OB_PARTITIONS_INTERVAL_MS
 * after the last one, or, after a failure, after a wait that doubles up to
 * postgres.reconnect_max_backoff_ms. True when *set was read now. A failed
 * read leaves *set undefined and its connection closed; the first of a
 * run of failures is logged, and so is the read that ends it. */
bool ob_partwatch_poll(ob_partwatch *w, ob_leafset *set) OB_MUST_CHECK;
/* Make the next read due soon, at least min_gap_ms after the latest
 * successful one (the stream waits for a verified position); no effect
 * while reads fail and back off. */
void ob_partwatch_hurry(ob_partwatch *w, int64_t min_gap_ms);
/* When the next read is due (ob_mono_ms() time). */
int64_t ob_partwatch_due_ms(const ob_partwatch *w);
/* Read the set into *set now, on the watch's connection (opened when
 * there is none). False, with err, on failure. */
bool ob_partwatch_read(ob_partwatch *w, ob_leafset *set, char *err, size_t errlen) OB_MUST_CHECK;
/* Whether the latest read failed. */
bool ob_partwatch_failing(const ob_partwatch *w);
/* Close the connection: the stream ended. The next read is due at once. */
void ob_partwatch_close(ob_partwatch *w);

#endif
