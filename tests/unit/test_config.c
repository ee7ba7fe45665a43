/*
 * test_config.c: defaults, INI files, -s overrides, ${ENV} expansion and
 * validation (config.h, deploy/README.md, "Command line" and "Configuration reference"), and
 * conninfo masking (log.h).
 *
 * Errors must name the key: the tests capture stderr and look for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "capture.h"
#include "outboxd/config.h"
#include "outboxd/log.h"

/* Write text to a new temporary file; returns its path (caller frees and
 * unlinks). */
static char *
write_temp(const char *text)
{
	char *path = strdup("/tmp/outboxd-test-config-XXXXXX");
	int fd = mkstemp(path);
	size_t len = strlen(text);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	return path;
}

/* Load text as a config file into cfg; returns the result and, if err is
 * not NULL, what was logged (caller frees). */
static bool
load_text(ob_config *cfg, const char *text, char **err)
{
	char *path = write_temp(text);
	bool ok;
	char *log;

	capture_start();
	ok = ob_config_load_file(cfg, path);
	log = capture_end();
	unlink(path);
	free(path);
	if (err != NULL)
		*err = log;
	else
		free(log);
	return ok;
}

static bool
override(ob_config *cfg, const char *assignment, char **err)
{
	bool ok;
	char *log;

	capture_start();
	ok = ob_config_set_override(cfg, assignment);
	log = capture_end();
	if (err != NULL)
		*err = log;
	else
		free(log);
	return ok;
}

static bool
finish(ob_config *cfg, char **err)
{
	bool ok;
	char *log;

	capture_start();
	ok = ob_config_finish(cfg);
	log = capture_end();
	if (err != NULL)
		*err = log;
	else
		free(log);
	return ok;
}

#define assert_contains(hay, needle)                                                               \
	do {                                                                                       \
		if (strstr((hay), (needle)) == NULL)                                               \
			fail_msg("\"%s\" does not contain \"%s\"", (hay), (needle));               \
	} while (0)

/* --- defaults --------------------------------------------------------------- */

static void
test_defaults(void **state)
{
	ob_config cfg;

	(void)state;
	ob_config_init(&cfg);
	/* [postgres] */
	assert_string_equal(cfg.pg.slot, "outboxd");
	assert_true(cfg.pg.create_slot);
	assert_int_equal(cfg.pg.status_interval_ms, 1000);
	assert_int_equal(cfg.pg.reconnect_max_backoff_ms, 30000);
	assert_int_equal(cfg.pg.standby_retry_ms, 5000);
	assert_string_equal(cfg.pg.password_command, "");
	assert_int_equal(cfg.pg.credential_timeout_ms, 10000);
	/* [kafka_auth] */
	assert_int_equal(cfg.kafka_auth.method, OB_KAFKA_AUTH_NONE);
	assert_string_equal(cfg.kafka_auth.token_command, "");
	assert_int_equal(cfg.kafka_auth.credential_timeout_ms, 10000);
	/* [outbox] */
	assert_string_equal(cfg.outbox.table, "public.outbox");
	assert_string_equal(cfg.outbox.id_column, "id");
	assert_string_equal(cfg.outbox.key_column, "aggregate_id");
	assert_string_equal(cfg.outbox.type_column, "event_type");
	assert_string_equal(cfg.outbox.payload_column, "payload");
	assert_string_equal(cfg.outbox.headers_column, "headers");
	assert_string_equal(cfg.outbox.timestamp_column, "created_at");
	assert_string_equal(cfg.outbox.topic, "outbox.event.{aggregate_type}");
	assert_string_equal(cfg.outbox.message_prefix, "outbox");
	assert_int_equal(cfg.outbox.on_bad_event, OB_BAD_EVENT_DLQ);
	assert_string_equal(cfg.outbox.dlq_topic, "outbox.dlq");
	/* [kafka]: only the bootstrap list; the pinned and default producer
	 * properties are the producer's business, not user settings. */
	assert_int_equal(cfg.kafka_len, 1);
	assert_string_equal(ob_config_kafka_get(&cfg, "bootstrap.servers"), "127.0.0.1:9092");
	assert_null(ob_config_kafka_get(&cfg, "enable.idempotence"));
	assert_null(ob_config_kafka_get(&cfg, "acks"));
	/* [http], [log] */
	assert_string_equal(cfg.http.listen, "127.0.0.1:7187");
	assert_int_equal(cfg.http.stall_after_ms, 60000);
	assert_int_equal(cfg.log.format, OB_LOG_TEXT);
	assert_int_equal(cfg.log.level, OB_LOG_INFO);

	assert_true(finish(&cfg, NULL));
	assert_string_equal(cfg.outbox.schema, "public");
	assert_string_equal(cfg.outbox.table_name, "outbox");
	ob_config_free(&cfg);
}

/* `outboxd inbox` listens on another port than the publisher, and neither
 * takes 9187, postgres_exporter's (which runs on database hosts); every
 * other default is the publisher's. */
static void
test_inbox_defaults(void **state)
{
	ob_config pub, inbox;

	(void)state;
	ob_config_init(&pub);
	ob_config_init_inbox(&inbox);
	assert_string_equal(inbox.http.listen, "127.0.0.1:7188");
	assert_string_not_equal(inbox.http.listen, pub.http.listen);
	assert_null(strstr(pub.http.listen, ":9187"));
	assert_null(strstr(inbox.http.listen, ":9187"));
	assert_string_equal(inbox.inbox.group, pub.inbox.group);
	assert_int_equal(inbox.http.stall_after_ms, pub.http.stall_after_ms);
	assert_string_equal(ob_config_kafka_get(&inbox, "bootstrap.servers"), "127.0.0.1:9092");
	/* A configured listen wins over either default. */
	assert_true(ob_config_set_override(&inbox, "http.listen=127.0.0.1:9999"));
	assert_string_equal(inbox.http.listen, "127.0.0.1:9999");
	ob_config_free(&pub);
	ob_config_free(&inbox);
}

