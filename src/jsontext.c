/*
 * jsontext.c: a small scanner over JSON text that yields the raw spans of
 * an object's members, and the decoder of JSON string escapes.
 */
#include "outboxd/jsontext.h"

#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Nesting deeper than this is refused rather than scanned. */

static void
skip_ws(const char *s, size_t len, size_t *pos)
{
	while (*pos < len &&
	       (s[*pos] == ' ' || s[*pos] == '\t' || s[*pos] == '\n' || s[*pos] == '\r'))
		(*pos)++;
}

/*
 * Word-at-a-time search (8 bytes per step, portable C): a word "has" a
 * byte when the classic zero-byte test of the word XORed with that byte
 * fires. Each test is exact about whether such a byte is in the word, and
 * its lowest flag is exact about where the first one is: on little-endian
 * machines the search jumps there, elsewhere it steps byte by byte.
 */
#define WORD_ONES  UINT64_C(0x0101010101010101)
#define WORD_HIGHS UINT64_C(0x8080808080808080)

static inline uint64_t
word_at(const char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	return w;
}

/* The high bit of each byte of w below n (n <= 128), exact up to the
 * first such byte. */
static inline uint64_t
word_below(uint64_t w, unsigned n)
{
	return (w - WORD_ONES * n) & ~w & WORD_HIGHS;
}

/* The same for the bytes of w equal to c. */
static inline uint64_t
word_equal(uint64_t w, unsigned char c)
{
	return word_below(w ^ (WORD_ONES * c), 1);
}

/* How many bytes of the word with flags f precede its first flagged byte
 * (f != 0); 0 where byte order does not allow telling. */
static inline size_t
word_skip(uint64_t f)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(f) / 8;
#else
	(void)f;
	return 0;
#endif
}

/*
 * Strings are scanned 64 bytes at a time: one bit per byte says where the
 * quotes, backslashes and control characters (not allowed raw in a JSON
 * string) are, and the escaped bytes follow from the backslashes with a
 * few word operations (simdjson's way), so a payload dense with \" costs
 * no branch per escape. With SSE2 (every x86-64) the bits come from 16-byte
 * compares; elsewhere from a byte loop.
 */
typedef struct block_bits {
	uint64_t quotes, backslashes, controls;
} block_bits;

#define BLOCK 64

/* The bits of the n bytes at p (n: 16 or BLOCK). */
static inline void
block_bits_of(const char *p, int n, block_bits *b)
{
#if defined(__SSE2__)
	const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
	const __m128i below_space = _mm_set1_epi8(0x1f);

	b->quotes = b->backslashes = b->controls = 0;
	for (int k = 0; k < n / 16; k++) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));

		b->quotes |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote))
			     << (16 * k);
		b->backslashes |=
		    (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) << (16 * k);
		/* v <= 0x1f, unsigned: min(v, 0x1f) == v. */
		b->controls |= (uint64_t)(uint16_t)_mm_movemask_epi8(
				   _mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v))
			       << (16 * k);
	}
#else
	b->quotes = b->backslashes = b->controls = 0;
	for (int i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		b->quotes |= (uint64_t)(c == '"') << i;
		b->backslashes |= (uint64_t)(c == '\\') << i;
		b->controls |= (uint64_t)(c < 0x20) << i;
	}
#endif
}

/* The bytes of a block that a backslash escapes, given its backslashes;
 * *carry (0 or 1) says on entry whether the block's first byte is escaped
 * and on return whether the next block's is. A run of backslashes escapes
 * every other byte after its start, so the byte after it exactly when the
 * run is odd. */
static inline uint64_t
escaped_bits(uint64_t backslashes, uint64_t *carry)
{
	const uint64_t even = UINT64_C(0x5555555555555555);
	uint64_t bs = backslashes & ~*carry; /* an escaped backslash escapes nothing */
	uint64_t follows = bs << 1 | *carry;
	uint64_t odd_starts = bs & ~even & ~follows;
	uint64_t even_runs;

	/* Adding a run's start to the run carries out past its end. */
	*carry = __builtin_add_overflow(odd_starts, bs, &even_runs);
	return (even ^ (even_runs << 1)) & follows;
}

/* Scan the string starting at s[*pos] == '"'; *pos ends after the closing
 * quote, the first one no backslash escapes. The text before it must hold
 * no control character, escaped or not. The last bytes, fewer than a
 * block, are looked at one by one. */
static bool
scan_string(const char *s, size_t len, size_t *pos, bool *escaped)
{
	size_t i = *pos + 1;
	uint64_t carry = 0;
	bool esc = false;

	/* Most strings are short and plain: their end in the first 16
	 * bytes, with neither a backslash nor a control character before. */
	if (i + 16 <= len) {
		block_bits b;
		uint64_t before;

		block_bits_of(s + i, 16, &b);
		before = (b.quotes & -b.quotes) - 1;
		if (b.quotes != 0 && ((b.backslashes | b.controls) & before) == 0) {
			*escaped = false;
			*pos = i + (size_t)__builtin_ctzll(b.quotes) + 1;
			return true;
		}
	}
	for (; i + BLOCK <= len; i += BLOCK) {
		block_bits b;
		uint64_t ends, before;

		block_bits_of(s + i, BLOCK, &b);
		ends = b.quotes & ~escaped_bits(b.backslashes, &carry);
		before = ends != 0 ? (ends & -ends) - 1 : ~UINT64_C(0);
		if ((b.controls & before) != 0)
			return false;
		esc |= (b.backslashes & before) != 0;
		if (ends != 0) {
			*escaped = esc;
			*pos = i + (size_t)__builtin_ctzll(ends) + 1;
			return true;
		}
	}
	for (; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20)
			return false;
		if (carry != 0) {
			carry = 0;
			continue;
		}
		if (c == '"') {
			*escaped = esc;
			*pos = i + 1;
			return true;
		}
		if (c == '\\') {
			esc = true;
			carry = 1;
		}
	}
	return false;
}

/* True for the bytes that end a bare literal or number (a NUL among them,
 * which then fails the member). */
static inline bool
ends_literal(char c)
{
	switch (c) {
	case '\0':
	case ',':
	case ':':
	case ']':
	case '}':
	case ' ':
	case '\t':
	case '\r':
	case '\n':
	case '{':
	case '[':
	case '"':
		return true;
	default:
		return false;
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

			while (*pos < len && !ends_literal(s[*pos]))
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
ob_json_escaped_name_is(const ob_json_member *m, const char *name, size_t name_len)
{
	char buf[256];
	long n;

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

		if (s[i] != '\\') {
			/* Copy the run up to the next backslash a word at a
			 * time (out has room: o <= i). */
			while (i + sizeof(uint64_t) <= len) {
				uint64_t f = word_equal(word_at(s + i), '\\');
				size_t run = f == 0 ? sizeof(uint64_t) : word_skip(f);

				memcpy(out + o, s + i, sizeof(uint64_t));
				o += run;
				i += run;
				if (f != 0)
					break;
			}
			while (i < len && s[i] != '\\')
				out[o++] = s[i++];
			i--;
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
