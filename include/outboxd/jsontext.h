/*
 * jsontext.h: walking a JSON object's members as raw text.
 *
 * The mapping publishes JSON values "as their JSON text" (sql/README.md, "The Kafka record").
 * Parsing into doubles and printing again would change numbers (99.90 becomes 99.900000000000006),
 * so the members of logical messages and of headers objects are read as spans of the original text
 * instead. The scanner checks structure (strings, brackets, separators) strictly enough to reject
 * text that is not a JSON object; it does not check number syntax.
 */
#ifndef OUTBOXD_JSONTEXT_H
#define OUTBOXD_JSONTEXT_H

#include <string.h>

#include "outboxd/common.h"

/* One member. name is the text between the quotes of the key, value the
 * raw text of the value (for a string: between its quotes). The *_escaped
 * flags say whether that text holds backslash escapes; value_is_string
 * whether the value was a JSON string. All pointers borrow the input. */
typedef struct ob_json_member {
	const char *name;
	size_t name_len;
	bool name_escaped;
	const char *value;
	size_t value_len;
	bool value_is_string;
	bool value_escaped;
} ob_json_member;

typedef struct ob_json_iter {
	const char *s;
	size_t len;
	size_t pos;
	char close; /* the bracket that ends the container */
	bool done;
	bool nested; /* entered from a parent: no end-of-text check */
	/* Nesting scanned inside a member's value: OB_JSON_DEFAULT_DEPTH after
	 * ob_json_iter_init(); a caller may raise it up to OB_JSON_DEPTH_LIMIT
	 * (the inbox's structured CloudEvents, whose data is what jsonb takes). */
	int max_depth;
} ob_json_iter;

#define OB_JSON_DEFAULT_DEPTH 256
#define OB_JSON_DEPTH_LIMIT   10000

/* Start iterating the object in s[0..len); false if s does not start (after
 * white space) with '{'. */
bool ob_json_iter_init(ob_json_iter *it, const char *s, size_t len) OB_MUST_CHECK;
/* The next member: 1 when *m was filled, 0 at the end of a well-formed
 * object (nothing but white space may follow it), -1 on malformed text. */
int ob_json_iter_next(ob_json_iter *it, ob_json_member *m) OB_MUST_CHECK;

/*
 * Walking nested containers in the same pass, without scanning them twice:
 * ob_json_iter_key() reads the next member's name and leaves the iterator
 * at its value; then either ob_json_iter_value() takes the value as raw
 * text, or ob_json_iter_enter() starts a child iterator on it (an object or
 * array), which is walked to its end (0) and handed back with
 * ob_json_iter_leave(). In arrays, ob_json_array_more() says whether an
 * element follows (1), the array ended (0) or the text is malformed (-1).
 * All return 1/0/-1 like ob_json_iter_next().
 */
int ob_json_iter_key(ob_json_iter *it, ob_json_member *m) OB_MUST_CHECK;
int ob_json_iter_value(ob_json_iter *it, ob_json_member *m) OB_MUST_CHECK;
int ob_json_array_more(ob_json_iter *it) OB_MUST_CHECK;
bool ob_json_iter_enter(const ob_json_iter *parent, ob_json_iter *child) OB_MUST_CHECK;
int ob_json_iter_leave(ob_json_iter *parent, const ob_json_iter *child) OB_MUST_CHECK;

/* True if the member's name, escapes decoded, is name. Inline: records
 * are matched against known names many times each, and most names differ
 * in length. */
bool ob_json_escaped_name_is(const ob_json_member *m, const char *name, size_t name_len);

static inline bool
ob_json_member_named(const ob_json_member *m, const char *name, size_t name_len)
{
	if (m->name_escaped)
		return ob_json_escaped_name_is(m, name, name_len);
	return m->name_len == name_len && memcmp(m->name, name, name_len) == 0;
}

/* True if the value is the literal null. */
bool ob_json_member_is_null(const ob_json_member *m);

/* Decode the escapes of a JSON string's inner text into out (at least len
 * bytes). Returns the decoded length, or -1 on a bad escape. */
long ob_json_unescape(const char *s, size_t len, char *out);

#endif