/* --- INI files ---------------------------------------------------------------- */

/* The sample of deploy/README.md "Configuration reference" with every value changed, inline
 * comments kept. */
static const char full_file[] =
    "; outboxd test configuration\n"
    "# hash comments too\n"
    "[postgres]\n"
    "conninfo = host=db.example dbname=app user=outboxd   ; libpq conninfo or URI\n"
    "slot = orders\n"
    "create_slot = false            ; create the wal2json slot if it is missing\n"
    "status_interval_ms = 250     ; max time between standby status updates\n"
    "reconnect_max_backoff_ms = 60000\n"
    "standby_retry_ms = 1500       ; retry period\n"
    "\n"
    "[outbox]\n"
    "table = app.events\n"
    "id_column = event_id                ; -> header \"id\"\n"
    "key_column = agg_id      ; -> record key\n"
    "type_column =        ; -> header \"type\"; empty: none\n"
    "payload_column = body      ; -> record value\n"
    "headers_column = hdrs      ; jsonb object -> headers; empty: none\n"
    "timestamp_column = ; -> record timestamp; empty: commit time\n"
    "topic = events.{agg_type}  ; template; {column} is that row's value\n"
    "message_prefix = evt       ; pg_logical_emit_message prefix\n"
    "on_bad_event = halt            ; dlq | halt\n"
    "dlq_topic = events.dead\n"
    "\n"
    "[kafka]\n"
    "bootstrap.servers = k1:9092,k2:9092\n"
    "; any librdkafka property passes through\n"
    "linger.ms = 20\n"
    "compression.type = zstd ; smaller\n"
    "enable.idempotence = true\n"
    "acks = all\n"
    "\n"
    "[http]\n"
    "listen =       ; empty disables\n"
    "\n"
    "[log]\n"
    "format = json                 ; text | json\n"
    "level = debug                  ; debug | info | warning | error\n";

static void
test_load_full_file(void **state)
{
	ob_config cfg;

	(void)state;
	ob_config_init(&cfg);
	assert_true(load_text(&cfg, full_file, NULL));
	assert_string_equal(cfg.pg.conninfo, "host=db.example dbname=app user=outboxd");
	assert_string_equal(cfg.pg.slot, "orders");
	assert_false(cfg.pg.create_slot);
	assert_int_equal(cfg.pg.status_interval_ms, 250);
	assert_int_equal(cfg.pg.reconnect_max_backoff_ms, 60000);
	assert_int_equal(cfg.pg.standby_retry_ms, 1500);
	assert_string_equal(cfg.outbox.table, "app.events");
	assert_string_equal(cfg.outbox.id_column, "event_id");
	assert_string_equal(cfg.outbox.key_column, "agg_id");
	assert_string_equal(cfg.outbox.type_column, "");
	assert_string_equal(cfg.outbox.payload_column, "body");
	assert_string_equal(cfg.outbox.headers_column, "hdrs");
	assert_string_equal(cfg.outbox.timestamp_column, "");
	assert_string_equal(cfg.outbox.topic, "events.{agg_type}");
	assert_string_equal(cfg.outbox.message_prefix, "evt");
	assert_int_equal(cfg.outbox.on_bad_event, OB_BAD_EVENT_HALT);
	assert_string_equal(cfg.outbox.dlq_topic, "events.dead");
	assert_string_equal(ob_config_kafka_get(&cfg, "bootstrap.servers"), "k1:9092,k2:9092");
	assert_string_equal(ob_config_kafka_get(&cfg, "linger.ms"), "20");
	assert_string_equal(ob_config_kafka_get(&cfg, "compression.type"), "zstd");
	assert_int_equal(cfg.kafka_len, 5);
	/* Order of setting is kept (bootstrap.servers was set by init). */
	assert_string_equal(cfg.kafka[0].key, "bootstrap.servers");
	assert_string_equal(cfg.kafka[1].key, "linger.ms");
	assert_string_equal(cfg.kafka[2].key, "compression.type");
	assert_string_equal(cfg.http.listen, "");
	assert_int_equal(cfg.log.format, OB_LOG_JSON);
	assert_int_equal(cfg.log.level, OB_LOG_DEBUG);
	assert_true(finish(&cfg, NULL));
	assert_string_equal(cfg.outbox.schema, "app");
	assert_string_equal(cfg.outbox.table_name, "events");
	ob_config_free(&cfg);
}

/* Files that must be refused; the log must name what is wrong. */
typedef struct bad_file_case {
	const char *name;
	const char *text;
	const char *named; /* must appear in the error output */
} bad_file_case;

