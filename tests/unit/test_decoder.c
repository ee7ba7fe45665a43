/*
 * test_decoder.c: both decoders' records as one change type (decoder.h):
 * the same transaction read as wal2json records and as pgoutput messages
 * gives the same kinds of change, each with what the relay needs from it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "outboxd/decoder.h"

#include "records.h"

#define W2J_BEGIN                                                                                  \
	"{\"action\":\"B\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","           \
	"\"lsn\":\"0/152D6A0\",\"nextlsn\":\"0/152D6D0\"}"
#define W2J_COMMIT                                                                                 \
	"{\"action\":\"C\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","           \
	"\"lsn\":\"0/152D6A0\",\"nextlsn\":\"0/152D6D0\"}"
#define W2J_MESSAGE                                                                                \
	"{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/152D630\","                 \
	"\"transactional\":false,\"prefix\":\"outbox\",\"content\":\"nt\"}"
#define W2J_UPDATE                                                                                 \
	"{\"action\":\"U\",\"xid\":725,\"lsn\":\"0/152D500\",\"schema\":\"public\","               \
	"\"table\":\"other\",\"columns\":[]}"

/* Deletes of the row of rec_insert (X) and of another row (Y). */
#define W2J_DELETE(id)                                                                             \
	"{\"action\":\"D\",\"xid\":725,\"lsn\":\"0/152D400\",\"schema\":\"public\","               \
	"\"table\":\"outbox_b\",\"identity\":[{\"name\":\"id\",\"type\":\"uuid\",\"value\":\"" id  \
	"\"},{\"name\":\"region\",\"type\":\"text\",\"value\":\"b\"}]}"
#define ID_X                "38a18a3a-8de4-4a2c-8a64-91f9bf2d053a"
#define ID_Y                "0b7e5f8e-2f52-4c1a-9d7e-1f6f3d9c2a11"
/* pgoutput: the same deletes, as Delete messages of the relation of
 * msg_relation_outbox (16384) and of another one (16385). */
#define PGO_DELETE(rel, id) "D\000\000@" rel "K\000\007t\000\000\000$" id "nnnnnn"

typedef struct decode_case {
	const char *data;
	size_t len;
	bool parses;
	ob_change_kind kind;
	ob_lsn lsn;
	const char *table; /* ROW: the table named; NULL: none */
} decode_case;

#define TEXT(s) s, sizeof(s) - 1

static const decode_case w2j_cases[] = {
    {TEXT(W2J_BEGIN), true, OB_CHANGE_BEGIN, 0x152D6A0},
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
    {TEXT(W2J_COMMIT), true, OB_CHANGE_COMMIT, 0x152D6D0},
    {TEXT(W2J_MESSAGE), true, OB_CHANGE_MESSAGE, 0x152D630},
    {TEXT(W2J_UPDATE), true, OB_CHANGE_OTHER, 0},
    {TEXT("{\"action\":"), false, OB_CHANGE_OTHER, 0},
};

static void
run(ob_decoder *d, const decode_case *cases, size_t n, ob_lsn data_start)
{
	for (size_t i = 0; i < n; i++) {
		const decode_case *c = &cases[i];
		ob_change ch;
		char err[256] = "";
		bool ok = ob_decoder_next(d, c->data, c->len, data_start, &ch, err, sizeof(err));

		if (ok != c->parses)
			fail_msg("case %zu: parses %d, wanted %d (%s)", i, ok, c->parses, err);
		assert_int_equal(ch.kind, c->kind);
		if (ok)
			assert_int_equal(ch.lsn, c->lsn);
		if (c->table != NULL)
			assert_string_equal(ch.table, c->table);
	}
}

/* A row that an UPDATE moved into another partition: a delete and at
 * once an insert of the same id in one transaction (decoder.h). */
