"""outbox.on_bad_event = hold_key (deploy/README.md, "Held keys and dead
letters"): once an event of a key is dead-lettered, the key's later events
go to the dead-letter topic too, held behind it, until `outboxd dlq
release` publishes them to their topic in commit order; other keys flow.
The held set lives in the outbox database and survives restarts, kill -9
and promotions."""

import json
import subprocess
import time

import pytest

from conftest import UNSET
from harness import free_port, header, wait_until
from test_failover import both_hosts, pair  # noqa: F401 (a fixture)
from test_faults import make_topic, nullable_outbox, scrape, wait_streaming
from test_ops import http_get

DECODERS = ("wal2json",)


class Keys:
    """Rows of one aggregate type into a nullable outbox table, each with
    an id telling its key and its place: "<key>-<n>"."""

    def __init__(self, pg, table, agg):
        self.pg = pg
        self.table = table
        self.agg = agg
        self.n = {}

    def row(self, key, bad=False, payload=None):
        """Commits one row of key; bad: headers that are not an object (a
        bad event with a key and a topic). Returns its id."""
        self.n[key] = self.n.get(key, 0) + 1
        eid = "%s-%d" % (key, self.n[key])
        self.pg.sql("INSERT INTO %s (id, aggregate_type, aggregate_id, "
                    "event_type, payload, headers) VALUES (%%s, %%s, %%s, "
                    "'held.x', %%s::jsonb, %%s::jsonb)" % self.table,
                    (eid, self.agg, key,
                     payload if payload is not None else json.dumps({"n": eid}),
                     "[1, 2]" if bad else None))
        return eid

    def many(self, key, n):
        """Commits n rows of key in one transaction; returns their ids."""
        ids = []
        rows = []
        for _ in range(n):
            self.n[key] = self.n.get(key, 0) + 1
            eid = "%s-%d" % (key, self.n[key])
            ids.append(eid)
            rows.append((eid, self.agg, key, json.dumps({"n": eid})))
        conn = self.pg.connect()
        with conn, conn.cursor() as cur:
            import psycopg2.extras
            psycopg2.extras.execute_values(
                cur, "INSERT INTO %s (id, aggregate_type, aggregate_id, "
                "event_type, payload) VALUES %%s" % self.table,
                [(e, a, k, "held.x", p) for e, a, k, p in rows],
                template="(%s, %s, %s, %s, %s::jsonb)")
        conn.close()
        return ids


def ids_by_key(records):
    """{key: [ids in the order they arrived]}."""
    out = {}
    for r in records:
        out.setdefault(r["key"], []).append(header(r, "id").decode())
    return out


def first_occurrences_in_order(got, expected):
    """Every expected id arrived, and their first arrivals are in
    expected's order (a release replayed after a crash may repeat a
    suffix, never put a later event first)."""
    firsts = []
    for eid in got:
        if eid not in firsts:
            firsts.append(eid)
    assert firsts == expected, (firsts, expected)


def hold_config(table, port=None, **outbox):
    o = {"table": table, "on_bad_event": "hold_key"}
    o.update(outbox)
    cfg = {"outbox": o}
    if port is not None:
        cfg["http"] = {"listen": "127.0.0.1:%d" % port}
    return cfg


def held_rows(pg, slot):
    return pg.sql("SELECT count(*) FROM public.outboxd_held_events WHERE "
                  "slot_name = %s", (slot,))[0][0]