static const bad_file_case bad_file_cases[] = {
    {"unknown key", "[outbox]\ntable = public.outbox\nfoo = 1\n", "outbox.foo"},
    {"key of another section", "[postgres]\ntopic = x\n", "postgres.topic"},
    {"unknown section", "[nosuch]\nkey = value\n", "nosuch.key"},
    {"key before any section", "slot = orders\n", "slot"},
    {"bad bool", "[postgres]\ncreate_slot = maybe\n", "postgres.create_slot"},
    {"bool with comment", "[postgres]\ncreate_slot = yes please ; no\n", "postgres.create_slot"},
    {"zero ms", "[postgres]\nstatus_interval_ms = 0\n", "postgres.status_interval_ms"},
    {"negative ms", "[postgres]\nstandby_retry_ms = -5\n", "postgres.standby_retry_ms"},
    {"ms with unit", "[postgres]\nstatus_interval_ms = 10ms\n", "postgres.status_interval_ms"},
    {"ms not a number", "[postgres]\nreconnect_max_backoff_ms = abc\n",
     "postgres.reconnect_max_backoff_ms"},
    {"ms too large", "[postgres]\nreconnect_max_backoff_ms = 99999999999\n",
     "postgres.reconnect_max_backoff_ms"},
    {"ms empty", "[postgres]\nstatus_interval_ms =\n", "postgres.status_interval_ms"},
    {"bad on_bad_event", "[outbox]\non_bad_event = drop\n", "outbox.on_bad_event"},
    {"bad on_slot_lost", "[postgres]\non_slot_lost = ignore\n", "postgres.on_slot_lost"},
    {"retention without unit", "[outbox]\nretention = 7\n", "outbox.retention"},
    {"retention in weeks", "[outbox]\nretention = 1w\n", "outbox.retention"},
    {"retention zero", "[outbox]\nretention = 0d\n", "outbox.retention"},
    {"retention negative", "[outbox]\nretention = -1h\n", "outbox.retention"},
    {"retention with a space", "[outbox]\nretention = 7 d\n", "outbox.retention"},
    {"bad log format", "[log]\nformat = xml\n", "log.format"},
    {"bad kafka_auth method", "[kafka_auth]\nmethod = aws_iam\n", "kafka_auth.method"},
    {"bad postgres auth", "[postgres]\nauth = aws_msk_iam\n", "postgres.auth"},
    {"unknown kafka_auth key", "[kafka_auth]\ntoken = x\n", "kafka_auth.token"},
    {"zero credential timeout", "[postgres]\ncredential_timeout_ms = 0\n",
     "postgres.credential_timeout_ms"},
    {"bad log level", "[log]\nlevel = verbose\n", "log.level"},
    {"empty slot", "[postgres]\nslot =\n", "postgres.slot"},
    {"empty table", "[outbox]\ntable = ; none\n", "outbox.table"},
    {"empty topic", "[outbox]\ntopic =\n", "outbox.topic"},
    {"idempotence off", "[kafka]\nenable.idempotence = false\n", "enable.idempotence"},
    {"acks 1", "[kafka]\nacks = 1\n", "acks"},
    {"gapless off", "[kafka]\nenable.gapless.guarantee = false\n", "enable.gapless.guarantee"},
    {"syntax error", "[postgres\nslot = x\n", "line 1"},
    {"line without =", "[postgres]\nslot orders\n", "line 2"},
    {"unset variable", "[postgres]\nconninfo = password=${OUTBOXD_TEST_UNSET_VAR}\n",
     "OUTBOXD_TEST_UNSET_VAR"},
};

static void
test_bad_files_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(bad_file_cases); i++) {
		const bad_file_case *c = &bad_file_cases[i];
		ob_config cfg;
		char *err;

		unsetenv("OUTBOXD_TEST_UNSET_VAR");
		ob_config_init(&cfg);
		if (load_text(&cfg, c->text, &err))
			fail_msg("bad file \"%s\" was accepted", c->name);
		if (strstr(err, c->named) == NULL)
			fail_msg("bad file \"%s\": error does not name %s: %s", c->name, c->named,
				 err);
		free(err);
		ob_config_free(&cfg);
	}
}

/* One run reports every bad key of the file, not only the first. */
static void
test_file_reports_every_bad_key(void **state)
{
	ob_config cfg;
	char *err;

	(void)state;
	ob_config_init(&cfg);
	assert_false(load_text(&cfg,
			       "[postgres]\nslot_name = x\ncreate_slot = perhaps\n"
			       "[outbox]\ntable_name = y\n",
			       &err));
	assert_contains(err, "postgres.slot_name");
	assert_contains(err, "postgres.create_slot");
	assert_contains(err, "outbox.table_name");
	free(err);
	ob_config_free(&cfg);
}

static void
test_missing_file(void **state)
{
	ob_config cfg;
	char *err;
	bool ok;

	(void)state;
	ob_config_init(&cfg);
	capture_start();
	ok = ob_config_load_file(&cfg, "/nonexistent/outboxd.ini");
	err = capture_end();
	assert_false(ok);
	assert_contains(err, "/nonexistent/outboxd.ini");
	free(err);
	ob_config_free(&cfg);
}

/* Accepted spellings of booleans; the last setting of a key wins. */
static void
test_bool_values(void **state)
{
	static const struct {
		const char *text;
		bool value;
	} cases[] = {
	    {"true", true},   {"TRUE", true},   {"on", true},   {"yes", true}, {"1", true},
	    {"false", false}, {"False", false}, {"off", false}, {"no", false}, {"0", false},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		ob_config cfg;
		char line[64];

		ob_config_init(&cfg);
		cfg.pg.create_slot = !cases[i].value;
		snprintf(line, sizeof(line), "postgres.create_slot=%s", cases[i].text);
		assert_true(override(&cfg, line, NULL));
		if (cfg.pg.create_slot != cases[i].value)
			fail_msg("create_slot=%s read as %d", cases[i].text, cfg.pg.create_slot);
		ob_config_free(&cfg);
	}
}

/* --- -s overrides ------------------------------------------------------------- */

typedef struct override_case {
	const char *assignment;
	bool ok;
	const char *named;       /* refused: must appear in the error output */
	const char *kafka_key;   /* accepted kafka property: its key ... */
	const char *kafka_value; /* ... and value */
} override_case;

