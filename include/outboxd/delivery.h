/*
 * delivery.h: handing events to the producer and following them to the
 * broker: delivery reports, dead letters, suspects produced alone, and
 * settling (waiting until everything handed over is acknowledged).
 *
 * The stream (relay.c) and the backlog (cutover.c) hand units over through
 * this module only. A unit (position.h) begins; its mapped events are
 * handed over one by one (skipped when replay.h says they were handed over
 * before the stream broke, produced alone when they are suspects); it
 * commits with the position it confirms. Delivery reports come back inside
 * ob_producer_poll(): they acknowledge events in the ack tracker, queue
 * the dead-letter record of a record the broker refused alone, or mark the
 * records of a refused batch as suspects and break the producer, which the
 * relay then recreates (ob_delivery_recreate()) to read the slot again.
 *
 * One state machine, changed only through set_state() in delivery.c, which
 * logs every transition (at debug level):
 *
 *   flowing ──settle──> settling ──nothing in flight──> flowing
 *   flowing ──a suspect read again──> isolating ──its report──> flowing
 *   any ──a batch refused, the producer failed──> broken ──recreate──> flowing
 *   any ──a record needs an operator──> halted (final)
 *
 * Dead-letter records cannot be produced inside the report callback
 * (producing may wait for queue room): they wait in a FIFO (dlqueue.h)
 * that ob_delivery_serve() and settling drain. Waiting for queue room only
 * serves reports and never drains, so no publish runs inside another.
 */
#ifndef OUTBOXD_DELIVERY_H
#define OUTBOXD_DELIVERY_H

#include "outboxd/acktrack.h"
#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/dlqueue.h"
#include "outboxd/event.h"
#include "outboxd/hold.h"
#include "outboxd/metrics.h"
#include "outboxd/outbox.h"
#include "outboxd/outcome.h"
#include "outboxd/producer.h"
#include "outboxd/replay.h"
#include "outboxd/runtime.h"

/* What the caller does while deliveries wait. */
typedef struct ob_delivery_hooks {
	/* After each wait for the producer (queue room, reports while
	 * settling): keep the caller's duties going (status updates,
	 * liveness). False with *out set when the connection must end. */
	bool (*tick)(void *ctx, ob_outcome *out);
	/* Before an event of the open unit is handed over (not one that is
	 * skipped): wait until it may be (tableset.h). NULL: never wait. */
	bool (*cover)(void *ctx, ob_outcome *out);
	void *ctx;
} ob_delivery_hooks;

/* A unit read this long after its commit is part of a backlog. */
#define OB_DELIVERY_LATE_MS 100

typedef enum ob_delivery_state {
	OB_DELIVERY_FLOWING,   /* events are queued as they come */
	OB_DELIVERY_SETTLING,  /* waiting for every report: queued records go out at once */
	OB_DELIVERY_ISOLATING, /* a suspect is in flight alone: its refusal is its own */
	OB_DELIVERY_BROKEN,    /* the producer must be recreated; nothing more is queued */
	OB_DELIVERY_HALTED,    /* a record needs an operator: exit 1 */
} ob_delivery_state;

typedef struct ob_deliveries {
	const ob_config *cfg;
	ob_delivery_hooks hooks;
	ob_producer *producer;
	ob_acktrack ack;  /* what may be confirmed */
	ob_replay replay; /* what was handed over, and the suspects */
	ob_delivery_state state;
	char broken_why[256];  /* a refused batch broke the producer ("" otherwise) */
	ob_event_pos isolated; /* isolating: the suspect in flight */
	ob_dlqueue refused;    /* dead-letter records waiting to be produced */
	ob_event dlq_ev;       /* a dead-letter record built for a refused record, reused */
	ob_event small_ev;     /* a dead-letter record cut down to headers, reused */
	ob_hold hold;          /* on_bad_event = hold_key: the held keys */

	/* The open unit (its position is in replay). */
	int64_t unit_commit_us;
	/* The last unit with a commit time (ob_delivery_begin()'s timed) was
	 * read more than OB_DELIVERY_LATE_MS after its commit, or the unit is
	 * the backlog: its records are late (ob_producer_set_late()). */
	bool behind;
	bool unit_tracked; /* it has an entry in the ack tracker (unit_seq) */
	uint64_t unit_seq;
	bool backlog; /* it is the backlog: acknowledgements count as backlog events */

	/* Producers keep failing with the slot no further on: /readyz says
	 * kafka-down until a record is delivered again. */
	bool kafka_failing;
	ob_backoff recreate_backoff; /* before reading again, when a new producer fails again */
	ob_lsn last_recreated;       /* the confirmable LSN when the last one was made */
} ob_deliveries;

