/*
 * decoder.c: wal2json records and pgoutput messages as ob_change (see
 * decoder.h).
 */
#include "outboxd/decoder.h"

#include <stdlib.h>
#include <string.h>

void
ob_decoder_init(ob_decoder *d, ob_plugin plugin, const char *id_column)
{
	memset(d, 0, sizeof(*d));
	d->plugin = plugin;
	d->id_column = id_column;
	ob_pgo_relcache_init(&d->relcache);
}

void
ob_decoder_free(ob_decoder *d)
{
	ob_pgo_relcache_free(&d->relcache);
	free(d->deleted_id);
}

void
ob_decoder_reset(ob_decoder *d)
{
	ob_pgo_relcache_clear(&d->relcache);
	d->deleted = false;
}

/* The change just decoded deleted the row whose id is value (NULL: a row
 * whose key does not hold the id, which no insert matches). */
static void
note_delete(ob_decoder *d, uint32_t relid, const char *value, size_t len, bool is_string)
{
	d->deleted = value != NULL;
	if (value == NULL)
		return;
	if (len > d->deleted_cap) {
		d->deleted_cap = len;
		d->deleted_id = ob_xrealloc(d->deleted_id, len);
	}
	memcpy(d->deleted_id, value, len);
	d->deleted_len = len;
	d->deleted_string = is_string;
	d->deleted_relid = relid;
}

/* Whether an insert of id value (of relation relid) is the row the
 * change before it deleted: a move (decoder.h). The caller took the
 * delete's turn (d->deleted, as pending) before it read the insert: every
 * change but relation and type descriptions ends it. */
static bool
moved(const ob_decoder *d, uint32_t relid, const char *value, size_t len, bool is_string)
{
	return relid == d->deleted_relid && len == d->deleted_len &&
	       is_string == d->deleted_string && memcmp(value, d->deleted_id, len) == 0;
}

/* A transaction of either decoder begins (its commit record starts at
 * lsn) or commits (its commit record ends at lsn). */
static void
transaction(ob_change *ch, ob_change_kind kind, ob_lsn lsn, int64_t commit_us)
{
	ch->kind = kind;
	ch->lsn = lsn;
	ch->commit_us = commit_us;
}

/* A logical message of either decoder. */
static void
message(ob_change *ch, ob_lsn lsn, bool transactional, const char *prefix, bool prefix_too_long,
	const char *content, size_t content_len, bool content_escaped)
{
	ch->kind = OB_CHANGE_MESSAGE;
	ch->lsn = lsn;
	ch->message = (ob_logical_message){lsn,     transactional, prefix,         prefix_too_long,
					   content, content_len,   content_escaped};
}

/* The id column of a wal2json I record, or of a D record's identity;
 * NULL when it has none. */
static const ob_w2j_column *
w2j_id(const ob_decoder *d)
{
	const char *type;
	size_t type_len;

	return ob_w2j_column_find(&d->rec, d->id_column, &type, &type_len);
}

/* With wal2json the stream holds only the outbox's tables (add-tables):
 * the old and the new partition of a moved row are both among them, and
 * no relation is compared. */
static bool
wal2json(ob_decoder *d, const char *data, size_t len, ob_change *ch, char *err, size_t errlen)
{
	const ob_w2j_record *r = &d->rec;
	const ob_w2j_column *id;
	bool pending = d->deleted;

	d->deleted = false;
	if (!ob_w2j_parse(data, len, &d->rec, err, errlen))
		return false;
	switch (r->action) {
	case OB_W2J_BEGIN:
		transaction(ch, OB_CHANGE_BEGIN, r->lsn, r->has_timestamp ? r->timestamp_us : 0);
		break;
	case OB_W2J_DELETE:
		id = w2j_id(d);
		note_delete(d, 0, id != NULL ? id->value : NULL, id != NULL ? id->value_len : 0,
			    id != NULL && id->value_is_string);
		break;
	case OB_W2J_INSERT:
		if (pending && (id = w2j_id(d)) != NULL &&
		    moved(d, 0, id->value, id->value_len, id->value_is_string))
			break;
		ch->kind = OB_CHANGE_ROW;
		ch->lsn = r->lsn;
		ch->schema = r->schema;
		ch->table = r->table;
		ch->w2j = r;
		break;
	case OB_W2J_COMMIT:
		transaction(ch, OB_CHANGE_COMMIT, r->nextlsn, 0);
		break;
	case OB_W2J_MESSAGE:
		message(ch, r->lsn, r->transactional, r->prefix, r->prefix_too_long, r->content,
			r->content_len, r->content_escaped);
		break;
	case OB_W2J_OTHER:
		break;
	}
	return true;
}

