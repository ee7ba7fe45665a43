/*
 * check.h: preflight checks (`outboxd check`) and the database checks the
 * relay runs before it starts streaming.
 *
 * Each check produces one line: its name, ok or FAIL, and a detail that
 * names the fix when it failed. ob_check_run() runs them all, even after a
 * failure, so one run shows every problem.
 */
#ifndef OUTBOXD_CHECK_H
#define OUTBOXD_CHECK_H

#include <stdio.h>

#include "outboxd/config.h"
#include "outboxd/pgrepl.h"

/* Check wal_level, the outbox table, its mapped columns (with pgoutput,
 * none of them GENERATED ... STORED), with pgoutput the publication, and
 * the role's SELECT on the table, on an open connection. Without out (the
 * relay), a missing publication is created when every check before it
 * passed, and SELECT is asked for only when the backlog is about to be
 * read (backlog_where set, the slot missing). Without out, failures are
 * logged as errors; with out, every result is printed as a line. Returns
 * OB_PG_OK when all passed, OB_PG_FATAL when a check said no, and
 * OB_PG_RETRY when a query failed (the connection broke: try again). */
ob_pg_status ob_check_database(ob_pgconn *pg, const ob_config *cfg, FILE *out) OB_MUST_CHECK;

/* The `check` command: every check, printed to out. Returns the exit code:
 * 0 when all passed, 2 otherwise (deploy/README.md, "Command line"). */
int ob_check_run(const ob_config *cfg, FILE *out);

#endif
