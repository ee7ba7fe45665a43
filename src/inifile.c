/*
 * inifile.c: INI files of any line length through inih (inifile.h).
 */
#include "outboxd/inifile.h"
#include "outboxd/common.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lines at least this long are rewritten: inih reads 199 characters of a
 * line at most, the newline among them. */
#define LONG_LINE 160

/* The byte that starts a placeholder ("\x1e<index>"). */
#define MARK '\x1e'

typedef struct long_values {
	ini_handler handler;
	void *user;
	char **values;
	size_t len;
} long_values;

static int
restore(void *user, const char *section, const char *name, const char *value)
{
	long_values *lv = user;

	if (value != NULL && value[0] == MARK) {
		size_t i = strtoul(value + 1, NULL, 10);

		if (i < lv->len)
			value = lv->values[i];
	}
	return lv->handler(lv->user, section, name, value);
}

/* A value as inih leaves it: up to an inline comment (';' after a space
 * or tab) unless it continues a value (inih cuts none there), without the
 * spaces around it. */
static char *
inih_value(const char *s, size_t n, bool continuation)
{
	const char *end = s + n;

	for (const char *p = s; p < end && !continuation; p++) {
		if (*p == ';' && p > s && (p[-1] == ' ' || p[-1] == '\t')) {
			end = p;
			break;
		}
	}
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		end--;
	return ob_xstrndup(s, (size_t)(end - s));
}

/* Whether inih holds a name after line (n bytes, no newline), named
 * saying whether it held one before: inih reads an indented line as the
 * continuation of that name's value, but as a name = value line when it
 * holds none (at the start of the file, after a [section] line). */
static bool
after_line(const char *line, size_t n, bool first, bool named)
{
	const char *p = line, *end = line + n;
	bool was_space = false;

	if (first && n >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0)
		p += 3; /* inih skips a BOM on the first line */
	while (p < end && isspace((unsigned char)*p))
		p++;
	if (p == end || *p == ';' || *p == '#')
		return named;
	if (named && p > line)
		return named; /* a continuation */
	if (*p == '[') {
		for (const char *q = p + 1; q < end && !(was_space && *q == ';'); q++) {
			if (*q == ']')
				return false;
			was_space = isspace((unsigned char)*q);
		}
		return named; /* an error line */
	}
	for (const char *q = p; q < end && !(was_space && *q == ';'); q++) {
		if (*q == '=' || *q == ':')
			return q > p; /* a name (inih keeps "" for "= v": none) */
		was_space = isspace((unsigned char)*q);
	}
	return named; /* an error line */
}

/* Write line (n bytes, no newline) to out as inih can read it, keeping
 * its value in lv when it is long; named: whether inih holds a name (an
 * indented line continues its value). */
static void
rewrite_line(const char *line, size_t n, bool named, long_values *lv, FILE *out)
{
	const char *start = line, *sep;
	bool continuation = false;
	size_t lead;

	if (n < LONG_LINE) {
		fwrite(line, 1, n, out);
		return;
	}
	while (start < line + n && (*start == ' ' || *start == '\t'))
		start++;
	lead = (size_t)(start - line);
	if (start < line + n && (*start == ';' || *start == '#'))
		return; /* a comment: an empty line */
	if (lead > 0 && named) {
		sep = start - 1; /* a continuation line: all of it is value */
		continuation = true;
	} else {
		sep = start;
		while (sep < line + n && *sep != '=' && *sep != ':')
			sep++;
		if (sep == line + n || *start == '[' || sep - line >= LONG_LINE / 2) {
			fwrite(line, 1, n, out); /* inih judges it */
			return;
		}
	}
	lv->values = ob_xrealloc(lv->values, (lv->len + 1) * sizeof(*lv->values));
	lv->values[lv->len] = inih_value(sep + 1, (size_t)(line + n - sep - 1), continuation);
	fwrite(line, 1, (size_t)(sep + 1 - line), out);
	fprintf(out, " %c%zu", MARK, lv->len++);
}

int
ob_ini_parse(const char *path, ini_handler handler, void *user)
{
	long_values lv = {handler, user, NULL, 0};
	FILE *in = fopen(path, "r"), *out;
	char *line = NULL, *text = NULL;
	size_t cap = 0, size = 0;
	ssize_t n;
	int rc = 0, lineno = 0, read_errno = 0;
	bool named = false;

	if (in == NULL)
		return -1;
	out = open_memstream(&text, &size);
	if (out == NULL)
		abort();
	while ((n = getline(&line, &cap, in)) > 0) {
		size_t len = (size_t)n;

		lineno++;
		if (memchr(line, MARK, len) != NULL && rc == 0)
			rc = lineno;
		if (line[len - 1] == '\n')
			len--;
		rewrite_line(line, len, named, &lv, out);
		named = after_line(line, len, lineno == 1, named);
		fputc('\n', out);
	}
	if (ferror(in)) {
		read_errno = errno;
		rc = -1;
	}
	fclose(in);
	fclose(out);
	if (rc == 0)
		rc = ini_parse_string(text, restore, &lv);
	for (size_t i = 0; i < lv.len; i++) {
		explicit_bzero(lv.values[i], strlen(lv.values[i]));
		free(lv.values[i]);
	}
	free(lv.values);
	free(line);
	explicit_bzero(text, size);
	free(text);
	if (rc < 0)
		errno = read_errno;
	return rc;
}
