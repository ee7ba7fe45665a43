/*
 * topicids.h: the Kafka topic ids of the inbox's topics, in the Kafka
 * layer (consumer.c alone uses it).
 *
 * A topic id (Kafka 2.8 and later) is a UUID the cluster gives a topic
 * when it is created: a topic deleted and created again under the same
 * name has a new one, which is how the inbox tells such a topic from the
 * one its stored positions belong to (sql/README.md, "The inbox tables").
 * Kept as Kafka writes them, in base64 (22 characters).
 *
 * librdkafka shows them from 2.3.0 on, through the Admin API's
 * DescribeTopics (a Metadata request). Built against an earlier
 * librdkafka, or run with one, no id is ever known. A broker that gives
 * none (Metadata before v10: Kafka before 2.8, or a cluster whose
 * inter-broker protocol is older) answers with the zero UUID, which is no
 * id either.
 */
#ifndef OUTBOXD_TOPICIDS_H
#define OUTBOXD_TOPICIDS_H

#include <librdkafka/rdkafka.h>

#include "outboxd/common.h"
#include "outboxd/consumer.h"

/* Topic names and the id each had when it was last asked for. */
typedef struct ob_topicids ob_topicids;

ob_topicids *ob_topicids_new(void);
void ob_topicids_free(ob_topicids *t);
/* Ask the cluster rk is connected to for the ids of the topics of the n
 * parts (each topic once), in one request waiting up to timeout_ms, and
 * keep them in place of those kept before. A topic whose id the answer
 * does not give (no id, the topic's own error), or every topic when the
 * request failed or timed out, is kept as not known: never the id an
 * earlier answer gave. Failures are logged, as warnings; that no id can
 * be had (librdkafka, broker) is logged once. */
void ob_topicids_read(ob_topicids *t, rd_kafka_t *rk, const ob_kpart *parts, size_t n,
		      int timeout_ms);
/* The id kept for topic; "" when not known or never asked for. */
const char *ob_topicids_get(const ob_topicids *t, const char *topic);

#endif
