/*
 * decoder.h: the stream's records, wal2json's or pgoutput's, as changes
 * of one type (change.h).
 *
 * wal2json.c and pgoutput.c parse their formats; this module turns what
 * they parse into ob_change, keeping what a session of either needs
 * between records (pgoutput's relations), so that the relay has one
 * dispatch whatever postgres.plugin says. Pure: no I/O, no logging.
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
} ob_decoder;

void ob_decoder_init(ob_decoder *d, ob_plugin plugin);
void ob_decoder_free(ob_decoder *d);
/* A new replication session: what the last one described is forgotten
 * (pgoutput describes its relations again). */
void ob_decoder_reset(ob_decoder *d);

/* Decode the record of len bytes that starts at WAL position data_start
 * into *ch. False, with err, when it does not parse: ch->kind is then
 * OB_CHANGE_ROW (with the table when it is known) for a row that cannot be
 * read, OB_CHANGE_RELATION for a relation that cannot, and OB_CHANGE_OTHER
 * when not even the record's kind could be read. */
bool ob_decoder_next(ob_decoder *d, const char *data, size_t len, ob_lsn data_start, ob_change *ch,
		     char *err, size_t errlen) OB_MUST_CHECK;

#endif
