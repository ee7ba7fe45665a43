-- examples.sql — how an application writes outbox events.
--
-- Runs as is with psql against a database prepared with sql/outbox.sql
-- (and sql/role.sql):
--
--     psql -v ON_ERROR_STOP=1 -d app \
--          -f sql/outbox.sql -f sql/role.sql -f sql/examples.sql
--
-- It may be run again and again, also on a database that has an "orders"
-- table of its own: the examples' table is in a schema of their own,
-- outbox_examples, made before any event is written. Every run writes new
-- events. With outboxd
-- streaming, each event below becomes one Kafka record on topic
-- "outbox.event.order" (default topic template outbox.event.{aggregate_type}).
--
-- The rule that matters: write the event in the SAME transaction as the
-- business change. Both commit or neither does, and outboxd publishes only
-- committed transactions, in commit order. A rolled-back event is never
-- published.
--
-- Application role. The examples run as whoever runs the file. What an
-- application role needs on public.outbox:
--   (b) plain insert:        GRANT INSERT ON public.outbox TO app;
--   (a) insert-then-delete:  GRANT INSERT, DELETE, SELECT (id) ON public.outbox TO app;
--       (RETURNING id and DELETE ... WHERE id = ... both read the id column)
--   (c) logical message:     nothing; pg_logical_emit_message is executable
--                            by every role.
--
-- A few lines use psql's \gset to keep a value returned by the server
-- (application code does the same by reading RETURNING's result).

\set ON_ERROR_STOP 1

-- The domain table of the examples: a minimal "orders" aggregate, in a
-- schema of its own so as not to meet the application's tables. Drop it
-- with DROP SCHEMA outbox_examples CASCADE.
CREATE SCHEMA IF NOT EXISTS outbox_examples;
CREATE TABLE IF NOT EXISTS outbox_examples.orders (
    id          uuid          PRIMARY KEY DEFAULT gen_random_uuid(),
    customer_id text          NOT NULL,
    status      text          NOT NULL DEFAULT 'created',
    total       numeric(12,2) NOT NULL,
    created_at  timestamptz   NOT NULL DEFAULT now(),
    updated_at  timestamptz   NOT NULL DEFAULT now()
);


-- (a) Insert-then-delete: keep the outbox table empty -----------------------
--
-- The INSERT is written to the WAL and outboxd publishes it at commit. The
-- DELETE is ignored by outboxd (it only decodes inserts), so the row leaves
-- no trace in the table: no growth, no purge job, no index bloat to speak
-- of. Delete by the id of the row you inserted, not the whole table (a bare
-- DELETE FROM outbox would also lock other sessions' rows).

BEGIN;
INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES ('order', 'o-1', 'order-noted',
        jsonb_build_object('order_id', 'o-1', 'note', 'gift wrap please'),
        jsonb_build_object('content-type', 'application/json'))
RETURNING id AS event_id \gset
DELETE FROM public.outbox WHERE id = :'event_id';
COMMIT;


-- (b) Plain insert ---------------------------------------------------------
--
-- The simplest form. The row stays in the table after it is published;
-- outboxd never reads it again (it follows the WAL, not the table), so
-- delete old rows whenever convenient, e.g.
--     DELETE FROM public.outbox WHERE created_at < now() - interval '7 days';
-- A NULL payload publishes a tombstone (a record with a null value), which a
-- log-compacted topic uses to forget the key.

INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'o-1', 'order-archived', NULL);


-- (c) Logical message: an event with no table row at all ------------------
--
-- pg_logical_emit_message(transactional, prefix, content) writes a record
-- into the WAL and nowhere else: no row, no dead tuple, no vacuum, no
-- privilege on the outbox table needed. outboxd publishes messages whose
-- prefix is its outbox.message_prefix ('outbox' by default). The content is
-- a JSON object with the outbox table's column names, mapped exactly like a
-- row: id -> header "id", aggregate_type -> topic, aggregate_id -> key,
-- event_type -> header "type", payload -> value, headers -> headers.
--
-- The first argument MUST be true: a transactional message is decoded at
-- its transaction's commit, and discarded if the transaction rolls back,
-- exactly like a row. Non-transactional messages (false) escape the
-- transaction and are treated as bad events (dead-lettered or halting,
-- per outbox.on_bad_event). Supply the id yourself: there is no column
-- default to do it. The function returns the message's LSN.

SELECT pg_logical_emit_message(
    true,
    'outbox',
    json_build_object(
        'id',             gen_random_uuid(),
        'aggregate_type', 'order',
        'aggregate_id',   'o-1',
        'event_type',     'created',
        'payload',        json_build_object('order_id', 'o-1',
                                            'customer_id', 'c-42',
                                            'total', 99.90),
        'headers',        json_build_object('traceparent',
                              '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')
    )::text
) AS message_lsn;


-- (d) The pattern: business change and event in one transaction -----------
--
-- Place an order and record "created" with an outbox row, kept empty with
-- insert-then-delete (a)...

BEGIN;
INSERT INTO outbox_examples.orders (customer_id, total)
VALUES ('c-42', 99.90)
RETURNING id AS order_id \gset
INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers)
SELECT 'order', o.id::text, 'created',
       jsonb_build_object('order_id', o.id, 'customer_id', o.customer_id,
                          'status', o.status, 'total', o.total),
       jsonb_build_object('traceparent',
                          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')
FROM outbox_examples.orders o
WHERE o.id = :'order_id'
RETURNING id AS event_id \gset
DELETE FROM public.outbox WHERE id = :'event_id';
COMMIT;

-- ...then mark it paid and record "paid" as a logical message (c). Both
-- events have the order id as key, so they reach the same partition and a
-- consumer sees "created" before "paid".

BEGIN;
UPDATE outbox_examples.orders
   SET status = 'paid', updated_at = now()
 WHERE id = :'order_id';
SELECT pg_logical_emit_message(
    true,
    'outbox',
    json_build_object(
        'id',             gen_random_uuid(),
        'aggregate_type', 'order',
        'aggregate_id',   o.id,
        'event_type',     'paid',
        'payload',        json_build_object('order_id', o.id, 'status', o.status,
                                            'paid_at', o.updated_at)
    )::text
) AS message_lsn
FROM outbox_examples.orders o
WHERE o.id = :'order_id';
COMMIT;

-- A transaction that rolls back publishes nothing, whichever form it used.

BEGIN;
UPDATE outbox_examples.orders SET status = 'cancelled', updated_at = now()
 WHERE id = :'order_id';
INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', :'order_id', 'cancelled', '{}');
SELECT pg_logical_emit_message(true, 'outbox',
    json_build_object('id', gen_random_uuid(), 'aggregate_type', 'order',
                      'aggregate_id', :'order_id', 'event_type', 'cancelled',
                      'payload', '{}'::json)::text) AS message_lsn;
ROLLBACK;
