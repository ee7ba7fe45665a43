/*
 * test_wal2json.c: the wal2json format-version 2 record parser and the
 * Postgres timestamp parser (wal2json.h).
 *
 * The records are byte for byte what wal2json 2.5 sends with include-lsn,
 * include-timestamp, include-xids and include-types. Expected epoch values
 * were computed with `TZ=UTC date -d '...' +%s%3N`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/wal2json.h"

#include "records.h"

/* 2026-11-22 03:07:11.206737+00, the commit time of xid 725. */
#define TS_725 INT64_C(1795316831206)

static const char rec_begin[] =
    "{\"action\":\"B\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
    "\"lsn\":\"0/152D630\",\"nextlsn\":\"0/152D660\"}";

static const char rec_message[] =
    "{\"action\":\"M\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
    "\"lsn\":\"0/152D5F0\",\"transactional\":true,\"prefix\":\"outbox\","
    "\"content\":\"{\\\"id\\\":\\\"m1\\\"}\"}";

static const char rec_message_nontx[] =
    "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/152D630\","
    "\"transactional\":false,\"prefix\":\"outbox\",\"content\":\"nt\"}";

static const char rec_commit[] =
    "{\"action\":\"C\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
    "\"lsn\":\"0/152D630\",\"nextlsn\":\"0/152D660\"}";

static const char rec_update[] =
    "{\"action\":\"U\",\"xid\":726,\"timestamp\":\"2026-11-22 03:07:12.000001+00\","
    "\"lsn\":\"0/152D700\",\"schema\":\"public\",\"table\":\"outbox\",\"columns\":["
    "{\"name\":\"id\",\"type\":\"uuid\",\"value\":\"38a18a3a-8de4-4a2c-8a64-91f9bf2d053a\"},"
    "{\"name\":\"aggregate_id\",\"type\":\"text\",\"value\":\"o-2\"}],"
    "\"identity\":[{\"name\":\"id\",\"type\":\"uuid\","
    "\"value\":\"38a18a3a-8de4-4a2c-8a64-91f9bf2d053a\"}]}";

static const char rec_delete[] =
    "{\"action\":\"D\",\"xid\":726,\"timestamp\":\"2026-11-22 03:07:12.000001+00\","
    "\"lsn\":\"0/152D780\",\"schema\":\"public\",\"table\":\"outbox\","
    "\"identity\":[{\"name\":\"id\",\"type\":\"uuid\","
    "\"value\":\"38a18a3a-8de4-4a2c-8a64-91f9bf2d053a\"}]}";

static const char rec_truncate[] =
    "{\"action\":\"T\",\"xid\":727,\"timestamp\":\"2026-11-22 03:07:13.5+00\","
    "\"lsn\":\"0/152D800\",\"schema\":\"public\",\"table\":\"outbox\"}";

/* An insert with the other value shapes wal2json produces: bytea as bare
 * hex, a bigint as a JSON number, SQL NULL, and a column without "type"
 * or "value" keys. */
static const char rec_insert_shapes[] =
    "{\"action\":\"I\",\"xid\":730,\"timestamp\":\"2026-11-22 03:07:14+00\","
    "\"lsn\":\"1/10\",\"schema\":\"app\",\"table\":\"events\",\"columns\":["
    "{\"name\":\"blob\",\"type\":\"bytea\",\"value\":\"deadbeef\"},"
    "{\"name\":\"ms\",\"type\":\"bigint\",\"value\":1795316831999},"
    "{\"name\":\"nothing\",\"type\":\"text\",\"value\":null},"
    "{\"name\":\"untyped\",\"value\":\"u\"},"
    "{\"name\":\"novalue\",\"type\":\"text\"}]}";

/* What a successfully parsed record must contain. */
typedef struct record_case {
	const char *name;
	const char *json;
	ob_w2j_action action;
	ob_lsn lsn;
	ob_lsn nextlsn;
	bool has_timestamp;
	int64_t timestamp_ms;
	const char *schema; /* I and D only */
	const char *table;  /* I and D only */
	size_t n_columns;   /* I and D only */
	bool transactional; /* M only */
	const char *prefix; /* M only */
	const char *content;
} record_case;

