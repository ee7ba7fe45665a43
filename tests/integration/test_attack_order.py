"""Per-key order around suspects produced alone: faults the other files
do not inject, each checking per key that first deliveries follow commit
order, that nothing is lost, that no good event is dead-lettered and that
the slot moves on.

Found by an attack on the gapless producer: a replication connection cut
while a suspect was in flight in the client for records produced alone
let the main client write the events after it first (the stream-cut
tests failed 13 of 13 and 8 of 10 runs before the fix)."""

import time

from harness import header, wait_until
from test_broker_errors import ALONE, assert_nothing_dead_lettered, dlq_topic, with_http
from test_faults import (Feed, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         make_topic, nullable_outbox, wait_confirmed,
                         wait_streaming)


def warm(consumer, feed, topic):
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)


def test_refused_batch_holding_dead_letters_of_bad_events(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """Transactions mix good events with bad ones (NULL aggregate_id... a
    NULL key on a nullable outbox table): their dead-letter records ride in
    the batch the broker refuses (INVALID_RECORD). Each bad event is
    dead-lettered (at least once), no good event is, every good event
    arrives and first deliveries keep commit order."""
    table = nullable_outbox(pg, "nb_%s" % test_id)
    feed = Feed(pg, "nb_%s" % test_id, keys=2, table=table)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"outbox": {"table": table}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    warm(consumer, feed, topic)
    bad_ids = []

    def bad(cur):
        for _ in range(3):
            i = "bad-%d-%s" % (len(bad_ids), test_id)
            bad_ids.append(i)
            cur.execute("INSERT INTO %s (id, aggregate_type, aggregate_id, "
                        "event_type, payload) VALUES (%%s, NULL, 'x', 'e', "
                        "'{}')" % table, (i,))

    assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
    for _ in range(5):
        feed.commit(10, before=bad, after=bad)
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    dead = consumer.collect([dlq], len(bad_ids), timeout=30, settle=2.0)
    dead_ids = {(header(r, "id") or b"").decode() for r in dead}
    assert set(bad_ids) <= dead_ids, (sorted(set(bad_ids) - dead_ids),
                                      d.log_tail())
    good_dead = dead_ids & set(feed.ids)
    assert not good_dead, (sorted(good_dead)[:5], d.log_tail())
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=30)
    assert d.running(), d.log_tail()


def cut_stream_while_alone(pg, d, feed, slot_name):
    """Commits one row, which the broker is set to refuse, waits until
    outboxd produces it alone, then terminates the walsender and commits
    five more transactions of the same key."""
    n = d.log_text().count(ALONE)
    feed.commit(1)
    wait_until(lambda: d.log_text().count(ALONE) > n, 60, 0.005, "alone")
    pid = pg.slot(slot_name)["active_pid"]
    pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
    for _ in range(5):
        feed.commit(2)
        time.sleep(0.05)


def check_order_after_cut(pg, consumer, d, dlq, port, feed, topic, slot_name):
    """Everything arrived, first deliveries in commit order, the slot
    confirmed to the end, nothing dead-lettered, the daemon running."""
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=60)
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()


def test_stream_cut_while_suspect_is_in_flight_alone(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A batch of one key is refused (INVALID_RECORD), so its record is a
    suspect produced alone; the broker then answers NOT_ENOUGH_REPLICAS
    (retriable) to the next requests, so the record produced alone stays
    in flight, and meanwhile the replication connection is cut
    (pg_terminate_backend). publish_alone() gives up on settle() with
    OUTCOME_LOST and clears `isolating` while the record is still in the
    second client; the next stream handed the events after it to the main
    client, which wrote them first. Per key, first deliveries follow commit
    order."""
    feed = Feed(pg, "cut_%s" % test_id, keys=1)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"postgres": {"status_interval_ms": 100}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    warm(consumer, feed, topic)
    assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
    # Five retriable refusals keep the record produced alone in flight
    # (with 3, 4, 6 or 30 the timing let the old code pass).
    assert broker.cmd("error 0 NOT_ENOUGH_REPLICAS 5") == "ok"
    cut_stream_while_alone(pg, d, feed, slot_name)
    check_order_after_cut(pg, consumer, d, dlq, port, feed, topic, slot_name)


def test_stream_cut_while_suspect_alone_on_slow_broker(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """As test_stream_cut_while_suspect_is_in_flight_alone, with no error
    but the one INVALID_RECORD: the broker is slow (rtt 300 ms), so the
    second client (fresh: versions, metadata, producer id, then the record)
    takes several round trips to write the suspect while the main client,
    after the replication connection is cut and re-made, writes the events
    after it in one."""
    feed = Feed(pg, "cuts_%s" % test_id, keys=1)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"postgres": {"status_interval_ms": 100}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    warm(consumer, feed, topic)
    assert broker.cmd("rtt all 300") == "ok"
    try:
        feed.commit(1)  # the main client warm at the slow pace too
        wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=30)
        assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
        cut_stream_while_alone(pg, d, feed, slot_name)
        time.sleep(3)
    finally:
        broker.cmd("rtt all 0")
    check_order_after_cut(pg, consumer, d, dlq, port, feed, topic, slot_name)


def test_refused_batch_while_the_producer_queue_is_full(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A producer queue of 20 kB (message.max.bytes 10000) and a burst of
    2,000 rows of three keys: outboxd waits for queue room (the WAL is not
    read meanwhile) when the broker refuses a batch. The producer fails
    with records still waiting for room; the relay must leave that wait,
    recreate the producer and publish everything, per key in commit order,
    with nothing dead-lettered."""
    feed = Feed(pg, "qfull_%s" % test_id, keys=3)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http({"kafka": {"message.max.bytes": "10000",
                                           "queue.buffering.max.kbytes": "20"}})
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    warm(consumer, feed, topic)
    assert broker.cmd("rtt all 20") == "ok"
    try:
        assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
        for _ in range(10):
            feed.commit(200)
        wait_until(lambda: "recreating the kafka producer" in d.log_text(), 60,
                   0.05, "the producer was recreated")
    finally:
        broker.cmd("rtt all 0")
    records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=60)
    assert_nothing_dead_lettered(consumer, dlq, d, port)
    assert d.running(), d.log_tail()