@pytest.mark.decoders("wal2json", "pgoutput")
def test_bad_event_holds_its_key_until_released(pg, broker, consumer,
                                                outboxd_factory, slot_name,
                                                test_id):
    """Key A's third event is bad: A's fourth and fifth go to the
    dead-letter topic held behind it (header held_behind = its id), key B's
    five flow; the hold survives a restart (A's sixth is held too); `dlq
    list` shows it; `dlq release A` publishes A's fourth to sixth to A's
    topic after its second, skipping the bad one, and A's next event
    follows them; the tables are empty then."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "hold_%s" % test_id
    topic = make_topic(broker, agg)
    port = free_port()
    d = outboxd_factory(hold_config(table, port))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 4)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    for i in range(5):
        k.row(a, bad=(i == 2))
        k.row(b)

    got = ids_by_key(consumer.collect([topic], 7, timeout=30))
    assert got == {a: [a + "-1", a + "-2"],
                   b: ["%s-%d" % (b, i) for i in range(1, 6)]}, got
    dead = consumer.collect([dlq], 3, timeout=30)
    assert [header(r, "id").decode() for r in dead] == \
        [a + "-3", a + "-4", a + "-5"], dead
    assert header(dead[0], "held_behind") is None
    assert header(dead[0], "original-topic") == topic.encode()
    for r in dead[1:]:
        assert header(r, "held_behind") == (a + "-3").encode(), r["headers"]
        assert r["key"] == a and header(r, "original-topic") == topic.encode()
    wait_until(lambda: scrape(port).get("outboxd_held_keys") == 1 and
               scrape(port).get("outboxd_held_events") == 2, 10, 0.2,
               "held gauges")
    # (17+ adds a failover line before it.)
    code, body = http_get(port, "/readyz")
    assert code == 200 and body.splitlines()[0] == "ready" and \
        body.splitlines()[-1] == "held-keys 1", (code, body)
    rc, out, err = d.run_cmd(["dlq", "list"])
    assert rc == 0, out + err
    assert "held keys: 1" in out and a in out and "held events  2" in out, out
    rc, out, err = d.run_cmd(["check"])
    assert "1 keys held, 2 events behind them" in out, out + err

    d.stop()
    d = outboxd_factory(hold_config(table, port))
    wait_streaming(pg, slot_name)
    k.row(a)
    k.row(b)
    more = consumer.collect([dlq], 4, timeout=30)
    assert [header(r, "id").decode() for r in more][-1] == a + "-6", more
    assert ids_by_key(consumer.collect([topic], 8, timeout=30))[b][-1] == \
        b + "-6"

    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    k.row(a)
    got = ids_by_key(consumer.collect([topic], 12, timeout=30))
    assert got == {a: [a + "-%d" % i for i in (1, 2, 4, 5, 6, 7)],
                   b: ["%s-%d" % (b, i) for i in range(1, 7)]}, got
    wait_until(lambda: scrape(port).get("outboxd_held_keys") == 0, 10, 0.2)
    assert held_rows(pg, slot_name) == 0
    assert d.running(), d.log_tail()


def test_release_of_a_key_not_held_exits_1(pg, broker, outboxd_factory,
                                           slot_name, test_id):
    table = nullable_outbox(pg, "obx_%s" % test_id)
    d = outboxd_factory(hold_config(table))
    wait_streaming(pg, slot_name)
    rc, out, err = d.run_cmd(["dlq", "release", "nobody"])
    assert rc == 1 and "is not held" in out + err, out + err


def test_refused_record_holds_its_key_and_a_failed_release_keeps_it(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A record the client refuses (3 MB, past message.max.bytes) holds its
    key too. A release that includes it is refused again: the key stays
    held, `dlq list` says why, the command exits 1. Released without it,
    the held events follow in order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "big_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 4)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    k.row(a)
    k.row(a, payload=json.dumps({"blob": "x" * (3 * 1024 * 1024)}))
    k.row(a)
    k.row(a)
    dead = consumer.collect([dlq], 3, timeout=30)
    assert [header(r, "id").decode() for r in dead] == \
        [a + "-2", a + "-3", a + "-4"], dead
    assert header(dead[0], "payload-size") is not None
    assert header(dead[1], "held_behind") == (a + "-2").encode()

    rc, out, err = d.run_cmd(["dlq", "release", "--include-failed", a])
    assert rc == 1 and "could not release" in out + err, out + err
    rc, out, _ = d.run_cmd(["dlq", "list"])
    assert "held keys: 1" in out and "release      failed" in out, out
    assert d.running(), d.log_tail()

    rc, out, err = d.run_cmd(["dlq", "release", a, "--topic", topic])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 3, timeout=30))
    assert got == {a: [a + "-1", a + "-3", a + "-4"]}, got


def test_kill9_during_a_release_loses_and_reorders_nothing(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """2,500 events held behind a bad one (three chunks of a release), then
    the release: killed right after its first chunk was acknowledged and
    before it was deleted. Started again, the release goes on by itself:
    every held event reaches the topic, their first arrivals in commit
    order (the chunk in flight may come twice), and the key's next event
    after them."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "kill_%s" % test_id
    topic = make_topic(broker, agg)
    env = {"OUTBOXD_TEST_CRASH_AT": "release-published"}
    d = outboxd_factory(hold_config(table), env=env)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    held = k.many(a, 2500)
    wait_until(lambda: held_rows(pg, slot_name) == 2501, 60, 0.2,
               "the held events written")
    asking = subprocess.Popen([d.binary, "dlq", "release", a, "-c",
                               d.config_path], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        assert d.wait(30) == -9, d.log_tail()  # right after the first chunk
    finally:
        asking.kill()
        asking.wait()
    # Its first chunk (the bad event and 999 held ones) was published, not
    # deleted.
    assert held_rows(pg, slot_name) == 2501
    assert len(consumer.collect([topic], 1000, timeout=30, settle=0.5)) == 1000
    d = outboxd_factory(hold_config(table))
    wait_until(lambda: held_rows(pg, slot_name) == 0, 60, 0.2,
               "the release finished")
    last = k.row(a)
    got = ids_by_key(consumer.collect([topic], 2503, timeout=60))[a]
    assert got[0] == first and got[-1] == last, (got[:3], got[-3:])
    first_occurrences_in_order(got, [first] + held + [last])
    assert len(got) <= 2502 + 1000, len(got)
    assert d.running(), d.log_tail()


def test_past_hold_max_keys_it_halts(pg, broker, consumer, outboxd_factory,
                                    slot_name, test_id):
    """outbox.hold_max_keys = 1: a second key's bad event stops outboxd
    (exit 1) without confirming it; started again it stops again there."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "max_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory(hold_config(table, hold_max_keys=1))
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    k.row("A", bad=True)
    k.row("B", bad=True)
    assert d.wait(30) == 1, d.log_tail()
    assert "outbox.hold_max_keys (1) keys are held" in d.log_text()
    d = outboxd_factory(hold_config(table, hold_max_keys=1))
    assert d.wait(30) == 1, d.log_tail()


def test_broker_refusal_holds_its_key_and_release_can_include_it(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker refuses A's first record (INVALID_TIMESTAMP, twice: with
    its batch, then alone): it is dead-lettered and A held; A's next two
    are held, B flows. Once the cause is gone, `dlq release
    --include-failed A` publishes the refused record first, then the held
    ones, in commit order."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "brk_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a, b = "A-%s" % test_id, "B-%s" % test_id
    assert broker.cmd("error 0 INVALID_TIMESTAMP 2") == "ok"
    k.row(a)
    dead = consumer.collect([dlq], 1, timeout=30, settle=0.5)
    assert [header(r, "id").decode() for r in dead] == [a + "-1"], dead
    k.row(a)
    k.row(b)
    k.row(a)
    dead = consumer.collect([dlq], 3, timeout=30)
    assert [(header(r, "id").decode(), header(r, "held_behind"))
            for r in dead] == [(a + "-1", None),
                               (a + "-2", (a + "-1").encode()),
                               (a + "-3", (a + "-1").encode())], dead
    assert ids_by_key(consumer.collect([topic], 1, timeout=30)) == \
        {b: [b + "-1"]}
    rc, out, err = d.run_cmd(["dlq", "release", "--include-failed", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 4, timeout=30))
    assert got == {a: [a + "-1", a + "-2", a + "-3"], b: [b + "-1"]}, got


def test_held_keys_survive_a_promotion(pair, broker, consumer,
                                       outboxd_factory, test_id, slot_name):
    """A key held on the primary is held on its promoted standby: the held
    tables travel with physical replication. After the primary's kill -9
    and the promotion, the same outboxd recovers its slot there (15 and
    16: from the outbox table), A's next event is held too, and a release
    on the new primary publishes A's held events after A's first, in
    commit order."""
    primary, standby = pair
    agg = "pro_%s" % test_id
    topic = make_topic(broker, agg)
    table = nullable_outbox(primary, "obx_%s" % test_id)
    d = outboxd_factory({"postgres": {"conninfo": both_hosts(primary,
                                                             standby)},
                         "outbox": {"table": table,
                                    "on_bad_event": "hold_key",
                                    "message_prefix": UNSET}},
                        env={"OUTBOXD_TEST_RECPOINT_MS": "1000"})
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    d.wait_log(r"streaming from slot", 40)
    k = Keys(primary, table, agg)
    a = "A-%s" % test_id
    first = k.row(a)
    k.row(a, bad=True)
    held = [k.row(a)]
    dead = consumer.collect([dlq], 2, timeout=30)
    assert [header(r, "id").decode() for r in dead] == \
        [a + "-2", a + "-3"], dead
    wait_until(lambda: held_rows(standby, slot_name) == 2, 30, 0.2,
               "the held events on the standby")
    time.sleep(2)  # a recovery point past them
    primary.kill9()
    standby.promote()
    k.pg = standby
    wait_until(lambda: k.pg.sql("SELECT NOT pg_is_in_recovery()")[0][0],
               30, 0.2, "the promotion")
    held.append(k.row(a))
    wait_until(lambda: held_rows(standby, slot_name) >= 3, 90, 0.5,
               "A's next event held on the new primary")
    assert d.running(), d.log_tail()
    rc, out, err = d.run_cmd(["dlq", "release", a])
    assert rc == 0, out + err
    got = ids_by_key(consumer.collect([topic], 3, timeout=30))[a]
    first_occurrences_in_order(got, [first] + held)
    assert held_rows(standby, slot_name) == 0


def test_past_hold_max_events_it_halts(pg, broker, consumer, outboxd_factory,
                                      slot_name, test_id):
    """outbox.hold_max_events = 2: the third event held behind A's bad one
    stops outboxd (exit 1) without confirming it; the two held before it
    stay held."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "maxe_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory(hold_config(table, hold_max_events=2))
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    k.row("A", bad=True)
    k.row("A")
    k.row("A")
    wait_until(lambda: held_rows(pg, slot_name) == 3, 30, 0.2,
               "two events held")
    k.row("A")
    assert d.wait(30) == 1, d.log_tail()
    assert "outbox.hold_max_events (2) events are held" in d.log_text()
    assert held_rows(pg, slot_name) == 3


def test_hold_key_on_a_hot_standby_exits_1(pair, broker, outboxd_factory,
                                          test_id):
    """A hot standby cannot write the held keys: with hold_key, outboxd
    pointed at one exits 1 naming the choices, before making a slot."""
    primary, standby = pair
    table = nullable_outbox(primary, "obx_%s" % test_id)
    wait_until(lambda: standby.sql(
        "SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0], 30, 0.2,
        "the table on the standby")
    d = outboxd_factory({"postgres": {"conninfo": standby.conninfo()},
                         "outbox": {"table": table,
                                    "on_bad_event": "hold_key"}})
    assert d.wait(30) == 1, d.log_tail()
    assert "this server is a hot standby" in d.log_text(), d.log_tail()


def test_refused_then_taken_after_a_halt_holds_nothing(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker refuses A's first record with its batch, alone, and then
    its dead letter too: outboxd exits 1 without confirming, and without
    writing the hold, which stands behind a dead letter never published.
    Started again, the broker takes the record: A is not held, and both of
    A's events reach A's topic (fault checker seed 3000010: the hold was
    written, and the record, taken, went to the dead-letter topic held
    behind itself; before that, its row kept the failed mark and the
    release skipped it)."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "ref_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    a = "A-%s" % test_id
    assert broker.cmd("error 0 INVALID_RECORD 3") == "ok"
    first = k.row(a)
    assert d.wait(60) == 1, d.log_tail()
    assert "could not publish dead-letter record" in d.log_text(), d.log_tail()
    assert held_rows(pg, slot_name) == 0
    d = outboxd_factory(hold_config(table))
    wait_streaming(pg, slot_name)
    second = k.row(a)
    got = ids_by_key(consumer.collect([topic], 2, timeout=30))
    assert got == {a: [first, second]}, got
    assert held_rows(pg, slot_name) == 0


def test_events_before_the_failed_one_read_again_are_not_held(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """One transaction: A-1, A-2, A-3 (bad), A-4. The broker refuses the
    batch of A-1 and A-2: the producer is made anew and the transaction
    read again, with A held by then. A-1 and A-2 come before the place A is
    held from, so they go to A's topic, not behind A-3 (the fault checker
    saw events before a key's failure held after such a re-read)."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "pre_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(hold_config(table))
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, 1)
    wait_streaming(pg, slot_name)
    a = "A-%s" % test_id
    assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
    conn = pg.connect()
    with conn, conn.cursor() as cur:
        for i in range(1, 5):
            cur.execute("INSERT INTO %s (id, aggregate_type, aggregate_id, "
                        "event_type, payload, headers) VALUES (%%s, %%s, %%s, "
                        "'held.x', '{}'::jsonb, %%s::jsonb)" % table,
                        ("%s-%d" % (a, i), agg, a, "[1]" if i == 3 else None))
    conn.close()
    wait_until(lambda: "recreating the kafka producer" in d.log_text(), 30,
               0.1, "the refused batch")
    got = ids_by_key(consumer.collect([topic], 2, timeout=30))
    first_occurrences_in_order(got[a], [a + "-1", a + "-2"])  # maybe twice
    dead = consumer.collect([dlq], 2, timeout=30)
    held = [header(r, "id").decode() for r in dead
            if header(r, "held_behind") is not None]
    assert set(held) == {a + "-4"}, dead
    rc, out, _ = d.run_cmd(["dlq", "list"])
    assert "held events  1" in out, out