static const record_case record_cases[] = {
    {"begin", rec_begin, OB_W2J_BEGIN, 0x152D630, 0x152D660, true, TS_725},
    {"insert", rec_insert, OB_W2J_INSERT, 0x152D3E0, 0, true, TS_725, "public", "outbox", 7},
    {"message", rec_message, OB_W2J_MESSAGE, 0x152D5F0, 0, true, TS_725, .transactional = true,
     .prefix = "outbox", .content = "{\"id\":\"m1\"}"},
    {"message-nontx", rec_message_nontx, OB_W2J_MESSAGE, 0x152D630, 0, false, 0,
     .transactional = false, .prefix = "outbox", .content = "nt"},
    {"commit", rec_commit, OB_W2J_COMMIT, 0x152D630, 0x152D660, true, TS_725},
    {"update", rec_update, OB_W2J_OTHER, 0x152D700, 0, true, INT64_C(1795316832000)},
    {"delete", rec_delete, OB_W2J_DELETE, 0x152D780, 0, true, INT64_C(1795316832000), "public",
     "outbox", 1},
    /* A delete that names no row is passed over, not refused. */
    {"delete-without-identity",
     "{\"action\":\"D\",\"lsn\":\"0/7\",\"schema\":\"public\",\"table\":\"outbox\"}", OB_W2J_OTHER,
     7, 0},
    {"truncate", rec_truncate, OB_W2J_OTHER, 0x152D800, 0, true, INT64_C(1795316833500)},
    {"insert-shapes", rec_insert_shapes, OB_W2J_INSERT, UINT64_C(0x100000010), 0, true,
     INT64_C(1795316834000), "app", "events", 5},
    /* Actions outboxd does not know are ignored, not errors. */
    {"action-multi-letter", "{\"action\":\"BB\",\"lsn\":\"0/1\"}", OB_W2J_OTHER, 1, 0},
    {"action-empty", "{\"action\":\"\"}", OB_W2J_OTHER, 0, 0},
    {"action-lowercase", "{\"action\":\"i\",\"lsn\":\"0/2\"}", OB_W2J_OTHER, 2, 0},
    /* A timestamp that does not parse is left out, not an error. */
    {"begin-bad-timestamp",
     "{\"action\":\"B\",\"timestamp\":\"yesterday\",\"lsn\":\"0/5\",\"nextlsn\":\"0/6\"}",
     OB_W2J_BEGIN, 5, 6, false, 0},
};

static void
check_record(const record_case *c, const ob_w2j_record *rec)
{
	assert_int_equal(rec->action, c->action);
	assert_int_equal(rec->lsn, c->lsn);
	assert_int_equal(rec->nextlsn, c->nextlsn);
	assert_int_equal(rec->has_timestamp, c->has_timestamp);
	if (c->has_timestamp) {
		assert_int_equal(rec->timestamp_ms, c->timestamp_ms);
		assert_int_equal(rec->timestamp_us / 1000, c->timestamp_ms);
	}
	if (c->action == OB_W2J_INSERT || c->action == OB_W2J_DELETE) {
		assert_string_equal(rec->schema, c->schema);
		assert_string_equal(rec->table, c->table);
		assert_int_equal(rec->columns_len, c->n_columns);
	}
	if (c->action == OB_W2J_MESSAGE) {
		assert_int_equal(rec->transactional, c->transactional);
		assert_string_equal(rec->prefix, c->prefix);
		char decoded[256];
		long n = ob_json_unescape(rec->content, rec->content_len, decoded);

		/* The content is left as sent: escaped inside its JSON string. */
		assert_int_equal(rec->content_escaped, strchr(c->content, '"') != NULL);
		assert_int_equal(n, (long)strlen(c->content));
		assert_memory_equal(decoded, c->content, (size_t)n);
	}
}

