/*
 * outbox.h: mapping an outbox row or logical message to a Kafka record
 * (SPEC.md §3).
 *
 * The mapper reads a row through the column names of [outbox] and fills an
 * ob_event: topic from the template, key, value, headers and timestamp. The
 * event's bytes live in one growing buffer that is reused from event to
 * event, so steady-state mapping does not allocate.
 *
 * A row that cannot be mapped (NULL key or id, undecodable payload or
 * headers, a topic placeholder naming a missing column) is a bad event: the
 * mapper then builds the dead-letter record instead (topic dlq_topic,
 * headers "error" and "source-lsn" followed by whatever original headers
 * could be read, value the original payload) and says why in the reason.
 */
#ifndef OUTBOXD_OUTBOX_H
#define OUTBOXD_OUTBOX_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/lsn.h"
#include "outboxd/wal2json.h"

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
	ob_event_header headers[OB_EVENT_MAX_HEADERS];
	size_t headers_len;
	int64_t timestamp_ms;

	/* Set when this is a dead-letter record: a short reason for metrics
	 * ("missing-key", "bad-payload", …); NULL for a normal event. */
	const char *dlq_reason;
} ob_event;

typedef enum ob_map_result {
	OB_MAP_EVENT, /* ev holds the record to publish */
	OB_MAP_DLQ,   /* ev holds the dead-letter record; ev->dlq_reason says why */
	OB_MAP_SKIP,  /* not an outbox insert or message: nothing to publish */
} ob_map_result;

/* The mapper keeps two buffers it reuses from event to event: the decoded
 * text of a logical message and of a headers object. */
typedef struct ob_mapper {
	const ob_config *cfg;
	char *content_buf; /* owned */
	size_t content_cap;
	char *headers_buf; /* owned */
	size_t headers_cap;
} ob_mapper;

void ob_mapper_init(ob_mapper *m, const ob_config *cfg);
void ob_mapper_free(ob_mapper *m);

/* Map an I record of the outbox table (other tables give OB_MAP_SKIP).
 * commit_ms is the transaction's commit time, the timestamp when no
 * timestamp column is configured. */
ob_map_result ob_mapper_map_insert(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
				   ob_event *ev);

/* Map an M record. Messages with another prefix give OB_MAP_SKIP;
 * non-transactional ones with the outbox prefix are bad events. */
ob_map_result ob_mapper_map_message(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
				    ob_event *ev);

/* Start a dead-letter record in ev (which is reset first): topic
 * dlq_topic, headers "error" and "source-lsn", dlq_reason = reason. The
 * caller then adds the original headers, key and value it has. reason must
 * be a string constant (it is kept by pointer). */
void ob_event_begin_dlq(ob_event *ev, const ob_config *cfg, const char *reason, const char *error,
			ob_lsn source_lsn);

/* A record seen from outside an ob_event: what a delivery report returns,
 * or an event's spans resolved. All pointers are borrowed. */
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

/* Build in out the dead-letter record of a record the broker or client
 * refused for good: headers "error" and "source-lsn", then the original
 * headers, the original key and value. When value_too_large the value is
 * left out and a "payload-size" header says how large it was. out must not
 * be the event orig points into. */
void ob_event_build_dlq(ob_event *out, const ob_config *cfg, const char *reason, const char *error,
			ob_lsn source_lsn, const ob_record_view *orig, bool value_too_large);

/* Initialise and release an event's buffer. */
void ob_event_init(ob_event *ev);
void ob_event_free(ob_event *ev);
/* Forget the previous record but keep the buffer. */
void ob_event_reset(ob_event *ev);

/* Resolve a span to a pointer; valid until the event is next changed. */
static inline const char *
ob_event_ptr(const ob_event *ev, ob_span s)
{
	return ev->buf + s.off;
}

/* Append bytes to the event's buffer and return their span. */
ob_span ob_event_put(ob_event *ev, const void *data, size_t len);
/* Append a header; false (not logged) when OB_EVENT_MAX_HEADERS are in use. */
bool ob_event_add_header(ob_event *ev, const char *name, const void *value, size_t value_len);

#endif
