/*
 * test_cloudevents.c: the pure parts of CloudEvents publishing
 * (cloudevents.h; UTF-8 and JSON are test_inboxrow's) and the mapper's CloudEvents records
 * (outbox.h, sql/README.md, "CloudEvents"): RFC 3339 times, the traceparent check, the reserved
 * header names, the envelope, and whole records mapped from rows read in text format in both
 * content modes, including the bad events.
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

#include "outboxd/cloudevents.h"
#include "outboxd/config.h"
#include "outboxd/inboxrow.h"
#include "outboxd/outbox.h"

static void
test_format_time(void **state)
{
	static const struct {
		int64_t ms;
		const char *text;
	} cases[] = {
	    {0, "1970-01-01T00:00:00.000Z"},
	    {INT64_C(1795316831205), "2026-11-22T03:07:11.205Z"},
	    {INT64_C(951782400000), "2000-02-29T00:00:00.000Z"},
	    {INT64_C(1709251199999), "2024-02-29T23:59:59.999Z"},
	    {-1, "1969-12-31T23:59:59.999Z"},
	    {INT64_C(-62135596800000), "0001-01-01T00:00:00.000Z"},
	    {INT64_C(253402300799999), "9999-12-31T23:59:59.999Z"},
	};
	char buf[OB_CE_TIME_BUFLEN];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_true(ob_ce_format_time(cases[i].ms, buf));
		assert_string_equal(buf, cases[i].text);
	}
	assert_false(ob_ce_format_time(INT64_C(253402300800000), buf));
	assert_string_equal(buf, "");
	assert_false(ob_ce_format_time(INT64_C(-62167219200001), buf));
	assert_false(ob_ce_format_time(INT64_MIN, buf));
	assert_false(ob_ce_format_time(INT64_MAX, buf));
}

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void
test_traceparent(void **state)
{
	static const char *const good[] = {
	    TP,
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds",
	};
	static const char *const bad[] = {
	    "",
	    "garbage",
	    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* upper case */
	    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* zero trace id */
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* zero parent id */
	    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* 00 is 55 long */
	    "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  /* dash misplaced */
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
	    "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(ob_ce_traceparent_valid(good[i], strlen(good[i])));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(ob_ce_traceparent_valid(bad[i], strlen(bad[i])));
}

static void
test_reserved_headers(void **state)
{
	static const char *const reserved[] = {"ce_id",     "ce_",          "CE_Type",
					       "ce_custom", "content-type", "Content-Type"};
	static const char *const free_names[] = {"id", "type",   "traceparent", "tracestate",
						 "ce", "cex_id", "content",     "content-types"};

	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		assert_true(ob_ce_header_reserved(reserved[i], strlen(reserved[i])));
	for (size_t i = 0; i < sizeof(free_names) / sizeof(free_names[0]); i++)
		assert_false(ob_ce_header_reserved(free_names[i], strlen(free_names[i])));
}

/* Build the envelope of the given attributes and compare it with the JSON
 * text expected, byte for byte, then check that it parses. */
static void
check_envelope(const char *data, size_t data_len, bool has_data, bool is_json, const char *expected)
{
	ob_event ev;
	ob_ce_envelope e = {0};
	ob_span value;
	json_error_t err;
	json_t *j;

	ob_event_init(&ev);
	e.id = ob_event_put(&ev, "id-1", 4);
	e.type = ob_event_put(&ev, "order.\"paid\"", 12);
	e.source = ob_event_put(&ev, "/orders", 7);
	e.time = ob_event_put(&ev, "2026-11-22T03:07:11.205Z", 24);
	e.has_subject = true;
	e.subject = ob_event_put(&ev, "o-\n42", 5);
	e.has_traceparent = true;
	e.traceparent = ob_event_put(&ev, TP, strlen(TP));
	e.has_data = has_data;
	e.data_is_json = is_json;
	e.data = ob_event_put(&ev, data, data_len);
	value = ob_ce_put_envelope(&ev, &e);
	assert_int_equal(value.len, strlen(expected));
	assert_memory_equal(ob_event_ptr(&ev, value), expected, value.len);
	j = json_loadb(ob_event_ptr(&ev, value), value.len, 0, &err);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "type")), "order.\"paid\"");
	assert_string_equal(json_string_value(json_object_get(j, "subject")), "o-\n42");
	json_decref(j);
	ob_event_free(&ev);
}

#define ENVELOPE_HEAD                                                                              \
	"{\"specversion\":\"1.0\",\"id\":\"id-1\",\"source\":\"/orders\",\"type\":"                \
	"\"order.\\\"paid\\\"\",\"subject\":\"o-\\u000a42\",\"time\":\"2026-11-22T03:07:11."       \
	"205Z\","                                                                                  \
	"\"traceparent\":\"" TP "\""

