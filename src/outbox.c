/*
 * outbox.c: outbox row or logical message -> Kafka record (SPEC.md §3).
 *
 * Both sources are read through one accessor, get_field(): a row's column
 * from the wal2json record (with its Postgres type) or a member of the
 * message's JSON object (typed by its JSON kind). Everything after that is
 * shared, so a row and a message with the same content map to the same
 * record.
 */
#include "outboxd/outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ob_event_init(ob_event *ev)
{
	memset(ev, 0, sizeof(*ev));
}

void
ob_event_free(ob_event *ev)
{
	free(ev->buf);
	memset(ev, 0, sizeof(*ev));
}

void
ob_event_reset(ob_event *ev)
{
	char *buf = ev->buf;
	size_t cap = ev->buf_cap;

	memset(ev, 0, sizeof(*ev));
	ev->buf = buf;
	ev->buf_cap = cap;
}

/* Make room for len more bytes and return where they go. */
static char *
event_reserve(ob_event *ev, size_t len)
{
	if (ev->buf_len + len > ev->buf_cap) {
		size_t cap = ev->buf_cap ? ev->buf_cap : 1024;

		while (cap < ev->buf_len + len)
			cap *= 2;
		ev->buf = ob_xrealloc(ev->buf, cap);
		ev->buf_cap = cap;
	}
	return ev->buf + ev->buf_len;
}

ob_span
ob_event_put(ob_event *ev, const void *data, size_t len)
{
	ob_span s = {ev->buf_len, len};

	if (len > 0)
		memcpy(event_reserve(ev, len), data, len);
	ev->buf_len += len;
	return s;
}

/* Add a header whose value is already in the buffer. The name is stored
 * NUL-terminated, as librdkafka wants it. */
static bool
add_header_span(ob_event *ev, const char *name, ob_span value)
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
	return add_header_span(ev, name, ob_event_put(ev, value, value_len));
}

