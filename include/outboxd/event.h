/*
 * event.h: one Kafka record being built, in one reusable buffer.
 *
 * An ob_event holds a record's topic, key, value, headers and timestamp as
 * spans of one growing buffer that is reused from record to record, so
 * steady-state mapping does not allocate (like pgbouncer's pktbuf). The
 * same module builds dead-letter records: from a mapped event, from a
 * record the broker refused (seen through an ob_record_view), and the
 * headers-only fallback when a dead-letter record is itself too large.
 */
#ifndef OUTBOXD_EVENT_H
#define OUTBOXD_EVENT_H

#include <string.h>

#include "outboxd/common.h"
#include "outboxd/lsn.h"

#define OB_EVENT_MAX_HEADERS 64

/* A byte range inside the event's buffer. */
typedef struct ob_span {
	size_t off;
	size_t len;
} ob_span;

typedef struct ob_event_header {
	ob_span name;
	ob_span value;
} ob_event_header;

typedef struct ob_event {
	char *buf; /* owned; every span points into it */
	size_t buf_len;
	size_t buf_cap;

	ob_span topic;
	bool has_key;
	ob_span key;
	bool has_value; /* false: a tombstone */
	ob_span value;
	ob_event_header headers[OB_EVENT_MAX_HEADERS]; /* set up to headers_len only */
	size_t headers_len;
	int64_t timestamp_ms;

	/* Set when this is a dead-letter record: a short reason for metrics
	 * ("missing-key", "bad-payload", …); NULL for a normal event. */
	const char *dlq_reason;
} ob_event;

/* Start a dead-letter record in ev (which is reset first): topic
 * dlq_topic, headers "error" and "source-lsn", dlq_reason = reason. The
 * caller then adds the original headers, key and value it has. reason must
 * be a string constant (it is kept by pointer). */
void ob_event_begin_dlq(ob_event *ev, const char *dlq_topic, const char *reason, const char *error,
			ob_lsn source_lsn);

/* A record seen from outside an ob_event: what a delivery report returns,
 * or an event's spans resolved. All pointers are borrowed. The header
 * arrays hold headers_len entries; those past them are not set. */
typedef struct ob_record_view {
	const char *topic;
	size_t topic_len;
	const void *key;
	size_t key_len;
	bool has_key;
	const void *value;
	size_t value_len;
	bool has_value;
	int64_t timestamp_ms;
	size_t headers_len;
	const char *header_names[OB_EVENT_MAX_HEADERS];
	const void *header_values[OB_EVENT_MAX_HEADERS];
	size_t header_value_lens[OB_EVENT_MAX_HEADERS];
} ob_record_view;

/* Resolve an event into a view; valid until the event is next changed. */
void ob_event_view(const ob_event *ev, ob_record_view *view);

/* Put v's key and value (has_key and has_value as v's) and its timestamp
 * into ev. v must not point into ev's buffer. */
void ob_event_put_record(ob_event *ev, const ob_record_view *v);

/* The dead-letter record's header naming the topic its record was for;
 * and, on_bad_event = hold_key, the header of a held record naming the id
 * of the dead letter it is held behind. */
#define OB_DLQ_ORIGINAL_TOPIC "original-topic"
#define OB_DLQ_HELD_BEHIND    "held_behind"

/* Build in out the dead-letter record of a record the broker or client
 * refused for good: headers "error" and "source-lsn", then the original
 * headers, "original-topic" when orig has a topic (and a header is free),
 * the original key and value. When value_too_large the value is
 * left out and a "payload-size" header says how large it was. out must not
 * be the event orig points into. */
void ob_event_build_dlq(ob_event *out, const char *dlq_topic, const char *reason, const char *error,
			ob_lsn source_lsn, const ob_record_view *orig, bool value_too_large);

/* Build in out the headers-only form of a dead-letter record that does not
 * fit in max_bytes: the same topic, timestamp and headers in order, each
 * value cut short once the headers would pass max_bytes less a margin for
 * the framing (later headers are then left out), no value, a
 * "payload-size" header saying how large the value was (unless the record
 * has one already), and the key only when it takes at most a quarter of
 * max_bytes less the margin (it is counted before the headers are cut). reason must be a
 * string constant. out must not be the event dlq points into. */
void ob_event_build_dlq_headers_only(ob_event *out, const char *reason, const ob_record_view *dlq,
				     size_t max_bytes);

/* The value of the first header called name, or NULL (with *len 0). */
const char *ob_event_find_header(const ob_event *ev, const char *name, size_t *len);

/* Initialise and release an event's buffer. */
void ob_event_init(ob_event *ev);
void ob_event_free(ob_event *ev);
/* Forget the previous record but keep the buffer. */
void ob_event_reset(ob_event *ev);

/* Resolve a span to a pointer; valid until the event is next changed. An
 * event with no buffer yet (nothing was ever put into it) has only empty
 * spans: they resolve to an empty string, since NULL + 0 is undefined. */
static inline const char *
ob_event_ptr(const ob_event *ev, ob_span s)
{
	return ev->buf != NULL ? ev->buf + s.off : "";
}

/* True when header h of ev is called name. */
static inline bool
ob_event_header_is(const ob_event *ev, const ob_event_header *h, const char *name)
{
	return h->name.len == strlen(name) &&
	       memcmp(ob_event_ptr(ev, h->name), name, h->name.len) == 0;
}

/* Append bytes to the event's buffer and return their span. */
ob_span ob_event_put(ob_event *ev, const void *data, size_t len);
/* Make room for len more bytes and return where they go (never NULL, even
 * for 0 bytes): the caller writes up to len bytes there, then
 * ob_event_claim()s what it wrote. The pointer is valid until the event is
 * next changed. */
char *ob_event_reserve(ob_event *ev, size_t len);
/* Append the len bytes written at ob_event_reserve()'s pointer. */
ob_span ob_event_claim(ob_event *ev, size_t len);
/* Append a header; false (not logged) when OB_EVENT_MAX_HEADERS are in use. */
bool ob_event_add_header(ob_event *ev, const char *name, const void *value, size_t value_len);
/* Append a header whose value is already in the buffer; the name is stored
 * NUL-terminated, as librdkafka wants it. False when OB_EVENT_MAX_HEADERS
 * are in use. */
bool ob_event_add_header_span(ob_event *ev, const char *name, ob_span value);

#endif