static const override_case override_cases[] = {
    {"kafka.bootstrap.servers=10.0.0.1:9092", true, NULL, "bootstrap.servers", "10.0.0.1:9092"},
    {"kafka.linger.ms=50", true, NULL, "linger.ms", "50"},
    {"kafka.sasl.jaas.config=a=b c=d", true, NULL, "sasl.jaas.config", "a=b c=d"},
    {"kafka.enable.idempotence=true", true, NULL, "enable.idempotence", "true"},
    {"kafka.acks=all", true, NULL, "acks", "all"},
    {"kafka.enable.idempotence=false", false, "enable.idempotence"},
    {"kafka.acks=1", false, "acks"},
    {"kafka.acks=0", false, "acks"},
    {"postgres.slot=orders", true},
    {"postgres.conninfo=host=db password=x", true},
    {"outbox.topic=a.{b}", true},
    {"outbox.type_column=", true},
    {"postgres.slot=", false, "postgres.slot"},
    {"postgres.nosuch=1", false, "postgres.nosuch"},
    {"nosuch.key=1", false, "nosuch.key"},
    {"postgres", false, "postgres"},
    {"postgres.slot", false, "postgres.slot"},
    {"slot=orders", false, "slot=orders"},
    {".slot=orders", false, ".slot=orders"},
    {"postgres.=orders", false, "postgres.=orders"},
    {"kafka.=x", false, "kafka"},
    {"", false, "-s"},
};

static void
test_overrides_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(override_cases); i++) {
		const override_case *c = &override_cases[i];
		ob_config cfg;
		char *err;
		bool ok;

		ob_config_init(&cfg);
		ok = override(&cfg, c->assignment, &err);
		if (ok != c->ok)
			fail_msg("-s %s: %s, expected %s (%s)", c->assignment,
				 ok ? "accepted" : "refused", c->ok ? "accepted" : "refused", err);
		if (!ok && strstr(err, c->named) == NULL)
			fail_msg("-s %s: error does not name %s: %s", c->assignment, c->named, err);
		if (ok && c->kafka_key != NULL) {
			const char *v = ob_config_kafka_get(&cfg, c->kafka_key);

			if (v == NULL || strcmp(v, c->kafka_value) != 0)
				fail_msg("-s %s: kafka %s is %s", c->assignment, c->kafka_key,
					 v ? v : "(unset)");
		}
		free(err);
		ob_config_free(&cfg);
	}
}

static void
test_override_values(void **state)
{
	ob_config cfg;

	(void)state;
	ob_config_init(&cfg);
	assert_true(override(&cfg, "postgres.slot=orders", NULL));
	assert_string_equal(cfg.pg.slot, "orders");
	/* The value may itself contain '=' and '.'. */
	assert_true(override(&cfg, "postgres.conninfo=host=db.local password=x", NULL));
	assert_string_equal(cfg.pg.conninfo, "host=db.local password=x");
	/* The dotted kafka key is kept whole and replaces the default. */
	assert_true(override(&cfg, "kafka.bootstrap.servers=10.0.0.1:9092", NULL));
	assert_string_equal(ob_config_kafka_get(&cfg, "bootstrap.servers"), "10.0.0.1:9092");
	assert_int_equal(cfg.kafka_len, 1);
	assert_null(ob_config_kafka_get(&cfg, "servers"));
	assert_true(override(&cfg, "outbox.on_bad_event=halt", NULL));
	assert_int_equal(cfg.outbox.on_bad_event, OB_BAD_EVENT_HALT);
	assert_true(override(&cfg, "postgres.status_interval_ms=2500", NULL));
	assert_int_equal(cfg.pg.status_interval_ms, 2500);
	assert_true(override(&cfg, "log.level=warning", NULL));
	assert_int_equal(cfg.log.level, OB_LOG_WARNING);
	assert_true(override(&cfg, "outbox.headers_column=", NULL));
	assert_string_equal(cfg.outbox.headers_column, "");
	assert_true(cfg.pg.recover_lost_slot); /* on_slot_lost = recover by default */
	assert_true(override(&cfg, "postgres.on_slot_lost=halt", NULL));
	assert_false(cfg.pg.recover_lost_slot);
	assert_int_equal(cfg.outbox.retention_s, 0); /* off by default */
	assert_true(override(&cfg, "outbox.retention=7d", NULL));
	assert_int_equal(cfg.outbox.retention_s, 7 * 86400);
	assert_true(override(&cfg, "outbox.retention=90min", NULL));
	assert_int_equal(cfg.outbox.retention_s, 5400);
	assert_true(override(&cfg, "outbox.retention=12h", NULL));
	assert_int_equal(cfg.outbox.retention_s, 12 * 3600);
	assert_true(override(&cfg, "outbox.retention=30s", NULL));
	assert_int_equal(cfg.outbox.retention_s, 30);
	assert_true(override(&cfg, "outbox.retention=", NULL));
	assert_int_equal(cfg.outbox.retention_s, 0);
	/* A refused value leaves the previous one. */
	assert_false(override(&cfg, "postgres.status_interval_ms=0", NULL));
	assert_int_equal(cfg.pg.status_interval_ms, 2500);
	ob_config_free(&cfg);
}

/* -s applies after the file, in command-line order. */
static void
test_override_after_file(void **state)
{
	ob_config cfg;

	(void)state;
	ob_config_init(&cfg);
	assert_true(
	    load_text(&cfg, "[postgres]\nslot = from_file\n[kafka]\nlinger.ms = 1\n", NULL));
	assert_string_equal(cfg.pg.slot, "from_file");
	assert_true(override(&cfg, "postgres.slot=first", NULL));
	assert_true(override(&cfg, "postgres.slot=second", NULL));
	assert_true(override(&cfg, "kafka.linger.ms=7", NULL));
	assert_string_equal(cfg.pg.slot, "second");
	assert_string_equal(ob_config_kafka_get(&cfg, "linger.ms"), "7");
	assert_int_equal(cfg.kafka_len, 2);
	ob_config_free(&cfg);
}

