/*
 * jsontext.c: a small scanner over JSON text that yields the raw spans of
 * an object's members, and the decoder of JSON string escapes.
 */
#include "outboxd/jsontext.h"

#include <string.h>

/* Nesting deeper than this is refused rather than scanned. */

static void
skip_ws(const char *s, size_t len, size_t *pos)
{
	while (*pos < len &&
	       (s[*pos] == ' ' || s[*pos] == '\t' || s[*pos] == '\n' || s[*pos] == '\r'))
		(*pos)++;
}

/* True if s[0..len) holds a control character (not allowed raw in a JSON
 * string). Written as a reduction so the compiler can vectorise it. */
static bool
has_control(const char *s, size_t len)
{
	unsigned char bad = 0;

	for (size_t i = 0; i < len; i++)
		bad |= (unsigned char)s[i] < 0x20;
	return bad != 0;
}

/* Scan the string starting at s[*pos] == '"'; *pos ends after the closing
 * quote. memchr finds each candidate quote; an odd run of backslashes
 * before it escapes it. */
static bool
scan_string(const char *s, size_t len, size_t *pos, bool *escaped)
{
	const char *start = s + *pos + 1, *end = s + len, *p = start;

	for (;;) {
		const char *q = memchr(p, '"', (size_t)(end - p));
		const char *b;

		if (q == NULL)
			return false;
		for (b = q; b > start && b[-1] == '\\'; b--)
			;
		if (((q - b) & 1) == 0) {
			if (has_control(start, (size_t)(q - start)))
				return false;
			*escaped = memchr(start, '\\', (size_t)(q - start)) != NULL;
			*pos = (size_t)(q + 1 - s);
			return true;
		}
		p = q + 1;
	}
}

/* Scan one value (string, object, array or bare literal/number); for a
 * string, *escaped says whether it holds escapes. */
static bool
scan_value(const char *s, size_t len, size_t *pos, bool *escaped, int max_depth)
{
	char stack[OB_JSON_DEPTH_LIMIT]; /* the closing bracket each open one expects */
	int depth = 0;
	bool inner_escaped;

	do {
		skip_ws(s, len, pos);
		if (*pos >= len)
			return false;
		char c = s[*pos];

		if (c == '"') {
			if (!scan_string(s, len, pos, depth == 0 ? escaped : &inner_escaped))
				return false;
		} else if (c == '{' || c == '[') {
			if (depth == max_depth || depth == OB_JSON_DEPTH_LIMIT)
				return false;
			stack[depth++] = c == '{' ? '}' : ']';
			(*pos)++;
			continue;
		} else if (c == '}' || c == ']') {
			if (depth == 0 || stack[depth - 1] != c)
				return false;
			depth--;
			(*pos)++;
		} else if (c == ',' || c == ':') {
			if (depth == 0)
				return false;
			(*pos)++;
			continue;
		} else {
			size_t start = *pos;

			while (*pos < len && strchr(",:]} \t\r\n{[\"", s[*pos]) == NULL)
				(*pos)++;
			if (*pos == start)
				return false;
		}
	} while (depth > 0);
	return true;
}

/* Start iterating a container whose first character must be open. */
static bool
iter_init(ob_json_iter *it, const char *s, size_t len, char open, char close)
{
	it->s = s;
	it->len = len;
	it->pos = 0;
	it->close = close;
	it->done = false;
	it->nested = false;
	it->max_depth = OB_JSON_DEFAULT_DEPTH;
	skip_ws(s, len, &it->pos);
	if (it->pos >= len || s[it->pos] != open)
		return false;
	it->pos++;
	return true;
}

bool
ob_json_iter_init(ob_json_iter *it, const char *s, size_t len)
{
	return iter_init(it, s, len, '{', '}');
}

/* Past the closing bracket. At the top level only white space may
 * follow; a nested container's parent goes on with ob_json_iter_leave(). */
static int
finish(ob_json_iter *it)
{
	it->pos++;
	it->done = true;
	if (it->nested)
		return 0;
	skip_ws(it->s, it->len, &it->pos);
	return it->pos == it->len ? 0 : -1;
}

/* At the start of an entry: 0 (finished) at the closing bracket, -1 at
 * the end of the text, 1 when an entry follows. */
static int
entry_start(ob_json_iter *it)
{
	if (it->done)
		return 0;
	skip_ws(it->s, it->len, &it->pos);
	if (it->pos >= it->len)
		return -1;
	if (it->s[it->pos] == it->close)
		return finish(it);
	return 1;
}

/* After an entry's value: a comma (another entry follows) or the closing
 * bracket (the next call finishes). */
