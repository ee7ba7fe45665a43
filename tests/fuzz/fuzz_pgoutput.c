/*
 * fuzz_pgoutput.c: libFuzzer target for the pgoutput message parser, the
 * relation cache and the outbox mapper on what they produce.
 *
 * The input is a sequence of messages, each framed by a big-endian 2-byte
 * length (a frame longer than what is left takes what is left; a lone last
 * byte is a message of its own), so that a Relation can precede the Insert
 * it describes. A frame of length 0 stands
 * for a new replication session: the relation cache is cleared, as the
 * relay clears it on reconnecting. Each message is copied into a buffer of
 * exactly its size, so a read past its end is a sanitizer finding rather
 * than a read of the next frame, and the buffer is freed after the message,
 * so a relation cache that kept pointers into it is one too.
 *
 * Every message goes through ob_pgo_parse(). One that does not parse must
 * say why. One that parses must point into its own buffer only; a Relation
 * is put into the cache, an Insert is turned into a row with ob_pgo_row()
 * and mapped with ob_mapper_map_text_row(), and a Message is mapped with
 * ob_mapper_map_logical_message(), both with the default configuration
 * (public.outbox as sql/outbox.sql creates it). Every record mapped is
 * checked with ob_fuzz_check_event().
 */
#include "fuzz.h"

#include "outboxd/config.h"
#include "outboxd/log.h"
#include "outboxd/pgoutput.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The commit time the mapper falls back on. */
#define COMMIT_MS INT64_C(1700000000123)

static ob_config config;
static ob_mapper mapper;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	ob_log_configure(OB_LOG_TEXT, OB_LOG_ERROR);
	ob_config_init(&config);
	OB_FUZZ_CHECK(ob_config_finish(&config));
	ob_mapper_init(&mapper, &config);
	return 0;
}

/* True if p[0..len) lies inside data[0..size). */
static bool
inside(const void *p, size_t len, const char *data, size_t size)
{
	const char *b = p;

	return b >= data && b <= data + size && len <= (size_t)(data + size - b);
}

/* The big-endian integer of n bytes at p. */
static uint64_t
be(const char *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v << 8 | (uint8_t)p[i];
	return v;
}

/* Check that a parsed message holds its fields as the protocol places
 * them, and refers to its own bytes only. */
static void
check_msg(const ob_pgo_msg *msg, const char *data, size_t size)
{
	switch (msg->kind) {
	case OB_PGO_BEGIN:
		OB_FUZZ_CHECK(size == 21 && msg->commit_lsn == be(data + 1, 8));
		OB_FUZZ_CHECK(msg->commit_us - OB_PGO_EPOCH_OFFSET_US == (int64_t)be(data + 9, 8));
		OB_FUZZ_CHECK(msg->xid == be(data + 17, 4) && msg->commit_lsn != 0);
		break;
	case OB_PGO_COMMIT:
		OB_FUZZ_CHECK(size == 26 && msg->commit_lsn == be(data + 2, 8));
		OB_FUZZ_CHECK(msg->end_lsn == be(data + 10, 8) && msg->end_lsn > msg->commit_lsn);
		OB_FUZZ_CHECK(msg->commit_us - OB_PGO_EPOCH_OFFSET_US == (int64_t)be(data + 18, 8));
		break;
	case OB_PGO_INSERT:
	case OB_PGO_DELETE:
		OB_FUZZ_CHECK(inside(msg->tuple, msg->tuple_len, data, size));
		/* Each column takes at least one byte. */
		OB_FUZZ_CHECK(msg->tuple_columns <= msg->tuple_len);
		break;
	case OB_PGO_MESSAGE:
		OB_FUZZ_CHECK(inside(msg->prefix, msg->prefix_len + 1, data, size));
		OB_FUZZ_CHECK(strlen(msg->prefix) == msg->prefix_len);
		OB_FUZZ_CHECK(inside(msg->content, msg->content_len, data, size));
		break;
	case OB_PGO_RELATION:
	case OB_PGO_OTHER:
		break;
	}
}

/* Check a relation the cache has just taken in. */
static void
check_relation(const ob_pgo_relcache *c, uint32_t relid)
{
	const ob_pgo_relation *rel = ob_pgo_relcache_get(c, relid);

	OB_FUZZ_CHECK(rel != NULL && rel->relid == relid);
	OB_FUZZ_CHECK(rel->schema[0] != '\0' && rel->name != NULL);
	OB_FUZZ_CHECK(rel->columns_len <= 1664 && rel->columns_len <= c->row_cap);
	for (size_t i = 0; i < rel->columns_len; i++) {
		OB_FUZZ_CHECK(rel->column_names[i] != NULL);
		OB_FUZZ_CHECK(rel->column_kinds[i] == ob_text_kind_for_type(rel->type_oids[i]));
	}
	/* Ids are unique in the cache. */
	for (size_t i = 0; i < c->len; i++)
		OB_FUZZ_CHECK(&c->rels[i] == rel || c->rels[i].relid != relid);
}

/* Check a mapped record: an event has a key and starts with its "id"
 * header, a dead-letter record goes to the dead-letter topic and starts
 * with "error". */
