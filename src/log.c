/*
 * log.c: text or JSON log lines on stderr, one write(2) per line.
 *
 * Lines are formatted into a stack buffer and written whole, so lines from
 * librdkafka's threads never interleave with the main thread's. Long
 * messages are cut at OB_LOG_LINE_MAX bytes.
 */
#include "outboxd/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OB_LOG_LINE_MAX 4096
#define OB_LOG_CONTEXT_MAX 4

static ob_log_format log_format = OB_LOG_TEXT;
static ob_log_level log_level = OB_LOG_INFO;
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
	log_format = format;
	log_level = level;
}

bool
ob_log_enabled(ob_log_level level)
{
	return level >= log_level;
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

/* A bounded string builder over a fixed buffer; output past the end is cut. */
typedef struct line_buf {
	char *p;
	size_t len;
	size_t cap;
} line_buf;

static void
lb_putc(line_buf *lb, char c)
{
	if (lb->len + 1 < lb->cap)
		lb->p[lb->len++] = c;
}

static void
lb_puts(line_buf *lb, const char *s)
{
	while (*s)
		lb_putc(lb, *s++);
}

/* Append s as the inside of a JSON string. */
static void
lb_put_json_escaped(line_buf *lb, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			lb_putc(lb, '\\');
			lb_putc(lb, (char)c);
		} else if (c == '\n') {
			lb_puts(lb, "\\n");
		} else if (c == '\t') {
			lb_puts(lb, "\\t");
		} else if (c < 0x20) {
			char esc[8];

			snprintf(esc, sizeof(esc), "\\u%04x", c);
			lb_puts(lb, esc);
		} else {
			lb_putc(lb, (char)c);
		}
	}
}

static void
lb_put_field(line_buf *lb, const ob_log_field *f)
{
	if (f->key == NULL || f->value == NULL)
		return;
	if (log_format == OB_LOG_JSON) {
		lb_puts(lb, ",\"");
		lb_put_json_escaped(lb, f->key);
		lb_puts(lb, "\":\"");
		lb_put_json_escaped(lb, f->value);
		lb_putc(lb, '"');
	} else {
		lb_putc(lb, ' ');
		lb_puts(lb, f->key);
		lb_putc(lb, '=');
		lb_puts(lb, f->value);
	}
}

static void
log_emit(ob_log_level level, const ob_log_field *fields, const char *fmt, va_list ap)
{
	char buf[OB_LOG_LINE_MAX];
	char msg[OB_LOG_LINE_MAX];
	char ts[40];
	line_buf lb = {buf, 0, sizeof(buf) - 1};
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

	if (log_format == OB_LOG_JSON) {
		lb_puts(&lb, "{\"ts\":\"");
		lb_puts(&lb, ts);
		snprintf(ts, sizeof(ts), ".%03ldZ", (long)(tv.tv_usec / 1000));
		lb_puts(&lb, ts);
		lb_puts(&lb, "\",\"level\":\"");
		lb_puts(&lb, level_names[level]);
		lb_puts(&lb, "\",\"msg\":\"");
		lb_put_json_escaped(&lb, msg);
		lb_putc(&lb, '"');
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
	if (log_format == OB_LOG_JSON) {
		/* Keep the object closed even when the line was cut. */
		if (lb.len >= lb.cap - 2)
			lb.len = lb.cap - 3;
		lb_putc(&lb, '}');
	}
	buf[lb.len++] = '\n';
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

/* Mask the value after "password=" in keyword/value conninfo, honouring
 * single quotes and backslash escapes the way libpq reads them. */
static void
mask_keyword_value(char *s)
{
	char *p = s;

	while ((p = strstr(p, "password")) != NULL) {
		char *q = p + strlen("password");
		bool at_word_start = (p == s || p[-1] == ' ' || p[-1] == '\t');

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
