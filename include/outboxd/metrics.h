/*
 * metrics.h: the counters and gauges of deploy/README.md "Metrics and health".
 *
 * The relay updates them on its thread; the HTTP server's thread renders
 * them. Scalars are C11 atomics; the per-topic and per-reason counters sit
 * behind one mutex, taken once per update. Rendering never blocks the
 * relay for longer than copying those small tables.
 */
#ifndef OUTBOXD_METRICS_H
#define OUTBOXD_METRICS_H

#include "outboxd/common.h"
#include "outboxd/lsn.h"
#include "outboxd/pgrefusal.h"
#include "outboxd/slotloss.h"

typedef enum ob_ready_state {
	OB_READY_CONNECTING = 0,
	OB_READY_STREAMING,
	OB_READY_STANDBY,
	OB_READY_KAFKA_DOWN,
	OB_READY_PG_REFUSED,   /* connecting, and Postgres refused the last attempt */
	OB_READY_BACKLOG,      /* publishing the backlog before the slot exists */
	OB_READY_STALLED,      /* streaming, but waiting events make no progress */
	OB_READY_STANDBY_WAIT, /* streaming, but the server waits for a standby */
	OB_READY_RECOVERING,   /* recovering a lost slot from the outbox table */
	OB_READY_STATE_COUNT
} ob_ready_state;

/* The slot's wal_status in pg_replication_slots (UNKNOWN: not read yet,
 * or the slot is missing). */
typedef enum ob_wal_status {
	OB_WAL_STATUS_UNKNOWN = 0,
	OB_WAL_STATUS_RESERVED,
	OB_WAL_STATUS_EXTENDED,
	OB_WAL_STATUS_UNRESERVED,
	OB_WAL_STATUS_LOST,
	OB_WAL_STATUS_COUNT
} ob_wal_status;

/* The inbox's records not yet stored in one assigned partition. */
typedef struct ob_partition_lag {
	const char *topic;
	int32_t partition;
	uint64_t records;
} ob_partition_lag;

typedef enum ob_reconnect_target {
	OB_TARGET_POSTGRES = 0,
	OB_TARGET_KAFKA,
} ob_reconnect_target;

/* Which daemon the process is: /metrics shows that daemon's families
 * only (the publisher's, or the inbox's), plus those both have. */
typedef enum ob_metrics_daemon {
	OB_METRICS_PUBLISHER = 0,
	OB_METRICS_INBOX,
} ob_metrics_daemon;

/* Reset the heartbeat, set http.stall_after_ms (deploy/README.md,
 * "Metrics and health": /readyz says stalled when events have been waiting
 * that long with nothing acknowledged, confirmed or stored meanwhile) and
 * the daemon. Every known label value of a labelled counter is exported
 * from the start, at 0, so that an increase() alert sees the first one:
 * every dead-letter reason, and fixed_topic (not NULL: the one topic of a
 * template without placeholders) for the published events. */
void ob_metrics_init(int stall_after_ms, ob_metrics_daemon daemon, const char *fixed_topic);

void ob_metrics_published(const char *topic, size_t topic_len, double latency_seconds);
void ob_metrics_dead_lettered(const char *reason);
void ob_metrics_transaction(void);
/* An event mapped as a CloudEvent carried a traceparent header that is
 * not W3C Trace Context (sql/README.md, "CloudEvents"): it was published as a
 * plain header. Counted each time such an event is mapped. */
void ob_metrics_traceparent_malformed(void);
/* The stream resumed on a server on another timeline (fork.h), with
 * events_beyond_fork events handed over from WAL past its switch point. */
void ob_metrics_timeline_switch(uint64_t events_beyond_fork);
/* One backlog row was acknowledged by the broker (or dead-lettered). */
void ob_metrics_backlog_event(void);
/* A lost slot was recovered from the outbox table (slotrecover.h). */
void ob_metrics_slot_recovery(ob_slot_loss loss);
/* Outbox rows deleted by retention (retention.h). */
void ob_metrics_rows_deleted(uint64_t n);
void ob_metrics_set_inflight(uint64_t n);
/* outbox.on_bad_event = hold_key (hold.h): the keys held and their events;
 * /readyz names the keys held while streaming. */
void ob_metrics_set_held(uint64_t keys, uint64_t events);
uint64_t ob_metrics_held_keys(void);
/* A confirmed position other than the last one counts as progress. */
void ob_metrics_set_lsns(ob_lsn confirmed, ob_lsn received, ob_lsn server_wal_end);
/* The commit time (µs since the epoch) of the oldest transaction the relay
 * received and has not confirmed yet; 0 when there is none. */
