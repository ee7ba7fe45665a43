/*
 * wal2json.c: turning one wal2json v2 record into an ob_w2j_record.
 *
 * One pass of the jsontext scanner over the record's top-level members;
 * "columns" is walked the same way. Nothing is allocated and nothing is
 * copied except the short schema, table and prefix names.
 */
#include "outboxd/wal2json.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

void
ob_w2j_record_clear(ob_w2j_record *rec)
{
	rec->action = OB_W2J_OTHER;
	rec->lsn = rec->nextlsn = 0;
	rec->timestamp_us = rec->timestamp_ms = 0;
	rec->has_timestamp = false;
	rec->schema[0] = rec->table[0] = rec->prefix[0] = '\0';
	rec->columns_len = 0;
	rec->transactional = false;
	rec->prefix_too_long = false;
	rec->content = NULL;
	rec->content_len = 0;
	rec->content_escaped = false;
}

/* Copy a string member's decoded text into dst (NUL-terminated); false if
 * it is not a string, has a bad escape, or does not fit. */
static bool
copy_string(const ob_json_member *m, char *dst, size_t dstlen)
{
	long n;

	if (!m->value_is_string || m->value_len >= dstlen)
		return false;
	n = ob_json_unescape(m->value, m->value_len, dst);
	if (n < 0)
		return false;
	dst[n] = '\0';
	return true;
}

/* An LSN member: a string "X/X", or null (left 0). */
static bool
get_lsn(const ob_json_member *m, ob_lsn *out)
{
	if (ob_json_member_is_null(m))
		return true;
	return m->value_is_string && !m->value_escaped &&
	       ob_lsn_parse_n(m->value, m->value_len, out);
}

static ob_w2j_action
action_of(const ob_json_member *m)
{
	if (!m->value_is_string || m->value_len != 1)
		return OB_W2J_OTHER;
	switch (m->value[0]) {
	case 'B':
		return OB_W2J_BEGIN;
	case 'C':
		return OB_W2J_COMMIT;
	case 'I':
		return OB_W2J_INSERT;
	case 'M':
		return OB_W2J_MESSAGE;
	case 'D':
		return OB_W2J_DELETE;
	default:
		return OB_W2J_OTHER;
	}
}

/* Take one column object's members. */
static bool
parse_column(ob_w2j_record *rec, ob_json_iter *obj)
{
	ob_w2j_column *col = &rec->columns[rec->columns_len];
	ob_json_member *type = &rec->types[rec->columns_len];
	bool has_name = false, has_value = false;
	ob_json_member m;
	int r;

	memset(type, 0, sizeof(*type));
	type->value = "";
	while ((r = ob_json_iter_next(obj, &m)) == 1) {
		if (ob_json_member_named(&m, "name", 4) && m.value_is_string) {
			col->name = m.value;
			col->name_len = m.value_len;
			col->name_escaped = m.value_escaped;
			has_name = true;
		} else if (ob_json_member_named(&m, "type", 4) && m.value_is_string) {
			*type = m;
		} else if (ob_json_member_named(&m, "value", 5)) {
			col->value = m.value;
			col->value_len = m.value_len;
			col->value_is_string = m.value_is_string;
			col->value_escaped = m.value_escaped;
			has_value = true;
		}
	}
	if (r != 0 || !has_name)
		return false;
	if (!has_value) {
		/* No value member: SQL NULL. */
		col->value = "null";
		col->value_len = 4;
		col->value_is_string = false;
		col->value_escaped = false;
	}
	rec->columns_len++;
	return true;
}

/* Parse the "columns" (or "identity") array (objects of name, type and
 * value) where the iterator stands, in the same pass; returns what the
 * parent's iteration goes on with (1 or -1). */
static int
parse_columns(ob_w2j_record *rec, ob_json_iter *parent, char *err, size_t errlen)
{
	ob_json_iter arr, obj;
	int r;

	if (!ob_json_iter_enter(parent, &arr) || arr.close != ']') {
		snprintf(err, errlen, "\"columns\" or \"identity\" is not an array");
		return -1;
	}
	while ((r = ob_json_array_more(&arr)) == 1) {
		if (rec->columns_len == OB_W2J_MAX_COLUMNS) {
			snprintf(err, errlen, "more than %d columns", OB_W2J_MAX_COLUMNS);
			return -1;
		}
		if (!ob_json_iter_enter(&arr, &obj) || obj.close != '}' ||
		    !parse_column(rec, &obj) || ob_json_iter_leave(&arr, &obj) != 1) {
			snprintf(err, errlen, "malformed column in \"columns\"");
			return -1;
		}
	}
	if (r != 0) {
		snprintf(err, errlen, "malformed \"columns\" array");
		return -1;
	}
	r = ob_json_iter_leave(parent, &arr);
	if (r != 1)
		snprintf(err, errlen, "invalid JSON after \"columns\"");
	return r;
}

