"""Attacks on the slot recovery (deploy/README.md, "Recovering from a lost
or invalidated slot") with faults test_slot_recovery.py does not inject:
rows of events not yet published deleted in ways the table's statistics
do not show at the recovery, a recovery whose backlog the broker refuses
a batch of, the new slot dropped again right after a recovery, a recovery
with pgoutput, two processes recovering one slot at once, SIGTERM during a
recovery.

A recovery must publish every event not yet published, or halt (exit 1)
saying why the table cannot prove it; never go on without some.

A statistics reset (pg_stat_reset()), TRUNCATE and deletes made while
the recovery's temporary slot waited for its snapshot lost events; the
recovery now halts on them, as on a partition dropped or detached, or
the table dropped and made again, since the point (their rows leave no
count behind), and on deletes a session had not reported to the
statistics yet when the recovery began. One attack still loses events
and is not a test here (deploy/README.md says so): deletes of a session
that stays inside transaction blocks, which reports them only once idle.

Each test runs on a cluster of its own (the deleted-rows check reads the
table's statistics)."""

import re
import time

import psycopg2
import pytest

from harness import wait_until
from test_faults import (check_delivery, collect_all, expect_exit, id_counts,
                         make_topic, wait_streaming)
from test_slot_recovery import (INTERVAL, RECOVERED, drop_slot, recoveries, report,
                                start, streaming)

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


def delete_counted(c, table, leaf, ids):
    """Deletes the rows of ids from public.table, and waits until the
    statistics count them in its leaf public.leaf."""
    c.sql("DELETE FROM public.%s WHERE id = ANY(%%s::uuid[])" % table, (ids,))
    wait_until(lambda: c.sql("SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = "
                             "'public.%s'::regclass" % leaf)[0][0] >= len(ids),
               20, 0.2, "the deletes counted")


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
        delete_counted(c, "outbox", "outbox", gone)
        c.sql("SELECT pg_stat_reset()")
        drop_slot(c, slot_name)
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "statistics")
    finally:
        feed.close()


def test_deletes_not_reported_yet_halt(own_cluster, broker, consumer, outboxd_factory,
                                      slot_name, test_id):
    """Rows of events not yet published deleted by a session whose
    statistics wait to be reported: a backend that reported less than a
    second before holds its counts back, for up to 10 s while it stays
    idle. A recovery that starts at once judges the table before the
    count arrives; it must still halt."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "au_%s" % test_id, 10)
    conn = None
    try:
        gone = unpublished(c, d, broker, feed, 5)
        drop_slot(c, slot_name)
        conn = c.connect()
        with conn.cursor() as cur:
            # The first statement's counts are reported as the session goes
            # idle; the second's, within a second of it, are held back.
            cur.execute("DELETE FROM public.outbox WHERE id IS NULL")
            cur.execute("DELETE FROM public.outbox WHERE id = ANY(%s::uuid[])", (gone,))
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "5 rows")
    finally:
        if conn is not None:
            conn.close()
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
        drop_slot(c, slot_name)
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name)
    finally:
        feed.close()


def temporary_slot(c):
    rows = c.sql("SELECT slot_name FROM pg_replication_slots WHERE temporary")
    return rows[0][0] if rows else None


def test_temporary_slot_invalidated_during_the_recovery(own_cluster, broker, consumer,
                                                       outboxd_factory, slot_name,
                                                       test_id):
    """The recovery of an invalidated slot (max_slot_wal_keep_size) takes
    a while (the broker acknowledges slowly) while the application goes on
    writing WAL: the recovery's own temporary slot is invalidated before
    it is copied into the permanent one. The copy of an invalidated slot
    fails; outboxd must publish the backlog again from a new temporary
    slot and make the slot, not retry the copy for ever. (On 15 the
    checkpointer terminates the walsender that holds the temporary slot,
    which drops it.)"""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "av_%s" % test_id, 5, max_slot_wal_keep_size="'1MB'")
    try:
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        for _ in range(4):
            feed.commit(500)
        assert broker.cmd("rtt all 400") == "ok"
        d.start()
        d.wait_log(r"publishing the backlog: ", 60)
        tmp = wait_until(lambda: temporary_slot(c), 30, 0.05, "the temporary slot")
        c.sql("CREATE TABLE IF NOT EXISTS filler (t text)")

        def lost():
            c.sql("INSERT INTO filler SELECT repeat(md5(g::text), 8) "
                  "FROM generate_series(1, 25000) g")
            c.sql("SELECT pg_switch_wal()")
            c.sql("CHECKPOINT")
            s = c.slot(tmp)
            # Held by its walsender, which the checkpointer terminates:
            # a temporary slot is then dropped, not left invalidated.
            return s is None or s["wal_status"] == "lost"
        wait_until(lost, 120, 0, "temporary slot %s invalidated" % tmp)
        assert broker.cmd("rtt all 0") == "ok"
        d.wait_log(RECOVERED, 60)
        wait_streaming(c, slot_name)
        feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=60)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("temporary slot invalidated", feed.ids, recs)
    finally:
        feed.close()


def test_restart_with_create_slot_off_recovers(own_cluster, broker, consumer,
                                               outboxd_factory, slot_name, test_id):
    """postgres.create_slot = false (slots made by `outboxd slot create`)
    and the default on_slot_lost = recover: a slot dropped while outboxd
    is stopped is recovered by the next start, as it is in a running
    process (the recovery makes the slot whatever create_slot says), not
    refused as a slot never made."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ac_%s" % test_id, 5)
    try:
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        feed.commit(5)
        d2 = start(c, outboxd_factory, postgres_create_slot=False)
        assert recovered_or_halted(d2) == "recovered", d2.log_tail()
        wait_streaming(c, slot_name)
        recs = collect_all(consumer, topic, feed.ids, timeout=60)
        check_delivery(recs, feed.ids, exactly_once=False)
    finally:
        feed.close()


