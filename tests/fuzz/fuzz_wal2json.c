/*
 * fuzz_wal2json.c: libFuzzer target for the wal2json record parser and the
 * outbox mapper.
 *
 * The input is one wal2json format-version 2 record, as one XLogData
 * message carries it (not NUL-terminated). It is parsed with ob_w2j_parse()
 * as the relay parses every message. A record that does not parse must say
 * why, and gets the "bad-record" dead-letter record the relay builds from
 * the raw bytes. A record that parses must point into the input only, and
 * an I or M record is mapped (fuzz.h: ob_fuzz_map_record()) with two fixed
 * configurations: the defaults (public.outbox as sql/outbox.sql creates
 * it), and one for a table public.raw_outbox with a bytea payload, a bigint
 * timestamp, no type header and a topic template of three columns.
 */
#include "fuzz.h"

#include "outboxd/config.h"
#include "outboxd/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The commit time used when a record carries none. */
#define FALLBACK_COMMIT_MS INT64_C(1700000000123)

static ob_config configs[2];
static ob_mapper mappers[2];
static ob_w2j_record rec; /* too large for the stack of a fuzzer thread */

/* Settings of the second configuration, applied after the defaults. */
static const char *const raw_outbox_settings[] = {
    "outbox.table=public.raw_outbox",
    "outbox.type_column=",
    "outbox.topic=raw.{aggregate_type}.{event_type}-{id}",
    "outbox.dlq_topic=raw.dlq",
    "outbox.message_prefix=raw",
};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	ob_log_configure(OB_LOG_TEXT, OB_LOG_ERROR);
	for (size_t i = 0; i < OB_ARRAY_LEN(configs); i++)
		ob_config_init(&configs[i]);
	for (size_t i = 0; i < OB_ARRAY_LEN(raw_outbox_settings); i++)
		OB_FUZZ_CHECK(ob_config_set_override(&configs[1], raw_outbox_settings[i]));
	for (size_t i = 0; i < OB_ARRAY_LEN(configs); i++) {
		OB_FUZZ_CHECK(ob_config_finish(&configs[i]));
		ob_mapper_init(&mappers[i], &configs[i]);
	}
	return 0;
}

/* True if p[0..len) lies inside data[0..size). */
static bool
inside(const void *p, size_t len, const uint8_t *data, size_t size)
{
	const uint8_t *b = p;

	return b >= data && b <= data + size && len <= (size_t)(data + size - b);
}

/* Check that a parsed record refers to the input (or, for a column without
 * a value member, to the literal null) and that its names fit. */
static void
check_record(const ob_w2j_record *r, const uint8_t *data, size_t size)
{
	OB_FUZZ_CHECK(strlen(r->schema) < sizeof(r->schema));
	OB_FUZZ_CHECK(strlen(r->table) < sizeof(r->table));
	OB_FUZZ_CHECK(strlen(r->prefix) < sizeof(r->prefix));
	OB_FUZZ_CHECK(!r->prefix_too_long || r->prefix[0] == '\0');
	OB_FUZZ_CHECK(r->columns_len <= OB_W2J_MAX_COLUMNS);
	OB_FUZZ_CHECK(!r->has_timestamp || r->timestamp_ms == r->timestamp_us / 1000);
	if (r->action == OB_W2J_BEGIN || r->action == OB_W2J_COMMIT)
		OB_FUZZ_CHECK(r->nextlsn != 0);
	if (r->action == OB_W2J_MESSAGE)
		OB_FUZZ_CHECK(inside(r->content, r->content_len, data, size));
	for (size_t i = 0; i < r->columns_len; i++) {
		const ob_w2j_column *c = &r->columns[i];
		const char *type;
		size_t type_len;

		OB_FUZZ_CHECK(inside(c->name, c->name_len, data, size));
		OB_FUZZ_CHECK(inside(c->value, c->value_len, data, size) ||
			      ob_json_member_is_null(c));
		OB_FUZZ_CHECK(r->types[i].value_len == 0 ||
			      inside(r->types[i].value, r->types[i].value_len, data, size));
		/* Unescaped names are found by their text. */
		if (!c->name_escaped && c->name_len < 256) {
			char name[256];

			memcpy(name, c->name, c->name_len);
			name[c->name_len] = '\0';
			if (strlen(name) == c->name_len)
				OB_FUZZ_CHECK(ob_w2j_column_find(r, name, &type, &type_len) !=
					      NULL);
		}
	}
}

/* Build the dead-letter record of an unparsable record as the relay does:
 * the raw bytes are its value. */
static void
check_bad_record(const uint8_t *data, size_t size, const char *err)
{
	ob_record_view view;
	ob_event ev;

	memset(&view, 0, sizeof(view));
	view.value = data;
	view.value_len = size;
	view.has_value = true;
	view.timestamp_ms = FALLBACK_COMMIT_MS;
	ob_event_init(&ev);
	ob_event_build_dlq(&ev, configs[0].outbox.dlq_topic, "bad-record", err, 0x16b3748, &view,
			   false);
	ob_fuzz_check_event(&ev);
	OB_FUZZ_CHECK(ev.has_value && ev.value.len == size);
	OB_FUZZ_CHECK(size == 0 || memcmp(ob_event_ptr(&ev, ev.value), data, size) == 0);
	ob_event_free(&ev);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256] = "";

	if (!ob_w2j_parse((const char *)data, size, &rec, err, sizeof(err))) {
		OB_FUZZ_CHECK(err[0] != '\0');
		check_bad_record(data, size, err);
		return 0;
	}
	check_record(&rec, data, size);
	for (size_t i = 0; i < OB_ARRAY_LEN(mappers); i++)
		ob_fuzz_map_record(&mappers[i], &rec,
				   rec.has_timestamp ? rec.timestamp_ms : FALLBACK_COMMIT_MS);
	return 0;
}
