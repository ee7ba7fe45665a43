"""Positions at the seams between units the stream hands over (deploy/README.md,
"Delivery guarantees"): a standalone logical message whose record ends
exactly where the next transaction's commit record starts.

Defects kept here:
- pgoutput named such a message and the transaction after it alike, and
  skipped the whole transaction as "already handed to the producer": its
  rows were never published, and the slot was confirmed past them.
- Both decoders confirmed one byte past such a message once it was
  dead-lettered; with the next transaction's events still in flight, a
  restart then never received that transaction again: its events were
  lost.
"""

from harness import lsn_to_int, wait_until
from test_faults import (Feed, check_delivery, collect_all, make_topic,
                         wait_confirmed, wait_streaming)

DECODERS = ("wal2json", "pgoutput")


def emit(cur, prefix, content):
    """A non-transactional logical message, written at once."""
    cur.execute("SELECT pg_logical_emit_message(false, %s, %s)",
                (prefix, content))


def test_rows_after_a_standalone_message_are_published(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, decoder):
    """Transactions whose COMMIT directly follows a non-transactional
    message (of another prefix, or of the outbox prefix: a bad event),
    emitted by the writing session or by another session between the
    INSERT and the COMMIT: every row is published exactly once, and the
    slot is confirmed to the end."""
    agg = "pm_%s" % test_id
    topic = make_topic(broker, agg)
    outboxd_factory()
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    other = pg.connect()
    other.autocommit = True
    try:
        for i in range(12):
            prefix = ("other", "outbox")[i % 2]
            if i % 4 < 2:
                ids = feed.commit(2, after=lambda cur, p=prefix: emit(cur, p, "x"))
            else:
                ids = feed.commit(
                    2, after=lambda cur, p=prefix: emit(other.cursor(), p, "hb"))
            assert ids
            feed.commit(1)
    finally:
        other.close()
        feed.close()
    recs = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(recs, feed.ids, exactly_once=True)
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=30)


def test_dead_lettered_message_does_not_confirm_the_next_transaction(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, decoder):
    """A standalone outbox-prefix message (a bad event, dead-lettered at
    once) right before a transaction whose events the broker cannot take
    yet: the slot is never confirmed past that transaction's commit, so
    after kill -9 and a restart its events are published."""
    agg = "pd_%s" % test_id
    topic = make_topic(broker, agg)
    dlq = "%s.outbox.dlq" % test_id
    broker.create_topic(dlq, 1)
    for p in range(4):
        assert broker.cmd("leader %s %d 1" % (topic, p)) == "ok"
    assert broker.cmd("leader %s 0 2" % dlq) == "ok"
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    feed.commit(1)
    collect_all(consumer, topic, feed.ids, timeout=30)
    assert broker.cmd("down 1") == "ok"
    marks = []

    def bad_event(cur):
        cur.execute("SELECT pg_logical_emit_message(false, 'outbox', "
                    "'not an event')")
        marks.append(lsn_to_int(cur.fetchone()[0]))
    try:
        assert feed.commit(3, after=bad_event)
        d.wait_log(r"bad event", timeout=20)
        # The dead letter is acknowledged and confirmed meanwhile; the
        # transaction's events wait for broker 1.
        wait_until(lambda: pg.slot(slot_name)["confirmed_flush_lsn_int"]
                   >= marks[0], 30, 0.1, "the dead letter confirmed")
        d.kill9()
    finally:
        feed.close()
        assert broker.cmd("up 1") == "ok"
    d2 = outboxd_factory()
    recs = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(recs, feed.ids, exactly_once=False)
    assert d2.running(), d2.log_tail()
