/*
 * backlog.h: the outbox rows that are already in the table when the slot
 * is created (sql/README.md, "Migrating from a polling outbox processor").
 *
 * A slot sees only WAL written after it exists. When outboxd creates its
 * slot and outbox.backlog_where is set, the relay first creates a
 * temporary slot exporting its snapshot; this module reads the rows
 * matching the predicate in exactly that snapshot, on a plain connection,
 * through a cursor in pages (so memory stays bounded), and hands them out
 * one by one as text rows for the mapper (outbox.h). Once the relay has
 * every row acknowledged, it copies the temporary slot into the permanent
 * one (ob_pgrepl_copy_slot), at the same consistent point: a row committed
 * before it was in the snapshot, a row committed after it is in the
 * stream. A crash before the copy leaves no slot behind, so the next start
 * reads the backlog again (at-least-once, never loss).
 *
 * The predicate is the operator's SQL: it runs in read-only transactions,
 * with the role's privileges, as one statement. Failures are logged here,
 * once, except a refused predicate or order, which the caller reports (a
 * configuration error: `check` prints it, startup exits 2).
 */
#ifndef OUTBOXD_BACKLOG_H
#define OUTBOXD_BACKLOG_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/change.h"
#include "outboxd/pgrepl.h"

typedef struct ob_backlog ob_backlog;

/* Open the backlog's plain connection, on which every transaction is
 * read-only; tick (may be NULL) runs while its queries wait. On OB_PG_OK
 * *out is the caller's (ob_backlog_close); otherwise OB_PG_RETRY, logged. */
ob_pg_status ob_backlog_connect(const ob_config *cfg, ob_pgsql_tick_fn tick, void *ctx,
				ob_backlog **out);

/* Settle the backlog's order and check backlog_where and backlog_order_by
 * with the database (EXPLAIN of the backlog's query), and keep the
 * planner's row estimate. The order is backlog_order_by or, when that is
 * empty, the table's identity column then the id column, so that the
 * events one transaction wrote for one key come in the order the stream
 * gives them; a table without an identity column is ordered by the
 * timestamp column then the id column, with a warning (logged here)
 * naming what it lacks. OB_PG_OK when the server accepts the query;
 * OB_PG_FATAL, not logged, when it refuses it: ob_backlog_error() names
 * the key and gives the server's message, or says that the role may not
 * SELECT the table and gives the GRANT that fixes it; OB_PG_RETRY
 * (logged) when the server could not be asked. */
ob_pg_status ob_backlog_verify(ob_backlog *b);

/* The ORDER BY list settled by the last ob_backlog_verify (NULL before). */
const char *ob_backlog_order(const ob_backlog *b);

/* After ob_backlog_verify returned OB_PG_OK: import snapshot in a
 * repeatable-read transaction and open the cursor over the matching rows,
 * in the order verify settled; the connection that exported the snapshot must
 * run no other command until this returns. OB_PG_FATAL (not logged,
 * ob_backlog_error() says why) when the server refuses the query itself;
 * OB_PG_RETRY (logged) on other failures. */
ob_pg_status ob_backlog_start(ob_backlog *b, const char *snapshot);

/* The planner's estimate of the rows to publish (-1: unknown). */
int64_t ob_backlog_estimate(const ob_backlog *b);

/* The next row, in backlog_order_by order: OB_PG_OK with *row valid until
 * the next call, or NULL after the last row; OB_PG_FATAL (not logged,
 * ob_backlog_error() says why) when the predicate or the order fails on
 * the rows, which reading again cannot mend; OB_PG_RETRY (logged) on
 * other failures. */
ob_pg_status ob_backlog_next(ob_backlog *b, const ob_text_row **row);

/* Why the last OB_PG_FATAL: a sentence naming the key and the server's
 * message. */
const char *ob_backlog_error(const ob_backlog *b);

/* Close the connection (an open transaction is rolled back). NULL is a
 * no-op. */
void ob_backlog_close(ob_backlog *b);

#endif
