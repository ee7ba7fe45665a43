"""Attacks on outbox.on_bad_event = hold_key (deploy/README.md, "Held keys
and dead letters") with faults test_hold.py does not inject: a crash right
after a backlog with a bad event made the slot, the broker refusing a
whole batch holding a key's failed event and its later ones, the stream
cut while held rows wait, the hold's own connection failing, a release
while the key keeps receiving events, binary keys, --topic.

Each test states the promise it checks: once an event of (topic T, key K)
is a dead letter, every later event of (T, K) is held until released,
then published to T in commit order, never overtaken by K's new events,
never lost, other keys untouched."""

import json
import threading
import time

from harness import header, wait_until
from test_faults import make_topic, nullable_outbox, wait_streaming
from test_hold import (Keys, first_occurrences_in_order, hold_config,
                       held_rows, ids_by_key)

DECODERS = ("wal2json",)


def held_keys(pg, slot):
    return pg.sql("SELECT count(*) FROM public.outboxd_held_keys WHERE "
                  "slot_name = %s", (slot,))[0][0]


def test_crash_after_a_backlog_with_a_bad_event_keeps_the_hold(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The backlog (slot created fresh, outbox.backlog_where) holds A's bad
    event and A's next one; outboxd is killed right after the permanent
    slot was made from the backlog's snapshot (cutover-copied). Started
    again, the slot starts after the backlog, so the backlog is never
    read again: A must still be held (its rows committed before the slot
    passed them), A's next stream event held too, and a release publishes
    A's held events in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "bkl_%s" % test_id
    topic = make_topic(broker, agg)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    held = [k.row(a)]
    k.row(b)
    cfg = hold_config(table, backlog_where="true",
                      backlog_order_by="created_at, id")
    d = outboxd_factory(cfg, env={"OUTBOXD_TEST_CRASH_AT": "cutover-copied"})
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    assert d.wait(60) == -9, d.log_tail()
    assert pg.slot(slot_name) is not None
    d = outboxd_factory(cfg)
    wait_streaming(pg, slot_name)
    held.append(k.row(a))
    k.row(b)
    assert ids_by_key(consumer.collect([topic], 3, timeout=30)) == \
        {a: [first], b: [b + "-1", b + "-2"]}
    # A's new event is held, not published.
    wait_until(lambda: held_keys(pg, slot_name) == 1, 10, 0.2,
               "A still held after the crash")
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 5, timeout=30))[a]
    first_occurrences_in_order(got, [first] + held)
    assert d.running(), d.log_tail()


class KeyWriter(threading.Thread):
    """Commits one row of key through keys every pause seconds until
    stopped; ids keeps what committed, in commit order."""

    def __init__(self, keys, key, pause=0.02):
        super().__init__(daemon=True)
        self.keys = keys
        self.key = key
        self.pause = pause
        self.ids = []
        self.error = None
        self._halt = threading.Event()

    def run(self):
        try:
            while not self._halt.is_set():
                self.ids.append(self.keys.row(self.key))
                self._halt.wait(self.pause)
        except BaseException as e:  # reported by stop()
            self.error = e

    def stop(self):
        self._halt.set()
        self.join(10)
        assert self.error is None, self.error


def hold_key_with_events(pg, k, a, slot_name, n_held):
    """A's first event flows, its second is bad, n_held more are held;
    waits until their rows are written. Returns (first, held ids)."""
    first = k.row(a)
    k.row(a, bad=True)
    held = k.many(a, n_held)
    wait_until(lambda: held_rows(pg, slot_name) == n_held + 1, 30, 0.2,
               "the held events written")
    return first, held


