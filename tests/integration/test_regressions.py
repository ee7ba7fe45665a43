"""Regression tests for defects found in review, each against the real
binary, Postgres and the broker: an event lost when the stream broke while
the producer queue was full, a transient check failure taken for an
operator error, a record larger than the producer queue stalling the
stream, transient delivery errors dead-lettered, partitioned outbox tables
silently read as empty, memory growing with filtered transactions, and the
watchdog starving while waiting for queue room."""

import os
import re
import socket
import time

from test_faults import (Feed, check_delivery, collect_all, make_topic,
                         wait_streaming)


def test_stream_broken_while_queue_full_loses_nothing(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The walsender is killed while outboxd waits for producer queue room
    in the middle of a transaction: after the reconnect every event
    arrives exactly once (the one waiting for room is not skipped)."""
    topic = make_topic(broker, "rq_%s" % test_id)
    d = outboxd_factory({"postgres": {"status_interval_ms": 200},
                         "kafka": {"queue.buffering.max.messages": "5"}})
    pid = wait_streaming(pg, slot_name)
    feed = Feed(pg, "rq_%s" % test_id)
    broker.cmd("down all")
    try:
        feed.commit(30)
        time.sleep(2.0)  # outboxd now waits for queue room
        pg.sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
               "WHERE slot_name = %s", (slot_name,))
        wait_streaming(pg, slot_name, 30, other_than=pid)
        time.sleep(1.0)
    finally:
        broker.cmd("up all")
    recs = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(recs, feed.ids, exactly_once=True)
    assert d.running(), d.log_tail()


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


def test_record_larger_than_default_queue_is_published(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """With message.max.bytes raised to 20 MB, a 5 MB record does not wait
    forever for room in the 4 MB default queue: outboxd sizes the queue to
    the largest record."""
    agg = "big_%s" % test_id
    topic = make_topic(broker, agg)
    outboxd_factory({"kafka": {"message.max.bytes": "20000000"}})
    wait_streaming(pg, slot_name)
    pg.sql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
           "VALUES (%s, 'k1', 'big', to_jsonb(repeat('x', 5 * 1024 * 1024)))", (agg,))
    pg.sql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
           "VALUES (%s, 'k2', 'small', '{}')", (agg,))
    recs = consumer.collect([topic], 2, timeout=60, settle=0.5)
    assert sorted(r["key"] for r in recs) == ["k1", "k2"], [r["key"] for r in recs]
    assert max(len(r["value"]) for r in recs) > 5 * 1024 * 1024


def test_too_small_explicit_queue_is_a_config_error(outboxd_factory):
    d = outboxd_factory({"kafka": {"message.max.bytes": "20000000",
                                   "queue.buffering.max.kbytes": "4096"}})
    assert d.wait(30) == 2, d.log_tail()
    assert "queue.buffering.max.kbytes" in d.log_text()


def test_delivery_timeouts_recreate_the_producer_not_dead_letter(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """With message.timeout.ms overridden, an outage times records out:
    that is the producer's trouble, not the records'. outboxd recreates the
    producer, reads the slot again, and every event reaches its topic
    (none reaches the dead-letter topic); it keeps running."""
    agg = "tmo_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory({"kafka": {"message.timeout.ms": "3000"}})
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    broker.cmd("down all")
    try:
        feed.commit(3)
        time.sleep(6)
    finally:
        broker.cmd("up all")
    recs = collect_all(consumer, topic, feed.ids, timeout=90)
    check_delivery(recs, feed.ids, exactly_once=False)
    assert d.running(), d.log_tail()
    assert "recreating the kafka producer" in d.log_text()
    assert "dead-lettering" not in d.log_text()


def test_partitioned_outbox_table_is_not_read_as_empty(pg, broker, consumer,
                                                        outboxd_factory, slot_name,
                                                        test_id):
    """wal2json reports rows under the partition's name, so a filter on the
    partitioned table alone would read nothing: check passes it and counts
    its partitions, and rows inserted into its (default) partition are
    published (sql/README.md, "Partitioned outbox tables")."""
    table = "obp_%s" % test_id
    pg.sql("CREATE TABLE public.%s (id uuid NOT NULL DEFAULT gen_random_uuid(), "
           "aggregate_type text, aggregate_id text, event_type text, payload jsonb, "
           "headers jsonb, created_at timestamptz NOT NULL DEFAULT now()) "
           "PARTITION BY RANGE (created_at)" % table)
    pg.sql("CREATE TABLE public.%s_all PARTITION OF public.%s DEFAULT" % (table, table))
    feed = Feed(pg, "obp_%s" % test_id, table="public.%s" % table)
    topic = make_topic(broker, feed.agg)
    d = outboxd_factory({"outbox": {"table": "public.%s" % table}}, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"outbox table\s+ok.*\(partitioned, 1 partitions\)", out), out + err
    d.start()
    wait_streaming(pg, slot_name)
    for _ in range(3):
        feed.commit(5)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, exactly_once=True)
    assert d.running(), d.log_tail()


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def test_filtered_transactions_take_no_memory_while_events_wait(
        pg, broker, outboxd_factory, slot_name, test_id):
    """100,000 transactions on another table while an outbox event waits
    for a down broker: outboxd's memory does not grow with them."""
    agg = "mem_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    pg.sql("CREATE TABLE IF NOT EXISTS filtered_%s (i int)" % test_id)
    pg.sql("CREATE OR REPLACE PROCEDURE many_%s(n int) LANGUAGE plpgsql AS $$ BEGIN "
           "FOR i IN 1..n LOOP INSERT INTO filtered_%s VALUES (i); COMMIT; END LOOP; "
           "END $$" % (test_id, test_id))
    broker.cmd("down all")
    try:
        pg.sql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
               "VALUES (%s, 'k1', 'e', '{}')", (agg,))
        time.sleep(2)
        before = _rss_kb(d.pid)
        pg.sql("CALL many_%s(100000)" % test_id)
        time.sleep(8)  # outboxd reads the 100,000 B/C pairs meanwhile
        after = _rss_kb(d.pid)
    finally:
        broker.cmd("up all")
    assert after - before < 2048, (before, after)
    assert d.running(), d.log_tail()