static void
test_records_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(record_cases); i++) {
		const record_case *c = &record_cases[i];
		ob_w2j_record rec;
		char err[256] = "";

		print_message("record %s\n", c->name);
		if (!ob_w2j_parse(c->json, strlen(c->json), &rec, err, sizeof(err)))
			fail_msg("record %s refused: %s", c->name, err);
		check_record(c, &rec);
		ob_w2j_record_clear(&rec);
		assert_int_equal(rec.columns_len, 0);
		/* Clearing twice is safe. */
		ob_w2j_record_clear(&rec);
	}
}

/* Records that must be refused, with the record cleared and a reason. */
typedef struct bad_case {
	const char *name;
	const char *json;
} bad_case;

static const bad_case bad_cases[] = {
    {"empty", ""},
    {"not-json", "not json"},
    {"truncated", "{\"action\":\"B\",\"lsn\":\"0/1\""},
    {"trailing-garbage", "{\"action\":\"B\",\"nextlsn\":\"0/1\"} x"},
    {"array", "[\"action\",\"B\"]"},
    {"string", "\"B\""},
    {"missing-action", "{\"xid\":725,\"lsn\":\"0/152D630\",\"nextlsn\":\"0/152D660\"}"},
    {"action-number", "{\"action\":1,\"nextlsn\":\"0/1\"}"},
    {"action-null", "{\"action\":null,\"nextlsn\":\"0/1\"}"},
    {"duplicate-key", "{\"action\":\"B\",\"action\":\"C\",\"nextlsn\":\"0/1\"}"},
    /* The commit start places the transaction (position.h). */
    {"begin-no-lsn", "{\"action\":\"B\",\"nextlsn\":\"0/6\"}"},
    {"begin-lsn-null", "{\"action\":\"B\",\"lsn\":null,\"nextlsn\":\"0/6\"}"},
    {"begin-without-nextlsn",
     "{\"action\":\"B\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
     "\"lsn\":\"0/152D630\"}"},
    {"commit-without-nextlsn",
     "{\"action\":\"C\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
     "\"lsn\":\"0/152D630\"}"},
    {"begin-nextlsn-null", "{\"action\":\"B\",\"lsn\":\"0/1\",\"nextlsn\":null}"},
    {"begin-nextlsn-zero", "{\"action\":\"B\",\"lsn\":\"0/1\",\"nextlsn\":\"0/0\"}"},
    {"bad-lsn", "{\"action\":\"I\",\"lsn\":\"xyz\",\"table\":\"t\",\"columns\":[]}"},
    {"lsn-number", "{\"action\":\"M\",\"lsn\":5,\"prefix\":\"p\",\"content\":\"c\"}"},
    {"bad-nextlsn", "{\"action\":\"C\",\"lsn\":\"0/1\",\"nextlsn\":\"0/1x\"}"},
    {"insert-without-columns", "{\"action\":\"I\",\"lsn\":\"0/1\",\"schema\":\"public\","
			       "\"table\":\"outbox\"}"},
    {"insert-columns-object", "{\"action\":\"I\",\"lsn\":\"0/1\",\"schema\":\"public\","
			      "\"table\":\"outbox\",\"columns\":{}}"},
    {"insert-without-table", "{\"action\":\"I\",\"lsn\":\"0/1\",\"schema\":\"public\","
			     "\"columns\":[]}"},
    {"message-without-prefix", "{\"action\":\"M\",\"lsn\":\"0/1\",\"transactional\":true,"
			       "\"content\":\"x\"}"},
    {"message-without-content", "{\"action\":\"M\",\"lsn\":\"0/1\",\"transactional\":true,"
				"\"prefix\":\"outbox\"}"},
    {"message-content-object", "{\"action\":\"M\",\"lsn\":\"0/1\",\"transactional\":true,"
			       "\"prefix\":\"outbox\",\"content\":{\"id\":1}}"},
};

static void
test_bad_records_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(bad_cases); i++) {
		const bad_case *c = &bad_cases[i];
		ob_w2j_record rec;
		char err[256] = "";

		memset(&rec, 0x5a, sizeof(rec));
		if (ob_w2j_parse(c->json, strlen(c->json), &rec, err, sizeof(err)))
			fail_msg("bad record %s was accepted", c->name);
		if (err[0] == '\0')
			fail_msg("bad record %s: no error text", c->name);
		ob_w2j_record_clear(&rec);
	}
}

