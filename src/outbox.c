/*
 * outbox.c: outbox row or logical message -> Kafka record (sql/README.md, "The Kafka record").
 *
 * The sources are read through one accessor, get_field(): a row's column
 * from the wal2json record (with its Postgres type), a column of a row read
 * with libpq in text format (the backlog; typed so that it reads as the
 * wal2json record of the same row would), or a member of the message's
 * JSON object (typed by its JSON kind). Everything after that is
 * shared, so a row and a message with the same content map to the same
 * record.
 */
#include "outboxd/outbox.h"

#include "outboxd/cloudevents.h"
#include "outboxd/inboxrow.h"
#include "outboxd/jsontext.h"
#include "outboxd/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ob_mapper_init(ob_mapper *m, const ob_config *cfg)
{
	memset(m, 0, sizeof(*m));
	m->cfg = cfg;
}

void
ob_mapper_free(ob_mapper *m)
{
	free(m->content_buf);
	free(m->headers_buf);
	ob_event_free(&m->scratch);
	memset(m, 0, sizeof(*m));
}

/* Decode the escapes of a JSON string's text into *buf (grown as needed);
 * returns the decoded length, or -1 on a bad escape. */
static long
decode_into(char **buf, size_t *cap, const char *s, size_t len)
{
	if (*cap < len + 1) {
		*cap = len + 1 > 256 ? len + 1 : 256;
		*buf = ob_xrealloc(*buf, *cap);
	}
	return ob_json_unescape(s, len, *buf);
}

/* Fields a logical message may have: more members than this make it a
 * bad message. */
#define MAX_MESSAGE_FIELDS 64

/* Where the fields of one outbox event come from: a row (an I record), a
 * row read with libpq, or a logical message's JSON object, whose members
 * are indexed once. */
typedef struct field_source {
	const ob_w2j_record *row;
	const ob_text_row *text_row;
	ob_json_member members[MAX_MESSAGE_FIELDS];
	size_t members_len;
} field_source;

typedef enum value_kind {
	VALUE_NULL,
	VALUE_TEXT,      /* a JSON string's text without escapes: bytes as they are */
	VALUE_ESCAPED,   /* a JSON string's text with escapes to decode */
	VALUE_JSON_TEXT, /* raw JSON text: number, boolean, object or array */
} value_kind;

typedef struct field_value {
	value_kind kind;
	const char *pg_type; /* the column's Postgres type; empty for messages */
	size_t pg_type_len;
	const char *text;
	size_t len;
} field_value;

/* Read column i of a libpq text row as wal2json would have sent it. */
static void
get_text_column(const ob_text_row *row, size_t i, field_value *fv)
{
	const char *v = row->values[i];
	size_t len = row->lengths[i];

	fv->text = v;
	fv->len = len;
	fv->kind = VALUE_TEXT;
	if (v == NULL) {
		fv->kind = VALUE_NULL;
		return;
	}
	switch (row->kinds[i]) {
	case OB_TEXT_PLAIN:
		break;
	case OB_TEXT_NUMBER:
		/* wal2json sends NaN and the infinities, which JSON lacks, as null. */
		if (memchr(v, 'N', len) != NULL || memchr(v, 'n', len) != NULL)
			fv->kind = VALUE_NULL;
		else
			fv->kind = VALUE_JSON_TEXT;
		break;
	case OB_TEXT_BOOLEAN:
		fv->kind = VALUE_JSON_TEXT;
		fv->text = len > 0 && v[0] == 't' ? "true" : "false";
		fv->len = strlen(fv->text);
		break;
	case OB_TEXT_BYTEA:
		fv->pg_type = "bytea";
		fv->pg_type_len = 5;
		if (len >= 2 && v[0] == '\\' && v[1] == 'x') {
			fv->text = v + 2;
			fv->len = len - 2;
		}
		break;
	}
}