static void
test_envelope(void **state)
{
	check_envelope("{\"amount\": 99.5}", 16, true, true,
		       ENVELOPE_HEAD
		       ",\"datacontenttype\":\"application/json\",\"data\":{\"amount\": 99.5}}");
	check_envelope("\x01\xff", 2, true, false, ENVELOPE_HEAD ",\"data_base64\":\"Af8=\"}");
	check_envelope("abc", 3, true, false, ENVELOPE_HEAD ",\"data_base64\":\"YWJj\"}");
	check_envelope("abcd", 4, true, false, ENVELOPE_HEAD ",\"data_base64\":\"YWJjZA==\"}");
	check_envelope("", 0, true, false, ENVELOPE_HEAD ",\"data_base64\":\"\"}");
	check_envelope("", 0, false, false, ENVELOPE_HEAD "}");
}

/* --- whole records, mapped from a row in text format --------------------- */

#define ID    "38a18a3a-8de4-4a2c-8a64-91f9bf2d053a"
#define CE_MS INT64_C(1795316831205)

static const char *const row_names[] = {"id",      "aggregate_type", "aggregate_id", "event_type",
					"payload", "headers",        "created_at"};
static const ob_text_kind row_kinds[] = {OB_TEXT_PLAIN, OB_TEXT_PLAIN, OB_TEXT_PLAIN, OB_TEXT_PLAIN,
					 OB_TEXT_PLAIN, OB_TEXT_PLAIN, OB_TEXT_PLAIN};

/* Map a row of the default outbox table (aggregate_id, payload, headers
 * as given; NULL for SQL NULL) with cloudevents set to mode and the
 * overrides given. */
static ob_map_result
map_row_of(const char *aggregate_id, const char *mode, const char *payload, const char *headers,
	   const char *extra, ob_config *cfg, ob_mapper *m, ob_event *ev)
{
	const char *values[] = {ID,
				"order",
				aggregate_id,
				"order.paid",
				payload,
				headers,
				"2026-11-22 03:07:11.205762+00"};
	size_t lengths[7];
	ob_text_row row = {row_names, row_kinds, values, lengths, 7};
	char setting[64];

	for (size_t i = 0; i < 7; i++)
		lengths[i] = values[i] != NULL ? strlen(values[i]) : 0;
	ob_config_init(cfg);
	snprintf(setting, sizeof(setting), "outbox.cloudevents=%s", mode);
	assert_true(ob_config_set_override(cfg, setting));
	assert_true(
	    ob_config_set_override(cfg, "outbox.cloudevents_source=/shop/{aggregate_type}"));
	if (extra != NULL)
		assert_true(ob_config_set_override(cfg, extra));
	assert_true(ob_config_finish(cfg));
	ob_mapper_init(m, cfg);
	ob_event_init(ev);
	return ob_mapper_map_text_row(m, &row, 0x152D3E0, 1, ev);
}

static ob_map_result
map_row(const char *mode, const char *payload, const char *headers, const char *extra,
	ob_config *cfg, ob_mapper *m, ob_event *ev)
{
	return map_row_of("o-42", mode, payload, headers, extra, cfg, m, ev);
}

static void
done(ob_config *cfg, ob_mapper *m, ob_event *ev)
{
	ob_event_free(ev);
	ob_mapper_free(m);
	ob_config_free(cfg);
}

/* Check the headers of ev against a list of name, value pairs. */
static void
check_headers(const ob_event *ev, const char *const *pairs, size_t n)
{
	ob_record_view v;

	ob_event_view(ev, &v);
	assert_int_equal(v.headers_len, n);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(v.header_names[i], pairs[2 * i]);
		assert_int_equal(v.header_value_lens[i], strlen(pairs[2 * i + 1]));
		assert_memory_equal(v.header_values[i], pairs[2 * i + 1], v.header_value_lens[i]);
	}
}

static void
test_binary_record(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;
	static const char *const want[] = {
	    "ce_specversion", "1.0",
	    "ce_id",          ID,
	    "ce_type",        "order.paid",
	    "ce_source",      "/shop/order",
	    "ce_subject",     "o-42",
	    "ce_time",        "2026-11-22T03:07:11.205Z",
	    "content-type",   "application/json",
	    "traceparent",    TP,
	    "tracestate",     "k=v",
	    "x-user",         "1",
	};

	assert_int_equal(map_row("binary", "{\"amount\": 99.5}",
				 "{\"traceparent\": \"" TP "\", \"tracestate\": \"k=v\", "
				 "\"x-user\": 1}",
				 NULL, &cfg, &m, &ev),
			 OB_MAP_EVENT);
	check_headers(&ev, want, 10);
	assert_memory_equal(ob_event_ptr(&ev, ev.value), "{\"amount\": 99.5}", ev.value.len);
	assert_memory_equal(ob_event_ptr(&ev, ev.key), "o-42", 4);
	assert_int_equal(ev.timestamp_ms, CE_MS);
	done(&cfg, &m, &ev);
}

