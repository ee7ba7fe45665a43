/*
 * metrics.c: process-wide metrics and their Prometheus text rendering.
 */
#include "outboxd/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ob_build.h"

#define MAX_LABELS 256

/* Upper bounds of the publish latency histogram, in seconds. */
static const double latency_bounds[] = {0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015,
					0.02,  0.03,  0.05,  0.075, 0.1,    0.25, 0.5,
					1,     2.5,   5,     10,    30};
#define N_BUCKETS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))

typedef struct label_counter {
	char *label;
	uint64_t count;
} label_counter;

typedef struct partition_lag {
	char *topic;
	int32_t partition;
	uint64_t records;
} partition_lag;

static struct {
	pthread_mutex_t lock; /* guards the label tables and the histogram */
	label_counter published[MAX_LABELS];
	size_t published_len;
	label_counter dead[MAX_LABELS];
	size_t dead_len;
	partition_lag lags[MAX_LABELS];
	size_t lags_len;
	uint64_t latency_buckets[N_BUCKETS];
	uint64_t latency_count;
	double latency_sum;

	atomic_uint_fast64_t transactions;
	atomic_uint_fast64_t backlog_events;
	atomic_uint_fast64_t traceparent_malformed;
	atomic_uint_fast64_t timeline_switches;
	atomic_uint_fast64_t events_beyond_fork;
	atomic_uint_fast64_t slot_recoveries[OB_SLOT_LOSS_KINDS];
	atomic_uint_fast64_t rows_deleted;
	atomic_uint_fast64_t inflight;
	atomic_uint_fast64_t held_keys; /* on_bad_event = hold_key (hold.h) */
	atomic_uint_fast64_t held_events;
	atomic_uint_fast64_t confirmed_lsn;
	atomic_uint_fast64_t received_lsn;
	atomic_uint_fast64_t server_wal_end;
	atomic_bool pg_connected;
	atomic_bool kafka_connected;
	atomic_uint_fast64_t reconnects[2];
	atomic_uint_fast64_t inbox_inserted;
	atomic_uint_fast64_t inbox_duplicate;
	atomic_uint_fast64_t inbox_dead_lettered;
	atomic_uint_fast64_t inbox_lag;
	atomic_uint_fast64_t inbox_mismatches[OB_POSITION_MISMATCH_COUNT];
	atomic_int ready;
	atomic_int pg_refusal;
	atomic_int_fast64_t heartbeat_ms;

	/* The stall (ob_metrics_ready()): since when nothing progressed, and
	 * whether events wait. progress_ms is stored before waiting turns
	 * true, so a reader that sees waiting sees its start. */
	atomic_int_fast64_t stall_after_ms;
	atomic_int_fast64_t progress_ms;
	atomic_bool waiting;
	atomic_int_fast64_t oldest_unconfirmed_us;
	atomic_int_fast64_t slot_unread_us;
	atomic_int failover; /* 0: not measured or not applicable; 1: not ready; 2: ready */
	/* A standby wait: since when (stored before waiting turns true). */
	atomic_bool standby_waiting;
	atomic_int_fast64_t standby_since_ms;
	atomic_uint_fast64_t standby_waits;
	atomic_int_fast64_t slot_retained;
	atomic_int slot_wal_status;

	ob_metrics_daemon daemon; /* set once, before the HTTP thread starts */
} m = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const wal_status_words[OB_WAL_STATUS_COUNT] = {NULL, "reserved", "extended",
								  "unreserved", "lost"};

/* Every reason a publisher's dead-letter record can give (outbox.c,
 * relay.c): each is exported at 0 from the start. A reason not listed is
 * still counted, from its first dead letter on. */
static const char *const dead_letter_reasons[] = {
    "bad-cloudevent",
    "bad-headers",
    "bad-message",
    "bad-payload",
    "bad-record",
    "bad-topic",
    "cloudevents-header-collision",
    "missing-id",
    "missing-key",
    "missing-source-column",
    "missing-topic-column",
    "non-transactional-message",
    "refused",
    "too-large",
};

/* Add label to table at 0, unless it is there. */
static void
seed(label_counter *table, size_t *len, const char *label)
{
	for (size_t i = 0; i < *len; i++) {
		if (strcmp(table[i].label, label) == 0)
			return;
	}
	if (*len < MAX_LABELS - 1)
		table[(*len)++] = (label_counter){ob_xstrdup(label), 0};
}