/* The id column of a text row; false when it has none (or it is NULL). */
static bool
text_id(const ob_decoder *d, const ob_text_row *row, const char **value, size_t *len)
{
	for (size_t i = 0; i < row->columns_len; i++) {
		if (strcmp(row->names[i], d->id_column) == 0) {
			*value = row->values[i];
			*len = row->lengths[i];
			return *value != NULL;
		}
	}
	return false;
}

static bool
pgoutput(ob_decoder *d, const char *data, size_t len, ob_lsn data_start, ob_change *ch, char *err,
	 size_t errlen)
{
	const ob_pgo_msg *m = &d->pgo;
	const ob_pgo_relation *rel;
	const char *id = NULL;
	size_t id_len = 0;
	bool pending = d->deleted;
	bool ok;

	/* A relation ('R') or type ('Y') described between a delete and an
	 * insert is no change. */
	if (len == 0 || (data[0] != 'R' && data[0] != 'Y'))
		d->deleted = false;
	if (!ob_pgo_parse(data, len, &d->pgo, err, errlen))
		return false;
	switch (m->kind) {
	case OB_PGO_BEGIN:
		/* Begin tells where the commit record starts (which places the
		 * transaction), Commit where it ends (what it confirms). */
		transaction(ch, OB_CHANGE_BEGIN, m->commit_lsn, m->commit_us);
		break;
	case OB_PGO_COMMIT:
		transaction(ch, OB_CHANGE_COMMIT, m->end_lsn, 0);
		break;
	case OB_PGO_RELATION:
		ch->kind = OB_CHANGE_RELATION;
		return ob_pgo_relcache_put(&d->relcache, data, len, err, errlen);
	case OB_PGO_INSERT:
		/* A partition's rows come under its partitioned table. */
		ch->kind = OB_CHANGE_ROW;
		ch->lsn = data_start;
		ok = ob_pgo_row(&d->relcache, m, &rel, &ch->text, err, errlen);
		if (rel != NULL) {
			ch->schema = rel->schema;
			ch->table = rel->name;
		}
		if (ok && pending && text_id(d, &ch->text, &id, &id_len) &&
		    moved(d, m->relid, id, id_len, true))
			ch->kind = OB_CHANGE_OTHER;
		return ok;
	case OB_PGO_DELETE:
		/* A delete that cannot be read is passed over, as every
		 * delete was before moves were told apart. */
		if (!ob_pgo_column_text(&d->relcache, m, d->id_column, &id, &id_len))
			id = NULL;
		note_delete(d, m->relid, id, id_len, true);
		break;
	case OB_PGO_MESSAGE:
		message(ch, m->message_lsn, m->transactional, m->prefix, false, m->content,
			m->content_len, false);
		break;
	case OB_PGO_OTHER:
		break;
	}
	return true;
}

bool
ob_decoder_next(ob_decoder *d, const char *data, size_t len, ob_lsn data_start, ob_change *ch,
		char *err, size_t errlen)
{
	memset(ch, 0, sizeof(*ch));
	ch->kind = OB_CHANGE_OTHER;
	if (d->plugin == OB_PLUGIN_PGOUTPUT)
		return pgoutput(d, data, len, data_start, ch, err, errlen);
	return wal2json(d, data, len, ch, err, errlen);
}
