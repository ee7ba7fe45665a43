"""A lost slot recovered from the outbox table (deploy/README.md,
"Recovering from a lost or invalidated slot"): with postgres.on_slot_lost
= recover (the default), outboxd finds its slot missing (its marker row
there, or after streaming from it), invalidated (max_slot_wal_keep_size)
or gone on a promoted server, publishes again the outbox rows past the
recovery point in a new slot's snapshot, and streams from the new slot:
every event published, some twice, none lost. When the table cannot
prove that (no point, events as logical messages, rows deleted by
someone else) it exits 1 saying why; on_slot_lost = halt exits 1 always.

Each test runs on a cluster of its own: the deleted-rows check reads the
table's statistics, which other tests' rows would move. Each prints the
events written, published and published twice."""

import re
import time

import psycopg2
import pytest

from conftest import UNSET
from harness import free_port, server_major, wait_until
from test_faults import (Feed, check_delivery, collect_all, expect_exit,
                         emit, http_get, id_counts, invalidate_slot, make_topic,
                         on_cluster, scrape, wait_streaming)
from test_recovery_point import row_xids, wait_point_past

INTERVAL = 1
ENV = {"OUTBOXD_TEST_RECPOINT_MS": str(INTERVAL * 1000)}
RECOVERED = r"recovered replication slot \S+ in [0-9.]+ s: (\d+) rows past"


def start(cluster, outboxd_factory, port=None, **settings):
    """outboxd on cluster with a short recovery point interval, and no
    outbox.message_prefix unless given (the tests' default sets one)."""
    settings.setdefault("outbox_message_prefix", UNSET)
    cfg = on_cluster(cluster, **settings)
    if port is not None:
        cfg["http"] = {"listen": "127.0.0.1:%d" % port}
    return outboxd_factory(cfg, env=ENV)


def streaming(own_cluster, broker, outboxd_factory, slot, agg, n, **conf):
    """A cluster of the test's own (conf: its settings) with outboxd
    streaming agg's events, n of them published and the point past them:
    (cluster, topic, outboxd, its /metrics port, the feed)."""
    c = own_cluster(**conf)
    topic = make_topic(broker, agg)
    port = free_port()
    d = start(c, outboxd_factory, port)
    wait_streaming(c, slot)
    feed = Feed(c, agg)
    wait_point_past(c, slot, max(row_xids(c, feed.commit(n))))
    return c, topic, d, port, feed


def published_all(consumer, topic, ids, name, timeout=90):
    """Waits until every one of ids is in topic (duplicates allowed) and
    prints the counts as name (report)."""
    recs = collect_all(consumer, topic, ids, timeout=timeout)
    check_delivery(recs, ids, exactly_once=False)
    report(name, ids, recs)


def recoveries(port, reason):
    return scrape(port).get('outboxd_slot_recoveries_total{reason="%s"}' % reason)


def report(name, ids, records):
    """Prints what the closing note reports: written, published, twice."""
    counts = id_counts(records)
    print("%s: %d events written, %d published, %d published twice or more"
          % (name, len(ids), sum(1 for i in ids if counts[i] > 0),
             sum(1 for i in ids if counts[i] > 1)))


