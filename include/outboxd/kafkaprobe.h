/*
 * kafkaprobe.h: `outboxd check`'s look at the Kafka cluster.
 *
 * One short-lived client (the producer's configuration, no records)
 * fetches the cluster's metadata: whether it is reachable, how many
 * brokers and topics it has, whether the dead-letter topic exists. The
 * same client logs, under librdkafka's "feature" debug context, the
 * protocol features it enabled for each broker it talked to, from the
 * API versions that broker offered; those say whether this librdkafka
 * and these brokers fit together (deploy/README.md, "Kafka versions"):
 *
 *   - IdempotentProducer: the publisher needs it (Kafka 0.11 and later);
 *   - Sasl: librdkafka's Kerberos (sasl.mechanism GSSAPI). Before
 *     librdkafka 2.11 it is enabled only for a broker that offers
 *     JoinGroup v0, which Apache Kafka 4.0.0 removed (KIP-896), so
 *     neither daemon can authenticate there;
 *   - BrokerBalancedConsumer: librdkafka's classic consumer groups, also
 *     tied to JoinGroup v0 before 2.11. Without it the inbox's consumer
 *     still joins its group with the later JoinGroup versions.
 */
#ifndef OUTBOXD_KAFKAPROBE_H
#define OUTBOXD_KAFKAPROBE_H

#include "outboxd/common.h"
#include "outboxd/config.h"

/* What the probe saw. */
typedef struct ob_kafka_probe {
	bool reached;      /* the metadata request was answered */
	bool topic_exists; /* the topic asked about is in it */
	bool gssapi;       /* the configuration authenticates with Kerberos */
	int brokers;       /* brokers whose features librdkafka reported */
	char detail[640];  /* the brokers and topics, or why not reached */
	char first[128];   /* the first broker whose features were seen */
	/* The first broker lacking each feature (empty: none did). */
	char no_idempotence[128];
	char no_sasl[128];
	char no_groups[128];
} ob_kafka_probe;

/* Connects with the producer's configuration, waits up to timeout_ms for
 * the metadata and fills *p. topic (may be NULL) is the one whose
 * existence p->topic_exists reports. Returns p->reached. */
bool ob_kafka_probe_run(const ob_config *cfg, int timeout_ms, const char *topic, ob_kafka_probe *p);

/* The `kafka fit` line of `check`, into buf: whether the linked
 * librdkafka and the brokers p saw fit together, for the publisher and
 * for the inbox. False when they do not (a daemon could not work with
 * them). Only meaningful when p->brokers > 0. */
bool ob_kafka_probe_fit(const ob_kafka_probe *p, char *buf, size_t size);

#endif
