/*
 * consumer.h: the inbox's Kafka consumer (librdkafka), in the Kafka layer.
 *
 * It subscribes to inbox.topics in consumer group inbox.group, with
 * outboxd's consumer defaults, the user's [kafka] properties and the
 * consumer's pinned ones (no auto commit, no auto offset store,
 * auto.offset.reset = error). Partitions are assigned paused and stay
 * "unstarted" until the inbox has judged their stored positions and
 * started them (ob_consumer_start()); a partition the broker can no longer
 * serve at its position is assigned again, paused and unstarted, so that
 * its start judges it again. For each assigned partition the consumer
 * keeps where it resumes after a failure: the stored position, else the
 * first record read from it.
 *
 * Rebalance callbacks run inside ob_consumer_poll() on the caller's
 * thread; a revocation calls the revoking hook first, so that what was
 * read is stored before the partitions go. No librdkafka type appears
 * here: a record read is an ob_consumer_record.
 */
#ifndef OUTBOXD_CONSUMER_H
#define OUTBOXD_CONSUMER_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"

typedef struct ob_consumer ob_consumer;

/* One partition of a topic and an offset (its meaning is the caller's;
 * negative: none). topic is borrowed from the consumer and valid until
 * the next ob_consumer_poll(). */
typedef struct ob_kpart {
	const char *topic;
	int32_t partition;
	int64_t offset;
} ob_kpart;

/* One record read: owned by the caller until ob_consumer_record_free(). */
typedef struct ob_consumer_record {
	const char *topic; /* valid as long as the record */
	int32_t partition;
	int64_t offset;
	void *msg; /* the consumer's */
} ob_consumer_record;

/* What the consumer tells its owner, from inside ob_consumer_poll(). */
typedef struct ob_consumer_hooks {
	void (*revoking)(void *ctx); /* partitions are taken away: store what was read */
	void (*lost)(void *ctx);     /* a rebalance failed: drop what was read */
	void (*brokers)(void *ctx);  /* the number of brokers up may have changed */
	void *ctx;
} ob_consumer_hooks;

/* Whether the consumer's configuration is valid (logged when not), before
 * its group is known. */
bool ob_consumer_check_config(const ob_config *cfg) OB_MUST_CHECK;

/* Create the consumer in consumer group group and subscribe to
 * inbox.topics. NULL (logged) on a configuration error. */
ob_consumer *ob_consumer_new(const ob_config *cfg, const char *group, ob_consumer_hooks hooks);
/* Leave the group (a revocation runs the revoking hook) and destroy.
 * NULL is a no-op. */
void ob_consumer_free(ob_consumer *c);

typedef enum ob_consumer_poll_result {
	OB_CONSUMER_NONE,   /* nothing came in time */
	OB_CONSUMER_RECORD, /* a record of a started partition */
	OB_CONSUMER_OTHER,  /* an error (logged), or a record of a partition not
			     * started yet (dropped: its start seeks it) */
} ob_consumer_poll_result;

/* Serve the consumer for up to timeout_ms; on OB_CONSUMER_RECORD *rec is
 * the record read. */
ob_consumer_poll_result ob_consumer_poll(ob_consumer *c, int timeout_ms, ob_consumer_record *rec);
/* Serve the consumer for up to timeout_ms while the partitions are paused,
 * dropping what comes anyway (it is read again after the seek that starts
 * or resumes its partition). */
void ob_consumer_poll_drop(ob_consumer *c, int timeout_ms);
/* The record as a view borrowing it, with at most OB_EVENT_MAX_HEADERS of
 * its headers. False when it has more. */
bool ob_consumer_record_view(const ob_consumer_record *rec, ob_record_view *v);
/* Header i of the record (all of them, past OB_EVENT_MAX_HEADERS too);
 * false past the last. */
bool ob_consumer_record_header(const ob_consumer_record *rec, size_t i, const char **name,
			       const void **value, size_t *len);
