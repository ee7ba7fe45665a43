/*
 * decoder.c: wal2json records and pgoutput messages as ob_change (see
 * decoder.h).
 */
#include "outboxd/decoder.h"

#include <string.h>

void
ob_decoder_init(ob_decoder *d, ob_plugin plugin)
{
	memset(d, 0, sizeof(*d));
	d->plugin = plugin;
	ob_pgo_relcache_init(&d->relcache);
}

void
ob_decoder_free(ob_decoder *d)
{
	ob_pgo_relcache_free(&d->relcache);
}

void
ob_decoder_reset(ob_decoder *d)
{
	ob_pgo_relcache_clear(&d->relcache);
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

static bool
wal2json(ob_decoder *d, const char *data, size_t len, ob_change *ch, char *err, size_t errlen)
{
	const ob_w2j_record *r = &d->rec;

	if (!ob_w2j_parse(data, len, &d->rec, err, errlen))
		return false;
	switch (r->action) {
	case OB_W2J_BEGIN:
		transaction(ch, OB_CHANGE_BEGIN, r->lsn, r->has_timestamp ? r->timestamp_us : 0);
		break;
	case OB_W2J_INSERT:
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

static bool
pgoutput(ob_decoder *d, const char *data, size_t len, ob_lsn data_start, ob_change *ch, char *err,
	 size_t errlen)
{
	const ob_pgo_msg *m = &d->pgo;
	const ob_pgo_relation *rel;
	bool ok;

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
		return ok;
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