def test_a_dropped_slot_is_recovered(own_cluster, broker, consumer,
                                     outboxd_factory, slot_name, test_id):
    """outboxd killed with events the broker never acknowledged, the slot
    dropped, events written while no slot exists: the next start recovers
    the slot from the point (reason missing) and publishes every event;
    later events stream from the new slot."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "sd_%s" % test_id, 20)
    try:
        assert broker.cmd("down all") == "ok"
        feed.commit(10)
        time.sleep(INTERVAL + 1)
        d.kill9()
        drop_slot(c, slot_name)
        feed.commit(10)
        assert broker.cmd("up all") == "ok"
        d.start()
        m = d.wait_log(RECOVERED, 90)
        assert "is missing while its marker row is there" in d.log_text()
        wait_streaming(c, slot_name)
        feed.commit(5)
        published_all(consumer, topic, feed.ids, "dropped")
        assert recoveries(port, "missing") == 1
        assert int(m.group(1)) < len(feed.ids), "published everything again"
    finally:
        feed.close()


def test_an_invalidated_slot_is_recovered(own_cluster, broker, consumer,
                                          outboxd_factory, slot_name, test_id):
    """outboxd stopped while events are written until
    max_slot_wal_keep_size invalidates the slot (on PostgreSQL 18: until
    idle_replication_slot_timeout does, at a checkpoint): the next start
    drops it, recovers (reason invalidated) and publishes every event."""
    conf = ({"idle_replication_slot_timeout": "'1s'"} if server_major() >= 18
            else {"max_slot_wal_keep_size": "'1MB'"})
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "si_%s" % test_id, 10, **conf)
    try:
        assert d.stop() == 0, d.log_tail()
        feed.commit(10)
        if server_major() >= 18:
            def idle():
                c.sql("CHECKPOINT")
                return c.sql("SELECT invalidation_reason FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot_name,)) == [("idle_timeout",)]
            wait_until(idle, 30, 0.5, "slot %s invalidated as idle" % slot_name)
        else:
            invalidate_slot(c, slot_name)
        feed.commit(10)
        d.start()
        d.wait_log(RECOVERED, 90)
        assert "has been invalidated (wal_status lost): recovering it" in d.log_text()
        wait_streaming(c, slot_name)
        assert c.slot(slot_name)["wal_status"] != "lost"
        published_all(consumer, topic, feed.ids, "invalidated, outboxd stopped")
        assert recoveries(port, "invalidated") == 1
    finally:
        feed.close()


def test_invalidated_while_the_broker_is_down(own_cluster, broker, consumer,
                                              outboxd_factory, slot_name,
                                              test_id):
    """The broker is down while outboxd streams and events are written
    until the slot is invalidated under it (its walsender terminated):
    the same process recovers the slot once it reconnects, and every
    event reaches the broker once it is back."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "sb_%s" % test_id, 10, max_slot_wal_keep_size="'1MB'")
    try:
        assert broker.cmd("down all") == "ok"
        feed.commit(10)
        invalidate_slot(c, slot_name)
        feed.commit(10)
        time.sleep(2)
        assert broker.cmd("up all") == "ok"
        d.wait_log(RECOVERED, 120)
        published_all(consumer, topic, feed.ids, "invalidated, broker down")
        assert d.running() and recoveries(port, "invalidated") == 1
    finally:
        feed.close()


