/*
 * inboxrow.c: the mapping from a Kafka record to an inbox row (see
 * inboxrow.h). The headers object is built with jansson; the JSON test is
 * PostgreSQL's own grammar (jansson refuses numbers jsonb takes).
 */
#include "outboxd/inboxrow.h"

#include "outboxd/jsontext.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The JSON test follows PostgreSQL 15's json lexer and what jsonb adds
 * to it, so that a value is payload exactly when the jsonb column takes
 * it: white space is space, tab, newline and carriage return; a string
 * holds no unescaped control character and only the escapes \" \\ \/ \b
 * \f \n \r \t \uXXXX, where \u0000 and an unpaired surrogate are refused;
 * a number is -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? within what
 * numeric holds (see number_ok()). Nesting deeper than JSON_MAX_DEPTH is
 * taken for not JSON, well within what the server's stack allows. */
#define JSON_MAX_DEPTH       10000 /* sql/README.md, "JSON is what jsonb takes" */
/* numeric's limits (PostgreSQL's numeric.c): 131072 digits before the
 * decimal point, 16383 after it; an exponent of more than nine digits is
 * taken for not JSON (the server refuses all but a few such numbers). */
#define NUMERIC_MAX_WEIGHT   131072
#define NUMERIC_MAX_SCALE    16383
#define NUMERIC_MAX_EXPONENT 999999999L

typedef struct json_scan {
	const unsigned char *s;
	size_t len, pos;
} json_scan;

