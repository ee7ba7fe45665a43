/*
 * pgoutput.c: reading pgoutput's logical replication messages (pgoutput.h).
 *
 * A reader walks one message front to back; every read states how many
 * bytes it takes and fails, without reading, when fewer are left, so no
 * read goes past the length the caller gave. Integers are big-endian and
 * assembled byte by byte, strings must end with a NUL inside the message,
 * and a message that has bytes left over after its last field is refused
 * like one that ends too early.
 *
 * ob_pgo_parse() allocates nothing: what it returns points into the
 * message. The relation cache copies what Relation messages say (names,
 * type oids, column kinds) into memory it owns, so it outlives the
 * messages, and keeps the value and length arrays that ob_pgo_row() fills,
 * grown to the widest relation it has seen.
 */
#include "outboxd/pgoutput.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Postgres' MaxTupleAttributeNumber: no table or tuple has more columns. */
#define MAX_COLUMNS 1664

/* The fixed sizes of Begin and Commit, type byte included. */
#define BEGIN_LEN  21
#define COMMIT_LEN 26

/* The part of a message not read yet. A read that wants more bytes than
 * are left takes nothing and sets short_read, which stays set: a parser
 * reads a group of fields, then checks short_read once. */
typedef struct reader {
	const unsigned char *p;
	size_t left;
	bool short_read;
} reader;

static void
reader_init(reader *r, const char *data, size_t len)
{
	r->p = (const unsigned char *)data;
	r->left = len;
	r->short_read = false;
}

/* The big-endian unsigned integer of width bytes (at most 8) at p. */
static uint64_t
be_at(const unsigned char *p, size_t width)
{
	uint64_t v = 0;

	for (size_t i = 0; i < width; i++)
		v = v << 8 | p[i];
	return v;
}

/* Take n bytes and return where they start; NULL on a short read. */
static const char *
take_bytes(reader *r, size_t n)
{
	const unsigned char *start = r->p;

	if (r->left < n) {
		r->short_read = true;
		return NULL;
	}
	r->p += n;
	r->left -= n;
	return (const char *)start;
}

/* Take a big-endian unsigned integer of width bytes (at most 8); 0 on a
 * short read. */
static uint64_t
take_uint(reader *r, size_t width)
{
	const char *p = take_bytes(r, width);

	return p != NULL ? be_at((const unsigned char *)p, width) : 0;
}

/* Take an Int32 length. A negative one is a short read: it is the length
 * of nothing that can follow. */
static size_t
take_length(reader *r)
{
	uint64_t v = take_uint(r, 4);

	if (v > INT32_MAX) {
		r->short_read = true;
		return 0;
	}
	return (size_t)v;
}

/* Take a NUL-terminated string and return it (it points into the
 * message); *len is its length without the NUL, which is taken too. NULL,
 * as a short read, if no NUL is left in the message. */
static const char *
take_string(reader *r, size_t *len)
{
	const unsigned char *nul = r->left > 0 ? memchr(r->p, '\0', r->left) : NULL;

	*len = 0;
	if (nul == NULL) {
		r->short_read = true;
		return NULL;
	}
	*len = (size_t)(nul - r->p);
	return take_bytes(r, *len + 1);
}

/* Write the reason a message is refused to err; false, so that a parser
 * can return fail(...). */
static bool OB_PRINTF(3, 4) fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return false;
}

/* Refuse a message that has bytes after its last field. */
static bool
check_end(const reader *r, const char *what, char *err, size_t errlen)
{
	if (r->left == 0)
		return true;
	return fail(err, errlen, "%s message has trailing bytes after its last field (%zu)", what,
		    r->left);
}

/* A commit time in µs since 2000-01-01 as µs since the Unix epoch; false
 * if it does not fit in an int64_t. */
static bool
unix_time_us(uint64_t pg_us, int64_t *out)
{
	int64_t t = (int64_t)pg_us;

	if (t > INT64_MAX - OB_PGO_EPOCH_OFFSET_US)
		return false;
	*out = t + OB_PGO_EPOCH_OFFSET_US;
	return true;
}