/* ob_config_load(): a key -s sets is not read from the file, so neither its
 * ${NAME} nor its value there is judged; the other keys of the file are. */
static void
test_load_skips_overridden_keys(void **state)
{
	static const char *const overrides[] = {"postgres.conninfo=host=x",
						"kafka.sasl.password=pw"};
	char *path = write_temp("[postgres]\nconninfo = password=${OBT_SURELY_UNSET}\n"
				"slot = from_file\n[kafka]\nsasl.password = ${OBT_SURELY_UNSET}\n"
				"[outbox]\ntopic = ${OBT_SURELY_UNSET}\n");
	ob_config cfg;
	char *log;
	bool ok;

	(void)state;
	unsetenv("OBT_SURELY_UNSET");
	capture_start();
	ok = ob_config_load(&cfg, false, path, overrides, 2);
	log = capture_end();
	assert_false(ok);
	/* The one key left to the file is named, once, with the file. */
	assert_contains(log, "environment variable OBT_SURELY_UNSET used in outbox.topic (in ");
	assert_null(strstr(log, "conninfo"));
	assert_null(strstr(log, "sasl.password"));
	assert_null(strstr(log, " in in "));
	free(log);
	ob_config_free(&cfg);

	capture_start();
	ok = ob_config_load(&cfg, false, path,
			    (const char *const[]){"postgres.conninfo=host=x",
						  "kafka.sasl.password=pw", "outbox.topic=t"},
			    3);
	log = capture_end();
	assert_true(ok);
	assert_string_equal(cfg.pg.conninfo, "host=x");
	assert_string_equal(cfg.pg.slot, "from_file");
	assert_string_equal(ob_config_kafka_get(&cfg, "sasl.password"), "pw");
	free(log);
	ob_config_free(&cfg);
	unlink(path);
	free(path);
}

/* ob_config_diff() names each changed setting once: ordinary keys of every
 * type, and [kafka] properties changed, added or removed. */
typedef struct diff_seen {
	char names[512];
} diff_seen;

static void
note_changed(const char *section, const char *key, void *ctx)
{
	diff_seen *seen = ctx;
	size_t len = strlen(seen->names);

	snprintf(seen->names + len, sizeof(seen->names) - len, "%s.%s;", section, key);
}

static void
test_diff_names_changed_settings(void **state)
{
	ob_config a, b;
	diff_seen seen = {""};

	(void)state;
	ob_config_init(&a);
	ob_config_init(&b);
	assert_true(override(&a, "kafka.linger.ms=5", NULL));
	assert_true(override(&a, "kafka.acks=all", NULL));
	ob_config_diff(&a, &b, note_changed, &seen);
	assert_string_equal(seen.names, "kafka.linger.ms;kafka.acks;");

	seen.names[0] = '\0';
	assert_true(override(&b, "kafka.linger.ms=5", NULL));
	assert_true(override(&b, "kafka.acks=all", NULL));
	assert_true(override(&b, "kafka.client.id=x", NULL));
	assert_true(override(&b, "postgres.status_interval_ms=700", NULL));
	assert_true(override(&b, "postgres.create_slot=false", NULL));
	assert_true(override(&b, "postgres.plugin=pgoutput", NULL));
	assert_true(override(&b, "outbox.topic=t", NULL));
	assert_true(override(&b, "log.level=debug", NULL));
	ob_config_diff(&a, &b, note_changed, &seen);
	assert_string_equal(seen.names,
			    "postgres.create_slot;postgres.plugin;postgres.status_interval_ms;"
			    "outbox.topic;log.level;kafka.client.id;");

	seen.names[0] = '\0';
	ob_config_diff(&b, &b, note_changed, &seen);
	assert_string_equal(seen.names, "");
	ob_config_free(&a);
	ob_config_free(&b);
}

/* --- ${NAME} expansion ------------------------------------------------------ */

typedef struct expand_case {
	const char *text;
	const char *expected; /* NULL: refused */
} expand_case;

static const expand_case expand_cases[] = {
    {"plain", "plain"},
    {"", ""},
    {"${OBT_PW}", "s3cr3t"},
    {"password=${OBT_PW} user=u", "password=s3cr3t user=u"},
    {"${OBT_HOST}:${OBT_PORT}", "db.local:5432"},
    {"${OBT_HOST}${OBT_PORT}", "db.local5432"},
    {"a${OBT_EMPTY}b", "ab"},
    {"${OBT_LONG}", "0123456789012345678901234567890123456789012345678901234567890123456789"},
    {"x${OBT_LONG}x${OBT_LONG}",
     "x0123456789012345678901234567890123456789012345678901234567890123456789"
     "x0123456789012345678901234567890123456789012345678901234567890123456789"},
    /* Only ${...} is a reference. */
    {"$OBT_PW", "$OBT_PW"},
    {"$", "$"},
    {"cost: $5 {x}", "cost: $5 {x}"},
    {"$${OBT_PW}", "$s3cr3t"},
    /* Values are not expanded again. */
    {"${OBT_REF}", "${OBT_PW}"},
    {"${OBT_UNSET}", NULL},
    {"a ${OBT_PW} ${OBT_UNSET} b", NULL},
    {"${OBT_PW", NULL},
    {"${", NULL},
    {"${}", NULL},
};