void
ob_metrics_init(int stall_after_ms, ob_metrics_daemon daemon, const char *fixed_topic)
{
	atomic_store(&m.heartbeat_ms, ob_mono_ms());
	atomic_store(&m.progress_ms, ob_mono_ms());
	atomic_store(&m.stall_after_ms, stall_after_ms);
	m.daemon = daemon;
	pthread_mutex_lock(&m.lock);
	for (size_t i = 0; i < OB_ARRAY_LEN(dead_letter_reasons); i++)
		seed(m.dead, &m.dead_len, dead_letter_reasons[i]);
	if (fixed_topic != NULL)
		seed(m.published, &m.published_len, fixed_topic);
	pthread_mutex_unlock(&m.lock);
}

/* Something was acknowledged, confirmed or stored. */
static void
progressed(void)
{
	atomic_store(&m.progress_ms, ob_mono_ms());
}

/* Recompute whether events wait; the stall clock starts when they begin
 * to. */
static void
note_waiting(void)
{
	bool waiting = atomic_load(&m.inflight) > 0 || atomic_load(&m.oldest_unconfirmed_us) != 0 ||
		       atomic_load(&m.slot_unread_us) != 0 || atomic_load(&m.inbox_lag) > 0;

	if (waiting && !atomic_load(&m.waiting))
		progressed();
	atomic_store(&m.waiting, waiting);
}

/* Add one to the counter of label in table; a new label is copied. Past
 * MAX_LABELS labels, counts go to the label "other". */
static void
bump(label_counter *table, size_t *len, const char *label, size_t label_len)
{
	size_t i;

	for (i = 0; i < *len; i++) {
		if (strlen(table[i].label) == label_len &&
		    memcmp(table[i].label, label, label_len) == 0)
			break;
	}
	if (i == *len) {
		if (*len >= MAX_LABELS - 1) {
			label = "other";
			label_len = 5;
			for (i = 0; i < *len && strcmp(table[i].label, "other") != 0; i++)
				;
		}
		if (i == *len) {
			table[i].label = ob_xstrndup(label, label_len);
			table[i].count = 0;
			(*len)++;
		}
	}
	table[i].count++;
}

void
ob_metrics_published(const char *topic, size_t topic_len, double latency_seconds)
{
	size_t b;

	pthread_mutex_lock(&m.lock);
	bump(m.published, &m.published_len, topic, topic_len);
	progressed();
	for (b = 0; b < N_BUCKETS && latency_seconds > latency_bounds[b]; b++)
		;
	if (b < N_BUCKETS)
		m.latency_buckets[b]++;
	m.latency_count++;
	m.latency_sum += latency_seconds;
	pthread_mutex_unlock(&m.lock);
}

void
ob_metrics_dead_lettered(const char *reason)
{
	pthread_mutex_lock(&m.lock);
	bump(m.dead, &m.dead_len, reason, strlen(reason));
	pthread_mutex_unlock(&m.lock);
}

void
ob_metrics_transaction(void)
{
	atomic_fetch_add(&m.transactions, 1);
}

void
ob_metrics_traceparent_malformed(void)
{
	atomic_fetch_add(&m.traceparent_malformed, 1);
}

void
ob_metrics_timeline_switch(uint64_t events_beyond_fork)
{
	atomic_fetch_add(&m.timeline_switches, 1);
	atomic_fetch_add(&m.events_beyond_fork, events_beyond_fork);
}

void
ob_metrics_slot_recovery(ob_slot_loss loss)
{
	if (loss > OB_SLOT_LOSS_NONE && loss < OB_SLOT_LOSS_KINDS)
		atomic_fetch_add(&m.slot_recoveries[loss], 1);
}

void
ob_metrics_rows_deleted(uint64_t n)
{
	atomic_fetch_add(&m.rows_deleted, n);
}

void
ob_metrics_backlog_event(void)
{
	atomic_fetch_add(&m.backlog_events, 1);
}

void
ob_metrics_set_inflight(uint64_t n)
{
	atomic_store(&m.inflight, n);
	note_waiting();
}

void
ob_metrics_set_held(uint64_t keys, uint64_t events)
{
	atomic_store(&m.held_keys, keys);
	atomic_store(&m.held_events, events);
}

uint64_t
ob_metrics_held_keys(void)
{
	return atomic_load(&m.held_keys);
}

void
ob_metrics_set_lsns(ob_lsn confirmed, ob_lsn received, ob_lsn server_wal_end)
{
	if (atomic_exchange(&m.confirmed_lsn, confirmed) != confirmed)
		progressed();
	atomic_store(&m.received_lsn, received);
	atomic_store(&m.server_wal_end, server_wal_end);
}

