/*
 * http.h: the metrics and health endpoints (deploy/README.md, "Metrics and health"), served by
 * libmicrohttpd on a thread of its own so scrapes never touch the relay's
 * loop: /metrics renders the atomics of metrics.c, /healthz says whether
 * the main loop still turns, /readyz whether outboxd is streaming with a
 * healthy producer.
 */
#ifndef OUTBOXD_HTTP_H
#define OUTBOXD_HTTP_H

#include "outboxd/common.h"

typedef struct ob_http ob_http;

/* True if listen is empty or a valid "host:port", "[v6]:port" or ":port"
 * (a configuration check; nothing is bound). */
bool ob_http_listen_valid(const char *listen);

/* Start serving on listen ("host:port", "[v6]:port" or ":port"). An empty
 * listen disables the server: *out is NULL and the result true. False
 * (logged) if the address is invalid or cannot be bound. */
bool ob_http_start(const char *listen, ob_http **out) OB_MUST_CHECK;
void ob_http_stop(ob_http *h);

#endif
