-- inbox_role.sql — the least-privilege login role `outboxd inbox` connects
-- as, in the receiving service's database (sql/README.md, "The inbox tables").
--
-- Run as the owner of the inbox tables (or a superuser), in that database,
-- after sql/inbox.sql:
--
--     psql -v ON_ERROR_STOP=1 -d orders -f sql/inbox.sql -f sql/inbox_role.sql
--
-- Idempotent: it creates the role if it is missing and otherwise only makes
-- sure of its attributes and grants.
--
-- What `outboxd inbox` needs, and nothing more:
--
--   LOGIN        to connect at all (a plain connection: no REPLICATION).
--   USAGE on the schema
--                to name the tables.
--   SELECT, INSERT on public.inbox
--                one row per event (INSERT ... ON CONFLICT (id) DO NOTHING,
--                which needs SELECT for the conflict check). The service
--                that processes the rows needs UPDATE of processed_at and
--                error, not the inbox.
--   SELECT, INSERT, UPDATE on public.outboxd_inbox_offsets
--                the stored positions, read at every assignment and
--                written in the same transaction as the rows (INSERT ...
--                ON CONFLICT DO UPDATE).
--   CONNECT on the database
--                granted to PUBLIC by default; granted explicitly below in
--                case it was revoked.
--
-- outboxd_inbox_offsets.cluster_id and topic_id: a table made by an older
-- sql/inbox.sql lacks them; `outboxd inbox` adds them at start only when
-- its role owns the table, so run the ALTER TABLE at the end of
-- sql/inbox.sql as the owner (or run sql/inbox.sql again) before the first
-- start with this role.
--
-- Password: as in sql/role.sql, set it with \password outboxd_inbox and
-- hand it over through the environment (PGPASSWORD) or ~/.pgpass.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'outboxd_inbox') THEN
        CREATE ROLE outboxd_inbox WITH LOGIN;
    ELSE
        ALTER ROLE outboxd_inbox WITH LOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO outboxd_inbox', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO outboxd_inbox;
GRANT SELECT, INSERT ON TABLE public.inbox TO outboxd_inbox;
GRANT SELECT, INSERT, UPDATE ON TABLE public.outboxd_inbox_offsets TO outboxd_inbox;

COMMENT ON ROLE outboxd_inbox IS
    'outboxd inbox: stores Kafka records into public.inbox (INSERT on it, positions in outboxd_inbox_offsets)';
