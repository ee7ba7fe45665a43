/*
 * change.c: the text kinds of Postgres types (see change.h).
 */
#include "outboxd/change.h"

ob_text_kind
ob_text_kind_for_type(unsigned int oid)
{
	switch (oid) {
	case 16: /* bool */
		return OB_TEXT_BOOLEAN;
	case 17: /* bytea */
		return OB_TEXT_BYTEA;
	case 20:   /* int8 */
	case 21:   /* int2 */
	case 23:   /* int4 */
	case 26:   /* oid */
	case 700:  /* float4 */
	case 701:  /* float8 */
	case 1700: /* numeric */
		return OB_TEXT_NUMBER;
	default:
		return OB_TEXT_PLAIN;
	}
}