void ob_consumer_record_free(ob_consumer_record *rec);

/* Brokers up, from librdkafka's statistics. */
int ob_consumer_brokers_up(const ob_consumer *c);
/* The Kafka cluster's id as read by the latest ob_consumer_read_cluster_id()
 * ("" before). */
const char *ob_consumer_cluster_id(const ob_consumer *c);
/* Ask the broker for its cluster id; false (logged) when it did not
 * answer in time. */
bool ob_consumer_read_cluster_id(ob_consumer *c) OB_MUST_CHECK;
/* Ask the cluster for the ids of the topics of the n parts (one request,
 * waiting up to a timeout; topicids.h): a topic deleted and created again
 * has a new one. Never fails: a topic whose id is not to be had (no
 * answer, librdkafka before 2.3.0, a broker that gives none) has none,
 * rather than the id kept from an earlier answer (logged). */
void ob_consumer_read_topic_ids(ob_consumer *c, const ob_kpart *parts, size_t n);
/* The id of topic as read by the latest ob_consumer_read_topic_ids() that
 * asked for it; "" when not known. */
const char *ob_consumer_topic_id(const ob_consumer *c, const char *topic);

/* The assigned partitions, or those not started yet, in a new array of
 * *n (the caller frees); each .offset is where the partition resumes (see
 * above; negative: nowhere yet). */
ob_kpart *ob_consumer_assigned(const ob_consumer *c, size_t *n);
ob_kpart *ob_consumer_unstarted(const ob_consumer *c, size_t *n);
size_t ob_consumer_unstarted_count(const ob_consumer *c);

/* The group's committed offset of each part (negative where there is
 * none); false (logged) when the broker did not answer. */
bool ob_consumer_group_offsets(ob_consumer *c, ob_kpart *parts, size_t n) OB_MUST_CHECK;
/* A partition's watermarks, asked from the broker; false when it did not
 * answer (logged with log). */
bool ob_consumer_watermarks(ob_consumer *c, const char *topic, int32_t partition, int64_t *low,
			    int64_t *high, bool log) OB_MUST_CHECK;

/* Start the unstarted partitions: parts are all of them, each .offset
 * where it starts (also where it resumes after a failure); seek them
 * there and resume them. False (logged) when a seek failed: they stay
 * unstarted. */
bool ob_consumer_start(ob_consumer *c, const ob_kpart *parts, size_t n) OB_MUST_CHECK;
/* After a failure: parts are the assigned partitions, each .offset where
 * it resumes (negative: nothing read yet, nowhere to seek); seek them there
 * and resume every assigned partition. False (logged) when a seek failed. */
bool ob_consumer_resume_at(ob_consumer *c, const ob_kpart *parts, size_t n) OB_MUST_CHECK;
/* Pause parts (assigned, started) and take them as not started: the owner
 * starts them again as at assignment (ob_consumer_start()). */
void ob_consumer_unstart(ob_consumer *c, const ob_kpart *parts, size_t n);
/* Pause every assigned partition (the database is away). */
void ob_consumer_pause(ob_consumer *c);
/* Positions were stored: each .offset is the partition's next offset.
 * They become where the partitions resume, and are committed to Kafka
 * asynchronously (for monitoring tools, and to tell a restored database
 * apart). */
void ob_consumer_stored(ob_consumer *c, const ob_kpart *parts, size_t n);

/* The lag of partitions not started yet, as the caller computed it
 * (each .offset a count of records), kept for ob_consumer_report_lag(). */
void ob_consumer_set_unstarted_lag(ob_consumer *c, const ob_kpart *lags, size_t n);
/* The lag of each assigned partition (its high watermark as the consumer
 * last heard it, minus where it resumes; for a partition not started,
 * what ob_consumer_set_unstarted_lag() kept) and their sum, to metrics.h. */
void ob_consumer_report_lag(ob_consumer *c);

#endif
