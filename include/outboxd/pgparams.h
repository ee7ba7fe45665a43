/*
 * pgparams.h: the parameters of one query, built up one by one and sent
 * with the extended protocol (ob_pgsql_exec_params()): text, binary bytes
 * (a bytea value, whatever its bytes) and integers.
 */
#ifndef OUTBOXD_PGPARAMS_H
#define OUTBOXD_PGPARAMS_H

#include "outboxd/common.h"
#include "outboxd/pgsql.h"

/* Zero-initialised, it holds none; every array grows together. */
typedef struct ob_pgparams {
	const char **values;
	int *lengths;
	int *formats;
	char (*numbers)[24]; /* the text of integer parameters */
	int n, cap;
} ob_pgparams;

/* Add a text parameter (NULL: SQL NULL); value must outlive the query. */
void ob_pgparams_text(ob_pgparams *p, const char *value);
/* Add len bytes in binary (for bytea); value must outlive the query. */
void ob_pgparams_bytes(ob_pgparams *p, const void *value, size_t len);
/* Add an integer (its text is kept here). */
void ob_pgparams_int(ob_pgparams *p, long long v);
/* Run sql, one statement, with the parameters added (ob_pgsql_exec_params()). */
ob_pgres *ob_pgparams_exec(ob_pgconn *c, const char *sql, ob_pgparams *p);
/* Forget the parameters, keeping the arrays, for the next query. */
void ob_pgparams_clear(ob_pgparams *p);
void ob_pgparams_free(ob_pgparams *p);

#endif