static void
set_test_env(void)
{
	setenv("OBT_PW", "s3cr3t", 1);
	setenv("OBT_HOST", "db.local", 1);
	setenv("OBT_PORT", "5432", 1);
	setenv("OBT_EMPTY", "", 1);
	setenv("OBT_LONG", "0123456789012345678901234567890123456789012345678901234567890123456789",
	       1);
	setenv("OBT_REF", "${OBT_PW}", 1);
	unsetenv("OBT_UNSET");
}

static void
test_expand_env_table(void **state)
{
	(void)state;
	set_test_env();
	for (size_t i = 0; i < OB_ARRAY_LEN(expand_cases); i++) {
		const expand_case *c = &expand_cases[i];
		char *got, *err;

		capture_start();
		got = ob_config_expand_env(c->text, "test");
		err = capture_end();
		if (c->expected == NULL) {
			if (got != NULL)
				fail_msg("\"%s\" expanded to \"%s\", expected an error", c->text,
					 got);
			assert_true(err[0] != '\0');
		} else {
			if (got == NULL || strcmp(got, c->expected) != 0)
				fail_msg("\"%s\" expanded to \"%s\", expected \"%s\"", c->text,
					 got ? got : "(error)", c->expected);
		}
		free(got);
		free(err);
	}
}

static void
test_expand_env_in_settings(void **state)
{
	ob_config cfg;
	char *err;

	(void)state;
	set_test_env();
	ob_config_init(&cfg);
	assert_true(override(&cfg, "postgres.conninfo=host=${OBT_HOST} password=${OBT_PW}", NULL));
	assert_string_equal(cfg.pg.conninfo, "host=db.local password=s3cr3t");
	assert_true(override(&cfg, "kafka.sasl.password=${OBT_PW}", NULL));
	assert_string_equal(ob_config_kafka_get(&cfg, "sasl.password"), "s3cr3t");
	assert_true(load_text(&cfg,
			      "[postgres]\nstatus_interval_ms = ${OBT_PORT}\n"
			      "[kafka]\nbootstrap.servers = ${OBT_HOST}:9092 ; comment\n",
			      NULL));
	assert_int_equal(cfg.pg.status_interval_ms, 5432);
	assert_string_equal(ob_config_kafka_get(&cfg, "bootstrap.servers"), "db.local:9092");

	/* An unset variable is an error naming it, and the value is unchanged. */
	assert_false(override(&cfg, "postgres.conninfo=password=${OBT_UNSET}", &err));
	assert_contains(err, "OBT_UNSET");
	free(err);
	assert_string_equal(cfg.pg.conninfo, "host=db.local password=s3cr3t");

	/* Pinned properties are checked after expansion. */
	setenv("OBT_IDEMPOTENCE", "false", 1);
	assert_false(override(&cfg, "kafka.enable.idempotence=${OBT_IDEMPOTENCE}", &err));
	assert_contains(err, "enable.idempotence");
	free(err);
	ob_config_free(&cfg);
}

/* --- ob_config_finish ------------------------------------------------------- */

typedef struct finish_case {
	const char *overrides[3];
	bool ok;
	const char *schema;     /* when ok */
	const char *table_name; /* when ok */
	const char *named;      /* when refused: in the error output */
} finish_case;

static const finish_case finish_cases[] = {
    {{"outbox.table=public.outbox"}, true, "public", "outbox"},
    {{"outbox.table=outbox"}, true, "public", "outbox"},
    {{"outbox.table=app.events"}, true, "app", "events"},
    {{"outbox.table=a.b.c"}, false, NULL, NULL, "a.b.c"},
    {{"outbox.table=.outbox"}, false, NULL, NULL, "outbox.table"},
    {{"outbox.table=public."}, false, NULL, NULL, "outbox.table"},
    {{"outbox.topic=outbox.{aggregate_type"}, false, NULL, NULL, "outbox.topic"},
    {{"outbox.topic=outbox.{}"}, false, NULL, NULL, "outbox.topic"},
    {{"outbox.topic=outbox}x"}, false, NULL, NULL, "outbox.topic"},
    {{"outbox.topic=outbox.{a{b}"}, false, NULL, NULL, "outbox.topic"},
    {{"outbox.topic={a}.{b}"}, true, "public", "outbox"},
    {{"outbox.topic=fixed"}, true, "public", "outbox"},
    {{"postgres.slot=orders_1"}, true, "public", "outbox"},
    {{"postgres.slot=Orders"}, false, NULL, NULL, "postgres.slot"},
    {{"postgres.slot=my-slot"}, false, NULL, NULL, "postgres.slot"},
    {{"postgres.slot=a.b"}, false, NULL, NULL, "postgres.slot"},
    {{"postgres.slot=abcdefghijklmnopqrstuvwxyz_abcdefghijklmnopqrstuvwxyz_012345678"},
     true,
     "public",
     "outbox"}, /* 63 characters */
    {{"postgres.slot=abcdefghijklmnopqrstuvwxyz_abcdefghijklmnopqrstuvwxyz_0123456789"},
     false,
     NULL,
     NULL,
     "postgres.slot"}, /* 64 */
    /* A token command feeds librdkafka's OAUTHBEARER mechanism. */
    {{"kafka_auth.method=command", "kafka_auth.token_command=t",
      "kafka.sasl.mechanism=OAUTHBEARER"},
     true,
     "public",
     "outbox"},
    {{"kafka_auth.method=command", "kafka_auth.token_command=t"},
     false,
     NULL,
     NULL,
     "kafka_auth.method = command needs kafka.sasl.mechanism = OAUTHBEARER (it is unset)"},
    {{"kafka_auth.method=command", "kafka_auth.token_command=t", "kafka.sasl.mechanism=PLAIN"},
     false,
     NULL,
     NULL,
     "(it is PLAIN)"},
    {{"kafka_auth.method=command", "kafka.sasl.mechanism=OAUTHBEARER"},
     false,
     NULL,
     NULL,
     "kafka_auth.token_command is empty"},
    /* An MSK IAM token feeds it too, and needs no command. */
    {{"kafka_auth.method=aws_msk_iam", "kafka.sasl.mechanism=OAUTHBEARER"},
     true,
     "public",
     "outbox"},
    {{"kafka_auth.method=aws_msk_iam", "kafka.sasl.mechanism=AWS_MSK_IAM"},
     false,
     NULL,
     NULL,
     "kafka_auth.method = aws_msk_iam needs kafka.sasl.mechanism = OAUTHBEARER (it is "
     "AWS_MSK_IAM)"},
    /* An RDS IAM token is the password: no command beside it. */
    {{"postgres.auth=aws_iam", "postgres.aws_region=eu-west-1"}, true, "public", "outbox"},
    {{"postgres.auth=aws_iam", "postgres.password_command=cat pw"},
     false,
     NULL,
     NULL,
     "postgres.auth = aws_iam and postgres.password_command both give the password"},
    /* A row's age is its timestamp column's. */
    {{"outbox.retention=7d", "outbox.timestamp_column="},
     false,
     NULL,
     NULL,
     "outbox.retention needs outbox.timestamp_column"},
    {{"outbox.retention=7d"}, true, "public", "outbox"},
    /* Every problem is reported. */
    {{"outbox.table=a.b.c", "postgres.slot=Bad"}, false, NULL, NULL, "postgres.slot"},
    {{"outbox.table=a.b.c", "postgres.slot=Bad"}, false, NULL, NULL, "outbox.table"},
};