/* Begin and Commit have a fixed size; their fields are read from p, the
 * bytes after the type, once the size is checked. */
static bool
parse_begin(const reader *r, ob_pgo_msg *msg, char *err, size_t errlen)
{
	const unsigned char *p = r->p;
	uint64_t final_lsn;

	if (r->left != BEGIN_LEN - 1)
		return fail(err, errlen, "Begin message is %zu bytes long, not %d", r->left + 1,
			    BEGIN_LEN);
	final_lsn = be_at(p, 8);
	if (final_lsn == 0)
		return fail(err, errlen, "Begin message has final LSN 0/0");
	if (!unix_time_us(be_at(p + 8, 8), &msg->commit_us))
		return fail(err, errlen, "Begin message has a commit time out of range");
	msg->kind = OB_PGO_BEGIN;
	msg->commit_lsn = final_lsn;
	msg->xid = (uint32_t)be_at(p + 16, 4);
	return true;
}

static bool
parse_commit(const reader *r, ob_pgo_msg *msg, char *err, size_t errlen)
{
	const unsigned char *p = r->p;
	uint64_t commit_lsn, end_lsn;

	if (r->left != COMMIT_LEN - 1)
		return fail(err, errlen, "Commit message is %zu bytes long, not %d", r->left + 1,
			    COMMIT_LEN);
	/* p[0] is the flags byte, unused: Postgres sends 0. */
	commit_lsn = be_at(p + 1, 8);
	end_lsn = be_at(p + 9, 8);
	if (end_lsn <= commit_lsn)
		return fail(err, errlen,
			    "Commit message has end LSN " OB_LSN_FMT
			    " not after commit LSN " OB_LSN_FMT,
			    OB_LSN_ARGS(end_lsn), OB_LSN_ARGS(commit_lsn));
	if (!unix_time_us(be_at(p + 17, 8), &msg->commit_us))
		return fail(err, errlen, "Commit message has a commit time out of range");
	msg->kind = OB_PGO_COMMIT;
	msg->commit_lsn = commit_lsn;
	msg->end_lsn = end_lsn;
	return true;
}

/* One column of TupleData. */
typedef struct tuple_column {
	char kind;         /* 'n', 'u', 't' or 'b' */
	const char *value; /* 't' and 'b': the value's bytes; else NULL */
	size_t len;
} tuple_column;

/* Read column i (counted from 0, for the error text) of TupleData. */
static bool
read_column(reader *r, size_t i, tuple_column *col, char *err, size_t errlen)
{
	uint8_t kind = (uint8_t)take_uint(r, 1);

	col->value = NULL;
	col->len = 0;
	if (r->short_read)
		return fail(err, errlen, "tuple data ends before column %zu", i + 1);
	col->kind = (char)kind;
	switch (kind) {
	case 'n':
	case 'u':
		return true;
	case 't':
	case 'b':
		col->len = take_length(r);
		col->value = take_bytes(r, col->len);
		if (r->short_read)
			return fail(err, errlen, "tuple data ends inside column %zu", i + 1);
		return true;
	default:
		return fail(err, errlen, "tuple data has unknown kind 0x%02x in column %zu", kind,
			    i + 1);
	}
}

/* Check that tuple (len bytes) holds exactly columns well-formed columns. */
static bool
check_tuple(const char *tuple, size_t len, uint16_t columns, char *err, size_t errlen)
{
	tuple_column col;
	reader r;

	reader_init(&r, tuple, len);
	for (size_t i = 0; i < columns; i++) {
		if (!read_column(&r, i, &col, err, errlen))
			return false;
	}
	return check_end(&r, "Insert", err, errlen);
}

/* An Insert ('N' and the new tuple) or Delete ('K' or 'O' and the old key
 * or row) message of kind. */