/* The members a record may have, found in one pass; a member is present
 * when its name is set. A known member that appears twice makes the record
 * malformed. */
typedef struct members {
	ob_json_member action, lsn, nextlsn, timestamp, schema, table, transactional, prefix,
	    content;
	bool has_columns;  /* parsed into the record in place */
	bool has_identity; /* likewise, when there are no "columns" */
} members;

#define KNOWN(field)                                                                               \
	{                                                                                          \
#field, sizeof(#field) - 1, offsetof(members, field)                               \
	}

static const struct {
	const char *name;
	size_t name_len;
	size_t offset;
} known_members[] = {
    KNOWN(action), KNOWN(lsn),    KNOWN(nextlsn),       KNOWN(timestamp), KNOWN(schema),
    KNOWN(table),  KNOWN(prefix), KNOWN(transactional), KNOWN(content),
};

/* Where a top-level member of this name is kept; NULL for others. */
static ob_json_member *
member_slot(members *ms, const ob_json_member *m)
{
	for (size_t i = 0; i < OB_ARRAY_LEN(known_members); i++) {
		if (ob_json_member_named(m, known_members[i].name, known_members[i].name_len))
			return (ob_json_member *)((char *)ms + known_members[i].offset);
	}
	return NULL;
}

static bool
collect_members(const char *data, size_t len, ob_w2j_record *rec, members *ms, char *err,
		size_t errlen)
{
	ob_json_iter it;
	ob_json_member m, *slot;
	bool dup = false;
	int r;

	memset(ms, 0, sizeof(*ms));
	if (!ob_json_iter_init(&it, data, len)) {
		snprintf(err, errlen, "record is not a JSON object");
		return false;
	}
	while ((r = ob_json_iter_key(&it, &m)) == 1) {
		if (ob_json_member_named(&m, "columns", 7)) {
			dup |= ms->has_columns || ms->has_identity;
			ms->has_columns = true;
			if ((r = parse_columns(rec, &it, err, errlen)) != 1)
				return false;
			continue;
		}
		/* A D record's key; an update's (never streamed) also has
		 * columns, and its identity is passed over. */
		if (!ms->has_columns && ob_json_member_named(&m, "identity", 8)) {
			dup |= ms->has_identity;
			ms->has_identity = true;
			if ((r = parse_columns(rec, &it, err, errlen)) != 1)
				return false;
			continue;
		}
		if ((r = ob_json_iter_value(&it, &m)) != 1)
			break;
		if ((slot = member_slot(ms, &m)) != NULL) {
			dup |= slot->name != NULL;
			*slot = m;
		}
	}
	if (r != 0) {
		snprintf(err, errlen, "invalid JSON near offset %zu", it.pos);
		return false;
	}
	if (dup) {
		snprintf(err, errlen, "record has a member twice");
		return false;
	}
	return true;
}

bool
ob_w2j_parse(const char *data, size_t len, ob_w2j_record *rec, char *err, size_t errlen)
{
	members ms;
	char ts[64];

	ob_w2j_record_clear(rec);
	if (!collect_members(data, len, rec, &ms, err, errlen))
		return false;
	if (ms.action.name == NULL || !ms.action.value_is_string) {
		snprintf(err, errlen, "record has no \"action\"");
		return false;
	}
	rec->action = action_of(&ms.action);
	if ((ms.lsn.name != NULL && !get_lsn(&ms.lsn, &rec->lsn)) ||
	    (ms.nextlsn.name != NULL && !get_lsn(&ms.nextlsn, &rec->nextlsn))) {
		snprintf(err, errlen, "record has a malformed \"lsn\" or \"nextlsn\"");
		return false;
	}
	if (ms.timestamp.name != NULL && copy_string(&ms.timestamp, ts, sizeof(ts)) &&
	    ob_pg_timestamp_to_us(ts, &rec->timestamp_us)) {
		rec->has_timestamp = true;
		rec->timestamp_ms = rec->timestamp_us / 1000;
	}

	switch (rec->action) {
	case OB_W2J_BEGIN:
	case OB_W2J_COMMIT:
		if (rec->lsn == 0 || rec->nextlsn == 0) {
			snprintf(err, errlen, "B/C record has no \"lsn\" or \"nextlsn\"");
			return false;
		}
		break;
	case OB_W2J_INSERT:
		if (ms.table.name == NULL || !ms.has_columns ||
		    !copy_string(&ms.table, rec->table, sizeof(rec->table)) ||
		    (ms.schema.name != NULL &&
		     !copy_string(&ms.schema, rec->schema, sizeof(rec->schema)))) {
			snprintf(err, errlen, "I record has no \"table\" or \"columns\"");
			return false;
		}
		break;
	case OB_W2J_DELETE:
		/* Only ever a hint (decoder.h): one that names no row is
		 * passed over, not refused. */
		if (ms.table.name == NULL || !ms.has_identity ||
		    !copy_string(&ms.table, rec->table, sizeof(rec->table)) ||
		    (ms.schema.name != NULL &&
		     !copy_string(&ms.schema, rec->schema, sizeof(rec->schema))))
			rec->action = OB_W2J_OTHER;
		break;
	case OB_W2J_MESSAGE:
		if (ms.prefix.name == NULL || !ms.prefix.value_is_string ||
		    ms.content.name == NULL || !ms.content.value_is_string) {
			snprintf(err, errlen, "M record has no \"prefix\" or \"content\"");
			return false;
		}
		rec->transactional = ms.transactional.value_len == 4 &&
				     memcmp(ms.transactional.value, "true", 4) == 0;
		if (!copy_string(&ms.prefix, rec->prefix, sizeof(rec->prefix))) {
			rec->prefix[0] = '\0';
			rec->prefix_too_long = true;
		}
		rec->content = ms.content.value;
		rec->content_len = ms.content.value_len;
		rec->content_escaped = ms.content.value_escaped;
		break;
	case OB_W2J_OTHER:
		break;
	}
	return true;
}

