"""Attacks on the late records' client (src/producer.c `late`, linger.ms 5)
and its switches (switch_clients(): current changes once the client it
leaves has nothing outstanding, at most once a second).

Each test builds a backlog (rows committed while outboxd is stopped, so
read more than 100 ms after their commit: late records) and then hits the
switch main -> late or late -> main with a fault: a batch refused whole
(a suspect's code and a retriable one), a SIGTERM while a switch waits,
alternating lag, one broker down. Checks: every event arrives (exactly
once when no producer was recreated and no process died), per key first
deliveries follow commit order, the slot ends confirmed past every
event, the daemon keeps running.

With wal2json only (the switches do not depend on the decoder), and left
to the plain pass and PostgreSQL 15 for time (the code they reach runs
under the sanitizers in test_stream.py and test_broker_errors.py). Kept
from a longer attack on the change, whose other scenarios (kill -9
around switches, all brokers down during a late backlog, values near
message.max.bytes inside it, /readyz and the connected gauge across
switches) passed."""

import contextlib
import os
import random
import re
import signal
import time

import pytest

from test_faults import (PARTITIONS, RECREATED, Feed, Writer, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         delivery_mode, id_counts, make_topic, wait_confirmed,
                         wait_streaming)

DECODERS = ("wal2json",)
pytestmark = [pytest.mark.no_sanitizers, pytest.mark.no_version_matrix]

TO_LATE = r"late records go through the client with linger\.ms 5"
TO_FRESH = r"fresh records go through the client with linger\.ms as configured"


def prepared(outboxd_factory, overrides=None, env=None):
    """An outboxd not yet started whose slot exists (rows committed from
    now on are a backlog for it)."""
    d = outboxd_factory(overrides, start=False, env=env)
    rc, out, err = d.run_cmd(["slot", "create"])
    assert rc == 0, (rc, out, err)
    return d


def backlog(feed, txns, rows):
    for _ in range(txns):
        feed.commit(rows)
    time.sleep(0.25)  # every transaction is older than 100 ms when read


@contextlib.contextmanager
def slow_broker(broker, ms):
    """Every broker answers ms late inside the block; after it, at once,
    with no produce errors pending."""
    broker.cmd("rtt all %d" % ms)
    try:
        yield
    finally:
        broker.cmd("rtt all 0")
        broker.cmd("clear 0")


def check_end(pg, consumer, d, slot_name, topic, feed):
    """Every event of feed delivered in order (exactly once unless the
    producer was recreated), the slot confirmed past them, d running."""
    end = pg.wal_lsn()
    check_all(consumer, topic, feed, delivery_mode(d))
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert d.running(), d.log_tail()


def check_all(consumer, topic, feed, exactly_once, timeout=120):
    records = collect_all(consumer, topic, feed.ids, timeout=timeout)
    check_delivery(records, feed.ids, exactly_once=exactly_once)
    check_first_deliveries_in_commit_order(records, feed)
    return records


# ---------------------------------------------------------------------------
# (a) a whole batch refused while the late client is current