void ob_metrics_set_oldest_unconfirmed(int64_t commit_us);
/* What the server says of the slot (slotwatch.h): the WAL it retains, its
 * wal_status, and since when (µs since the epoch; 0: not) outbox rows have
 * been committed in WAL the stream has not read yet. */
void ob_metrics_set_slot(int64_t retained_bytes, ob_wal_status status, int64_t unread_since_us);
/* Whether the slot survives a promotion (failover.h), read by the slot
 * watch; where the question does not apply (!applies),
 * outboxd_slot_failover_ready is left out. */
void ob_metrics_set_failover_ready(bool applies, bool ready);
/* /readyz's second line while streaming: "failover-ready" or
 * "failover-not-ready"; NULL when not measured or not applicable. */
const char *ob_metrics_failover_word(void);
/* The wal_status word of pg_replication_slots as an ob_wal_status. */
ob_wal_status ob_wal_status_parse(const char *word);
/* Logical replication began to wait, at since_ms (monotonic), for a
 * standby that synchronized_standby_slots names (pgwarning.h): counted in
 * outboxd_standby_waits_total. It ends with ob_metrics_standby_wait_end(),
 * when the stream moves again, which counts as progress (no stall is
 * counted from before it). */
void ob_metrics_standby_wait_begin(int64_t since_ms);
void ob_metrics_standby_wait_end(void);
void ob_metrics_set_connected(bool postgres, bool kafka);
void ob_metrics_reconnect(ob_reconnect_target target);
void ob_metrics_set_ready(ob_ready_state state);
/* The inbox (sql/README.md, "The inbox tables"): records of one committed database
 * transaction by outcome, and the records of the assigned partitions not
 * yet stored (high watermark minus the stored position, summed). */
void ob_metrics_inbox_records(uint64_t inserted, uint64_t duplicate, uint64_t dead_lettered);
void ob_metrics_set_inbox_lag(uint64_t records);
/* The inbox's lag per assigned partition (the strings are copied). */
void ob_metrics_set_inbox_partition_lags(const ob_partition_lag *lags, size_t n);

/* Why a stored inbox position cannot belong to the partition the broker
 * serves (sql/README.md, "The inbox tables"). */
typedef enum ob_position_mismatch {
	OB_POSITION_PAST_HIGH,  /* past the partition's high watermark */
	OB_POSITION_BELOW_LOW,  /* below its low watermark: records expired unread */
	OB_POSITION_CLUSTER,    /* stored for another Kafka cluster */
	OB_POSITION_NOT_STORED, /* none stored, but the group has a committed offset */
	OB_POSITION_TOPIC_ID,   /* stored for a topic of the name deleted since */
	OB_POSITION_MISMATCH_COUNT
} ob_position_mismatch;

/* The label value of reason in outboxd_inbox_position_mismatches_total. */
const char *ob_position_mismatch_name(ob_position_mismatch reason);
void ob_metrics_inbox_mismatch(ob_position_mismatch reason);
/* The refusal of the latest Postgres connection attempt (NONE once one
 * connects, or fails for another reason). */
void ob_metrics_set_pg_refusal(ob_pg_refusal refusal);
/* The main loop calls this every turn; /healthz fails when it stops. */
void ob_metrics_heartbeat(void);

/* For /readyz: the state and its one-word name. While the relay is
 * connecting and the latest attempt was refused, the state is
 * OB_READY_PG_REFUSED. While it streams and the server waits for a
 * standby (ob_metrics_standby_wait_begin()), the state is
 * OB_READY_STANDBY_WAIT once the wait has lasted stall_after_ms, and
 * OB_READY_STREAMING before (never OB_READY_STALLED). Otherwise, while it
 * streams (or the inbox consumes) and
 * events wait (transactions received and not confirmed, outbox rows
 * committed in WAL the stream has not read, the inbox's records not
 * stored) with no event acknowledged, no position confirmed and no inbox
 * record stored for stall_after_ms, counted from the latest of those or
 * from when events began to wait, the state is OB_READY_STALLED; it goes
 * back to OB_READY_STREAMING with the next progress. Every setter but the
 * heartbeat and the ready state is called on one thread (the relay's or
 * the inbox's). */
ob_ready_state ob_metrics_ready(void);
const char *ob_metrics_ready_word(ob_ready_state state);
/* Milliseconds since the last heartbeat (monotonic). */
int64_t ob_metrics_heartbeat_age_ms(void);

/* Render the Prometheus text format; the caller frees. */
char *ob_metrics_render(void);

#endif
