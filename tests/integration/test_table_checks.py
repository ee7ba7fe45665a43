"""Integration tests of the start-up checks of the outbox table (deploy/README.md,
"Command line" and "Failure modes"), run by `outboxd check` and before
streaming:

- with pgoutput, a mapped column that is GENERATED ... STORED is refused
  (PostgreSQL 15-17's pgoutput does not send such columns, wal2json does:
  the two decoders must not silently differ);
- the SELECT privilege is read for the configured table itself, whatever
  the case of its name;
- a role that may not SELECT the table the backlog reads is told the GRANT
  to run, not that its predicate is invalid.

Every test has an outbox table of its own.

Also here (marked no_sanitizers: left to tests/run.sh's plain pass):
connections killed during the checks are retried, never an operator
error, and SIGTERM during a check query that waits on a lock is a clean
stop."""

import re
import time

import pytest

from harness import header
from test_cli import EXIT_OPERATOR, EXIT_USAGE
from test_faults import wait_streaming
from test_ops import check_lines, failed_checks

# The columns of sql/outbox.sql's table, by name, as (type and default).
COLUMNS = {
    "id": "uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "aggregate_type": "text NOT NULL",
    "aggregate_id": "text NOT NULL",
    "event_type": "text NOT NULL",
    "payload": "jsonb",
    "headers": "jsonb",
    "created_at": "timestamptz NOT NULL DEFAULT now()",
}

# A mapped column made GENERATED ... STORED: (the column, its definition,
# what maps it).
GENERATED = [
    ("aggregate_id", "text GENERATED ALWAYS AS (payload->>'agg') STORED",
     "key"),
    ("event_type", "text GENERATED ALWAYS AS ('e' || (payload->>'n')) "
     "STORED", "type"),
    ("headers", "jsonb GENERATED ALWAYS AS (payload->'h') STORED",
     "headers"),
    ("aggregate_type", "text GENERATED ALWAYS AS (payload->>'at') STORED",
     "topic"),
]


def generated_table(pg, test_id, column, definition):
    """public.<test_id>_gen: the columns of sql/outbox.sql with column
    defined as definition."""
    table = "%s_gen" % test_id
    cols = dict(COLUMNS, **{column: definition})
    pg.sql("CREATE TABLE public.%s (%s)" % (
        table, ", ".join("%s %s" % kv for kv in cols.items())))
    return table


@pytest.mark.parametrize("column,definition,mapped", GENERATED,
                         ids=[g[2] for g in GENERATED])
def test_pgoutput_refuses_a_generated_mapped_column(pg, outboxd_factory,
                                                    test_id, slot_name,
                                                    column, definition,
                                                    mapped):
    """pgoutput (PostgreSQL 15-17) sends no GENERATED ... STORED column, so
    every row would be dead-lettered (or, for the headers, published
    without them) where wal2json publishes it: `check` fails naming the
    column and the fix, and `run` exits 1 before any slot is made, as for
    a missing column."""
    table = generated_table(pg, test_id, column, definition)
    d = outboxd_factory({"postgres": {"plugin": "pgoutput"},
                         "outbox": {"table": "public." + table}},
                        start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (out, err)
    failed = {name: detail for name, _, detail in failed_checks(out)}
    detail = failed.get("outbox columns", "")
    assert "column %s is GENERATED" % column in detail, out
    assert "postgres.plugin = wal2json" in detail, detail
    assert "plain column" in detail, detail
    d.start()
    assert d.wait(30) == EXIT_OPERATOR, d.log_tail()
    assert "column %s is GENERATED" % column in d.log_text(), d.log_tail()
    assert pg.slot(slot_name) is None
    assert not pg.sql("SELECT 1 FROM pg_publication WHERE pubname = %s",
                      ("pub_" + test_id,))


def test_wal2json_publishes_a_generated_mapped_column(pg, broker, consumer,
                                                      outboxd_factory,
                                                      test_id):
    """The same table with wal2json, which sends generated columns: `check`
    passes its columns and the rows are published with the computed key."""
    column, definition, _ = GENERATED[0]
    table = generated_table(pg, test_id, column, definition)
    atype = test_id + "_gen"
    d = outboxd_factory({"outbox": {"table": "public." + table}})
    rc, out, err = d.run_cmd(["check"])
    assert ("outbox columns", True) in [r[:2] for r in check_lines(out)[0]], \
        out
    d.wait_log("streaming from slot", 20)
    pg.sql("INSERT INTO public.%s (aggregate_type, event_type, payload) "
           "SELECT %%s, 'e', jsonb_build_object('n', g, 'agg', 'k1') "
           "FROM generate_series(1, 3) g" % table, (atype,))
    recs = consumer.collect("outbox.event." + atype, 3, timeout=30,
                            settle=0.5)
    assert sorted(r["key"] for r in recs) == ["k1"] * 3
    assert d.config["outbox"]["dlq_topic"] not in {r["topic"] for r in recs}


def test_check_reads_the_privilege_of_a_mixed_case_table(pg, broker,
                                                         outboxd_factory,
                                                         test_id):
    """outbox.table names a table created as "OutBox" (names are taken as
    written, case kept): `check` reads the SELECT privilege of that table,
    as a superuser and as a role granted SELECT on it."""
    name = "%s_OutBox" % test_id
    pg.sql('CREATE TABLE public."%s" (LIKE public.outbox INCLUDING ALL)'
           % name)
    role = "r_%s" % test_id
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    pg.sql('GRANT SELECT ON public."%s" TO %s' % (name, role))
    # What sql/role.sql grants on the slot marker table.
    pg.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO %s"
           % role)
    for user in ("postgres", role):
        d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(user=user)},
                             "outbox": {"table": "public." + name}},
                            start=False)
        rc, out, err = d.run_cmd(["check"])
        results = {r[0]: r[1:] for r in check_lines(out)[0]}
        assert results["outbox table"] == (True, "public." + name), out
        assert results["table privilege"][0], (user, out)
        assert rc == 0, (user, out, err)
    # Written as SQL would quote it, the name is not found, and the check
    # says how to write it.
    d = outboxd_factory({"outbox": {"table": 'public."%s"' % name}},
                        start=False)
    rc, out, err = d.run_cmd(["check"])
    failed = {n: detail for n, _, detail in failed_checks(out)}
    assert "without SQL quotes" in failed.get("outbox table", ""), out


