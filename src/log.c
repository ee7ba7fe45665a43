/*
 * log.c: text or JSON log lines on stderr, one write(2) per line.
 *
 * Lines are formatted into a stack buffer and written whole, so lines from
 * librdkafka's threads never interleave with the main thread's. Long
 * messages are cut at OB_LOG_LINE_MAX bytes.
 */
#include "outboxd/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OB_LOG_LINE_MAX    4096
#define OB_LOG_CONTEXT_MAX 4

/* Atomic: SIGHUP changes them (reload.h) while librdkafka's threads log. */
static _Atomic ob_log_format log_format = OB_LOG_TEXT;
static _Atomic ob_log_level log_level = OB_LOG_INFO;
/* This thread's held lines (ob_log_hold()): NULL when it writes them. */
static _Thread_local char *hold_buf;
static _Thread_local size_t hold_len;
static ob_log_field log_context[OB_LOG_CONTEXT_MAX];

static const char *const level_names[] = {"debug", "info", "warning", "error"};

bool
ob_log_level_parse(const char *s, ob_log_level *out)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(level_names); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (ob_log_level)i;
			return true;
		}
	}
	return false;
}

bool
ob_log_format_parse(const char *s, ob_log_format *out)
{
	if (strcmp(s, "text") == 0)
		*out = OB_LOG_TEXT;
	else if (strcmp(s, "json") == 0)
		*out = OB_LOG_JSON;
	else
		return false;
	return true;
}

void
ob_log_configure(ob_log_format format, ob_log_level level)
{
	atomic_store_explicit(&log_format, format, memory_order_relaxed);
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

bool
ob_log_enabled(ob_log_level level)
{
	return level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

const char *
ob_log_level_name(ob_log_level level)
{
	return level_names[level];
}

void
ob_log_hold(char *buf, size_t len)
{
	hold_buf = len > 0 ? buf : NULL;
	hold_len = len;
	if (hold_buf != NULL)
		hold_buf[0] = '\0';
}

void
ob_log_set_context(const char *key, const char *value)
{
	ob_log_field *free_slot = NULL;

	for (size_t i = 0; i < OB_LOG_CONTEXT_MAX; i++) {
		ob_log_field *f = &log_context[i];

		if (f->key != NULL && strcmp(f->key, key) == 0) {
			free((char *)f->value);
			f->value = value ? ob_xstrdup(value) : NULL;
			return;
		}
		if (f->key == NULL && free_slot == NULL)
			free_slot = f;
	}
	if (free_slot != NULL && value != NULL) {
		free_slot->key = ob_xstrdup(key);
		free_slot->value = ob_xstrdup(value);
	}
}

/*
 * A bounded string builder over a fixed buffer. Pieces are appended whole
 * or not at all, so a cut line never ends inside an escape sequence; the
 * few closing characters (a quote, the brace, the newline) are forced into
 * a reserve past cap, so a cut JSON line is still one valid object.
 */
#define OB_LOG_RESERVE 8

typedef struct line_buf {
	char *p;
	size_t len;
	size_t cap;
	bool json; /* the line's format, read once: a reload may change it meanwhile */
} line_buf;

static bool
lb_put_n(line_buf *lb, const char *s, size_t n)
{
	if (lb->len + n > lb->cap)
		return false;
	memcpy(lb->p + lb->len, s, n);
	lb->len += n;
	return true;
}

static void
lb_puts(line_buf *lb, const char *s)
{
	(void)lb_put_n(lb, s, strlen(s));
}

/* Append a closing character even past cap (into the reserve). */
static void
lb_force(line_buf *lb, char c)
{
	lb->p[lb->len++] = c;
}

/* True if at least n more bytes fit. */
static bool
lb_room(const line_buf *lb, size_t n)
{
	return lb->len + n <= lb->cap;
}

/* Append s as the inside of a JSON string, escape by escape. */
static void
lb_put_json_escaped(line_buf *lb, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		size_t n;

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			n = 2;
		} else if (c == '\n') {
			n = (size_t)snprintf(esc, sizeof(esc), "\\n");
		} else if (c == '\t') {
			n = (size_t)snprintf(esc, sizeof(esc), "\\t");
		} else if (c < 0x20) {
			n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c);
		} else {
			esc[0] = (char)c;
			n = 1;
		}
		if (!lb_put_n(lb, esc, n))
			return;
	}
}

static void
lb_put_field(line_buf *lb, const ob_log_field *f)
{
	if (f->key == NULL || f->value == NULL)
		return;
	if (lb->json) {
		/* Start a field only if its escaped key and opening fit. */
		if (!lb_room(lb, strlen(f->key) * 6 + 8))
			return;
		lb_puts(lb, ",\"");
		lb_put_json_escaped(lb, f->key);
		lb_puts(lb, "\":\"");
		lb_put_json_escaped(lb, f->value);
		lb_force(lb, '"');
	} else {
		lb_puts(lb, " ");
		lb_puts(lb, f->key);
		lb_puts(lb, "=");
		lb_puts(lb, f->value);
	}
}

/* Format and write one line. fmt is a printf format whose arguments are
 * in ap; the attribute lets the compiler know it is checked at the callers
 * of ob_log() and ob_log_kv(). */
static void log_emit(ob_log_level level, const ob_log_field *fields, const char *fmt, va_list ap)
    OB_PRINTF(3, 0);

