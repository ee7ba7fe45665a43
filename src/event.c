/*
 * event.c: one Kafka record being built in one reusable buffer, and the
 * dead-letter records built from it (see event.h).
 */
#include "outboxd/event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ob_event_init(ob_event *ev)
{
	memset(ev, 0, sizeof(*ev));
}

void
ob_event_reset(ob_event *ev)
{
	/* Field by field, every field but the buffer and the header array,
	 * which is read only up to headers_len: zeroing its 2 kB for every
	 * record was a measurable share of mapping. */
	ev->buf_len = 0;
	ev->topic = (ob_span){0, 0};
	ev->has_key = false;
	ev->key = (ob_span){0, 0};
	ev->has_value = false;
	ev->value = (ob_span){0, 0};
	ev->headers_len = 0;
	ev->timestamp_ms = 0;
	ev->dlq_reason = NULL;
}

char *
ob_event_reserve(ob_event *ev, size_t len)
{
	/* The first reservation allocates even for 0 bytes, so the pointer
	 * returned is never NULL + 0. */
	if (ev->buf == NULL || ev->buf_len + len > ev->buf_cap) {
		size_t cap = ev->buf_cap ? ev->buf_cap : 1024;

		while (cap < ev->buf_len + len)
			cap *= 2;
		ev->buf = ob_xrealloc(ev->buf, cap);
		ev->buf_cap = cap;
	}
	return ev->buf + ev->buf_len;
}

ob_span
ob_event_claim(ob_event *ev, size_t len)
{
	ob_span s = {ev->buf_len, len};

	ev->buf_len += len;
	return s;
}

ob_span
ob_event_put(ob_event *ev, const void *data, size_t len)
{
	ob_span s = {ev->buf_len, len};

	if (len > 0)
		memcpy(ob_event_reserve(ev, len), data, len);
	ev->buf_len += len;
	return s;
}

bool
ob_event_add_header_span(ob_event *ev, const char *name, ob_span value)
{
	ob_event_header *h;

	if (ev->headers_len == OB_EVENT_MAX_HEADERS)
		return false;
	h = &ev->headers[ev->headers_len++];
	h->name = ob_event_put(ev, name, strlen(name) + 1);
	h->name.len--;
	h->value = value;
	return true;
}

bool
ob_event_add_header(ob_event *ev, const char *name, const void *value, size_t value_len)
{
	/* Copy the value first: value may not point into ev->buf. */
	if (ev->headers_len == OB_EVENT_MAX_HEADERS)
		return false;
	return ob_event_add_header_span(ev, name, ob_event_put(ev, value, value_len));
}

void
ob_event_begin_dlq(ob_event *ev, const char *dlq_topic, const char *reason, const char *error,
		   ob_lsn source_lsn)
{
	char lsn[OB_LSN_BUFLEN];

	ob_event_reset(ev);
	ev->dlq_reason = reason;
	ev->topic = ob_event_put(ev, dlq_topic, strlen(dlq_topic));
	ob_lsn_format(source_lsn, lsn);
	/* Two headers always fit in an empty event. */
	(void)ob_event_add_header(ev, "error", error, strlen(error));
	(void)ob_event_add_header(ev, "source-lsn", lsn, strlen(lsn));
}

void
ob_event_view(const ob_event *ev, ob_record_view *view)
{
	memset(view, 0, sizeof(*view));
	view->topic = ob_event_ptr(ev, ev->topic);
	view->topic_len = ev->topic.len;
	view->has_key = ev->has_key;
	view->key = ob_event_ptr(ev, ev->key);
	view->key_len = ev->key.len;
	view->has_value = ev->has_value;
	view->value = ob_event_ptr(ev, ev->value);
	view->value_len = ev->value.len;
	view->timestamp_ms = ev->timestamp_ms;
	view->headers_len = ev->headers_len;
	for (size_t i = 0; i < ev->headers_len; i++) {
		view->header_names[i] = ob_event_ptr(ev, ev->headers[i].name);
		view->header_values[i] = ob_event_ptr(ev, ev->headers[i].value);
		view->header_value_lens[i] = ev->headers[i].value.len;
	}
}

