/*
 * wal2json.h: the parser of wal2json format-version 2 records.
 *
 * wal2json sends one JSON object per XLogData message: "B" and "C" around
 * every transaction, "I"/"U"/"D"/"T" per change and "M" per logical
 * message. outboxd starts the slot with include-lsn, include-timestamp and
 * include-xids, so B and C carry "nextlsn" (the commit end LSN, the position
 * to confirm) and "timestamp" (the commit time).
 *
 * The parser makes one pass over the text and allocates nothing: a parsed
 * record points into the data it was given (which must outlive it), with
 * strings left escaped where they were escaped. Column values keep their
 * JSON form, so the mapping (outbox.c) can tell a string from a bare number
 * and publish numbers with their exact text.
 */
#ifndef OUTBOXD_WAL2JSON_H
#define OUTBOXD_WAL2JSON_H

#include "outboxd/common.h"
#include "outboxd/jsontext.h"
#include "outboxd/lsn.h"

/* Columns per row an I record may carry (Postgres allows 1600; an outbox
 * table has a handful). */
#define OB_W2J_MAX_COLUMNS 128
/* Longest schema or table name (Postgres' NAMEDATALEN - 1) and message
 * prefix kept; a longer prefix never matches message_prefix. */
#define OB_W2J_NAME_MAX    64
#define OB_W2J_PREFIX_MAX  256

typedef enum ob_w2j_action {
	OB_W2J_BEGIN,
	OB_W2J_COMMIT,
	OB_W2J_INSERT,
	OB_W2J_MESSAGE,
	OB_W2J_DELETE, /* read only to tell a row moved between partitions (decoder.h) */
	OB_W2J_OTHER,  /* update, truncate: outboxd ignores them */
} ob_w2j_action;

/* One column of an I record: its name and type (escaped as sent) and its
 * value as a JSON member (value_is_string, value_escaped, or raw text such
 * as a number or null). */
typedef ob_json_member ob_w2j_column;

typedef struct ob_w2j_record {
	ob_w2j_action action;

	ob_lsn lsn;           /* "lsn" of the record, 0 if absent */
	ob_lsn nextlsn;       /* "nextlsn" of B and C, 0 if absent */
	int64_t timestamp_us; /* "timestamp" in µs since the epoch, */
	int64_t timestamp_ms; /* and in ms, ... */
	bool has_timestamp;   /* ... when it was present and parsed */

	/* I: the table and its columns; D: the table and the deleted row's
	 * replica identity ("identity": the key columns, or every column with
	 * REPLICA IDENTITY FULL), in the same array. Each column's type is in
	 * types[]. */
	char schema[OB_W2J_NAME_MAX];
	char table[OB_W2J_NAME_MAX];
	ob_w2j_column columns[OB_W2J_MAX_COLUMNS];
	ob_json_member types[OB_W2J_MAX_COLUMNS];
	size_t columns_len;

	/* M: whether the message is transactional, its prefix and content
	 * (the content's JSON string text, escapes not yet decoded). */
	bool transactional;
	char prefix[OB_W2J_PREFIX_MAX];
	bool prefix_too_long;
	const char *content;
	size_t content_len;
	bool content_escaped;
} ob_w2j_record;

/* Parse one record of len bytes. On failure a description is written to
 * err; the caller logs it. */
bool ob_w2j_parse(const char *data, size_t len, ob_w2j_record *rec, char *err,
		  size_t errlen) OB_MUST_CHECK;

/* Forget a parsed record (it owns nothing; this only clears it). */
void ob_w2j_record_clear(ob_w2j_record *rec);

/* Find an I record's column (a D record's identity column) by name; NULL
 * if missing. *type and
 * *type_len receive the column's type as sent ("jsonb", "bytea", ...;
 * empty when wal2json sent none). */
const ob_w2j_column *ob_w2j_column_find(const ob_w2j_record *rec, const char *name,
					const char **type, size_t *type_len);

/* Parse a Postgres timestamp in ISO output style ("2026-11-22
 * 03:07:11.206737+00", offset optional meaning UTC) into ms since the epoch.
 * The "T" separator of ISO 8601 is accepted too. */
bool ob_pg_timestamp_to_ms(const char *s, int64_t *ms) OB_MUST_CHECK;
/* The same in microseconds. */
bool ob_pg_timestamp_to_us(const char *s, int64_t *us) OB_MUST_CHECK;

#endif
