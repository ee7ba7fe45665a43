/*
 * fuzz_config.c: libFuzzer target for the configuration loader.
 *
 * The input is an INI file, optionally followed by a NUL byte and -s
 * overrides, one per line. The file is loaded through
 * ob_config_load_file() from a memfd (by its /proc/self/fd path, so the
 * loader reads it exactly as it reads a file on disk), the overrides are
 * applied with ob_config_set_override(), and ob_config_finish() checks the
 * result, as main.c does. The environment holds a few variables for
 * ${NAME} references. Errors are logged as JSON lines, so every message
 * naming a bad key or value goes through the logger's JSON escaping.
 *
 * A configuration that loads must hold what the rest of outboxd relies on:
 * every string set, a schema and table name, a topic template whose
 * placeholders are closed and non-empty, a valid slot name, the pinned
 * librdkafka properties unchanged. It is then used the way the daemon uses
 * it: its conninfo is masked and logged, and a fixed outbox row and logical
 * message are mapped with it (fuzz.h: ob_fuzz_map_record()).
 */
#include "fuzz.h"

#include "outboxd/config.h"
#include "outboxd/log.h"

#include "../unit/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

/* A transactional logical message with every mapped field. */
static const char rec_message[] =
    "{\"action\":\"M\",\"xid\":741,\"timestamp\":\"2026-11-23 13:01:27.78929+05:30\","
    "\"lsn\":\"0/1540520\",\"transactional\":true,\"prefix\":\"outbox\",\"content\":"
    "\"{\\\"id\\\": \\\"6f1c9a2e-5b8d-4e0f-9a7c-1d2e3f4a5b6c\\\", \\\"aggregate_type\\\": "
    "\\\"order\\\", \\\"aggregate_id\\\": \\\"o-42\\\", \\\"event_type\\\": \\\"order.paid\\\", "
    "\\\"payload\\\": {\\\"amount\\\": 99.5}, \\\"headers\\\": {\\\"traceparent\\\": "
    "\\\"00-abc-01\\\"}, \\\"created_at\\\": \\\"2026-11-22 03:07:11.205762+00\\\"}\"}";

static int ini_fd = -1;
static char ini_path[64];
static ob_w2j_record records[2];

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *texts[] = {rec_insert, rec_message};
	char err[256];

	ini_fd = memfd_create("outboxd-fuzz.ini", 0);
	OB_FUZZ_CHECK(ini_fd >= 0);
	snprintf(ini_path, sizeof(ini_path), "/proc/self/fd/%d", ini_fd);
	for (size_t i = 0; i < OB_ARRAY_LEN(records); i++)
		OB_FUZZ_CHECK(
		    ob_w2j_parse(texts[i], strlen(texts[i]), &records[i], err, sizeof(err)));
	setenv("OB_FUZZ_HOST", "db.example.com", 1);
	setenv("OB_FUZZ_EMPTY", "", 1);
	setenv("OB_FUZZ_SECRET", "s3cr\"et pass\\word", 1);
	setenv("OB_FUZZ_NESTED", "${OB_FUZZ_HOST}", 1);
	ob_log_configure(OB_LOG_JSON, OB_LOG_DEBUG);
	ob_log_set_context("slot", "fuzz");
	return 0;
}