void
ob_metrics_set_oldest_unconfirmed(int64_t commit_us)
{
	atomic_store(&m.oldest_unconfirmed_us, commit_us);
	note_waiting();
}

ob_wal_status
ob_wal_status_parse(const char *word)
{
	for (int s = OB_WAL_STATUS_UNKNOWN + 1; s < OB_WAL_STATUS_COUNT; s++) {
		if (strcmp(word, wal_status_words[s]) == 0)
			return (ob_wal_status)s;
	}
	return OB_WAL_STATUS_UNKNOWN;
}

void
ob_metrics_set_slot(int64_t retained_bytes, ob_wal_status status, int64_t unread_since_us)
{
	atomic_store(&m.slot_retained, retained_bytes);
	atomic_store(&m.slot_wal_status, (int)status);
	atomic_store(&m.slot_unread_us, unread_since_us);
	note_waiting();
}

void
ob_metrics_set_failover_ready(bool applies, bool ready)
{
	atomic_store(&m.failover, !applies ? 0 : ready ? 2 : 1);
}

const char *
ob_metrics_failover_word(void)
{
	switch (atomic_load(&m.failover)) {
	case 2:
		return "failover-ready";
	case 1:
		return "failover-not-ready";
	default:
		return NULL;
	}
}

void
ob_metrics_standby_wait_begin(int64_t since_ms)
{
	atomic_store(&m.standby_since_ms, since_ms);
	atomic_store(&m.standby_waiting, true);
	atomic_fetch_add(&m.standby_waits, 1);
}

void
ob_metrics_standby_wait_end(void)
{
	progressed(); /* the stream moves again: no stall counted from before */
	atomic_store(&m.standby_waiting, false);
}

void
ob_metrics_set_connected(bool postgres, bool kafka)
{
	atomic_store(&m.pg_connected, postgres);
	atomic_store(&m.kafka_connected, kafka);
}

void
ob_metrics_reconnect(ob_reconnect_target target)
{
	atomic_fetch_add(&m.reconnects[target], 1);
}

void
ob_metrics_inbox_records(uint64_t inserted, uint64_t duplicate, uint64_t dead_lettered)
{
	atomic_fetch_add(&m.inbox_inserted, inserted);
	atomic_fetch_add(&m.inbox_duplicate, duplicate);
	atomic_fetch_add(&m.inbox_dead_lettered, dead_lettered);
	if (inserted + duplicate + dead_lettered > 0)
		progressed();
}

const char *
ob_position_mismatch_name(ob_position_mismatch reason)
{
	static const char *const names[OB_POSITION_MISMATCH_COUNT] = {
	    "past_high_watermark", "below_low_watermark", "other_cluster", "not_stored",
	    "other_topic_id"};

	return names[reason];
}

void
ob_metrics_inbox_mismatch(ob_position_mismatch reason)
{
	atomic_fetch_add(&m.inbox_mismatches[reason], 1);
}

void
ob_metrics_set_inbox_lag(uint64_t records)
{
	atomic_store(&m.inbox_lag, records);
	note_waiting();
}

void
ob_metrics_set_inbox_partition_lags(const ob_partition_lag *lags, size_t n)
{
	pthread_mutex_lock(&m.lock);
	for (size_t i = 0; i < m.lags_len; i++)
		free(m.lags[i].topic);
	m.lags_len = n < MAX_LABELS ? n : MAX_LABELS;
	for (size_t i = 0; i < m.lags_len; i++)
		m.lags[i] =
		    (partition_lag){ob_xstrdup(lags[i].topic), lags[i].partition, lags[i].records};
	pthread_mutex_unlock(&m.lock);
}

void
ob_metrics_set_ready(ob_ready_state state)
{
	atomic_store(&m.ready, (int)state);
}

void
ob_metrics_set_pg_refusal(ob_pg_refusal refusal)
{
	atomic_store(&m.pg_refusal, (int)refusal);
}

void
ob_metrics_heartbeat(void)
{
	atomic_store(&m.heartbeat_ms, ob_mono_ms());
}

