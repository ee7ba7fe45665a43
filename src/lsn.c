/*
 * lsn.c: parsing and printing PostgreSQL LSNs ("X/X").
 */
#include "outboxd/lsn.h"

#include <stdio.h>
#include <string.h>

/* Parse up to 8 hex digits from s[*pos..len); false if there are none. */
static bool
parse_hex32(const char *s, size_t len, size_t *pos, uint32_t *out)
{
	uint32_t v = 0;
	size_t start = *pos;

	while (*pos < len && *pos - start < 8) {
		int d = ob_hex_digit(s[*pos]);

		if (d < 0)
			break;
		v = (v << 4) | (uint32_t)d;
		(*pos)++;
	}
	*out = v;
	return *pos > start;
}

bool
ob_lsn_parse_n(const char *s, size_t len, ob_lsn *out)
{
	size_t pos = 0;
	uint32_t hi, lo;

	if (!parse_hex32(s, len, &pos, &hi) || pos >= len || s[pos] != '/')
		return false;
	pos++;
	if (!parse_hex32(s, len, &pos, &lo) || pos != len)
		return false;
	*out = ((ob_lsn)hi << 32) | lo;
	return true;
}

bool
ob_lsn_parse(const char *s, ob_lsn *out)
{
	return ob_lsn_parse_n(s, strlen(s), out);
}

char *
ob_lsn_format(ob_lsn lsn, char *buf)
{
	snprintf(buf, OB_LSN_BUFLEN, OB_LSN_FMT, OB_LSN_ARGS(lsn));
	return buf;
}
