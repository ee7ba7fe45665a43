/*
 * prodconf.c: the producer clients' librdkafka configuration (prodconf.h).
 */
#include "outboxd/prodconf.h"

#include "outboxd/kafka.h"
#include "outboxd/log.h"

/* outboxd's defaults, applied before the user's properties (deploy/README.md, "Configuration
 * reference"). */
static const ob_kafka_setting default_props[] = {
    {"partitioner", "murmur2_random"},
    {"message.timeout.ms", "0"},
    /* Batches come mostly from load: a record waits at most 1 ms for
     * others, and what arrives while requests are in flight (up to 5 per
     * broker, librdkafka's most with idempotence) forms the next batches
     * (tests/README.md, "Latency: batches from load"). At 5,000 events/s
     * the commit -> ack p50 went from 8 ms (linger.ms 5) to 2.6 ms at no
     * more CPU; linger.ms 0 gave 2 ms but cost a third more CPU on a
     * backlog, in requests of a few records each. Late records wait
     * OB_PRODCONF_LATE_LINGER_MS instead. */
    {"linger.ms", "1"},
    {"compression.type", "lz4"},
    {"statistics.interval.ms", OB_KAFKA_STATS_INTERVAL_MS},
    /* Bound what the producer buffers: the WAL is the real buffer. */
    {"queue.buffering.max.kbytes", "4096"},
    {"queue.buffering.max.messages", "50000"},
    {"client.id", "outboxd"},
};

/* The producer queue must hold the largest record the client accepts,
 * else such a record waits for room forever. Raise outboxd's default to
 * two such records; a user's explicit smaller value is an error. */
static bool
fit_queue_to_records(const ob_config *cfg, rd_kafka_conf_t *conf)
{
	long long max_bytes = ob_kafka_conf_number(conf, "message.max.bytes");
	long long need_kb = (2 * max_bytes + 1023) / 1024;
	char value[32];

	if (ob_kafka_conf_number(conf, "queue.buffering.max.kbytes") >= need_kb)
		return true;
	if (ob_config_kafka_get(cfg, "queue.buffering.max.kbytes") != NULL) {
		ob_error("invalid kafka.queue.buffering.max.kbytes: must be at least %lld to "
			 "hold two records of kafka.message.max.bytes (%lld)",
			 need_kb, max_bytes);
		return false;
	}
	snprintf(value, sizeof(value), "%lld", need_kb);
	return ob_kafka_conf_set(conf, "queue.buffering.max.kbytes", value);
}

rd_kafka_conf_t *
ob_prodconf_build(const ob_config *cfg, bool gapless, const char *linger_ms, long long *timeout_ms)
{
	rd_kafka_conf_t *conf = ob_kafka_conf_build(cfg, default_props, OB_ARRAY_LEN(default_props),
						    NULL, 0, ob_kafka_pinned, ob_kafka_pinned_len);

	if (conf != NULL && timeout_ms != NULL)
		*timeout_ms = ob_kafka_conf_number(conf, "message.timeout.ms");
	if (conf != NULL &&
	    (!ob_kafka_conf_set(conf, "message.timeout.ms", "0") ||
	     !ob_kafka_conf_set(conf, "enable.gapless.guarantee", gapless ? "true" : "false") ||
	     (linger_ms != NULL && !ob_kafka_conf_set(conf, "linger.ms", linger_ms)) ||
	     !fit_queue_to_records(cfg, conf))) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	return conf;
}

bool
ob_prodconf_check(const ob_config *cfg)
{
	rd_kafka_conf_t *conf = ob_prodconf_build(cfg, true, NULL, NULL);

	if (conf == NULL)
		return false;
	rd_kafka_conf_destroy(conf);
	return true;
}