/* The commit time is kept to the microsecond, for publish latency. */
static void
test_record_timestamp_us(void **state)
{
	static const struct {
		const char *json;
		int64_t us;
	} cases[] = {
	    {rec_begin, INT64_C(1795316831206737)},
	    {rec_commit, INT64_C(1795316831206737)},
	    {rec_update, INT64_C(1795316832000001)},
	    {rec_truncate, INT64_C(1795316833500000)},
	};

	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(cases); i++) {
		ob_w2j_record rec;
		char err[256];

		assert_true(
		    ob_w2j_parse(cases[i].json, strlen(cases[i].json), &rec, err, sizeof(err)));
		assert_true(rec.has_timestamp);
		assert_int_equal(rec.timestamp_us, cases[i].us);
		ob_w2j_record_clear(&rec);
	}
}

/* The parser reads len bytes, not up to a NUL: XLogData is not terminated. */
static void
test_parse_uses_len(void **state)
{
	char buf[sizeof(rec_commit) + 32];
	ob_w2j_record rec;
	char err[256];
	size_t len = strlen(rec_commit);

	(void)state;
	memcpy(buf, rec_commit, len);
	memcpy(buf + len, "{\"action\":\"B\"}", 15);
	assert_true(ob_w2j_parse(buf, len, &rec, err, sizeof(err)));
	assert_int_equal(rec.action, OB_W2J_COMMIT);
	assert_int_equal(rec.nextlsn, 0x152D660);
	ob_w2j_record_clear(&rec);
	/* Cut short, the same bytes are malformed. */
	assert_false(ob_w2j_parse(buf, len - 1, &rec, err, sizeof(err)));
}

/* Column lookup in an I record. */
typedef enum value_kind { JSON_STRING, JSON_INTEGER, JSON_NULL } value_kind;

typedef struct column_case {
	const char *record;
	const char *name;
	bool found;
	const char *type;   /* expected type, NULL when not sent */
	value_kind kind;    /* expected kind of the value */
	const char *string; /* for strings: the exact (unescaped) text */
	int64_t integer;    /* for integers */
} column_case;

static const column_case column_cases[] = {
    {rec_insert, "id", true, "uuid", JSON_STRING, "38a18a3a-8de4-4a2c-8a64-91f9bf2d053a"},
    {rec_insert, "aggregate_type", true, "text", JSON_STRING, "order"},
    {rec_insert, "aggregate_id", true, "text", JSON_STRING, "o-1"},
    {rec_insert, "event_type", true, "text", JSON_STRING, "created"},
    /* jsonb arrives as a JSON string holding the JSON text, unescaped once. */
    {rec_insert, "payload", true, "jsonb", JSON_STRING, "{\"a\": \"x\\\"y\", \"b\": [1, 2.50]}"},
    {rec_insert, "headers", true, "jsonb", JSON_STRING, "{\"n\": 5, \"tr\": \"abc\"}"},
    {rec_insert, "created_at", true, "timestamp with time zone", JSON_STRING,
     "2026-11-22 03:07:11.205762+00"},
    {rec_insert, "missing", false},
    {rec_insert, "ID", false},
    {rec_insert, "", false},
    {rec_insert_shapes, "blob", true, "bytea", JSON_STRING, "deadbeef"},
    {rec_insert_shapes, "ms", true, "bigint", JSON_INTEGER, NULL, INT64_C(1795316831999)},
    {rec_insert_shapes, "nothing", true, "text", JSON_NULL},
    {rec_insert_shapes, "untyped", true, NULL, JSON_STRING, "u"},
    {rec_insert_shapes, "novalue", true, "text", JSON_NULL},
};