static void
check_mapped(ob_map_result r, const ob_event *ev)
{
	size_t dlq_len = strlen(config.outbox.dlq_topic);

	if (r == OB_MAP_SKIP)
		return;
	ob_fuzz_check_event(ev);
	OB_FUZZ_CHECK(ev->headers_len > 0);
	if (r == OB_MAP_EVENT) {
		OB_FUZZ_CHECK(ev->dlq_reason == NULL && ev->has_key);
		OB_FUZZ_CHECK(strcmp(ob_event_ptr(ev, ev->headers[0].name), "id") == 0);
		return;
	}
	OB_FUZZ_CHECK(r == OB_MAP_DLQ && ev->dlq_reason != NULL);
	OB_FUZZ_CHECK(ev->topic.len == dlq_len &&
		      memcmp(ob_event_ptr(ev, ev->topic), config.outbox.dlq_topic, dlq_len) == 0);
	OB_FUZZ_CHECK(strcmp(ob_event_ptr(ev, ev->headers[0].name), "error") == 0);
}

/* Turn an Insert into a row of its relation and map it. */
static void
map_insert(ob_pgo_relcache *c, const ob_pgo_msg *msg, ob_event *ev)
{
	const ob_pgo_relation *rel;
	ob_text_row row;
	char err[256] = "";

	if (!ob_pgo_row(c, msg, &rel, &row, err, sizeof(err))) {
		OB_FUZZ_CHECK(err[0] != '\0');
		OB_FUZZ_CHECK(rel == NULL || rel == ob_pgo_relcache_get(c, msg->relid));
		return;
	}
	OB_FUZZ_CHECK(rel == ob_pgo_relcache_get(c, msg->relid));
	OB_FUZZ_CHECK(row.columns_len == rel->columns_len && row.columns_len == msg->tuple_columns);
	for (size_t i = 0; i < row.columns_len; i++) {
		OB_FUZZ_CHECK(row.names[i] == rel->column_names[i]);
		OB_FUZZ_CHECK(row.kinds[i] == rel->column_kinds[i]);
		OB_FUZZ_CHECK(row.values[i] != NULL || row.lengths[i] == 0);
		OB_FUZZ_CHECK(row.values[i] == NULL ||
			      inside(row.values[i], row.lengths[i], msg->tuple, msg->tuple_len));
	}
	check_mapped(ob_mapper_map_text_row(&mapper, &row, 0x16b3748, COMMIT_MS, ev), ev);
}

static void
map_message(const ob_pgo_msg *msg, ob_event *ev)
{
	ob_logical_message lm = {
	    .lsn = msg->message_lsn,
	    .transactional = msg->transactional,
	    .prefix = msg->prefix,
	    .content = msg->content,
	    .content_len = msg->content_len,
	};

	check_mapped(ob_mapper_map_logical_message(&mapper, &lm, COMMIT_MS, ev), ev);
}

/* Run one message (len bytes at frame) through the parser and the cache. */
static void
run_message(ob_pgo_relcache *c, const uint8_t *frame, size_t len, ob_event *ev)
{
	char *data = malloc(len > 0 ? len : 1);
	char err[256] = "";
	ob_pgo_msg msg;
	const char *id;
	size_t id_len;

	OB_FUZZ_CHECK(data != NULL);
	if (len > 0)
		memcpy(data, frame, len);
	if (!ob_pgo_parse(data, len, &msg, err, sizeof(err))) {
		OB_FUZZ_CHECK(err[0] != '\0');
		goto out;
	}
	check_msg(&msg, data, len);
	switch (msg.kind) {
	case OB_PGO_RELATION:
		if (ob_pgo_relcache_put(c, data, len, err, sizeof(err)))
			check_relation(c, msg.relid);
		else
			OB_FUZZ_CHECK(err[0] != '\0');
		break;
	case OB_PGO_INSERT:
		map_insert(c, &msg, ev);
		break;
	case OB_PGO_MESSAGE:
		map_message(&msg, ev);
		break;
	case OB_PGO_DELETE:
		if (ob_pgo_column_text(c, &msg, "id", &id, &id_len))
			OB_FUZZ_CHECK(inside(id, id_len, data, len));
		break;
	case OB_PGO_BEGIN:
	case OB_PGO_COMMIT:
	case OB_PGO_OTHER:
		break;
	}
out:
	free(data);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ob_pgo_relcache cache;
	ob_event ev;
	size_t pos = 0;

	ob_pgo_relcache_init(&cache);
	ob_event_init(&ev);
	while (pos < size) {
		size_t len = size - pos;

		/* A lone last byte is a message of its own. */
		if (len >= 2) {
			len = (size_t)data[pos] << 8 | data[pos + 1];
			pos += 2;
			if (len > size - pos)
				len = size - pos;
		}
		if (len == 0)
			ob_pgo_relcache_clear(&cache);
		run_message(&cache, data + pos, len, &ev);
		pos += len;
	}
	ob_pgo_relcache_free(&cache);
	ob_event_free(&ev);
	return 0;
}