def drop_under(c, slot):
    """Drops slot under the outboxd streaming from it (its walsender
    terminated first, again until the drop wins the race)."""
    def dropped():
        c.sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
              "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
        try:
            c.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
            return True
        except psycopg2.Error:
            return False
    wait_until(dropped, 30, 0.01, "slot %s dropped" % slot)


def partitioned(own_cluster, broker, outboxd_factory, slot_name, test_id, prefix):
    """A cluster of the test's own with a partitioned outbox table
    (test_partitions.make_table: a partition for now, one for day 0 of
    2100), outboxd streaming it and 10 events published, the point past
    them: (cluster, table name, topic, outboxd, feed)."""
    from test_partitions import make_table
    c = own_cluster()
    name = "pobx"
    table = make_table(c, name)
    agg = "%s_%s" % (prefix, test_id)
    topic = make_topic(broker, agg)
    d = start(c, outboxd_factory, outbox_table=table, outbox_timestamp_column="")
    wait_streaming(c, slot_name)
    from test_faults import Feed
    from test_recovery_point import wait_point_past
    feed = Feed(c, agg, table=table)
    ids = feed.commit(10)
    xids = c.sql("SELECT xmin::text::bigint FROM %s WHERE id = ANY(%%s::uuid[])" % table,
                 (ids,))
    wait_point_past(c, slot_name, max(x for (x,) in xids))
    return c, name, topic, d, feed


def test_partitioned_outbox_recovered(own_cluster, broker, consumer, outboxd_factory,
                                      slot_name, test_id):
    """A partitioned outbox table: the slot dropped under a running outboxd
    with rows in two partitions, one created while no slot exists; the
    recovery publishes them all, and the new stream reads a partition
    created after it."""
    from test_partitions import into_day
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pp")
    try:
        drop_under(c, slot_name)
        feed.commit(5, before=into_day(0))
        feed.commit(5, before=into_day(1, create=name))
        feed.commit(5)
        d.wait_log(RECOVERED, 90)
        wait_streaming(c, slot_name)
        feed.commit(5, before=into_day(2, create=name))
        feed.commit(5, before=into_day(1))
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("partitioned", feed.ids, recs)
    finally:
        feed.close()