void
ob_event_put_record(ob_event *ev, const ob_record_view *v)
{
	ev->has_key = v->has_key;
	if (v->has_key)
		ev->key = ob_event_put(ev, v->key, v->key_len);
	ev->has_value = v->has_value;
	if (v->has_value)
		ev->value = ob_event_put(ev, v->value, v->value_len);
	ev->timestamp_ms = v->timestamp_ms;
}

void
ob_event_build_dlq(ob_event *out, const char *dlq_topic, const char *reason, const char *error,
		   ob_lsn source_lsn, const ob_record_view *orig, bool value_too_large)
{
	ob_event_begin_dlq(out, dlq_topic, reason, error, source_lsn);
	out->timestamp_ms = orig->timestamp_ms;
	if (value_too_large) {
		char size[32];

		snprintf(size, sizeof(size), "%zu", orig->value_len);
		(void)ob_event_add_header(out, "payload-size", size, strlen(size));
	}
	for (size_t i = 0; i < orig->headers_len; i++) {
		if (!ob_event_add_header(out, orig->header_names[i], orig->header_values[i],
					 orig->header_value_lens[i]))
			break; /* the error header already says what happened */
	}
	/* Last, where it fits: the topic the record was for, when known. */
	if (orig->topic_len > 0)
		(void)ob_event_add_header(out, OB_DLQ_ORIGINAL_TOPIC, orig->topic, orig->topic_len);
	if (orig->has_key) {
		out->key = ob_event_put(out, orig->key, orig->key_len);
		out->has_key = true;
	}
	if (orig->has_value && !value_too_large) {
		out->value = ob_event_put(out, orig->value, orig->value_len);
		out->has_value = true;
	}
}

/* What a record's framing may take beyond its key, value and headers
 * (batch and record headers, varints), kept free below max_bytes. */
#define FRAMING_MARGIN  512
/* What one header costs beyond its name and value. */
#define HEADER_OVERHEAD 16

void
ob_event_build_dlq_headers_only(ob_event *out, const char *reason, const ob_record_view *dlq,
				size_t max_bytes)
{
	size_t budget = max_bytes > 2 * FRAMING_MARGIN ? max_bytes - FRAMING_MARGIN : max_bytes / 2;
	size_t used = dlq->topic_len;
	bool has_size = false;

	ob_event_reset(out);
	out->dlq_reason = reason;
	out->topic = ob_event_put(out, dlq->topic, dlq->topic_len);
	out->timestamp_ms = dlq->timestamp_ms;
	for (size_t i = 0; i < dlq->headers_len; i++)
		has_size = has_size || strcmp(dlq->header_names[i], "payload-size") == 0;
	if (!has_size && dlq->has_value) {
		char size[32];

		snprintf(size, sizeof(size), "%zu", dlq->value_len);
		(void)ob_event_add_header(out, "payload-size", size, strlen(size));
		used += strlen("payload-size") + strlen(size) + HEADER_OVERHEAD;
	}
	/* The key (what the aggregate was) is kept before the headers are cut
	 * when it takes at most a quarter of the budget. */
	if (dlq->has_key && dlq->key_len <= budget / 4) {
		out->key = ob_event_put(out, dlq->key, dlq->key_len);
		out->has_key = true;
		used += dlq->key_len;
	}
	for (size_t i = 0; i < dlq->headers_len; i++) {
		size_t name_len = strlen(dlq->header_names[i]);
		size_t value_len = dlq->header_value_lens[i];

		if (used + name_len + HEADER_OVERHEAD >= budget)
			break;
		if (value_len > budget - used - name_len - HEADER_OVERHEAD)
			value_len = budget - used - name_len - HEADER_OVERHEAD;
		if (!ob_event_add_header(out, dlq->header_names[i], dlq->header_values[i],
					 value_len))
			break;
		used += name_len + value_len + HEADER_OVERHEAD;
	}
}

const char *
ob_event_find_header(const ob_event *ev, const char *name, size_t *len)
{
	for (size_t i = 0; i < ev->headers_len; i++) {
		const ob_event_header *h = &ev->headers[i];

		if (h->name.len == strlen(name) &&
		    memcmp(ob_event_ptr(ev, h->name), name, h->name.len) == 0) {
			*len = h->value.len;
			return ob_event_ptr(ev, h->value);
		}
	}
	*len = 0;
	return NULL;
}

void
ob_event_free(ob_event *ev)
{
	free(ev->buf);
	memset(ev, 0, sizeof(*ev));
}