static bool
parse_change(reader *r, ob_pgo_msg *msg, ob_pgo_kind kind, char *err, size_t errlen)
{
	bool insert = kind == OB_PGO_INSERT;
	const char *what = insert ? "Insert" : "Delete";
	uint8_t marker;

	msg->relid = (uint32_t)take_uint(r, 4);
	marker = (uint8_t)take_uint(r, 1);
	msg->tuple_columns = (uint16_t)take_uint(r, 2);
	if (r->short_read)
		return fail(err, errlen, "%s message ends before its tuple data", what);
	if (insert ? marker != 'N' : marker != 'K' && marker != 'O')
		return fail(err, errlen, "%s message has 0x%02x where %s was expected", what,
			    marker, insert ? "'N'" : "'K' or 'O'");
	msg->kind = kind;
	msg->tuple = (const char *)r->p;
	msg->tuple_len = r->left;
	return check_tuple(msg->tuple, msg->tuple_len, msg->tuple_columns, err, errlen);
}

static bool
parse_message(reader *r, ob_pgo_msg *msg, char *err, size_t errlen)
{
	uint8_t flags = (uint8_t)take_uint(r, 1);

	msg->message_lsn = take_uint(r, 8);
	if (r->short_read)
		return fail(err, errlen, "logical message ends before its prefix");
	if (flags > 1)
		return fail(err, errlen, "logical message has unknown flags 0x%02x", flags);
	msg->prefix = take_string(r, &msg->prefix_len);
	if (r->short_read)
		return fail(err, errlen, "logical message's prefix is not NUL-terminated");
	msg->content_len = take_length(r);
	if (r->short_read)
		return fail(err, errlen, "logical message ends before its content length");
	msg->content = take_bytes(r, msg->content_len);
	if (r->short_read)
		return fail(err, errlen, "logical message has %zu content bytes of the %zu it says",
			    r->left, msg->content_len);
	msg->kind = OB_PGO_MESSAGE;
	msg->transactional = flags == 1;
	return check_end(r, "logical", err, errlen);
}

/* On failure *msg holds whatever was read before the fault: the caller
 * uses none of it. */
bool
ob_pgo_parse(const char *data, size_t len, ob_pgo_msg *msg, char *err, size_t errlen)
{
	reader r;
	uint8_t type;

	memset(msg, 0, sizeof(*msg));
	reader_init(&r, data, len);
	type = (uint8_t)take_uint(&r, 1);
	if (r.short_read)
		return fail(err, errlen, "empty message");
	switch (type) {
	case 'B':
		return parse_begin(&r, msg, err, errlen);
	case 'C':
		return parse_commit(&r, msg, err, errlen);
	case 'R':
		msg->kind = OB_PGO_RELATION;
		msg->relid = (uint32_t)take_uint(&r, 4);
		if (r.short_read)
			return fail(err, errlen, "Relation message ends before its relation id");
		return true;
	case 'I':
		return parse_change(&r, msg, OB_PGO_INSERT, err, errlen);
	case 'M':
		return parse_message(&r, msg, err, errlen);
	case 'D':
		return parse_change(&r, msg, OB_PGO_DELETE, err, errlen);
	case 'Y':
	case 'O':
	case 'U':
	case 'T':
		msg->kind = OB_PGO_OTHER;
		return true;
	default:
		return fail(err, errlen, "unknown message type 0x%02x", type);
	}
}

/* --- the relation cache --------------------------------------------------- */

/*
 * The relations are kept in one array, looked up by id one by one (a
 * publication has a handful of tables). A Relation message is read whole
 * into a new entry before anything is replaced, so a malformed one leaves
 * the cache as it was. Putting a relation may move the array and replaces
 * the names of an entry with the same id: a relation returned by
 * ob_pgo_relcache_get() or ob_pgo_row(), and a row's names and kinds, are
 * valid until the next ob_pgo_relcache_put(), ob_pgo_relcache_clear() or
 * ob_pgo_relcache_free().
 */