def recovered_all(d, consumer, topic, feed, name):
    """outboxd d recovers its slot, and every event of feed reaches the
    broker (some twice): reported as name."""
    d.wait_log(RECOVERED, 90)
    recs = collect_all(consumer, topic, feed.ids, timeout=90)
    check_delivery(recs, feed.ids, exactly_once=False)
    report(name, feed.ids, recs)


def unpublished_in_day0(c, d, broker, feed, slot):
    """5 events committed into the partition of day 0 while the broker is
    down, then outboxd killed (kill -9), the broker up and the slot
    dropped: their ids."""
    from test_partitions import into_day
    assert broker.cmd("down all") == "ok"
    ids = feed.commit(5, before=into_day(0))
    time.sleep(INTERVAL + 1)
    d.kill9()
    assert broker.cmd("up all") == "ok"
    drop_slot(c, slot)
    return ids


@pytest.mark.parametrize("how", ["drop", "detach"])
def test_dropped_or_detached_partition_halts(own_cluster, broker, consumer, outboxd_factory,
                                             slot_name, test_id, how):
    """A partition holding rows of events not yet published dropped (a
    pg_partman retention too short for the outage) or detached while no
    slot exists: its rows leave no count of deleted rows behind, and a
    detached one's are in a table a recovery does not read. The recovery
    must halt, naming it, rather than go on without them."""
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "p" + how[:2])
    try:
        gone = unpublished_in_day0(c, d, broker, feed, slot_name)
        oid = c.sql("SELECT 'public.%s_d0'::regclass::oid" % name)[0][0]
        if how == "drop":
            c.sql("DROP TABLE public.%s_d0" % name)
            named = "oid %d" % oid
        else:
            c.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_d0" % (name, name))
            named = "public.%s_d0 (detached, with rows past the point)" % name
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name,
                    "(%s) were dropped or detached" % named)
    finally:
        feed.close()


