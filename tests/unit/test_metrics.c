/*
 * test_metrics.c: the metrics of deploy/README.md "Metrics and health" and their Prometheus text
 * rendering (metrics.h).
 *
 * Metrics are process-wide, so the tests run in order and each states the
 * values its own updates add up to.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ob_build.h"
#include "outboxd/metrics.h"

/* The value of the sample line that starts with "series " (the metric
 * name with its labels), or -1 when there is none. */
static double
sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

static bool
has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
			return true;
	}
	return false;
}

static size_t
count_prefix(const char *text, const char *prefix)
{
	size_t n = 0, len = strlen(prefix);

	for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (strncmp(p, prefix, len) == 0)
			n++;
	}
	return n;
}

#define assert_sample(text, series, value)                                                         \
	do {                                                                                       \
		double got_ = sample((text), (series));                                            \
		if (got_ != (double)(value))                                                       \
			fail_msg("%s is %g, expected %g", (series), got_, (double)(value));        \
	} while (0)

/* outboxd_postgres_refused has one series per reason, always present. */
static const char *const refusal_series[] = {
    "outboxd_postgres_refused{reason=\"pg_hba\"}",
    "outboxd_postgres_refused{reason=\"password\"}",
    "outboxd_postgres_refused{reason=\"privilege\"}",
    "outboxd_postgres_refused{reason=\"tls\"}",
};

/* Every metric of deploy/README.md "Metrics and health" is declared with its type. */
static void
test_declared_metrics(void **state)
{
	static const struct {
		const char *name;
		const char *type;
	} metrics[] = {
	    {"outboxd_events_published_total", "counter"},
	    {"outboxd_events_dead_lettered_total", "counter"},
	    {"outboxd_transactions_total", "counter"},
	    {"outboxd_inflight_events", "gauge"},
	    {"outboxd_confirmed_lsn", "gauge"},
	    {"outboxd_received_lsn", "gauge"},
	    {"outboxd_server_wal_end_lsn", "gauge"},
	    {"outboxd_replication_lag_bytes", "gauge"},
	    {"outboxd_publish_latency_seconds", "histogram"},
	    {"outboxd_postgres_connected", "gauge"},
	    {"outboxd_kafka_connected", "gauge"},
	    {"outboxd_reconnects_total", "counter"},
	    {"outboxd_build_info", "gauge"},
	    {"outboxd_postgres_refused", "gauge"},
	    {"outboxd_lag_seconds", "gauge"},
	    {"outboxd_slot_retained_wal_bytes", "gauge"},
	    {"outboxd_slot_wal_status", "gauge"},
	    {"outboxd_ready", "gauge"},
	    {"outboxd_standby_waits_total", "counter"},
	};
	char *text;
	char line[256];

	(void)state;
	ob_metrics_init(60000, OB_METRICS_PUBLISHER, NULL);
	text = ob_metrics_render();
	for (size_t i = 0; i < OB_ARRAY_LEN(metrics); i++) {
		snprintf(line, sizeof(line), "# TYPE %s %s", metrics[i].name, metrics[i].type);
		if (!has_line(text, line))
			fail_msg("missing \"%s\" in:\n%s", line, text);
		snprintf(line, sizeof(line), "# HELP %s ", metrics[i].name);
		if (count_prefix(text, line) != 1)
			fail_msg("missing or repeated \"%s\"", line);
	}
	assert_sample(text, "outboxd_build_info{version=\"" OB_VERSION "\"}", 1);
	assert_sample(text, "outboxd_reconnects_total{target=\"postgres\"}", 0);
	assert_sample(text, "outboxd_reconnects_total{target=\"kafka\"}", 0);
	for (size_t i = 0; i < OB_ARRAY_LEN(refusal_series); i++)
		assert_sample(text, refusal_series[i], 0);
	assert_sample(text, "outboxd_publish_latency_seconds_count", 0);
	assert_sample(text, "outboxd_publish_latency_seconds_bucket{le=\"+Inf\"}", 0);
	/* The text ends with a newline, as the exposition format wants. */
	assert_int_equal(text[strlen(text) - 1], '\n');
	free(text);
}

/* Each daemon shows its own families (and those both have); every known
 * label value of a labelled counter is there from the start, at 0, so an
 * increase() alert sees the first increment. */
