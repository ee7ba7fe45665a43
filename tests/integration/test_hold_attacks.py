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

import threading
import time

import pytest

from harness import header, wait_until
from test_faults import make_topic, nullable_outbox, wait_streaming
from test_hold import (Keys, first_occurrences_in_order, hold_config,
                       held_rows, ids_by_key)

DECODERS = ("wal2json",)


def held_keys(pg, slot):
    """The keys held (a released key's row stays a day, released)."""
    return pg.sql("SELECT count(*) FROM public.outboxd_held_keys WHERE "
                  "slot_name = %s AND released_through IS NULL", (slot,))[0][0]


@pytest.mark.decoders("wal2json", "pgoutput")
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


def fail_held_writes(pg, slot, on):
    """A trigger making every write of slot's held events fail (the
    session cluster's role is a superuser: REVOKE would not bite)."""
    if on:
        pg.sql("CREATE OR REPLACE FUNCTION public.attack_fail_held() "
               "RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
               "IF NEW.slot_name = TG_ARGV[0] THEN "
               "RAISE EXCEPTION 'attack: held events refused'; END IF; "
               "RETURN NEW; END $$")
        pg.sql("CREATE TRIGGER attack_fail_held BEFORE INSERT ON "
               "public.outboxd_held_events FOR EACH ROW EXECUTE FUNCTION "
               "public.attack_fail_held('%s')" % slot)
    else:
        pg.sql("DROP TRIGGER IF EXISTS attack_fail_held ON "
               "public.outboxd_held_events")


def test_failing_held_writes_keep_the_slot_behind_them_across_kill9(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The held events' table refuses A's rows (a trigger): A's next
    events are dead-lettered as held but cannot be written. B's events
    flow, yet the slot is never confirmed past A's first unwritten held
    event. outboxd is killed (kill -9) meanwhile and started again with the
    writes working: A's held events are written, A is still held, and a
    release publishes them in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "fw_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    wait_until(lambda: held_keys(pg, slot_name) == 1, 10, 0.1)
    try:
        fail_held_writes(pg, slot_name, True)
        held = [k.row(a)]
        # At most the commit start of A's held transaction may be
        # confirmed (a stream started there sends it again): never its end.
        end = pg.wal_lsn()
        bs = [k.row(b) for _ in range(5)]
        held.append(k.row(a))
        got = ids_by_key(consumer.collect([topic], 6, timeout=30))
        assert got[b] == bs and got[a] == [first], got
        time.sleep(2)  # two status intervals
        assert pg.slot(slot_name)["confirmed_flush_lsn_int"] < end, \
            "the slot was confirmed past A's unwritten held event"
        assert held_rows(pg, slot_name) == 1
        d.kill9()
    finally:
        fail_held_writes(pg, slot_name, False)
    d = outboxd_factory(hold_config(table))
    wait_until(lambda: held_rows(pg, slot_name) == 3, 30, 0.2,
               "A's held events written after the restart")
    held.append(k.row(a))
    wait_until(lambda: held_rows(pg, slot_name) == 4, 30, 0.2)
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 10, timeout=30))[a]
    first_occurrences_in_order(got, [first] + held)
    assert d.running(), d.log_tail()


