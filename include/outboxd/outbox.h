/*
 * outbox.h: mapping an outbox row or logical message to a Kafka record
 * (sql/README.md, "The Kafka record").
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

#include "outboxd/change.h"
#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/lsn.h"
#include "outboxd/event.h"
#include "outboxd/wal2json.h"

typedef enum ob_map_result {
	OB_MAP_EVENT, /* ev holds the record to publish */
	OB_MAP_DLQ,   /* ev holds the dead-letter record; ev->dlq_reason says why */
	OB_MAP_SKIP,  /* not an outbox insert or message: nothing to publish */
} ob_map_result;

/* The mapper keeps buffers it reuses from event to event: the decoded
 * text of a logical message and of a headers object, and a scratch event
 * where dead-letter records are built. */
typedef struct ob_mapper {
	const ob_config *cfg;
	char *content_buf; /* owned */
	size_t content_cap;
	char *headers_buf; /* owned */
	size_t headers_cap;
	ob_event scratch; /* owned */
} ob_mapper;

void ob_mapper_init(ob_mapper *m, const ob_config *cfg);
void ob_mapper_free(ob_mapper *m);

/* Map an I record of the outbox table (other tables give OB_MAP_SKIP).
 * commit_ms is the transaction's commit time, the timestamp when no
 * timestamp column is configured. */
ob_map_result ob_mapper_map_insert(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
				   ob_event *ev);
/* Map an I record as a row of the outbox table whatever table it names:
 * the caller knows it is one (a partition of a partitioned outbox table,
 * leafset.h). Other records give OB_MAP_SKIP. */
ob_map_result ob_mapper_map_row(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
				ob_event *ev);

/* Whether msg has the outbox prefix (outbox.message_prefix, not empty):
 * an event, or a bad one when not transactional. */
bool ob_mapper_reads_message(const ob_mapper *m, const ob_logical_message *msg);
/* Map a logical message. Messages with another prefix give OB_MAP_SKIP;
 * non-transactional ones with the outbox prefix are bad events. */
ob_map_result ob_mapper_map_logical_message(ob_mapper *m, const ob_logical_message *msg,
					    int64_t commit_ms, ob_event *ev);

/* Map an M record of wal2json (ob_mapper_map_logical_message() on its
 * fields); other records give OB_MAP_SKIP. */
ob_map_result ob_mapper_map_message(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
				    ob_event *ev);

/* Map a row of the outbox table read with libpq (the backlog). lsn is
 * the source-lsn of a dead-letter record; fallback_ms is the timestamp when
 * no timestamp column is configured or readable. */
ob_map_result ob_mapper_map_text_row(ob_mapper *m, const ob_text_row *row, ob_lsn lsn,
				     int64_t fallback_ms, ob_event *ev);

#endif