static void
test_column_lookup_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(column_cases); i++) {
		const column_case *c = &column_cases[i];
		ob_w2j_record rec;
		char err[256];
		const char *type = "unset";
		size_t type_len = 99;
		const ob_w2j_column *col;

		print_message("column %s\n", c->name);
		assert_true(ob_w2j_parse(c->record, strlen(c->record), &rec, err, sizeof(err)));
		col = ob_w2j_column_find(&rec, c->name, &type, &type_len);
		assert_int_equal(col != NULL, c->found);
		if (col != NULL) {
			if (c->type == NULL) {
				assert_int_equal(type_len, 0);
			} else {
				assert_int_equal(type_len, strlen(c->type));
				assert_memory_equal(type, c->type, type_len);
			}
			assert_int_equal(ob_json_member_is_null(col), c->kind == JSON_NULL);
			assert_int_equal(col->value_is_string, c->kind == JSON_STRING);
			if (c->kind == JSON_STRING) {
				char decoded[256];
				long n = ob_json_unescape(col->value, col->value_len, decoded);

				assert_int_equal(n, (long)strlen(c->string));
				assert_memory_equal(decoded, c->string, (size_t)n);
			}
			if (c->kind == JSON_INTEGER) {
				char text[32];

				/* Numbers keep the exact text wal2json sent. */
				snprintf(text, sizeof(text), "%lld", (long long)c->integer);
				assert_int_equal(col->value_len, strlen(text));
				assert_memory_equal(col->value, text, col->value_len);
			}
		}
		ob_w2j_record_clear(&rec);
	}
}

typedef struct ts_case {
	const char *text;
	bool ok;
	int64_t ms;
} ts_case;

static const ts_case ts_cases[] = {
    {"2026-11-22 03:07:11.206737+00", true, INT64_C(1795316831206)},
    {"2026-11-22 03:07:11.205762+00", true, INT64_C(1795316831205)},
    {"2026-11-22 03:07:11.206737+05:30", true, INT64_C(1795297031206)},
    {"2026-11-22 03:07:11.206737-08", true, INT64_C(1795345631206)},
    {"2026-11-22 03:07:11.999999-00:30", true, INT64_C(1795318631999)},
    /* Postgres prints seconds in offsets of historical zones. */
    {"2026-11-22 03:07:11+05:30:15", true, INT64_C(1795297016000)},
    /* No offset: UTC (timestamp without time zone). */
    {"2026-11-22 03:07:11.206737", true, INT64_C(1795316831206)},
    {"2026-11-22T03:07:11.206737+00", true, INT64_C(1795316831206)},
    {"2026-11-22T03:07:11.206737Z", true, INT64_C(1795316831206)},
    {"2026-11-22 03:07:11+00", true, INT64_C(1795316831000)},
    {"2026-11-22 03:07:11.1+00", true, INT64_C(1795316831100)},
    /* More than microseconds: the extra digits are dropped. */
    {"2026-11-22 03:07:11.2067379+00", true, INT64_C(1795316831206)},
    {"1970-01-01 00:00:00+00", true, 0},
    {"1970-01-01 01:00:00+01", true, 0},
    {"1969-12-31 23:59:59.5+00", true, -500},
    /* Before 1970, milliseconds round down like after it. */
    {"1969-12-31 23:59:59.9995+00", true, -1},
    {"1969-12-31 23:59:59.999999+00", true, -1},
    {"2000-02-29 12:00:00+00", true, INT64_C(951825600000)},
    {"2024-12-31 23:59:59.999+00", true, INT64_C(1735689599999)},
    {"", false, 0},
    {"2026", false, 0},
    {"2026-11-22", false, 0},
    {"2026-11-22 03:07", false, 0},
    {"2026-11-22 03:07:1", false, 0},
    {"2026/11/22 03:07:11", false, 0},
    {"26-11-22 03:07:11", false, 0},
    {"2026-11-22  03:07:11", false, 0},
    {"2026-11-22_03:07:11", false, 0},
    {"2026-13-01 00:00:00", false, 0},
    {"2026-00-01 00:00:00", false, 0},
    {"2026-11-32 00:00:00", false, 0},
    {"2026-11-00 00:00:00", false, 0},
    {"2026-11-22 25:00:00", false, 0},
    {"2026-11-22 03:60:00", false, 0},
    {"2026-11-22 03:07:61", false, 0},
    {"2026-11-22 03:07:11.+00", false, 0},
    {"2026-11-22 03:07:11+5", false, 0},
    {"2026-11-22 03:07:11+05:3", false, 0},
    {"2026-11-22 03:07:11 +00", false, 0},
    {"2026-11-22 03:07:11+00x", false, 0},
    {"2026-11-22 03:07:11.206737+00 BC", false, 0},
    {"infinity", false, 0},
    {"-infinity", false, 0},
};