void
ob_event_begin_dlq(ob_event *ev, const ob_config *cfg, const char *reason, const char *error,
		   ob_lsn source_lsn)
{
	char lsn[OB_LSN_BUFLEN];

	ob_event_reset(ev);
	ev->dlq_reason = reason;
	ev->topic = ob_event_put(ev, cfg->outbox.dlq_topic, strlen(cfg->outbox.dlq_topic));
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
ob_event_build_dlq(ob_event *out, const ob_config *cfg, const char *reason, const char *error,
		   ob_lsn source_lsn, const ob_record_view *orig, bool value_too_large)
{
	ob_event_begin_dlq(out, cfg, reason, error, source_lsn);
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
	if (orig->has_key) {
		out->key = ob_event_put(out, orig->key, orig->key_len);
		out->has_key = true;
	}
	if (orig->has_value && !value_too_large) {
		out->value = ob_event_put(out, orig->value, orig->value_len);
		out->has_value = true;
	}
}

void
ob_mapper_init(ob_mapper *m, const ob_config *cfg)
{
	m->cfg = cfg;
}

/* Where the fields of one outbox event come from. */
typedef struct field_source {
	const ob_w2j_record *row; /* an I record, or NULL */
	json_t *message;          /* a message's content object, or NULL */
} field_source;

/* Look a field up by name. type is the Postgres type for rows, NULL for
 * messages. value is borrowed; JSON null stands for SQL NULL. */
static bool
get_field(const field_source *src, const char *name, const char **type, json_t **value)
{
	if (src->row != NULL)
		return ob_w2j_column(src->row, name, type, value);
	*type = NULL;
	*value = json_object_get(src->message, name);
	return *value != NULL;
}

static bool
type_is(const char *type, const char *prefix)
{
	return type != NULL && strncmp(type, prefix, strlen(prefix)) == 0;
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Append the hex string s decoded; false if it is not valid hex. */
static bool
put_hex_decoded(ob_event *ev, const char *s, size_t len, ob_span *out)
{
	char *dst;

	if (len % 2 != 0)
		return false;
	dst = event_reserve(ev, len / 2);
	for (size_t i = 0; i < len; i += 2) {
		int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		dst[i / 2] = (char)(hi << 4 | lo);
	}
	out->off = ev->buf_len;
	out->len = len / 2;
	ev->buf_len += len / 2;
	return true;
}

/* Append a JSON value as JSON text. */
static ob_span
put_json_text(ob_event *ev, json_t *value)
{
	const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
	size_t need = json_dumpb(value, NULL, 0, flags);
	ob_span s = {ev->buf_len, need};

	json_dumpb(value, event_reserve(ev, need), need, flags);
	ev->buf_len += need;
	return s;
}

typedef enum field_status {
	FIELD_OK,
	FIELD_MISSING,
	FIELD_NULL,
	FIELD_UNDECODABLE,
} field_status;

/*
 * Append the bytes a field stands for (SPEC §3): json/jsonb values as their
 * JSON text (wal2json sends them as a string holding that text), bytea as
 * its raw bytes, other strings as they are, numbers and booleans as their
 * text, and for messages objects and arrays as JSON text.
 */
static field_status
put_field(ob_event *ev, const field_source *src, const char *name, ob_span *out)
{
	const char *type;
	json_t *value;

	if (!get_field(src, name, &type, &value))
		return FIELD_MISSING;
	if (json_is_null(value))
		return FIELD_NULL;
	if (json_is_string(value)) {
		const char *s = json_string_value(value);
		size_t len = json_string_length(value);

		if (type_is(type, "bytea"))
			return put_hex_decoded(ev, s, len, out) ? FIELD_OK : FIELD_UNDECODABLE;
		*out = ob_event_put(ev, s, len);
		return FIELD_OK;
	}
	*out = put_json_text(ev, value);
	return FIELD_OK;
}

/* Expand the topic template; on failure *missing names the column. */
static bool
put_topic(ob_event *ev, const field_source *src, const char *tpl, char *missing,
	  size_t missing_len)
{
	size_t start = ev->buf_len;
	const char *p = tpl;

	while (*p) {
		const char *open = strchr(p, '{');
		const char *close;
		ob_span piece;
		char name[256];
		size_t name_len;

		if (open == NULL) {
			ob_event_put(ev, p, strlen(p));
			break;
		}
		ob_event_put(ev, p, (size_t)(open - p));
		close = strchr(open, '}'); /* the config checked it is there */
		name_len = (size_t)(close - open - 1);
		if (name_len >= sizeof(name))
			name_len = sizeof(name) - 1;
		memcpy(name, open + 1, name_len);
		name[name_len] = '\0';
		if (put_field(ev, src, name, &piece) != FIELD_OK) {
			snprintf(missing, missing_len, "%s", name);
			return false;
		}
		p = close + 1;
	}
	ev->topic.off = start;
	ev->topic.len = ev->buf_len - start;
	return true;
}

/* Copy a span's bytes out to the heap, so they survive resetting ev. */
static char *
span_dup(const ob_event *ev, ob_span s)
{
	return ob_xstrndup(ob_event_ptr(ev, s), s.len);
}

/* Add the members of the headers object (SPEC §3). False if the value is
 * not a JSON object or has too many members. */
static bool
add_object_headers(ob_event *ev, json_t *obj)
{
	const char *name;
	json_t *v;

	if (!json_is_object(obj))
		return false;
	json_object_foreach(obj, name, v)
	{
		ob_span text;

		if (json_is_string(v))
			text = ob_event_put(ev, json_string_value(v), json_string_length(v));
		else
			text = put_json_text(ev, v);
		if (!add_header_span(ev, name, text))
			return false;
	}
	return true;
}

/* Parse the headers field into an object; NULL/missing gives no headers
 * (returns true with *out NULL), anything but an object gives false. The
 * caller decrefs *out. */
static bool
read_headers(const field_source *src, const char *column, json_t **out)
{
	const char *type;
	json_t *value;

	*out = NULL;
	if (column[0] == '\0' || !get_field(src, column, &type, &value) || json_is_null(value))
		return true;
	if (json_is_string(value)) {
		*out = json_loadb(json_string_value(value), json_string_length(value),
				  JSON_DECODE_ANY, NULL);
	} else {
		*out = json_incref(value);
	}
	return json_is_object(*out);
}

static int64_t
read_timestamp(const field_source *src, const char *column, int64_t commit_ms)
{
	const char *type;
	json_t *value;
	int64_t ms;

	if (column[0] == '\0' || !get_field(src, column, &type, &value))
		return commit_ms;
	if (json_is_integer(value))
		return (int64_t)json_integer_value(value);
	if (json_is_string(value) && ob_pg_timestamp_to_ms(json_string_value(value), &ms))
		return ms;
	return commit_ms;
}

/*
 * The shared mapping. On a bad event the partially built record is turned
 * into a dead-letter record that keeps what could be read: the key, the id
 * and type headers, the headers object, and the payload (raw, if it could
 * not be decoded).
 */
static ob_map_result
map_fields(const ob_mapper *m, const field_source *src, ob_lsn lsn, int64_t commit_ms,
	   ob_event *ev)
{
	const ob_config *cfg = m->cfg;
	const char *reason = NULL;
	char error[512] = "";
	char missing[256];
	ob_span id = {0, 0}, type = {0, 0};
	bool has_id = false, has_type = false, headers_ok;
	json_t *headers = NULL;
	field_status st;

	ob_event_reset(ev);
	ev->timestamp_ms = read_timestamp(src, cfg->outbox.timestamp_column, commit_ms);

	st = put_field(ev, src, cfg->outbox.key_column, &ev->key);
	ev->has_key = st == FIELD_OK;
	if (!ev->has_key && reason == NULL) {
		reason = "missing-key";
		snprintf(error, sizeof(error), "key column %s is %s", cfg->outbox.key_column,
			 st == FIELD_NULL ? "null" : "missing");
	}
	st = put_field(ev, src, cfg->outbox.id_column, &id);
	has_id = st == FIELD_OK;
	if (!has_id && reason == NULL) {
		reason = "missing-id";
		snprintf(error, sizeof(error), "id column %s is %s", cfg->outbox.id_column,
			 st == FIELD_NULL ? "null" : "missing");
	}
	if (cfg->outbox.type_column[0] != '\0')
		has_type = put_field(ev, src, cfg->outbox.type_column, &type) == FIELD_OK;

	st = put_field(ev, src, cfg->outbox.payload_column, &ev->value);
	ev->has_value = st == FIELD_OK;
	if (st == FIELD_UNDECODABLE && reason == NULL) {
		const char *t;
		json_t *raw;

		reason = "bad-payload";
		snprintf(error, sizeof(error), "payload column %s could not be decoded",
			 cfg->outbox.payload_column);
		/* Keep the undecoded text as the dead-letter value. */
		if (get_field(src, cfg->outbox.payload_column, &t, &raw) && json_is_string(raw)) {
			ev->value = ob_event_put(ev, json_string_value(raw), json_string_length(raw));
			ev->has_value = true;
		}
	}

	headers_ok = read_headers(src, cfg->outbox.headers_column, &headers);
	if (!headers_ok && reason == NULL) {
		reason = "bad-headers";
		snprintf(error, sizeof(error), "headers column %s is not a JSON object",
			 cfg->outbox.headers_column);
	}

	if (reason == NULL && !put_topic(ev, src, cfg->outbox.topic, missing, sizeof(missing))) {
		reason = "missing-topic-column";
		snprintf(error, sizeof(error), "topic template %s names column %s, which is "
			 "missing or null", cfg->outbox.topic, missing);
	}

	if (reason == NULL) {
		ev->headers_len = 0;
		(void)add_header_span(ev, "id", id);
		if (has_type)
			(void)add_header_span(ev, "type", type);
		if (headers != NULL && !add_object_headers(ev, headers)) {
			reason = "bad-headers";
			snprintf(error, sizeof(error), "headers column %s has more than %d members",
				 cfg->outbox.headers_column, OB_EVENT_MAX_HEADERS - 2);
		}
	}
	if (reason != NULL) {
		/* Save what the dead-letter record keeps, then rebuild ev. */
		char *key = ev->has_key ? span_dup(ev, ev->key) : NULL;
		char *idv = has_id ? span_dup(ev, id) : NULL;
		char *typev = has_type ? span_dup(ev, type) : NULL;
		char *value = ev->has_value ? span_dup(ev, ev->value) : NULL;
		size_t key_len = ev->key.len, id_len = id.len, type_len = type.len;
		size_t value_len = ev->value.len;
		int64_t ts = ev->timestamp_ms;

		ob_event_begin_dlq(ev, cfg, reason, error, lsn);
		ev->timestamp_ms = ts;
		if (idv != NULL)
			(void)ob_event_add_header(ev, "id", idv, id_len);
		if (typev != NULL)
			(void)ob_event_add_header(ev, "type", typev, type_len);
		if (headers_ok && headers != NULL)
			(void)add_object_headers(ev, headers);
		if (key != NULL) {
			ev->key = ob_event_put(ev, key, key_len);
			ev->has_key = true;
		}
		if (value != NULL) {
			ev->value = ob_event_put(ev, value, value_len);
			ev->has_value = true;
		}
		free(key);
		free(idv);
		free(typev);
		free(value);
	}
	if (headers != NULL)
		json_decref(headers);
	return reason == NULL ? OB_MAP_EVENT : OB_MAP_DLQ;
}

ob_map_result
ob_mapper_map_insert(const ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
		     ob_event *ev)
{
	const ob_config *cfg = m->cfg;
	field_source src = {rec, NULL};

	if (rec->action != OB_W2J_INSERT || strcmp(rec->table, cfg->outbox.table_name) != 0 ||
	    (rec->schema != NULL && strcmp(rec->schema, cfg->outbox.schema) != 0))
		return OB_MAP_SKIP;
	return map_fields(m, &src, rec->lsn, commit_ms, ev);
}

ob_map_result
ob_mapper_map_message(const ob_mapper *m, const ob_w2j_record *rec, int64_t commit_ms,
		      ob_event *ev)
{
	const ob_config *cfg = m->cfg;
	const char *reason = NULL, *error = NULL;
	field_source src = {NULL, NULL};
	ob_map_result result;

	if (rec->action != OB_W2J_MESSAGE || cfg->outbox.message_prefix[0] == '\0' ||
	    strcmp(rec->prefix, cfg->outbox.message_prefix) != 0)
		return OB_MAP_SKIP;
	if (!rec->transactional) {
		reason = "non-transactional-message";
		error = "logical message is not transactional: emit it with "
			"pg_logical_emit_message(true, ...)";
	} else {
		src.message = json_loadb(rec->content, rec->content_len, 0, NULL);
		if (!json_is_object(src.message)) {
			reason = "bad-message";
			error = "logical message content is not a JSON object";
		}
	}
	if (reason != NULL) {
		ob_event_begin_dlq(ev, cfg, reason, error, rec->lsn);
		ev->timestamp_ms = commit_ms;
		ev->value = ob_event_put(ev, rec->content, rec->content_len);
		ev->has_value = true;
		result = OB_MAP_DLQ;
	} else {
		result = map_fields(m, &src, rec->lsn, commit_ms, ev);
	}
	if (src.message != NULL)
		json_decref(src.message);
	return result;
}