def test_partition_of_published_rows_detached_in_an_outage_is_no_loss(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """A partition whose rows were all published detached, and kept (as
    pg_partman's retention does by default), while the broker is down and
    after the last stored point; then the slot lost. Its rows lie before
    the point, so the recovery goes on and publishes every event."""
    from test_partitions import into_day
    from test_recovery_point import wait_point_past
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pa")
    try:
        ids = feed.commit(5, before=into_day(0))
        xids = c.sql("SELECT xmin::text::bigint FROM public.%s WHERE id = ANY(%%s::uuid[])"
                     % name, (ids,))
        wait_point_past(c, slot_name, max(x for (x,) in xids))
        assert broker.cmd("down all") == "ok"
        c.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_d0" % (name, name))
        feed.commit(5)
        time.sleep(INTERVAL + 1)
        d.kill9()
        assert broker.cmd("up all") == "ok"
        drop_slot(c, slot_name)
        d.start()
        recovered_all(d, consumer, topic, feed, "published partition detached in an outage")
    finally:
        feed.close()


def test_outbox_dropped_and_made_again_halts(own_cluster, broker, consumer, outboxd_factory,
                                             slot_name, test_id):
    """The outbox table dropped and made again (a migration gone wrong)
    while no slot exists: the new table's storage is its first, so it
    looks neither truncated nor rewritten, and its rows were never
    counted as deleted. The recovery halts."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ad_%s" % test_id, 10)
    try:
        gone = unpublished(c, d, broker, feed, 5)
        drop_slot(c, slot_name)
        c.sql("CREATE TABLE public.outbox_new (LIKE public.outbox INCLUDING ALL); "
              "DROP TABLE public.outbox; ALTER TABLE public.outbox_new RENAME TO outbox")
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "dropped or detached")
    finally:
        feed.close()


def test_partition_dropped_while_streaming_is_no_loss(own_cluster, broker, consumer,
                                                      outboxd_factory, slot_name, test_id):
    """A partition of published rows dropped while outboxd streams (a
    retention by partitions that keeps up): a later point no longer holds
    it, and a slot lost afterwards is recovered."""
    from test_partitions import into_day
    from test_recovery_point import wait_point_past
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pk")
    try:
        feed.commit(5, before=into_day(0))
        # One implicit transaction: the id is the drop's.
        xid = c.sql("DROP TABLE public.%s_d0; SELECT pg_current_xact_id()::text::bigint"
                    % name)[0][0]
        wait_point_past(c, slot_name, xid)
        drop_under(c, slot_name)
        feed.commit(5)
        recovered_all(d, consumer, topic, feed, "partition dropped while streaming")
    finally:
        feed.close()


def this_run(d):
    """The log of outboxd d since it was last started."""
    return d.log_text().rsplit("=== start", 1)[-1]


def dropped_while_stopped(c, d, slot, feed, rows, txns=1):
    """outboxd d stopped (SIGTERM), its slot dropped, then txns
    transactions of rows events each committed while no slot exists."""
    assert d.stop() == 0, d.log_tail()
    drop_slot(c, slot)
    for _ in range(txns):
        feed.commit(rows)


def test_pgoutput_slot_dropped_under_outboxd_is_recovered(own_cluster, broker, consumer,
                                                          outboxd_factory, slot_name,
                                                          test_id):
    """postgres.plugin = pgoutput: the slot dropped under a running outboxd
    with events in flight (the broker slow), then written while no slot
    exists: the same process recovers a pgoutput slot (its publication
    made by outboxd) and every event is published, the first deliveries
    of each key in commit order."""
    from test_faults import check_first_deliveries_in_commit_order
    from test_faults import Feed
    from test_recovery_point import row_xids, wait_point_past
    c = own_cluster()
    topic = make_topic(broker, "ag_%s" % test_id)
    d = start(c, outboxd_factory, postgres_plugin="pgoutput")
    wait_streaming(c, slot_name)
    feed = Feed(c, "ag_%s" % test_id)
    try:
        wait_point_past(c, slot_name, max(row_xids(c, feed.commit(10))))
        assert broker.cmd("rtt all 300") == "ok"
        feed.commit(20)
        drop_under(c, slot_name)
        feed.commit(10)
        assert broker.cmd("rtt all 0") == "ok"
        m = d.wait_log(RECOVERED, 90)
        assert "with plugin pgoutput at" in d.log_text()
        assert c.slot(slot_name)["plugin"] == "pgoutput"
        wait_streaming(c, slot_name)
        feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        check_first_deliveries_in_commit_order(recs, feed)
        report("pgoutput", feed.ids, recs)
        assert int(m.group(1)) >= 10
    finally:
        feed.close()


def test_broker_refuses_a_batch_of_the_recovery(own_cluster, broker, consumer,
                                                outboxd_factory, slot_name, test_id):
    """The broker refuses a produce request of the recovery's backlog (and
    the sequence check the requests behind it): the producer is recreated,
    the recovery publishes its backlog again from a new temporary slot,
    the suspects alone, and makes the slot; nothing dead-lettered, every
    event published, the first deliveries of each key in commit order."""
    from test_faults import check_first_deliveries_in_commit_order
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ab_%s" % test_id, 5)
    try:
        dropped_while_stopped(c, d, slot_name, feed, 500, txns=3)
        assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
        d.start()
        d.wait_log(RECOVERED, 90)
        wait_streaming(c, slot_name)
        feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        check_first_deliveries_in_commit_order(recs, feed)
        report("batch refused in the recovery", feed.ids, recs)
        assert "recreating the kafka producer" in d.log_text()
        assert "dead-lettering" not in d.log_text()
    finally:
        feed.close()


def test_two_processes_recover_one_slot_at_once(own_cluster, broker, consumer,
                                                outboxd_factory, slot_name, test_id):
    """Two outboxd processes for one slot start together after it was
    dropped: both may publish the rows, one makes the slot and streams, the
    other waits as a standby (neither exits, nor makes a second slot), and
    takes over when the first is killed; every event is published."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "a2_%s" % test_id, 5)
    try:
        dropped_while_stopped(c, d, slot_name, feed, 500, txns=2)
        d2 = start(c, outboxd_factory)
        d.start()
        wait_streaming(c, slot_name, timeout=90)
        assert d.running() and d2.running(), d.log_tail() + d2.log_tail()
        assert re.search(RECOVERED, d.log_text() + d2.log_text())
        assert len(c.sql("SELECT 1 FROM pg_replication_slots")) == 1
        active = c.slot(slot_name)["active_pid"]
        streams = [x for x in (d, d2) if "streaming from slot" in this_run(x)]
        assert len(streams) == 1, [this_run(x)[-3000:] for x in (d, d2)]
        first, other = (d, d2) if streams[0] is d else (d2, d)
        feed.commit(5)
        first.kill9()
        wait_streaming(c, slot_name, timeout=60, other_than=active)
        feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("two processes", feed.ids, recs)
        assert other.running()
    finally:
        feed.close()


