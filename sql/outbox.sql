-- outbox.sql — the transactional-outbox table outboxd publishes from.
--
-- The column names below are outboxd's defaults (README "Configuration reference", [outbox]); with
-- this table no [outbox] setting needs changing. Run it as the owner of the
-- application's schema, in the application's database:
--
--     psql -v ON_ERROR_STOP=1 -d app -f sql/outbox.sql
--
-- It is idempotent (IF NOT EXISTS) and needs PostgreSQL 13 or later for the
-- built-in gen_random_uuid(); outboxd itself targets PostgreSQL 15.
--
-- How it works. The application INSERTs one row per event in the same
-- transaction as the business change it describes. outboxd does not query
-- this table: it reads committed INSERTs from the WAL through a logical
-- replication slot (wal2json, add-tables=public.outbox, actions=insert) and
-- produces one Kafka record per row. UPDATEs, DELETEs and TRUNCATEs of the
-- table are ignored, so the table may be kept EMPTY: delete the row in the
-- same transaction right after inserting it (see sql/examples.sql). The
-- insert is still in the WAL and is still published; nothing accumulates,
-- nothing needs vacuuming beyond the dead tuples of the deleted rows, and no
-- "processed" flag is ever updated. Rows that are not deleted are harmless
-- too; purge them whenever convenient.
--
-- Events may also be written without any table row at all, as transactional
-- logical messages (pg_logical_emit_message(true, 'outbox', <json>)); see
-- sql/examples.sql. The table must exist all the same: outboxd's preflight
-- check reads its columns.
--
-- Column -> Kafka record mapping (README, "The Kafka record"):
--
--   id              header "id" on every record (outbox.id_column). Consumers
--                   deduplicate on it: delivery is at-least-once across
--                   process crashes and Postgres restarts. NULL is impossible
--                   here (primary key); a missing id is a bad event.
--   aggregate_type  fills the topic template: the default
--                   outbox.topic = outbox.event.{aggregate_type} sends an
--                   'order' event to topic "outbox.event.order". Keep its
--                   values valid Kafka topic name characters
--                   ([a-zA-Z0-9._-]); an invalid topic is a bad event.
--   aggregate_id    the record key (outbox.key_column), as UTF-8 text. The
--                   partition is murmur2 of the key, so all events of one
--                   aggregate land in one partition, in commit order (and in
--                   statement order within a transaction).
--   event_type      header "type" (outbox.type_column).
--   payload         the record value (outbox.payload_column): jsonb is
--                   published as its JSON text. NULL publishes a tombstone
--                   (null value), which log-compacted topics use to delete a
--                   key. text or bytea columns work too (text as is, bytea as
--                   raw bytes) if you prefer to change the type.
--   headers         optional extra Kafka headers (outbox.headers_column): a
--                   jsonb OBJECT, each member becoming one header in object
--                   order (strings as is, other JSON values as JSON text),
--                   after "id" and "type". Good for traceparent, tenant ids,
--                   content types. NULL means no extra headers.
--   created_at      the record timestamp (outbox.timestamp_column), in
--                   milliseconds since the epoch. now() is the transaction's
--                   start time; set outbox.timestamp_column empty to use the
--                   commit time instead.

CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb,
    headers        jsonb,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- Optional: reject non-object headers at insert time rather than at publish
-- time. Not created by default.
--
--   ALTER TABLE public.outbox ADD CONSTRAINT outbox_headers_is_object
--       CHECK (headers IS NULL OR jsonb_typeof(headers) = 'object');

COMMENT ON TABLE public.outbox IS
    'Transactional outbox published to Kafka by outboxd from the WAL; '
    'rows may be deleted right after insert (same transaction).';
COMMENT ON COLUMN public.outbox.id IS
    'Kafka header "id"; consumers deduplicate on it.';
COMMENT ON COLUMN public.outbox.aggregate_type IS
    'Fills the topic template, default outbox.event.{aggregate_type}.';
COMMENT ON COLUMN public.outbox.aggregate_id IS
    'Kafka record key; decides the partition (murmur2).';
COMMENT ON COLUMN public.outbox.event_type IS
    'Kafka header "type".';
COMMENT ON COLUMN public.outbox.payload IS
    'Kafka record value (JSON text); NULL publishes a tombstone.';
COMMENT ON COLUMN public.outbox.headers IS
    'Optional jsonb object; each member becomes a Kafka header.';
COMMENT ON COLUMN public.outbox.created_at IS
    'Kafka record timestamp.';