static const decode_case w2j_move_cases[] = {
    {TEXT(W2J_BEGIN), true, OB_CHANGE_BEGIN, 0x152D6A0},
    {TEXT(W2J_DELETE(ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(rec_insert), true, OB_CHANGE_OTHER, 0}, /* moved */
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
    /* Insert then delete (the empty table) publishes the insert. */
    {TEXT(W2J_DELETE(ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(W2J_MESSAGE), true, OB_CHANGE_MESSAGE, 0x152D630},
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
    {TEXT(W2J_DELETE(ID_Y)), true, OB_CHANGE_OTHER, 0},
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
    {TEXT(W2J_DELETE(ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(W2J_UPDATE), true, OB_CHANGE_OTHER, 0},
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
    {TEXT(W2J_DELETE(ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(W2J_COMMIT), true, OB_CHANGE_COMMIT, 0x152D6D0},
    {TEXT(W2J_BEGIN), true, OB_CHANGE_BEGIN, 0x152D6A0},
    {TEXT(rec_insert), true, OB_CHANGE_ROW, 0x152D3E0, "outbox"},
};

static const decode_case pgo_move_cases[] = {
    {TEXT(msg_begin), true, OB_CHANGE_BEGIN, 0x1546280},
    {TEXT(msg_relation_outbox), true, OB_CHANGE_RELATION, 0},
    {TEXT(PGO_DELETE("\000", ID_X)), true, OB_CHANGE_OTHER, 0},
    /* Relations described in between are no change. */
    {TEXT(msg_relation_outbox), true, OB_CHANGE_RELATION, 0},
    {TEXT(msg_insert_outbox), true, OB_CHANGE_OTHER, 0x2000}, /* moved */
    {TEXT(msg_insert_outbox), true, OB_CHANGE_ROW, 0x2000, "outbox"},
    {TEXT(PGO_DELETE("\000", ID_Y)), true, OB_CHANGE_OTHER, 0},
    {TEXT(msg_insert_outbox), true, OB_CHANGE_ROW, 0x2000, "outbox"},
    /* Another relation's row of the same id. */
    {TEXT(PGO_DELETE("\001", ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(msg_insert_outbox), true, OB_CHANGE_ROW, 0x2000, "outbox"},
    {TEXT(PGO_DELETE("\000", ID_X)), true, OB_CHANGE_OTHER, 0},
    {TEXT(msg_commit), true, OB_CHANGE_COMMIT, 0x15462B0},
    {TEXT(msg_begin), true, OB_CHANGE_BEGIN, 0x1546280},
    {TEXT(msg_insert_outbox), true, OB_CHANGE_ROW, 0x2000, "outbox"},
};

static void
test_moves(void **state)
{
	ob_decoder d;

	(void)state;
	ob_decoder_init(&d, OB_PLUGIN_WAL2JSON, "id");
	run(&d, w2j_move_cases, sizeof(w2j_move_cases) / sizeof(w2j_move_cases[0]), 0x1000);
	ob_decoder_free(&d);
	ob_decoder_init(&d, OB_PLUGIN_PGOUTPUT, "id");
	run(&d, pgo_move_cases, sizeof(pgo_move_cases) / sizeof(pgo_move_cases[0]), 0x2000);
	ob_decoder_free(&d);
}

static void
test_wal2json(void **state)
{
	ob_decoder d;
	ob_change ch;
	char err[256];

	(void)state;
	ob_decoder_init(&d, OB_PLUGIN_WAL2JSON, "id");
	run(&d, w2j_cases, sizeof(w2j_cases) / sizeof(w2j_cases[0]), 0x1000);
	/* The row is the wal2json record's; the begin carries its time. */
	assert_true(ob_decoder_next(&d, TEXT(rec_insert), 0x1000, &ch, err, sizeof(err)));
	assert_non_null(ch.w2j);
	assert_string_equal(ch.schema, "public");
	assert_true(ob_decoder_next(&d, TEXT(W2J_BEGIN), 0x1000, &ch, err, sizeof(err)));
	assert_true(ch.commit_us > 0);
	assert_true(ob_decoder_next(&d, TEXT(W2J_MESSAGE), 0x1000, &ch, err, sizeof(err)));
	assert_false(ch.message.transactional);
	assert_string_equal(ch.message.prefix, "outbox");
	ob_decoder_free(&d);
}

static const decode_case pgo_cases[] = {
    {TEXT(msg_begin), true, OB_CHANGE_BEGIN, 0x1546280},
    /* A row of a relation not described yet cannot be read. */
    {TEXT(msg_insert_outbox), false, OB_CHANGE_ROW, 0},
    {TEXT(msg_relation_outbox), true, OB_CHANGE_RELATION, 0},
    {TEXT(msg_insert_outbox), true, OB_CHANGE_ROW, 0x2000, "outbox"},
    {TEXT(msg_message_outbox), true, OB_CHANGE_MESSAGE, 0x1546280},
    {TEXT(msg_commit), true, OB_CHANGE_COMMIT, 0x15462B0},
    {TEXT("R\000"), false, OB_CHANGE_OTHER, 0},
};

static void
test_pgoutput(void **state)
{
	ob_decoder d;
	ob_change ch;
	char err[256];

	(void)state;
	ob_decoder_init(&d, OB_PLUGIN_PGOUTPUT, "id");
	run(&d, pgo_cases, sizeof(pgo_cases) / sizeof(pgo_cases[0]), 0x2000);
	/* The row is a text row of the relation's columns. */
	assert_true(ob_decoder_next(&d, TEXT(msg_insert_outbox), 0x2000, &ch, err, sizeof(err)));
	assert_null(ch.w2j);
	assert_int_equal(ch.text.columns_len, 7);
	assert_string_equal(ch.schema, "public");
	/* A new session forgets the relations. */
	ob_decoder_reset(&d);
	assert_false(ob_decoder_next(&d, TEXT(msg_insert_outbox), 0x2000, &ch, err, sizeof(err)));
	assert_int_equal(ch.kind, OB_CHANGE_ROW);
	assert_null(ch.table);
	ob_decoder_free(&d);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wal2json),
	    cmocka_unit_test(test_pgoutput),
	    cmocka_unit_test(test_moves),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