static void
test_each_daemon_its_own_metrics(void **state)
{
	static const char *const inbox_only[] = {
	    "outboxd_inbox_records_total",
	    "outboxd_inbox_lag_records",
	    "outboxd_inbox_partition_lag_records",
	    "outboxd_inbox_position_mismatches_total",
	};
	static const char *const publisher_only[] = {
	    "outboxd_events_published_total", "outboxd_events_dead_lettered_total",
	    "outboxd_transactions_total",     "outboxd_publish_latency_seconds",
	    "outboxd_confirmed_lsn",          "outboxd_lag_seconds",
	    "outboxd_slot_wal_status",        "outboxd_backlog_events_total",
	};
	static const char *const shared[] = {
	    "outboxd_postgres_connected", "outboxd_kafka_connected", "outboxd_reconnects_total",
	    "outboxd_postgres_refused",   "outboxd_ready",           "outboxd_build_info",
	};
	char line[256];
	char *text;

	(void)state;
	ob_metrics_init(60000, OB_METRICS_PUBLISHER, "orders.events");
	text = ob_metrics_render();
	for (size_t i = 0; i < OB_ARRAY_LEN(inbox_only); i++) {
		snprintf(line, sizeof(line), "# HELP %s ", inbox_only[i]);
		if (count_prefix(text, line) != 0)
			fail_msg("the publisher shows the inbox's %s", inbox_only[i]);
	}
	/* (The earlier tests of this process counted missing-key and bad-payload.) */
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"missing-id\"}", 0);
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"bad-topic\"}", 0);
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"too-large\"}", 0);
	assert_sample(text, "outboxd_events_published_total{topic=\"orders.events\"}", 0);
	free(text);
	ob_metrics_dead_lettered("bad-topic");
	text = ob_metrics_render();
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"bad-topic\"}", 1);
	assert_int_equal(
	    count_prefix(text, "outboxd_events_dead_lettered_total{reason=\"bad-topic\"}"), 1);
	free(text);

	ob_metrics_init(60000, OB_METRICS_INBOX, NULL);
	text = ob_metrics_render();
	for (size_t i = 0; i < OB_ARRAY_LEN(publisher_only); i++) {
		snprintf(line, sizeof(line), "# HELP %s ", publisher_only[i]);
		if (count_prefix(text, line) != 0)
			fail_msg("the inbox shows the publisher's %s", publisher_only[i]);
	}
	for (size_t i = 0; i < OB_ARRAY_LEN(inbox_only) + OB_ARRAY_LEN(shared); i++) {
		const char *name = i < OB_ARRAY_LEN(inbox_only)
				       ? inbox_only[i]
				       : shared[i - OB_ARRAY_LEN(inbox_only)];

		snprintf(line, sizeof(line), "# HELP %s ", name);
		if (count_prefix(text, line) != 1)
			fail_msg("the inbox lacks %s", name);
	}
	assert_sample(text, "outboxd_inbox_records_total{result=\"dead_lettered\"}", 0);
	free(text);
	ob_metrics_init(60000, OB_METRICS_PUBLISHER, NULL);
}

static void
test_counters_and_gauges(void **state)
{
	char *text;

	(void)state;
	for (int i = 0; i < 3; i++)
		ob_metrics_transaction();
	ob_metrics_set_inflight(17);
	ob_metrics_set_lsns(0x1000, 0x1800, 0x2000);
	ob_metrics_set_connected(true, false);
	ob_metrics_reconnect(OB_TARGET_POSTGRES);
	ob_metrics_reconnect(OB_TARGET_POSTGRES);
	ob_metrics_reconnect(OB_TARGET_KAFKA);
	ob_metrics_dead_lettered("missing-key");
	ob_metrics_dead_lettered("missing-key");
	ob_metrics_dead_lettered("bad-payload");
	text = ob_metrics_render();
	assert_sample(text, "outboxd_transactions_total", 3);
	assert_sample(text, "outboxd_inflight_events", 17);
	assert_sample(text, "outboxd_confirmed_lsn", 0x1000);
	assert_sample(text, "outboxd_received_lsn", 0x1800);
	assert_sample(text, "outboxd_server_wal_end_lsn", 0x2000);
	assert_sample(text, "outboxd_replication_lag_bytes", 0x1000);
	assert_sample(text, "outboxd_postgres_connected", 1);
	assert_sample(text, "outboxd_kafka_connected", 0);
	assert_sample(text, "outboxd_reconnects_total{target=\"postgres\"}", 2);
	assert_sample(text, "outboxd_reconnects_total{target=\"kafka\"}", 1);
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"missing-key\"}", 2);
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"bad-payload\"}", 1);
	free(text);

	/* Lag never goes negative (confirmed ahead of an old keepalive). */
	ob_metrics_set_lsns(0x3000, 0x3000, 0x2000);
	ob_metrics_set_connected(false, true);
	text = ob_metrics_render();
	assert_sample(text, "outboxd_replication_lag_bytes", 0);
	assert_sample(text, "outboxd_postgres_connected", 0);
	assert_sample(text, "outboxd_kafka_connected", 1);
	free(text);
}

