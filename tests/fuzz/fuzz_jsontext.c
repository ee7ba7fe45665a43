/*
 * fuzz_jsontext.c: libFuzzer target for the JSON scanner (jsontext.h).
 *
 * The input is taken three ways:
 *
 * - as the inner text of a JSON string: ob_json_unescape() decodes it into
 *   a buffer of exactly the input's length (the contract: the decoded text
 *   is never longer than the escaped one);
 * - as an object walked member by member with ob_json_iter_next(), the way
 *   logical messages and headers objects are read: every member's name and
 *   value lie in the input, string values decode, and a decoded name is
 *   found again by ob_json_member_named();
 * - as an object walked strictly in one pass with ob_json_iter_key(),
 *   ob_json_iter_enter() and ob_json_iter_leave() into every nested object
 *   and array, the way wal2json records are read. Text this strict walk
 *   accepts is well-formed, so the member-by-member walk must accept it too
 *   and find the same members with the same spans. (The converse does not
 *   hold: ob_json_iter_next() checks only the brackets inside a nested
 *   value.)
 */
#include "fuzz.h"

#include "outboxd/jsontext.h"

#include <stdlib.h>
#include <string.h>

/* Members of the top-level object compared between the two walks. */
#define MAX_MEMBERS    64
/* The strict walk goes no deeper than this (the scanner refuses nesting
 * deeper than 256 inside a value); deeper text is not compared. */
#define MAX_WALK_DEPTH 200

typedef struct walk {
	ob_json_member members[MAX_MEMBERS];
	size_t len;
	bool truncated; /* more members than MAX_MEMBERS */
} walk;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return 0;
}

static void
remember(walk *w, const ob_json_member *m)
{
	if (w->len == MAX_MEMBERS)
		w->truncated = true;
	else
		w->members[w->len++] = *m;
}

/* The text of the input between p and p + len? */
static bool
inside(const char *p, size_t len, const char *s, size_t size)
{
	return p >= s && p <= s + size && len <= (size_t)(s + size - p);
}

/* Decode a string's text into a buffer of exactly its length (so that
 * AddressSanitizer sees any write past it); -1 on a bad escape. The
 * decoded text is returned in *out (caller frees). */
static long
decode_exact(const char *s, size_t len, char **out)
{
	long n;

	*out = malloc(len ? len : 1);
	OB_FUZZ_CHECK(*out != NULL);
	n = ob_json_unescape(s, len, *out);
	OB_FUZZ_CHECK(n <= (long)len);
	return n;
}

/* Check one member the member-by-member walk found. */
static void
check_member(const ob_json_member *m, const char *s, size_t size)
{
	char *name, *value;
	long n;

	OB_FUZZ_CHECK(inside(m->name, m->name_len, s, size));
	OB_FUZZ_CHECK(inside(m->value, m->value_len, s, size));
	OB_FUZZ_CHECK(m->value_len > 0 || m->value_is_string);
	OB_FUZZ_CHECK(m->name_escaped == (memchr(m->name, '\\', m->name_len) != NULL));
	n = decode_exact(m->name, m->name_len, &name);
	if (n >= 0 && m->name_len <= 256)
		OB_FUZZ_CHECK(ob_json_member_named(m, name, (size_t)n));
	free(name);
	if (m->value_is_string) {
		(void)decode_exact(m->value, m->value_len, &value);
		free(value);
	}
}

/* Walk the object member by member; 0 when it is well-formed. */
static int
walk_members(const char *s, size_t size, walk *w)
{
	ob_json_iter it;
	ob_json_member m;
	int r;

	if (!ob_json_iter_init(&it, s, size))
		return -1;
	while ((r = ob_json_iter_next(&it, &m)) == 1) {
		check_member(&m, s, size);
		remember(w, &m);
	}
	OB_FUZZ_CHECK(r == 0 || r == -1);
	OB_FUZZ_CHECK(r != 0 || it.pos == size);
	return r;
}

static int strict_container(ob_json_iter *it, int depth, walk *top);

/* The value where it stands: a nested container walked strictly, or a
 * scalar taken whole. Fills m's value span. Returns what the iteration
 * goes on with: 1, or -1 when malformed, or -2 when too deep to compare. */
static int
strict_value(ob_json_iter *it, int depth, ob_json_member *m)
{
	ob_json_iter child;
	size_t start = it->pos;
	int r;

	if (!ob_json_iter_enter(it, &child))
		return ob_json_iter_value(it, m);
	if (depth == MAX_WALK_DEPTH)
		return -2;
	r = strict_container(&child, depth + 1, NULL);
	if (r != 0)
		return r;
	r = ob_json_iter_leave(it, &child);
	m->value = it->s + start;
	m->value_len = child.pos - start;
	m->value_is_string = false;
	m->value_escaped = false;
	return r;
}

/* Walk an object or array to its end; 0 when it is well-formed. The
 * members of the top-level object go to top. */
static int
strict_container(ob_json_iter *it, int depth, walk *top)
{
	ob_json_member m;
	int r;

	if (it->close == ']') {
		while ((r = ob_json_array_more(it)) == 1) {
			if ((r = strict_value(it, depth, &m)) != 1)
				return r;
		}
		return r;
	}
	while ((r = ob_json_iter_key(it, &m)) == 1) {
		if ((r = strict_value(it, depth, &m)) != 1)
			return r;
		if (top != NULL)
			remember(top, &m);
	}
	return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	walk flat = {.len = 0}, strict = {.len = 0};
	ob_json_iter it;
	char *decoded;
	int flat_r, strict_r;

	(void)decode_exact(s, size, &decoded);
	free(decoded);

	flat_r = walk_members(s, size, &flat);
	if (!ob_json_iter_init(&it, s, size))
		return 0;
	strict_r = strict_container(&it, 0, &strict);
	if (strict_r != 0)
		return 0;
	OB_FUZZ_CHECK(it.pos == size);
	OB_FUZZ_CHECK(flat_r == 0);
	OB_FUZZ_CHECK(flat.len == strict.len && flat.truncated == strict.truncated);
	for (size_t i = 0; i < flat.len; i++) {
		const ob_json_member *a = &flat.members[i], *b = &strict.members[i];

		OB_FUZZ_CHECK(a->name == b->name && a->name_len == b->name_len);
		OB_FUZZ_CHECK(a->value == b->value && a->value_len == b->value_len);
		OB_FUZZ_CHECK(a->value_is_string == b->value_is_string);
		OB_FUZZ_CHECK(a->value_escaped == b->value_escaped);
	}
	return 0;
}