ob_ready_state
ob_metrics_ready(void)
{
	ob_ready_state state = (ob_ready_state)atomic_load(&m.ready);

	if (state == OB_READY_CONNECTING && atomic_load(&m.pg_refusal) != OB_PG_REFUSAL_NONE)
		return OB_READY_PG_REFUSED;
	/* Events wait then because the server withholds them: that is what
	 * /readyz says, once the wait lasts, and not a stall. */
	if (state == OB_READY_STREAMING && atomic_load(&m.standby_waiting))
		return ob_mono_ms() - atomic_load(&m.standby_since_ms) >=
			       atomic_load(&m.stall_after_ms)
			   ? OB_READY_STANDBY_WAIT
			   : OB_READY_STREAMING;
	if (state == OB_READY_STREAMING && atomic_load(&m.waiting) &&
	    ob_mono_ms() - atomic_load(&m.progress_ms) >= atomic_load(&m.stall_after_ms))
		return OB_READY_STALLED;
	return state;
}

const char *
ob_metrics_ready_word(ob_ready_state state)
{
	switch (state) {
	case OB_READY_STREAMING:
		return "ready";
	case OB_READY_STANDBY:
		return "standby";
	case OB_READY_KAFKA_DOWN:
		return "kafka-down";
	case OB_READY_PG_REFUSED:
		return "postgres-refused";
	case OB_READY_BACKLOG:
		return "backlog";
	case OB_READY_STALLED:
		return "stalled";
	case OB_READY_STANDBY_WAIT:
		return "waiting-for-standby";
	case OB_READY_RECOVERING:
		return "recovering";
	case OB_READY_CONNECTING:
	case OB_READY_STATE_COUNT:
		break;
	}
	return "connecting";
}

int64_t
ob_metrics_heartbeat_age_ms(void)
{
	return ob_mono_ms() - atomic_load(&m.heartbeat_ms);
}

/* A growing string for rendering. */
typedef struct text {
	char *s;
	size_t len, cap;
} text;

static void OB_PRINTF(2, 3) put(text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < t->cap - t->len)
			break;
		t->cap = t->cap * 2 + (size_t)(n > 0 ? n : 0);
		t->s = ob_xrealloc(t->s, t->cap);
	}
	t->len += (size_t)n;
}

static void
put_header(text *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Print a label value with Prometheus escaping (backslash, quote, newline). */
static void
put_label_value(text *t, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			put(t, "\\%c", *v);
		else if (*v == '\n')
			put(t, "\\n");
		else
			put(t, "%c", *v);
	}
}

static void
put_labelled(text *t, const char *name, const char *label, const label_counter *table, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		put(t, "%s{%s=\"", name, label);
		put_label_value(t, table[i].label);
		put(t, "\"} %llu\n", (unsigned long long)table[i].count);
	}
}

static void
put_gauge(text *t, const char *name, const char *help, unsigned long long v)
{
	put_header(t, name, "gauge", help);
	put(t, "%s %llu\n", name, v);
}

static void
put_counter(text *t, const char *name, const char *help, unsigned long long v)
{
	put_header(t, name, "counter", help);
	put(t, "%s %llu\n", name, v);
}

/* outboxd_lag_seconds: the age of the oldest event committed and not
 * confirmed, from what the relay received and what the server says was
 * written past the stream; 0 when none waits. Computed at each scrape, so
 * it keeps rising while a stall lasts, however quiet the source is. */
static void
put_lag(text *t)
{
	int64_t relay = atomic_load(&m.oldest_unconfirmed_us);
	int64_t server = atomic_load(&m.slot_unread_us);
	int64_t oldest = relay == 0 || (server != 0 && server < relay) ? server : relay;
	int64_t age = oldest == 0 ? 0 : ob_now_us() - oldest;

	put_header(t, "outboxd_lag_seconds", "gauge",
		   "Age of the oldest committed event not yet confirmed; 0 when none waits.");
	put(t, "outboxd_lag_seconds %.3f\n", age > 0 ? (double)age / 1e6 : 0.0);
}

