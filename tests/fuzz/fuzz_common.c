/*
 * fuzz_common.c: the checks the fuzz targets share (fuzz.h).
 */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ob_fuzz_fail(const char *file, int line, const char *cond)
{
	fprintf(stderr, "%s:%d: contract broken: %s\n", file, line, cond);
	fflush(stderr);
	abort();
}

/* True if span s lies inside the written part of ev's buffer. */
static bool
span_inside(const ob_event *ev, ob_span s)
{
	return s.off <= ev->buf_len && s.len <= ev->buf_len - s.off;
}

void
ob_fuzz_check_event(const ob_event *ev)
{
	OB_FUZZ_CHECK(ev->buf_len <= ev->buf_cap);
	OB_FUZZ_CHECK(span_inside(ev, ev->topic));
	OB_FUZZ_CHECK(!ev->has_key || span_inside(ev, ev->key));
	OB_FUZZ_CHECK(!ev->has_value || span_inside(ev, ev->value));
	OB_FUZZ_CHECK(ev->headers_len <= OB_EVENT_MAX_HEADERS);
	for (size_t i = 0; i < ev->headers_len; i++) {
		const ob_event_header *h = &ev->headers[i];

		OB_FUZZ_CHECK(span_inside(ev, h->value));
		/* The name and the NUL after it. */
		OB_FUZZ_CHECK(h->name.off < ev->buf_len && h->name.len < ev->buf_len - h->name.off);
		OB_FUZZ_CHECK(ob_event_ptr(ev, h->name)[h->name.len] == '\0');
	}
}

/* True if the byte ranges a[0..a_len) and b[0..b_len) are equal. */
static bool
bytes_equal(const void *a, size_t a_len, const void *b, size_t b_len)
{
	return a_len == b_len && (a_len == 0 || memcmp(a, b, a_len) == 0);
}

/* True if two records are the same byte for byte, headers in order. */
static bool
views_equal(const ob_record_view *a, const ob_record_view *b)
{
	if (!bytes_equal(a->topic, a->topic_len, b->topic, b->topic_len) ||
	    a->has_key != b->has_key || a->has_value != b->has_value ||
	    a->timestamp_ms != b->timestamp_ms || a->headers_len != b->headers_len)
		return false;
	if (a->has_key && !bytes_equal(a->key, a->key_len, b->key, b->key_len))
		return false;
	if (a->has_value && !bytes_equal(a->value, a->value_len, b->value, b->value_len))
		return false;
	for (size_t i = 0; i < a->headers_len; i++) {
		if (strcmp(a->header_names[i], b->header_names[i]) != 0 ||
		    !bytes_equal(a->header_values[i], a->header_value_lens[i], b->header_values[i],
				 b->header_value_lens[i]))
			return false;
	}
	return true;
}

/* True if header i of ev is called name. */
static bool
header_named(const ob_event *ev, size_t i, const char *name)
{
	return i < ev->headers_len && strcmp(ob_event_ptr(ev, ev->headers[i].name), name) == 0;
}

static ob_map_result
map_once(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms, ob_event *ev)
{
	if (rec->action == OB_W2J_INSERT)
		return ob_mapper_map_insert(m, rec, commit_ms, ev);
	return ob_mapper_map_message(m, rec, commit_ms, ev);
}

/* The record sizes the headers-only form is built for: below twice the
 * framing margin (half the size is the budget), just above it, and the
 * librdkafka default. */
static const size_t max_record_bytes[] = {300, 1100, 1000000};

/* Check a headers-only dead-letter record built from dlq for max_bytes. */
static void
check_headers_only(const ob_event *small, const ob_record_view *dlq, size_t max_bytes)
{
	size_t total = small->key.len;

	ob_fuzz_check_event(small);
	OB_FUZZ_CHECK(!small->has_value);
	OB_FUZZ_CHECK(bytes_equal(ob_event_ptr(small, small->topic), small->topic.len, dlq->topic,
				  dlq->topic_len));
	OB_FUZZ_CHECK(small->headers_len <= dlq->headers_len + 1);
	for (size_t i = 0; i < small->headers_len; i++)
		total += small->headers[i].name.len + small->headers[i].value.len;
	OB_FUZZ_CHECK(total <= max_bytes);
}

/* Build and check what the relay builds when rec's record is refused. */
static void
check_refused_forms(const ob_config *cfg, const ob_event *ev, ob_lsn lsn)
{
	ob_record_view view, dlq_view;
	ob_event dlq, small;

	ob_event_init(&dlq);
	ob_event_init(&small);
	ob_event_view(ev, &view);
	for (int too_large = 0; too_large <= 1; too_large++) {
		ob_event_build_dlq(&dlq, cfg->outbox.dlq_topic, "too-large", "fuzz", lsn, &view,
				   too_large);
		ob_fuzz_check_event(&dlq);
		OB_FUZZ_CHECK(header_named(&dlq, 0, "error") &&
			      header_named(&dlq, 1, "source-lsn"));
		OB_FUZZ_CHECK(dlq.has_value == (view.has_value && !too_large));
		ob_event_view(&dlq, &dlq_view);
		for (size_t i = 0; i < OB_ARRAY_LEN(max_record_bytes); i++) {
			ob_event_build_dlq_headers_only(&small, "too-large", &dlq_view,
							max_record_bytes[i]);
			check_headers_only(&small, &dlq_view, max_record_bytes[i]);
		}
	}
	ob_event_free(&dlq);
	ob_event_free(&small);
}

void
ob_fuzz_map_record(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms)
{
	const ob_config *cfg = m->cfg;
	ob_event first, again;
	ob_record_view first_view, again_view;
	ob_map_result r;

	if (rec->action != OB_W2J_INSERT && rec->action != OB_W2J_MESSAGE)
		return;
	ob_event_init(&first);
	ob_event_init(&again);
	r = map_once(m, rec, commit_ms, &first);
	if (r == OB_MAP_SKIP)
		goto out;
	ob_fuzz_check_event(&first);
	if (r == OB_MAP_EVENT) {
		OB_FUZZ_CHECK(first.dlq_reason == NULL);
		OB_FUZZ_CHECK(first.has_key);
		OB_FUZZ_CHECK(header_named(&first, 0, "id"));
	} else {
		OB_FUZZ_CHECK(r == OB_MAP_DLQ && first.dlq_reason != NULL);
		OB_FUZZ_CHECK(bytes_equal(ob_event_ptr(&first, first.topic), first.topic.len,
					  cfg->outbox.dlq_topic, strlen(cfg->outbox.dlq_topic)));
		OB_FUZZ_CHECK(header_named(&first, 0, "error") &&
			      header_named(&first, 1, "source-lsn"));
	}
	/* The mapper's reused buffers must not change the next record. */
	OB_FUZZ_CHECK(map_once(m, rec, commit_ms, &again) == r);
	ob_fuzz_check_event(&again);
	ob_event_view(&first, &first_view);
	ob_event_view(&again, &again_view);
	OB_FUZZ_CHECK(views_equal(&first_view, &again_view));
	OB_FUZZ_CHECK((first.dlq_reason == NULL) == (again.dlq_reason == NULL));
	OB_FUZZ_CHECK(first.dlq_reason == NULL || strcmp(first.dlq_reason, again.dlq_reason) == 0);
	check_refused_forms(cfg, &first, rec->lsn);
out:
	ob_event_free(&first);
	ob_event_free(&again);
}
