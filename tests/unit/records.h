/*
 * records.h: wal2json 2.5 records the unit tests share, byte for byte as
 * wal2json sends them with include-lsn, include-timestamp, include-xids and
 * include-types.
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

#endif
