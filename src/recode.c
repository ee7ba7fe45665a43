/*
 * recode.c: a database's encoding to UTF-8 (recode.h).
 */
#include "outboxd/recode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL's server encodings (pg_wchar.h) and glibc iconv's names for
 * them: those whose glibc conversion gives what PostgreSQL's gives (every
 * character of each compared byte by byte; the SQL and pgoutput paths
 * convert in the server, and one key must give one byte string). Left
 * out, so refused with wal2json: EUC_JP and EUC_JIS_2004 (89 and 2 two-byte
 * codes map elsewhere in glibc), WIN1258 (glibc composes combining marks
 * and holds the last character back), EUC_TW (not compared). SQL_ASCII
 * declares no encoding: its bytes pass when they are UTF-8, which
 * PostgreSQL also requires of what it sends a UTF8 client. */
static const struct {
	const char *pg, *iconv;
} names[] = {
    {"LATIN1", "ISO-8859-1"},     {"LATIN2", "ISO-8859-2"},     {"LATIN3", "ISO-8859-3"},
    {"LATIN4", "ISO-8859-4"},     {"LATIN5", "ISO-8859-9"},     {"LATIN6", "ISO-8859-10"},
    {"LATIN7", "ISO-8859-13"},    {"LATIN8", "ISO-8859-14"},    {"LATIN9", "ISO-8859-15"},
    {"LATIN10", "ISO-8859-16"},   {"ISO_8859_5", "ISO-8859-5"}, {"ISO_8859_6", "ISO-8859-6"},
    {"ISO_8859_7", "ISO-8859-7"}, {"ISO_8859_8", "ISO-8859-8"}, {"WIN866", "CP866"},
    {"WIN874", "CP874"},          {"WIN1250", "CP1250"},        {"WIN1251", "CP1251"},
    {"WIN1252", "CP1252"},        {"WIN1253", "CP1253"},        {"WIN1254", "CP1254"},
    {"WIN1255", "CP1255"},        {"WIN1256", "CP1256"},        {"WIN1257", "CP1257"},
    {"KOI8R", "KOI8-R"},          {"KOI8U", "KOI8-U"},          {"EUC_CN", "EUC-CN"},
    {"EUC_KR", "EUC-KR"},         {"SQL_ASCII", "UTF-8"},
};

/* iconv's name for pg_encoding; NULL when there is none. */
static const char *
iconv_name(const char *pg_encoding)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(names); i++)
		if (strcmp(names[i].pg, pg_encoding) == 0)
			return names[i].iconv;
	return NULL;
}

ob_recode_need
ob_recode_need_of(const char *pg_encoding)
{
	if (strcmp(pg_encoding, "UTF8") == 0)
		return OB_RECODE_NONE;
	return iconv_name(pg_encoding) != NULL ? OB_RECODE_CONVERT : OB_RECODE_UNABLE;
}

bool
ob_recode_open(ob_recode *r, const char *pg_encoding)
{
	const char *from = iconv_name(pg_encoding);

	memset(r, 0, sizeof(*r));
	if (from == NULL)
		return false;
	r->cd = iconv_open("UTF-8", from);
	if (r->cd == (iconv_t)-1) {
		r->cd = NULL;
		return false;
	}
	return true;
}

void
ob_recode_close(ob_recode *r)
{
	if (r->cd != NULL)
		iconv_close(r->cd);
	free(r->buf);
	memset(r, 0, sizeof(*r));
}

bool
ob_recode_to_utf8(ob_recode *r, const char *in, size_t len, const char **out, size_t *out_len)
{
	/* Any of these encodings takes at most 4 UTF-8 bytes a character,
	 * and a character at least one byte. */
	size_t need = 4 * len + 1;
	char *src = (char *)in, *dst;
	size_t left = len, room;

	if (r->cap < need) {
		r->buf = ob_xrealloc(r->buf, need);
		r->cap = need;
	}
	dst = r->buf;
	room = r->cap;
	(void)iconv(r->cd, NULL, NULL, NULL, NULL);
	/* The second call writes what a stateful converter still holds. */
	if (iconv(r->cd, &src, &left, &dst, &room) == (size_t)-1 ||
	    iconv(r->cd, NULL, NULL, &dst, &room) == (size_t)-1)
		return false;
	*out = r->buf;
	*out_len = r->cap - room;
	return true;
}
