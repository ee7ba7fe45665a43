/*
 * cloudevents.c: RFC 3339 time, traceparent check, reserved header names
 * and the structured-mode envelope (see cloudevents.h).
 */
#include "outboxd/cloudevents.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

bool
ob_ce_format_time(int64_t ms, char buf[OB_CE_TIME_BUFLEN])
{
	/* Floor division, so times before 1970 count back from the epoch. */
	int64_t days = ms / 86400000, rest = ms % 86400000;
	int64_t z, era, doe, yoe, year, doy, mp, day, month;

	if (rest < 0) {
		rest += 86400000;
		days--;
	}
	/* Howard Hinnant's civil_from_days: the proleptic Gregorian date. */
	z = days + 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	day = doy - (153 * mp + 2) / 5 + 1;
	month = mp < 10 ? mp + 3 : mp - 9;
	year = yoe + era * 400 + (month <= 2);
	buf[0] = '\0';
	if (year < 0 || year > 9999)
		return false;
	snprintf(buf, OB_CE_TIME_BUFLEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (int)year,
		 (int)month, (int)day, (int)(rest / 3600000), (int)(rest / 60000 % 60),
		 (int)(rest / 1000 % 60), (int)(rest % 1000));
	return true;
}

/* True when s[0..n) are lower-case hex digits. */
static bool
lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

/* True when s[0..n) are lower-case hex digits, not all of them '0'. */
static bool
lower_hex_nonzero(const char *s, size_t n)
{
	if (!lower_hex(s, n))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '0')
			return true;
	}
	return false;
}

size_t
ob_ce_uri_encode(const char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			out[n++] = (char)c;
		} else {
			out[n++] = '%';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 0xF];
		}
	}
	return n;
}

bool
ob_ce_traceparent_valid(const char *s, size_t len)
{
	/* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2. */
	if (len < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	if (!lower_hex(s, 2) || memcmp(s, "ff", 2) == 0 || !lower_hex_nonzero(s + 3, 32) ||
	    !lower_hex_nonzero(s + 36, 16) || !lower_hex(s + 53, 2))
		return false;
	if (memcmp(s, "00", 2) == 0)
		return len == 55;
	return len == 55 || s[55] == '-';
}

bool
ob_ce_header_reserved(const char *name, size_t len)
{
	return (len >= 3 && strncasecmp(name, "ce_", 3) == 0) ||
	       (len == strlen("content-type") && strncasecmp(name, "content-type", len) == 0);
}

/* Append s as a JSON string (quotes included) at *dst, which has room for
 * 6 bytes per byte of s and 2 more. */
static void
write_string(char **dst, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char *d = *dst;

	*d++ = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			*d++ = '\\';
			*d++ = (char)c;
		} else if (c < 0x20) {
			memcpy(d, "\\u00", 4);
			d[4] = hex[c >> 4];
			d[5] = hex[c & 15];
			d += 6;
		} else {
			*d++ = (char)c;
		}
	}
	*d++ = '"';
	*dst = d;
}

/* Append s encoded as base64 (RFC 4648, with padding) at *dst. */
static void
write_base64(char **dst, const unsigned char *s, size_t len)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *d = *dst;

	for (size_t i = 0; i < len; i += 3) {
		unsigned int b = (unsigned int)s[i] << 16;

		if (i + 1 < len)
			b |= (unsigned int)s[i + 1] << 8;
		if (i + 2 < len)
			b |= s[i + 2];
		*d++ = alphabet[b >> 18 & 63];
		*d++ = alphabet[b >> 12 & 63];
		*d++ = i + 1 < len ? alphabet[b >> 6 & 63] : '=';
		*d++ = i + 2 < len ? alphabet[b & 63] : '=';
	}
	*dst = d;
}

/* Append ,"name": and the span s as a JSON string. */
static void
write_member(char **dst, const ob_event *ev, const char *name, ob_span s)
{
	size_t n = strlen(name);

	memcpy(*dst, ",\"", 2);
	memcpy(*dst + 2, name, n);
	memcpy(*dst + 2 + n, "\":", 2);
	*dst += n + 4;
	write_string(dst, ob_event_ptr(ev, s), s.len);
}

static void
write_literal(char **dst, const char *s)
{
	size_t n = strlen(s);

	memcpy(*dst, s, n);
	*dst += n;
}

ob_span
ob_ce_put_envelope(ob_event *ev, const ob_ce_envelope *e)
{
	/* Names, quotes and fixed values take less than 256 bytes; a string
	 * grows at most sixfold escaped, and base64 takes 4 bytes per 3. */
	size_t room = 256 +
		      6 * (e->id.len + e->type.len + e->source.len + e->time.len + e->subject.len +
			   e->traceparent.len + e->tracestate.len) +
		      (e->data.len / 3 + 1) * 4;
	char *start = ob_event_reserve(ev, room), *d = start;

	/* Every span is resolved after the reservation, which may move the
	 * buffer. */
	write_literal(&d, "{\"specversion\":\"1.0\"");
	write_member(&d, ev, "id", e->id);
	write_member(&d, ev, "source", e->source);
	write_member(&d, ev, "type", e->type);
	if (e->has_subject)
		write_member(&d, ev, "subject", e->subject);
	write_member(&d, ev, "time", e->time);
	if (e->has_traceparent)
		write_member(&d, ev, "traceparent", e->traceparent);
	if (e->has_tracestate)
		write_member(&d, ev, "tracestate", e->tracestate);
	if (e->has_data && e->data_is_json) {
		write_literal(&d, ",\"datacontenttype\":\"application/json\",\"data\":");
		memcpy(d, ob_event_ptr(ev, e->data), e->data.len);
		d += e->data.len;
	} else if (e->has_data) {
		write_literal(&d, ",\"data_base64\":\"");
		write_base64(&d, (const unsigned char *)ob_event_ptr(ev, e->data), e->data.len);
		*d++ = '"';
	}
	*d++ = '}';
	return ob_event_claim(ev, (size_t)(d - start));
}
