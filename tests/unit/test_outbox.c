/*
 * test_outbox.c: outbox row / logical message -> Kafka record (outbox.h,
 * sql/README.md, "The Kafka record" and "Failure modes").
 *
 * Records are built the way wal2json 2.5 writes them (format-version 2 with
 * include-lsn, include-timestamp, include-xids and include-types), parsed
 * with ob_w2j_parse and mapped with a configuration from ob_config_init()
 * plus overrides and ob_config_finish(). Every case states the whole record
 * expected: topic, key, value, headers in order, timestamp, DLQ reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "outboxd/config.h"
#include "outboxd/outbox.h"
#include "outboxd/wal2json.h"

#include "records.h"

#define ID         "38a18a3a-8de4-4a2c-8a64-91f9bf2d053a"
#define PAYLOAD    "{\"a\": \"x\\\"y\", \"b\": [1, 2.50]}"
#define CREATED_MS INT64_C(1795316831205) /* 2026-11-22 03:07:11.205762+00 */
#define COMMIT_MS  INT64_C(1700000000123)
#define ROW_LSN    "0/152D3E0"
#define MSG_LSN    "0/152D5F0"

/* --- building wal2json records ------------------------------------------- */

typedef struct strbuf {
	char *s;
	size_t len, cap;
} strbuf;