/* Set up d and create its producer. False (logged) when the producer
 * cannot be made: a configuration error. d is then still freed with
 * ob_delivery_free(). */
bool ob_delivery_init(ob_deliveries *d, const ob_config *cfg,
		      ob_delivery_hooks hooks) OB_MUST_CHECK;
void ob_delivery_free(ob_deliveries *d);

/* Start handing over a unit (a transaction, a standalone message or the
 * backlog) at position unit, committed at commit_us. timed: commit_us is
 * the unit's commit time, which says whether its records are late
 * (behind); false for a standalone message, timed when it is read, whose
 * records are taken to be as late as those before it. It gets an ack
 * tracker entry with its first event only: the many transactions wal2json
 * sends as bare B/C pairs cost no memory while events are in flight. */
void ob_delivery_begin(ob_deliveries *d, ob_pos unit, int64_t commit_us, bool timed);
/* Hand over the event ev that mapping gave mr (a dead-letter record:
 * logged, or a halt with on_bad_event = halt; OB_MAP_SKIP: nothing) of the
 * open unit at lsn, waiting while the producer's queue is full (the WAL is
 * not read meanwhile: that is the backpressure). False with *out set when
 * the connection must end. */
bool ob_delivery_hand_over(ob_deliveries *d, const ob_event *ev, ob_map_result mr, ob_lsn lsn,
			   ob_outcome *out) OB_MUST_CHECK;
/* The open unit committed; end_lsn is what it confirms (position.h). True
 * when it had events in the ack tracker (not skipped, not empty). */
bool ob_delivery_commit(ob_deliveries *d, ob_lsn end_lsn);
/* The stream broke: the open unit's entry confirms nothing, and replay
 * remembers how far it got. */
void ob_delivery_cut(ob_deliveries *d);
/* The backlog's unit ends, published whole or not: its entry confirms no
 * WAL position (cutover.c), and replay starts from nothing, keeping its
 * suspects. */
void ob_delivery_end_backlog(ob_deliveries *d);

/* Serve delivery reports for up to timeout_ms, then produce the
 * dead-letter records they queued. False with *out set when the relay must
 * leave the connection (halted, broken). */
bool ob_delivery_serve(ob_deliveries *d, int timeout_ms, ob_outcome *out) OB_MUST_CHECK;
/* Serve reports until every record handed over is acknowledged and no
 * dead-letter record waits; what is queued meanwhile is sent at once,
 * without lingering. */
bool ob_delivery_settle(ob_deliveries *d, ob_outcome *out) OB_MUST_CHECK;
/* Serve delivery reports only, for up to timeout_ms (a producer that
 * fails meanwhile is noticed by the next ob_delivery_serve()). */
void ob_delivery_poll(ob_deliveries *d, int timeout_ms);

/* At a stop: write the held keys' waiting rows (hold.h), so that the last
 * confirmation goes as far as it can; not after a halt, whose hold may
 * stand behind a dead letter never published (refused too): the next start
 * reads those events again and judges them anew. */
void ob_delivery_write_holds(ob_deliveries *d);
/* Tell /healthz, /readyz, the gauges and systemd's watchdog that the loop
 * is alive; streaming says whether the replication stream is up. */
void ob_delivery_alive(ob_deliveries *d, bool streaming);
/* Wait up to ms, serving delivery reports, with state on /readyz. False
 * when a stop was requested. */
bool ob_delivery_pause(ob_deliveries *d, int64_t ms, ob_ready_state state);
/* True while the producer has a broker connection up. */
bool ob_delivery_connected(const ob_deliveries *d);

/* Recreate the producer: everything not confirmed is read again from the
 * slot, from from (at-least-once); suspects are then produced alone. When
 * the last producer failed with the slot no further on, wait first, at a
 * growing interval. False with *out set: OB_OUTCOME_HALT when no producer
 * can be made (the same settings worked at start), OB_OUTCOME_STOP when a
 * stop came while waiting. */
bool ob_delivery_recreate(ob_deliveries *d, ob_lsn from, ob_outcome *out) OB_MUST_CHECK;

#endif
