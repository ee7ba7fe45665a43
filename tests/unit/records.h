/*
 * records.h: wal2json 2.5 records the unit tests share, byte for byte as
 * wal2json sends them with include-lsn, include-timestamp, include-xids and
 * include-types, and pgoutput messages (protocol 1, text) of the same row.
 */
#ifndef OUTBOXD_TEST_RECORDS_H
#define OUTBOXD_TEST_RECORDS_H

/* An insert into public.outbox of transaction 725. */
static const char rec_insert[] =
    "{\"action\":\"I\",\"xid\":725,\"timestamp\":\"2026-11-22 03:07:11.206737+00\","
    "\"lsn\":\"0/152D3E0\",\"schema\":\"public\",\"table\":\"outbox\",\"columns\":["
    "{\"name\":\"id\",\"type\":\"uuid\",\"value\":\"38a18a3a-8de4-4a2c-8a64-91f9bf2d053a\"},"
    "{\"name\":\"aggregate_type\",\"type\":\"text\",\"value\":\"order\"},"
    "{\"name\":\"aggregate_id\",\"type\":\"text\",\"value\":\"o-1\"},"
    "{\"name\":\"event_type\",\"type\":\"text\",\"value\":\"created\"},"
    "{\"name\":\"payload\",\"type\":\"jsonb\","
    "\"value\":\"{\\\"a\\\": \\\"x\\\\\\\"y\\\", \\\"b\\\": [1, 2.50]}\"},"
    "{\"name\":\"headers\",\"type\":\"jsonb\","
    "\"value\":\"{\\\"n\\\": 5, \\\"tr\\\": \\\"abc\\\"}\"},"
    "{\"name\":\"created_at\",\"type\":\"timestamp with time zone\","
    "\"value\":\"2026-11-22 03:07:11.205762+00\"}]}";

/* pgoutput: transaction 736 (its commit record at 0/1546280, ending at
 * 0/15462B0). */
/* Begin, the Relation of public.outbox before its first
 * row, the row of tests/unit/records.h, a transactional outbox message,
 * Commit. */
static const char msg_begin[] =
    "B\000\000\000\000\001Tb\200\000\003\003\355\366\011\322\211\000\000\002\340";

static const char msg_relation_outbox[] =
    "R\000\000@\000public\000outbox\000d\000\007\001id\000\000\000\013\206\377\377\377\377"
    "\000aggregate_type\000\000\000\000\031\377\377\377\377\000aggregate_id\000\000\000\000"
    "\031\377\377\377\377\000event_type\000\000\000\000\031\377\377\377\377\000payload\000"
    "\000\000\016\332\377\377\377\377\000headers\000\000\000\016\332\377\377\377\377\000creat"
    "ed_at\000\000\000\004\240\377\377\377\377";

static const char msg_insert_outbox[] =
    "I\000\000@\000N\000\007t\000\000\000$38a18a3a-8de4-4a2c-8a64-91f9bf2d053at\000\000\000"
    "\005ordert\000\000\000\003o-1t\000\000\000\007createdt\000\000\000\035{\"a\": \"x\\\"y\""
    ", \"b\": [1, 2.50]}t\000\000\000\025{\"n\": 5, \"tr\": \"abc\"}t\000\000\000\0352026-11-"
    "22 03:07:11.205762+00";

static const char msg_message_outbox[] =
    "M\001\000\000\000\000\001Tb\200outbox\000\000\000\000b{\"id\":\"m1\",\"aggregate_type\":"
    "\"order\",\"aggregate_id\":\"o-1\",\"event_type\":\"created\",\"payload\":{\"a\":1}}";

static const char msg_commit[] =
    "C\000\000\000\000\000\001Tb\200\000\000\000\000\001Tb\260\000\003\003\355\366\011\322"
    "\211";

#endif