def test_dropped_under_a_running_outboxd(own_cluster, broker, consumer,
                                         outboxd_factory, slot_name, test_id):
    """The slot is dropped while outboxd streams (its walsender
    terminated first): the same process recovers it and goes on."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "sr_%s" % test_id, 10)
    try:

        def dropped():
            c.sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                  "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot_name,))
            try:
                c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
                return True
            except psycopg2.Error:
                return False
        wait_until(dropped, 30, 0.01, "slot %s dropped" % slot_name)
        feed.commit(10)
        d.wait_log(RECOVERED, 90)
        wait_streaming(c, slot_name)
        feed.commit(5)
        published_all(consumer, topic, feed.ids, "dropped under outboxd")
    finally:
        feed.close()


@pytest.mark.decoders("pgoutput")
def test_messages_of_another_prefix_leave_it_recoverable(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """pgoutput sends the logical messages of every prefix: one of
    another prefix (another tool's) is no event of outboxd's, so the
    stored point notes no message (messages_seen_at stays NULL) and a
    dropped slot is recovered. (Chaos seed 1000005: every start halted
    with "events come as logical messages".)"""
    c = own_cluster()
    agg = "sp_%s" % test_id
    topic = make_topic(broker, agg)
    port = free_port()
    d = start(c, outboxd_factory, port, outbox_message_prefix="outbox")
    wait_streaming(c, slot_name)
    feed = Feed(c, agg)
    try:
        ids = feed.commit(5, before=lambda cur: cur.execute(
            "SELECT pg_logical_emit_message(true, 'other', 'x')"))
        # (the point is stored once the message's transaction is acked)
        wait_point_past(c, slot_name, max(row_xids(c, ids)))
        assert c.sql("SELECT messages_seen_at FROM "
                     "public.outboxd_slots") == [(None,)]
        lose_slot(c, d, slot_name)
        feed.commit(5)
        d.start()
        d.wait_log(RECOVERED, 90)
        published_all(consumer, topic, feed.ids, "another prefix")
        assert recoveries(port, "missing") == 1
    finally:
        feed.close()


def test_a_late_commit_with_a_low_id_is_recovered(own_cluster, broker,
                                                  consumer, outboxd_factory,
                                                  slot_name, test_id):
    """A long transaction writes its row (a low id) and commits after
    many later ones were published, with the slot lost in between: its
    row is published by the recovery."""
    c = own_cluster()
    agg = "so_%s" % test_id
    topic = make_topic(broker, agg)
    d = start(c, outboxd_factory)
    wait_streaming(c, slot_name)
    feed = Feed(c, agg)
    conn = c.connect()
    try:
        conn.autocommit = False
        cur = conn.cursor()
        cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                    "event_type, payload) VALUES (gen_random_uuid(), %s, 'long', 'x', "
                    "'{}') RETURNING id::text", (agg,))
        long_id = cur.fetchone()[0]
        for _ in range(20):
            feed.commit(3)
        time.sleep(3 * INTERVAL)
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        conn.commit()
        d.start()
        d.wait_log(RECOVERED, 90)
        ids = feed.ids + [long_id]
        published_all(consumer, topic, ids, "late commit")
    finally:
        conn.close()
        feed.close()


def test_kill9_during_a_recovery_loses_nothing(own_cluster, broker, consumer,
                                               outboxd_factory, slot_name,
                                               test_id):
    """A recovery of 30,000 rows, killed (kill -9) while /readyz says
    recovering, then killed again once its backlog is acknowledged but
    maybe before the slot is made: the next start recovers again from
    the same point and every event is published."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "sk_%s" % test_id, 5)
    try:
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        for _ in range(30):
            feed.commit(1000)
        d.start()
        wait_until(lambda: http_get(port, "/readyz") == (503, "recovering\n") or None,
                   60, 0.05, "/readyz says recovering")
        d.kill9()
        d.start()
        d.wait_log(r"backlog published: ", 120)
        d.kill9()
        d.start()
        wait_streaming(c, slot_name, timeout=120)
        published_all(consumer, topic, feed.ids, "kill -9 during recovery", timeout=120)
    finally:
        feed.close()


# The steps of a recovery where a test build kills itself
# (OUTBOXD_TEST_CRASH_AT, src/runtime.h): the point judged, the invalidated
# slot dropped, the temporary slot made, rows handed over, all of them
# acknowledged, the permanent slot made.
CRASH_STEPS = ("recovery-judged", "recovery-prepared", "cutover-temp-slot",
               "cutover-publishing", "cutover-published", "cutover-copied")


def test_kill9_at_every_step_of_a_recovery(own_cluster, broker, consumer,
                                           outboxd_factory, slot_name,
                                           test_id):
    """For each step of a recovery, a slot invalidated while events are
    written, a recovery killed (SIGKILL) at that step, and a start after
    it: every event published each time, and the slot streams again."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "sx_%s" % test_id, 5,
                                        max_slot_wal_keep_size="'1MB'")
    cfg = d.config
    try:
        for step in CRASH_STEPS:
            d.stop()
            feed.commit(1500)
            invalidate_slot(c, slot_name)
            feed.commit(5)
            crashing = outboxd_factory(cfg, env={**ENV, "OUTBOXD_TEST_CRASH_AT": step})
            try:
                rc = crashing.wait(120)
            except Exception:
                raise AssertionError("not killed at %s:\n%s" % (step, crashing.log_tail()))
            assert rc == -9 and "killed at %s" % step in crashing.log_text(), \
                (step, rc, crashing.log_tail())
            d = outboxd_factory(cfg, env=ENV)
            wait_streaming(c, slot_name, timeout=120)
            recs = collect_all(consumer, topic, feed.ids, timeout=120)
            check_delivery(recs, feed.ids, exactly_once=False)
            wait_point_past(c, slot_name, max(row_xids(c, feed.commit(1))))
        recs = collect_all(consumer, topic, feed.ids, timeout=120)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("kill -9 at every step", feed.ids, recs)
    finally:
        feed.close()


def drop_slot(c, slot):
    """Drops slot on c once its walsender released it: after a kill -9 or
    a stop it may take a moment to notice the client gone."""
    wait_until(lambda: not c.slot(slot)["active"], 30, 0.1, "slot %s released" % slot)
    c.sql("SELECT pg_drop_replication_slot(%s)", (slot,))


def lose_slot(c, d, slot):
    """kill -9 outboxd d, then drop its slot on c."""
    d.kill9()
    drop_slot(c, slot)


def fresh_slot(c, d, slot):
    """The operator's fresh start (`slot create --accept-gap`), then d
    streaming again."""
    rc, _, err = d.run_cmd(["slot", "create", "--accept-gap"])
    assert rc == 0, err
    d.start()
    wait_streaming(c, slot)


def check_line(d):
    rc, out, _ = d.run_cmd(["check"])
    m = re.search(r"^recovery point\s+ok\s+(.*)$", out, re.M)
    assert m, out
    return m.group(1)


def test_what_cannot_be_proven_halts(own_cluster, broker, outboxd_factory,
                                     slot_name, test_id):
    """Each way the table cannot prove completeness exits 1 naming it,
    and creates no slot; `check` says beforehand that a recovery now would
    halt, and why. on_slot_lost = halt; no recovery point stored; events
    that came as logical messages (outbox.message_prefix, set by default,
    counts only once a message was published); rows deleted by the
    application (an insert-then-delete outbox)."""
    c = own_cluster()
    agg = "sh_%s" % test_id
    make_topic(broker, agg)
    d = start(c, outboxd_factory, outbox_message_prefix="outbox")
    wait_streaming(c, slot_name)
    feed = Feed(c, agg)
    try:
        wait_point_past(c, slot_name, max(row_xids(c, feed.commit(5))))
        assert "a recovery now would be complete" in check_line(d)
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        halt = start(c, outboxd_factory, postgres_on_slot_lost="halt")
        expect_exit(halt, 1, "does not exist, but outboxd created it")

        c.sql("UPDATE public.outboxd_slots SET recovery_xid = NULL")
        none = start(c, outboxd_factory)
        expect_exit(none, 1, "cannot be recovered", "no recovery point was stored")
        assert c.slot(slot_name) is None

        fresh_slot(c, d, slot_name)
        feed.commit(2, before=emit(True, {"aggregate_type": agg, "aggregate_id": "m",
                                          "event_type": "x", "payload": {}}))
        wait_until(lambda: c.sql("SELECT messages_seen_at IS NOT NULL FROM "
                                 "public.outboxd_slots") == [(True,)], 40, 0.5,
                   "a message seen")
        assert "a recovery now would halt: events come as logical messages" \
            in check_line(d)
        lose_slot(c, d, slot_name)
        msgs = start(c, outboxd_factory, outbox_message_prefix="outbox")
        expect_exit(msgs, 1, "cannot be recovered", "logical messages", "--accept-gap")
        assert c.slot(slot_name) is None

        c.sql("UPDATE public.outboxd_slots SET messages_seen_at = NULL")
        fresh_slot(c, d, slot_name)

        def seen():
            feed.commit(2, after=lambda cur: cur.execute(
                "DELETE FROM public.outbox WHERE aggregate_type = %s", (agg,)))
            return c.sql("SELECT deletes_seen_at IS NOT NULL FROM "
                         "public.outboxd_slots") == [(True,)]
        # (The statistics count a session's deletes within 10 s.)
        wait_until(seen, 60, INTERVAL, "deletes seen")
        assert "a recovery now would halt: rows of the outbox table are deleted" \
            in check_line(d)
        lose_slot(c, d, slot_name)
        deleted = start(c, outboxd_factory)
        expect_exit(deleted, 1, "cannot be recovered", "rows of the outbox table")
        assert c.slot(slot_name) is None
    finally:
        feed.close()
