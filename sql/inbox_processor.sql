-- inbox_processor.sql — how a service works the inbox table that
-- `outboxd inbox` fills (sql/inbox.sql). Any number of processes may run
-- this at once: SKIP LOCKED hands each row to one of them.
--
-- The order: seq, the order outboxd stored the rows in, which gives each
-- key's events in the order the publisher committed them (sql/README.md,
-- "The order of the inbox"). With several processors at once, SKIP LOCKED
-- may hand two events of one key to two of them; where a key's events
-- must be handled one after the other, let one processor handle each key
-- (below).
--
-- One round, in one transaction:
--
--   1. take a batch of unprocessed rows in seq order, locking them;
--   2. handle each row in the application (in this same transaction when
--      the handler writes to this database: then the effect and the
--      "processed" mark commit together, exactly once);
--   3. mark each row processed, or record why it failed;
--   4. commit. A crash before the commit releases the rows for the next
--      round.
--
-- With psql, the statements below run as is (they mark the batch
-- processed without handling it).

BEGIN;

-- 1. A batch of at most 100 rows (the partial index inbox_unprocessed
--    serves this query).
SELECT seq, id, topic, key, type, payload, payload_raw, headers, received_at
FROM public.inbox
WHERE processed_at IS NULL AND error IS NULL
ORDER BY seq
LIMIT 100
FOR UPDATE SKIP LOCKED;
-- With N processors that must keep each key's order, processor i (0 to
-- N-1) adds to the WHERE clause: AND abs(hashtext(coalesce(key, ''))::bigint) % N = i

-- 3a. A row handled: (application code passes the id as a parameter)
--     UPDATE public.inbox SET processed_at = now() WHERE id = $1;
-- 3b. A row that failed: it leaves the queue with its error; clear the
--     error to retry it.
--     UPDATE public.inbox SET error = $2 WHERE id = $1;
--
-- The same for a whole batch in one statement:
WITH batch AS (
    SELECT id FROM public.inbox
    WHERE processed_at IS NULL AND error IS NULL
    ORDER BY seq
    LIMIT 100
    FOR UPDATE SKIP LOCKED)
UPDATE public.inbox i SET processed_at = now()
FROM batch WHERE i.id = batch.id;

COMMIT;