# When, how and how often a batch is refused: (backlog transactions, broker
# delay ms, writer rows, writer pause s, seconds or transactions before the
# error, error, requests refused). "mid_backlog": while the late client
# drains the backlog, with fresh rows coming, so that records switch back
# to the first client meanwhile. "switch_back_waits": past the dwell, while
# the switch back waits for the late client to drain (the slow broker keeps
# its requests in flight).
REFUSALS = {
    "mid_backlog-INVALID_RECORD": (60, 20, 3, 0.02, 3, "INVALID_RECORD", 1),
    "mid_backlog-NOT_ENOUGH_REPLICAS": (60, 20, 3, 0.02, 3, "NOT_ENOUGH_REPLICAS", 1),
    "switch_back_waits": (40, 100, 2, 0.01, 1.2, "INVALID_RECORD", 2),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_batch_refused_around_the_late_client(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, case,
        decoder):
    """A backlog drains through the late client on a slow broker while
    fresh rows come; whole requests are refused (REFUSALS says when, with
    which error, how many). Every event arrives, per key in order."""
    txns, rtt, rows, pause, before, code, count = REFUSALS[case]
    feed = Feed(pg, "lbe_%s" % test_id, keys=5)
    topic = make_topic(broker, feed.agg)
    d = prepared(outboxd_factory)
    backlog(feed, txns, 50)
    with slow_broker(broker, rtt):
        d.start()
        d.wait_log(TO_LATE, 30)
        with Writer(feed, rows=rows, pause=pause) as w:
            if isinstance(before, float):
                time.sleep(before)  # past the dwell: the switch now waits
            else:
                w.wait_txns(before)
            assert broker.cmd("error 0 %s %d" % (code, count)) == "ok"
            w.wait_txns(30)
            broker.cmd("rtt all 0")
            w.wait_txns(30)
    check_end(pg, consumer, d, slot_name, topic, feed)


# ---------------------------------------------------------------------------
# (b)/(e) kills and restarts around switches, alternating lag


def test_sigterms_while_switch_waits(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, decoder):
    """Six rounds: rows committed while outboxd is down (a backlog), a
    restart, fresh rows right away (the switch back waits for the backlog
    to drain), then SIGTERM 0.3-1.6 s later. A clean stop waits for every
    report and confirms, so every event exactly once, per key in commit
    order. (This found that a stop inside a transaction left it
    unconfirmed, and the next start published its first events again.)"""
    feed = Feed(pg, "lrs_%s" % test_id, keys=9)
    topic = make_topic(broker, feed.agg)
    d = prepared(outboxd_factory)
    rng = random.Random(test_id)
    with slow_broker(broker, 5):
        for _ in range(6):
            backlog(feed, 15, 40)
            d.start()
            with Writer(feed, rows=3, pause=0.01):
                time.sleep(rng.uniform(0.3, 1.6))
                assert d.stop(40) == 0, d.log_tail()
        d.start()
        feed.commit(5)
    check_end(pg, consumer, d, slot_name, topic, feed)


def test_alternating_lag_without_restarts_is_exactly_once(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, decoder):
    """One process, lag alternating, five times: outboxd is paused
    (SIGSTOP) for 0.4 s while transactions commit, so they are read late,
    until records switch to the late client; then a trickle of fresh ones
    until they switch back. Each phase lasts until outboxd logs its switch
    (a switch waits for the client it leaves to drain and comes at most
    once a second, later on a slow machine), so records switch clients
    both ways each round. Nothing recreated, no process died: every event
    exactly once, per key in commit order."""
    feed = Feed(pg, "lal_%s" % test_id, keys=5)
    topic = make_topic(broker, feed.agg)
    d = prepared(outboxd_factory)
    backlog(feed, 5, 20)
    d.start()
    wait_streaming(pg, slot_name)

    def late_rows():
        os.kill(d.pid, signal.SIGSTOP)
        try:
            for _ in range(10):
                feed.commit(10)
            time.sleep(0.4)
        finally:
            os.kill(d.pid, signal.SIGCONT)
        time.sleep(0.3)

    def fresh_rows():
        feed.commit(2)
        time.sleep(0.1)

    def until_logged(pattern, phase):
        n = len(re.findall(pattern, d.log_text()))
        deadline = time.monotonic() + 60
        while len(re.findall(pattern, d.log_text())) <= n:
            assert time.monotonic() < deadline, (
                "no /%s/ in 60 s of %s rows:\n%s"
                % (pattern, phase.__name__, d.log_tail()))
            phase()

    until_logged(TO_FRESH, fresh_rows)  # the backlog read, fresh again
    for _ in range(5):
        until_logged(TO_LATE, late_rows)
        until_logged(TO_FRESH, fresh_rows)
    end = pg.wal_lsn()
    check_all(consumer, topic, feed, delivery_mode(d))
    wait_confirmed(pg, slot_name, end, timeout=30)
    log = d.log_text()
    assert d.running(), d.log_tail()
    assert RECREATED not in log, d.log_tail()
    assert len(re.findall(TO_LATE, log)) >= 5, d.log_tail()
    assert len(re.findall(TO_FRESH, log)) >= 5, d.log_tail()


# ---------------------------------------------------------------------------
# a switch waiting on a partition whose leader is down
#
# A switch of clients waits for everything outstanding on the client it
# leaves (switch_clients(): rd_kafka_outq_len() == 0); with
# message.timeout.ms 0 (outboxd's default) a record for a partition whose
# leader is down stays outstanding for as long as it is down. A wait for
# it held up every record of every topic (found by these tests; with
# linger.ms 5, so one client, they passed): now the records stay where
# they are once the outstanding ones stop moving for 50 ms.


@contextlib.contextmanager
def broker_2_down(pg, broker, consumer, d, slot_name, name):
    """Two feeds: topic A's partitions all led by broker 2, topic B's by
    broker 1; yields (a, b) with broker 2 down inside the block (d not
    started). After it, broker 2 is up and every event of both arrived in
    order, confirmed."""
    a = Feed(pg, "%sA_%s" % (name, slot_name[-12:]), keys=8)
    b = Feed(pg, "%sB_%s" % (name, slot_name[-12:]), keys=4)
    topic_a = make_topic(broker, a.agg)
    topic_b = make_topic(broker, b.agg)
    for p in range(PARTITIONS):
        assert broker.cmd("leader %s %d 1" % (topic_b, p)) == "ok"
        assert broker.cmd("leader %s %d 2" % (topic_a, p)) == "ok"
    try:
        yield a, b
    finally:
        broker.cmd("up 2")
    end = pg.wal_lsn()
    check_all(consumer, topic_a, a, delivery_mode(d))
    check_all(consumer, topic_b, b, delivery_mode(d))
    wait_confirmed(pg, slot_name, end, timeout=40)
    assert d.running(), d.log_tail()


def assert_flowing(consumer, feed, what):
    """Every event of feed (led by broker 1, which is up) arrives within
    10 s while broker 2 is down."""
    for _ in range(20):
        feed.commit(3)
        time.sleep(0.1)
    topic = "outbox.event.%s" % feed.agg
    got = set(id_counts(collect_all(consumer, topic, feed.ids, timeout=10)))
    missing = [i for i in feed.ids if i not in got]
    assert not missing, (
        "%d of %d %s for %s (led by broker 1, which is up) not delivered "
        "within 10 s while broker 2 is down"
        % (len(missing), len(feed.ids), what, topic))


def test_pause_with_one_broker_down_does_not_stall_fresh_events(
        pg, broker, consumer, outboxd_factory, slot_name, decoder):
    """Fresh events flow through the first client while broker 2 is down
    (records for topic A, whose partitions it all leads, wait). outboxd is
    paused 0.4 s (SIGSTOP: a GC-like hiccup), so the next transactions are
    read late and records want the late client; the switch waits for the
    first client's queue to empty, which it cannot while broker 2 is down.
    Events for topic B (all partitions led by broker 1) must keep
    flowing."""
    d = prepared(outboxd_factory)
    with broker_2_down(pg, broker, consumer, d, slot_name, "lp") as (a, b):
        d.start()
        wait_streaming(pg, slot_name)
        a.commit(5)
        b.commit(2)
        collect_all(consumer, "outbox.event.%s" % b.agg, b.ids, timeout=20)
        assert broker.cmd("down 2") == "ok"
        for _ in range(5):
            a.commit(8)
            time.sleep(0.05)
        time.sleep(1.2)  # past the dwell
        os.kill(d.pid, signal.SIGSTOP)
        try:
            for _ in range(5):
                a.commit(8)
                b.commit(2)
            time.sleep(0.4)
        finally:
            os.kill(d.pid, signal.SIGCONT)
        time.sleep(1.2)
        assert_flowing(consumer, b, "events, some committed after the pause,")


def test_fresh_events_flow_while_one_broker_is_down(
        pg, broker, consumer, outboxd_factory, slot_name, decoder):
    """Broker 2 is down, so the backlog's records for topic A (whose
    partitions it all leads) wait in the late client (message.timeout.ms
    0: for as long as it is down). Fresh events for topic B, whose
    partitions are all led by broker 1, must still be delivered
    meanwhile: the switch back to the first client waits for the late
    one's queue to empty, which it cannot while broker 2 is down."""
    d = prepared(outboxd_factory)
    with broker_2_down(pg, broker, consumer, d, slot_name, "lh") as (a, b):
        backlog(a, 20, 20)
        assert broker.cmd("down 2") == "ok"
        d.start()
        d.wait_log(TO_LATE, 30)
        wait_streaming(pg, slot_name)
        time.sleep(1.5)  # past SWITCH_DWELL_MS
        assert_flowing(consumer, b, "fresh events")
