/*
 * cloudevents.h: the pure parts of publishing outbox events as CloudEvents
 * 1.0 in the Kafka protocol binding (sql/README.md, "CloudEvents"): the RFC 3339
 * time, the W3C traceparent check, the header names the binding reserves
 * and the structured-mode envelope. Whether a payload is JSON and whether
 * an attribute is text are inboxrow.h's tests, so that what the inbox
 * stores as JSON is what was published as JSON.
 *
 * outbox.c decides what an event's attributes are; this module only
 * formats and checks them, so the unit tests can reach every rule.
 */
#ifndef OUTBOXD_CLOUDEVENTS_H
#define OUTBOXD_CLOUDEVENTS_H

#include "outboxd/common.h"
#include "outboxd/event.h"

/* Room for the longest time ob_ce_format_time() writes, NUL included. */
#define OB_CE_TIME_BUFLEN 32

/* The content-type header of a structured-mode record. */
#define OB_CE_STRUCTURED_CONTENT_TYPE "application/cloudevents+json"

/* Write ms (milliseconds since the Unix epoch) into buf as an RFC 3339
 * UTC time with milliseconds, "2026-11-25T19:00:22.123Z". False when the
 * year falls outside 0000..9999, which RFC 3339 cannot write; buf is then
 * an empty string. */
bool ob_ce_format_time(int64_t ms, char buf[OB_CE_TIME_BUFLEN]) OB_MUST_CHECK;

/* Percent-encode (RFC 3986) the len bytes of in into out, which has
 * room for 3 * len bytes: every byte but the unreserved characters
 * (ALPHA, DIGIT, '-', '.', '_', '~') becomes "%HH" with upper-case hex
 * digits. Returns the length written (no NUL). The text a {column}
 * placeholder of outbox.cloudevents_source puts in, so that the source is
 * a URI-reference whatever the column holds. */
size_t ob_ce_uri_encode(const char *in, size_t len, char *out);

/* True when s is a traceparent as W3C Trace Context level 1 defines it:
 * version 00 as exactly "00-" 32 lower-case hex digits (not all zero) "-"
 * 16 lower-case hex digits (not all zero) "-" 2 hex digits; a later
 * version (not ff) may add fields after a further '-'. */
bool ob_ce_traceparent_valid(const char *s, size_t len);

/* True when a header of this name would collide with the binding: a name
 * starting with "ce_" (every CloudEvents attribute's header) or
 * "content-type", compared without regard to case. */
bool ob_ce_header_reserved(const char *name, size_t len);

/* The attributes of one event as spans of the event whose buffer the
 * envelope is appended to. id, type, source and time are always there;
 * the others only where their has_ flag says so. */
typedef struct ob_ce_envelope {
	ob_span id, type, source, time;
	bool has_subject;
	ob_span subject;
	bool has_traceparent;
	ob_span traceparent;
	bool has_tracestate;
	ob_span tracestate;
	bool has_data;     /* false: a tombstone's event, with no data */
	bool data_is_json; /* data goes in as "data", else base64 in "data_base64";
			    * true only for JSON text (ob_inbox_value_is_json()) */
	ob_span data;
} ob_ce_envelope;

/* Append the structured-mode JSON envelope of e to ev's buffer and return
 * its span: members specversion, id, source, type, subject, time,
 * traceparent, tracestate, then datacontenttype "application/json" and
 * data (the JSON text as it is), or data_base64. The string attributes
 * must be UTF-8 without NUL bytes (ob_inbox_text_ok()); they are escaped as JSON
 * strings. */
ob_span ob_ce_put_envelope(ob_event *ev, const ob_ce_envelope *e);

#endif