def test_hold_connection_terminated_while_held_rows_wait(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """pg_terminate_backend of every plain connection of outboxd (the
    hold's own among them) right after A's bad event, and again between
    A's held events: the held rows are written on a new connection, none
    lost, the walsender untouched; a release publishes them in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "tc_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id

    def cut():
        return pg.sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> "
            "pg_backend_pid() AND application_name LIKE 'outboxd%%'")[0][0]

    first = k.row(a)
    k.row(a, bad=True)
    held = []
    for _ in range(3):
        cut()
        held.append(k.row(a))
        held += k.many(a, 50)
    cut()
    wait_until(lambda: held_rows(pg, slot_name) == len(held) + 1, 30, 0.2,
               "the held events written")
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], len(held) + 1, timeout=30))[a]
    first_occurrences_in_order(got, [first] + held)
    assert d.running(), d.log_tail()


def test_release_with_topic_and_an_unusual_key(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """Key K (non-ASCII, a quote, a control character) is held in two
    topics; `dlq release K --topic T1` releases T1's hold only: T2's held
    event stays held and K's next event of T2 is held too; releasing T2
    then publishes them in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    aggs = ["t1_%s" % test_id, "t2_%s" % test_id]
    topics = [make_topic(broker, g) for g in aggs]
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k1, k2 = Keys(pg, table, aggs[0]), Keys(pg, table, aggs[1])
    key = "Ключ'\x01%s" % test_id
    k1.row(key, bad=True)
    k2.row(key, bad=True)
    h1 = [k1.row(key)]
    h2 = [k2.row(key)]
    wait_until(lambda: held_rows(pg, slot_name) == 4, 30, 0.2)
    rc, out, err = d.run_cmd(["dlq", "release", key, "--topic", topics[0]])
    assert rc == 0, out + err
    assert held_keys(pg, slot_name) == 1
    h1.append(k1.row(key))
    h2.append(k2.row(key))
    got1 = consumer.collect([topics[0]], 2, timeout=30)
    assert [header(r, "id").decode() for r in got1] == h1, got1
    wait_until(lambda: held_rows(pg, slot_name) == 3, 30, 0.2,
               "T2's held events")
    assert consumer.collect([topics[1]], 0, timeout=3, settle=1) == []
    rc, out, err = d.run_cmd(["dlq", "release", key])
    assert rc == 0, out + err
    got2 = consumer.collect([topics[1]], 2, timeout=30)
    assert [header(r, "id").decode() for r in got2] == h2, got2
    assert [r["key"] for r in got2] == [key, key]
    assert d.running(), d.log_tail()


def test_past_hold_max_events_it_halts_and_resumes_in_order(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """outbox.hold_max_events = 5: A's sixth held event stops outboxd
    (exit 1) without confirming it, and B's events after it wait. Started
    again with the limit raised, A's held events are all held (none lost,
    none twice in the table), B's flow, and a release publishes A's in
    order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "hme_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table, hold_max_events=5))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    k.row(a, bad=True)
    held = [k.row(a) for _ in range(4)]
    wait_until(lambda: held_rows(pg, slot_name) == 5, 30, 0.2)
    held += [k.row(a), k.row(a)]
    bs = [k.row(b)]
    assert d.wait(30) == 1, d.log_tail()
    assert "outbox.hold_max_events (5) events are held" in d.log_text()
    d = outboxd_factory(hold_config(table, hold_max_events=100))
    wait_until(lambda: held_rows(pg, slot_name) == 7, 30, 0.2)
    got = ids_by_key(consumer.collect([topic], 1, timeout=30))
    assert got == {b: bs}, got
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 7, timeout=30))[a]
    first_occurrences_in_order(got, held)
    assert d.running(), d.log_tail()


def test_two_keys_fail_in_one_transaction(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """One transaction: A's event, B's bad event, A's bad event, C's, B's,
    A's. A and B are held (each behind its own), C flows; released one at
    a time, each key's held events arrive in order, A's first before."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "two_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    wait_streaming(pg, slot_name)
    a, b, c = ("%s-%s" % (x, test_id) for x in "ABC")
    rows = [(a, None), (b, "[1]"), (a, "[2]"), (c, None), (b, None),
            (a, None)]
    conn = pg.connect()
    with conn, conn.cursor() as cur:
        for i, (key, bad) in enumerate(rows):
            cur.execute("INSERT INTO %s (id, aggregate_type, aggregate_id, "
                        "event_type, payload, headers) VALUES (%%s, %%s, %%s, "
                        "'x', '{}', %%s::jsonb)" % table,
                        ("%s-%d" % (key, i), agg, key, bad))
    conn.close()
    dead = consumer.collect([dlq], 4, timeout=30)
    assert [(header(r, "id").decode(), header(r, "held_behind"))
            for r in dead] == [
        (b + "-1", None), (a + "-2", None), (b + "-4", (b + "-1").encode()),
        (a + "-5", (a + "-2").encode())], dead
    for key in (b, a):
        rc, out, err = d.run_cmd(["dlq", "release", key])
        assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 4, timeout=30))
    assert got == {a: [a + "-0", a + "-5"], c: [c + "-3"], b: [b + "-4"]}, got
    assert d.running(), d.log_tail()


