"""Broker errors against real parts: a ProduceRequest the broker refuses
as a whole (its records are only suspects, produced again alone), records
and dead-letter records larger than message.max.bytes, and topics the
broker does not know or does not let outboxd write to (transient: the
producer is recreated and the slot read again, nothing is dead-lettered).

Every scenario counts each published `id` header and checks the
dead-letter topic, which each test creates itself so that an empty one can
be read."""

import collections
import json
import threading
import time

import pytest

import harness
from harness import header, int_to_lsn, lsn_to_int, wait_until
from test_faults import (PARTITIONS, RECREATED, Feed, Writer, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         confirmed, emit, http_get, make_topic,
                         nullable_outbox, probe, scrape,  # noqa: F401
                         wait_confirmed, wait_streaming)

ALONE = "alone: the broker refused the batch it was in"
DEAD_LETTERED = "dead-lettering record"


# ---------------------------------------------------------------------------
# helpers


def with_http(overrides=None):
    """overrides plus http.listen on a free port; returns (overrides,
    port)."""
    port = harness.free_port()
    out = {k: dict(v) for k, v in (overrides or {}).items()}
    out.setdefault("http", {})["listen"] = "127.0.0.1:%d" % port
    return out, port


def dlq_topic(broker, d):
    """Creates the daemon's dead-letter topic (so that an empty one can be
    read) and returns its name."""
    name = d.config["outbox"]["dlq_topic"]
    broker.create_topic(name, PARTITIONS)
    return name


def assert_nothing_dead_lettered(consumer, dlq, d, port):
    """The dead-letter topic is empty, no dead-letter record was counted
    and the log names none."""
    dead = consumer.collect([dlq], 0, timeout=10, settle=2.0)
    assert dead == [], "%d dead-letter records, e.g. headers %s" % (
        len(dead), dead[0]["headers"])
    counted = {k: v for k, v in scrape(port).items()
               if k.startswith("outboxd_events_dead_lettered_total") and v}
    assert not counted, counted
    assert DEAD_LETTERED not in d.log_text(), d.log_tail()


def dead_letter_counts(port):
    """{reason: count} of outboxd_events_dead_lettered_total, the reasons
    counted at least once (every known reason is exported from the start,
    at 0)."""
    out = {}
    for k, v in scrape(port).items():
        if k.startswith("outboxd_events_dead_lettered_total{") and v:
            out[k.split('reason="', 1)[1].split('"', 1)[0]] = v
    return out


class ReadyzWatch(threading.Thread):
    """Polls /readyz every 50 ms until stopped; keeps every distinct
    (status, body) seen."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.seen = collections.Counter()
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            status, body = http_get(self.port, "/readyz")
            self.seen[(status, body.strip())] += 1
            self._halt.wait(0.05)

    def saw(self, status, body):
        return self.seen[(status, body)] > 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self.join(10)
        return False


def burst(feeds, txns, rows):
    """Commits txns transactions of rows rows for each feed, back to back
    (interleaving the feeds), so that the producer batches them."""
    for _ in range(txns):
        for f in feeds:
            f.commit(rows)


# ---------------------------------------------------------------------------
# 1. a whole ProduceRequest refused


@pytest.mark.parametrize("code", ["MSG_SIZE_TOO_LARGE", "INVALID_RECORD"])
def test_batch_refused_as_a_whole_retries_suspects_alone(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, code):
    """The broker answers one ProduceRequest of a burst of small events
    with an error that may be one record's own: every record of that batch
    is only a suspect. The producer is recreated, the slot read again and
    each suspect produced alone, where the broker takes it. Every event
    arrives in its own topic, per key first in commit order; nothing is
    dead-lettered."""
    feeds = [Feed(pg, "batch%d_%s" % (i, test_id), keys=5) for i in range(2)]
    topics = [make_topic(broker, f.agg) for f in feeds]
    overrides, port = with_http()
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    # Warm up: the producer has its id and both topics' leaders, so the
    # next ProduceRequest carries the burst.
    burst(feeds, 1, 2)
    for f, t in zip(feeds, topics):
        check_delivery(collect_all(consumer, t, f.ids), f.ids, True)

    assert broker.cmd("error 0 %s 1" % code) == "ok"
    burst(feeds, 4, 50)
    end = pg.wal_lsn()
    for f, t in zip(feeds, topics):
        records = collect_all(consumer, t, f.ids)
        check_delivery(records, f.ids, exactly_once=False)
        check_first_deliveries_in_commit_order(records, f)
    wait_confirmed(pg, slot_name, end, timeout=30)

    log = d.log_text()
    assert RECREATED in log, d.log_tail()
    alone = log.count(ALONE)
    assert alone >= 2, (
        "%d events retried alone; the refused batch held more than one "
        "record:\n%s" % (alone, d.log_tail()))
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()


def test_unknown_server_error_on_a_batch_is_transient(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """UNKNOWN_SERVER_ERROR on one ProduceRequest of a burst is the
    cluster's fault, not a record's: the producer is recreated and the slot
    read again; every event arrives, per key first deliveries follow commit
    order (nothing queued behind the failed request was written before it
    was published again; this once failed in a CI run) and nothing is
    dead-lettered."""
    feed = Feed(pg, "unkerr_%s" % test_id, keys=5)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http()
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)

    # Kafka's UNKNOWN_SERVER_ERROR (-1) is librdkafka's UNKNOWN.
    assert broker.cmd("error 0 UNKNOWN 1") == "ok"
    burst([feed], 4, 50)
    end = pg.wal_lsn()
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert "delivery failed" in d.log_text(), d.log_tail()
    assert RECREATED in d.log_text(), d.log_tail()
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()


def test_failed_request_with_requests_in_flight_keeps_key_order(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker answers slowly (300 ms) while a writer commits small
    transactions every 10 ms, so several ProduceRequests are in flight when
    one of them fails (UNKNOWN, three times): nothing queued behind the failed request
    is written before its records are published again, so per key first
    deliveries follow commit order. Without librdkafka's gapless guarantee
    the requests behind it are written first (deploy/README.md "Delivery
    guarantees" once had this as its one exception)."""
    feed = Feed(pg, "inflight_%s" % test_id, keys=3)
    topic = make_topic(broker, feed.agg)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)

    assert broker.cmd("rtt all 300") == "ok"
    try:
        with Writer(feed, rows=3, pause=0.01) as w:
            for failed in (1, 2, 3):
                w.wait_txns(30)
                assert broker.cmd("error 0 UNKNOWN 1") == "ok"
                wait_until(lambda: d.log_text().count(RECREATED) >= failed, 60,
                           0.05, "the producer was recreated %d times" % failed)
            w.wait_txns(30)
    finally:
        broker.cmd("rtt all 0")
    records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    assert RECREATED in d.log_text(), d.log_tail()
    assert d.running(), d.log_tail()


