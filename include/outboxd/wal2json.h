/*
 * wal2json.h: the parser of wal2json format-version 2 records.
 *
 * wal2json sends one JSON object per XLogData message: "B" and "C" around
 * every transaction, "I"/"U"/"D"/"T" per change and "M" per logical
 * message. outboxd starts the slot with include-lsn, include-timestamp and
 * include-xids, so B and C carry "nextlsn" (the commit end LSN, the position
 * to confirm) and "timestamp" (the commit time).
 *
 * A parsed record owns its JSON tree; the string and array pointers in it
 * borrow from that tree and live until ob_w2j_record_clear().
 */
#ifndef OUTBOXD_WAL2JSON_H
#define OUTBOXD_WAL2JSON_H

#include <jansson.h>

#include "outboxd/common.h"
#include "outboxd/lsn.h"

typedef enum ob_w2j_action {
	OB_W2J_BEGIN,
	OB_W2J_COMMIT,
	OB_W2J_INSERT,
	OB_W2J_MESSAGE,
	OB_W2J_OTHER, /* update, delete, truncate: outboxd ignores them */
} ob_w2j_action;

typedef struct ob_w2j_record {
	ob_w2j_action action;
	json_t *root;

	ob_lsn lsn;           /* "lsn" of the record, 0 if absent */
	ob_lsn nextlsn;       /* "nextlsn" of B and C, 0 if absent */
	int64_t timestamp_us; /* "timestamp" in µs since the epoch, */
	int64_t timestamp_ms; /* and in ms, ... */
	bool has_timestamp;   /* ... when it was present and parsed */

	/* I: the table and the "columns" array of {name, type, value}. */
	const char *schema;
	const char *table;
	json_t *columns;

	/* M: whether the message is transactional, its prefix and content. */
	bool transactional;
	const char *prefix;
	const char *content;
	size_t content_len;
} ob_w2j_record;

/* Parse one record of len bytes. On failure the record is cleared and a
 * description is written to err; the caller logs it. */
bool ob_w2j_parse(const char *data, size_t len, ob_w2j_record *rec, char *err,
		  size_t errlen) OB_MUST_CHECK;

/* Release the record's JSON tree. Safe on a cleared record. */
void ob_w2j_record_clear(ob_w2j_record *rec);

/* Find an I record's column by name: its type (NULL if not sent) and its
 * value (a borrowed JSON value, json null for SQL NULL). False if missing. */
bool ob_w2j_column(const ob_w2j_record *rec, const char *name, const char **type, json_t **value);

/* Parse a Postgres timestamp in ISO output style ("2026-11-22
 * 03:07:11.206737+00", offset optional meaning UTC) into ms since the epoch.
 * The "T" separator of ISO 8601 is accepted too. */
bool ob_pg_timestamp_to_ms(const char *s, int64_t *ms) OB_MUST_CHECK;
/* The same in microseconds. */
bool ob_pg_timestamp_to_us(const char *s, int64_t *us) OB_MUST_CHECK;

#endif