static void
log_emit(ob_log_level level, const ob_log_field *fields, const char *fmt, va_list ap)
{
	char buf[OB_LOG_LINE_MAX + OB_LOG_RESERVE];
	char msg[OB_LOG_LINE_MAX];
	char ts[40];
	line_buf lb = {buf, 0, OB_LOG_LINE_MAX,
		       atomic_load_explicit(&log_format, memory_order_relaxed) == OB_LOG_JSON};
	struct timeval tv;
	struct tm tm;

	if (!ob_log_enabled(level))
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* One event per line: fold the newlines libpq puts in its messages. */
	for (char *c = msg; *c; c++) {
		if (*c == '\n' || *c == '\t' || *c == '\r')
			*c = ' ';
	}
	if (hold_buf != NULL && level >= OB_LOG_WARNING) {
		size_t used = strlen(hold_buf);

		snprintf(hold_buf + used, hold_len - used, "%s%s", used > 0 ? "; " : "", msg);
		return;
	}

	if (lb.json) {
		lb_puts(&lb, "{\"ts\":\"");
		lb_puts(&lb, ts);
		snprintf(ts, sizeof(ts), ".%03ldZ", (long)(tv.tv_usec / 1000));
		lb_puts(&lb, ts);
		lb_puts(&lb, "\",\"level\":\"");
		lb_puts(&lb, level_names[level]);
		lb_puts(&lb, "\",\"msg\":\"");
		lb_put_json_escaped(&lb, msg);
		lb_force(&lb, '"');
	} else {
		lb_puts(&lb, ts);
		snprintf(ts, sizeof(ts), ".%03ldZ ", (long)(tv.tv_usec / 1000));
		lb_puts(&lb, ts);
		lb_puts(&lb, level_names[level]);
		lb_puts(&lb, ": ");
		lb_puts(&lb, msg);
	}
	for (size_t i = 0; fields != NULL && fields[i].key != NULL; i++)
		lb_put_field(&lb, &fields[i]);
	for (size_t i = 0; i < OB_LOG_CONTEXT_MAX; i++)
		lb_put_field(&lb, &log_context[i]);
	if (lb.json)
		lb_force(&lb, '}');
	lb_force(&lb, '\n');
	if (write(STDERR_FILENO, buf, lb.len) < 0) {
		/* Nowhere left to report a failing stderr. */
	}
}

void
ob_log(ob_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(level, NULL, fmt, ap);
	va_end(ap);
}

void
ob_log_kv(ob_log_level level, const ob_log_field *fields, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(level, fields, fmt, ap);
	va_end(ap);
}

void
ob_log_lsn(ob_log_level level, ob_lsn lsn, const char *topic, size_t topic_len, const char *fmt,
	   ...)
{
	char lsn_text[OB_LSN_BUFLEN], topic_text[256];
	ob_log_field fields[3] = {
	    {"lsn", ob_lsn_format(lsn, lsn_text)}, {NULL, NULL}, {NULL, NULL}};
	va_list ap;

	if (!ob_log_enabled(level))
		return;
	if (topic != NULL) {
		snprintf(topic_text, sizeof(topic_text), "%.*s", (int)topic_len, topic);
		fields[1] = (ob_log_field){"topic", topic_text};
	}
	va_start(ap, fmt);
	log_emit(level, fields, fmt, ap);
	va_end(ap);
}

/* Mask the value after "password=" in keyword/value conninfo, honouring
 * single quotes and backslash escapes the way libpq reads them. */
static void
mask_keyword_value(char *s)
{
	char *p = s;

	while ((p = strstr(p, "password")) != NULL) {
		char *q = p + strlen("password");
		/* "password" and "sslpassword" are the keywords with secrets. */
		const char *word = (p - s >= 3 && strncmp(p - 3, "ssl", 3) == 0) ? p - 3 : p;
		bool at_word_start = (word == s || word[-1] == ' ' || word[-1] == '\t');

		while (*q == ' ' || *q == '\t')
			q++;
		if (!at_word_start || *q != '=') {
			p = q;
			continue;
		}
		q++;
		while (*q == ' ' || *q == '\t')
			q++;
		char *end = q;
		if (*end == '\'') {
			end++;
			while (*end && *end != '\'') {
				if (*end == '\\' && end[1])
					end++;
				end++;
			}
			if (*end)
				end++;
		} else {
			while (*end && *end != ' ' && *end != '\t')
				end++;
		}
		memmove(q + 4, end, strlen(end) + 1);
		memcpy(q, "****", 4);
		p = q + 4;
	}
}

/* Mask "user:password@" and "password=" query parameters in a URI. */
static void
mask_uri(char *s)
{
	char *auth = strstr(s, "://");
	char *at, *colon, *query;

	if (auth != NULL) {
		auth += 3;
		at = strpbrk(auth, "@/?");
		if (at != NULL && *at == '@') {
			colon = memchr(auth, ':', (size_t)(at - auth));
			if (colon != NULL) {
				memmove(colon + 5, at, strlen(at) + 1);
				memcpy(colon + 1, "****", 4);
			}
		}
	}
	query = strchr(s, '?');
	while (query != NULL) {
		char *p = strstr(query, "password=");
		char *end;

		if (p == NULL)
			break;
		p += strlen("password=");
		end = strchr(p, '&');
		if (end == NULL)
			end = p + strlen(p);
		memmove(p + 4, end, strlen(end) + 1);
		memcpy(p, "****", 4);
		query = p + 4;
	}
}

char *
ob_log_mask_conninfo(const char *conninfo)
{
	/* Masking can lengthen a value shorter than "****": leave room. */
	size_t len = strlen(conninfo);
	char *out = ob_xmalloc(len * 2 + 16);

	memcpy(out, conninfo, len + 1);
	if (strncmp(out, "postgresql://", 13) == 0 || strncmp(out, "postgres://", 11) == 0)
		mask_uri(out);
	else
		mask_keyword_value(out);
	return out;
}
