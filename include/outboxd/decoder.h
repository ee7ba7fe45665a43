/*
 * decoder.h: the stream's records, wal2json's or pgoutput's, as changes
 * of one type (change.h).
 *
 * wal2json.c and pgoutput.c parse their formats; this module turns what
 * they parse into ob_change, keeping what a session of either needs
 * between records (pgoutput's relations), so that the relay has one
 * dispatch whatever postgres.plugin says. Pure: no I/O, no logging.
 *
 * A row that an UPDATE moves into another partition of a partitioned
 * outbox table (its partition key changed) is, in the stream of either
 * decoder, a DELETE of the row from its old partition followed at once by
 * an INSERT of it into the new one, in the same transaction: it is not a
 * new event. So an insert whose id (outbox.id_column) is the id of the row
 * the change just before it deleted, in the same transaction (and, with
 * pgoutput, of the same relation), is passed over (OB_CHANGE_OTHER).
 * Relation and type descriptions in between count as no change. The
 * stream carries deletes only for a partitioned table (wal2json's actions,
 * pgoutput's publication: sql/README.md, "Rows moved between
 * partitions"); without them no insert is passed over.
 */
#ifndef OUTBOXD_DECODER_H
#define OUTBOXD_DECODER_H

#include "outboxd/change.h"
#include "outboxd/common.h"
#include "outboxd/config.h"
#include "outboxd/pgoutput.h"
#include "outboxd/wal2json.h"

typedef struct ob_decoder {
	ob_plugin plugin;
	ob_w2j_record rec;        /* wal2json: points into the record being decoded */
	ob_pgo_msg pgo;           /* pgoutput: points into the message being decoded */
	ob_pgo_relcache relcache; /* pgoutput: the relations of this session */
	const char *id_column;    /* not owned */
	/* The id of the row the previous change deleted (deleted_len bytes:
	 * wal2json's JSON value text, pgoutput's text value), while that
	 * change is the last one. */
	bool deleted;
	bool deleted_string; /* wal2json: the value is a JSON string */
	uint32_t deleted_relid;
	char *deleted_id; /* owned */
	size_t deleted_len, deleted_cap;
} ob_decoder;

/* id_column (outbox.id_column) must outlive the decoder. */
void ob_decoder_init(ob_decoder *d, ob_plugin plugin, const char *id_column);
void ob_decoder_free(ob_decoder *d);
/* A new replication session: what the last one described (pgoutput
 * describes its relations again) and the last delete are forgotten. */
void ob_decoder_reset(ob_decoder *d);

/* Decode the record of len bytes that starts at WAL position data_start
 * into *ch. False, with err, when it does not parse: ch->kind is then
 * OB_CHANGE_ROW (with the table when it is known) for a row that cannot be
 * read, OB_CHANGE_RELATION for a relation that cannot, and OB_CHANGE_OTHER
 * when not even the record's kind could be read. */
bool ob_decoder_next(ob_decoder *d, const char *data, size_t len, ob_lsn data_start, ob_change *ch,
		     char *err, size_t errlen) OB_MUST_CHECK;

#endif
