-- inbox.sql — the tables of `outboxd inbox` (sql/README.md, "The inbox tables").
--
--     psql -v ON_ERROR_STOP=1 -d app -f sql/inbox.sql
--
-- outboxd inserts one row per event id (the record's "id" header, or the
-- header named by inbox.id_header) with INSERT ... ON CONFLICT (id) DO
-- NOTHING, and stores the position it consumed up to in
-- outboxd_inbox_offsets in the same transaction. Keep both tables in the
-- same schema: outboxd looks for outboxd_inbox_offsets in the schema of
-- inbox.table. For another table name, rename public.inbox below and set
-- inbox.table. The role outboxd connects as needs SELECT and INSERT on
-- the inbox table and SELECT, INSERT and UPDATE on the offsets table.
--
-- The application's processor works the table with sql/inbox_processor.sql.

CREATE TABLE IF NOT EXISTS public.inbox (
    id           text        PRIMARY KEY,           -- the event id header
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    kafka_offset bigint      NOT NULL,
    key          text,                              -- NULL: the record had no key
    type         text,                              -- the "type" header
    payload      jsonb,                             -- the value, when it is JSON
    payload_raw  bytea,                             -- the value, when it is not JSON
    headers      jsonb       NOT NULL DEFAULT '{}', -- every header: name -> text
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,                       -- set by the processor
    error        text                               -- set by the processor on failure
);
-- A tombstone (a record without a value) has payload and payload_raw NULL.

-- The processor's queue: rows neither processed nor failed, oldest first.
CREATE INDEX IF NOT EXISTS inbox_unprocessed
    ON public.inbox (received_at) WHERE processed_at IS NULL AND error IS NULL;

-- Where each partition resumes, per consumer group: the offset of the
-- first record not yet in the inbox table, and the id of the Kafka cluster
-- that offset belongs to (NULL: stored before outboxd kept it).
CREATE TABLE IF NOT EXISTS public.outboxd_inbox_offsets (
    group_id    text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    cluster_id  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
-- A table created before cluster_id existed gets it here (outboxd inbox
-- also adds it at start when its role owns the table; otherwise it exits
-- 1 printing this statement). On a table that has it, the statement does
-- nothing; the notice saying so is not shown.
SET client_min_messages = warning;
ALTER TABLE public.outboxd_inbox_offsets ADD COLUMN IF NOT EXISTS cluster_id text;
RESET client_min_messages;
