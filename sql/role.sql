-- role.sql — the least-privilege login role outboxd connects as.
--
-- Run as a superuser (on PostgreSQL 15 only a superuser may grant the
-- REPLICATION attribute), in the application's database, after
-- sql/outbox.sql:
--
--     psql -v ON_ERROR_STOP=1 -d app -f sql/outbox.sql -f sql/role.sql
--
-- Idempotent: it creates the role if it is missing and otherwise only makes
-- sure of its attributes and grants.
--
-- What outboxd needs, and nothing more:
--
--   LOGIN        to connect at all.
--   REPLICATION  to open a replication connection (replication=database),
--                create the wal2json slot (outboxd slot create, or
--                postgres.create_slot = true), START_REPLICATION on it and
--                drop it (outboxd slot drop). Logical decoding reads the WAL
--                of every table, but wal2json is told to emit only
--                public.outbox inserts and 'outbox' logical messages.
--   USAGE on the schema and SELECT on public.outbox
--                with outbox.backlog_where set, to read the backlog when
--                outboxd creates its slot (the matching rows, in a
--                read-only transaction); without it outboxd then exits 1
--                printing the GRANT to run. `outboxd check` fails without
--                it in any case. The stream itself reads no row of the
--                table (the columns the preflight check verifies come from
--                the catalog). outboxd needs no INSERT, UPDATE or DELETE:
--                the application writes the table, not outboxd.
--   SELECT, INSERT, UPDATE, DELETE on public.outboxd_slots
--                the marker row of the slot outboxd creates (written when
--                it creates the slot, read when the slot is missing,
--                deleted by outboxd slot drop), which tells a first start
--                from a slot lost in a failover (deploy/README.md, "Failover"),
--                and keeps the slot's recovery point (updated every few
--                seconds while outboxd streams; "The recovery point").
--   SELECT, INSERT, UPDATE, DELETE on public.outboxd_held_keys and
--                public.outboxd_held_events
--                with outbox.on_bad_event = hold_key: the held keys and
--                their events (deploy/README.md, "Held keys and dead
--                letters"). An operator's role that runs `outboxd dlq
--                release` needs SELECT and UPDATE on outboxd_held_keys and
--                SELECT on outboxd_held_events.
--   CONNECT on the database
--                granted to PUBLIC by default; granted explicitly below in
--                case it was revoked.
--
-- pg_replication_slots, pg_current_wal_lsn() and the wal_level setting,
-- which `outboxd check` and `outboxd slot status` read, are readable by any
-- role; no pg_monitor membership is needed.
--
-- Password. Not set here, so that no secret is in a file. Set it once,
-- interactively in psql (sends it already hashed with scram-sha-256):
--
--     \password outboxd
--
-- or with SQL (the clear text then passes through the server's logs if
-- statement logging is on):
--
--     ALTER ROLE outboxd PASSWORD 'change-me';
--
-- and give it to outboxd through the environment (PGPASSWORD in
-- /etc/outboxd/outboxd.env, a Kubernetes Secret, ...) or ~/.pgpass.
--
-- pg_hba.conf. The replication connection outboxd opens is a *logical*
-- replication connection (it names a database), and since PostgreSQL 10
-- such connections match ordinary database entries, not the `replication`
-- keyword (which only matches physical replication, e.g. pg_basebackup).
-- One line covers both outboxd's normal and its replication connection:
--
--     # TYPE  DATABASE  USER     ADDRESS          METHOD
--     host    app       outboxd  10.0.0.0/24      scram-sha-256
--
-- (use hostssl to require TLS, and the address of the outboxd host). Reload
-- with SELECT pg_reload_conf(); Also make sure max_wal_senders and
-- max_replication_slots leave one of each for outboxd, and that
-- wal_level = logical (needs a restart).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'outboxd') THEN
        CREATE ROLE outboxd WITH LOGIN REPLICATION;
    ELSE
        ALTER ROLE outboxd WITH LOGIN REPLICATION;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO outboxd', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO outboxd;
GRANT SELECT ON TABLE public.outbox TO outboxd;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.outboxd_slots TO outboxd;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE public.outboxd_held_keys,
    public.outboxd_held_events TO outboxd;

COMMENT ON ROLE outboxd IS
    'outboxd: streams public.outbox inserts to Kafka (REPLICATION, SELECT on the outbox, its slot marker rows)';