static void
test_timestamp_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(ts_cases); i++) {
		const ts_case *c = &ts_cases[i];
		int64_t ms = INT64_C(-123456789);
		bool ok = ob_pg_timestamp_to_ms(c->text, &ms);

		if (ok != c->ok)
			fail_msg("\"%s\": %s, expected %s", c->text, ok ? "accepted" : "refused",
				 c->ok ? "accepted" : "refused");
		if (ok && ms != c->ms)
			fail_msg("\"%s\": %lld ms, expected %lld", c->text, (long long)ms,
				 (long long)c->ms);
	}
}

typedef struct us_case {
	const char *text;
	int64_t us;
} us_case;

static const us_case us_cases[] = {
    {"2026-11-22 03:07:11.206737+00", INT64_C(1795316831206737)},
    {"2026-11-22 03:07:11.206737+05:30", INT64_C(1795297031206737)},
    {"2026-11-22 03:07:11.206737-08", INT64_C(1795345631206737)},
    {"2026-11-22T03:07:11.5Z", INT64_C(1795316831500000)},
    {"2026-11-22 03:07:11", INT64_C(1795316831000000)},
    {"1970-01-01 00:00:00.000001+00", 1},
    {"1969-12-31 23:59:59.999999+00", -1},
    {"1969-12-31 23:59:59.5+00", -500000},
};

static void
test_timestamp_us_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < OB_ARRAY_LEN(us_cases); i++) {
		int64_t us = 0;

		if (!ob_pg_timestamp_to_us(us_cases[i].text, &us) || us != us_cases[i].us)
			fail_msg("\"%s\": %lld us, expected %lld", us_cases[i].text, (long long)us,
				 (long long)us_cases[i].us);
	}
	/* The microsecond parser refuses what the millisecond one refuses. */
	for (size_t i = 0; i < OB_ARRAY_LEN(ts_cases); i++) {
		int64_t us;

		if (ob_pg_timestamp_to_us(ts_cases[i].text, &us) != ts_cases[i].ok)
			fail_msg("\"%s\": us parser disagrees", ts_cases[i].text);
	}
}

/* The parser keeps its last two texts: three texts asked for in turn,
 * again and again, and texts that differ from a kept one in their last
 * byte or in being a prefix of it, still get their own values. */
static void
test_timestamp_memo(void **state)
{
	static const us_case turn[] = {
	    {"2026-11-22 03:07:11.206737+00", INT64_C(1795316831206737)},
	    {"2026-11-22 03:07:11.206738+00", INT64_C(1795316831206738)},
	    {"2026-11-22 03:07:11.206737", INT64_C(1795316831206737)},
	    {"2026-11-22 03:07:11.206737+01", INT64_C(1795313231206737)},
	};

	(void)state;
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < OB_ARRAY_LEN(turn); i++) {
			int64_t us = 0;

			if (!ob_pg_timestamp_to_us(turn[i].text, &us) || us != turn[i].us)
				fail_msg("round %d, \"%s\": %lld us, expected %lld", round,
					 turn[i].text, (long long)us, (long long)turn[i].us);
			/* A refused text is refused however often it comes. */
			assert_false(ob_pg_timestamp_to_us("2026-11-22 03:07:11.+00", &us));
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_records_table),       cmocka_unit_test(test_bad_records_table),
	    cmocka_unit_test(test_record_timestamp_us), cmocka_unit_test(test_parse_uses_len),
	    cmocka_unit_test(test_column_lookup_table), cmocka_unit_test(test_timestamp_table),
	    cmocka_unit_test(test_timestamp_us_table),  cmocka_unit_test(test_timestamp_memo),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