static void
test_binary_text_payload_has_no_content_type(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;
	static const char *const want[] = {
	    "ce_specversion", "1.0",        "ce_id",     ID,
	    "ce_type",        "order.paid", "ce_source", "/shop/order",
	    "ce_subject",     "o-42",       "ce_time",   "2026-11-22T03:07:11.205Z",
	};

	assert_int_equal(map_row("binary", "plain words", NULL, NULL, &cfg, &m, &ev), OB_MAP_EVENT);
	check_headers(&ev, want, 6);
	done(&cfg, &m, &ev);
}

static void
test_structured_record(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;
	static const char *const want[] = {
	    "content-type", "application/cloudevents+json", "traceparent", TP, "tracestate", "k=v"};
	static const char envelope[] =
	    "{\"specversion\":\"1.0\",\"id\":\"" ID "\",\"source\":\"/shop/order\",\"type\":"
	    "\"order.paid\",\"subject\":\"o-42\",\"time\":\"2026-11-22T03:07:11.205Z\","
	    "\"traceparent\":\"" TP "\",\"tracestate\":\"k=v\",\"datacontenttype\":"
	    "\"application/json\",\"data\":{\"amount\": 99.5}}";

	assert_int_equal(map_row("structured", "{\"amount\": 99.5}",
				 "{\"traceparent\": \"" TP "\", \"tracestate\": \"k=v\"}", NULL,
				 &cfg, &m, &ev),
			 OB_MAP_EVENT);
	check_headers(&ev, want, 3);
	assert_int_equal(ev.value.len, strlen(envelope));
	assert_memory_equal(ob_event_ptr(&ev, ev.value), envelope, ev.value.len);
	assert_memory_equal(ob_event_ptr(&ev, ev.key), "o-42", 4);
	done(&cfg, &m, &ev);
}

static void
test_malformed_traceparent_passes_through(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;
	static const char *const want[] = {"content-type", "application/cloudevents+json",
					   "traceparent",  "not-a-trace",
					   "tracestate",   "k=v"};
	static const char envelope[] =
	    "{\"specversion\":\"1.0\",\"id\":\"" ID "\",\"source\":\"/shop/order\",\"type\":"
	    "\"order.paid\",\"subject\":\"o-42\",\"time\":\"2026-11-22T03:07:11.205Z\","
	    "\"data_base64\":\"eA==\"}";

	assert_int_equal(map_row("structured", "x",
				 "{\"traceparent\": \"not-a-trace\", \"tracestate\": \"k=v\"}",
				 NULL, &cfg, &m, &ev),
			 OB_MAP_EVENT);
	check_headers(&ev, want, 3);
	assert_memory_equal(ob_event_ptr(&ev, ev.value), envelope, ev.value.len);
	done(&cfg, &m, &ev);
}

static void
test_collisions_are_bad_events(void **state)
{
	static const char *const colliding[] = {
	    "{\"ce_id\": \"mine\"}",
	    "{\"CE_Source\": \"mine\"}",
	    "{\"ok\": 1, \"content-type\": \"text/plain\"}",
	};
	static const char *const modes[] = {"binary", "structured"};

	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; i < sizeof(colliding) / sizeof(colliding[0]); i++) {
			ob_config cfg;
			ob_mapper m;
			ob_event ev;
			size_t len;
			const char *value;

			assert_int_equal(map_row(modes[k], "{}", colliding[i], NULL, &cfg, &m, &ev),
					 OB_MAP_DLQ);
			assert_string_equal(ev.dlq_reason, "cloudevents-header-collision");
			/* The dead-letter record keeps the plain record's headers and value. */
			value = ob_event_find_header(&ev, "id", &len);
			assert_non_null(value);
			assert_memory_equal(value, ID, len);
			assert_memory_equal(ob_event_ptr(&ev, ev.value), "{}", ev.value.len);
			done(&cfg, &m, &ev);
		}
	}
}