static void
sb_add(strbuf *b, const char *s)
{
	size_t n = strlen(s);

	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

/* Append s as a JSON string, escaped the way a JSON encoder does. */
static void
sb_add_json_string(strbuf *b, const char *s)
{
	json_t *j = json_string(s);
	char *text = json_dumps(j, JSON_ENCODE_ANY);

	sb_add(b, text);
	free(text);
	json_decref(j);
}

/* One column of an I record. Exactly one of str (a string value, escaped
 * by the builder) and raw (JSON text put in as is: numbers, null) is set;
 * drop leaves the column out of the record. */
typedef struct col {
	const char *name;
	const char *type;
	const char *str;
	const char *raw;
	bool drop;
} col;

#define STR(n, t, v)                                                                               \
	{                                                                                          \
		n, t, v, NULL, false                                                               \
	}
#define RAW(n, t, v)                                                                               \
	{                                                                                          \
		n, t, NULL, v, false                                                               \
	}
#define DROP(n)                                                                                    \
	{                                                                                          \
		n, NULL, NULL, NULL, true                                                          \
	}

static const col base_cols[] = {
    STR("id", "uuid", ID),
    STR("aggregate_type", "text", "order"),
    STR("aggregate_id", "text", "o-1"),
    STR("event_type", "text", "created"),
    STR("payload", "jsonb", PAYLOAD),
    STR("headers", "jsonb", "{\"n\": 5, \"tr\": \"abc\"}"),
    STR("created_at", "timestamp with time zone", "2026-11-22 03:07:11.205762+00"),
};

static void
sb_add_col(strbuf *b, const col *c, bool first)
{
	sb_add(b, first ? "{\"name\":" : ",{\"name\":");
	sb_add_json_string(b, c->name);
	sb_add(b, ",\"type\":");
	sb_add_json_string(b, c->type);
	sb_add(b, ",\"value\":");
	if (c->str != NULL)
		sb_add_json_string(b, c->str);
	else
		sb_add(b, c->raw);
	sb_add(b, "}");
}

/* An I record of schema.table: the base columns with over applied (same
 * name: replaced or dropped; new name: appended). over ends at name NULL. */
static char *
build_insert(const char *schema, const char *table, const col *over)
{
	strbuf b = {0};
	bool first = true;

	sb_add(&b, "{\"action\":\"I\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
		   "\"lsn\":\"" ROW_LSN "\",\"schema\":");
	sb_add_json_string(&b, schema);
	sb_add(&b, ",\"table\":");
	sb_add_json_string(&b, table);
	sb_add(&b, ",\"columns\":[");
	for (size_t i = 0; i < OB_ARRAY_LEN(base_cols); i++) {
		const col *c = &base_cols[i];

		for (const col *o = over; o != NULL && o->name != NULL; o++) {
			if (strcmp(o->name, c->name) == 0)
				c = o;
		}
		if (c->drop)
			continue;
		sb_add_col(&b, c, first);
		first = false;
	}
	for (const col *o = over; o != NULL && o->name != NULL; o++) {
		bool known = false;

		for (size_t i = 0; i < OB_ARRAY_LEN(base_cols); i++)
			known = known || strcmp(o->name, base_cols[i].name) == 0;
		if (!known && !o->drop) {
			sb_add_col(&b, o, first);
			first = false;
		}
	}
	sb_add(&b, "]}");
	return b.s;
}

static char *
build_message(const char *lsn, bool transactional, const char *prefix, const char *content)
{
	strbuf b = {0};

	sb_add(&b, transactional ? "{\"action\":\"M\",\"xid\":725,"
				   "\"timestamp\":\"2026-11-22 03:07:11.206737+00\",\"lsn\":\""
				 : "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"");
	sb_add(&b, lsn);
	sb_add(&b, transactional ? "\",\"transactional\":true,\"prefix\":"
				 : "\",\"transactional\":false,\"prefix\":");
	sb_add_json_string(&b, prefix);
	sb_add(&b, ",\"content\":");
	sb_add_json_string(&b, content);
	sb_add(&b, "}");
	return b.s;
}

static void
parse(const char *json, ob_w2j_record *rec)
{
	char err[256];

	if (!ob_w2j_parse(json, strlen(json), rec, err, sizeof(err)))
		fail_msg("test record did not parse (%s): %s", err, json);
}

/* --- configuration ----------------------------------------------------------- */

/* A finished configuration: defaults plus the -s style overrides. */
static ob_config *
make_config(const char *const *overrides, size_t n)
{
	ob_config *cfg = malloc(sizeof(*cfg));

	ob_config_init(cfg);
	for (size_t i = 0; i < n && overrides[i] != NULL; i++) {
		if (!ob_config_set_override(cfg, overrides[i]))
			fail_msg("bad test override %s", overrides[i]);
	}
	if (!ob_config_finish(cfg))
		fail_msg("test configuration refused");
	return cfg;
}

static void
free_config(ob_config *cfg)
{
	ob_config_free(cfg);
	free(cfg);
}

/* --- expectations ---------------------------------------------------------- */

typedef struct hdr {
	const char *name;
	const char *value; /* for "error": a substring of the value */
} hdr;

typedef struct expect {
	ob_map_result result;
	const char *dlq_reason; /* NULL for a normal event */
	const char *topic;      /* NULL: "outbox.dlq" for a DLQ record */
	const char *key;        /* NULL: no key */
	const char *value;      /* NULL: tombstone */
	size_t value_len;       /* 0: strlen(value) */
	int64_t ts;
	hdr headers[OB_EVENT_MAX_HEADERS + 1]; /* ends at name NULL */
} expect;

#define H_ID                                                                                       \
	{                                                                                          \
		"id", ID                                                                           \
	}
#define H_TYPE                                                                                     \
	{                                                                                          \
		"type", "created"                                                                  \
	}
#define H_N                                                                                        \
	{                                                                                          \
		"n", "5"                                                                           \
	}
#define H_TR                                                                                       \
	{                                                                                          \
		"tr", "abc"                                                                        \
	}
#define H_ERR(s)                                                                                   \
	{                                                                                          \
		"error", s                                                                         \
	}
/* The topic the dead letter's record was for, last. */
#define H_OT(t)                                                                                    \
	{                                                                                          \
		"original-topic", t                                                                \
	}
#define H_LSN(l)                                                                                   \
	{                                                                                          \
		"source-lsn", l                                                                    \
	}

static void
check_event(const char *name, ob_map_result got, const ob_event *ev, const expect *ex)
{
	ob_record_view v;
	const char *topic = ex->topic;
	size_t n_headers = 0;

	if (got != ex->result)
		fail_msg("%s: map result %d, expected %d (reason %s)", name, got, ex->result,
			 ev->dlq_reason ? ev->dlq_reason : "none");
	if (got == OB_MAP_SKIP)
		return;
	if (topic == NULL && ex->result == OB_MAP_DLQ)
		topic = "outbox.dlq";
	ob_event_view(ev, &v);

	if (ex->dlq_reason == NULL) {
		if (ev->dlq_reason != NULL)
			fail_msg("%s: unexpected dlq_reason %s", name, ev->dlq_reason);
	} else if (ev->dlq_reason == NULL || strcmp(ev->dlq_reason, ex->dlq_reason) != 0) {
		fail_msg("%s: dlq_reason %s, expected %s", name,
			 ev->dlq_reason ? ev->dlq_reason : "NULL", ex->dlq_reason);
	}
	if (v.topic_len != strlen(topic) || memcmp(v.topic, topic, v.topic_len) != 0)
		fail_msg("%s: topic \"%.*s\", expected \"%s\"", name, (int)v.topic_len, v.topic,
			 topic);
	if (ex->key == NULL) {
		if (v.has_key)
			fail_msg("%s: unexpected key \"%.*s\"", name, (int)v.key_len,
				 (const char *)v.key);
	} else if (!v.has_key || v.key_len != strlen(ex->key) ||
		   memcmp(v.key, ex->key, v.key_len) != 0) {
		fail_msg("%s: key \"%.*s\" (has_key %d), expected \"%s\"", name, (int)v.key_len,
			 (const char *)v.key, v.has_key, ex->key);
	}
	if (ex->value == NULL) {
		if (v.has_value)
			fail_msg("%s: expected a tombstone, got value \"%.*s\"", name,
				 (int)v.value_len, (const char *)v.value);
	} else {
		size_t len = ex->value_len ? ex->value_len : strlen(ex->value);

		if (!v.has_value || v.value_len != len || memcmp(v.value, ex->value, len) != 0)
			fail_msg("%s: value \"%.*s\" (%zu bytes, has_value %d), expected \"%.*s\" "
				 "(%zu bytes)",
				 name, (int)v.value_len, (const char *)v.value, v.value_len,
				 v.has_value, (int)len, ex->value, len);
	}
	if (v.timestamp_ms != ex->ts)
		fail_msg("%s: timestamp %lld, expected %lld", name, (long long)v.timestamp_ms,
			 (long long)ex->ts);

	while (ex->headers[n_headers].name != NULL)
		n_headers++;
	for (size_t i = 0; i < v.headers_len && i < n_headers; i++) {
		const hdr *h = &ex->headers[i];
		const char *val = v.header_values[i];
		size_t len = v.header_value_lens[i];

		if (strcmp(v.header_names[i], h->name) != 0)
			fail_msg("%s: header %zu is \"%s\", expected \"%s\"", name, i,
				 v.header_names[i], h->name);
		if (strcmp(h->name, "error") == 0) {
			char *copy = strndup(val, len);
			bool found = strstr(copy, h->value) != NULL;

			if (!found)
				fail_msg("%s: error header \"%s\" does not mention \"%s\"", name,
					 copy, h->value);
			free(copy);
		} else if (len != strlen(h->value) || memcmp(val, h->value, len) != 0) {
			fail_msg("%s: header %s = \"%.*s\", expected \"%s\"", name, h->name,
				 (int)len, val, h->value);
		}
	}
	if (v.headers_len != n_headers) {
		for (size_t i = 0; i < v.headers_len; i++)
			print_message("  header %s = %.*s\n", v.header_names[i],
				      (int)v.header_value_lens[i],
				      (const char *)v.header_values[i]);
		fail_msg("%s: %zu headers, expected %zu", name, v.headers_len, n_headers);
	}
}

/* --- rows ----------------------------------------------------------------- */

typedef struct row_case {
	const char *name;
	const char *overrides[4];
	const char *schema; /* NULL: public */
	const char *table;  /* NULL: outbox */
	col cols[6];        /* ends at name NULL */
	expect ex;
} row_case;

#define EVENT_BASIC(topic_, key_, value_, ts_, ...)                                                \
	{                                                                                          \
		OB_MAP_EVENT, NULL, topic_, key_, value_, 0, ts_,                                  \
		{                                                                                  \
			__VA_ARGS__                                                                \
		}                                                                                  \
	}

static const row_case row_cases[] = {
    {"basic",
     {NULL},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"text payload",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "text", "hello \"world\"\n")},
     EVENT_BASIC("outbox.event.order", "o-1", "hello \"world\"\n", CREATED_MS, H_ID, H_TYPE, H_N,
		 H_TR)},
    {"json payload kept as sent",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "json", "{\"z\": 1,  \"a\": [ ], \"u\": \"\\u00e9\"}")},
     EVENT_BASIC("outbox.event.order", "o-1", "{\"z\": 1,  \"a\": [ ], \"u\": \"\\u00e9\"}",
		 CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"bytea payload",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "deadbeef00ff")},
     {OB_MAP_EVENT,
      NULL,
      "outbox.event.order",
      "o-1",
      "\xde\xad\xbe\xef\x00\xff",
      6,
      CREATED_MS,
      {H_ID, H_TYPE, H_N, H_TR}}},
    {"bytea payload upper case",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "DEADBEEF")},
     EVENT_BASIC("outbox.event.order", "o-1", "\xde\xad\xbe\xef", CREATED_MS, H_ID, H_TYPE, H_N,
		 H_TR)},
    {"empty bytea payload",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "")},
     EVENT_BASIC("outbox.event.order", "o-1", "", CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"null payload is a tombstone",
     {NULL},
     NULL,
     NULL,
     {RAW("payload", "jsonb", "null")},
     EVENT_BASIC("outbox.event.order", "o-1", NULL, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"headers of every JSON kind",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb",
	  "{\"b\": true, \"f\": false, \"o\": {\"x\": 1, \"y\": [1, \"s\"]}, \"s\": \"str\", "
	  "\"z\": null, \"arr\": [], \"esc\": \"q\\\"u\", \"neg\": -3, \"num\": \"7\"}")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, {"b", "true"},
		 {"f", "false"}, {"o", "{\"x\": 1, \"y\": [1, \"s\"]}"}, {"s", "str"},
		 {"z", "null"}, {"arr", "[]"}, {"esc", "q\"u"}, {"neg", "-3"}, {"num", "7"})},
    {"headers in object order",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "json", "{\"z\": \"1\", \"a\": \"2\", \"m\": \"3\"}")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, {"z", "1"},
		 {"a", "2"}, {"m", "3"})},
    {"headers null",
     {NULL},
     NULL,
     NULL,
     {RAW("headers", "jsonb", "null")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE)},
    {"headers empty object",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "{}")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE)},
    {"headers column absent",
     {NULL},
     NULL,
     NULL,
     {DROP("headers")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE)},
    {"type null",
     {NULL},
     NULL,
     NULL,
     {RAW("event_type", "text", "null")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_N, H_TR)},
    {"type and headers not mapped",
     {"outbox.type_column=", "outbox.headers_column="},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID)},
    {"other id column",
     {"outbox.id_column=aggregate_type"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, {"id", "order"}, H_TYPE, H_N,
		 H_TR)},
    {"timestamp from a bigint ms column",
     {"outbox.timestamp_column=created_ms"},
     NULL,
     NULL,
     {RAW("created_ms", "bigint", "1795316831999")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, INT64_C(1795316831999), H_ID, H_TYPE, H_N,
		 H_TR)},
    {"timestamp null: commit time",
     {NULL},
     NULL,
     NULL,
     {RAW("created_at", "timestamp with time zone", "null")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, COMMIT_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"timestamp without time zone is UTC",
     {NULL},
     NULL,
     NULL,
     {STR("created_at", "timestamp without time zone", "2026-11-22 03:07:11.206737")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, INT64_C(1795316831206), H_ID, H_TYPE, H_N,
		 H_TR)},
    {"timestamp with an offset",
     {NULL},
     NULL,
     NULL,
     {STR("created_at", "timestamp with time zone", "2026-11-22 03:07:11.206737+05:30")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, INT64_C(1795297031206), H_ID, H_TYPE, H_N,
		 H_TR)},
    {"timestamp column not configured",
     {"outbox.timestamp_column="},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, COMMIT_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"timestamp infinity: commit time",
     {NULL},
     NULL,
     NULL,
     {STR("created_at", "timestamp with time zone", "infinity")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, COMMIT_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"integer key",
     {NULL},
     NULL,
     NULL,
     {RAW("aggregate_id", "bigint", "42")},
     EVENT_BASIC("outbox.event.order", "42", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"topic with two placeholders",
     {"outbox.topic=t.{aggregate_type}.{event_type}"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("t.order.created", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"topic without placeholders",
     {"outbox.topic=fixed-topic"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("fixed-topic", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"topic placeholder only",
     {"outbox.topic={aggregate_type}"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"topic prefix and suffix",
     {"outbox.topic=a-{aggregate_type}-z"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("a-order-z", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"topic from a number column",
     {"outbox.topic=p.{version}"},
     NULL,
     NULL,
     {RAW("version", "integer", "3")},
     EVENT_BASIC("p.3", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"table configured without schema",
     {"outbox.table=outbox"},
     NULL,
     NULL,
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"configured schema and table",
     {"outbox.table=app.events"},
     "app",
     "events",
     {{NULL}},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR)},
    {"other table", {NULL}, "public", "orders", {{NULL}}, {OB_MAP_SKIP}},
    {"same table name, other schema", {NULL}, "audit", "outbox", {{NULL}}, {OB_MAP_SKIP}},
    {"default table, configured elsewhere",
     {"outbox.table=app.events"},
     NULL,
     NULL,
     {{NULL}},
     {OB_MAP_SKIP}},

    /* Bad events: the dead-letter record keeps what could be read. */
    {"null key",
     {NULL},
     NULL,
     NULL,
     {RAW("aggregate_id", "text", "null")},
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("aggregate_id"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR,
       H_OT("outbox.event.order")}}},
    {"missing key column",
     {NULL},
     NULL,
     NULL,
     {DROP("aggregate_id")},
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("missing"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"null key and tombstone",
     {NULL},
     NULL,
     NULL,
     {RAW("aggregate_id", "text", "null"), RAW("payload", "jsonb", "null")},
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      NULL,
      0,
      CREATED_MS,
      {H_ERR("aggregate_id"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR,
       H_OT("outbox.event.order")}}},
    {"null id",
     {NULL},
     NULL,
     NULL,
     {RAW("id", "uuid", "null")},
     {OB_MAP_DLQ,
      "missing-id",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("id"), H_LSN(ROW_LSN), H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"missing id column",
     {NULL},
     NULL,
     NULL,
     {DROP("id")},
     {OB_MAP_DLQ,
      "missing-id",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("missing"), H_LSN(ROW_LSN), H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"null key and null id",
     {NULL},
     NULL,
     NULL,
     {RAW("aggregate_id", "text", "null"), RAW("id", "uuid", "null")},
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("aggregate_id"), H_LSN(ROW_LSN), H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"invalid bytea hex",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "zz11")},
     {OB_MAP_DLQ,
      "bad-payload",
      NULL,
      "o-1",
      "zz11",
      0,
      CREATED_MS,
      {H_ERR("payload"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"odd-length bytea hex",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "abc")},
     {OB_MAP_DLQ,
      "bad-payload",
      NULL,
      "o-1",
      "abc",
      0,
      CREATED_MS,
      {H_ERR("payload"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"bytea with the \\x prefix",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "\\xdead")},
     {OB_MAP_DLQ,
      "bad-payload",
      NULL,
      "o-1",
      "\\xdead",
      0,
      CREATED_MS,
      {H_ERR("payload"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR, H_OT("outbox.event.order")}}},
    {"headers an array",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "[1, 2]")},
     {OB_MAP_DLQ,
      "bad-headers",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("headers"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_OT("outbox.event.order")}}},
    {"headers a string",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "\"x\"")},
     {OB_MAP_DLQ,
      "bad-headers",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("headers"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_OT("outbox.event.order")}}},
    {"headers a number",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "5")},
     {OB_MAP_DLQ,
      "bad-headers",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("headers"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_OT("outbox.event.order")}}},
    {"headers not JSON",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "text", "{bad")},
     {OB_MAP_DLQ,
      "bad-headers",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("headers"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_OT("outbox.event.order")}}},
    {"bad payload and bad headers",
     {NULL},
     NULL,
     NULL,
     {STR("payload", "bytea", "xyz0"), STR("headers", "jsonb", "[]")},
     {OB_MAP_DLQ,
      "bad-payload",
      NULL,
      "o-1",
      "xyz0",
      0,
      CREATED_MS,
      {H_ERR("payload"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_OT("outbox.event.order")}}},
    {"topic column null",
     {NULL},
     NULL,
     NULL,
     {RAW("aggregate_type", "text", "null")},
     {OB_MAP_DLQ,
      "missing-topic-column",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("aggregate_type"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR}}},
    {"topic column missing",
     {"outbox.topic=x.{nosuch}"},
     NULL,
     NULL,
     {{NULL}},
     {OB_MAP_DLQ,
      "missing-topic-column",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("nosuch"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR}}},
    {"topic column gives an invalid topic name",
     {NULL},
     NULL,
     NULL,
     {STR("aggregate_type", "text", "order # hash")},
     {OB_MAP_DLQ,
      "bad-topic",
      NULL,
      "o-1",
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("not a Kafka topic name"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR,
       H_OT("outbox.event.order # hash")}}},
    {"dlq topic configured",
     {"outbox.dlq_topic=dead.letters"},
     NULL,
     NULL,
     {RAW("aggregate_id", "text", "null")},
     {OB_MAP_DLQ,
      "missing-key",
      "dead.letters",
      NULL,
      PAYLOAD,
      0,
      CREATED_MS,
      {H_ERR("aggregate_id"), H_LSN(ROW_LSN), H_ID, H_TYPE, H_N, H_TR,
       H_OT("outbox.event.order")}}},
};

typedef ob_map_result (*map_fn)(ob_mapper *, const ob_w2j_record *, int64_t, ob_event *);

/* Map the wal2json record json (freed here) with map under the overrides
 * and check the result against ex. */
static void
run_mapping(const char *name, const char *const *overrides, size_t n_overrides, char *json,
	    map_fn map, const expect *ex)
{
	ob_config *cfg = make_config(overrides, n_overrides);
	ob_mapper m;
	ob_w2j_record rec;
	ob_event ev;

	ob_mapper_init(&m, cfg);
	ob_event_init(&ev);
	parse(json, &rec);
	check_event(name, map(&m, &rec, COMMIT_MS, &ev), &ev, ex);
	ob_w2j_record_clear(&rec);
	ob_event_free(&ev);
	free(json);
	ob_mapper_free(&m);
	free_config(cfg);
}

static void
run_row_case(const row_case *c)
{
	run_mapping(
	    c->name, c->overrides, OB_ARRAY_LEN(c->overrides),
	    build_insert(c->schema ? c->schema : "public", c->table ? c->table : "outbox", c->cols),
	    ob_mapper_map_insert, &c->ex);
}

static void
test_rows_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(row_cases); i++) {
		print_message("row: %s\n", row_cases[i].name);
		run_row_case(&row_cases[i]);
	}
}

/* The exact record of a wal2json 2.5 stream maps as sql/README.md "The Kafka record" says. */
static void
test_verbatim_record(void **state)
{
	static const expect ex =
	    EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, H_N, H_TR);
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	ob_w2j_record rec;
	ob_event ev;

	(void)state;
	ob_mapper_init(&m, cfg);
	ob_event_init(&ev);
	parse(rec_insert, &rec);
	check_event("verbatim", ob_mapper_map_insert(&m, &rec, COMMIT_MS, &ev), &ev, &ex);
	/* The value is the jsonb text unescaped once, not JSON-quoted again. */
	assert_int_equal(ev.value.len, strlen("{\"a\": \"x\\\"y\", \"b\": [1, 2.50]}"));
	ob_w2j_record_clear(&rec);
	ob_event_free(&ev);
	ob_mapper_free(&m);
	free_config(cfg);
}

/* Headers fill up at OB_EVENT_MAX_HEADERS: id and type leave room for 62
 * members; one more is a bad event. */
static void
test_header_limit(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	ob_event ev;

	(void)state;
	ob_mapper_init(&m, cfg);
	ob_event_init(&ev);
	for (int members = OB_EVENT_MAX_HEADERS - 2; members <= OB_EVENT_MAX_HEADERS - 1;
	     members++) {
		strbuf b = {0};
		char item[64];
		col over[2] = {{NULL}};
		ob_w2j_record rec;
		ob_record_view v;
		char *json;
		ob_map_result r;

		sb_add(&b, "{");
		for (int i = 0; i < members; i++) {
			snprintf(item, sizeof(item), "%s\"h%d\": \"v%d\"", i ? ", " : "", i, i);
			sb_add(&b, item);
		}
		sb_add(&b, "}");
		over[0] = (col)STR("headers", "jsonb", b.s);
		json = build_insert("public", "outbox", over);
		parse(json, &rec);
		r = ob_mapper_map_insert(&m, &rec, COMMIT_MS, &ev);
		ob_event_view(&ev, &v);
		if (members == OB_EVENT_MAX_HEADERS - 2) {
			assert_int_equal(r, OB_MAP_EVENT);
			assert_int_equal(v.headers_len, OB_EVENT_MAX_HEADERS);
			assert_string_equal(v.header_names[0], "id");
			assert_string_equal(v.header_names[1], "type");
			assert_string_equal(v.header_names[2], "h0");
			assert_string_equal(v.header_names[63], "h61");
			assert_memory_equal(v.header_values[63], "v61", 3);
		} else {
			/* The object's members go in all or not at all. */
			assert_int_equal(r, OB_MAP_DLQ);
			assert_string_equal(ev.dlq_reason, "bad-headers");
			assert_int_equal(v.headers_len, 5);
			assert_string_equal(v.header_names[0], "error");
			assert_string_equal(v.header_names[1], "source-lsn");
			assert_string_equal(v.header_names[2], "id");
			assert_string_equal(v.header_names[3], "type");
			assert_string_equal(v.header_names[4], "original-topic");
			assert_true(v.has_key);
			assert_true(v.has_value);
		}
		ob_w2j_record_clear(&rec);
		free(json);
		free(b.s);
	}
	ob_event_free(&ev);
	ob_mapper_free(&m);
	free_config(cfg);
}

/* --- logical messages ------------------------------------------------------- */

typedef struct msg_case {
	const char *name;
	const char *overrides[2];
	const char *lsn;
	bool transactional;
	const char *prefix;
	const char *content;
	expect ex;
} msg_case;

#define MSG_ROW                                                                                    \
	"\"id\":\"m1\",\"aggregate_type\":\"order\",\"aggregate_id\":\"o-1\","                     \
	"\"event_type\":\"created\""

static const msg_case msg_cases[] = {
    {"row-like message",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{\"a\":\"x\\\"y\",\"b\":[1,2]},\"headers\":{\"n\":5,"
     "\"tr\":\"abc\"},\"created_at\":\"2026-11-22 03:07:11.205762+00\"}",
     EVENT_BASIC("outbox.event.order", "o-1", "{\"a\":\"x\\\"y\",\"b\":[1,2]}", CREATED_MS,
		 {"id", "m1"}, H_TYPE, H_N, H_TR)},
    /* A member's JSON text is published as written, white space included. */
    {"object payload keeps its text",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{ " MSG_ROW ", \"payload\" : { \"b\" : [ 1 , true , null ] , \"a\" : { } } }",
     EVENT_BASIC("outbox.event.order", "o-1", "{ \"b\" : [ 1 , true , null ] , \"a\" : { } }",
		 COMMIT_MS, {"id", "m1"}, H_TYPE)},
    {"string payload as is",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":\"plain \\\"text\\\"\"}",
     EVENT_BASIC("outbox.event.order", "o-1", "plain \"text\"", COMMIT_MS, {"id", "m1"}, H_TYPE)},
    {"array payload",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":[1, \"a\"]}",
     EVENT_BASIC("outbox.event.order", "o-1", "[1, \"a\"]", COMMIT_MS, {"id", "m1"}, H_TYPE)},
    {"null payload is a tombstone",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":null}",
     EVENT_BASIC("outbox.event.order", "o-1", NULL, COMMIT_MS, {"id", "m1"}, H_TYPE)},
    {"numbers as text",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":7,\"aggregate_type\":\"order\",\"aggregate_id\":42,\"event_type\":\"created\","
     "\"payload\":{},\"headers\":{\"n\":5,\"ok\":false}}",
     EVENT_BASIC("outbox.event.order", "42", "{}", COMMIT_MS, {"id", "7"}, H_TYPE, H_N,
		 {"ok", "false"})},
    {"timestamp as epoch ms",
     {"outbox.timestamp_column=ts"},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{},\"ts\":1795316831999}",
     EVENT_BASIC("outbox.event.order", "o-1", "{}", INT64_C(1795316831999), {"id", "m1"}, H_TYPE)},
    {"configured prefix",
     {"outbox.message_prefix=evt"},
     MSG_LSN,
     true,
     "evt",
     "{" MSG_ROW ",\"payload\":{}}",
     EVENT_BASIC("outbox.event.order", "o-1", "{}", COMMIT_MS, {"id", "m1"}, H_TYPE)},
    {"other prefix", {NULL}, MSG_LSN, true, "audit", "{" MSG_ROW ",\"payload\":{}}", {OB_MAP_SKIP}},
    {"prefix that only starts the same",
     {NULL},
     MSG_LSN,
     true,
     "outbox2",
     "{" MSG_ROW ",\"payload\":{}}",
     {OB_MAP_SKIP}},
    {"messages disabled",
     {"outbox.message_prefix="},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{}}",
     {OB_MAP_SKIP}},
    {"other prefix, non-transactional", {NULL}, "0/152D630", false, "audit", "nt", {OB_MAP_SKIP}},

    {"escapes decoded in names and strings",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":\"m\\u0031\",\"aggregate\\u005ftype\":\"order\",\"aggregate_id\":\"o\\\"1\","
     "\"event_type\":\"created\",\"payload\":\"caf\\u00e9 \\ud83d\\ude00\\n\","
     "\"headers\":{\"k\\u0021\":\"v\\/w\"}}",
     EVENT_BASIC("outbox.event.order", "o\"1", "caf\xc3\xa9 \xf0\x9f\x98\x80\n", COMMIT_MS,
		 {"id", "m1"}, H_TYPE, {"k!", "v/w"})},
    {"header values of every JSON kind keep their text",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{},\"headers\":{\"n\": 5, \"d\": 2.50, "
     "\"o\": {\"k\": [1, 2.50]}, \"b\": true, \"z\": null, \"s\": \"x\"}}",
     EVENT_BASIC("outbox.event.order", "o-1", "{}", COMMIT_MS, {"id", "m1"}, H_TYPE, {"n", "5"},
		 {"d", "2.50"}, {"o", "{\"k\": [1, 2.50]}"}, {"b", "true"}, {"z", "null"},
		 {"s", "x"})},
    {"first of duplicate members",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":\"first\",\"payload\":\"second\"}",
     EVENT_BASIC("outbox.event.order", "o-1", "first", COMMIT_MS, {"id", "m1"}, H_TYPE)},

    /* Bad messages. */
    {"bad escape in the payload",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":\"bad \\q escape\"}",
     {OB_MAP_DLQ,
      "bad-payload",
      NULL,
      "o-1",
      "bad \\q escape",
      0,
      COMMIT_MS,
      {H_ERR("payload"), H_LSN(MSG_LSN), {"id", "m1"}, H_TYPE, H_OT("outbox.event.order")}}},
    {"trailing comma",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",}",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "{" MSG_ROW ",}",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"text after the object",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW "} x",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "{" MSG_ROW "} x",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"unbalanced brackets",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":[1}",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "{" MSG_ROW ",\"payload\":[1}",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"only an id",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":\"m1\"}",
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      NULL,
      0,
      COMMIT_MS,
      {H_ERR("aggregate_id"), H_LSN(MSG_LSN), {"id", "m1"}}}},
    {"non-transactional",
     {NULL},
     "0/152D630",
     false,
     "outbox",
     "nt",
     {OB_MAP_DLQ,
      "non-transactional-message",
      NULL,
      NULL,
      "nt",
      0,
      COMMIT_MS,
      {H_ERR("transactional"), H_LSN("0/152D630")}}},
    {"non-transactional object",
     {NULL},
     "0/152D630",
     false,
     "outbox",
     "{" MSG_ROW ",\"payload\":{}}",
     {OB_MAP_DLQ,
      "non-transactional-message",
      NULL,
      NULL,
      "{" MSG_ROW ",\"payload\":{}}",
      0,
      COMMIT_MS,
      {H_ERR("transactional"), H_LSN("0/152D630")}}},
    {"content not JSON",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "nt",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "nt",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"content an array",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "[1, 2]",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "[1, 2]",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"content a number",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "42",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "42",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"content cut short",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":",
     {OB_MAP_DLQ,
      "bad-message",
      NULL,
      NULL,
      "{\"id\":",
      0,
      COMMIT_MS,
      {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"content empty",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "",
     {OB_MAP_DLQ, "bad-message", NULL, NULL, "", 0, COMMIT_MS, {H_ERR("object"), H_LSN(MSG_LSN)}}},
    {"message without topic field",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":\"m1\",\"aggregate_id\":\"o-1\",\"payload\":{\"a\":1}}",
     {OB_MAP_DLQ,
      "missing-topic-column",
      NULL,
      "o-1",
      "{\"a\":1}",
      0,
      COMMIT_MS,
      {H_ERR("aggregate_type"), H_LSN(MSG_LSN), {"id", "m1"}}}},
    {"message headers not an object",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{},\"headers\":[1]}",
     {OB_MAP_DLQ,
      "bad-headers",
      NULL,
      "o-1",
      "{}",
      0,
      COMMIT_MS,
      {H_ERR("headers"), H_LSN(MSG_LSN), {"id", "m1"}, H_TYPE, H_OT("outbox.event.order")}}},
    {"message with a null key",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{\"id\":\"m1\",\"aggregate_type\":\"order\",\"aggregate_id\":null,\"payload\":\"p\"}",
     {OB_MAP_DLQ,
      "missing-key",
      NULL,
      NULL,
      "p",
      0,
      COMMIT_MS,
      {H_ERR("aggregate_id"), H_LSN(MSG_LSN), {"id", "m1"}, H_OT("outbox.event.order")}}},
};

static void
run_msg_case(const msg_case *c)
{
	run_mapping(c->name, c->overrides, OB_ARRAY_LEN(c->overrides),
		    build_message(c->lsn, c->transactional, c->prefix, c->content),
		    ob_mapper_map_message, &c->ex);
}

static void
test_messages_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(msg_cases); i++) {
		print_message("message: %s\n", msg_cases[i].name);
		run_msg_case(&msg_cases[i]);
	}
}

/* A message may have up to 64 members (the error text says "of at most 64
 * members"); one more makes it a bad message. */
static void
test_message_member_limit(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	ob_event ev;

	(void)state;
	ob_mapper_init(&m, cfg);
	ob_event_init(&ev);
	for (int members = 64; members <= 65; members++) {
		strbuf b = {0};
		char item[32];
		ob_w2j_record rec;
		ob_map_result r;
		char *json;

		/* MSG_ROW has 4 members, payload is the 5th. */
		sb_add(&b, "{" MSG_ROW ",\"payload\":\"p\"");
		for (int i = 5; i < members; i++) {
			snprintf(item, sizeof(item), ",\"x%d\":%d", i, i);
			sb_add(&b, item);
		}
		sb_add(&b, "}");
		json = build_message(MSG_LSN, true, "outbox", b.s);
		parse(json, &rec);
		r = ob_mapper_map_message(&m, &rec, COMMIT_MS, &ev);
		if (members == 64 && r != OB_MAP_EVENT)
			fail_msg("a message of 64 members was refused: %s", ev.dlq_reason);
		if (members == 65) {
			assert_int_equal(r, OB_MAP_DLQ);
			assert_string_equal(ev.dlq_reason, "bad-message");
		}
		ob_w2j_record_clear(&rec);
		free(json);
		free(b.s);
	}
	ob_event_free(&ev);
	ob_mapper_free(&m);
	free_config(cfg);
}

/* A row and a message with the same content give the same record. */
static void
test_message_maps_like_row(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	ob_w2j_record row, msg;
	ob_event ev_row, ev_msg;
	ob_record_view a, b;
	char *row_json, *msg_json;
	static const col over[] = {STR("payload", "text", "same"), {NULL}};

	(void)state;
	ob_mapper_init(&m, cfg);
	ob_event_init(&ev_row);
	ob_event_init(&ev_msg);
	row_json = build_insert("public", "outbox", over);
	msg_json = build_message(MSG_LSN, true, "outbox",
				 "{\"id\":\"" ID "\",\"aggregate_type\":\"order\","
				 "\"aggregate_id\":\"o-1\",\"event_type\":\"created\","
				 "\"payload\":\"same\",\"headers\":{\"n\":5,\"tr\":\"abc\"},"
				 "\"created_at\":\"2026-11-22 03:07:11.205762+00\"}");
	parse(row_json, &row);
	parse(msg_json, &msg);
	assert_int_equal(ob_mapper_map_insert(&m, &row, 1, &ev_row), OB_MAP_EVENT);
	assert_int_equal(ob_mapper_map_message(&m, &msg, 2, &ev_msg), OB_MAP_EVENT);
	ob_event_view(&ev_row, &a);
	ob_event_view(&ev_msg, &b);
	assert_int_equal(a.topic_len, b.topic_len);
	assert_memory_equal(a.topic, b.topic, a.topic_len);
	assert_int_equal(a.key_len, b.key_len);
	assert_memory_equal(a.key, b.key, a.key_len);
	assert_int_equal(a.value_len, b.value_len);
	assert_memory_equal(a.value, b.value, a.value_len);
	assert_int_equal(a.timestamp_ms, b.timestamp_ms);
	assert_int_equal(a.headers_len, b.headers_len);
	for (size_t i = 0; i < a.headers_len; i++) {
		assert_string_equal(a.header_names[i], b.header_names[i]);
		assert_int_equal(a.header_value_lens[i], b.header_value_lens[i]);
		assert_memory_equal(a.header_values[i], b.header_values[i], a.header_value_lens[i]);
	}
	ob_w2j_record_clear(&row);
	ob_w2j_record_clear(&msg);
	ob_event_free(&ev_row);
	ob_event_free(&ev_msg);
	free(row_json);
	free(msg_json);
	ob_mapper_free(&m);
	free_config(cfg);
}

/* Each mapper entry point ignores the other kinds of record. */
static void
test_wrong_record_kind_skipped(void **state)
{
	static const char *const records[] = {
	    "{\"action\":\"B\",\"lsn\":\"0/1\",\"nextlsn\":\"0/2\"}",
	    "{\"action\":\"C\",\"lsn\":\"0/1\",\"nextlsn\":\"0/2\"}",
	    "{\"action\":\"D\",\"lsn\":\"0/1\",\"schema\":\"public\",\"table\":\"outbox\"}",
	    "{\"action\":\"T\",\"lsn\":\"0/1\",\"schema\":\"public\",\"table\":\"outbox\"}",
	};
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	ob_w2j_record rec;
	ob_event ev;
	char *ins = build_insert("public", "outbox", NULL);
	char *msg = build_message(MSG_LSN, true, "outbox", "{" MSG_ROW ",\"payload\":{}}");

	(void)state;
	ob_mapper_init(&m, cfg);
	ob_event_init(&ev);
	parse(ins, &rec);
	assert_int_equal(ob_mapper_map_message(&m, &rec, COMMIT_MS, &ev), OB_MAP_SKIP);
	ob_w2j_record_clear(&rec);
	parse(msg, &rec);
	assert_int_equal(ob_mapper_map_insert(&m, &rec, COMMIT_MS, &ev), OB_MAP_SKIP);
	ob_w2j_record_clear(&rec);
	for (size_t i = 0; i < OB_ARRAY_LEN(records); i++) {
		parse(records[i], &rec);
		assert_int_equal(ob_mapper_map_insert(&m, &rec, COMMIT_MS, &ev), OB_MAP_SKIP);
		assert_int_equal(ob_mapper_map_message(&m, &rec, COMMIT_MS, &ev), OB_MAP_SKIP);
		ob_w2j_record_clear(&rec);
	}
	ob_event_free(&ev);
	free(ins);
	free(msg);
	ob_mapper_free(&m);
	free_config(cfg);
}

/*
 * JSON numbers that are not a column's own value (header members, members
 * of a message) keep the text they were written with: sql/README.md "The Kafka record" says "other
 * JSON values as JSON text". A double round trip changes 0.1, and numbers
 * beyond 64 bits are valid jsonb.
 */
static const row_case number_row_cases[] = {
    {"decimal header",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "{\"price\": 0.1}")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE, {"price", "0.1"})},
    {"big integer header",
     {NULL},
     NULL,
     NULL,
     {STR("headers", "jsonb", "{\"big\": 12345678901234567890}")},
     EVENT_BASIC("outbox.event.order", "o-1", PAYLOAD, CREATED_MS, H_ID, H_TYPE,
		 {"big", "12345678901234567890"})},
};

static const msg_case number_msg_cases[] = {
    {"decimal in a message payload",
     {NULL},
     MSG_LSN,
     true,
     "outbox",
     "{" MSG_ROW ",\"payload\":{\"amount\":0.1}}",
     EVENT_BASIC("outbox.event.order", "o-1", "{\"amount\":0.1}", COMMIT_MS, {"id", "m1"}, H_TYPE)},
};

static void
test_header_decimal_keeps_text(void **state)
{
	(void)state;
	run_row_case(&number_row_cases[0]);
}

static void
test_header_big_integer_keeps_text(void **state)
{
	(void)state;
	run_row_case(&number_row_cases[1]);
}

static void
test_message_decimal_keeps_text(void **state)
{
	(void)state;
	run_msg_case(&number_msg_cases[0]);
}

/* --- dead-letter records of refused records -------------------------------- */

static void
map_basic(const ob_config *cfg, ob_event *ev)
{
	ob_mapper m;
	ob_w2j_record rec;

	ob_mapper_init(&m, cfg);
	parse(rec_insert, &rec);
	assert_int_equal(ob_mapper_map_insert(&m, &rec, COMMIT_MS, ev), OB_MAP_EVENT);
	ob_w2j_record_clear(&rec);
	ob_mapper_free(&m);
}

static void
test_build_dlq(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_event orig, out;
	ob_record_view view;
	char size[32];

	(void)state;
	ob_event_init(&orig);
	ob_event_init(&out);
	map_basic(cfg, &orig);
	ob_event_view(&orig, &view);
	snprintf(size, sizeof(size), "%zu", strlen(PAYLOAD));

	/* Too large: headers only, with the size. */
	{
		const expect ex = {OB_MAP_DLQ,
				   "too-large",
				   NULL,
				   "o-1",
				   NULL,
				   0,
				   CREATED_MS,
				   {H_ERR("Message size too large"),
				    H_LSN("0/152D660"),
				    {"payload-size", size},
				    H_ID,
				    H_TYPE,
				    H_N,
				    H_TR,
				    H_OT("outbox.event.order")}};

		ob_event_build_dlq(&out, cfg->outbox.dlq_topic, "too-large",
				   "Broker: Message size too large", 0x152D660, &view, true);
		check_event("too large", OB_MAP_DLQ, &out, &ex);
	}
	/* Refused for another reason: the value is kept. */
	{
		const expect ex = {OB_MAP_DLQ,
				   "refused",
				   NULL,
				   "o-1",
				   PAYLOAD,
				   0,
				   CREATED_MS,
				   {H_ERR("Topic authorization failed"), H_LSN("1/0"), H_ID, H_TYPE,
				    H_N, H_TR, H_OT("outbox.event.order")}};

		ob_event_build_dlq(&out, cfg->outbox.dlq_topic, "refused",
				   "Broker: Topic authorization failed", UINT64_C(0x100000000),
				   &view, false);
		check_event("refused", OB_MAP_DLQ, &out, &ex);
	}
	/* The reason is kept by pointer, as documented. */
	{
		static const char reason[] = "too-large";

		ob_event_build_dlq(&out, cfg->outbox.dlq_topic, reason, "e", 1, &view, true);
		assert_ptr_equal(out.dlq_reason, reason);
	}
	/* A keyless tombstone stays keyless, without a value. */
	{
		ob_record_view bare;
		const expect ex = {
		    OB_MAP_DLQ, "refused", NULL, NULL,
		    NULL,       0,         5,    {H_ERR("x"), H_LSN("0/10"), H_OT("t")}};

		memset(&bare, 0, sizeof(bare));
		bare.topic = "t";
		bare.topic_len = 1;
		bare.timestamp_ms = 5;
		ob_event_build_dlq(&out, cfg->outbox.dlq_topic, "refused", "x", 0x10, &bare, false);
		check_event("bare", OB_MAP_DLQ, &out, &ex);
	}
	/* A too-large record with no value says so: size 0, no value. */
	{
		ob_record_view bare;
		const expect ex = {OB_MAP_DLQ, "too-large",
				   NULL,       NULL,
				   NULL,       0,
				   5,          {H_ERR("x"), H_LSN("0/10"), {"payload-size", "0"}}};

		memset(&bare, 0, sizeof(bare));
		bare.timestamp_ms = 5;
		ob_event_build_dlq(&out, cfg->outbox.dlq_topic, "too-large", "x", 0x10, &bare,
				   true);
		check_event("bare too large", OB_MAP_DLQ, &out, &ex);
	}
	ob_event_free(&orig);
	ob_event_free(&out);
	free_config(cfg);
}

/* A refused record with every header slot in use: its DLQ record keeps
 * error and source-lsn first and as many original headers as fit. */
static void
test_build_dlq_header_overflow(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_event orig, out;
	ob_record_view view, dv;
	char name[16];

	(void)state;
	ob_event_init(&orig);
	ob_event_init(&out);
	orig.topic = ob_event_put(&orig, "t", 1);
	for (int i = 0; i < OB_EVENT_MAX_HEADERS; i++) {
		snprintf(name, sizeof(name), "h%d", i);
		assert_true(ob_event_add_header(&orig, name, "v", 1));
	}
	assert_false(ob_event_add_header(&orig, "one-too-many", "v", 1));
	assert_int_equal(orig.headers_len, OB_EVENT_MAX_HEADERS);
	ob_event_view(&orig, &view);
	ob_event_build_dlq(&out, cfg->outbox.dlq_topic, "too-large", "x", 1, &view, true);
	ob_event_view(&out, &dv);
	assert_int_equal(dv.headers_len, OB_EVENT_MAX_HEADERS);
	assert_string_equal(dv.header_names[0], "error");
	assert_string_equal(dv.header_names[1], "source-lsn");
	assert_string_equal(dv.header_names[2], "payload-size");
	assert_string_equal(dv.header_names[3], "h0");
	assert_string_equal(dv.header_names[63], "h60");
	ob_event_free(&orig);
	ob_event_free(&out);
	free_config(cfg);
}

/* ob_event_begin_dlq resets whatever the event held. */
static void
test_begin_dlq_resets(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_event ev;
	const expect ex = {OB_MAP_DLQ, "bad-record",
			   NULL,       NULL,
			   NULL,       0,
			   0,          {H_ERR("could not parse"), H_LSN("16/B374D848")}};

	(void)state;
	ob_event_init(&ev);
	map_basic(cfg, &ev);
	ob_event_begin_dlq(&ev, cfg->outbox.dlq_topic, "bad-record",
			   "could not parse wal2json record", UINT64_C(0x16B374D848));
	check_event("begin_dlq", OB_MAP_DLQ, &ev, &ex);
	ob_event_free(&ev);
	free_config(cfg);
}

/* --- one event reused for many records -------------------------------------- */

typedef struct reuse_input {
	bool message;
	char *json;
} reuse_input;

static void
compare_views(size_t round, size_t i, const ob_event *a, const ob_event *b)
{
	ob_record_view x, y;

	ob_event_view(a, &x);
	ob_event_view(b, &y);
	if (x.topic_len != y.topic_len || memcmp(x.topic, y.topic, x.topic_len) != 0 ||
	    x.has_key != y.has_key || x.key_len != y.key_len ||
	    (x.has_key && memcmp(x.key, y.key, x.key_len) != 0) || x.has_value != y.has_value ||
	    x.value_len != y.value_len ||
	    (x.has_value && memcmp(x.value, y.value, x.value_len) != 0) ||
	    x.timestamp_ms != y.timestamp_ms || x.headers_len != y.headers_len ||
	    (a->dlq_reason == NULL) != (b->dlq_reason == NULL) ||
	    (a->dlq_reason != NULL && strcmp(a->dlq_reason, b->dlq_reason) != 0))
		fail_msg("round %zu, input %zu: reused event differs from a fresh one", round, i);
	for (size_t h = 0; h < x.headers_len; h++) {
		if (strcmp(x.header_names[h], y.header_names[h]) != 0 ||
		    x.header_value_lens[h] != y.header_value_lens[h] ||
		    memcmp(x.header_values[h], y.header_values[h], x.header_value_lens[h]) != 0)
			fail_msg("round %zu, input %zu: header %zu differs", round, i, h);
	}
}

static void
test_event_reuse(void **state)
{
	ob_config *cfg = make_config(NULL, 0);
	ob_mapper m;
	reuse_input inputs[10];
	ob_event fresh[10];
	size_t n = 0;
	ob_event ev;
	char *big = malloc(200001);
	size_t cap_after_first_round = 0;

	(void)state;
	/* A 100 kB bytea payload forces the buffer to grow mid-sequence. */
	for (size_t i = 0; i < 200000; i++)
		big[i] = "0123456789abcdef"[(i * 7) % 16];
	big[200000] = '\0';
	{
		const col c0[] = {{NULL}};
		const col c1[] = {STR("payload", "bytea", "00ff10"), {NULL}};
		const col c2[] = {
		    RAW("payload", "jsonb", "null"), RAW("event_type", "text", "null"), {NULL}};
		const col c3[] = {RAW("aggregate_id", "text", "null"), {NULL}};
		const col c4[] = {STR("payload", "bytea", big), {NULL}};
		const col c5[] = {STR("payload", "bytea", "nothex"), {NULL}};
		const col c6[] = {
		    STR("headers", "jsonb", "{\"k\": {\"deep\": [1, {\"x\": null}]}}"),
		    STR("aggregate_type", "text", "a-much-longer-aggregate-type-name"),
		    {NULL},
		};

		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c0)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c1)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c2)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c3)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c4)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c5)};
		inputs[n++] = (reuse_input){false, build_insert("public", "outbox", c6)};
		inputs[n++] =
		    (reuse_input){true, build_message(MSG_LSN, true, "outbox",
						      "{" MSG_ROW ",\"payload\":{\"q\":[1,2,3]},"
						      "\"headers\":{\"h\":\"v\"}}")};
		inputs[n++] = (reuse_input){true, build_message("0/99", false, "outbox", "nt")};
		inputs[n++] = (reuse_input){true, build_message(MSG_LSN, true, "outbox", "[1]")};
	}
	ob_mapper_init(&m, cfg);
	for (size_t i = 0; i < n; i++) {
		ob_w2j_record rec;

		ob_event_init(&fresh[i]);
		parse(inputs[i].json, &rec);
		if (inputs[i].message)
			ob_mapper_map_message(&m, &rec, COMMIT_MS, &fresh[i]);
		else
			ob_mapper_map_insert(&m, &rec, COMMIT_MS, &fresh[i]);
		ob_w2j_record_clear(&rec);
	}
	/* Sanity: the inputs are a mix of events and dead letters. */
	assert_null(fresh[0].dlq_reason);
	assert_string_equal(fresh[3].dlq_reason, "missing-key");
	assert_int_equal(fresh[4].value.len, 100000);
	assert_string_equal(fresh[5].dlq_reason, "bad-payload");

	ob_event_init(&ev);
	for (size_t round = 0; round < 40; round++) {
		for (size_t k = 0; k < n; k++) {
			/* Vary the order from round to round. */
			size_t i = (k * 7 + round) % n;
			ob_w2j_record rec;
			ob_map_result r;

			parse(inputs[i].json, &rec);
			if (inputs[i].message)
				r = ob_mapper_map_message(&m, &rec, COMMIT_MS, &ev);
			else
				r = ob_mapper_map_insert(&m, &rec, COMMIT_MS, &ev);
			assert_int_equal(r, fresh[i].dlq_reason ? OB_MAP_DLQ : OB_MAP_EVENT);
			ob_w2j_record_clear(&rec);
			compare_views(round, i, &ev, &fresh[i]);
		}
		/* Steady state: the buffer stops growing after one round. */
		if (round == 0)
			cap_after_first_round = ev.buf_cap;
		else
			assert_int_equal(ev.buf_cap, cap_after_first_round);
	}
	ob_event_free(&ev);
	for (size_t i = 0; i < n; i++) {
		ob_event_free(&fresh[i]);
		free(inputs[i].json);
	}
	free(big);
	ob_mapper_free(&m);
	free_config(cfg);
}