def test_backlog_role_without_select_is_told_the_grant(pg, broker, consumer,
                                                       outboxd_factory,
                                                       test_id, slot_name):
    """A REPLICATION role that may not SELECT the outbox table cannot read
    the backlog: `check` and `run` say so with the GRANT to run (exit 1 as
    for any missing privilege the operator must grant; no slot is made),
    never that outbox.backlog_where is invalid. Granted, the backlog is
    published; once the slot exists the stream needs no SELECT, so a later
    REVOKE does not stop it."""
    table = "%s_ob" % test_id
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox INCLUDING ALL)"
           % table)
    atype = test_id + "_nosel"
    pg.sql("INSERT INTO public.%s (aggregate_type, aggregate_id, event_type, "
           "payload) SELECT %%s, 'k', 'e', jsonb_build_object('n', g) "
           "FROM generate_series(1, 5) g" % table, (atype,))
    role = "r_%s" % test_id
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    # What sql/role.sql grants on the slot marker table.
    pg.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO %s"
           % role)
    cfg = {"postgres": {"conninfo": pg.conninfo(user=role)},
           "outbox": {"table": "public." + table, "backlog_where": "true"}}
    grant = "GRANT SELECT ON TABLE public.%s TO %s;" % (table, role)

    d = outboxd_factory(cfg, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (out, err)
    failed = {name: detail for name, _, detail in failed_checks(out)}
    assert grant in failed.get("backlog", ""), out
    assert grant in failed.get("table privilege", ""), out
    assert "invalid value" not in out, out
    d.start()
    assert d.wait(30) == EXIT_OPERATOR, d.log_tail()
    log = d.log_text()
    assert re.search(r"lacks SELECT on public\.%s.*%s" % (
        table, re.escape(grant)), log), log
    assert "invalid value" not in log, log
    assert pg.slot(slot_name) is None

    pg.sql(grant)
    d2 = outboxd_factory(cfg)
    d2.wait_log("backlog published", 30)
    d2.wait_log("streaming from slot", 20)
    recs = consumer.collect("outbox.event." + atype, 5, timeout=30,
                            settle=0.5)
    assert sorted(header(r, "id") for r in recs) == sorted(
        r[0].encode() for r in pg.sql("SELECT id::text FROM public.%s"
                                      % table))
    assert d2.stop() == 0, d2.log_tail()

    pg.sql("REVOKE SELECT ON TABLE public.%s FROM %s" % (table, role))
    d3 = outboxd_factory(cfg)
    d3.wait_log("streaming from slot", 20)
    assert "lacks SELECT" not in d3.log_text(), d3.log_tail()


def test_backlog_role_without_schema_usage_is_told_the_grant(
        pg, broker, outboxd_factory, test_id, slot_name):
    """SELECT on the table is not enough without USAGE on its schema: the
    GRANT named is the one still missing."""
    schema = "s_%s" % test_id
    role = "r_%s" % test_id
    pg.sql("CREATE SCHEMA %s" % schema)
    pg.sql("CREATE TABLE %s.outbox (LIKE public.outbox INCLUDING ALL)"
           % schema)
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    pg.sql("GRANT SELECT ON %s.outbox TO %s" % (schema, role))
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(user=role)},
                         "outbox": {"table": schema + ".outbox",
                                    "backlog_where": "true"}}, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (out, err)
    grant = "GRANT USAGE ON SCHEMA %s TO %s;" % (schema, role)
    failed = {name: detail for name, _, detail in failed_checks(out)}
    assert grant in failed.get("backlog", ""), out
    assert grant in failed.get("table privilege", ""), out
    assert "GRANT SELECT" not in out and "invalid value" not in out, out
    d.start()
    assert d.wait(30) == EXIT_OPERATOR, d.log_tail()
    assert grant in d.log_text(), d.log_tail()
    assert pg.slot(slot_name) is None


@pytest.mark.no_sanitizers
def test_connection_killed_during_checks_is_retried(pg, broker, outboxd_factory,
                                                   slot_name):
    """Connections killed over and over (some during the checks before
    streaming) make outboxd reconnect, never exit."""
    d = outboxd_factory({"postgres": {"reconnect_max_backoff_ms": 100}})
    wait_streaming(pg, slot_name)
    conn = pg.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and d.running():
            cur.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = 'outboxd'")
    conn.close()
    assert d.running(), d.log_tail()
    wait_streaming(pg, slot_name, 30)


@pytest.mark.no_sanitizers
def test_sigterm_during_a_slow_check_query_exits_0(pg, outboxd_factory):
    """A check query waiting on a lock is cancelled by SIGTERM: a clean
    stop (exit 0), not an operator error."""
    conn = pg.connect()
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("LOCK TABLE pg_catalog.pg_namespace IN ACCESS EXCLUSIVE MODE")
    try:
        d = outboxd_factory()
        d.wait_log(r"still waiting for the server", timeout=20)
        d.terminate()
        assert d.wait(15) == 0, d.log_tail()
    finally:
        conn.rollback()
        conn.close()