static void
skip_space(json_scan *j)
{
	while (j->pos < j->len && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' ||
				   j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
		j->pos++;
}

static bool
is_digit(const json_scan *j)
{
	return j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9';
}

/* Skip a run of digits; their count. */
static size_t
digits(json_scan *j)
{
	size_t start = j->pos;

	while (is_digit(j))
		j->pos++;
	return j->pos - start;
}

/* A number at j->pos (which is '-' or a digit), and whether numeric holds
 * it: its digits after the point (as written, less the exponent) within
 * NUMERIC_MAX_SCALE, and unless it is zero, its digits before the point
 * (from the first significant one, plus the exponent) within
 * NUMERIC_MAX_WEIGHT. */
static bool
number_ok(json_scan *j)
{
	size_t int_start, frac_start, int_len, frac_len = 0, frac_zeros;
	long exponent = 0, weight;

	if (j->s[j->pos] == '-')
		j->pos++;
	int_start = j->pos;
	if (!is_digit(j))
		return false;
	if (j->s[j->pos] == '0')
		j->pos++;
	else
		(void)digits(j);
	int_len = j->s[int_start] == '0' ? 0 : j->pos - int_start;
	frac_start = j->pos + 1;
	if (j->pos < j->len && j->s[j->pos] == '.') {
		j->pos++;
		frac_len = digits(j);
		if (frac_len == 0)
			return false;
	}
	if (j->pos < j->len && (j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
		bool negative = false;

		j->pos++;
		if (j->pos < j->len && (j->s[j->pos] == '+' || j->s[j->pos] == '-'))
			negative = j->s[j->pos++] == '-';
		if (!is_digit(j))
			return false;
		while (is_digit(j)) {
			if (exponent <= NUMERIC_MAX_EXPONENT)
				exponent = exponent * 10 + (j->s[j->pos] - '0');
			j->pos++;
		}
		if (exponent > NUMERIC_MAX_EXPONENT)
			return false;
		if (negative)
			exponent = -exponent;
	}
	for (frac_zeros = 0; frac_zeros < frac_len && j->s[frac_start + frac_zeros] == '0';
	     frac_zeros++)
		;
	if ((long)frac_len - exponent > NUMERIC_MAX_SCALE)
		return false;
	if (int_len == 0 && frac_zeros == frac_len)
		return true; /* zero, whatever its exponent */
	weight = int_len > 0 ? (long)int_len : -(long)frac_zeros;
	return weight + exponent <= NUMERIC_MAX_WEIGHT;
}

/* The four hex digits of a \u escape at j->pos; -1 when not hex. */
static long
hex4(json_scan *j)
{
	long v = 0;

	if (j->len - j->pos < 4)
		return -1;
	for (int k = 0; k < 4; k++) {
		unsigned char c = j->s[j->pos++];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* A string at j->pos (the opening quote), as jsonb takes it. */
static bool
string_ok(json_scan *j)
{
	j->pos++;
	while (j->pos < j->len) {
		unsigned char c = j->s[j->pos++];
		long cp;

		if (c == '"')
			return true;
		if (c < 0x20)
			return false;
		if (c != '\\')
			continue;
		if (j->pos >= j->len)
			return false;
		c = j->s[j->pos++];
		if (c != 'u') {
			if (strchr("\"\\/bfnrt", c) == NULL || c == '\0')
				return false;
			continue;
		}
		cp = hex4(j);
		if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
			return false; /* \u0000, a low surrogate first, or not hex */
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u')
				return false;
			j->pos += 2;
			cp = hex4(j);
			if (cp < 0xDC00 || cp > 0xDFFF)
				return false;
		}
	}
	return false;
}

/* A literal (true, false, null) at j->pos. */
static bool
literal_ok(json_scan *j)
{
	static const char *const words[] = {"true", "false", "null"};

	for (size_t i = 0; i < OB_ARRAY_LEN(words); i++) {
		size_t n = strlen(words[i]);

		if (j->len - j->pos >= n && memcmp(j->s + j->pos, words[i], n) == 0) {
			j->pos += n;
			return true;
		}
	}
	return false;
}

/* One scalar at j->pos. */
static bool
scalar_ok(json_scan *j)
{
	if (j->pos >= j->len)
		return false;
	if (j->s[j->pos] == '"')
		return string_ok(j);
	if (j->s[j->pos] == '-' || is_digit(j))
		return number_ok(j);
	return literal_ok(j);
}

/* A member name and its colon at j->pos (white space around them
 * skipped). */
static bool
member_name_ok(json_scan *j)
{
	skip_space(j);
	if (j->pos >= j->len || j->s[j->pos] != '"' || !string_ok(j))
		return false;
	skip_space(j);
	return j->pos < j->len && j->s[j->pos++] == ':';
}

bool
ob_inbox_value_is_json(const void *value, size_t len)
{
	/* The brackets open at the scan's position: 1 for an object, 0 for
	 * an array. */
	unsigned char open[JSON_MAX_DEPTH];
	json_scan j = {value, len, 0};
	size_t depth = 0;

	if (!ob_inbox_text_ok(value, len))
		return false; /* the server refuses text that is not UTF-8 */
	for (;;) {
		/* A value; in an object, after its member name and colon. */
		skip_space(&j);
		if (j.pos < len && (j.s[j.pos] == '{' || j.s[j.pos] == '[')) {
			bool object = j.s[j.pos++] == '{';

			skip_space(&j);
			if (j.pos < len && j.s[j.pos] == (object ? '}' : ']')) {
				j.pos++;
			} else {
				if (depth == JSON_MAX_DEPTH)
					return false;
				open[depth++] = object;
				if (object && !member_name_ok(&j))
					return false;
				continue;
			}
		} else if (!scalar_ok(&j)) {
			return false;
		}
		/* After a value: a separator, closing brackets, or the end. */
		for (;;) {
			skip_space(&j);
			if (depth == 0)
				return j.pos == len;
			if (j.pos >= len)
				return false;
			if (j.s[j.pos] == (open[depth - 1] ? '}' : ']')) {
				j.pos++;
				depth--;
				continue;
			}
			if (j.s[j.pos++] != ',')
				return false;
			if (open[depth - 1] && !member_name_ok(&j))
				return false;
			break;
		}
	}
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

/* A header value found while the headers object is built. */
typedef struct found_header {
	const char *value; /* NULL: no such header (with a value) */
	size_t len;
} found_header;

/* The headers the row takes its id and type from: the configured id
 * header and "type", and a binary-mode CloudEvent's ce_id and ce_type
 * (a record with a ce_specversion header is one). */
typedef struct found_headers {
	found_header id, type, ce_id, ce_type;
	bool ce_specversion;
} found_headers;

/* Remember value as *h when name is want and *h is not set yet. */
static void
find_header(found_header *h, const char *name, const char *want, const char *value, size_t len)
{
	if (h->value == NULL && value != NULL && strcmp(name, want) == 0) {
		h->value = value;
		h->len = len;
	}
}

/* The headers of rec as a JSON object; NULL with *bad filled when a name
 * or value is not text. Also finds the headers of found_headers. */
static json_t *
headers_object(const ob_record_view *rec, const char *id_header, found_headers *found,
	       ob_inbox_bad *bad)
{
	json_t *obj = json_object();

	memset(found, 0, sizeof(*found));
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
		find_header(&found->id, name, id_header, value, len);
		find_header(&found->type, name, "type", value, len);
		find_header(&found->ce_id, name, "ce_id", value, len);
		find_header(&found->ce_type, name, "ce_type", value, len);
		if (strcmp(name, "ce_specversion") == 0)
			found->ce_specversion = true;
	}
	return obj;
}

/* True when rec is a structured-mode CloudEvent: its first content-type
 * header (the name in any case) is application/cloudevents+json, perhaps
 * with parameters after a ';'. */
static bool
is_structured_cloudevent(const ob_record_view *rec)
{
	static const char media[] = "application/cloudevents+json";
	const size_t n = sizeof(media) - 1;

	for (size_t i = 0; i < rec->headers_len; i++) {
		const char *v = rec->header_values[i];
		size_t len = rec->header_value_lens[i];

		if (strcasecmp(rec->header_names[i], "content-type") != 0)
			continue;
		return v != NULL && len >= n && strncasecmp(v, media, n) == 0 &&
		       (len == n || v[n] == ';' || v[n] == ' ');
	}
	return false;
}

/* A string member's text with its escapes decoded, NUL-terminated and
 * the caller's to free, or NULL when the member is not a JSON string of
 * UTF-8 text without NUL bytes. */
static char *
member_text(const ob_json_member *m)
{
	char *s;
	long n = (long)m->value_len;

	if (!m->value_is_string)
		return NULL;
	s = ob_xmalloc(m->value_len + 1);
	if (m->value_escaped)
		n = ob_json_unescape(m->value, m->value_len, s);
	else
		memcpy(s, m->value, m->value_len);
	if (n < 0 || !ob_inbox_text_ok(s, (size_t)n)) {
		free(s);
		return NULL;
	}
	s[n] = '\0';
	return s;
}

/* The value of one base64 digit (RFC 4648), or -1. */
static int
base64_digit(char c)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = c != '\0' ? strchr(alphabet, c) : NULL;

	return p != NULL ? (int)(p - alphabet) : -1;
}

/* Decode padded base64 text s into out (at least len / 4 * 3 bytes);
 * false when s is not base64. */
static bool
base64_decode(const char *s, size_t len, unsigned char *out, size_t *out_len)
{
	size_t n = 0;

	if (len % 4 != 0)
		return false;
	for (size_t i = 0; i < len; i += 4) {
		int d[4];
		size_t pad = 0;

		for (size_t k = 0; k < 4; k++) {
			/* Padding only at the end: "x===" is never valid. */
			if (s[i + k] == '=' && i + 4 == len && k >= 2) {
				d[k] = 0;
				pad++;
				continue;
			}
			d[k] = base64_digit(s[i + k]);
			if (d[k] < 0 || pad > 0)
				return false;
		}
		out[n++] = (unsigned char)(d[0] << 2 | d[1] >> 4);
		if (pad < 2)
			out[n++] = (unsigned char)((d[1] & 15) << 4 | d[2] >> 2);
		if (pad < 1)
			out[n++] = (unsigned char)((d[2] & 3) << 6 | d[3]);
	}
	*out_len = n;
	return true;
}

/* Set the row's payload to bytes it owns: payload_json when they are JSON,
 * else payload_raw. */
static void
set_owned_payload(ob_inbox_row *row, unsigned char *bytes, size_t len)
{
	if (ob_inbox_value_is_json(bytes, len)) {
		row->payload_json = ob_xstrndup((const char *)bytes, len);
		free(bytes);
		return;
	}
	row->payload_owned = bytes;
	row->payload_raw = bytes;
	row->payload_raw_len = len;
}

/* Read a structured-mode CloudEvent's envelope (sql/README.md, "The inbox tables") into row:
 * id and type from its string members, the payload from "data" (its JSON
 * text) or "data_base64" (the bytes it encodes, payload_json when they are
 * JSON). False with *bad filled (reason "bad-cloudevent") when the value
 * is not a JSON object, id is missing, or a member read is not what the
 * JSON event format says; row then holds what was read so far, for
 * ob_inbox_row_free(). */
static bool
read_envelope(const ob_record_view *rec, ob_inbox_row *row, ob_inbox_bad *bad)
{
	ob_json_iter it;
	ob_json_member m;
	int r = -1;

	if (ob_json_iter_init(&it, rec->value, rec->value_len)) {
		/* data may nest as deep as a payload (JSON_MAX_DEPTH); whether it
		 * is JSON jsonb takes is ob_inbox_value_is_json()'s call. */
		it.max_depth = JSON_MAX_DEPTH;
		while ((r = ob_json_iter_next(&it, &m)) == 1) {
			bool is_data = ob_json_member_named(&m, "data", 4);

			if (ob_json_member_named(&m, "id", 2) && row->id == NULL) {
				if ((row->id = member_text(&m)) == NULL)
					break;
			} else if (ob_json_member_named(&m, "type", 4) && row->type == NULL) {
				if ((row->type = member_text(&m)) == NULL)
					break;
			} else if (is_data && row->payload_json == NULL &&
				   row->payload_raw == NULL) {
				/* A string's member text is between its quotes. */
				const char *text = m.value_is_string ? m.value - 1 : m.value;
				size_t len = m.value_is_string ? m.value_len + 2 : m.value_len;

				if (!ob_inbox_value_is_json(text, len))
					break;
				if (!ob_json_member_is_null(&m))
					row->payload_json = ob_xstrndup(text, len);
			} else if (ob_json_member_named(&m, "data_base64", 11) &&
				   row->payload_json == NULL && row->payload_raw == NULL) {
				/* The string's escapes (a '/' written as "\\/") decoded
				 * first: base64 is the string's value, not its text. */
				char *text = ob_xmalloc(m.value_len + 1);
				long text_len = m.value_is_string
						    ? ob_json_unescape(m.value, m.value_len, text)
						    : -1;
				unsigned char *bytes = ob_xmalloc(m.value_len / 4 * 3 + 1);
				size_t n;

				if (text_len < 0 ||
				    !base64_decode(text, (size_t)text_len, bytes, &n)) {
					free(text);
					free(bytes);
					break;
				}
				free(text);
				set_owned_payload(row, bytes, n);
			}
		}
	}
	if (r == 0 && row->id != NULL && row->id[0] != '\0')
		return true;
	set_bad(bad, "bad-cloudevent",
		"structured CloudEvent is not a JSON object with a string id, type and data or "
		"data_base64 as the JSON event format says");
	return false;
}

bool
ob_inbox_row_build(const ob_record_view *rec, int32_t partition, int64_t offset,
		   const char *id_header, ob_inbox_row *row, ob_inbox_bad *bad)
{
	found_headers found;
	found_header id, type;
	json_t *headers;

	memset(row, 0, sizeof(*row));
	headers = headers_object(rec, id_header, &found, bad);
	if (headers == NULL)
		return false;
	if (rec->has_value && is_structured_cloudevent(rec)) {
		if (!read_envelope(rec, row, bad)) {
			ob_inbox_row_free(row);
			json_decref(headers);
			return false;
		}
	} else {
		/* A binary-mode CloudEvent (a ce_specversion header) names its id
		 * and type in ce_ headers, which win over the id and type headers
		 * (then the user's own headers); elsewhere ce_id and ce_type only
		 * stand in for missing ones. */
		bool ce = found.ce_specversion;

		id = ce && found.ce_id.value != NULL ? found.ce_id
		     : found.id.value != NULL        ? found.id
						     : found.ce_id;
		type = ce && found.ce_type.value != NULL ? found.ce_type
		       : found.type.value != NULL        ? found.type
							 : found.ce_type;
		if (id.value == NULL || id.len == 0) {
			set_bad(bad, "missing-id", "record has no \"%s\" header%s", id_header,
				id.value == NULL ? "" : " value");
			json_decref(headers);
			return false;
		}
		row->id = ob_xstrndup(id.value, id.len);
		row->type = type.value != NULL ? ob_xstrndup(type.value, type.len) : NULL;
		if (rec->has_value && ob_inbox_value_is_json(rec->value, rec->value_len)) {
			row->payload_json = ob_xstrndup(rec->value, rec->value_len);
		} else if (rec->has_value) {
			row->payload_raw = rec->value;
			row->payload_raw_len = rec->value_len;
		}
	}
	if (rec->has_key && !ob_inbox_text_ok(rec->key, rec->key_len)) {
		set_bad(bad, "bad-key", "record key is not UTF-8 text without NUL bytes");
		ob_inbox_row_free(row);
		json_decref(headers);
		return false;
	}
	row->topic = ob_xstrndup(rec->topic, rec->topic_len);
	row->partition = partition;
	row->offset = offset;
	row->key = rec->has_key ? ob_xstrndup(rec->key, rec->key_len) : NULL;
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
	free(row->payload_owned);
	free(row->headers_json);
	memset(row, 0, sizeof(*row));
}
