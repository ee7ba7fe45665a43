/*
 * inboxrow.c: the mapping from a Kafka record to an inbox row (see
 * inboxrow.h). The headers object and the JSON test use jansson.
 */
#include "outboxd/inboxrow.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool
ob_inbox_text_ok(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < len) {
		unsigned c = p[i];
		size_t n;
		unsigned cp;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF) {
			n = 1;
			cp = c & 0x1F;
		} else if (c >= 0xE0 && c <= 0xEF) {
			n = 2;
			cp = c & 0x0F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (i + n >= len)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((p[i + k] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + k] & 0x3F);
		}
		/* Overlong forms, surrogates and code points past U+10FFFF. */
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += n + 1;
	}
	return true;
}

bool
ob_inbox_value_is_json(const void *value, size_t len)
{
	/* jansson rejects invalid UTF-8, \u0000 (without JSON_ALLOW_NUL) and
	 * numbers a double or a 64-bit integer cannot hold: exactly the text
	 * that jsonb might refuse or that is not JSON at all. */
	json_t *parsed = json_loadb(value, len, JSON_DECODE_ANY, NULL);

	if (parsed == NULL)
		return false;
	json_decref(parsed);
	return true;
}

static void OB_PRINTF(3, 4) set_bad(ob_inbox_bad *bad, const char *reason, const char *fmt, ...)
{
	va_list ap;

	bad->reason = reason;
	va_start(ap, fmt);
	vsnprintf(bad->error, sizeof(bad->error), fmt, ap);
	va_end(ap);
}

/* Add one header to the object obj: a string (or null), or the next
 * element of an array once the name repeats. */
static void
add_header(json_t *obj, const char *name, json_t *value)
{
	json_t *prev = json_object_get(obj, name);

	if (prev == NULL) {
		json_object_set_new(obj, name, value);
	} else if (json_is_array(prev)) {
		json_array_append_new(prev, value);
	} else {
		json_t *list = json_array();

		json_array_append(list, prev);
		json_array_append_new(list, value);
		json_object_set_new(obj, name, list);
	}
}

/* The headers of rec as a JSON object; NULL with *bad filled when a name
 * or value is not text. Also finds the id and type headers. */
static json_t *
headers_object(const ob_record_view *rec, const char *id_header, const char **id, size_t *id_len,
	       const char **type, size_t *type_len, ob_inbox_bad *bad)
{
	json_t *obj = json_object();

	for (size_t i = 0; i < rec->headers_len; i++) {
		const char *name = rec->header_names[i];
		const char *value = rec->header_values[i];
		size_t len = rec->header_value_lens[i];

		if (!ob_inbox_text_ok(name, strlen(name)) ||
		    (value != NULL && !ob_inbox_text_ok(value, len))) {
			set_bad(bad, "bad-header",
				"header \"%.64s\" is not UTF-8 text without NUL bytes",
				ob_inbox_text_ok(name, strlen(name)) ? name : "?");
			json_decref(obj);
			return NULL;
		}
		add_header(obj, name, value != NULL ? json_stringn(value, len) : json_null());
		if (*id == NULL && value != NULL && strcmp(name, id_header) == 0) {
			*id = value;
			*id_len = len;
		}
		if (*type == NULL && value != NULL && strcmp(name, "type") == 0) {
			*type = value;
			*type_len = len;
		}
	}
	return obj;
}

bool
ob_inbox_row_build(const ob_record_view *rec, int32_t partition, int64_t offset,
		   const char *id_header, ob_inbox_row *row, ob_inbox_bad *bad)
{
	const char *id = NULL, *type = NULL;
	size_t id_len = 0, type_len = 0;
	json_t *headers;

	memset(row, 0, sizeof(*row));
	headers = headers_object(rec, id_header, &id, &id_len, &type, &type_len, bad);
	if (headers == NULL)
		return false;
	if (id == NULL || id_len == 0) {
		set_bad(bad, "missing-id", "record has no \"%s\" header%s", id_header,
			id == NULL ? "" : " value");
		json_decref(headers);
		return false;
	}
	if (rec->has_key && !ob_inbox_text_ok(rec->key, rec->key_len)) {
		set_bad(bad, "bad-key", "record key is not UTF-8 text without NUL bytes");
		json_decref(headers);
		return false;
	}
	row->id = ob_xstrndup(id, id_len);
	row->topic = ob_xstrndup(rec->topic, rec->topic_len);
	row->partition = partition;
	row->offset = offset;
	row->key = rec->has_key ? ob_xstrndup(rec->key, rec->key_len) : NULL;
	row->type = type != NULL ? ob_xstrndup(type, type_len) : NULL;
	if (rec->has_value && ob_inbox_value_is_json(rec->value, rec->value_len)) {
		row->payload_json = ob_xstrndup(rec->value, rec->value_len);
	} else if (rec->has_value) {
		row->payload_raw = rec->value;
		row->payload_raw_len = rec->value_len;
	}
	row->headers_json = json_dumps(headers, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (row->headers_json == NULL)
		abort(); /* jansson fails only on out-of-memory */
	json_decref(headers);
	return true;
}

void
ob_inbox_row_free(ob_inbox_row *row)
{
	free(row->id);
	free(row->topic);
	free(row->key);
	free(row->type);
	free(row->payload_json);
	free(row->headers_json);
	memset(row, 0, sizeof(*row));
}