def test_dropped_again_after_a_recovery(own_cluster, broker, consumer, outboxd_factory,
                                        slot_name, test_id):
    """The slot dropped under a running outboxd, recovered, and dropped
    again at once, before the new stream stored a point of its own: the
    same process recovers twice, from the point stored before, and every
    event is published."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "a3_%s" % test_id, 5)
    try:
        drop_under(c, slot_name)
        feed.commit(5)
        d.wait_log(RECOVERED, 60)
        wait_streaming(c, slot_name)
        drop_under(c, slot_name)
        feed.commit(5)
        wait_until(lambda: len(re.findall(RECOVERED, d.log_text())) == 2 or None, 60, 0.2,
                   "a second recovery")
        wait_streaming(c, slot_name)
        feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("dropped twice", feed.ids, recs)
        assert recoveries(port, "missing") == 2
    finally:
        feed.close()


def test_sigterm_during_a_recovery(own_cluster, broker, consumer, outboxd_factory,
                                   slot_name, test_id):
    """SIGTERM while a recovery's backlog waits for the broker, which comes
    back while the shutdown flushes: outboxd exits 0 leaving no slot (its
    temporary one goes with its connection), and the next start recovers
    again from the same point."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "as_%s" % test_id, 5)
    try:
        dropped_while_stopped(c, d, slot_name, feed, 500, txns=4)
        assert broker.cmd("down all") == "ok"
        d.start()
        d.wait_log(r"publishing the backlog: ", 60)
        time.sleep(1)
        d.terminate()
        time.sleep(1)
        # The broker back while the shutdown flushes: the backlog is
        # acknowledged, but the slot is made only by a recovery that ran
        # to its end.
        assert broker.cmd("up all") == "ok"
        assert d.wait(40) == 0, d.log_tail()
        assert c.sql("SELECT count(*) FROM pg_replication_slots")[0][0] == 0
        d.start()
        wait_until(lambda: len(re.findall(RECOVERED, d.log_text())) == 1 or None, 90, 0.2,
                   "the recovery")
        wait_streaming(c, slot_name)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        report("SIGTERM during the recovery", feed.ids, recs)
    finally:
        feed.close()


def test_a_candidate_older_than_a_statistics_reset_is_not_stored(
        own_cluster, broker, outboxd_factory, slot_name, test_id):
    """A candidate taken, then the statistics reset while it waits for the
    broker (its count of deletes no longer compares with the ones after
    the reset): it is not stored; a candidate taken after the reset is, so
    `check` says a recovery would be complete again."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "aq_%s" % test_id, 5)
    try:
        assert broker.cmd("down all") == "ok"
        feed.commit(1)
        time.sleep(3 * INTERVAL)  # a candidate past that event waits
        c.sql("SELECT pg_stat_reset()")
        assert broker.cmd("up all") == "ok"
        d.wait_log(r"the statistics were reset after recovery point candidate \d+ was "
                   r"taken: taking another", 60)
        wait_until(lambda: c.sql(
            "SELECT recovery_at > (SELECT stats_reset FROM pg_stat_database WHERE "
            "datname = current_database()) FROM public.outboxd_slots")[0][0] or None,
            30, 0.5, "a point stored after the reset")
        rc, out, _ = d.run_cmd(["check"])
        assert "a recovery now would be complete" in out, out
    finally:
        feed.close()


def test_recovery_ignores_the_files_backlog_where(own_cluster, broker, consumer,
                                                  outboxd_factory, slot_name, test_id):
    """outbox.backlog_where left in the file after a migration (here one
    that selects nothing): a start after the slot was lost runs the
    migration's cutover path first, and must recover with the rows past
    the point, not publish the file's predicate's rows and make the
    slot."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "aw_%s" % test_id, 5)
    try:
        dropped_while_stopped(c, d, slot_name, feed, 5, txns=2)
        d2 = start(c, outboxd_factory, outbox_backlog_where="false")
        assert recovered_or_halted(d2) == "recovered", d2.log_tail()
        wait_streaming(c, slot_name)
        recs = collect_all(consumer, topic, feed.ids, timeout=60)
        check_delivery(recs, feed.ids, exactly_once=False)
    finally:
        feed.close()


