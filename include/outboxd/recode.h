/*
 * recode.h: text in a database's own encoding as UTF-8 (sql/README.md,
 * "The outbox table": keys, payloads and headers go out as UTF-8).
 *
 * Every connection outboxd opens pins client_encoding to UTF8, so the
 * server converts what SQL and pgoutput send. wal2json writes in the
 * server's encoding whatever the client's: its records are converted
 * here (iconv), once per record and only in a database that is not UTF8,
 * and only from encodings whose glibc conversion is PostgreSQL's (the
 * others, and MULE_INTERNAL, are refused with wal2json). SQL_ASCII
 * declares no encoding: a record passes when it is UTF-8 (PostgreSQL
 * sends a UTF8 client nothing else from SQL_ASCII either). A record that
 * cannot be converted is dead-lettered as it came, never published with
 * bytes another path would not give.
 */
#ifndef OUTBOXD_RECODE_H
#define OUTBOXD_RECODE_H

#include <iconv.h>

#include "outboxd/common.h"

typedef struct ob_recode {
	iconv_t cd; /* NULL: not open */
	char *buf;  /* the last conversion, owned */
	size_t cap;
} ob_recode;

typedef enum ob_recode_need {
	OB_RECODE_NONE,    /* UTF8: bytes as they are */
	OB_RECODE_CONVERT, /* converted to UTF-8 (SQL_ASCII: checked to be UTF-8) */
	OB_RECODE_UNABLE,  /* an encoding outboxd cannot convert */
} ob_recode_need;

/* What text in the server encoding pg_encoding (server_encoding's value)
 * needs. */
ob_recode_need ob_recode_need_of(const char *pg_encoding);

/* Open a converter from pg_encoding to UTF-8. False when there is none
 * (OB_RECODE_UNABLE, or iconv refuses it). */
bool ob_recode_open(ob_recode *r, const char *pg_encoding) OB_MUST_CHECK;
/* Close r (also one zeroed, never opened). */
void ob_recode_close(ob_recode *r);
/* Convert in[0..len) to UTF-8: *out points into r (valid until the next
 * call), *out_len its length. False when in is not valid text of the
 * encoding. */
bool ob_recode_to_utf8(ob_recode *r, const char *in, size_t len, const char **out,
		       size_t *out_len) OB_MUST_CHECK;

#endif
