/*
 * holdrec.c: a record as bytes (holdrec.h).
 *
 * The layout, integers big-endian:
 *   u8 version (1)
 *   u32 topic length, topic
 *   u8 flags (1: has a key, 2: has a value), i64 timestamp (ms)
 *   u32 key length, key; u32 value length, value
 *   u16 header count; per header: u32 name length, name, u32 value length, value
 */
#include "outboxd/holdrec.h"

#include <stdlib.h>
#include <string.h>

#define HOLDREC_VERSION 1
#define FLAG_KEY        1
#define FLAG_VALUE      2

typedef struct writer {
	char *buf;
	size_t len;
	size_t cap;
} writer;

static void
put(writer *w, const void *data, size_t len)
{
	if (w->len + len > w->cap) {
		while (w->len + len > w->cap)
			w->cap = w->cap ? w->cap * 2 : 256;
		w->buf = ob_xrealloc(w->buf, w->cap);
	}
	if (len > 0)
		memcpy(w->buf + w->len, data, len);
	w->len += len;
}

static void
put_uint(writer *w, uint64_t v, int bytes)
{
	unsigned char b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
	put(w, b, (size_t)bytes);
}

static void
put_bytes(writer *w, const void *data, size_t len)
{
	put_uint(w, len, 4);
	put(w, data, len);
}

void
ob_holdrec_encode(const ob_record_view *rec, char **out, size_t *len)
{
	writer w = {NULL, 0, 0};

	put_uint(&w, HOLDREC_VERSION, 1);
	put_bytes(&w, rec->topic, rec->topic_len);
	put_uint(&w, (rec->has_key ? FLAG_KEY : 0) | (rec->has_value ? FLAG_VALUE : 0), 1);
	put_uint(&w, (uint64_t)rec->timestamp_ms, 8);
	put_bytes(&w, rec->key, rec->has_key ? rec->key_len : 0);
	put_bytes(&w, rec->value, rec->has_value ? rec->value_len : 0);
	put_uint(&w, rec->headers_len, 2);
	for (size_t i = 0; i < rec->headers_len; i++) {
		put_bytes(&w, rec->header_names[i], strlen(rec->header_names[i]));
		put_bytes(&w, rec->header_values[i], rec->header_value_lens[i]);
	}
	*out = w.buf;
	*len = w.len;
}

typedef struct reader {
	const unsigned char *p;
	size_t left;
} reader;

static bool
get_uint(reader *r, int bytes, uint64_t *v)
{
	if (r->left < (size_t)bytes)
		return false;
	*v = 0;
	for (int i = 0; i < bytes; i++)
		*v = (*v << 8) | r->p[i];
	r->p += bytes;
	r->left -= (size_t)bytes;
	return true;
}

/* A length-prefixed run: *data points into the input. */
static bool
get_bytes(reader *r, const void **data, size_t *len)
{
	uint64_t n;

	if (!get_uint(r, 4, &n) || n > r->left)
		return false;
	*data = r->p;
	*len = (size_t)n;
	r->p += n;
	r->left -= (size_t)n;
	return true;
}

bool
ob_holdrec_decode(const void *data, size_t len, ob_event *ev)
{
	reader r = {data, len};
	uint64_t version, flags, ts, count;
	const void *s, *v;
	size_t slen, vlen;

	ob_event_reset(ev);
	if (!get_uint(&r, 1, &version) || version != HOLDREC_VERSION || !get_bytes(&r, &s, &slen) ||
	    !get_uint(&r, 1, &flags) || !get_uint(&r, 8, &ts))
		return false;
	ev->topic = ob_event_put(ev, s, slen);
	ev->timestamp_ms = (int64_t)ts;
	if (!get_bytes(&r, &s, &slen) || !get_bytes(&r, &v, &vlen) || !get_uint(&r, 2, &count))
		return false;
	ev->has_key = (flags & FLAG_KEY) != 0;
	ev->key = ob_event_put(ev, s, slen);
	ev->has_value = (flags & FLAG_VALUE) != 0;
	ev->value = ob_event_put(ev, v, vlen);
	for (uint64_t i = 0; i < count; i++) {
		char *name;
		bool added;

		if (!get_bytes(&r, &s, &slen) || !get_bytes(&r, &v, &vlen))
			return false;
		name = ob_xstrndup(s, slen);
		added = ob_event_add_header(ev, name, v, vlen);
		free(name);
		if (!added)
			return false;
	}
	return r.left == 0;
}
