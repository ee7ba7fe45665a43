/*
 * inbox.h: `outboxd inbox` (sql/README.md, "The inbox tables"): consume inbox.topics with
 * librdkafka's consumer and write every record into the inbox table,
 * exactly once, through inboxdb.c.
 */
#ifndef OUTBOXD_INBOX_H
#define OUTBOXD_INBOX_H

#include "outboxd/config.h"

/* Run until SIGTERM or SIGINT (0), a condition that needs an operator (1:
 * tables missing, a bad record with on_bad_event = halt, a dead-letter
 * publish that failed) or a configuration error (2). Serves the metrics
 * of metrics.c; the caller runs the HTTP server. */
int ob_inbox_run(const ob_config *cfg);

#endif
