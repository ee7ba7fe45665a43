/*
 * inboxrow.h: one Kafka record turned into one row of the inbox table
 * (sql/README.md, "The inbox tables").
 *
 * Pure code: no sockets, no librdkafka or libpq handles, so the rules of
 * what a row holds and what makes a record bad are unit tested. The inbox
 * consumer (inbox.c) builds a row for every record it reads and hands good
 * rows to inboxdb.c; a bad record goes to the dead-letter topic.
 */
#ifndef OUTBOXD_INBOXROW_H
#define OUTBOXD_INBOXROW_H

#include "outboxd/common.h"
#include "outboxd/event.h"

/* One inbox row. Every string is NUL-terminated UTF-8 owned by the row;
 * payload_raw borrows the record's value, or points at payload_owned (the
 * bytes a structured CloudEvent's data_base64 encodes). */
typedef struct ob_inbox_row {
	char *id;
	char *topic;
	int32_t partition;
	int64_t offset;
	char *key;               /* NULL when the record has no key */
	char *type;              /* NULL when the record has no "type" header */
	char *payload_json;      /* the value when it is JSON, else NULL */
	const void *payload_raw; /* the value when it is not JSON, else NULL */
	size_t payload_raw_len;
	void *payload_owned; /* owned; NULL unless payload_raw points here */
	char *headers_json;  /* every header as a JSON object (see below) */
} ob_inbox_row;

/* Why a record makes no row; the reason is also the dead-letter metric
 * label and the prefix of the dead-letter record's "error" header. */
typedef struct ob_inbox_bad {
	const char *reason; /* a string constant: "missing-id", "bad-header", "bad-key" */
	char error[256];    /* one line for the "error" header and the log */
} ob_inbox_bad;

/* Build the row of the record rec, read at (partition, offset), whose id
 * is the first header named id_header. The value becomes payload_json when
 * it is JSON (ob_inbox_value_is_json), else payload_raw; a tombstone (no
 * value) leaves both NULL. A CloudEvent (sql/README.md, "The inbox tables") fills the same
 * columns: in binary mode the ce_id and ce_type headers stand in for
 * missing id and type headers; in structured mode (content-type
 * application/cloudevents+json) id, type and payload come from the
 * envelope (payload from "data" as its JSON text, or the bytes of
 * "data_base64"), and an envelope that does not read is a bad record
 * ("bad-cloudevent"). headers_json maps each header name to its value
 * as a JSON string (null for a header without a value); a name that
 * repeats maps to an array of its values in order.
 *
 * Returns false, with *bad filled and row left empty, when the record
 * cannot be stored: no id header or an empty id, or an id, key or header
 * that is not UTF-8 text without NUL bytes. On true the row is the
 * caller's to release with ob_inbox_row_free(). */
bool ob_inbox_row_build(const ob_record_view *rec, int32_t partition, int64_t offset,
			const char *id_header, ob_inbox_row *row, ob_inbox_bad *bad) OB_MUST_CHECK;
void ob_inbox_row_free(ob_inbox_row *row);

/* True when value[0..len) is one JSON value (object, array, string,
 * number, true, false or null) that a jsonb column accepts: PostgreSQL's
 * JSON grammar, UTF-8, no \u0000 or unpaired surrogate escapes, numbers
 * of any size numeric holds, nesting up to 10000 deep. */
bool ob_inbox_value_is_json(const void *value, size_t len);

/* True when s[0..len) is valid UTF-8 without NUL bytes. */
bool ob_inbox_text_ok(const char *s, size_t len);

#endif
