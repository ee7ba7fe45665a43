/*
 * tableprops.h: properties of the outbox table and its partitions that
 * decide whether their rows can be published as events at all
 * (sql/README.md, "What the table must be").
 *
 * An UNLOGGED table or partition writes no WAL for its rows, so no
 * decoder sees them; SET LOGGED later rewrites the table, and decoding
 * skips rewrites: those rows are never streamed. `outboxd check` and the
 * checks before streaming refuse such a table, and the stream's reads of
 * its tables (partitions.h) halt on one.
 */
#ifndef OUTBOXD_TABLEPROPS_H
#define OUTBOXD_TABLEPROPS_H

#include "outboxd/common.h"

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

#endif