def test_refused_batch_with_batches_of_its_key_behind_keeps_key_order(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker refuses a batch (INVALID_RECORD) while more batches of
    the same key are queued behind it (batch.num.messages = 5, one
    transaction of 40 rows of one key): nothing behind the refused batch
    is written before its records are published again, so first
    deliveries follow commit order, and nothing is dead-lettered (the
    suspects delivered alone are good). Without librdkafka's gapless
    guarantee the batches behind it were written first: [6..10, 1..5, ...]."""
    feed = Feed(pg, "fresh_%s" % test_id, keys=1)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"kafka": {"batch.num.messages": "5"}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
    feed.commit(40)
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()


# ---------------------------------------------------------------------------
# 2. records larger than message.max.bytes


MAX_BYTES = 100000


def test_too_large_records_and_dead_letters_keep_streaming(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """kafka message.max.bytes = 100000. A good event with a 200 kB
    payload is dead-lettered without its value. A bad event with a 200 kB
    payload (a logical message without aggregate_type, an outbox row with
    a NULL aggregate_type) makes a dead-letter record that does not fit
    either: it is published headers only (error, source-lsn, payload-size,
    id, key; no value). The events after them arrive once, the slot is
    confirmed past them, and a restart streams on (no exit 1, no second
    dead-letter record)."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    feed = Feed(pg, "big_%s" % test_id, table=table)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"outbox": {"table": table},
                                 "kafka": {"message.max.bytes":
                                           str(MAX_BYTES)}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    start = pg.wal_lsn()

    blob = "y" * (2 * MAX_BYTES)
    payload = {"blob": blob}
    text = json.dumps(payload)  # as the message and the row carry it

    def row(id_, agg, key):
        return lambda cur: cur.execute(
            "INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, "
            "payload) VALUES (%%s, %%s, %%s, 'big.x', %%s::jsonb)" % table,
            (id_, agg, key, text))

    ids = {"good": "good-%s" % test_id, "msg": "msg-%s" % test_id,
           "nulltopic": "nulltopic-%s" % test_id}
    feed.commit(5)
    feed.commit(3, row(ids["good"], feed.agg, "k-good"))
    feed.commit(3, emit(True, {"id": ids["msg"], "aggregate_id": "k-msg",
                               "event_type": "big.x", "payload": payload}))
    feed.commit(3, row(ids["nulltopic"], None, "k-nulltopic"))
    feed.commit(5)
    end = pg.wal_lsn()

    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    dead = consumer.collect([dlq], 3, timeout=30, settle=1.5)
    by_id = {}
    for r in dead:
        hid = (header(r, "id") or b"<no id>").decode()
        assert hid not in by_id, "two dead-letter records for %s" % hid
        by_id[hid] = r
    assert sorted(by_id) == sorted(ids.values()), [r["headers"] for r in dead]
    sizes = {
        "good": pg.sql("SELECT octet_length(payload::text) FROM %s WHERE "
                       "id = %%s" % table, (ids["good"],))[0][0],
        # the payload member's JSON text, as written in the message
        "msg": len(text),
        "nulltopic": pg.sql("SELECT octet_length(payload::text) FROM %s "
                            "WHERE id = %%s" % table,
                            (ids["nulltopic"],))[0][0],
    }
    for tag, word in (("good", "too large"), ("msg", "aggregate_type"),
                      ("nulltopic", "aggregate_type")):
        r = by_id[ids[tag]]
        assert r["value"] is None, (tag, len(r["value"]))
        assert r["key"] == "k-%s" % tag, (tag, r["key"])
        assert word in header(r, "error").decode(), (tag, r["headers"])
        src = lsn_to_int(header(r, "source-lsn").decode())
        assert start <= src <= end, (tag, int_to_lsn(src), r["headers"])
        assert header(r, "payload-size") == str(sizes[tag]).encode(), (
            tag, sizes[tag], r["headers"])
    assert d.log_text().count("publishing its headers only") == 2, (
        d.log_tail())
    wait_until(lambda: dead_letter_counts(port) == {
        "too-large": 1, "missing-topic-column": 2}, 10, 0.3,
        "dead-letter counters by reason (are %s)" % dead_letter_counts(port))
    wait_confirmed(pg, slot_name, end, timeout=20)
    assert d.running(), d.log_tail()

    # The slot is past the bad events: a restart does not meet them again.
    assert d.stop() == 0, d.log_tail()
    mark = d.log_size()
    d.start()
    d.wait_log("streaming from slot", 30, since=mark)
    feed.commit(5)
    end = pg.wal_lsn()
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    wait_confirmed(pg, slot_name, end, timeout=20)
    again = consumer.collect([dlq], 3, timeout=10, settle=1.5)
    assert len(again) == 3, [r["headers"] for r in again]
    assert d.running(), d.log_tail()
    assert DEAD_LETTERED not in d.log_text()[mark:], d.log_tail()


# ---------------------------------------------------------------------------
# 3. unknown and unauthorized topics


def test_unknown_topic_waits_then_delivers(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, probe):
    """Events for a topic the broker does not know: the producer is
    recreated and the slot read again with a growing pause (/readyz 503
    kafka-down), nothing is confirmed past them and nothing is
    dead-lettered. Once the topic exists, every event arrives once, per key
    in commit order."""
    feed = Feed(pg, "late_%s" % test_id, keys=5)
    topic = "outbox.event.%s" % feed.agg
    # The metadata of the topic says it does not exist (as a real broker
    # with auto-creation off); librdkafka waits this long before it
    # believes that.
    overrides, port = with_http({"kafka": {
        "topic.metadata.propagation.max.ms": "200"}})
    assert broker.cmd("topicerr %s UNKNOWN_TOPIC_OR_PART" % topic) == "ok"
    try:
        d = outboxd_factory(overrides)
        dlq = dlq_topic(broker, d)
        wait_streaming(pg, slot_name)
        p = probe()
        with ReadyzWatch(port) as watch:
            burst([feed], 3, 20)
            first_end = wait_until(p.commits, 15, 0.1,
                                   "the first commit")[0][1]
            d.wait_log(r"kafka producer failed again; retrying in", 20)
            started = time.monotonic()
            while time.monotonic() - started < 5:
                assert confirmed(pg, slot_name) < first_end, (
                    "slot confirmed %s while the topic is unknown; the "
                    "first transaction ends at %s"
                    % (pg.slot(slot_name)["confirmed_flush_lsn"],
                       int_to_lsn(first_end)))
                assert d.running(), d.log_tail()
                time.sleep(0.2)
            assert watch.saw(503, "kafka-down"), dict(watch.seen)
            assert_nothing_dead_lettered(consumer, dlq, d, port)
    finally:
        broker.cmd("topicerr %s 0" % topic)
    end = p.commits()[-1][1]
    records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=True)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, end, timeout=30)
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 15, 0.2,
               "/readyz 200 once the topic exists")
    assert RECREATED in d.log_text(), d.log_tail()
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()


def test_topic_authorization_failed_is_transient(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, probe):
    """The broker answers ProduceRequests with TOPIC_AUTHORIZATION_FAILED
    for a while (an ACL being fixed): the producer is recreated and the
    slot read again with a growing pause (/readyz 503 kafka-down), nothing
    is dead-lettered; once the errors stop, every event arrives, per key
    first in commit order, and the slot is confirmed past them."""
    feed = Feed(pg, "acl_%s" % test_id, keys=5)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http()
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    p = probe()

    assert broker.cmd("error 0 TOPIC_AUTHORIZATION_FAILED 16") == "ok"
    with ReadyzWatch(port) as watch:
        burst([feed], 3, 20)
        end = wait_until(lambda: len(p.commits()) >= 3 and p.commits(), 15,
                         0.1, "three commits")[-1][1]
        d.wait_log(r"kafka producer failed again; retrying in", 30)
        records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert watch.saw(503, "kafka-down"), dict(watch.seen)
    log = d.log_text()
    assert "authoriz" in log.lower(), d.log_tail()
    assert RECREATED in log, d.log_tail()
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()