static void
relation_free(ob_pgo_relation *rel)
{
	for (size_t i = 0; i < rel->columns_len; i++)
		free(rel->column_names[i]);
	free(rel->column_names);
	free(rel->type_oids);
	free(rel->column_kinds);
	free(rel->schema);
	free(rel->name);
	memset(rel, 0, sizeof(*rel));
}

void
ob_pgo_relcache_init(ob_pgo_relcache *c)
{
	memset(c, 0, sizeof(*c));
}

void
ob_pgo_relcache_clear(ob_pgo_relcache *c)
{
	for (size_t i = 0; i < c->len; i++)
		relation_free(&c->rels[i]);
	c->len = 0;
}

void
ob_pgo_relcache_free(ob_pgo_relcache *c)
{
	ob_pgo_relcache_clear(c);
	free(c->rels);
	free(c->values);
	free(c->lengths);
	memset(c, 0, sizeof(*c));
}

/* Read a Relation message's columns into rel, whose columns_len counts
 * the ones read so far (relation_free() releases them on failure). */
static bool
read_relation_columns(reader *r, ob_pgo_relation *rel, uint16_t columns, char *err, size_t errlen)
{
	/* Each column takes at least 10 bytes: flags, an empty name's NUL,
	 * the type oid and the type modifier. Checked before allocating, so
	 * a short message cannot make the arrays large. */
	if (r->left / 10 < columns)
		return fail(err, errlen, "Relation message is too short for %u columns", columns);
	rel->column_names = ob_xcalloc(columns, sizeof(*rel->column_names));
	rel->type_oids = ob_xcalloc(columns, sizeof(*rel->type_oids));
	rel->column_kinds = ob_xcalloc(columns, sizeof(*rel->column_kinds));
	for (size_t i = 0; i < columns; i++) {
		const char *name;
		size_t name_len;
		uint32_t oid;

		/* The flags (1: part of the key) and the type modifier are
		 * not kept: a row is read the same either way. */
		(void)take_uint(r, 1);
		name = take_string(r, &name_len);
		oid = (uint32_t)take_uint(r, 4);
		(void)take_uint(r, 4);
		if (r->short_read)
			return fail(err, errlen, "Relation message ends inside column %zu", i + 1);
		rel->column_names[i] = ob_xstrndup(name, name_len);
		rel->type_oids[i] = oid;
		rel->column_kinds[i] = ob_text_kind_for_type(oid);
		rel->columns_len = i + 1;
	}
	return check_end(r, "Relation", err, errlen);
}

/* Read a whole Relation message into rel (zeroed by the caller). */
static bool
read_relation(const char *data, size_t len, ob_pgo_relation *rel, char *err, size_t errlen)
{
	const char *schema, *name;
	size_t schema_len, name_len;
	uint16_t columns;
	reader r;

	reader_init(&r, data, len);
	if (take_uint(&r, 1) != 'R')
		return fail(err, errlen, "not a Relation message");
	rel->relid = (uint32_t)take_uint(&r, 4);
	schema = take_string(&r, &schema_len);
	name = take_string(&r, &name_len);
	if (r.short_read)
		return fail(err, errlen, "Relation message ends inside its names");
	/* The replica identity setting (Int8) matters only to updates and
	 * deletes. */
	(void)take_uint(&r, 1);
	columns = (uint16_t)take_uint(&r, 2);
	if (r.short_read)
		return fail(err, errlen, "Relation message ends before its column count");
	if (columns > MAX_COLUMNS)
		return fail(err, errlen, "Relation message claims %u columns, more than %d",
			    columns, MAX_COLUMNS);
	rel->schema = schema_len == 0 ? ob_xstrdup("pg_catalog") : ob_xstrndup(schema, schema_len);
	rel->name = ob_xstrndup(name, name_len);
	return read_relation_columns(&r, rel, columns, err, errlen);
}

/* The cache's entry for relid; NULL if there is none. */
static ob_pgo_relation *
find_relation(const ob_pgo_relcache *c, uint32_t relid)
{
	for (size_t i = 0; i < c->len; i++) {
		if (c->rels[i].relid == relid)
			return &c->rels[i];
	}
	return NULL;
}

