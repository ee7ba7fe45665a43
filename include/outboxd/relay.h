/*
 * relay.h: the main loop that moves events from the slot to Kafka.
 *
 * One thread waits on the Postgres socket and the producer's wake-up pipe,
 * reads the slot's records (wal2json or pgoutput: decoder.h), maps them and
 * hands them to the producer (delivery.h), and confirms the slot up to what
 * the ack tracker and the stream's tables allow (tableset.h). It reconnects to
 * Postgres with exponential backoff, waits as a standby while another
 * process holds the slot, recreates the producer after a fatal error, and
 * on SIGTERM/SIGINT flushes (up to 30 s), confirms and returns.
 */
#ifndef OUTBOXD_RELAY_H
#define OUTBOXD_RELAY_H

#include "outboxd/config.h"

/* Run until stopped; returns the exit code (0 stopped cleanly, 1 needs an
 * operator, 2 configuration error). Installs SIGTERM/SIGINT handlers. */
int ob_relay_run(const ob_config *cfg);

/* `slot create` with outbox.backlog_where set: create the slot after
 * publishing the backlog (sql/README.md, "Migrating from a polling outbox processor").
 * Returns the exit code: 0 only once every backlog row is acknowledged
 * and the slot exists. */
int ob_relay_create_slot(const ob_config *cfg);

#endif
