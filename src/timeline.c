/*
 * timeline.c: timeline history files and the marks of events handed over
 * (timeline.h).
 */
#include "outboxd/timeline.h"

#include <stdlib.h>
#include <string.h>

#define MARKS_FIRST_CAP 256

void
ob_timeline_init(ob_timeline *tl)
{
	memset(tl, 0, sizeof(*tl));
}

void
ob_timeline_free(ob_timeline *tl)
{
	free(tl->marks);
	memset(tl, 0, sizeof(*tl));
}

/* The i-th mark from the oldest. */
static ob_timeline_mark *
mark_at(const ob_timeline *tl, size_t i)
{
	return &tl->marks[(tl->first + i) % tl->cap];
}

/* Double the ring (up to OB_TIMELINE_MARKS_MAX), oldest mark first. */
static void
grow(ob_timeline *tl)
{
	size_t cap = tl->cap ? tl->cap * 2 : MARKS_FIRST_CAP;
	ob_timeline_mark *marks;

	if (cap > OB_TIMELINE_MARKS_MAX)
		cap = OB_TIMELINE_MARKS_MAX;
	marks = ob_xcalloc(cap, sizeof(*marks));
	for (size_t i = 0; i < tl->len; i++)
		marks[i] = *mark_at(tl, i);
	free(tl->marks);
	tl->marks = marks;
	tl->cap = cap;
	tl->first = 0;
}

void
ob_timeline_committed(ob_timeline *tl, ob_lsn end_lsn, uint64_t handed)
{
	if (tl->len == tl->cap && tl->cap < OB_TIMELINE_MARKS_MAX)
		grow(tl);
	if (tl->len == tl->cap) {
		tl->first = (tl->first + 1) % tl->cap;
		tl->len--;
		tl->forgot = true;
	}
	tl->len++;
	*mark_at(tl, tl->len - 1) = (ob_timeline_mark){end_lsn, handed};
}

uint64_t
ob_timeline_forget_after(ob_timeline *tl, ob_lsn lsn, uint64_t handed_now, bool *exact)
{
	uint64_t before = 0;

	while (tl->len > 0 && mark_at(tl, tl->len - 1)->end_lsn > lsn)
		tl->len--;
	if (tl->len > 0) {
		before = mark_at(tl, tl->len - 1)->handed;
		*exact = true;
	} else {
		/* Nothing remembered at or before lsn: either nothing was
		 * handed over before it, or the ring forgot it. */
		*exact = !tl->forgot;
	}
	return handed_now - before;
}

void
ob_timeline_rebase(ob_timeline *tl, ob_lsn lsn, uint64_t handed)
{
	bool exact;

	(void)ob_timeline_forget_after(tl, lsn, handed, &exact);
	ob_timeline_committed(tl, lsn, handed);
}

bool
ob_timeline_switch_point(const char *history, int tli, ob_lsn *switch_point)
{
	const char *line = history;

	while (*line != '\0') {
		const char *end = line + strcspn(line, "\n");
		char *after;
		long parent;
		size_t n;

		/* Blank lines and comments are allowed, as PostgreSQL's own
		 * reader allows them. */
		line += strspn(line, " \t");
		if (line < end && *line != '#') {
			parent = strtol(line, &after, 10);
			if (after == line || (*after != ' ' && *after != '\t'))
				return false;
			after += strspn(after, " \t");
			n = strcspn(after, " \t\n");
			if (parent == tli)
				return ob_lsn_parse_n(after, n, switch_point);
		}
		line = *end == '\n' ? end + 1 : end;
	}
	return false;
}