/* Look a field up by name; false if the row or message has no such field. */
static bool
get_field(const field_source *src, const char *name, field_value *fv)
{
	const ob_json_member *m = NULL;

	memset(fv, 0, sizeof(*fv));
	fv->pg_type = "";
	if (src->text_row != NULL) {
		/* The first byte first: a few lookups per record, each over
		 * every column. */
		for (size_t i = 0; i < src->text_row->columns_len; i++) {
			if (src->text_row->names[i][0] == name[0] &&
			    strcmp(src->text_row->names[i], name) == 0) {
				get_text_column(src->text_row, i, fv);
				return true;
			}
		}
		return false;
	}
	if (src->row != NULL) {
		m = ob_w2j_column_find(src->row, name, &fv->pg_type, &fv->pg_type_len);
	} else {
		size_t name_len = strlen(name);

		for (size_t i = 0; i < src->members_len && m == NULL; i++) {
			if (ob_json_member_named(&src->members[i], name, name_len))
				m = &src->members[i];
		}
	}
	if (m == NULL)
		return false;
	fv->text = m->value;
	fv->len = m->value_len;
	if (ob_json_member_is_null(m))
		fv->kind = VALUE_NULL;
	else if (m->value_is_string)
		fv->kind = m->value_escaped ? VALUE_ESCAPED : VALUE_TEXT;
	else
		fv->kind = VALUE_JSON_TEXT;
	return true;
}

static bool
type_is(const field_value *fv, const char *prefix)
{
	size_t n = strlen(prefix);

	return fv->pg_type_len >= n && memcmp(fv->pg_type, prefix, n) == 0;
}

