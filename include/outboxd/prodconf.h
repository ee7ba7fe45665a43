/*
 * prodconf.h: the librdkafka configuration of outboxd's producer clients
 * (deploy/README.md, "Configuration reference"): outboxd's defaults, the
 * user's [kafka] properties over them, and what outboxd pins.
 *
 * message.timeout.ms is outboxd's to enforce, not librdkafka's: a record
 * that expires inside librdkafka is not covered by its gapless guarantee
 * (it starts a new producer epoch and goes on writing the records queued
 * behind, so a later record of the key could be written first). The
 * clients get 0 (never expire) and outboxd gives up on a producer whose
 * records wait that long unacknowledged (expiry.h).
 */
#ifndef OUTBOXD_PRODCONF_H
#define OUTBOXD_PRODCONF_H

#include <librdkafka/rdkafka.h>

#include "outboxd/common.h"
#include "outboxd/config.h"

/* linger.ms of the client for late records (producer.c). */
#define OB_PRODCONF_LATE_LINGER_MS 5

/* Build a client's configuration; NULL (logged) on a bad key. gapless
 * sets enable.gapless.guarantee, after the user's properties: a pipelined
 * producer's order does not depend on them. linger_ms, when not NULL,
 * replaces linger.ms (the client for late records). *timeout_ms (when not
 * NULL) gets the message.timeout.ms the user asked for (0: none). */
rd_kafka_conf_t *ob_prodconf_build(const ob_config *cfg, bool gapless, const char *linger_ms,
				   long long *timeout_ms);

/* Check the configuration by building (not starting) a producer config:
 * false, logged, if a property is rejected. */
bool ob_prodconf_check(const ob_config *cfg) OB_MUST_CHECK;

#endif
