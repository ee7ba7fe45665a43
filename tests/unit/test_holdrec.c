/*
 * test_holdrec.c: a held record survives its bytes, and bytes that are not
 * one are refused, never read past.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/holdrec.h"

/* Encode view, decode it into ev, and check each field came back. */
static void
round_trip(const ob_record_view *in)
{
	ob_event ev;
	ob_record_view out;
	char *bytes;
	size_t len;

	ob_event_init(&ev);
	ob_holdrec_encode(in, &bytes, &len);
	assert_true(ob_holdrec_decode(bytes, len, &ev));
	ob_event_view(&ev, &out);
	assert_int_equal(out.topic_len, in->topic_len);
	assert_memory_equal(out.topic, in->topic, in->topic_len);
	assert_int_equal(out.has_key, in->has_key);
	if (in->has_key) {
		assert_int_equal(out.key_len, in->key_len);
		assert_memory_equal(out.key, in->key, in->key_len);
	}
	assert_int_equal(out.has_value, in->has_value);
	if (in->has_value) {
		assert_int_equal(out.value_len, in->value_len);
		assert_memory_equal(out.value, in->value, in->value_len);
	}
	assert_int_equal(out.timestamp_ms, in->timestamp_ms);
	assert_int_equal(out.headers_len, in->headers_len);
	for (size_t i = 0; i < in->headers_len; i++) {
		assert_string_equal(out.header_names[i], in->header_names[i]);
		assert_int_equal(out.header_value_lens[i], in->header_value_lens[i]);
		assert_memory_equal(out.header_values[i], in->header_values[i],
				    in->header_value_lens[i]);
	}
	/* Every shorter prefix is refused. */
	for (size_t cut = 0; cut < len; cut++)
		assert_false(ob_holdrec_decode(bytes, cut, &ev));
	free(bytes);
	ob_event_free(&ev);
}

static void
test_records_come_back(void **state)
{
	static const char binary[] = {'a', '\0', (char)0xff, 'b'};
	ob_record_view v;

	(void)state;
	memset(&v, 0, sizeof(v));
	v.topic = "outbox.event.order";
	v.topic_len = strlen(v.topic);
	v.key = binary;
	v.key_len = sizeof(binary);
	v.has_key = true;
	v.value = "{\"a\": 1}";
	v.value_len = 8;
	v.has_value = true;
	v.timestamp_ms = INT64_C(1764410000123);
	v.headers_len = 2;
	v.header_names[0] = "id";
	v.header_values[0] = "e-1";
	v.header_value_lens[0] = 3;
	v.header_names[1] = "empty";
	v.header_values[1] = "";
	v.header_value_lens[1] = 0;
	round_trip(&v);

	/* A keyless tombstone without headers. */
	v.has_key = false;
	v.has_value = false;
	v.headers_len = 0;
	v.timestamp_ms = 0;
	round_trip(&v);
}

static void
test_other_bytes_are_refused(void **state)
{
	ob_event ev;
	ob_record_view v;
	char *bytes;
	size_t len;

	(void)state;
	ob_event_init(&ev);
	memset(&v, 0, sizeof(v));
	v.topic = "t";
	v.topic_len = 1;
	ob_holdrec_encode(&v, &bytes, &len);
	bytes[0] = 2; /* a later version */
	assert_false(ob_holdrec_decode(bytes, len, &ev));
	bytes[0] = 1;
	assert_true(ob_holdrec_decode(bytes, len, &ev));
	bytes = ob_xrealloc(bytes, len + 1);
	bytes[len] = 0; /* trailing bytes */
	assert_false(ob_holdrec_decode(bytes, len + 1, &ev));
	bytes[1] = 0x7f; /* a topic longer than the bytes */
	assert_false(ob_holdrec_decode(bytes, len, &ev));
	free(bytes);
	ob_event_free(&ev);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_records_come_back),
	    cmocka_unit_test(test_other_bytes_are_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
