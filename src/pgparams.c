/*
 * pgparams.c: a query's parameters (pgparams.h).
 */
#include "outboxd/pgparams.h"

#include <stdio.h>
#include <stdlib.h>

static void
reserve(ob_pgparams *p, int n)
{
	if (p->n + n <= p->cap)
		return;
	p->cap = (p->n + n) * 2;
	p->values = ob_xrealloc(p->values, (size_t)p->cap * sizeof(*p->values));
	p->lengths = ob_xrealloc(p->lengths, (size_t)p->cap * sizeof(*p->lengths));
	p->formats = ob_xrealloc(p->formats, (size_t)p->cap * sizeof(*p->formats));
	p->numbers = ob_xrealloc(p->numbers, (size_t)p->cap * sizeof(*p->numbers));
}

void
ob_pgparams_text(ob_pgparams *p, const char *value)
{
	reserve(p, 1);
	p->values[p->n] = value;
	p->lengths[p->n] = 0;
	p->formats[p->n++] = 0;
}

void
ob_pgparams_bytes(ob_pgparams *p, const void *value, size_t len)
{
	reserve(p, 1);
	p->values[p->n] = value;
	p->lengths[p->n] = (int)len;
	p->formats[p->n++] = 1;
}

void
ob_pgparams_int(ob_pgparams *p, long long v)
{
	reserve(p, 1);
	snprintf(p->numbers[p->n], sizeof(p->numbers[p->n]), "%lld", v);
	p->values[p->n] = p->numbers[p->n];
	p->lengths[p->n] = -1; /* marks a number for exec() */
	p->formats[p->n++] = 0;
}

ob_pgres *
ob_pgparams_exec(ob_pgconn *c, const char *sql, ob_pgparams *p)
{
	/* The values of integers point into numbers, which reserve() may
	 * have moved: point them at it again. */
	for (int i = 0; i < p->n; i++) {
		if (p->formats[i] == 0 && p->values[i] != NULL && p->lengths[i] == -1)
			p->values[i] = p->numbers[i];
	}
	return ob_pgsql_exec_params(c, sql, p->n, p->values, p->lengths, p->formats);
}

void
ob_pgparams_clear(ob_pgparams *p)
{
	p->n = 0;
}

void
ob_pgparams_free(ob_pgparams *p)
{
	free(p->values);
	free(p->lengths);
	free(p->formats);
	free(p->numbers);
}