static void
test_finish_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(finish_cases); i++) {
		const finish_case *c = &finish_cases[i];
		ob_config cfg;
		char *err;
		bool ok;

		ob_config_init(&cfg);
		for (size_t k = 0; k < OB_ARRAY_LEN(c->overrides) && c->overrides[k]; k++)
			assert_true(override(&cfg, c->overrides[k], NULL));
		ok = finish(&cfg, &err);
		if (ok != c->ok)
			fail_msg("case %zu (%s): finish %s, expected %s: %s", i, c->overrides[0],
				 ok ? "accepted" : "refused", c->ok ? "accepted" : "refused", err);
		if (ok) {
			assert_string_equal(cfg.outbox.schema, c->schema);
			assert_string_equal(cfg.outbox.table_name, c->table_name);
		} else if (strstr(err, c->named) == NULL) {
			fail_msg("case %zu (%s): error does not name %s: %s", i, c->overrides[0],
				 c->named, err);
		}
		free(err);
		ob_config_free(&cfg);
	}
}

static void
test_secret_keys(void **state)
{
	static const struct {
		const char *key;
		bool secret;
	} cases[] = {
	    {"sasl.password", true},
	    {"ssl.key.password", true},
	    {"ssl.keystore.password", true},
	    {"sasl.oauthbearer.client.secret", true},
	    {"sasl.oauthbearer.config", true},
	    {"ssl.key.pem", true},
	    {"bootstrap.servers", false},
	    {"sasl.username", false},
	    {"linger.ms", false},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		if (ob_config_is_secret_key(cases[i].key) != cases[i].secret)
			fail_msg("%s: secret should be %d", cases[i].key, cases[i].secret);
	}
}

/* --- conninfo masking (log.h) ------------------------------------------------ */

typedef struct mask_case {
	const char *in;
	const char *out;
} mask_case;

static const mask_case mask_cases[] = {
    {"", ""},
    {"host=db user=u", "host=db user=u"},
    {"host=db password=secret user=u", "host=db password=**** user=u"},
    {"password=secret", "password=****"},
    {"host=db password=s", "host=db password=****"},
    {"host=db password= secret user=u", "host=db password= **** user=u"},
    {"host=db password = secret", "host=db password = ****"},
    {"host=db\tpassword=secret\tuser=u", "host=db\tpassword=****\tuser=u"},
    {"host=db password='a b\\' c' user=u", "host=db password=**** user=u"},
    {"host=db password='' user=u", "host=db password=**** user=u"},
    {"password=one host=db password=two", "password=**** host=db password=****"},
    /* "password" elsewhere is not a password. */
    {"user=password host=db", "user=password host=db"},
    {"application_name=mypassword=x", "application_name=mypassword=x"},
    /* URIs */
    {"postgresql://user:secret@db:5432/app", "postgresql://user:****@db:5432/app"},
    {"postgres://user:secret@db/app?sslmode=require",
     "postgres://user:****@db/app?sslmode=require"},
    {"postgresql://u:p@db", "postgresql://u:****@db"},
    {"postgresql://user:secret@h1:5432,h2:5433/app", "postgresql://user:****@h1:5432,h2:5433/app"},
    {"postgresql://user@db/app", "postgresql://user@db/app"},
    {"postgresql://db:5432/app", "postgresql://db:5432/app"},
    {"postgresql://db:5432", "postgresql://db:5432"},
    {"postgresql://db/app?password=secret&sslmode=require",
     "postgresql://db/app?password=****&sslmode=require"},
    {"postgresql://db/app?sslmode=require&password=secret",
     "postgresql://db/app?sslmode=require&password=****"},
    {"postgresql://u:pw@db/app?user=x&password=secret",
     "postgresql://u:****@db/app?user=x&password=****"},
    {"postgresql://db:5432?user=x@y", "postgresql://db:5432?user=x@y"},
};