/* --- rows read with libpq (the backlog) ---------------------------------------- */

/* A row as wal2json sends it and as libpq returns it in text format: both
 * must map to the same record. */
typedef struct text_row_case {
	const char *name;
	const char *w2j; /* the I record */
	/* The same row from libpq: names, type OIDs, text values (NULL: SQL NULL). */
	const char *names[8];
	unsigned int oids[8];
	const char *values[8];
	size_t n;
	const char *overrides[2];
} text_row_case;

#define W2J_ROW(cols)                                                                              \
	"{\"action\":\"I\",\"lsn\":\"0/10\",\"schema\":\"public\",\"table\":\"outbox\","           \
	"\"columns\":[" cols "]}"

static const text_row_case text_row_cases[] = {
    {"jsonb payload and headers, timestamptz, text",
     W2J_ROW(
	 "{\"name\":\"id\",\"type\":\"uuid\",\"value\":\"6f1c\"},"
	 "{\"name\":\"aggregate_type\",\"type\":\"text\",\"value\":\"order\"},"
	 "{\"name\":\"aggregate_id\",\"type\":\"text\",\"value\":\"o-\\\"42\"},"
	 "{\"name\":\"event_type\",\"type\":\"text\",\"value\":\"paid\"},"
	 "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":\"{\\\"a\\\": 1}\"},"
	 "{\"name\":\"headers\",\"type\":\"jsonb\",\"value\":\"{\\\"t\\\": \\\"v\\\", \\\"n\\\": "
	 "2}\"},"
	 "{\"name\":\"created_at\",\"type\":\"timestamp with time "
	 "zone\",\"value\":\"2026-11-22 08:37:11.206737+05:30\"}"),
     {"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "created_at"},
     {2950, 25, 25, 25, 3802, 3802, 1184},
     {"6f1c", "order", "o-\"42", "paid", "{\"a\": 1}", "{\"t\": \"v\", \"n\": 2}",
      "2026-11-22 08:37:11.206737+05:30"},
     7,
     {NULL}},
    {"bytea payload, numbers and booleans in the topic",
     W2J_ROW("{\"name\":\"id\",\"type\":\"bigint\",\"value\":12345678901234},"
	     "{\"name\":\"aggregate_type\",\"type\":\"boolean\",\"value\":true},"
	     "{\"name\":\"aggregate_id\",\"type\":\"numeric\",\"value\":1.50},"
	     "{\"name\":\"payload\",\"type\":\"bytea\",\"value\":\"00ff41\"},"
	     "{\"name\":\"headers\",\"type\":\"jsonb\",\"value\":null},"
	     "{\"name\":\"created_at\",\"type\":\"bigint\",\"value\":1700000000000}"),
     {"id", "aggregate_type", "aggregate_id", "payload", "headers", "created_at"},
     {20, 16, 1700, 17, 3802, 20},
     {"12345678901234", "t", "1.50", "\\x00ff41", NULL, "1700000000000"},
     6,
     {"outbox.type_column="}},
    {"NaN is null, so the key is missing: dead-lettered alike",
     W2J_ROW("{\"name\":\"id\",\"type\":\"integer\",\"value\":1},"
	     "{\"name\":\"aggregate_type\",\"type\":\"text\",\"value\":\"x\"},"
	     "{\"name\":\"aggregate_id\",\"type\":\"double precision\",\"value\":null},"
	     "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":\"[1]\"}"),
     {"id", "aggregate_type", "aggregate_id", "payload"},
     {23, 25, 701, 3802},
     {"1", "x", "NaN", "[1]"},
     4,
     {"outbox.type_column="}},
    {"headers not an object: dead-lettered alike",
     W2J_ROW("{\"name\":\"id\",\"type\":\"integer\",\"value\":2},"
	     "{\"name\":\"aggregate_type\",\"type\":\"text\",\"value\":\"x\"},"
	     "{\"name\":\"aggregate_id\",\"type\":\"text\",\"value\":\"k\"},"
	     "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":\"[1]\"},"
	     "{\"name\":\"headers\",\"type\":\"jsonb\",\"value\":\"[1, 2]\"}"),
     {"id", "aggregate_type", "aggregate_id", "payload", "headers"},
     {23, 25, 25, 3802, 3802},
     {"2", "x", "k", "[1]", "[1, 2]"},
     5,
     {"outbox.type_column="}},
};

static void
test_text_row_maps_like_wal2json(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(text_row_cases); i++) {
		const text_row_case *c = &text_row_cases[i];
		ob_config *cfg = make_config(c->overrides, OB_ARRAY_LEN(c->overrides));
		ob_text_kind kinds[8];
		size_t lengths[8];
		ob_text_row row = {c->names, kinds, c->values, lengths, c->n};
		ob_mapper m;
		ob_w2j_record rec;
		ob_event a, b;
		ob_map_result ra, rb;

		print_message("text row: %s\n", c->name);
		for (size_t j = 0; j < c->n; j++) {
			kinds[j] = ob_text_kind_for_type(c->oids[j]);
			lengths[j] = c->values[j] != NULL ? strlen(c->values[j]) : 0;
		}
		ob_mapper_init(&m, cfg);
		ob_event_init(&a);
		ob_event_init(&b);
		parse(c->w2j, &rec);
		ra = ob_mapper_map_insert(&m, &rec, 99, &a);
		rb = ob_mapper_map_text_row(&m, &row, rec.lsn, 99, &b);
		assert_int_equal(ra, rb);
		compare_views(0, i, &a, &b);
		ob_event_free(&a);
		ob_event_free(&b);
		ob_mapper_free(&m);
		free_config(cfg);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rows_table),
	    cmocka_unit_test(test_verbatim_record),
	    cmocka_unit_test(test_header_limit),
	    cmocka_unit_test(test_messages_table),
	    cmocka_unit_test(test_message_member_limit),
	    cmocka_unit_test(test_message_maps_like_row),
	    cmocka_unit_test(test_wrong_record_kind_skipped),
	    cmocka_unit_test(test_build_dlq),
	    cmocka_unit_test(test_build_dlq_header_overflow),
	    cmocka_unit_test(test_begin_dlq_resets),
	    cmocka_unit_test(test_event_reuse),
	    cmocka_unit_test(test_header_decimal_keeps_text),
	    cmocka_unit_test(test_header_big_integer_keeps_text),
	    cmocka_unit_test(test_message_decimal_keeps_text),
	    cmocka_unit_test(test_text_row_maps_like_wal2json),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