def test_deletes_while_the_recovery_waits_for_its_snapshot_halt(own_cluster, broker, consumer,
                                                                outboxd_factory, slot_name,
                                                                test_id):
    """The recovery judged the table (no rows deleted), then its temporary
    slot waits for a running transaction to end before it exports its
    snapshot; meanwhile a job deletes rows of events not yet published
    (and its session ends, so the statistics count them). The snapshot no
    longer holds them: the recovery must not make the slot without them."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "aj_%s" % test_id, 10)
    blocker = c.connect()
    try:
        gone = unpublished(c, d, broker, feed, 5)
        c.sql("CREATE TABLE held (i int)")
        blocker.autocommit = False
        blocker.cursor().execute("INSERT INTO held VALUES (1)")  # holds an xid
        drop_slot(c, slot_name)
        d.start()
        d.wait_log(r"still waiting for the server.*running transactions", 30)
        delete_counted(c, "outbox", "outbox", gone)
        blocker.rollback()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "deleted")
    finally:
        blocker.close()
        feed.close()


def test_a_huge_row_in_the_recovery_is_dead_lettered(own_cluster, broker, consumer,
                                                     outboxd_factory, slot_name, test_id):
    """A 3 MB outbox row among the rows a recovery publishes: the producer
    refuses it as too large, and it becomes a dead-letter record, as in
    the stream; the rows around it are published and the recovery makes
    the slot."""
    from harness import header
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "ah_%s" % test_id, 5)
    try:
        assert d.stop() == 0, d.log_tail()
        drop_slot(c, slot_name)
        dlq = "%s.outbox.dlq" % test_id
        broker.create_topic(dlq)
        feed.commit(3)
        big = []

        def huge(cur):
            cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                        "event_type, payload) VALUES (gen_random_uuid(), %s, 'big', 'x', "
                        "jsonb_build_object('pad', repeat('x', 3000000))) RETURNING id::text",
                        (feed.agg,))
            big.append(cur.fetchone()[0])
        feed.commit(3, before=huge)
        d.start()
        d.wait_log(RECOVERED, 90)
        wait_streaming(c, slot_name)
        recs = collect_all(consumer, topic, feed.ids, timeout=60)
        check_delivery(recs, feed.ids, exactly_once=False)
        dead = consumer.collect([dlq], 1, timeout=30, settle=1.5)
        assert [header(r, "id") for r in dead] == [big[0].encode()], dead
    finally:
        feed.close()


def test_deletes_then_detach_halt(own_cluster, broker, consumer, outboxd_factory, slot_name,
                                  test_id):
    """Rows of events not yet published deleted from a partition, which is
    then detached (empty: nothing past the point to find in it): its
    deletes must still count, though it is no leaf any more."""
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pe")
    try:
        gone = unpublished_in_day0(c, d, broker, feed, slot_name)
        delete_counted(c, name, name + "_d0", gone)
        c.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_d0" % (name, name))
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "5 rows")
    finally:
        feed.close()


def test_detached_then_truncated_halts(own_cluster, broker, consumer, outboxd_factory,
                                       slot_name, test_id):
    """A partition detached with rows of events not yet published, then
    truncated (archived elsewhere, say): a TRUNCATE counts as no deleted
    row, and the detached table now holds nothing past the point."""
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pu")
    try:
        gone = unpublished_in_day0(c, d, broker, feed, slot_name)
        c.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_d0" % (name, name))
        c.sql("TRUNCATE public.%s_d0" % name)
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name, "truncated")
    finally:
        feed.close()


def test_detach_left_pending_halts(own_cluster, broker, consumer, outboxd_factory, slot_name,
                                   test_id):
    """DETACH PARTITION CONCURRENTLY cancelled in its second phase leaves
    the partition pending: still in the partition tree, no longer read by
    a scan of the table. With rows of events not yet published in it, the
    recovery must halt as for a detached one."""
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pp")
    holder = c.connect()
    try:
        gone = unpublished_in_day0(c, d, broker, feed, slot_name)
        holder.autocommit = False
        with holder.cursor() as cur:
            cur.execute("SELECT 1 FROM public.%s LIMIT 1" % name)
        detacher = c.connect()
        try:
            with detacher.cursor() as cur:
                cur.execute("SET statement_timeout = '2s'")
                cur.execute("ALTER TABLE public.%s DETACH PARTITION public.%s_d0 "
                            "CONCURRENTLY" % (name, name))
            raise AssertionError("the detach did not wait for the open transaction")
        except psycopg2.extensions.QueryCanceledError:
            pass
        finally:
            detacher.close()
        holder.rollback()
        assert c.sql("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = "
                     "'public.%s_d0'::regclass" % name) == [(True,)]
        d.start()
        expect_halt(c, d, consumer, topic, feed, gone, slot_name,
                    "public.%s_d0 (detached, with rows past the point)" % name)
    finally:
        holder.close()
        feed.close()


def test_deletes_note_cleared_with_its_count(own_cluster, broker, consumer, outboxd_factory,
                                             slot_name, test_id):
    """A cleanup job deleted published rows once (the note is set); the
    operator stops it and clears the note with its count, as the README
    and the halt say: the note stays clear, `check` says a recovery would
    be complete, and a slot lost afterwards is recovered."""
    c, topic, d, port, feed = streaming(own_cluster, broker, outboxd_factory, slot_name,
                                        "an_%s" % test_id, 10)
    try:
        c.sql("DELETE FROM public.outbox WHERE id = %s::uuid", (feed.ids[0],))
        wait_until(lambda: c.sql("SELECT deletes_seen_at IS NOT NULL FROM "
                                 "public.outboxd_slots") == [(True,)], 60, 0.5,
                   "the deletes noted")
        c.sql("UPDATE public.outboxd_slots SET deletes_seen_at = NULL, deletes_counted = NULL")
        feed.commit(2)
        wait_until(lambda: c.sql("SELECT deletes_counted IS NOT NULL FROM "
                                 "public.outboxd_slots") == [(True,)], 30, 0.5,
                   "a point stored since")
        feed.commit(2)
        time.sleep(3 * INTERVAL + 1)
        assert c.sql("SELECT deletes_seen_at FROM public.outboxd_slots") == [(None,)]
        rc, out, _ = d.run_cmd(["check"])
        assert "a recovery now would be complete" in out, out
        drop_under(c, slot_name)
        feed.commit(5)
        recovered_all(d, consumer, topic, feed, "deletes note cleared")
    finally:
        feed.close()


def test_a_lock_on_a_detached_partition_does_not_stall_a_stop(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """A partition detached with rows past the point, and an open
    transaction holding an ACCESS EXCLUSIVE lock on it (an ALTER, a VACUUM
    FULL of the archive): the recovery's look at it waits, but not for
    ever: SIGTERM ends outboxd within the harness's 40 s."""
    c, name, topic, d, feed = partitioned(own_cluster, broker, outboxd_factory, slot_name,
                                          test_id, "pl")
    holder = c.connect()
    try:
        unpublished_in_day0(c, d, broker, feed, slot_name)
        c.sql("ALTER TABLE public.%s DETACH PARTITION public.%s_d0" % (name, name))
        holder.autocommit = False
        with holder.cursor() as cur:
            cur.execute("LOCK public.%s_d0 IN ACCESS EXCLUSIVE MODE" % name)
        d.start()
        wait_until(lambda: c.sql("SELECT count(*) FROM pg_locks WHERE NOT granted AND "
                                 "relation = 'public.%s_d0'::regclass" % name)[0][0] > 0,
                   30, 0.2, "the recovery waiting for the lock")
        assert d.stop() == 0, d.log_tail()
    finally:
        holder.close()
        feed.close()
