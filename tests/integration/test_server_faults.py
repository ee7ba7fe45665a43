"""Tests of what outboxd does when the Postgres server is not what it
seemed: the slot it streamed from disappears, another server answers at
the same address, the walsender fails at the same change on every attempt,
and the server speaks German (errors are told by SQLSTATE, never by the
server's wording).

Each scenario runs on a cluster or database of the test's own, so the
session cluster keeps its settings and its slots."""

import re
import subprocess
import time

import psycopg2
import pytest

from conftest import own_db
from test_faults import (Feed, check_delivery, collect_all, expect_exit,
                         invalidate_slot, make_topic, on_cluster,
                         wait_streaming)

LSN_RE = r"\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b"


def log_after_last_stream(d):
    """The part of outboxd's log after its last `streaming from slot`
    line (the whole log if there is none)."""
    log = d.log_text()
    at = log.rfind("streaming from slot")
    if at < 0:
        return log
    nl = log.find("\n", at)
    return log[nl + 1:] if nl >= 0 else ""


# ---------------------------------------------------------------------------
# the slot outboxd streamed from is gone


def drop_slot_under(cluster, slot, timeout=30):
    """Terminates the walsender streaming from slot and drops the slot
    before outboxd takes it again (retrying until the drop wins)."""
    conn = cluster.connect()
    try:
        with conn.cursor() as cur:
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SELECT pg_terminate_backend(active_pid) FROM "
                            "pg_replication_slots WHERE slot_name = %s AND "
                            "active_pid IS NOT NULL", (slot,))
                try:
                    cur.execute("SELECT pg_drop_replication_slot(%s)",
                                (slot,))
                    return
                except psycopg2.errors.ObjectInUse:
                    pass
                assert time.monotonic() < deadline, (
                    "could not drop slot %s in %ds" % (slot, timeout))
    finally:
        conn.close()


def test_slot_dropped_under_running_daemon_is_not_recreated(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """The slot outboxd streams from (it created it itself, create_slot =
    true) is dropped while it runs: outboxd must not create a new slot at
    the current WAL position, which would skip every event written
    meanwhile without a word; with on_slot_lost = halt it exits 1 within
    30 s naming the slot, and no slot of that name exists afterwards
    (test_slot_recovery.py: with recover, the default, it recovers)."""
    cluster = own_cluster()
    agg = "slotgone_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(on_cluster(cluster, postgres_create_slot=True,
                                   postgres_on_slot_lost="halt"))
    wait_streaming(cluster, slot_name)
    feed = Feed(cluster, agg)
    feed.commit(5)
    check_delivery(collect_all(consumer, topic, feed.ids, timeout=30),
                   feed.ids, exactly_once=True)
    mark = d.log_size()
    drop_slot_under(cluster, slot_name)
    feed.commit(5)
    feed.commit(5)
    expect_exit(d, 1, timeout=30)
    assert slot_name in d.log_text()[mark:], d.log_tail()
    # The recovery it names publishes the events in between.
    assert "outbox.backlog_where" in d.log_text()[mark:], d.log_tail()
    assert cluster.slot(slot_name) is None, (
        "slot %s was created again: %s" % (slot_name, cluster.slot(slot_name)))


