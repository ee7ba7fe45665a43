/*
 * producer.h: the idempotent Kafka producer (librdkafka).
 *
 * outboxd's defaults (deploy/README.md, "Configuration reference") are
 * applied first, then the user's [kafka] properties, then the pinned ones (enable.idempotence=true,
 * acks=all, and enable.gapless.guarantee as the producer's order asks). Delivery reports are served
 * on the caller's thread by ob_producer_poll(); each calls the delivery callback with the tag given
 * to ob_producer_send(). A report that is not OK is final: librdkafka retries everything retriable
 * itself (message.timeout.ms=0 never expires). A failed report is either a suspect (an error that
 * may be the record's own, but the broker answers a whole batch with one code) or a fault of the
 * producer or the cluster. After a fault, and with OB_PRODUCER_PIPELINED after any failed batch,
 * the producer is failed and must be recreated.
 *
 * No libpq type appears here; the producer knows nothing of Postgres.
 */
#ifndef OUTBOXD_PRODUCER_H
#define OUTBOXD_PRODUCER_H

#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/event.h"

typedef struct ob_producer ob_producer;

typedef enum ob_delivery_status {
	OB_DELIVERED,        /* the broker acknowledged the record */
	OB_DELIVERY_SUSPECT, /* refused with an error that may be the record's own */
	OB_DELIVERY_RETRY,   /* a fault of the producer or the cluster; the
			      * producer is already failed when the callback runs */
} ob_delivery_status;

/* What a delivery report says about one record. The record's pointers
 * borrow from librdkafka and are valid only during the callback. */
typedef struct ob_delivery {
	uint64_t tag;
	ob_delivery_status status;
	bool value_too_large; /* refused because the record (or its batch) is too large */
	const char *error;    /* NULL when ok */
	int32_t partition;
	ob_record_view record;
} ob_delivery;

typedef void (*ob_delivery_fn)(void *ctx, const ob_delivery *d);

typedef enum ob_send_result {
	OB_SEND_OK,
	OB_SEND_QUEUE_FULL, /* nothing queued: serve reports and retry */
	OB_SEND_REFUSED,    /* the client refused this one record for good; *why says why */
	OB_SEND_FATAL,      /* the producer is failed (fatal error, unknown or
			     * unauthorized topic): recreate it */
} ob_send_result;

/* How a producer keeps per-partition order when the broker fails a whole
 * batch. */
typedef enum ob_producer_order {
	/* The caller waits for each record's report before producing the
	 * next (the inbox's dead letters): nothing is ever queued behind a
	 * failed batch. */
	OB_PRODUCER_AWAITED,
	/* Many records are in flight (the relay). A failed batch fails the
	 * producer before any record queued behind it is written
	 * (librdkafka's enable.gapless.guarantee: the broker refuses the
	 * later sequence numbers, librdkafka purges the rest), so records
	 * produced again after it come before everything that followed it.
	 * Records produced alone go through a client of their own without
	 * that guarantee, so that their refusal leaves the producer working. */
	OB_PRODUCER_PIPELINED,
} ob_producer_order;

/* The librdkafka version the binary runs with ("2.0.2"); static. */
const char *ob_producer_library_version(void);
/* Create a producer. False (logged, naming the property) if a [kafka]
 * property is unknown or invalid: a configuration error. */
bool ob_producer_new(const ob_config *cfg, ob_producer_order order, ob_delivery_fn on_delivery,
		     void *ctx, ob_producer **out) OB_MUST_CHECK;
/* Destroy without waiting for outstanding records (they are dropped). */
void ob_producer_free(ob_producer *p);

/* Queue one record, tagged for its delivery report. On OB_SEND_REFUSED
 * *why describes the refusal (static text or librdkafka's).
 * OB_SEND_QUEUE_FULL also while records change clients
 * (ob_producer_set_late()). */
ob_send_result ob_producer_send(ob_producer *p, const ob_event *ev, uint64_t tag, const char **why,
				bool *too_large);
/* Records produced from now on are late (late: their transaction was
 * read long after its commit, or they are the backlog): they may wait
 * longer to be batched. A pipelined producer then sends them through a
 * second client with a linger.ms of 5 (unless linger.ms is that long
 * already, or message.timeout.ms too short for it), taking them there
 * once the first has nothing outstanding (until then ob_producer_send()
 * says OB_SEND_QUEUE_FULL), and back the same way when records are no
 * longer late; at most once a second. A backlog then drains in
 * fewer, larger requests, for about a fifth less CPU, while fresh
 * records wait at most linger.ms. */
void ob_producer_set_late(ob_producer *p, bool late);
/* As ob_producer_send(), for a record produced alone: the caller has
 * nothing else in flight and waits for its report (and for the
 * dead-letter record that replaces it) before producing anything else.
 * It goes through a client of its own without the gapless guarantee, made
 * on first use, so its refusal is the record's own and does not fail the
 * producer. */
ob_send_result ob_producer_send_alone(ob_producer *p, const ob_event *ev, uint64_t tag,
				      const char **why, bool *too_large);

/* Serve delivery reports and errors, waiting up to timeout_ms for the
 * first. */
void ob_producer_poll(ob_producer *p, int timeout_ms);
/* As ob_producer_poll(), but what is queued is sent at once, without
 * waiting linger.ms for more records to batch with: for a record produced
 * alone, whose report the caller waits for before producing anything
 * else. Returns once nothing is in flight or after timeout_ms. */
void ob_producer_flush(ob_producer *p, int timeout_ms);
/* A file descriptor that becomes readable when reports are waiting; the
 * caller polls it and then calls ob_producer_poll(p, 0). */
int ob_producer_wake_fd(const ob_producer *p);

/* True once the producer failed: a fatal error, or a delivery report or
 * produce call that a fresh producer may get past (already true inside
 * the delivery callback of such a report). *why (may be NULL) describes
 * it. */
bool ob_producer_failed(const ob_producer *p, const char **why);
/* message.max.bytes: the largest record (key, value and headers with
 * their framing) the client sends. */
size_t ob_producer_max_record_bytes(const ob_producer *p);
/* True while at least one broker connection is up. */
bool ob_producer_connected(const ob_producer *p);

#endif
