/*
 * leafset.c: the leaf partitions of the outbox table as a sorted set of
 * names (see leafset.h for the contract).
 */
#include "outboxd/leafset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ob_leafset_init(ob_leafset *s)
{
	memset(s, 0, sizeof(*s));
}

void
ob_leafset_clear(ob_leafset *s)
{
	for (size_t i = 0; i < s->len; i++) {
		free(s->leaves[i].schema);
		free(s->leaves[i].table);
	}
	s->len = 0;
	s->verified = 0;
	s->partitioned = false;
	s->stamp[0] = '\0';
	s->unlogged[0] = '\0';
}

void
ob_leafset_free(ob_leafset *s)
{
	ob_leafset_clear(s);
	free(s->leaves);
	memset(s, 0, sizeof(*s));
}

void
ob_leafset_swap(ob_leafset *a, ob_leafset *b)
{
	ob_leafset tmp = *a;

	*a = *b;
	*b = tmp;
}

static int
compare(const char *schema, const char *table, const ob_leaf *leaf)
{
	int c = strcmp(schema, leaf->schema);

	return c != 0 ? c : strcmp(table, leaf->table);
}

/* The index of schema.table in s, or where it would go; *found says
 * which. */
static size_t
position(const ob_leafset *s, const char *schema, const char *table, bool *found)
{
	size_t lo = 0, hi = s->len;

	*found = false;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = compare(schema, table, &s->leaves[mid]);

		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void
ob_leafset_add(ob_leafset *s, const char *schema, const char *table)
{
	bool found;
	size_t at = position(s, schema, table, &found);

	if (found)
		return;
	if (s->len == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->leaves = ob_xrealloc(s->leaves, s->cap * sizeof(*s->leaves));
	}
	memmove(s->leaves + at + 1, s->leaves + at, (s->len - at) * sizeof(*s->leaves));
	s->leaves[at] = (ob_leaf){ob_xstrdup(schema), ob_xstrdup(table)};
	s->len++;
}

bool
ob_leafset_has(const ob_leafset *s, const char *schema, const char *table)
{
	bool found;

	(void)position(s, schema, table, &found);
	return found;
}

size_t
ob_leafset_missing(const ob_leafset *s, const ob_leafset *of, char *buf, size_t buflen)
{
	size_t n = 0, used = 0;
	bool cut = false;

	if (buflen > 0)
		buf[0] = '\0';
	for (size_t i = 0; i < s->len; i++) {
		const ob_leaf *l = &s->leaves[i];
		int len;

		if (ob_leafset_has(of, l->schema, l->table))
			continue;
		n++;
		if (cut || buflen == 0)
			continue;
		len = snprintf(buf + used, buflen - used, "%s%s.%s", n > 1 ? ", " : "", l->schema,
			       l->table);
		/* Room for ", ..." must remain after the names that fit. */
		if (len < 0 || used + (size_t)len + 6 > buflen) {
			buf[used] = '\0';
			if (used + 6 <= buflen)
				snprintf(buf + used, buflen - used, "%s...", used > 0 ? ", " : "");
			cut = true;
			continue;
		}
		used += (size_t)len;
	}
	return n;
}

/* Append name to the growing string *dst (length *len, capacity *cap),
 * escaped for wal2json's add-tables: a backslash before the characters it
 * treats specially (its list splits at commas, dots and whitespace, which
 * isspace() says includes tabs and newlines), and a single quote doubled
 * for the quoted option.
 * Room for one more byte and the NUL is left after it. */
static void
append_escaped(char **dst, size_t *len, size_t *cap, const char *name)
{
	size_t need = *len + 3 * strlen(name) + 2;

	if (need > *cap) {
		*cap = need * 2;
		*dst = ob_xrealloc(*dst, *cap);
	}
	for (const char *c = name; *c != '\0'; c++) {
		if (strchr(" \t\n\v\f\r',.*\\", *c) != NULL)
			(*dst)[(*len)++] = '\\';
		if (*c == '\'')
			(*dst)[(*len)++] = '\'';
		(*dst)[(*len)++] = *c;
	}
	(*dst)[*len] = '\0';
}

char *
ob_leafset_add_tables(const ob_leafset *s)
{
	size_t len = 0, cap = 64;
	char *out = ob_xmalloc(cap);

	out[0] = '\0';
	for (size_t i = 0; i < s->len; i++) {
		/* Each append leaves room for one more byte and the NUL. */
		if (i > 0)
			out[len++] = ',';
		append_escaped(&out, &len, &cap, s->leaves[i].schema);
		out[len++] = '.';
		append_escaped(&out, &len, &cap, s->leaves[i].table);
	}
	out[len] = '\0';
	return out;
}