const ob_w2j_column *
ob_w2j_column_find(const ob_w2j_record *rec, const char *name, const char **type, size_t *type_len)
{
	size_t name_len = strlen(name);

	for (size_t i = 0; i < rec->columns_len; i++) {
		if (ob_json_member_named(&rec->columns[i], name, name_len)) {
			*type = rec->types[i].value;
			*type_len = rec->types[i].value_len;
			return &rec->columns[i];
		}
	}
	return NULL;
}

/* Read exactly n decimal digits at *p. */
static bool
read_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		char c = (*p)[i];

		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468;
}

bool
ob_pg_timestamp_to_ms(const char *s, int64_t *ms)
{
	int64_t us;

	if (!ob_pg_timestamp_to_us(s, &us))
		return false;
	/* Floor division, so times before 1970 round down too. */
	*ms = us >= 0 ? us / 1000 : -((-us + 999) / 1000);
	return true;
}

/* ob_pg_timestamp_to_us() without its memo. */
static bool
parse_timestamp_us(const char *s, int64_t *us)
{
	const char *p = s;
	int year, mon, day, hour, min, sec, off_h = 0, off_m = 0, off_s = 0;
	int64_t frac_us = 0, total;
	int sign = 1;

	if (!read_digits(&p, 4, &year) || *p++ != '-' || !read_digits(&p, 2, &mon) || *p++ != '-' ||
	    !read_digits(&p, 2, &day) || (*p != ' ' && *p != 'T'))
		return false;
	p++;
	if (!read_digits(&p, 2, &hour) || *p++ != ':' || !read_digits(&p, 2, &min) || *p++ != ':' ||
	    !read_digits(&p, 2, &sec))
		return false;
	if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 24 || min > 59 || sec > 60)
		return false;
	if (*p == '.') {
		int64_t scale = 100000;

		p++;
		if (*p < '0' || *p > '9')
			return false;
		for (; *p >= '0' && *p <= '9'; p++) {
			frac_us += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		p++;
		if (!read_digits(&p, 2, &off_h))
			return false;
		if (*p == ':') {
			p++;
			if (!read_digits(&p, 2, &off_m))
				return false;
			if (*p == ':') {
				p++;
				if (!read_digits(&p, 2, &off_s))
					return false;
			}
		}
	} else if (*p == 'Z') {
		p++;
	}
	if (*p != '\0')
		return false;
	total = days_from_civil(year, mon, day) * 86400 + hour * 3600 + min * 60 + sec;
	total -= sign * (off_h * 3600 + off_m * 60 + off_s);
	*us = total * 1000000 + frac_us;
	return true;
}

/* The last two texts ob_pg_timestamp_to_us() read, per thread, and their
 * values. The records of a transaction share its commit time, and a time
 * column filled by its default (now()) holds the same text on every row,
 * so almost every call asks for one of the two again. */
typedef struct timestamp_memo {
	char text[40]; /* len bytes; longer texts are not kept */
	size_t len;
	int64_t us;
} timestamp_memo;

static _Thread_local timestamp_memo memo[2];
static _Thread_local unsigned memo_next; /* the slot a miss overwrites */

bool
ob_pg_timestamp_to_us(const char *s, int64_t *us)
{
	size_t len = strnlen(s, sizeof(memo[0].text));
	timestamp_memo *m;

	for (unsigned i = 0; i < 2; i++) {
		if (memo[i].len == len && len > 0 && memcmp(memo[i].text, s, len) == 0) {
			*us = memo[i].us;
			return true;
		}
	}
	if (!parse_timestamp_us(s, us))
		return false;
	if (len < sizeof(memo[0].text)) {
		m = &memo[memo_next];
		memo_next ^= 1;
		memcpy(m->text, s, len);
		m->len = len;
		m->us = *us;
	}
	return true;
}
