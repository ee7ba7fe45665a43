"""Attacks on the slot recovery (deploy/README.md, "Recovering from a lost
or invalidated slot") with faults test_slot_recovery.py does not inject:
rows of events not yet published deleted in ways the table's statistics
do not show at the recovery, a recovery whose backlog the broker refuses
a batch of, the new slot dropped again right after a recovery, a recovery
with pgoutput, two processes recovering one slot at once, SIGTERM during a
recovery.

A recovery must publish every event not yet published, or halt (exit 1)
saying why the table cannot prove it; never go on without some.

Each test runs on a cluster of its own (the deleted-rows check reads the
table's statistics)."""

import re
import time

import psycopg2

from harness import wait_until
from test_faults import (check_delivery, collect_all, expect_exit, id_counts,
                         make_topic, wait_streaming)
from test_slot_recovery import (INTERVAL, RECOVERED, recoveries, report, start,
                                streaming)

HALTED = "cannot be recovered"


def recovered_or_halted(d, timeout=90):
    """Waits until outboxd d either recovered its slot ("recovered") or
    exited ("exit N")."""
    pat = re.compile(RECOVERED)

    def look():
        if pat.search(d.log_text()):
            return "recovered"
        if not d.running():
            return "exit %d" % d.wait(5)
        return None
    return wait_until(look, timeout, 0.2, "outboxd recovered or exited")


def unpublished(c, d, broker, feed, n):
    """n events committed while the broker is down, so never acknowledged,
    then outboxd killed (kill -9) and the broker up again: their ids."""
    assert broker.cmd("down all") == "ok"
    ids = feed.commit(n)
    time.sleep(INTERVAL + 1)
    d.kill9()
    assert broker.cmd("up all") == "ok"
    return ids


def lost_if_recovered(d, consumer, topic, feed, gone):
    """After a recovery that should have halted: how many of the events
    gone (their rows deleted before it) never reached the broker."""
    recs = collect_all(consumer, topic, feed.ids, timeout=20)
    counts = id_counts(recs)
    return sum(1 for i in gone if counts[i] == 0)


def expect_halt(c, d, consumer, topic, feed, gone, slot, *needles):
    """outboxd d must exit 1 saying the slot cannot be recovered (and
    needles), creating no slot: the rows of gone were deleted, so a
    recovery from the table alone cannot publish them."""
    outcome = recovered_or_halted(d)
    if outcome == "recovered":
        lost = lost_if_recovered(d, consumer, topic, feed, gone)
        raise AssertionError("the slot was recovered although rows of %d events not yet "
                             "published were deleted: %d events lost" % (len(gone), lost))
    assert outcome == "exit 1", d.log_tail()
    expect_exit(d, 1, HALTED, *needles)
    assert c.slot(slot) is None


def test_deletes_a_session_has_not_reported_halt(own_cluster, broker, consumer,
                                                 outboxd_factory, slot_name, test_id):
    """A cleanup job deletes rows of events not yet published, and its
    session goes on in a transaction: a backend reports its statistics
    at most once a second, and not at all while in a transaction block,
    so n_tup_del does not show the deletes when the slot is recovered.
    The recovery must not go on without those events."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ap_%s" % test_id, 10)
    job = c.connect()
    try:
        gone = unpublished(c, d, broker, feed, 5)
        job.autocommit = True
        cur = job.cursor()
        cur.execute("SELECT 1")
        cur.execute("DELETE FROM public.outbox WHERE id = ANY(%s::uuid[])", (gone,))
        job.autocommit = False
        cur.execute("SELECT 1")  # idle in transaction: its statistics wait
        c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "deleted")
    finally:
        job.close()
        feed.close()


def test_deletes_hidden_by_a_statistics_reset_halt(own_cluster, broker, consumer,
                                                   outboxd_factory, slot_name, test_id):
    """Rows of events not yet published deleted, then the statistics reset
    (pg_stat_reset(), as monitoring jobs do): n_tup_del starts again from
    0, below the count stored with the point. The recovery must halt
    rather than take the unknown count for none."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ar_%s" % test_id, 10)
    try:
        gone = unpublished(c, d, broker, feed, 5)
        c.sql("DELETE FROM public.outbox WHERE id = ANY(%s::uuid[])", (gone,))
        wait_until(lambda: c.sql("SELECT n_tup_del FROM pg_stat_user_tables WHERE "
                                 "relid = 'public.outbox'::regclass")[0][0] >= 5,
                   20, 0.2, "the deletes counted")
        c.sql("SELECT pg_stat_reset()")
        c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "statistics")
    finally:
        feed.close()


def test_truncate_halts(own_cluster, broker, consumer, outboxd_factory, slot_name,
                        test_id):
    """TRUNCATE of the outbox table (a cleanup job's faster DELETE) takes
    rows of events not yet published, and n_tup_del does not count it.
    The recovery must not go on without those events."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "at_%s" % test_id, 10)
    try:
        gone = unpublished(c, d, broker, feed, 5)
        c.sql("TRUNCATE public.outbox")
        c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name)
    finally:
        feed.close()
