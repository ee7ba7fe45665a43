/*
 * test_event.c: the record buffer's dead-letter builders (event.h) where
 * sizes matter: the headers-only form of a dead-letter record that does
 * not fit, and the header accessor.
 *
 * Each case builds a dead-letter record, cuts it down for a max_bytes and
 * checks what was kept: no value, a payload-size header, headers in order
 * with their values cut short, the key only when it fits, and a total that
 * stays within max_bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/event.h"

/* Key, value and headers: what counts against message.max.bytes. */
static size_t
record_bytes(const ob_record_view *v)
{
	size_t n = v->topic_len + (v->has_key ? v->key_len : 0) + (v->has_value ? v->value_len : 0);

	for (size_t i = 0; i < v->headers_len; i++)
		n += strlen(v->header_names[i]) + v->header_value_lens[i];
	return n;
}

typedef struct size_case {
	const char *name;
	size_t key_len;
	size_t value_len;
	size_t header_len; /* length of the one original header "big" */
	size_t max_bytes;
	bool key_kept;
	bool big_cut; /* "big" is there, cut short */
	bool big_gone;
} size_case;

static const size_case size_cases[] = {
    {"large value, small rest", 8, 300000, 10, 100000, true, false, false},
    {"large header too", 8, 300000, 300000, 100000, true, true, false},
    {"large key", 200000, 300000, 10, 100000, false, false, false},
    {"tiny limit", 8, 5000, 5000, 1000, true, true, false},
};

static void
test_headers_only(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(size_cases) / sizeof(size_cases[0]); c++) {
		const size_case *sc = &size_cases[c];
		char *key = malloc(sc->key_len), *value = malloc(sc->value_len);
		char *big = malloc(sc->header_len);
		ob_event orig, dlq, out;
		ob_record_view ov, dv, v;
		size_t len;
		const char *size;

		memset(key, 'k', sc->key_len);
		memset(value, 'v', sc->value_len);
		memset(big, 'h', sc->header_len);
		ob_event_init(&orig);
		ob_event_init(&dlq);
		ob_event_init(&out);
		orig.topic = ob_event_put(&orig, "orders", 6);
		orig.key = ob_event_put(&orig, key, sc->key_len);
		orig.has_key = true;
		orig.value = ob_event_put(&orig, value, sc->value_len);
		orig.has_value = true;
		orig.timestamp_ms = 42;
		assert_true(ob_event_add_header(&orig, "id", "1", 1));
		assert_true(ob_event_add_header(&orig, "big", big, sc->header_len));
		ob_event_view(&orig, &ov);
		ob_event_build_dlq(&dlq, "outbox.dlq", "missing-topic-column", "topic is null",
				   0x10, &ov, false);
		ob_event_view(&dlq, &dv);
		ob_event_build_dlq_headers_only(&out, dlq.dlq_reason, &dv, sc->max_bytes);
		ob_event_view(&out, &v);

		if (record_bytes(&v) > sc->max_bytes)
			fail_msg("%s: %zu bytes > %zu", sc->name, record_bytes(&v), sc->max_bytes);
		assert_string_equal(out.dlq_reason, "missing-topic-column");
		assert_int_equal(v.topic_len, 10);
		assert_memory_equal(v.topic, "outbox.dlq", 10);
		assert_false(v.has_value);
		assert_int_equal(v.timestamp_ms, 42);
		assert_int_equal(v.has_key, sc->key_kept);
		size = ob_event_find_header(&out, "payload-size", &len);
		assert_non_null(size);
		assert_int_equal(strtoul(size, NULL, 10), sc->value_len);
		assert_non_null(ob_event_find_header(&out, "error", &len));
		assert_memory_equal(ob_event_find_header(&out, "error", &len), "topic is null", 13);
		assert_non_null(ob_event_find_header(&out, "source-lsn", &len));
		assert_non_null(ob_event_find_header(&out, "id", &len));
		if (sc->big_gone) {
			assert_null(ob_event_find_header(&out, "big", &len));
		} else {
			assert_non_null(ob_event_find_header(&out, "big", &len));
			if (sc->big_cut)
				assert_true(len < sc->header_len);
			else
				assert_int_equal(len, sc->header_len);
		}
		ob_event_free(&orig);
		ob_event_free(&dlq);
		ob_event_free(&out);
		free(key);
		free(value);
		free(big);
	}
}

/* A record already cut down (payload-size present, no value) keeps its one
 * payload-size header. */
static void
test_headers_only_twice(void **state)
{
	ob_event a, b;
	ob_record_view v;
	int sizes = 0;

	(void)state;
	ob_event_init(&a);
	ob_event_init(&b);
	a.topic = ob_event_put(&a, "d", 1);
	assert_true(ob_event_add_header(&a, "error", "e", 1));
	assert_true(ob_event_add_header(&a, "payload-size", "123", 3));
	ob_event_view(&a, &v);
	ob_event_build_dlq_headers_only(&b, "too-large", &v, 100000);
	ob_event_view(&b, &v);
	for (size_t i = 0; i < v.headers_len; i++)
		sizes += strcmp(v.header_names[i], "payload-size") == 0;
	assert_int_equal(sizes, 1);
	ob_event_free(&a);
	ob_event_free(&b);
}

static void
test_find_header(void **state)
{
	ob_event ev;
	size_t len = 99;

	(void)state;
	ob_event_init(&ev);
	assert_null(ob_event_find_header(&ev, "error", &len));
	assert_int_equal(len, 0);
	assert_true(ob_event_add_header(&ev, "err", "short", 5));
	assert_true(ob_event_add_header(&ev, "error", "the one", 7));
	assert_true(ob_event_add_header(&ev, "error", "second", 6));
	assert_memory_equal(ob_event_find_header(&ev, "error", &len), "the one", 7);
	assert_int_equal(len, 7);
	ob_event_free(&ev);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_headers_only),
	    cmocka_unit_test(test_headers_only_twice),
	    cmocka_unit_test(test_find_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