def test_other_server_at_same_address_exits_1(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """The server outboxd streams from is stopped and a freshly initdb'd
    one (its own outbox table, a wal2json slot of the same name) starts on
    the same port: its WAL positions mean nothing for the old slot, so
    outboxd exits 1 saying the system identifier changed, instead of
    streaming from the new server."""
    first = own_cluster()
    agg = "othersrv_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(on_cluster(first))
    wait_streaming(first, slot_name)
    feed = Feed(first, agg)
    feed.commit(5)
    check_delivery(collect_all(consumer, topic, feed.ids, timeout=30),
                   feed.ids, exactly_once=True)
    feed.close()
    sysid = "SELECT system_identifier FROM pg_control_system()"
    old_id = first.sql(sysid)
    first.stop()
    second = own_cluster(port=first.port)
    second.sql("SELECT pg_create_logical_replication_slot(%s, 'wal2json') "
               "WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE "
               "slot_name = %s)", (slot_name, slot_name))
    assert second.sql(sysid) != old_id
    later = Feed(second, agg)
    later.commit(5)
    later.close()
    expect_exit(d, 1, "system identifier", timeout=30)


# ---------------------------------------------------------------------------
# an error the server repeats at the same position

# A base type whose output function is enum_out: printing a value that is
# no enum label's OID fails with SQLSTATE 22P03 ("invalid internal value
# for enum"), deterministically and at once, so wal2json fails on that one
# change every time the walsender decodes it.
FAILING_TYPE_SQL = """
CREATE TYPE failing_out;
CREATE FUNCTION failing_out_in(cstring) RETURNS failing_out
    AS 'oidin' LANGUAGE internal IMMUTABLE STRICT;
CREATE FUNCTION failing_out_out(failing_out) RETURNS cstring
    AS 'enum_out' LANGUAGE internal IMMUTABLE STRICT;
CREATE TYPE failing_out (INPUT = failing_out_in, OUTPUT = failing_out_out,
    INTERNALLENGTH = 4, PASSEDBYVALUE, ALIGNMENT = int4);
ALTER TABLE public.outbox ADD COLUMN extra failing_out;
"""


def test_error_repeated_at_same_lsn_exits_1(pg, broker, consumer,
                                            outboxd_factory, slot_name,
                                            test_id):
    """The walsender fails with the same server error (SQLSTATE 22P03,
    not a connection error) at the same change on every attempt: outboxd
    does not reconnect forever; after several attempts at that position it
    exits 1 within 60 s, its last words naming the error, the slot and an
    LSN. The events before the failing change are published."""
    db = own_db(pg, "se_fail_%s" % test_id)
    pg.sql(FAILING_TYPE_SQL, dbname=db)
    agg = "decodefail_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(db)}})
    wait_streaming(pg, slot_name)
    conn = pg.connect(db)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO public.outbox (aggregate_type, "
                    "aggregate_id, event_type, payload) VALUES (%s, 'k', "
                    "'good', '{}') RETURNING id::text", (agg,))
        good = [cur.fetchone()[0]]
        cur.execute("INSERT INTO public.outbox (aggregate_type, "
                    "aggregate_id, event_type, payload, extra) VALUES (%s, "
                    "'k', 'bad', '{}', '4242')", (agg,))
    conn.close()
    check_delivery(collect_all(consumer, topic, good, timeout=30), good,
                   exactly_once=True)
    started = time.monotonic()
    expect_exit(d, 1, timeout=60)
    took = time.monotonic() - started
    tail = log_after_last_stream(d)
    assert "invalid internal value for enum" in tail, tail[-4000:]
    assert slot_name in tail, tail[-4000:]
    assert re.search(LSN_RE, tail), tail[-4000:]
    print("exit 1 after %.1fs" % took)


# ---------------------------------------------------------------------------
# a server that does not speak English

GERMAN = "de_DE.UTF-8"


def german_cluster(own_cluster, **conf):
    """A cluster of the test's own whose messages are German (lc_messages
    de_DE.UTF-8); fails, never skips, when the locale is missing."""
    have = subprocess.run(["locale", "-a"], capture_output=True,
                          text=True).stdout.split()
    assert any(loc.lower().replace("-", "") == "de_de.utf8" for loc in have), (
        "locale %s is missing (locale -a: %s): run deploy/deps.sh"
        % (GERMAN, have))
    cluster = own_cluster(lc_messages="'%s'" % GERMAN, **conf)
    try:
        cluster.sql("SELECT 1/0")
    except psycopg2.errors.DivisionByZero as e:
        assert "division durch null" in str(e).lower(), str(e)
    else:
        raise AssertionError("1/0 did not fail")
    return cluster


def test_german_server_invalidated_slot_exits_1(own_cluster, outboxd_factory,
                                                slot_name):
    """lc_messages = de_DE.UTF-8: a slot invalidated by
    max_slot_wal_keep_size still makes outboxd exit 1 within 30 s,
    naming the slot, rather than retrying forever (on_slot_lost = halt;
    test_slot_recovery.py recovers one)."""
    cluster = german_cluster(own_cluster, max_slot_wal_keep_size="'1MB'")
    d = outboxd_factory(on_cluster(cluster, postgres_on_slot_lost="halt"))
    wait_streaming(cluster, slot_name)
    assert d.stop() == 0, d.log_tail()
    invalidate_slot(cluster, slot_name)
    mark = d.log_size()
    d.start()
    expect_exit(d, 1, timeout=30)
    assert slot_name in d.log_text()[mark:], d.log_tail()


@pytest.mark.parametrize("when", ["create-slot", "start-replication"])
def test_german_server_wal2json_missing_exits_1(own_cluster, outboxd_factory,
                                                slot_name, when):
    """lc_messages = de_DE.UTF-8 and wal2json not loadable (the server's
    dynamic_library_path has no wal2json.so): creating the slot, or
    starting replication from an existing one, fails with SQLSTATE 58P01
    (undefined file); outboxd exits 1 within 30 s naming wal2json, as it
    does for an English server, instead of retrying forever."""
    cluster = german_cluster(own_cluster)
    if when == "start-replication":
        cluster.sql("SELECT pg_create_logical_replication_slot(%s, "
                    "'wal2json')", (slot_name,))
    cluster.sql("ALTER SYSTEM SET dynamic_library_path = '/nonexistent'")
    cluster.restart()
    with pytest.raises(psycopg2.errors.UndefinedFile):
        cluster.sql("SELECT pg_create_logical_replication_slot('probe', "
                    "'wal2json')")
    d = outboxd_factory(on_cluster(cluster))
    expect_exit(d, 1, "wal2json", timeout=30)
