/*
 * backlog.h: the outbox rows that are already in the table when the slot
 * is created (README, "Migrating from a polling outbox processor").
 *
 * A slot sees only WAL written after it exists. When outboxd creates its
 * slot and outbox.backlog_where is set, the relay first creates a
 * temporary slot exporting its snapshot; this module reads the rows
 * matching the predicate in exactly that snapshot, on a plain connection,
 * through a cursor in pages (so memory stays bounded), and hands them out
 * one by one as text rows for the mapper (outbox.h). Once the relay has
 * every row acknowledged, ob_backlog_copy_slot() copies the temporary slot
 * into the permanent one, at the same consistent point: a row committed
 * before it was in the snapshot, a row committed after it is in the
 * stream. A crash before the copy leaves no slot behind, so the next start
 * reads the backlog again (at-least-once, never loss).
 *
 * Errors are logged here, once.
 */
#ifndef OUTBOXD_BACKLOG_H
#define OUTBOXD_BACKLOG_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/outbox.h"
#include "outboxd/pgrepl.h"

typedef struct ob_backlog ob_backlog;

/* Check backlog_where and backlog_order_by with the database (EXPLAIN of
 * the backlog's query) on a plain connection. OB_PG_OK when the server
 * accepts them; OB_PG_FATAL when it refuses them, with the server's
 * message in detail (the caller names the key); OB_PG_RETRY (logged) when
 * the server could not be asked. */
ob_pg_status ob_backlog_verify(const ob_config *cfg, char *detail, size_t detail_len);

/* Open a plain connection, import snapshot in a read-only repeatable-read
 * transaction and open the cursor over the matching rows. On OB_PG_OK
 * *out is the caller's (ob_backlog_close); otherwise OB_PG_RETRY, logged. */
ob_pg_status ob_backlog_open(const ob_config *cfg, const char *snapshot, ob_backlog **out);

/* The planner's estimate of the rows to publish. */
int64_t ob_backlog_estimate(const ob_backlog *b);

/* The next row, in backlog_order_by order: 1 with *row valid until the
 * next call, 0 after the last row, -1 on an error (logged). */
int ob_backlog_next(ob_backlog *b, const ob_text_row **row);

/* End the snapshot's transaction and copy the temporary slot tmp (still
 * held by its replication connection) into the permanent slot. False
 * (logged) on error. */
bool ob_backlog_copy_slot(ob_backlog *b, const char *tmp, const char *slot) OB_MUST_CHECK;

/* Close the connection (an open transaction is rolled back). NULL is a
 * no-op. */
void ob_backlog_close(ob_backlog *b);

#endif
