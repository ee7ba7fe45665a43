/*
 * checker.h: what the modules of `outboxd check` share (check.c, the
 * database, the broker and the inbox; checkslot.c, replication and the
 * slot): the state of one run of checks, and its result lines.
 *
 * A check fills a result line (ok, a warning or a failure, and a detail
 * naming the fix) through ob_checker_report() or ob_checker_warn(), which
 * print it, or log it when the checks run inside the relay.
 */
#ifndef OUTBOXD_CHECKER_H
#define OUTBOXD_CHECKER_H

#include <stdio.h>

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgrepl.h"
#include "outboxd/pgsql.h"

/* What a failure whose cause was logged ends with: `check` shows the
 * logged lines in its place. */
#define OB_CHECK_SEE_THE_LOG " (see the log)"

typedef struct ob_checker {
	ob_pgconn *pg;
	const ob_config *cfg;
	FILE *out; /* print every result here, or log failures when NULL */
	bool all_ok;
	bool query_failed; /* a query failed: the answer is unknown, not no */
	char *table_oid;   /* set by check_table when the table exists */
	bool partitioned;  /* and is partitioned */
	bool slot_read;    /* slot holds the slot's state (ob_checker_read_slot) */
	ob_slot_info slot;
} ob_checker;

/* A result line: passed (ok) or failed. */
void ob_checker_report(ob_checker *c, const char *name, bool ok, const char *fmt, ...)
    OB_PRINTF(4, 5);
/* A result that passes but costs something the operator should choose. */
void ob_checker_warn(ob_checker *c, const char *name, const char *fmt, ...) OB_PRINTF(3, 4);
/* Run a query for one value (*value allocated, NULL for SQL NULL); a
 * failed query is a failed check named name, and sets query_failed. */
bool ob_checker_query(ob_checker *c, const char *name, const char *sql, char **value);
/* Read the slot's state into c->slot once; false (a failed check) when it
 * cannot be read. */
bool ob_checker_read_slot(ob_checker *c);

/* The checks of replication and the slot (checkslot.c). */
void ob_checker_slot(ob_checker *c);

#endif