static void
test_missing_source_column(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;

	assert_int_equal(
	    map_row("binary", "{}", NULL, "outbox.cloudevents_source=/x/{nope}", &cfg, &m, &ev),
	    OB_MAP_DLQ);
	assert_string_equal(ev.dlq_reason, "missing-source-column");
	done(&cfg, &m, &ev);
}

static void
test_uri_encode(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"", ""},
	    {"AZaz09-._~", "AZaz09-._~"},
	    {"order 42 \"50%\"", "order%2042%20%2250%25%22"},
	    {"a/b?c#d[e]@f!$&'()*+,;=:",
	     "a%2Fb%3Fc%23d%5Be%5D%40f%21%24%26%27%28%29%2A%2B%2C%3B%3D%3A"},
	    {"\xc3\xa9\x7f\x01", "%C3%A9%7F%01"},
	};
	char out[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = ob_ce_uri_encode(cases[i].in, strlen(cases[i].in), out);

		assert_int_equal(n, strlen(cases[i].out));
		assert_memory_equal(out, cases[i].out, n);
	}
}

/* The text of a {column} in the source is percent-encoded; the template's
 * own text is kept; the topic's columns are not encoded. */
static void
test_source_is_uri_encoded(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;
	static const char *const want[] = {
	    "ce_specversion", "1.0",
	    "ce_id",          ID,
	    "ce_type",        "order.paid",
	    "ce_source",      "/shop/order%2042%20%2250%25%22/x?y=order",
	    "ce_subject",     "order 42 \"50%\"",
	    "ce_time",        "2026-11-22T03:07:11.205Z",
	};

	assert_int_equal(
	    map_row_of("order 42 \"50%\"", "binary", NULL, NULL,
		       "outbox.cloudevents_source=/shop/{aggregate_id}/x?y={aggregate_type}", &cfg,
		       &m, &ev),
	    OB_MAP_EVENT);
	check_headers(&ev, want, 6);
	done(&cfg, &m, &ev);
}

/* A timestamp column holding a time RFC 3339 cannot write makes a bad
 * event in both modes, never one stating the commit time. The column read
 * as the timestamp here is aggregate_id. */
static void
test_unwritable_timestamp_is_bad(void **state)
{
	static const char *const times[] = {
	    "infinity",
	    "-infinity",
	    "12000-01-01 00:00:00+00",
	    "0001-01-01 00:00:00+00 BC",
	};
	static const char *const modes[] = {"binary", "structured"};

	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
		for (size_t j = 0; j < 2; j++) {
			ob_config cfg;
			ob_mapper m;
			ob_event ev;

			assert_int_equal(map_row_of(times[i], modes[j], "{}", NULL,
						    "outbox.timestamp_column=aggregate_id", &cfg,
						    &m, &ev),
					 OB_MAP_DLQ);
			assert_string_equal(ev.dlq_reason, "bad-cloudevent");
			done(&cfg, &m, &ev);
		}
	}
}

static void
test_tombstone(void **state)
{
	ob_config cfg;
	ob_mapper m;
	ob_event ev;

	assert_int_equal(map_row("binary", NULL, NULL, NULL, &cfg, &m, &ev), OB_MAP_EVENT);
	assert_false(ev.has_value);
	assert_int_equal(ev.headers_len, 6); /* no content-type without a value */
	done(&cfg, &m, &ev);
}

static void
test_config(void **state)
{
	ob_config cfg;

	ob_config_init(&cfg);
	assert_int_equal(cfg.outbox.cloudevents, OB_CE_OFF);
	assert_true(ob_config_set_override(&cfg, "outbox.cloudevents=structured"));
	assert_false(ob_config_finish(&cfg)); /* no source */
	assert_true(ob_config_set_override(&cfg, "outbox.cloudevents_source=/a/{b"));
	assert_false(ob_config_finish(&cfg));
	assert_true(ob_config_set_override(&cfg, "outbox.cloudevents_source=/a/{b}"));
	assert_true(ob_config_finish(&cfg));
	assert_true(ob_config_set_override(&cfg, "outbox.type_column="));
	assert_false(ob_config_finish(&cfg)); /* no type */
	assert_false(ob_config_set_override(&cfg, "outbox.cloudevents=yes"));
	ob_config_free(&cfg);
}

/* --- the inbox reading CloudEvents records ------------------------------- */

/* Build the inbox row of a record with the given value (NULL: none) and
 * up to two headers. */