static int
after_entry(ob_json_iter *it)
{
	const char *s = it->s;
	size_t len = it->len;

	skip_ws(s, len, &it->pos);
	if (it->pos < len && s[it->pos] == ',') {
		it->pos++;
		skip_ws(s, len, &it->pos);
		if (it->pos < len && s[it->pos] == it->close)
			return -1; /* trailing comma */
		return 1;
	}
	return it->pos < len && s[it->pos] == it->close ? 1 : -1;
}

/* Scan a value into m's value fields, then the separator after it. */
static int
entry_value(ob_json_iter *it, ob_json_member *m)
{
	const char *s = it->s;
	size_t len = it->len, start = it->pos;

	m->value_escaped = false;
	if (!scan_value(s, len, &it->pos, &m->value_escaped, it->max_depth))
		return -1;
	m->value_is_string = s[start] == '"';
	if (m->value_is_string) {
		m->value = s + start + 1;
		m->value_len = it->pos - start - 2;
	} else {
		m->value = s + start;
		m->value_len = it->pos - start;
	}
	return after_entry(it);
}

int
ob_json_iter_next(ob_json_iter *it, ob_json_member *m)
{
	int r = ob_json_iter_key(it, m);

	return r == 1 ? entry_value(it, m) : r;
}

int
ob_json_iter_key(ob_json_iter *it, ob_json_member *m)
{
	const char *s = it->s;
	size_t len = it->len, start;
	int r = entry_start(it);

	if (r != 1)
		return r;
	if (s[it->pos] != '"')
		return -1;
	start = it->pos;
	if (!scan_string(s, len, &it->pos, &m->name_escaped))
		return -1;
	m->name = s + start + 1;
	m->name_len = it->pos - start - 2;
	skip_ws(s, len, &it->pos);
	if (it->pos >= len || s[it->pos] != ':')
		return -1;
	it->pos++;
	skip_ws(s, len, &it->pos);
	return 1;
}

int
ob_json_iter_value(ob_json_iter *it, ob_json_member *m)
{
	return entry_value(it, m);
}

int
ob_json_array_more(ob_json_iter *it)
{
	return entry_start(it);
}

bool
ob_json_iter_enter(const ob_json_iter *parent, ob_json_iter *child)
{
	char c = parent->pos < parent->len ? parent->s[parent->pos] : '\0';

	if (c != '{' && c != '[')
		return false;
	*child = *parent;
	child->close = c == '{' ? '}' : ']';
	child->pos++;
	child->done = false;
	child->nested = true;
	return true;
}

int
ob_json_iter_leave(ob_json_iter *parent, const ob_json_iter *child)
{
	if (!child->done)
		return -1;
	parent->pos = child->pos;
	return after_entry(parent);
}

bool
ob_json_member_named(const ob_json_member *m, const char *name, size_t name_len)
{
	char buf[256];
	long n;

	if (!m->name_escaped)
		return m->name_len == name_len && memcmp(m->name, name, name_len) == 0;
	if (m->name_len > sizeof(buf))
		return false;
	n = ob_json_unescape(m->name, m->name_len, buf);
	return n == (long)name_len && memcmp(buf, name, name_len) == 0;
}

bool
ob_json_member_is_null(const ob_json_member *m)
{
	return !m->value_is_string && m->value_len == 4 && memcmp(m->value, "null", 4) == 0;
}

static int
hex4(const char *s, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++) {
		int d = ob_hex_digit(s[i]);

		if (d < 0)
			return -1;
		v = (v << 4) | (unsigned)d;
	}
	*out = v;
	return 0;
}

/* Append code point cp as UTF-8. */
static size_t
put_utf8(char *out, unsigned cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

long
ob_json_unescape(const char *s, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned cp, lo;
		const char *bs;

		if (s[i] != '\\') {
			/* Copy the run up to the next backslash at once. */
			bs = memchr(s + i, '\\', len - i);
			size_t run = bs ? (size_t)(bs - (s + i)) : len - i;

			memcpy(out + o, s + i, run);
			o += run;
			i += run - 1;
			continue;
		}
		if (++i >= len)
			return -1;
		switch (s[i]) {
		case '"':
		case '\\':
		case '/':
			out[o++] = s[i];
			break;
		case 'b':
			out[o++] = '\b';
			break;
		case 'f':
			out[o++] = '\f';
			break;
		case 'n':
			out[o++] = '\n';
			break;
		case 'r':
			out[o++] = '\r';
			break;
		case 't':
			out[o++] = '\t';
			break;
		case 'u':
			if (i + 4 >= len || hex4(s + i + 1, &cp) < 0)
				return -1;
			i += 4;
			/* A surrogate pair: \uD8xx\uDCxx. */
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (i + 6 >= len || s[i + 1] != '\\' || s[i + 2] != 'u' ||
				    hex4(s + i + 3, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
					return -1;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				return -1;
			}
			/* Every escape is at least as long as its UTF-8 bytes. */
			o += put_utf8(out + o, cp);
			break;
		default:
			return -1;
		}
	}
	return (long)o;
}
