/*
 * tableprops.h: properties of the outbox table and its partitions that
 * decide whether their rows are published as events, and published once
 * (sql/README.md, "What the table must be").
 *
 * An UNLOGGED table or partition writes no WAL for its rows, so no
 * decoder sees them; SET LOGGED later rewrites the table, and decoding
 * skips rewrites: those rows are never streamed. `outboxd check` and the
 * checks before streaming refuse such a table, and the stream's reads of
 * its tables (partitions.h) halt on one.
 *
 * A row that an UPDATE moves into another partition is told from a new
 * event by the delete before its insert (decoder.h), which names the row's
 * id only when the old partition's replica identity holds the id column
 * (its primary key or replica identity index includes it, or REPLICA
 * IDENTITY FULL), and which pgoutput sends only when the publication
 * publishes deletes. `outboxd check` warns where it cannot be told.
 */
#ifndef OUTBOXD_TABLEPROPS_H
#define OUTBOXD_TABLEPROPS_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgsql.h"

/* A query of one row and one text column: the tables that hold rows
 * (the table itself, or its leaf partitions) in the partition tree of
 * table, an SQL expression of type regclass, that are UNLOGGED, as
 * qualified SQL names separated by ", " ("" when there is none). The
 * caller frees. */
char *ob_tableprops_unlogged_sql(const char *table);

/* The detail of a check, or of a halt, naming the unlogged tables (as the
 * query above gives them) of the outbox table schema.table, why their
 * rows cannot be published and the fix, into buf (always
 * NUL-terminated). */
void ob_tableprops_unlogged_detail(const char *unlogged, const char *schema, const char *table,
				   char *buf, size_t size);

/* What a check below found. */
typedef enum ob_tableprops_result {
	OB_TABLEPROPS_OK,
	OB_TABLEPROPS_WARN, /* no event is lost, but some are published twice */
	OB_TABLEPROPS_FAIL,
	OB_TABLEPROPS_QUERY_FAILED, /* logged; the detail says so */
} ob_tableprops_result;

/* Check that the outbox table (its oid as text) and its partitions are
 * logged: FAIL naming those that are not; detail gets the result line. */
ob_tableprops_result ob_tableprops_check_logged(ob_pgconn *pg, const ob_config *cfg,
						const char *table_oid, char *detail, size_t size);

/* Check, for a partitioned outbox table (its oid as text), that a row an
 * UPDATE moves into another partition can be told from a new event: WARN
 * naming what hides it and the fix; detail gets the result line. */
ob_tableprops_result ob_tableprops_check_moves(ob_pgconn *pg, const ob_config *cfg,
					       const char *table_oid, char *detail, size_t size);

#endif
