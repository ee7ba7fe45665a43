/*
 * expiry.h: outboxd's own kafka.message.timeout.ms (prodconf.h says why
 * librdkafka's is off).
 *
 * One producer client's records in flight: how many were produced and not
 * yet reported, and when they last moved (a report came, or a record was
 * produced while none was outstanding). Records that have not moved for
 * the timeout mean the client gave up on nothing by itself and never
 * will: producer.c then fails the producer, which the relay recreates, so
 * the records are read again from the slot, in order.
 *
 * Pure bookkeeping: no I/O, no logging.
 */
#ifndef OUTBOXD_EXPIRY_H
#define OUTBOXD_EXPIRY_H

#include "outboxd/common.h"

typedef struct ob_expiry {
	uint64_t outstanding; /* produced, not yet reported */
	int64_t moved_ms;     /* when they last moved (monotonic) */
} ob_expiry;

/* A record was produced at now_ms. */
void ob_expiry_produced(ob_expiry *e, int64_t now_ms);
/* A record's report (any outcome, purged ones included) came at now_ms. */
void ob_expiry_reported(ob_expiry *e, int64_t now_ms);
/* Whether records are outstanding and none moved for timeout_ms by now_ms
 * (timeout_ms 0: never). */
bool ob_expiry_due(const ob_expiry *e, long long timeout_ms, int64_t now_ms);

#endif