static bool
inbox_row(const char *value, const char *h1, const char *v1, const char *h2, const char *v2,
	  ob_inbox_row *row, ob_inbox_bad *bad)
{
	ob_record_view rec;

	memset(&rec, 0, sizeof(rec));
	rec.topic = "t";
	rec.topic_len = 1;
	rec.has_value = value != NULL;
	rec.value = value;
	rec.value_len = value != NULL ? strlen(value) : 0;
	if (h1 != NULL) {
		rec.header_names[rec.headers_len] = h1;
		rec.header_values[rec.headers_len] = v1;
		rec.header_value_lens[rec.headers_len++] = strlen(v1);
	}
	if (h2 != NULL) {
		rec.header_names[rec.headers_len] = h2;
		rec.header_values[rec.headers_len] = v2;
		rec.header_value_lens[rec.headers_len++] = strlen(v2);
	}
	return ob_inbox_row_build(&rec, 0, 7, "id", row, bad);
}

static void
test_inbox_reads_cloudevents(void **state)
{
	ob_inbox_row row;
	ob_inbox_bad bad;

	/* Binary: ce_id and ce_type stand in; an id header wins. */
	assert_true(inbox_row("{\"a\": 1}", "ce_id", "e-1", "ce_type", "t.x", &row, &bad));
	assert_string_equal(row.id, "e-1");
	assert_string_equal(row.type, "t.x");
	assert_string_equal(row.payload_json, "{\"a\": 1}");
	ob_inbox_row_free(&row);
	assert_true(inbox_row("x", "ce_id", "e-1", "id", "plain", &row, &bad));
	assert_string_equal(row.id, "plain");
	ob_inbox_row_free(&row);

	/* Structured: the envelope's id (escapes decoded), type and data. */
	assert_true(inbox_row("{\"specversion\":\"1.0\",\"id\":\"e\\u002d2\",\"type\":\"t.y\","
			      "\"data\":\"caf\\u00e9\"}",
			      "Content-Type", "application/cloudevents+json; charset=UTF-8", NULL,
			      NULL, &row, &bad));
	assert_string_equal(row.id, "e-2");
	assert_string_equal(row.type, "t.y");
	assert_string_equal(row.payload_json, "\"caf\\u00e9\"");
	ob_inbox_row_free(&row);
	assert_true(inbox_row("{\"id\":\"e-3\",\"data_base64\":\"AP8=\"}", "content-type",
			      OB_CE_STRUCTURED_CONTENT_TYPE, NULL, NULL, &row, &bad));
	assert_null(row.payload_json);
	assert_int_equal(row.payload_raw_len, 2);
	assert_memory_equal(row.payload_raw, "\x00\xff", 2);
	ob_inbox_row_free(&row);
	assert_true(inbox_row("{\"id\":\"e-4\",\"data_base64\":\"eyJhIjoxfQ==\"}", "content-type",
			      OB_CE_STRUCTURED_CONTENT_TYPE, NULL, NULL, &row, &bad));
	assert_string_equal(row.payload_json, "{\"a\":1}");
	ob_inbox_row_free(&row);

	/* Envelopes that do not read. */
	static const char *const broken[] = {
	    "{\"type\":\"t\"}",
	    "{\"id\":5}",
	    "{\"id\":\"\"}",
	    "[1]",
	    "{\"id\":\"e\",\"data_base64\":\"A===\"}",
	    "{\"id\":\"e\",\"data_base64\":\"AP8\"}",
	    "{\"id\":\"e\",\"data\":1e}",
	};
	for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
		assert_false(inbox_row(broken[i], "content-type", OB_CE_STRUCTURED_CONTENT_TYPE,
				       NULL, NULL, &row, &bad));
		assert_string_equal(bad.reason, "bad-cloudevent");
	}
	/* Another media type is a plain record: no id header, no row. */
	assert_false(inbox_row("{\"id\":\"e\"}", "content-type", "application/cloudevents+jsonx",
			       NULL, NULL, &row, &bad));
	assert_string_equal(bad.reason, "missing-id");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_format_time),
	    cmocka_unit_test(test_traceparent),
	    cmocka_unit_test(test_reserved_headers),
	    cmocka_unit_test(test_envelope),
	    cmocka_unit_test(test_binary_record),
	    cmocka_unit_test(test_binary_text_payload_has_no_content_type),
	    cmocka_unit_test(test_structured_record),
	    cmocka_unit_test(test_malformed_traceparent_passes_through),
	    cmocka_unit_test(test_collisions_are_bad_events),
	    cmocka_unit_test(test_missing_source_column),
	    cmocka_unit_test(test_uri_encode),
	    cmocka_unit_test(test_source_is_uri_encoded),
	    cmocka_unit_test(test_unwritable_timestamp_is_bad),
	    cmocka_unit_test(test_tombstone),
	    cmocka_unit_test(test_config),
	    cmocka_unit_test(test_inbox_reads_cloudevents),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