/* Append the hex string s decoded; false if it is not valid hex. */
static bool
put_hex_decoded(ob_event *ev, const char *s, size_t len, ob_span *out)
{
	char *dst;

	if (len % 2 != 0)
		return false;
	dst = ob_event_reserve(ev, len / 2);
	for (size_t i = 0; i < len; i += 2) {
		int hi = ob_hex_digit(s[i]), lo = ob_hex_digit(s[i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		dst[i / 2] = (char)(hi << 4 | lo);
	}
	*out = ob_event_claim(ev, len / 2);
	return true;
}

/* Append a JSON string's inner text with its escapes decoded. */
static bool
put_unescaped(ob_event *ev, const char *s, size_t len, ob_span *out)
{
	long n = ob_json_unescape(s, len, ob_event_reserve(ev, len));

	if (n < 0)
		return false;
	*out = ob_event_claim(ev, (size_t)n);
	return true;
}

typedef enum field_status {
	FIELD_OK,
	FIELD_MISSING,
	FIELD_NULL,
	FIELD_UNDECODABLE,
} field_status;

/*
 * Append the bytes a field value stands for (sql/README.md, "The Kafka record"): json/jsonb values
 * as their JSON text (wal2json sends them as a string holding that text), bytea as its raw bytes,
 * other strings as they are, and numbers, booleans, objects and arrays as their original JSON text.
 */
static field_status
put_value(ob_event *ev, const field_value *fv, ob_span *out)
{
	switch (fv->kind) {
	case VALUE_NULL:
		return FIELD_NULL;
	case VALUE_TEXT:
		if (type_is(fv, "bytea"))
			return put_hex_decoded(ev, fv->text, fv->len, out) ? FIELD_OK
									   : FIELD_UNDECODABLE;
		*out = ob_event_put(ev, fv->text, fv->len);
		return FIELD_OK;
	case VALUE_ESCAPED:
		/* Hex text never needs escapes: an escaped bytea is not hex. */
		if (type_is(fv, "bytea"))
			return FIELD_UNDECODABLE;
		return put_unescaped(ev, fv->text, fv->len, out) ? FIELD_OK : FIELD_UNDECODABLE;
	case VALUE_JSON_TEXT:
		*out = ob_event_put(ev, fv->text, fv->len);
		return FIELD_OK;
	}
	return FIELD_UNDECODABLE;
}

static field_status
put_field(ob_event *ev, const field_source *src, const char *name, ob_span *out)
{
	field_value fv;

	if (!get_field(src, name, &fv))
		return FIELD_MISSING;
	return put_value(ev, &fv, out);
}

/* Replace the span s, the last bytes of ev's buffer, by its
 * percent-encoding (ob_ce_uri_encode()). */
static void
uri_encode_tail(ob_event *ev, ob_span s)
{
	char *copy = ob_xmalloc(s.len + 1);
	char *to;

	memcpy(copy, ob_event_ptr(ev, s), s.len);
	ev->buf_len = s.off;
	to = ob_event_reserve(ev, 3 * s.len);
	(void)ob_event_claim(ev, ob_ce_uri_encode(copy, s.len, to));
	free(copy);
}

/* Expand a template (outbox.topic, outbox.cloudevents_source) into *out,
 * the text of each column percent-encoded when uri_encode is set (sql/README.md,
 * "CloudEvents"); on failure *missing names the column that is missing or
 * null. */
static bool
put_template(ob_event *ev, const field_source *src, const char *tpl, bool uri_encode, ob_span *out,
	     char *missing, size_t missing_len)
{
	size_t start = ev->buf_len;
	const char *cursor = tpl;
	ob_topic_piece piece;

	while (ob_topic_template_next(&cursor, &piece) == OB_TOPIC_PIECE) {
		char name[256];
		ob_span value;

		if (!piece.is_column) {
			ob_event_put(ev, piece.text, piece.len);
			continue;
		}
		size_t name_len = piece.len < sizeof(name) ? piece.len : sizeof(name) - 1;

		memcpy(name, piece.text, name_len);
		name[name_len] = '\0';
		if (put_field(ev, src, name, &value) != FIELD_OK) {
			snprintf(missing, missing_len, "%s", name);
			return false;
		}
		if (uri_encode)
			uri_encode_tail(ev, value);
	}
	out->off = start;
	out->len = ev->buf_len - start;
	return true;
}

/* The text of the headers field: an object's JSON text, decoded into the
 * mapper's buffer when it was an escaped string (a jsonb column). False if
 * the field is there but is not text, raw JSON or decodable; a missing or
 * NULL field gives true with *text NULL. */
static bool
headers_text(ob_mapper *m, const field_source *src, const char **text, size_t *len)
{
	const char *column = m->cfg->outbox.headers_column;
	field_value fv;
	long n;

	*text = NULL;
	*len = 0;
	if (column[0] == '\0' || !get_field(src, column, &fv) || fv.kind == VALUE_NULL)
		return true;
	if (fv.kind == VALUE_ESCAPED) {
		n = decode_into(&m->headers_buf, &m->headers_cap, fv.text, fv.len);
		if (n < 0)
			return false;
		*text = m->headers_buf;
		*len = (size_t)n;
		return true;
	}
	*text = fv.text;
	*len = fv.len;
	return true;
}

/* Add the members of a headers object (sql/README.md, "The Kafka record"): strings as they are,
 * other values as their JSON text. False if text is not a JSON object,
 * has a bad escape, or has too many members. */
static bool
add_object_headers(ob_event *ev, const char *text, size_t len)
{
	ob_json_iter it;
	ob_json_member m;
	int r;

	if (!ob_json_iter_init(&it, text, len))
		return false;
	while ((r = ob_json_iter_next(&it, &m)) == 1) {
		ob_span name, value;

		if (!put_unescaped(ev, m.name, m.name_len, &name))
			return false;
		ob_event_put(ev, "", 1); /* librdkafka wants names NUL-terminated */
		if (!m.value_is_string)
			value = ob_event_put(ev, m.value, m.value_len);
		else if (!put_unescaped(ev, m.value, m.value_len, &value))
			return false;
		if (ev->headers_len == OB_EVENT_MAX_HEADERS)
			return false;
		ev->headers[ev->headers_len].name = name;
		ev->headers[ev->headers_len].value = value;
		ev->headers_len++;
	}
	return r == 0;
}

/* The record timestamp into *ms: timestamp_column's value (timestamptz
 * or bigint ms), else the commit time. False when the column is there and
 * not NULL but its value is no time outboxd can read ('infinity', a year
 * past 9999, BC, not a number): *ms is then the commit time, which a
 * CloudEvent must not state as its time (put_cloudevent()). */
static bool
read_timestamp(const field_source *src, const char *column, int64_t commit_ms, int64_t *ms)
{
	field_value fv;
	char buf[64];

	*ms = commit_ms;
	if (column[0] == '\0' || !get_field(src, column, &fv) || fv.kind == VALUE_NULL)
		return true;
	if ((fv.kind == VALUE_TEXT || fv.kind == VALUE_JSON_TEXT) && fv.len < sizeof(buf)) {
		char *end;

		memcpy(buf, fv.text, fv.len);
		buf[fv.len] = '\0';
		if (fv.kind == VALUE_JSON_TEXT) {
			long long v = strtoll(buf, &end, 10);

			if (*end != '\0' || end == buf)
				return false;
			*ms = (int64_t)v;
			return true;
		}
		return ob_pg_timestamp_to_ms(buf, ms); /* sets *ms only when it reads */
	}
	return false;
}

/* Why an event is bad; the first reason found wins. */
typedef struct bad_event {
	const char *reason; /* a string constant; NULL while the event is good */
	char error[512];
} bad_event;

static void OB_PRINTF(3, 4) note_bad(bad_event *bad, const char *reason, const char *fmt, ...)
{
	va_list ap;

	if (bad->reason != NULL)
		return;
	bad->reason = reason;
	va_start(ap, fmt);
	vsnprintf(bad->error, sizeof(bad->error), fmt, ap);
	va_end(ap);
}

/* Append a column the record cannot do without (key, id) into *out; a
 * missing or NULL one makes the event bad with reason. */
static bool
put_required(ob_event *ev, const field_source *src, const char *what, const char *column,
	     const char *reason, ob_span *out, bad_event *bad)
{
	field_status st = put_field(ev, src, column, out);

	if (st == FIELD_OK)
		return true;
	note_bad(bad, reason, "%s column %s is %s", what, column,
		 st == FIELD_NULL ? "null" : "missing");
	return false;
}

/* Append the payload as the value. One that cannot be decoded makes the
 * event bad; when that is the first fault found, its undecoded text
 * becomes the value, for the dead-letter record. */
static void
put_payload(ob_event *ev, const field_source *src, const char *column, bad_event *bad)
{
	field_status st = put_field(ev, src, column, &ev->value);
	field_value raw;

	ev->has_value = st == FIELD_OK;
	if (st != FIELD_UNDECODABLE || bad->reason != NULL)
		return;
	note_bad(bad, "bad-payload", "payload column %s could not be decoded", column);
	if (get_field(src, column, &raw)) {
		if (raw.kind != VALUE_ESCAPED || !put_unescaped(ev, raw.text, raw.len, &ev->value))
			ev->value = ob_event_put(ev, raw.text, raw.len);
		ev->has_value = true;
	}
}

/* The id and type as read into the event's buffer, and the text of the
 * headers object (NULL when there is none). */
typedef struct read_fields {
	ob_span id, type;
	bool has_id, has_type;
	const char *headers;
	size_t headers_len;
	bool headers_ok; /* false: the headers field is there but unreadable */
	bool time_bad;   /* timestamp_column holds a time that cannot be read */
} read_fields;

/* Set the event's headers to the id and type headers that were read. */
static void
put_id_type(ob_event *ev, const read_fields *f)
{
	ev->headers_len = 0;
	if (f->has_id)
		(void)ob_event_add_header_span(ev, "id", f->id);
	if (f->has_type)
		(void)ob_event_add_header_span(ev, "type", f->type);
}

/* Turn a bad event into its dead-letter record, keeping what could be
 * read: the key, the value, the id and type headers, and the headers
 * object (all or none of its members). The record is built in the
 * mapper's scratch event, which then takes ev's place. */
static void
become_dead_letter(ob_mapper *m, ob_event *ev, const read_fields *f, const bad_event *bad,
		   ob_lsn lsn)
{
	ob_record_view view;
	ob_event swap;

	put_id_type(ev, f);
	if (f->headers_ok && f->headers != NULL) {
		size_t kept = ev->headers_len;

		if (!add_object_headers(ev, f->headers, f->headers_len))
			ev->headers_len = kept;
	}
	ob_event_view(ev, &view);
	ob_event_build_dlq(&m->scratch, m->cfg->outbox.dlq_topic, bad->reason, bad->error, lsn,
			   &view, false);
	swap = *ev;
	*ev = m->scratch;
	m->scratch = swap;
}

/* Check that a CloudEvents attribute is a non-empty UTF-8 string without
 * NUL bytes; an empty one is allowed only when may_be_empty (the subject,
 * which is then left out). */
static bool
check_attribute(const ob_event *ev, const char *what, ob_span s, bool may_be_empty, bad_event *bad)
{
	if (s.len == 0 && !may_be_empty) {
		note_bad(bad, "bad-cloudevent", "CloudEvents attribute %s is empty", what);
		return false;
	}
	if (!ob_inbox_text_ok(ob_event_ptr(ev, s), s.len)) {
		note_bad(bad, "bad-cloudevent",
			 "CloudEvents attribute %s is not UTF-8 text without NUL bytes", what);
		return false;
	}
	return true;
}

/*
 * Turn the plain record in ev (headers: id, type, then the headers object's
 * members) into a CloudEvent of the configured mode (sql/README.md, "CloudEvents").
 * The id and type headers give way to the binding's: in binary mode the
 * ce_ attribute headers and content-type (application/json when the value
 * is JSON) come first and the value stays the payload; in structured mode
 * the value becomes the JSON envelope and content-type says so. The user's
 * headers follow in their order. A user header the binding reserves, a
 * source template naming a missing column, an attribute that is empty or
 * not UTF-8, or a time RFC 3339 cannot write (a timestamp column that
 * holds one is never replaced by the commit time) make the event bad, and ev is
 * then left as it was for its dead-letter record. A traceparent that is
 * not W3C Trace Context stays a plain header and is counted.
 */
static void
put_cloudevent(const ob_config *cfg, const field_source *src, const read_fields *f, ob_event *ev,
	       bad_event *bad)
{
	ob_event_header user[OB_EVENT_MAX_HEADERS];
	size_t first_user = (size_t)f->has_id + (size_t)f->has_type;
	size_t user_len = ev->headers_len - first_user, own;
	ob_ce_envelope e = {.id = f->id, .type = f->type, .subject = ev->key};
	char when[OB_CE_TIME_BUFLEN], missing[256];

	if (!f->has_type) {
		note_bad(bad, "bad-cloudevent",
			 "type column %s is null or missing: a CloudEvent needs a type",
			 cfg->outbox.type_column);
		return;
	}
	memcpy(user, &ev->headers[first_user], user_len * sizeof(*user));
	for (size_t i = 0; i < user_len; i++) {
		const char *name = ob_event_ptr(ev, user[i].name);

		if (ob_ce_header_reserved(name, user[i].name.len)) {
			note_bad(bad, "cloudevents-header-collision",
				 "header %s of headers column %s collides with the CloudEvents "
				 "Kafka binding's headers",
				 name, cfg->outbox.headers_column);
			return;
		}
		if (!e.has_traceparent && ob_event_header_is(ev, &user[i], "traceparent")) {
			e.has_traceparent = true;
			e.traceparent = user[i].value;
		} else if (!e.has_tracestate && ob_event_header_is(ev, &user[i], "tracestate")) {
			e.has_tracestate = true;
			e.tracestate = user[i].value;
		}
	}
	if (!put_template(ev, src, cfg->outbox.cloudevents_source, true, &e.source, missing,
			  sizeof(missing))) {
		note_bad(bad, "missing-source-column",
			 "cloudevents_source template %s names column %s, which is missing or null",
			 cfg->outbox.cloudevents_source, missing);
		return;
	}
	if (!check_attribute(ev, "id", e.id, false, bad) ||
	    !check_attribute(ev, "type", e.type, false, bad) ||
	    !check_attribute(ev, "source", e.source, false, bad) ||
	    !check_attribute(ev, "subject", e.subject, true, bad))
		return;
	if (f->time_bad) {
		note_bad(bad, "bad-cloudevent",
			 "timestamp column %s holds a time RFC 3339 cannot write (infinity, a year "
			 "past 9999 or BC)",
			 cfg->outbox.timestamp_column);
		return;
	}
	if (!ob_ce_format_time(ev->timestamp_ms, when)) {
		note_bad(bad, "bad-cloudevent",
			 "timestamp %lld ms is outside the years RFC 3339 can write",
			 (long long)ev->timestamp_ms);
		return;
	}
	e.has_subject = e.subject.len > 0;
	e.has_data = ev->has_value;
	e.data = ev->value;
	e.data_is_json =
	    ev->has_value && ob_inbox_value_is_json(ob_event_ptr(ev, ev->value), ev->value.len);
	own = cfg->outbox.cloudevents == OB_CE_BINARY ? 5 + (size_t)e.has_subject + e.data_is_json
						      : 1;
	if (own + user_len > OB_EVENT_MAX_HEADERS) {
		note_bad(bad, "bad-headers",
			 "headers column %s has %zu members: with the CloudEvents headers a record "
			 "has at most %d",
			 cfg->outbox.headers_column, user_len, OB_EVENT_MAX_HEADERS);
		return;
	}
	if (e.has_traceparent &&
	    !ob_ce_traceparent_valid(ob_event_ptr(ev, e.traceparent), e.traceparent.len)) {
		/* W3C Trace Context: a tracestate without a valid traceparent is
		 * ignored, so neither becomes an attribute. */
		ob_metrics_traceparent_malformed();
		e.has_traceparent = false;
		e.has_tracestate = false;
	}
	if (!e.has_traceparent ||
	    (e.has_tracestate &&
	     !ob_inbox_text_ok(ob_event_ptr(ev, e.tracestate), e.tracestate.len)))
		e.has_tracestate = false;
	e.time = ob_event_put(ev, when, strlen(when));
	/* own + user_len headers fit, so no header below is refused. */
	ev->headers_len = 0;
	if (cfg->outbox.cloudevents == OB_CE_BINARY) {
		(void)ob_event_add_header(ev, "ce_specversion", "1.0", 3);
		(void)ob_event_add_header_span(ev, "ce_id", e.id);
		(void)ob_event_add_header_span(ev, "ce_type", e.type);
		(void)ob_event_add_header_span(ev, "ce_source", e.source);
		if (e.has_subject)
			(void)ob_event_add_header_span(ev, "ce_subject", e.subject);
		(void)ob_event_add_header_span(ev, "ce_time", e.time);
		if (e.data_is_json)
			(void)ob_event_add_header(ev, "content-type", "application/json",
						  strlen("application/json"));
	} else {
		ev->value = ob_ce_put_envelope(ev, &e);
		ev->has_value = true;
		(void)ob_event_add_header(ev, "content-type", OB_CE_STRUCTURED_CONTENT_TYPE,
					  strlen(OB_CE_STRUCTURED_CONTENT_TYPE));
	}
	memcpy(&ev->headers[ev->headers_len], user, user_len * sizeof(*user));
	ev->headers_len += user_len;
}

/* The shared mapping of a row or a message's fields into ev; a bad event
 * becomes its dead-letter record (OB_MAP_DLQ). */
static ob_map_result
map_fields(ob_mapper *m, const field_source *src, ob_lsn lsn, int64_t commit_ms, ob_event *ev)
{
	const ob_config *cfg = m->cfg;
	bad_event bad = {NULL, ""};
	read_fields f = {{0, 0}, {0, 0}, false, false, NULL, 0, false, false};
	char missing[256];

	ob_event_reset(ev);
	f.time_bad =
	    !read_timestamp(src, cfg->outbox.timestamp_column, commit_ms, &ev->timestamp_ms);
	ev->has_key =
	    put_required(ev, src, "key", cfg->outbox.key_column, "missing-key", &ev->key, &bad);
	f.has_id = put_required(ev, src, "id", cfg->outbox.id_column, "missing-id", &f.id, &bad);
	if (cfg->outbox.type_column[0] != '\0')
		f.has_type = put_field(ev, src, cfg->outbox.type_column, &f.type) == FIELD_OK;
	put_payload(ev, src, cfg->outbox.payload_column, &bad);
	f.headers_ok = headers_text(m, src, &f.headers, &f.headers_len);
	/* Also for a bad event, whose dead letter names it (note_bad() keeps
	 * the first reason). */
	if (!put_template(ev, src, cfg->outbox.topic, false, &ev->topic, missing, sizeof(missing)))
		note_bad(&bad, "missing-topic-column",
			 "topic template %s names column %s, which is missing or null",
			 cfg->outbox.topic, missing);
	else if (!ob_topic_name_valid(ob_event_ptr(ev, ev->topic), ev->topic.len, false))
		note_bad(&bad, "bad-topic",
			 "topic template %s gives \"%.*s\", which is not a Kafka topic name (at "
			 "most %d of a-z, A-Z, 0-9, '.', '_' and '-')",
			 cfg->outbox.topic, (int)(ev->topic.len > 300 ? 300 : ev->topic.len),
			 ob_event_ptr(ev, ev->topic), OB_TOPIC_NAME_MAX);
	if (bad.reason == NULL) {
		put_id_type(ev, &f);
		if (!f.headers_ok ||
		    (f.headers != NULL && !add_object_headers(ev, f.headers, f.headers_len))) {
			f.headers_ok = false;
			note_bad(&bad, "bad-headers",
				 "headers column %s is not a JSON object of at most %d members",
				 cfg->outbox.headers_column, OB_EVENT_MAX_HEADERS - 2);
		}
	}
	if (bad.reason == NULL && cfg->outbox.cloudevents != OB_CE_OFF)
		put_cloudevent(cfg, src, &f, ev, &bad);
	if (bad.reason == NULL)
		return OB_MAP_EVENT;
	become_dead_letter(m, ev, &f, &bad, lsn);
	return OB_MAP_DLQ;
}

ob_map_result
ob_mapper_map_row(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms, ob_event *ev)
{
	field_source src = {.row = rec};

	if (rec->action != OB_W2J_INSERT)
		return OB_MAP_SKIP;
	return map_fields(m, &src, rec->lsn, commit_ms, ev);
}

ob_map_result
ob_mapper_map_insert(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms, ob_event *ev)
{
	const ob_config *cfg = m->cfg;

	if (strcmp(rec->table, cfg->outbox.table_name) != 0 ||
	    (rec->schema[0] != '\0' && strcmp(rec->schema, cfg->outbox.schema) != 0))
		return OB_MAP_SKIP;
	return ob_mapper_map_row(m, rec, commit_ms, ev);
}

bool
ob_mapper_reads_message(const ob_mapper *m, const ob_logical_message *msg)
{
	const char *prefix = m->cfg->outbox.message_prefix;

	return prefix[0] != '\0' && !msg->prefix_too_long && strcmp(msg->prefix, prefix) == 0;
}

ob_map_result
ob_mapper_map_logical_message(ob_mapper *m, const ob_logical_message *msg, int64_t commit_ms,
			      ob_event *ev)
{
	const ob_config *cfg = m->cfg;
	const char *reason = NULL, *error = NULL;
	field_source src;
	ob_map_result result;
	ob_json_iter it;
	const char *content = msg->content;
	size_t content_len = msg->content_len;
	int r = -1;

	if (!ob_mapper_reads_message(m, msg))
		return OB_MAP_SKIP;
	src.row = NULL;
	src.text_row = NULL;
	src.members_len = 0;
	if (msg->content_escaped) {
		long n = decode_into(&m->content_buf, &m->content_cap, content, content_len);

		if (n >= 0) {
			content = m->content_buf;
			content_len = (size_t)n;
		}
	}
	if (!msg->transactional) {
		reason = "non-transactional-message";
		error = "logical message is not transactional: emit it with "
			"pg_logical_emit_message(true, ...)";
	} else {
		ob_json_member member;

		if (ob_json_iter_init(&it, content, content_len)) {
			while ((r = ob_json_iter_next(&it, &member)) == 1) {
				if (src.members_len == MAX_MESSAGE_FIELDS) {
					r = -1;
					break;
				}
				src.members[src.members_len++] = member;
			}
		}
		if (r != 0) {
			reason = "bad-message";
			error = "logical message content is not a JSON object (of at most 64 "
				"members)";
		}
	}
	if (reason != NULL) {
		ob_event_begin_dlq(ev, cfg->outbox.dlq_topic, reason, error, msg->lsn);
		ev->timestamp_ms = commit_ms;
		ev->value = ob_event_put(ev, content, content_len);
		ev->has_value = true;
		result = OB_MAP_DLQ;
	} else {
		result = map_fields(m, &src, msg->lsn, commit_ms, ev);
	}
	return result;
}

ob_map_result
ob_mapper_map_message(ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms, ob_event *ev)
{
	/* The content is a JSON string holding the message's JSON text. */
	ob_logical_message msg = {
	    .lsn = rec->lsn,
	    .transactional = rec->transactional,
	    .prefix = rec->prefix,
	    .prefix_too_long = rec->prefix_too_long,
	    .content = rec->content,
	    .content_len = rec->content_len,
	    .content_escaped = rec->content_escaped,
	};

	if (rec->action != OB_W2J_MESSAGE)
		return OB_MAP_SKIP;
	return ob_mapper_map_logical_message(m, &msg, commit_ms, ev);
}

ob_map_result
ob_mapper_map_text_row(ob_mapper *m, const ob_text_row *row, ob_lsn lsn, int64_t fallback_ms,
		       ob_event *ev)
{
	field_source src = {.text_row = row};

	return map_fields(m, &src, lsn, fallback_ms, ev);
}