/* The observations of test_published_and_latency, in seconds. */
static const double observations[] = {0.0005, 0.001, 0.0025, 0.003, 0.004, 1.0, 100.0};

static void
test_published_and_latency(void **state)
{
	char *text;
	size_t buckets = 0;
	double prev_le = 0, prev_count = 0, sum = 0;

	(void)state;
	ob_metrics_published("outbox.event.order", 18, observations[0]);
	ob_metrics_published("outbox.event.order", 18, observations[1]);
	ob_metrics_published("outbox.event.order", 18, observations[2]);
	ob_metrics_published("outbox.event.userXYZ", 17, observations[3]); /* length cuts it */
	ob_metrics_published("outbox.event.user", 17, observations[4]);
	ob_metrics_published("outbox.event.user", 17, observations[5]);
	ob_metrics_published("outbox.event.order", 18, observations[6]);
	text = ob_metrics_render();
	assert_sample(text, "outboxd_events_published_total{topic=\"outbox.event.order\"}", 4);
	assert_sample(text, "outboxd_events_published_total{topic=\"outbox.event.user\"}", 3);
	assert_int_equal(count_prefix(text, "outboxd_events_published_total{"), 2);

	/* Every finite bucket counts the observations <= its bound (a value on
	 * a bound is in it); bounds increase; +Inf and _count count all. */
	for (const char *p = strstr(text, "outboxd_publish_latency_seconds_bucket{le=\"");
	     p != NULL; p = strstr(p + 1, "outboxd_publish_latency_seconds_bucket{le=\"")) {
		const char *le_text = p + strlen("outboxd_publish_latency_seconds_bucket{le=\"");
		double le, count, want = 0;

		if (strncmp(le_text, "+Inf\"", 5) == 0)
			continue;
		le = strtod(le_text, NULL);
		count = strtod(strchr(p, ' ') + 1, NULL);
		for (size_t i = 0; i < OB_ARRAY_LEN(observations); i++)
			want += observations[i] <= le;
		if (count != want)
			fail_msg("bucket le=%g has %g, expected %g", le, count, want);
		assert_true(le > prev_le);
		assert_true(count >= prev_count);
		prev_le = le;
		prev_count = count;
		buckets++;
	}
	assert_true(buckets >= 10);
	assert_true(prev_le >= 10); /* the last finite bound covers slow acks */
	assert_sample(text, "outboxd_publish_latency_seconds_bucket{le=\"+Inf\"}",
		      OB_ARRAY_LEN(observations));
	assert_sample(text, "outboxd_publish_latency_seconds_count", OB_ARRAY_LEN(observations));
	for (size_t i = 0; i < OB_ARRAY_LEN(observations); i++)
		sum += observations[i];
	assert_true(sample(text, "outboxd_publish_latency_seconds_sum") > sum - 1e-6 &&
		    sample(text, "outboxd_publish_latency_seconds_sum") < sum + 1e-6);
	free(text);
}

/* Label values are escaped as the exposition format requires. */
static void
test_label_escaping(void **state)
{
	char *text;

	(void)state;
	ob_metrics_dead_lettered("a\"b\\c\nd");
	text = ob_metrics_render();
	assert_sample(text, "outboxd_events_dead_lettered_total{reason=\"a\\\"b\\\\c\\nd\"}", 1);
	free(text);
}