def test_watchdog_pinged_while_waiting_for_queue_room(
        pg, broker, outboxd_factory, slot_name, test_id, tmp_path):
    """Under systemd with WatchdogSec, a Kafka outage that fills the queue
    must not starve the watchdog (systemd would kill outboxd)."""
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    os.chmod(sock_path, 0o777)
    sock.settimeout(0.2)
    agg = "wd_%s" % test_id
    make_topic(broker, agg)
    outboxd_factory({"kafka": {"queue.buffering.max.messages": "5"}},
                    env={"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "2000000"})
    wait_streaming(pg, slot_name)

    def pings(seconds):
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                n += sock.recv(4096).count(b"WATCHDOG=1")
            except socket.timeout:
                pass
        return n

    broker.cmd("down all")
    try:
        Feed(pg, agg).commit(30)
        time.sleep(1.0)
        assert pings(6) >= 3
    finally:
        broker.cmd("up all")
        sock.close()


def test_sigterm_while_slot_creation_waits_for_a_transaction(
        pg, outboxd_factory, slot_name, test_id):
    """Creating a slot waits for every running transaction to end. Meanwhile
    outboxd says what it waits for, stays alive, and SIGTERM stops it at
    once (the creation is cancelled) with exit 0."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS held_%s (i int)" % test_id)
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("INSERT INTO held_%s VALUES (1)" % test_id)  # holds an xid
    try:
        d = outboxd_factory()
        d.wait_log(r"still waiting for the server.*running transactions", timeout=20)
        assert d.running(), d.log_tail()
        t0 = time.monotonic()
        d.terminate()
        assert d.wait(10) == 0, d.log_tail()
        assert time.monotonic() - t0 < 5, d.log_tail()
    finally:
        conn.rollback()
        conn.close()


def test_broker_rule_refusal_is_dead_lettered_not_retried(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A broker refusal no retry can fix (INVALID_TIMESTAMP, as a
    message.timestamp.difference.max.ms rule gives) is the record's own
    once the record was refused alone: the broker answers a whole batch
    with one code, so the first refusal only makes the record a suspect
    (one fresh producer, the record produced alone), and the second,
    alone, dead-letters it and the stream moves on, instead of
    recreating the producer and re-reading the same record forever."""
    agg = "rule_%s" % test_id
    topic = make_topic(broker, agg)
    dlq = "%s.outbox.dlq" % test_id
    broker.create_topic(dlq, 1)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    broker.cmd("error 0 INVALID_TIMESTAMP 2")
    feed = Feed(pg, agg)
    feed.commit(1)
    dead = consumer.collect([dlq], 1, timeout=30, settle=0.5)
    assert len(dead) == 1, d.log_tail()
    error = dict(dead[0]["headers"])["error"].decode()
    assert "imestamp" in error, error
    assert d.log_text().count("recreating the kafka producer") == 1, d.log_tail()
    assert "alone" in d.log_text(), d.log_tail()
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids[1:], timeout=30),
                   feed.ids[1:], exactly_once=True)
    assert d.log_text().count("recreating the kafka producer") == 1, d.log_tail()


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