/* The publisher's families. */
static void
put_publisher(text *t)
{
	uint64_t cumulative = 0;
	ob_lsn confirmed = atomic_load(&m.confirmed_lsn);
	ob_lsn wal_end = atomic_load(&m.server_wal_end);

	pthread_mutex_lock(&m.lock);
	put_header(t, "outboxd_events_published_total", "counter",
		   "Events acknowledged by the broker, by topic.");
	put_labelled(t, "outboxd_events_published_total", "topic", m.published, m.published_len);
	put_header(t, "outboxd_events_dead_lettered_total", "counter",
		   "Events written to the dead-letter topic, by reason.");
	put_labelled(t, "outboxd_events_dead_lettered_total", "reason", m.dead, m.dead_len);
	put_header(t, "outboxd_publish_latency_seconds", "histogram",
		   "Time from the transaction's commit to the broker's acknowledgement.");
	for (size_t b = 0; b < N_BUCKETS; b++) {
		cumulative += m.latency_buckets[b];
		put(t, "outboxd_publish_latency_seconds_bucket{le=\"%g\"} %llu\n",
		    latency_bounds[b], (unsigned long long)cumulative);
	}
	put(t, "outboxd_publish_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
	    (unsigned long long)m.latency_count);
	put(t, "outboxd_publish_latency_seconds_sum %.6f\n", m.latency_sum);
	put(t, "outboxd_publish_latency_seconds_count %llu\n", (unsigned long long)m.latency_count);
	pthread_mutex_unlock(&m.lock);

	put_header(t, "outboxd_transactions_total", "counter",
		   "Transactions received from the slot.");
	put(t, "outboxd_transactions_total %llu\n",
	    (unsigned long long)atomic_load(&m.transactions));
	put_header(t, "outboxd_backlog_events_total", "counter",
		   "Backlog rows acknowledged by the broker or dead-lettered.");
	put(t, "outboxd_backlog_events_total %llu\n",
	    (unsigned long long)atomic_load(&m.backlog_events));
	put_counter(t, "outboxd_traceparent_malformed_total",
		    "CloudEvents whose traceparent header is not W3C Trace Context.",
		    atomic_load(&m.traceparent_malformed));
	put_counter(t, "outboxd_timeline_switches_total",
		    "Streams resumed on a server on another timeline (a promotion).",
		    atomic_load(&m.timeline_switches));
	put_counter(t, "outboxd_events_beyond_fork_total",
		    "Events published from WAL past a promoted server's switch point, which "
		    "the new timeline does not hold.",
		    atomic_load(&m.events_beyond_fork));
	put_header(
	    t, "outboxd_slot_recoveries_total", "counter",
	    "Lost replication slots recovered from the outbox table, by how they were lost.");
	for (int loss = OB_SLOT_LOSS_NONE + 1; loss < OB_SLOT_LOSS_KINDS; loss++)
		put(t, "outboxd_slot_recoveries_total{reason=\"%s\"} %llu\n",
		    ob_slot_loss_name((ob_slot_loss)loss),
		    (unsigned long long)atomic_load(&m.slot_recoveries[loss]));
	put_counter(t, "outboxd_outbox_rows_deleted_total",
		    "Published outbox rows deleted by outbox.retention.",
		    atomic_load(&m.rows_deleted));
	put_gauge(t, "outboxd_inflight_events",
		  "Events handed to the producer, not yet acknowledged.", atomic_load(&m.inflight));
	put_gauge(t, "outboxd_held_keys",
		  "Keys held behind a dead letter (outbox.on_bad_event = hold_key).",
		  atomic_load(&m.held_keys));
	put_gauge(t, "outboxd_held_events",
		  "Events held in the dead-letter topic behind their key's dead letter, until "
		  "released.",
		  atomic_load(&m.held_events));
	put_gauge(t, "outboxd_confirmed_lsn", "WAL position confirmed to the slot (bytes).",
		  confirmed);
	put_gauge(t, "outboxd_received_lsn", "WAL position of the latest record received (bytes).",
		  atomic_load(&m.received_lsn));
	put_gauge(t, "outboxd_server_wal_end_lsn",
		  "Server WAL end from the latest keepalive (bytes).", wal_end);
	put_gauge(t, "outboxd_replication_lag_bytes", "Server WAL end minus confirmed position.",
		  wal_end > confirmed ? wal_end - confirmed : 0);
	put_lag(t);
	put_header(t, "outboxd_standby_waits_total", "counter",
		   "Waits of logical replication for a standby that synchronized_standby_slots "
		   "names.");
	put(t, "outboxd_standby_waits_total %llu\n",
	    (unsigned long long)atomic_load(&m.standby_waits));
	put_header(t, "outboxd_slot_retained_wal_bytes", "gauge",
		   "WAL the replication slot keeps on the server (bytes; 0 until read).");
	put(t, "outboxd_slot_retained_wal_bytes %lld\n", (long long)atomic_load(&m.slot_retained));
	if (atomic_load(&m.failover) != 0) {
		put_header(
		    t, "outboxd_slot_failover_ready", "gauge",
		    "1 when the slot survives a promotion (PostgreSQL 17+: FAILOVER, and a "
		    "standby named in synchronized_standby_slots streams); absent where that "
		    "does not apply.");
		put(t, "outboxd_slot_failover_ready %d\n", atomic_load(&m.failover) == 2);
	}
	put_header(t, "outboxd_slot_wal_status", "gauge",
		   "1 for the replication slot's wal_status in pg_replication_slots.");
	for (int s = OB_WAL_STATUS_UNKNOWN + 1; s < OB_WAL_STATUS_COUNT; s++)
		put(t, "outboxd_slot_wal_status{status=\"%s\"} %d\n", wal_status_words[s],
		    atomic_load(&m.slot_wal_status) == s);
}

