/*
 * pgoutput.h: the parser of pgoutput's logical replication messages.
 *
 * outboxd starts pgoutput with proto_version '1', publication_names and
 * messages 'true', without binary and without streaming: every transaction
 * arrives whole after its commit, as Begin, then its changes and logical
 * messages, then Commit; tuple values come in text format; a Relation
 * message describes a table before the first change of it in a session
 * (and again after its definition changed). With a publication made
 * WITH (publish_via_partition_root = true) a row inserted into a partition
 * arrives under its root table, converted to the root's columns.
 *
 * Message layouts (all integers big-endian, strings NUL-terminated):
 *   'B' final LSN (Int64: where the commit record starts), commit time
 *       (Int64, µs since 2000-01-01), xid (Int32)
 *   'C' flags (Int8), commit LSN (Int64), end LSN (Int64: the position to
 *       confirm), commit time (Int64)
 *   'R' relation id (Int32), namespace (String, empty for pg_catalog), name
 *       (String), replica identity (Int8), columns (Int16), then per column
 *       flags (Int8), name (String), type oid (Int32), type modifier (Int32)
 *   'I' relation id (Int32), 'N', TupleData
 *   'D' relation id (Int32), 'K' (the replica identity's key columns, the
 *       others null) or 'O' (REPLICA IDENTITY FULL: the old row), TupleData;
 *       sent only when the publication publishes deletes, and read only to
 *       tell a row moved between partitions (decoder.h)
 *   'M' flags (Int8: 1 = transactional), LSN (Int64), prefix (String),
 *       content length (Int32), content (bytes)
 *   TupleData: columns (Int16), then per column 'n' (null), 'u' (unchanged
 *       TOAST value, not in inserts), 't' Int32 length + text, or 'b' Int32
 *       length + binary (only with the binary option)
 *   'Y' (type), 'O' (origin), 'U', 'T' carry nothing outboxd publishes.
 *
 * Parsing allocates nothing: a parsed message points into the data it was
 * given, which must outlive it. The relation cache owns copies of what
 * Relation messages said.
 */
#ifndef OUTBOXD_PGOUTPUT_H
#define OUTBOXD_PGOUTPUT_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"
#include "outboxd/change.h"

/* µs from the Unix epoch to Postgres' epoch (2000-01-01 00:00:00 UTC). */
#define OB_PGO_EPOCH_OFFSET_US INT64_C(946684800000000)

typedef enum ob_pgo_kind {
	OB_PGO_BEGIN,
	OB_PGO_COMMIT,
	OB_PGO_RELATION,
	OB_PGO_INSERT,
	OB_PGO_MESSAGE,
	OB_PGO_DELETE,
	OB_PGO_OTHER, /* type, origin, update, truncate: nothing to publish */
} ob_pgo_kind;

typedef struct ob_pgo_msg {
	ob_pgo_kind kind;

	/* B: commit_lsn is the final LSN (where the commit record starts).
	 * C: commit_lsn and end_lsn (the commit record's end: the position
	 * that confirms the transaction). Both: the commit time in µs since
	 * the Unix epoch. */
	ob_lsn commit_lsn;
	ob_lsn end_lsn;
	int64_t commit_us;
	uint32_t xid; /* B */

	/* R, I and D: the relation. */
	uint32_t relid;

	/* I: the new tuple's column count and its column data (the bytes
	 * after the Int16 count, up to the end of the message); D: the old
	 * key's (or row's). */
	uint16_t tuple_columns;
	const char *tuple;
	size_t tuple_len;

	/* M: prefix points at a NUL-terminated string inside the data. */
	bool transactional;
	ob_lsn message_lsn;
	const char *prefix;
	size_t prefix_len;
	const char *content;
	size_t content_len;
} ob_pgo_msg;

/* Parse one message of len bytes (one XLogData payload). On failure a
 * description is written to err; the caller logs it. A Relation message
 * parses here only as far as its relation id; ob_pgo_relcache_put() reads
 * the rest. */
bool ob_pgo_parse(const char *data, size_t len, ob_pgo_msg *msg, char *err,
		  size_t errlen) OB_MUST_CHECK;

/* What a Relation message said of one table. */
typedef struct ob_pgo_relation {
	uint32_t relid;
	char *schema; /* owned; "pg_catalog" when the message sent "" */
	char *name;   /* owned */
	size_t columns_len;
	char **column_names;        /* owned, columns_len entries */
	unsigned int *type_oids;    /* owned */
	ob_text_kind *column_kinds; /* owned: ob_text_kind_for_type() of each */
} ob_pgo_relation;

/* The relations of one replication session, and the row arrays that
 * ob_pgo_row() fills (sized to the widest relation seen). */
typedef struct ob_pgo_relcache {
	ob_pgo_relation *rels; /* owned */
	size_t len, cap;
	const char **values; /* owned arrays; the values point into messages */
	size_t *lengths;
	size_t row_cap;
} ob_pgo_relcache;

void ob_pgo_relcache_init(ob_pgo_relcache *c);
/* Forget every relation (a new session sends them again). */
void ob_pgo_relcache_clear(ob_pgo_relcache *c);
void ob_pgo_relcache_free(ob_pgo_relcache *c);

/* Read a Relation message (data, len: the whole message) and remember it,
 * replacing what was known of the same relation id. False on a malformed
 * message, with err. */
bool ob_pgo_relcache_put(ob_pgo_relcache *c, const char *data, size_t len, char *err,
			 size_t errlen) OB_MUST_CHECK;

/* The relation with id relid; NULL if no Relation message named it. */
const ob_pgo_relation *ob_pgo_relcache_get(const ob_pgo_relcache *c, uint32_t relid);

/* Read an Insert's new tuple (msg parsed by ob_pgo_parse()) as a text row
 * of its relation: *rel gets the relation, row the columns (names and
 * kinds from the relation, values pointing into the message, valid until
 * the next call). False, with err, when the relation is unknown, the
 * column count differs from the relation's, the tuple data is malformed or
 * a value is not in text format. */
bool ob_pgo_row(ob_pgo_relcache *c, const ob_pgo_msg *msg, const ob_pgo_relation **rel,
		ob_text_row *row, char *err, size_t errlen) OB_MUST_CHECK;

/* The text of column name in the tuple of an Insert or Delete message
 * (msg parsed by ob_pgo_parse()) into *value and *len (pointing into the
 * message). False when the relation is unknown, has no such column or a
 * column count other than the tuple's, or the column is not a text
 * value. */
bool ob_pgo_column_text(const ob_pgo_relcache *c, const ob_pgo_msg *msg, const char *name,
			const char **value, size_t *len) OB_MUST_CHECK;

#endif
