/*
 * leafset.h: the leaf partitions of the outbox table, as a set of names.
 *
 * wal2json reports a row under the name of the partition it went to, and
 * its add-tables filter is fixed for the life of a stream, so with a
 * partitioned outbox table the relay streams with every leaf partition in
 * that filter, maps the rows of those leaves, and compares the set read
 * when the stream started with the sets read while it runs
 * (partitions.h; sql/README.md, "Partitioned outbox tables").
 *
 * A set read at a point in time carries the WAL position it is verified
 * at: every transaction whose commit record starts before that position
 * wrote only into partitions of the set.
 *
 * Pure: no I/O, no logging.
 */
#ifndef OUTBOXD_LEAFSET_H
#define OUTBOXD_LEAFSET_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* One table, by schema and name (each NUL-terminated, owned). */
typedef struct ob_leaf {
	char *schema;
	char *table;
} ob_leaf;

typedef struct ob_leafset {
	ob_lsn verified;  /* see above; 0 when the read verified none */
	bool partitioned; /* the outbox table is partitioned */
	/* pgoutput: what the publication says of the outbox table
	 * (ob_publication_stamp()), read like the set and verified at the
	 * same position; empty with wal2json. */
	char stamp[512];
	/* The tables of the outbox that hold rows (the table, or its leaf
	 * partitions) and are UNLOGGED, as tableprops.h's query names them;
	 * empty when none is. */
	char unlogged[512];
	ob_leaf *leaves; /* owned, sorted by schema then table, no duplicates */
	size_t len;
	size_t cap;
} ob_leafset;

void ob_leafset_init(ob_leafset *s);
void ob_leafset_free(ob_leafset *s);
/* Empty the set and forget its position, kind, stamp and unlogged
 * tables; the memory is kept. */
void ob_leafset_clear(ob_leafset *s);
/* Exchange the contents of a and b. */
void ob_leafset_swap(ob_leafset *a, ob_leafset *b);

/* Add schema.table; adding a name twice keeps one. */
void ob_leafset_add(ob_leafset *s, const char *schema, const char *table);
/* Whether schema.table is in the set. */
bool ob_leafset_has(const ob_leafset *s, const char *schema, const char *table);

/* How many names of s are not in of; the first of them, as
 * "schema.table" separated by ", " (and "..." when they do not all fit),
 * go into buf, which is always NUL-terminated. 0 means of covers s. */
size_t ob_leafset_missing(const ob_leafset *s, const ob_leafset *of, char *buf, size_t buflen);

/* The value of wal2json's add-tables option naming every table of s:
 * "schema.table" separated by commas, with a backslash before the
 * characters wal2json treats specially and single quotes doubled, since
 * the value goes into a quoted option of START_REPLICATION. The caller
 * frees. */
char *ob_leafset_add_tables(const ob_leafset *s);

#endif
