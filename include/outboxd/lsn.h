/*
 * lsn.h: PostgreSQL WAL positions (LSNs) as 64-bit integers.
 *
 * Text form is "X/X" (two hex halves), as Postgres prints it. Log lines
 * print LSNs with OB_LSN_FMT / OB_LSN_ARGS.
 */
#ifndef OUTBOXD_LSN_H
#define OUTBOXD_LSN_H

#include "outboxd/common.h"

typedef uint64_t ob_lsn;

#define OB_LSN_FMT     "%X/%X"
#define OB_LSN_ARGS(l) (unsigned)((uint64_t)(l) >> 32), (unsigned)((uint64_t)(l)&0xffffffffu)
/* Enough room for "FFFFFFFF/FFFFFFFF" and the terminator. */
#define OB_LSN_BUFLEN  18

/* Parse "X/X" (the whole string); false on anything else. */
bool ob_lsn_parse(const char *s, ob_lsn *out) OB_MUST_CHECK;
/* Parse the first len bytes of s as "X/X". */
bool ob_lsn_parse_n(const char *s, size_t len, ob_lsn *out) OB_MUST_CHECK;
/* Format into buf (at least OB_LSN_BUFLEN bytes); returns buf. */
char *ob_lsn_format(ob_lsn lsn, char *buf);

#endif