static void
test_mask_conninfo_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(mask_cases); i++) {
		char *got = ob_log_mask_conninfo(mask_cases[i].in);

		if (strcmp(got, mask_cases[i].out) != 0)
			fail_msg("mask \"%s\": got \"%s\", expected \"%s\"", mask_cases[i].in, got,
				 mask_cases[i].out);
		free(got);
	}
}

/* libpq's sslpassword (the client key's passphrase) is a password too. */
static void
test_mask_conninfo_sslpassword(void **state)
{
	static const mask_case cases[] = {
	    {"host=db sslpassword=keypass user=u", "host=db sslpassword=**** user=u"},
	    {"sslpassword='a b' host=db", "sslpassword=**** host=db"},
	    {"postgresql://db/app?sslpassword=keypass", "postgresql://db/app?sslpassword=****"},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		char *got = ob_log_mask_conninfo(cases[i].in);

		if (strcmp(got, cases[i].out) != 0)
			fail_msg("mask \"%s\": got \"%s\", expected \"%s\"", cases[i].in, got,
				 cases[i].out);
		free(got);
	}
}

/* --- inline comments and topic names ------------------------------------------ */

/* An inline '#' after whitespace ends a value as ' ;' does (inih's rule
 * for both); a '#' at a value's start or inside a word is kept. */
static void
test_inline_hash_comments(void **state)
{
	static const struct {
		const char *line;
		const char *topic;
	} cases[] = {
	    {"topic = t.{aggregate_type} # hash\n", "t.{aggregate_type}"},
	    {"topic = t.{aggregate_type}\t# tab then hash\n", "t.{aggregate_type}"},
	    {"topic = t.{aggregate_type} ; semicolon\n", "t.{aggregate_type}"},
	    {"topic = t.{aggregate_type} # a ; b\n", "t.{aggregate_type}"},
	    {"topic = t.{aggregate_type}\n", "t.{aggregate_type}"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ob_config cfg;
		char *text = NULL;

		ob_config_init(&cfg);
		assert_int_not_equal(asprintf(&text, "[outbox]\n%s", cases[i].line), -1);
		assert_true(load_text(&cfg, text, NULL));
		assert_string_equal(cfg.outbox.topic, cases[i].topic);
		free(text);
		ob_config_free(&cfg);
	}
	/* A '#' inside a word stays: a password may hold one. */
	{
		ob_config cfg;

		ob_config_init(&cfg);
		assert_true(load_text(&cfg, "[kafka]\nsasl.password = a#b\n", NULL));
		assert_string_equal(ob_config_kafka_get(&cfg, "sasl.password"), "a#b");
		ob_config_free(&cfg);
	}
}

/* Topic names: the template's literal text and the dead-letter topic are
 * judged at start-up (legal Kafka characters, at most 249 bytes); the
 * placeholders' text per event (test_outbox.c). */
static void
test_topic_names(void **state)
{
	static const struct {
		const char *setting;
		bool ok;
	} cases[] = {
	    {"outbox.topic=outbox.event.{aggregate_type}", true},
	    {"outbox.topic=a-b_c.D9", true},
	    {"outbox.topic={aggregate_type}", true},
	    {"outbox.topic=t #x", false},
	    {"outbox.topic=t/{aggregate_type}", false},
	    {"outbox.topic=t:{aggregate_type}", false},
	    {"outbox.dlq_topic=dead letters", false},
	    {"outbox.dlq_topic=..", false},
	    {"outbox.dlq_topic=d.l", true},
	};
	char long_topic[300];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ob_config cfg;
		char *err = NULL;

		ob_config_init(&cfg);
		assert_true(override(&cfg, cases[i].setting, NULL));
		if (finish(&cfg, &err) != cases[i].ok)
			fail_msg("%s: expected %s; log: %s", cases[i].setting,
				 cases[i].ok ? "ok" : "an error", err);
		if (!cases[i].ok)
			assert_contains(err, "Kafka topic name");
		free(err);
		ob_config_free(&cfg);
	}
	memset(long_topic, 'a', sizeof(long_topic));
	assert_true(ob_topic_name_valid(long_topic, OB_TOPIC_NAME_MAX, false));
	assert_false(ob_topic_name_valid(long_topic, OB_TOPIC_NAME_MAX + 1, false));
	assert_false(ob_topic_name_valid(long_topic, 0, false));
	assert_true(ob_topic_name_valid(".", 1, true));
	assert_false(ob_topic_name_valid(".", 1, false));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_inbox_defaults),
	    cmocka_unit_test(test_load_full_file),
	    cmocka_unit_test(test_bad_files_table),
	    cmocka_unit_test(test_file_reports_every_bad_key),
	    cmocka_unit_test(test_missing_file),
	    cmocka_unit_test(test_bool_values),
	    cmocka_unit_test(test_overrides_table),
	    cmocka_unit_test(test_override_values),
	    cmocka_unit_test(test_override_after_file),
	    cmocka_unit_test(test_load_skips_overridden_keys),
	    cmocka_unit_test(test_diff_names_changed_settings),
	    cmocka_unit_test(test_expand_env_table),
	    cmocka_unit_test(test_expand_env_in_settings),
	    cmocka_unit_test(test_finish_table),
	    cmocka_unit_test(test_secret_keys),
	    cmocka_unit_test(test_mask_conninfo_table),
	    cmocka_unit_test(test_mask_conninfo_sslpassword),
	    cmocka_unit_test(test_inline_hash_comments),
	    cmocka_unit_test(test_topic_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