static void
test_ready_and_heartbeat(void **state)
{
	static const struct {
		ob_ready_state state;
		const char *word;
	} words[] = {
	    {OB_READY_CONNECTING, "connecting"},
	    {OB_READY_STREAMING, "ready"},
	    {OB_READY_STANDBY, "standby"},
	    {OB_READY_KAFKA_DOWN, "kafka-down"},
	};
	char *text;

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(words); i++) {
		ob_metrics_set_ready(words[i].state);
		assert_int_equal(ob_metrics_ready(), words[i].state);
		assert_string_equal(ob_metrics_ready_word(words[i].state), words[i].word);
	}
	/* A refusal shows while the relay is connecting, and only then. */
	ob_metrics_set_ready(OB_READY_CONNECTING);
	ob_metrics_set_pg_refusal(OB_PG_REFUSAL_PRIVILEGE);
	assert_int_equal(ob_metrics_ready(), OB_READY_PG_REFUSED);
	assert_string_equal(ob_metrics_ready_word(ob_metrics_ready()), "postgres-refused");
	text = ob_metrics_render();
	assert_sample(text, "outboxd_postgres_refused{reason=\"privilege\"}", 1);
	assert_sample(text, "outboxd_postgres_refused{reason=\"password\"}", 0);
	free(text);
	ob_metrics_set_ready(OB_READY_STANDBY);
	assert_int_equal(ob_metrics_ready(), OB_READY_STANDBY);
	ob_metrics_set_ready(OB_READY_CONNECTING);
	ob_metrics_set_pg_refusal(OB_PG_REFUSAL_NONE);
	assert_int_equal(ob_metrics_ready(), OB_READY_CONNECTING);
	text = ob_metrics_render();
	for (size_t i = 0; i < OB_ARRAY_LEN(refusal_series); i++)
		assert_sample(text, refusal_series[i], 0);
	free(text);

	ob_metrics_heartbeat();
	assert_true(ob_metrics_heartbeat_age_ms() >= 0);
	assert_true(ob_metrics_heartbeat_age_ms() < 1000);
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/*
 * /readyz's stall: events wait and nothing progresses for stall_after_ms
 * (the clock starting when they began to wait); any acknowledgement,
 * confirmation or stored inbox record ends it, and so does nothing
 * waiting. outboxd_lag_seconds is computed at each scrape.
 */