bool
ob_pgo_relcache_put(ob_pgo_relcache *c, const char *data, size_t len, char *err, size_t errlen)
{
	ob_pgo_relation rel, *slot;

	memset(&rel, 0, sizeof(rel));
	if (!read_relation(data, len, &rel, err, errlen)) {
		relation_free(&rel);
		return false;
	}
	slot = find_relation(c, rel.relid);
	if (slot != NULL) {
		relation_free(slot);
	} else {
		if (c->len == c->cap) {
			c->cap = c->cap == 0 ? 8 : c->cap * 2;
			c->rels = ob_xrealloc(c->rels, c->cap * sizeof(*c->rels));
		}
		slot = &c->rels[c->len++];
	}
	*slot = rel;
	if (rel.columns_len > c->row_cap) {
		c->row_cap = rel.columns_len;
		c->values = ob_xrealloc(c->values, c->row_cap * sizeof(*c->values));
		c->lengths = ob_xrealloc(c->lengths, c->row_cap * sizeof(*c->lengths));
	}
	return true;
}

const ob_pgo_relation *
ob_pgo_relcache_get(const ob_pgo_relcache *c, uint32_t relid)
{
	return find_relation(c, relid);
}

/*
 * On success row's names and kinds are the relation's, and its values
 * point into the message's tuple data (the value and length arrays are
 * the cache's, overwritten by the next call). On failure *rel is still
 * the relation when one is known, so the caller can name the table, and
 * NULL otherwise.
 */
bool
ob_pgo_row(ob_pgo_relcache *c, const ob_pgo_msg *msg, const ob_pgo_relation **rel, ob_text_row *row,
	   char *err, size_t errlen)
{
	const ob_pgo_relation *r;
	tuple_column col;
	reader tuple;

	*rel = NULL;
	if (msg->kind != OB_PGO_INSERT)
		return fail(err, errlen, "not an Insert message");
	r = find_relation(c, msg->relid);
	if (r == NULL)
		return fail(err, errlen,
			    "Insert into relation %u, which no Relation message described",
			    msg->relid);
	*rel = r;
	if (msg->tuple_columns != r->columns_len)
		return fail(err, errlen,
			    "Insert into %s.%s has %u columns, its Relation message %zu", r->schema,
			    r->name, msg->tuple_columns, r->columns_len);
	reader_init(&tuple, msg->tuple, msg->tuple_len);
	for (size_t i = 0; i < r->columns_len; i++) {
		if (!read_column(&tuple, i, &col, err, errlen))
			return false;
		if (col.kind == 'u' || col.kind == 'b')
			return fail(err, errlen, "Insert into %s.%s: column %s is %s", r->schema,
				    r->name, r->column_names[i],
				    col.kind == 'u' ? "an unchanged TOAST value"
						    : "in binary format");
		c->values[i] = col.value;
		c->lengths[i] = col.len;
	}
	if (!check_end(&tuple, "Insert", err, errlen))
		return false;
	row->names = (const char *const *)r->column_names;
	row->kinds = r->column_kinds;
	row->values = c->values;
	row->lengths = c->lengths;
	row->columns_len = r->columns_len;
	return true;
}

bool
ob_pgo_column_text(const ob_pgo_relcache *c, const ob_pgo_msg *msg, const char *name,
		   const char **value, size_t *len)
{
	const ob_pgo_relation *r = find_relation(c, msg->relid);
	tuple_column col;
	reader tuple;
	char err[8];

	if (r == NULL || msg->tuple_columns != r->columns_len)
		return false;
	reader_init(&tuple, msg->tuple, msg->tuple_len);
	for (size_t i = 0; i < r->columns_len; i++) {
		if (!read_column(&tuple, i, &col, err, sizeof(err)))
			return false;
		if (strcmp(r->column_names[i], name) == 0) {
			*value = col.value;
			*len = col.len;
			return col.kind == 't';
		}
	}
	return false;
}
