/*
 * kafka.h: what the Kafka layer's two clients share (librdkafka).
 *
 * The Kafka layer is kafka.c, kafkaauth.c, producer.c, consumer.c and
 * dlqtopic.c, and only they include this header, the one that brings in
 * librdkafka's types (with topicids.h, the consumer's topic ids): every
 * other module speaks to Kafka through producer.h, consumer.h and
 * dlqtopic.h.
 *
 * A client's configuration is built in one order: outboxd's defaults for
 * that client, the user's [kafka] properties, then the properties the
 * client pins (config.h), so a pinned value always wins; [kafka_auth]
 * (kafkaauth.h) comes with it. Broker state
 * (outboxd_kafka_connected, /readyz) comes only from librdkafka's
 * statistics, which are therefore always on.
 */
#ifndef OUTBOXD_KAFKA_H
#define OUTBOXD_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"

/* The statistics interval set when the user's is 0 (off, librdkafka's
 * default); a positive one is kept. */
#define OB_KAFKA_STATS_INTERVAL_MS "1000"

/* Build a client configuration: defaults, then the user's [kafka]
 * properties except those named in skip (NULL: none; the consumer skips
 * the producer's pinned ones, which mean nothing to it), then pinned; the
 * statistics are kept on. NULL (logged, naming every property librdkafka
 * rejects) on a bad property. */
rd_kafka_conf_t *ob_kafka_conf_build(const ob_config *cfg, const ob_kafka_setting *defaults,
				     size_t defaults_len, const ob_kafka_setting *skip,
				     size_t skip_len, const ob_kafka_setting *pinned,
				     size_t pinned_len);
/* rd_kafka_new() (NULL with err set, and conf still the caller's, when
 * it fails), with the client's [kafka_auth] token refreshes started
 * (kafkaauth.h). Every client outboxd makes comes from here. */
rd_kafka_t *ob_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t err_len);
/* Set one property; false (logged, naming kafka.<key>) when librdkafka
 * rejects it. */
bool ob_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value) OB_MUST_CHECK;
/* A numeric property of conf (0 when unset or unreadable). */
long long ob_kafka_conf_number(const rd_kafka_conf_t *conf, const char *key);

/* consumer.c: the configuration of a client that reads topics (the inbox
 * consumer's, dlqtopic.c's reader): outboxd's consumer defaults, the
 * user's [kafka] but for the producer's pinned properties (which mean
 * nothing to a consumer), the consumer's pinned properties (no auto
 * commit or offset store, auto.offset.reset = error), group.id = group.
 * NULL (logged) when a property is rejected. */
rd_kafka_conf_t *ob_consumer_conf_build(const ob_config *cfg, const char *group);

/* kafkaauth.c: set conf up for cfg's [kafka_auth] (nothing with method = none). */
void ob_kafkaauth_conf(rd_kafka_conf_t *conf, const ob_config *cfg);

/* Start a client's token refreshes on its background thread (nothing with
 * method = none). When librdkafka cannot, that is logged: the client
 * then gets no token and reaches no broker, which outboxd reports as
 * brokers down. */
void ob_kafkaauth_start(rd_kafka_t *rk);

/* The log callback: librdkafka's lines to outboxd's logger, with fields
 * component=librdkafka and its facility. */
void ob_kafka_log(const rd_kafka_t *rk, int level, const char *facility, const char *buf);

/* A client's brokers as its error and statistics callbacks tell them
 * (the producer's and the inbox consumer's): how many are up, and whether
 * "all brokers are down" was logged and "up again" not yet. */
typedef struct ob_kafka_brokers {
	int up;
	bool down;
} ob_kafka_brokers;

/* An error callback's err and reason. librdkafka's own log already has a
 * line for a failed connection or name lookup, so those are logged at
 * debug only, "all brokers are down" once (and, with count, no broker is
 * up any more), any other error as a warning. True when all brokers are
 * down. */
bool ob_kafka_brokers_error(ob_kafka_brokers *b, bool count, int err, const char *reason);
/* A statistics callback's JSON: the brokers up (bootstrap entries left
 * out), and "up again" logged when they were down. */
void ob_kafka_brokers_stats(ob_kafka_brokers *b, const char *json, size_t json_len);

/* The record of m as a view borrowing m: topic, key, value, timestamp
 * and, with headers, at most OB_EVENT_MAX_HEADERS of its headers. False
 * when it has more headers than that. */
bool ob_kafka_record_view(const rd_kafka_message_t *m, bool headers, ob_record_view *v);

#endif