/* Check what the rest of outboxd relies on in a finished configuration. */
static void
check_config(const ob_config *cfg)
{
	const char *strings[] = {
	    cfg->pg.conninfo,
	    cfg->pg.slot,
	    cfg->outbox.table,
	    cfg->outbox.schema,
	    cfg->outbox.table_name,
	    cfg->outbox.id_column,
	    cfg->outbox.key_column,
	    cfg->outbox.type_column,
	    cfg->outbox.payload_column,
	    cfg->outbox.headers_column,
	    cfg->outbox.timestamp_column,
	    cfg->outbox.topic,
	    cfg->outbox.message_prefix,
	    cfg->outbox.dlq_topic,
	    cfg->http.listen,
	};
	const char *v;

	for (size_t i = 0; i < OB_ARRAY_LEN(strings); i++)
		OB_FUZZ_CHECK(strings[i] != NULL);
	OB_FUZZ_CHECK(cfg->outbox.schema[0] != '\0' && cfg->outbox.table_name[0] != '\0');
	OB_FUZZ_CHECK(strchr(cfg->outbox.table_name, '.') == NULL);
	OB_FUZZ_CHECK(cfg->outbox.key_column[0] != '\0' && cfg->outbox.id_column[0] != '\0');
	OB_FUZZ_CHECK(cfg->outbox.dlq_topic[0] != '\0' && cfg->outbox.topic[0] != '\0');
	/* Each placeholder is closed and names something (a name may hold
	 * "{": Postgres allows it in quoted column names). */
	for (const char *p = cfg->outbox.topic; (p = strpbrk(p, "{}")) != NULL; p++) {
		const char *close = strchr(p, '}');

		OB_FUZZ_CHECK(*p == '{' && close != NULL && close > p + 1);
		p = close;
	}
	OB_FUZZ_CHECK(strlen(cfg->pg.slot) <= 63);
	OB_FUZZ_CHECK(cfg->pg.status_interval_ms > 0 && cfg->pg.reconnect_max_backoff_ms > 0 &&
		      cfg->pg.standby_retry_ms > 0);
	v = ob_config_kafka_get(cfg, "acks");
	OB_FUZZ_CHECK(v == NULL || strcasecmp(v, "all") == 0);
	v = ob_config_kafka_get(cfg, "enable.idempotence");
	OB_FUZZ_CHECK(v == NULL || strcasecmp(v, "true") == 0);
	for (size_t i = 0; i < cfg->kafka_len; i++)
		OB_FUZZ_CHECK(cfg->kafka[i].key[0] != '\0' && cfg->kafka[i].value != NULL);
}

/* Log the settings as the daemon does when it starts: the conninfo masked,
 * secret librdkafka properties never shown. */
static void
log_settings(const ob_config *cfg)
{
	char *masked = ob_log_mask_conninfo(cfg->pg.conninfo);
	ob_log_field fields[] = {
	    {"table", cfg->outbox.table}, {"topic", cfg->outbox.topic}, {NULL, NULL}};

	OB_FUZZ_CHECK(strlen(masked) <= 2 * strlen(cfg->pg.conninfo) + 15);
	ob_log_kv(OB_LOG_INFO, fields, "starting: postgres \"%s\", slot %s", masked, cfg->pg.slot);
	for (size_t i = 0; i < cfg->kafka_len; i++)
		ob_debug("kafka.%s = %s", cfg->kafka[i].key,
			 ob_config_is_secret_key(cfg->kafka[i].key) ? "****" : cfg->kafka[i].value);
	free(masked);
}

/* Apply the -s overrides in text[0..len), one per line. */
static bool
apply_overrides(ob_config *cfg, const char *text, size_t len)
{
	char *copy = malloc(len + 1), *line, *save = NULL;
	bool ok = true;

	OB_FUZZ_CHECK(copy != NULL);
	memcpy(copy, text, len);
	copy[len] = '\0';
	for (line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
		ok = ob_config_set_override(cfg, line) && ok;
	free(copy);
	return ok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t file_len = nul ? (size_t)(nul - data) : size;
	ob_config cfg;
	ob_mapper mapper;
	bool ok;

	OB_FUZZ_CHECK(ftruncate(ini_fd, 0) == 0);
	OB_FUZZ_CHECK(pwrite(ini_fd, data, file_len, 0) == (ssize_t)file_len);
	ob_config_init(&cfg);
	ok = ob_config_load_file(&cfg, ini_path);
	if (nul != NULL)
		ok = apply_overrides(&cfg, (const char *)nul + 1, size - file_len - 1) && ok;
	ok = ok && ob_config_finish(&cfg);
	if (ok) {
		check_config(&cfg);
		ob_log_configure(cfg.log.format, cfg.log.level);
		log_settings(&cfg);
		ob_log_configure(OB_LOG_JSON, OB_LOG_DEBUG);
		ob_mapper_init(&mapper, &cfg);
		for (size_t i = 0; i < OB_ARRAY_LEN(records); i++)
			ob_fuzz_map_record(&mapper, &records[i], INT64_C(1700000000123));
		ob_mapper_free(&mapper);
	}
	ob_config_free(&cfg);
	return 0;
}