/* The inbox's families. */
static void
put_inbox(text *t)
{
	put_header(t, "outboxd_inbox_records_total", "counter",
		   "Inbox records committed to the inbox table's database, by result.");
	put(t, "outboxd_inbox_records_total{result=\"inserted\"} %llu\n",
	    (unsigned long long)atomic_load(&m.inbox_inserted));
	put(t, "outboxd_inbox_records_total{result=\"duplicate\"} %llu\n",
	    (unsigned long long)atomic_load(&m.inbox_duplicate));
	put(t, "outboxd_inbox_records_total{result=\"dead_lettered\"} %llu\n",
	    (unsigned long long)atomic_load(&m.inbox_dead_lettered));
	put_header(t, "outboxd_inbox_position_mismatches_total", "counter",
		   "Partitions assigned whose stored position cannot belong to them, by reason.");
	for (int r = 0; r < OB_POSITION_MISMATCH_COUNT; r++)
		put(t, "outboxd_inbox_position_mismatches_total{reason=\"%s\"} %llu\n",
		    ob_position_mismatch_name((ob_position_mismatch)r),
		    (unsigned long long)atomic_load(&m.inbox_mismatches[r]));
	put_gauge(t, "outboxd_inbox_lag_records",
		  "Records of the assigned partitions past the positions stored in Postgres.",
		  atomic_load(&m.inbox_lag));
	put_header(t, "outboxd_inbox_partition_lag_records", "gauge",
		   "Records of one assigned partition past the position stored in Postgres.");
	pthread_mutex_lock(&m.lock);
	for (size_t i = 0; i < m.lags_len; i++) {
		put(t, "outboxd_inbox_partition_lag_records{topic=\"");
		put_label_value(t, m.lags[i].topic);
		put(t, "\",partition=\"%d\"} %llu\n", (int)m.lags[i].partition,
		    (unsigned long long)m.lags[i].records);
	}
	pthread_mutex_unlock(&m.lock);
}

char *
ob_metrics_render(void)
{
	text t = {ob_xmalloc(4096), 0, 4096};
	ob_ready_state ready = ob_metrics_ready();

	t.s[0] = '\0';
	if (m.daemon == OB_METRICS_INBOX)
		put_inbox(&t);
	else
		put_publisher(&t);
	put_gauge(&t, "outboxd_postgres_connected",
		  "1 while connected to Postgres (the publisher: streaming).",
		  atomic_load(&m.pg_connected));
	put_gauge(&t, "outboxd_kafka_connected", "1 while a broker connection is up.",
		  atomic_load(&m.kafka_connected));
	put_header(&t, "outboxd_postgres_refused", "gauge",
		   "1 for the reason Postgres refused the latest connection attempt.");
	for (int r = OB_PG_REFUSAL_NONE + 1; r < OB_PG_REFUSAL_COUNT; r++)
		put(&t, "outboxd_postgres_refused{reason=\"%s\"} %d\n",
		    ob_pg_refusal_name((ob_pg_refusal)r), atomic_load(&m.pg_refusal) == r);
	put_header(&t, "outboxd_reconnects_total", "counter", "Reconnections, by target.");
	put(&t, "outboxd_reconnects_total{target=\"postgres\"} %llu\n",
	    (unsigned long long)atomic_load(&m.reconnects[OB_TARGET_POSTGRES]));
	put(&t, "outboxd_reconnects_total{target=\"kafka\"} %llu\n",
	    (unsigned long long)atomic_load(&m.reconnects[OB_TARGET_KAFKA]));
	put_header(&t, "outboxd_ready", "gauge", "1 for the state /readyz answers with.");
	for (int s = 0; s < OB_READY_STATE_COUNT; s++)
		put(&t, "outboxd_ready{state=\"%s\"} %d\n",
		    ob_metrics_ready_word((ob_ready_state)s), ready == (ob_ready_state)s);
	put_header(&t, "outboxd_build_info", "gauge", "Build information.");
	put(&t, "outboxd_build_info{version=\"%s\"} 1\n", OB_VERSION);
	return t.s;
}
