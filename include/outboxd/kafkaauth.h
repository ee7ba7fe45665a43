/*
 * kafkaauth.h: [kafka_auth] on every Kafka client outboxd makes
 * (deploy/README.md, "Short-lived credentials").
 *
 * With kafka_auth.method = command, each client's OAUTHBEARER token comes
 * from kafka_auth.token_command (credcmd.h): librdkafka's token refresh
 * callback runs it when the client starts and again before the token
 * expires (at 80% of its lifetime_ms), on librdkafka's background thread,
 * so a slow command never holds outboxd's own loop. A command that fails
 * is logged and reported to librdkafka, which asks again 10 s later;
 * connections already authenticated stay up meanwhile. With method =
 * none, librdkafka's own [kafka] sasl.* settings apply.
 *
 * The Kafka layer sets its clients up with ob_kafkaauth_conf() and
 * ob_kafkaauth_start() (kafka.h); the first configuration given to
 * ob_kafkaauth_conf() is the one every client of the process uses.
 */
#ifndef OUTBOXD_KAFKAAUTH_H
#define OUTBOXD_KAFKAAUTH_H

#include "outboxd/common.h"
#include "outboxd/config.h"

/* The `kafka auth` line of `outboxd check`, into buf: the credential
 * source and, with a token command, how its latest run went and whether
 * the broker accepted the token (reached: a broker answered the client
 * that used it). False when the command failed or no broker took the
 * token. */
bool ob_kafkaauth_report(const ob_config *cfg, bool reached, char *buf, size_t size);

#endif
