"""Attacks on the delivery guarantees with faults the other files do not
inject: batch errors under a steady stream of large transactions, and a
batch error while the replication stream is cut.

Every scenario counts each published `id` header and, where deploy/README.md
"Delivery guarantees" promises it, checks that first deliveries per key
follow commit order."""

import time

from harness import header, wait_until
from test_backlog import config, ids_where, insert_range, make_table
from test_broker_errors import burst, dlq_topic, with_http  # noqa: F401
from test_faults import (RECREATED, Feed, Writer, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         make_topic, wait_confirmed,  # noqa: F401
                         wait_streaming)


def no_suspect_left(pg, slot_name):
    """Waits until the slot is confirmed past every record written so far:
    a suspect of an earlier batch error holds the confirmed position back
    until it was produced alone, so none is left to be produced alone."""
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=60)


def fail_one_produce_request(broker, d, code):
    """Makes the broker fail its next ProduceRequest with code and waits
    until one did: a failed request always makes outboxd recreate its
    producer (error code UNKNOWN: a fresh producer gets past it;
    INVALID_RECORD on a batch: its records are suspects, read again and
    produced alone). Waiting keeps errors from piling up in the broker,
    where one could fail a later request that outboxd did not expect."""
    n = d.log_text().count(RECREATED)
    assert broker.cmd("error 0 %s 1" % code) == "ok"
    wait_until(lambda: d.log_text().count(RECREATED) > n, 60, 0.05,
               "a ProduceRequest failed with %s" % code)


def test_batch_errors_under_steady_load_lose_nothing(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A writer commits transactions of 500 rows over three keys back to
    back while the broker fails a whole ProduceRequest, six times: every
    event arrives, nothing is dead-lettered, the slot is confirmed past
    the writer and the daemon keeps running.

    An INVALID_RECORD must fail a batch, never a suspect produced alone:
    outboxd rightly takes an error a record gets alone as its own and
    dead-letters the record (deploy/README.md, "Delivery guarantees": a dead letter
    is a record's own fault), which is then missing from the topic. So
    each error is injected only once the one before failed a request, and
    an INVALID_RECORD only once no suspect is left to be produced alone;
    an UNKNOWN may still fail a suspect produced alone (the next producer
    produces it alone again).

    Per key, first deliveries follow commit order: nothing queued behind a
    failed batch is written before the failed batch's records are
    published again (this once failed under AddressSanitizer, before the
    producer kept librdkafka's gapless guarantee)."""
    feed = Feed(pg, "steady_%s" % test_id, keys=3)
    topic = make_topic(broker, feed.agg)
    d = outboxd_factory()
    dlq = dlq_topic(broker, d)
    wait_streaming(pg, slot_name)
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    # About 15,000 records: far below what the test broker keeps per
    # partition (5 MB or 100,000 batches).
    with Writer(feed, rows=500, pause=0.0) as w:
        for code in ("INVALID_RECORD", "UNKNOWN", "INVALID_RECORD",
                     "UNKNOWN", "INVALID_RECORD", "UNKNOWN"):
            w.wait_txns(2)
            if code == "INVALID_RECORD":
                no_suspect_left(pg, slot_name)
            fail_one_produce_request(broker, d, code)
            w.wait_txns(2)
    end = pg.wal_lsn()
    records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    assert RECREATED in d.log_text(), d.log_tail()
    assert "dead-lettering record" not in d.log_text(), d.log_tail()
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert consumer.collect([dlq], 0, timeout=10, settle=2.0) == []
    assert d.running(), d.log_tail()


# The test broker (librdkafka's mock cluster) does not set TCP_NODELAY on
# its connections: a response written in two pieces waits for the client's
# delayed ACK, so about half the suspects produced alone take 40-50 ms
# whatever outboxd does, and the run takes 2 or 18 s depending on that.
def test_batch_error_while_the_stream_is_cut(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The broker refuses a whole ProduceRequest (its answer slowed down so
    that the suspects are still unknown) while the walsender is terminated
    in the middle of a burst: the reconnect and the fresh producer combine,
    every event arrives, nothing is
    dead-lettered and the slot is confirmed past the burst."""
    feed = Feed(pg, "cut_%s" % test_id, keys=5)
    topic = make_topic(broker, feed.agg)
    overrides, port = with_http()
    d = outboxd_factory(overrides)
    dlq = dlq_topic(broker, d)
    pid = wait_streaming(pg, slot_name)
    feed.commit(2)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    broker.cmd("rtt all 300")
    assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
    try:
        burst([feed], 3, 100)
        pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
        burst([feed], 3, 100)
        time.sleep(1.0)
    finally:
        broker.cmd("rtt all 0")
    wait_streaming(pg, slot_name, 30, other_than=pid)
    end = pg.wal_lsn()
    records = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(records, feed.ids, exactly_once=False)
    # First deliveries per key: see the note of the test above.
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert consumer.collect([dlq], 0, timeout=10, settle=2.0) == []
    assert d.running(), d.log_tail()


def test_backlog_with_role_idle_timeouts_completes(
        pg, broker, consumer, outboxd_factory, test_id):
    """The role outboxd logs in as has idle_in_transaction_session_timeout
    and idle_session_timeout of 1 s (a DBA's guard against forgotten
    sessions), and the broker acknowledges slowly. The backlog keeps a
    transaction open (the cursor in the exported snapshot, and the
    temporary slot's walsender that exported it) for as long as it is
    published and acknowledged: it must still complete, every row once,
    and the stream take over."""
    role = "%s_role" % test_id
    pg.sql("CREATE ROLE %s LOGIN SUPERUSER REPLICATION" % role)
    pg.sql("ALTER ROLE %s SET idle_in_transaction_session_timeout = '1s'"
           % role)
    pg.sql("ALTER ROLE %s SET idle_session_timeout = '1s'" % role)
    try:
        table = make_table(pg, test_id)
        atype = test_id + "_order"
        topic = "outbox.event." + atype
        broker.create_topic(topic, partitions=4)
        insert_range(pg, table, atype, 1, 200)
        broker.cmd("rtt all 1500")
        cfg = config(table, "processed_on_utc IS NULL")
        cfg["postgres"] = {"conninfo": pg.conninfo(user=role)}
        try:
            d = outboxd_factory(cfg)
            # The temporary slot is copied only once every row is
            # acknowledged, seconds after the transaction went idle.
            d.wait_log(r"where the backlog ends", 40)
        finally:
            broker.cmd("rtt all 0")
        d.wait_log(r"streaming from slot", 20)
        insert_range(pg, table, atype, 201, 210, created="clock_timestamp()")
        want = ids_where(pg, table, "true")
        recs = consumer.collect(topic, len(want), timeout=40, settle=1.0)
        got = [header(r, "id").decode() for r in recs]
        assert set(got) == want
        assert len(got) == len(want), "published more than once: %d of %d" % (
            len(got) - len(want), len(want))
        assert "could not end the backlog's transaction" not in d.log_text()
        assert d.running(), d.log_tail()
    finally:
        pg.sql("DROP ROLE %s" % role)
