/*
 * change.h: what the decoders and the backlog hand the relay, whatever
 * their source.
 *
 * Both decoders yield the same kinds of change (decoder.h): a
 * transaction's begin and commit, an inserted row, a logical message, and
 * (pgoutput) the description of a relation; the relay dispatches them in
 * one switch, as PostgreSQL's apply_dispatch() does. A row in text format
 * (read with libpq by the backlog, or decoded from pgoutput's tuple data)
 * and a logical message are the same to the mapper (outbox.h) wherever
 * they came from. Nothing here touches libpq or a socket.
 */
#ifndef OUTBOXD_CHANGE_H
#define OUTBOXD_CHANGE_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"

/* How a column read with libpq in text format is taken, so that it maps
 * as the same column would from wal2json (which sends numbers and booleans
 * as JSON literals, bytea as hex digits without "\\x", and everything else,
 * json and jsonb included, as the type's text). */
typedef enum ob_text_kind {
	OB_TEXT_PLAIN,   /* the text as it is */
	OB_TEXT_NUMBER,  /* a number's exact text; NaN and infinities are null */
	OB_TEXT_BOOLEAN, /* "t" or "f" */
	OB_TEXT_BYTEA,   /* "\\x" and hex digits */
} ob_text_kind;

/* One row in text format: read with libpq (the backlog) or decoded from
 * pgoutput's tuple data. The arrays have columns_len entries and are owned
 * by the caller; values[i] is NULL for SQL NULL, else it points at
 * lengths[i] bytes that need not be NUL-terminated. */
typedef struct ob_text_row {
	const char *const *names;
	const ob_text_kind *kinds;
	const char *const *values;
	const size_t *lengths;
	size_t columns_len;
} ob_text_row;

/* The kind of a column of type oid (libpq's PQftype). */
ob_text_kind ob_text_kind_for_type(unsigned int oid);

/* A logical message, as either decoder reads it. The prefix is
 * NUL-terminated; content points at content_len bytes: the message's
 * bytes as they were emitted, or (content_escaped, wal2json) the text of a
 * JSON string whose escapes decode to them. */
typedef struct ob_logical_message {
	ob_lsn lsn;
	bool transactional;
	const char *prefix;
	bool prefix_too_long; /* the prefix was cut short: it matches nothing */
	const char *content;
	size_t content_len;
	bool content_escaped;
} ob_logical_message;

struct ob_w2j_record;

typedef enum ob_change_kind {
	OB_CHANGE_BEGIN,    /* a transaction begins */
	OB_CHANGE_COMMIT,   /* the open transaction commits */
	OB_CHANGE_ROW,      /* a row was inserted */
	OB_CHANGE_MESSAGE,  /* a logical message */
	OB_CHANGE_RELATION, /* pgoutput described a relation (the decoder keeps it) */
	OB_CHANGE_OTHER,    /* nothing to publish (updates, deletes, types, ...) */
} ob_change_kind;

/* One decoded change; its pointers borrow the record it was decoded from
 * and the decoder, and are valid until the next record is decoded. */
typedef struct ob_change {
	ob_change_kind kind;
	/* BEGIN: where the transaction's commit record starts (which places
	 * it, position.h). COMMIT: where it ends (what it confirms). ROW: the
	 * change's own position. MESSAGE: message.lsn, where its record ends. */
	ob_lsn lsn;
	int64_t commit_us; /* BEGIN: the commit time, µs since the epoch; 0: not sent */
	/* ROW: the table (NULL when the decoder does not know it), and the
	 * row: a wal2json record with its values as JSON, or a text row. */
	const char *schema;
	const char *table;
	const struct ob_w2j_record *w2j;
	ob_text_row text;
	ob_logical_message message; /* MESSAGE */
} ob_change;

#endif
