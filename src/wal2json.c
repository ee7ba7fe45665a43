/*
 * wal2json.c: turning one wal2json v2 record into an ob_w2j_record.
 *
 * The JSON is parsed once with jansson; the record then points into the
 * tree. Column values keep their JSON form, so the mapping (outbox.c) can
 * tell a JSON string from a bare number and handle json/jsonb text.
 */
#include "outboxd/wal2json.h"

#include <stdio.h>
#include <string.h>

void
ob_w2j_record_clear(ob_w2j_record *rec)
{
	if (rec->root != NULL)
		json_decref(rec->root);
	memset(rec, 0, sizeof(*rec));
}

static bool
get_lsn(json_t *root, const char *key, ob_lsn *out)
{
	json_t *v = json_object_get(root, key);

	*out = 0;
	if (v == NULL || json_is_null(v))
		return true;
	return json_is_string(v) &&
	       ob_lsn_parse_n(json_string_value(v), json_string_length(v), out);
}

static ob_w2j_action
action_of(const char *a)
{
	if (a[0] == '\0' || a[1] != '\0')
		return OB_W2J_OTHER;
	switch (a[0]) {
	case 'B':
		return OB_W2J_BEGIN;
	case 'C':
		return OB_W2J_COMMIT;
	case 'I':
		return OB_W2J_INSERT;
	case 'M':
		return OB_W2J_MESSAGE;
	default:
		return OB_W2J_OTHER;
	}
}

bool
ob_w2j_parse(const char *data, size_t len, ob_w2j_record *rec, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *action, *ts;

	memset(rec, 0, sizeof(*rec));
	rec->root = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (rec->root == NULL) {
		snprintf(err, errlen, "invalid JSON at offset %d: %s", jerr.position, jerr.text);
		return false;
	}
	action = json_object_get(rec->root, "action");
	if (!json_is_string(action)) {
		snprintf(err, errlen, "record has no \"action\"");
		goto fail;
	}
	rec->action = action_of(json_string_value(action));
	if (!get_lsn(rec->root, "lsn", &rec->lsn) ||
	    !get_lsn(rec->root, "nextlsn", &rec->nextlsn)) {
		snprintf(err, errlen, "record has a malformed \"lsn\" or \"nextlsn\"");
		goto fail;
	}
	ts = json_object_get(rec->root, "timestamp");
	if (json_is_string(ts) &&
	    ob_pg_timestamp_to_us(json_string_value(ts), &rec->timestamp_us)) {
		rec->has_timestamp = true;
		rec->timestamp_ms = rec->timestamp_us / 1000;
	}

	switch (rec->action) {
	case OB_W2J_BEGIN:
	case OB_W2J_COMMIT:
		if (rec->nextlsn == 0) {
			snprintf(err, errlen, "B/C record has no \"nextlsn\"");
			goto fail;
		}
		break;
	case OB_W2J_INSERT:
		rec->schema = json_string_value(json_object_get(rec->root, "schema"));
		rec->table = json_string_value(json_object_get(rec->root, "table"));
		rec->columns = json_object_get(rec->root, "columns");
		if (rec->table == NULL || !json_is_array(rec->columns)) {
			snprintf(err, errlen, "I record has no \"table\" or \"columns\"");
			goto fail;
		}
		break;
	case OB_W2J_MESSAGE: {
		json_t *content = json_object_get(rec->root, "content");

		rec->transactional = json_is_true(json_object_get(rec->root, "transactional"));
		rec->prefix = json_string_value(json_object_get(rec->root, "prefix"));
		if (rec->prefix == NULL || !json_is_string(content)) {
			snprintf(err, errlen, "M record has no \"prefix\" or \"content\"");
			goto fail;
		}
		rec->content = json_string_value(content);
		rec->content_len = json_string_length(content);
		break;
	}
	case OB_W2J_OTHER:
		break;
	}
	return true;

fail:
	ob_w2j_record_clear(rec);
	return false;
}

bool
ob_w2j_column(const ob_w2j_record *rec, const char *name, const char **type, json_t **value)
{
	size_t i;
	json_t *col;

	json_array_foreach (rec->columns, i, col) {
		const char *n = json_string_value(json_object_get(col, "name"));

		if (n != NULL && strcmp(n, name) == 0) {
			json_t *v = json_object_get(col, "value");

			*type = json_string_value(json_object_get(col, "type"));
			*value = v != NULL ? v : json_null();
			return true;
		}
	}
	return false;
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

bool
ob_pg_timestamp_to_us(const char *s, int64_t *us)
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