def test_huge_transaction_of_a_held_key(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """30,000 events of a held key in one transaction (held rows written a
    thousand at a time, before the commit is read): all are held, then
    released in order, and the slot moves past them."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "huge_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    k.row(a, bad=True)
    held = k.many(a, 30000)
    wait_until(lambda: held_rows(pg, slot_name) == 30001, 60, 0.5,
               "the held events written")
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 30000, timeout=60))[a]
    assert got == held
    assert held_rows(pg, slot_name) == 0
    assert d.running(), d.log_tail()


@pytest.mark.decoders("wal2json", "pgoutput")
def test_kill9_right_after_a_release_does_not_hold_the_key_again(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The dead-letter topic's leader answers in 2 s, so A's dead letter
    and held record are not yet confirmed when A is released (asked at
    once). outboxd is killed (kill -9) as soon as the release is done, and
    started again: the slot sends A's transactions again. Promise: the
    release holds, A's next event reaches A's topic after A's released
    ones, and A is not held again."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "krel_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)  # partition 0 led by broker 1
    for p in range(4):
        assert broker.cmd("leader %s %d 2" % (topic, p)) == "ok"
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    assert ids_by_key(consumer.collect([topic], 1, timeout=30)) == {a: [first]}
    try:
        assert broker.cmd("rtt 1 2000") == "ok"
        k.row(a, bad=True)
        held = [k.row(a)]
        wait_until(lambda: held_rows(pg, slot_name) == 2, 10, 0.05)
        asking = release_async(d, a)
        d.wait_log(r"released key", 20)
        d.kill9()
        asking.kill()
        asking.wait()
    finally:
        broker.cmd("rtt all 0")
    d = outboxd_factory(hold_config(table))
    wait_streaming(pg, slot_name)
    time.sleep(1)
    after = k.row(a)
    got = ids_by_key(consumer.collect([topic], 3, timeout=10))
    assert held_keys(pg, slot_name) == 0, \
        ("A is held again after its release", got)
    first_occurrences_in_order(got[a], [first] + held + [after])
    assert d.running(), d.log_tail()


def test_other_keys_flow_while_a_release_cannot_reach_its_topic(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A's topic is led by broker 2, which is down when A is released; B's
    topic is led by broker 3. Promise: other keys are untouched, so B's
    events committed during the release reach B's topic within seconds
    (the release must not stop the stream while it waits for its
    broker)."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg_a, agg_b = "da_%s" % test_id, "db_%s" % test_id
    ta, tb = make_topic(broker, agg_a), make_topic(broker, agg_b)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)  # broker 1
    for p in range(4):
        assert broker.cmd("leader %s %d 2" % (ta, p)) == "ok"
        assert broker.cmd("leader %s %d 3" % (tb, p)) == "ok"
    wait_streaming(pg, slot_name)
    ka, kb = Keys(pg, table, agg_a), Keys(pg, table, agg_b)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    ka.row(a, bad=True)
    held = [ka.row(a)]
    bs = [kb.row(b)]
    assert ids_by_key(consumer.collect([tb], 1, timeout=30)) == {b: bs}
    wait_until(lambda: held_rows(pg, slot_name) == 2, 10, 0.1)
    time.sleep(1.5)  # confirmed past A's held event
    try:
        assert broker.cmd("down 2") == "ok"
        asking = release_async(d, a)
        d.wait_log(r"releasing key", 10)
        time.sleep(0.5)
        bs.append(kb.row(b))
        started = time.monotonic()
        got = consumer.collect([tb], 2, timeout=10, settle=0.2)
        took = time.monotonic() - started
        assert ids_by_key(got) == {b: bs}, (ids_by_key(got), took)
        assert took < 5, "B's event waited %.1f s for A's release" % took
    finally:
        broker.cmd("up all")
        asking.kill()
        asking.wait()
    assert d.running(), d.log_tail()


@pytest.mark.decoders("wal2json", "pgoutput")
def test_batch_refused_with_the_keys_failed_and_later_events(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker refuses (INVALID_RECORD) the one ProduceRequest carrying
    A's first three events (one transaction, queued while the brokers were
    down), then A's first alone: A's first is a dead letter (refused), and
    A's second and third, suspects read again after the producer was
    recreated, are held behind it, not published; B's next event arrives.
    Released with --include-failed (the cause gone), A's three arrive in
    order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "bat_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    bs = [k.row(b), k.row(a)]
    got = ids_by_key(consumer.collect([topic], 2, timeout=30))
    assert got == {b: bs[:1], a: bs[1:]}, got
    assert broker.cmd("error 0 INVALID_RECORD 2") == "ok"
    assert broker.cmd("down all") == "ok"
    try:
        ids = k.many(a, 3)
        time.sleep(1)
    finally:
        assert broker.cmd("up all") == "ok"
    dead = consumer.collect([dlq], 3, timeout=30)
    assert [(header(r, "id").decode(), header(r, "held_behind"))
            for r in dead] == [(ids[0], None),
                               (ids[1], ids[0].encode()),
                               (ids[2], ids[0].encode())], dead
    bs.append(k.row(b))
    got = ids_by_key(consumer.collect([topic], 3, timeout=30, settle=2))
    assert got == {b: [bs[0], bs[2]], a: [bs[1]]}, got
    rc, out, err = d.run_cmd(["dlq", "release", "--include-failed", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 6, timeout=30))
    first_occurrences_in_order(got[a], [bs[1]] + ids)
    assert d.running(), d.log_tail()


def test_stream_cut_while_held_rows_cannot_be_written(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A's held rows cannot be written (a trigger) when the walsender is
    terminated, twice; A's events keep coming. B's events, committed after
    each cut, reach B's topic meanwhile (other keys are untouched; the slot
    stays behind A's unwritten rows). Once the writes work again, each
    held event is in the table exactly once, and a release publishes them
    in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "cut_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    pid = wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    wait_until(lambda: held_keys(pg, slot_name) == 1, 10, 0.1)
    held, bs = [], []
    b = "B-%s" % test_id
    try:
        fail_held_writes(pg, slot_name, True)
        for _ in range(2):
            held.append(k.row(a))
            held += k.many(a, 20)
            time.sleep(0.5)
            pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
            # Other keys are untouched: B flows on the new stream.
            bs.append(k.row(b))
            got = ids_by_key(consumer.collect([topic], len(bs) + 1,
                                              timeout=10, settle=0.2))
            assert got.get(b) == bs, (
                "B's event waits behind A's unwritable held rows", got)
            pid = wait_streaming(pg, slot_name, other_than=pid)
        held.append(k.row(a))
        time.sleep(0.5)
    finally:
        fail_held_writes(pg, slot_name, False)
    wait_until(lambda: held_rows(pg, slot_name) == len(held) + 1, 30, 0.2,
               "the held rows written (%d of %d)"
               % (held_rows(pg, slot_name), len(held) + 1))
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], len(held) + len(bs) + 1,
                                      timeout=30))[a]
    assert got == [first] + held, got
    assert d.running(), d.log_tail()


def test_postgres_crash_after_a_release_does_not_hold_the_key_again(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """A is held, released, and A's next event flows. Then outboxd is
    killed (kill -9) and Postgres crashes (immediate stop) before a
    checkpoint saved the slot's confirmed position, so the slot sends A's
    transactions again, the dead letter among them. Promise: the release
    holds (A is not held again) and A's next event reaches A's topic after
    the released ones."""
    c = own_cluster()
    table = nullable_outbox(c, "obx_%s" % test_id)
    agg = "pgc_%s" % test_id
    topic = make_topic(broker, agg)
    cfg = hold_config(table)
    cfg["postgres"] = {"conninfo": c.conninfo()}
    d = outboxd_factory(cfg)
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(c, slot_name)
    c.sql("CHECKPOINT")
    k = Keys(c, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    held = [k.row(a)]
    wait_until(lambda: held_rows(c, slot_name) == 2, 10, 0.1)
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    held.append(k.row(a))
    assert ids_by_key(consumer.collect([topic], 3, timeout=30))[a] == \
        [first] + held
    time.sleep(1)
    d.kill9()
    c.restart(mode="immediate")
    d = outboxd_factory(cfg)
    wait_streaming(c, slot_name)
    time.sleep(1)
    after = k.row(a)
    got = ids_by_key(consumer.collect([topic], 4, timeout=10))[a]
    assert held_keys(c, slot_name) == 0, \
        ("A is held again after its release", got)
    first_occurrences_in_order(got, [first] + held + [after])
    assert d.running(), d.log_tail()


def test_release_while_a_transaction_of_the_key_is_open(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A transaction inserts A's events and stays open while A is
    released; it commits after the release. Its events come after the
    released ones (commit order), published to A's topic, not held."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "open_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    conn = pg.connect()
    conn.autocommit = False
    cur = conn.cursor()
    opened = ["%s-open-%d" % (a, i) for i in range(3)]
    for eid in opened:
        cur.execute("INSERT INTO %s (id, aggregate_type, aggregate_id, "
                    "event_type, payload) VALUES (%%s, %%s, %%s, 'x', '{}')"
                    % table, (eid, agg, a))
    held = [k.row(a)]
    wait_until(lambda: held_rows(pg, slot_name) == 2, 10, 0.1)
    rc, out, err = d.run_cmd(["dlq", "release", a])
    conn.commit()
    conn.close()
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 5, timeout=30))[a]
    assert got == [first] + held + opened, got
    assert held_keys(pg, slot_name) == 0
    assert d.running(), d.log_tail()


def test_hold_connection_cut_while_a_release_chunk_is_in_flight(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A's topic answers in 1.5 s; while the release's first chunk waits
    for its acknowledgements, outboxd's plain connections (the hold's
    among them) are terminated: the chunk's rows are deleted on a new
    connection, the release ends, every held event arrives once, in
    order, and A's next event after them."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "rc_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    broker.create_topic(d.config["outbox"]["dlq_topic"], 1)  # broker 1
    for p in range(4):
        assert broker.cmd("leader %s %d 2" % (topic, p)) == "ok"
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first, held = hold_key_with_events(pg, k, a, slot_name, 1500)
    time.sleep(1.5)  # confirmed past them
    try:
        assert broker.cmd("rtt 2 1500") == "ok"
        asking = release_async(d, a)
        d.wait_log(r"releasing key", 10)
        time.sleep(0.5)
        pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE backend_type = 'client backend' AND pid <> "
               "pg_backend_pid() AND application_name LIKE 'outboxd%%'")
    finally:
        broker.cmd("rtt all 0")
    asking.communicate(timeout=70)  # its own connection was cut too
    wait_until(lambda: held_keys(pg, slot_name) == 0, 30, 0.2,
               "the release ended (%d held rows left)"
               % held_rows(pg, slot_name))
    last = k.row(a)
    got = ids_by_key(consumer.collect([topic], len(held) + 2, timeout=30))[a]
    assert got == [first] + held + [last], (len(got), got[:3], got[-3:])
    assert held_rows(pg, slot_name) == 0
    assert d.running(), d.log_tail()