static void
test_stall_and_lag(void **state)
{
	enum { STALL_MS = 50 };
	const ob_partition_lag lags[] = {{"in.a", 0, 3}, {"in.\"b", 7, 0}};
	char *text;

	(void)state;
	ob_metrics_init(STALL_MS, OB_METRICS_PUBLISHER, NULL);
	ob_metrics_set_ready(OB_READY_STREAMING);
	ob_metrics_set_inflight(0);
	ob_metrics_set_oldest_unconfirmed(0);
	ob_metrics_set_slot(4096, ob_wal_status_parse("extended"), 0);
	ob_metrics_set_inbox_lag(0);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING); /* nothing waits */
	text = ob_metrics_render();
	assert_sample(text, "outboxd_lag_seconds", 0);
	assert_sample(text, "outboxd_slot_retained_wal_bytes", 4096);
	assert_sample(text, "outboxd_slot_wal_status{status=\"extended\"}", 1);
	assert_sample(text, "outboxd_slot_wal_status{status=\"reserved\"}", 0);
	assert_sample(text, "outboxd_ready{state=\"ready\"}", 1);
	assert_sample(text, "outboxd_ready{state=\"stalled\"}", 0);
	free(text);

	/* A transaction received two seconds after its commit: waiting
	 * starts the clock now, not at the commit. */
	ob_metrics_set_oldest_unconfirmed(ob_now_us() - 2000000);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	assert_string_equal(ob_metrics_ready_word(OB_READY_STALLED), "stalled");
	text = ob_metrics_render();
	assert_true(sample(text, "outboxd_lag_seconds") >= 2.0);
	assert_sample(text, "outboxd_ready{state=\"stalled\"}", 1);
	assert_sample(text, "outboxd_ready{state=\"ready\"}", 0);
	free(text);
	/* Only a streaming relay is stalled: the other states say more. */
	ob_metrics_set_ready(OB_READY_KAFKA_DOWN);
	assert_int_equal(ob_metrics_ready(), OB_READY_KAFKA_DOWN);
	ob_metrics_set_ready(OB_READY_STREAMING);

	/* An acknowledgement, then a confirmation, each end it for a while. */
	ob_metrics_published("t", 1, 0.1);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	ob_metrics_set_lsns(0x9000, 0x9000, 0x9000);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	ob_metrics_set_lsns(0x9000, 0x9100, 0x9100); /* not a confirmation */
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);

	/* Caught up: ready, lag 0. Rows unread on the server wait too. */
	ob_metrics_set_oldest_unconfirmed(0);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	text = ob_metrics_render();
	assert_sample(text, "outboxd_lag_seconds", 0);
	free(text);
	ob_metrics_set_slot(8192, ob_wal_status_parse("lost"), ob_now_us() - 1000000);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	text = ob_metrics_render();
	assert_true(sample(text, "outboxd_lag_seconds") >= 1.0);
	assert_sample(text, "outboxd_slot_wal_status{status=\"lost\"}", 1);
	free(text);
	ob_metrics_set_slot(8192, OB_WAL_STATUS_UNKNOWN, 0);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);

	/* The inbox: records not stored wait until stored ones progress. */
	ob_metrics_init(STALL_MS, OB_METRICS_INBOX, NULL);
	ob_metrics_set_inbox_partition_lags(lags, OB_ARRAY_LEN(lags));
	ob_metrics_set_inbox_lag(3);
	sleep_ms(STALL_MS + 20);
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	ob_metrics_inbox_records(0, 0, 0); /* nothing stored */
	assert_int_equal(ob_metrics_ready(), OB_READY_STALLED);
	ob_metrics_inbox_records(2, 1, 0);
	assert_int_equal(ob_metrics_ready(), OB_READY_STREAMING);
	text = ob_metrics_render();
	assert_sample(text, "outboxd_inbox_partition_lag_records{topic=\"in.a\",partition=\"0\"}",
		      3);
	assert_sample(text,
		      "outboxd_inbox_partition_lag_records{topic=\"in.\\\"b\",partition=\"7\"}", 0);
	free(text);
	ob_metrics_set_inbox_lag(0);
	ob_metrics_set_inbox_partition_lags(NULL, 0);
	ob_metrics_init(60000, OB_METRICS_PUBLISHER, NULL);
}

/*
 * Topics come from row data ({aggregate_type}), so there may be any number
 * of them. Past the label table's size, new topics are counted under
 * "other", and nothing is lost or overwritten.
 */
static void
test_many_topics(void **state)
{
	enum { N_TOPICS = 400 };
	char topic[64];
	char *text;
	size_t lines, before;
	double sum = 0;

	(void)state;
	text = ob_metrics_render();
	before = count_prefix(text, "outboxd_events_published_total{");
	free(text);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N_TOPICS; i++) {
			int n = snprintf(topic, sizeof(topic), "many.topic.%d", i);

			ob_metrics_published(topic, (size_t)n, 0.01);
		}
	}
	text = ob_metrics_render();
	lines = count_prefix(text, "outboxd_events_published_total{");
	/* 256 labels at most, the last of them "other". */
	assert_int_equal(lines, 256);
	assert_sample(text, "outboxd_events_published_total{topic=\"many.topic.0\"}", 2);
	/* Every publication is counted exactly once, under its topic or "other". */
	for (const char *p = strstr(text, "outboxd_events_published_total{"); p != NULL;
	     p = strstr(p + 1, "outboxd_events_published_total{"))
		sum += strtod(strchr(p, ' ') + 1, NULL);
	/* + the publications of test_published_and_latency and the one of
	 * test_stall_and_lag */
	assert_true(sum == 2.0 * N_TOPICS + OB_ARRAY_LEN(observations) + 1);
	assert_sample(text, "outboxd_events_published_total{topic=\"other\"}",
		      2.0 * (N_TOPICS - (255 - before)));
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_declared_metrics),
	    cmocka_unit_test(test_counters_and_gauges),
	    cmocka_unit_test(test_published_and_latency),
	    cmocka_unit_test(test_label_escaping),
	    cmocka_unit_test(test_ready_and_heartbeat),
	    cmocka_unit_test(test_stall_and_lag),
	    /* Before test_many_topics, which fills the topic table. */
	    cmocka_unit_test(test_each_daemon_its_own_metrics),
	    /* Last: when it fails, it may leave the tables corrupted. */
	    cmocka_unit_test(test_many_topics),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