def release_async(d, *keys):
    import subprocess
    return subprocess.Popen([d.binary, "dlq", "release"] + list(keys) +
                            ["-c", d.config_path], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def test_release_while_the_key_keeps_receiving_events(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A release asked while A receives an event every 10 ms: the release
    ends once they pause at the latest; every held event and every event
    that came during the release reaches A's topic, their first arrivals in
    commit order, and A's event after the release last."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "rate_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first, held = hold_key_with_events(pg, k, a, slot_name, 1500)
    w = KeyWriter(k, a, pause=0.01)
    w.start()
    asking = release_async(d, a)
    time.sleep(4)
    w.stop()
    out = asking.communicate(timeout=70)[0].decode()
    assert asking.returncode == 0, out
    wait_until(lambda: held_keys(pg, slot_name) == 0, 20, 0.2, "released")
    last = k.row(a)
    expected = [first] + held + w.ids + [last]
    got = ids_by_key(consumer.collect([topic], len(expected), timeout=30))[a]
    first_occurrences_in_order(got, expected)
    assert held_rows(pg, slot_name) == 0
    assert d.running(), d.log_tail()


def test_release_while_the_slot_is_read_again(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A's topic answers in 0.4 s, so each chunk of a release waits and A's
    events, one every 20 ms, keep the release going; the dead-letter
    topic's leader answers in 3 s, so A's held records are acknowledged
    (and their transactions confirmed) well after the release published
    and deleted their rows. With kafka message.timeout.ms = 2000 the main
    producer gives up, is recreated and the slot read again from the
    confirmed position, before events the release already published: A is
    still held, so they are held again. Promise: the release still ends
    (A is not held for ever), every event reaches A's topic with first
    arrivals in commit order, and A's next event after the release comes
    after all of them."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "rr_%s" % test_id
    topic = make_topic(broker, agg)
    cfg = hold_config(table)
    cfg["kafka"] = {"message.timeout.ms": 2000}
    d = outboxd_factory(cfg)
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)  # partition 0 led by broker 1
    for p in range(4):
        assert broker.cmd("leader %s %d 2" % (topic, p)) == "ok"
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first, held = hold_key_with_events(pg, k, a, slot_name, 200)
    try:
        assert broker.cmd("rtt 2 400") == "ok"
        w = KeyWriter(k, a, pause=0.02)
        w.start()
        asking = release_async(d, a)
        wait_until(lambda: "releasing key" in d.log_text(), 10, 0.05)
        assert broker.cmd("rtt 1 3000") == "ok"
        wait_until(lambda: "recreating the kafka producer" in d.log_text(),
                   20, 0.1, "the producer recreated")
        assert "released key" not in d.log_text(), "the release ended first"
        time.sleep(1)
        assert broker.cmd("rtt 1 0") == "ok"
        time.sleep(1)
        w.stop()
    finally:
        broker.cmd("rtt all 0")
    out = asking.communicate(timeout=70)[0].decode()
    assert asking.returncode == 0, out
    wait_until(lambda: held_keys(pg, slot_name) == 0, 20, 0.2,
               "the release ended (%d held rows left)"
               % held_rows(pg, slot_name))
    last = k.row(a)
    expected = [first] + held + w.ids + [last]
    got = ids_by_key(consumer.collect([topic], len(expected), timeout=30))[a]
    first_occurrences_in_order(got, expected)
    assert got[-1] == last, got[-5:]
    assert d.running(), d.log_tail()


def test_release_does_not_overtake_the_keys_earlier_event_in_flight(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A's topic is led by a broker answering in 2 s; the broker fails the
    ProduceRequest of A's first (good) event. Before that answer comes, A's
    second event is bad (A held) and its third held, and A is released at
    once: the release's own producer publishes A's third to A's topic.
    Promise: A's first arrivals follow commit order (first, third), its
    third never lands before its first, and A ends released."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "ovt_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)  # partition 0 led by broker 1
    for p in range(4):
        assert broker.cmd("leader %s %d 2" % (topic, p)) == "ok"
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    warm = k.row(b)
    assert ids_by_key(consumer.collect([topic], 1, timeout=30)) == {b: [warm]}
    try:
        assert broker.cmd("rtt 2 2000") == "ok"
        assert broker.cmd("error 0 UNKNOWN 1") == "ok"
        first = k.row(a)
        k.row(a, bad=True)
        third = k.row(a)
        wait_until(lambda: held_rows(pg, slot_name) == 2, 10, 0.05,
                   "A's held rows written")
        asking = release_async(d, a)
        wait_until(lambda: "recreating the kafka producer" in d.log_text(),
                   20, 0.1, "the producer recreated")
    finally:
        broker.cmd("rtt all 0")
    try:
        wait_until(lambda: asking.poll() is not None, 15, 0.2,
                   "the release ended (%d held rows left)"
                   % held_rows(pg, slot_name))
    except Exception:
        asking.kill()
        raise
    finally:
        got = consumer.collect([topic], 3, timeout=5, settle=1)
        assert ids_by_key(got).get(a, [None])[0] == first, \
            ("A's held event overtook its first one", ids_by_key(got))
    assert asking.returncode == 0, asking.communicate()[0]
    first_occurrences_in_order(ids_by_key(got)[a], [first, third])
    assert held_keys(pg, slot_name) == 0, "A is held again after its release"
    assert d.running(), d.log_tail()
