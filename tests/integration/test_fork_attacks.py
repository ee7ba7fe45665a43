"""Attacks on the newest changes (fork.c: the stream across a promotion;
slot create; outboxd's own kafka.message.timeout.ms): faults and
interleavings the other tests do not inject. Each test says what it
found."""

import os
import subprocess
import time

import psycopg2
import pytest

import harness

from harness import lsn_to_int, wait_until
from test_failover import (SnapshotNudger, copy_slot_files,
                           give_standby_the_slot, major, metric_value, pair,
                           start_on_pair, sync_ready, write_events)  # noqa: F401
from test_broker_errors import (
    test_expired_record_never_lets_a_later_one_of_its_key_go_first as
    expired_record_goes_first_never)
from test_faults import id_counts, make_topic

# Kills, outages and a past defect's timing: the plain pass only, on 15.
pytestmark = [pytest.mark.no_sanitizers, pytest.mark.no_version_matrix]


def cut_inside_t(pair, broker, slot_name, agg, before_commit=None):
    """A transaction T of 30,000 events of agg writes its rows while the
    standby streams; the standby stops (17+: with its synced copy of the
    slot; before: given the slot's files): it has every row of T, not its
    commit. before_commit(cursor) may write more into T; then, with the
    broker down, T commits, outboxd hands T's first events over until the
    producer queue is full, and the primary dies: outboxd is cut off
    inside T, below the switch point, T's commit past it. T's ids are
    md5('t' || n)::uuid (the same WAL every run)."""
    primary, standby = pair
    if major() >= 17:
        nudger = SnapshotNudger(primary)
        nudger.start()
        try:
            wait_until(lambda: sync_ready(standby, slot_name), 60, 0.2,
                       "the standby's copy of the slot is sync-ready")
        finally:
            nudger.halt()
    big = psycopg2.connect(primary.conninfo())
    try:
        with big.cursor() as cur:
            cur.execute("INSERT INTO public.outbox (id, aggregate_type, "
                        "aggregate_id, event_type, payload) SELECT "
                        "md5('t' || g)::uuid, %s, 'k' || (g %% 7), 'big', "
                        "jsonb_build_object('n', g, 'pad', repeat('x', 1000)) "
                        "FROM generate_series(1, 30000) g", (agg,))
        if major() < 17:
            primary.sql("CHECKPOINT")  # received by the standby too
        # The insert position: T's rows are not all written out yet.
        rows_end = lsn_to_int(primary.sql(
            "SELECT pg_current_wal_insert_lsn()")[0][0])
        wait_until(lambda: lsn_to_int(standby.sql(
            "SELECT pg_last_wal_replay_lsn()")[0][0]) >= rows_end, 60, 0.1,
            "the standby has T's rows")
        standby.stop("fast")
        if major() < 17:
            copy_slot_files(primary, standby, slot_name)
        if before_commit is not None:
            with big.cursor() as cur:
                before_commit(cur)
        broker.cmd("down all")
        try:
            big.commit()  # T's commit: past the switch point
            time.sleep(5)  # outboxd hands T over until the queue is full
            primary.kill9()
        finally:
            broker.cmd("up all")
    finally:
        big.close()


def test_fork_inside_a_transaction_cut_off_before_the_switch_point_counts_it(
        pair, broker, consumer, outboxd_factory, test_id, slot_name):  # noqa: F811
    """A big transaction T writes its rows while the standby streams, the
    standby stops (it has every row of T, not its commit), then T commits
    on the primary: T's changes lie before the switch point, its commit
    past it. The broker is down, so outboxd hands T's first events over
    until the producer queue is full and is cut off there when the
    primary dies: everything it read (received) lies below the switch
    point, but T is not in the new primary's history (its commit is not),
    and T's events reach the topic once the broker is back. They are
    events handed to Kafka from the old timeline past the switch point:
    outboxd_events_beyond_fork_total must count them."""
    primary, standby = pair
    agg = "cut_%s" % test_id
    d, topic, port, warm = start_on_pair(pair, broker, consumer,
                                         outboxd_factory, agg)
    cut_inside_t(pair, broker, slot_name, agg)
    standby.start()
    standby.promote()
    fresh = write_events(standby, agg, 20, prefix="fresh")
    wait_until(lambda: set(warm + fresh) <= set(id_counts(consumer.collect(
        [topic], len(warm) + len(fresh), timeout=2, settle=0.5))), 90, 0.5,
        "the new primary's events published")
    time.sleep(3)
    records = consumer.collect([topic], 0, timeout=5, settle=2)
    known = set(warm) | set(fresh)
    cut = set(i for i in id_counts(records) if i not in known)
    beyond = metric_value(port, "outboxd_events_beyond_fork_total")
    print("fork inside T pg%d: %d of T's events published from timeline 1, "
          "outboxd_events_beyond_fork_total %s" % (major(), len(cut), beyond))
    assert cut, "the attack did not cut T off: " + d.log_tail()
    assert beyond == len(cut), (
        "%d events of T (not in the new primary's history) published, "
        "%s counted beyond the fork; the fork as logged:\n%s" % (
            len(cut), beyond, "\n".join(
                ln for ln in d.log_text().splitlines() if "timeline" in ln)))
    assert d.running()


PAGE = 8192
SEGMENT = 16 << 20


def wal_start(pos):
    """Where a record inserted at WAL position pos starts (past a page
    header)."""
    if pos % PAGE == 0:
        pos += 40 if pos % SEGMENT == 0 else 24
    return pos


def wal_after(pos, total):
    """Where the next record starts after one of total bytes inserted at
    pos (records are 8-aligned and continue past page headers)."""
    pos = wal_start(pos)
    while total > 0:
        if pos % PAGE == 0:
            pos += 40 if pos % SEGMENT == 0 else 24
        chunk = min(total, PAGE - pos % PAGE)
        pos += chunk
        total -= chunk
    return wal_start((pos + 7) & ~7)


def message_total(n):
    """The length of a transactional logical message record, prefix 'pad',
    of n bytes."""
    main = 24 + 4 + n
    return 24 + (2 if main < 256 else 5) + main


# What PostgreSQL 15 writes first on the new timeline with
# full_page_writes off there (pg_waldump, steady over runs): the
# end-of-recovery record, running transactions, the checkpoint, the
# sequence's log, then U's heap and index inserts (U_AGG's length sets
# the heap record's); U's commit record follows.
TL2_RECORDS = (42, 50, 114, 99, 111, 72)
U_AGG = "cut_u1"


def test_fork_inside_a_transaction_skips_the_new_primarys_commit_at_its_place(
        pair, broker, consumer, outboxd_factory, test_id, slot_name):  # noqa: F811
    """LOSS. As above, outboxd is cut off inside T, below the switch
    point, with T's commit past it; it remembers how many of T's events it
    handed over, to skip them when T, at T's position (its commit's
    start), is read again. T is not on the new timeline, but the new
    timeline's own commits take its positions: T is padded (a logical
    message) so that its commit starts exactly where the new primary's
    first transaction U (one event) commits. U is read as T replayed: its
    event is skipped as handed over, never published, and the slot
    confirmed past it. PostgreSQL 15 only (TL2_RECORDS; the new primary
    writes without full-page images so the layout is the same every run);
    the alignment is checked with pg_waldump."""
    # The module is left out of the version matrix: this runs on 15, whose
    # record layout TL2_RECORDS is; another server fails, never skips.
    assert major() == 15, "TL2_RECORDS is PostgreSQL 15's WAL layout"
    primary, standby = pair
    agg = "pad_%s" % test_id
    d, topic, port, warm = start_on_pair(pair, broker, consumer,
                                         outboxd_factory, agg)
    utopic = make_topic(broker, U_AGG)
    where = {}

    def pad(cur):
        cur.execute("SELECT pg_current_wal_insert_lsn()")
        start = lsn_to_int(cur.fetchone()[0])
        target = start
        for total in TL2_RECORDS:
            target = wal_after(target, total)
        n = next(n for n in range(4096)
                 if wal_after(start, message_total(n)) == target)
        cur.execute("SELECT pg_logical_emit_message(true, 'pad', "
                    "repeat('x', %s))", (n,))
        where["commit"] = target

    cut_inside_t(pair, broker, slot_name, agg, before_commit=pad)
    with open(os.path.join(standby.datadir, "postgresql.conf"), "a") as f:
        f.write("\nfull_page_writes = off\n")
    standby.start()
    standby.promote()
    standby.sql("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                "event_type, payload) VALUES (md5('u')::uuid, %s, 'k0', "
                "'fresh', '{}')", (U_AGG,))
    fresh = write_events(standby, agg, 5, prefix="fresh")
    wait_until(lambda: set(warm + fresh) <= set(id_counts(consumer.collect(
        [topic], len(warm) + len(fresh), timeout=2, settle=0.5))), 90, 0.5,
        "the new primary's later events published")
    commits = subprocess.run(
        [harness._pg_bin("pg_waldump"), "-p",
         os.path.join(standby.datadir, "pg_wal"), "-t", "2", "-r",
         "Transaction", "-s", "%X/%X" % (where["commit"] >> 32,
                                         where["commit"] & 0xFFFFFFFF),
         "-n", "1"], capture_output=True, text=True).stdout
    assert "COMMIT" in commits and "lsn: %X/%08X" % (
        where["commit"] >> 32, where["commit"] & 0xFFFFFFFF) in commits, \
        "U's commit is not where T's was (the layout moved): " + commits
    u = consumer.collect([utopic], 1, timeout=10, settle=1)
    confirmed = standby.slot(slot_name)["confirmed_flush_lsn_int"]
    print("fork, U committed where T did (%X): %d of U's 1 event published, "
          "the slot confirmed up to %X" % (where["commit"], len(u), confirmed))
    assert len(u) == 1, (
        "the new primary's transaction at %X never published (skipped as "
        "T's events handed over), the slot confirmed up to %X; the fork as "
        "logged:\n%s" % (where["commit"], confirmed, "\n".join(
            ln for ln in d.log_text().splitlines() if "timeline" in ln)))
    assert d.running()


def test_slot_create_if_not_exists_is_not_satisfied_by_another_databases_slot(
        pg, outboxd_factory, slot_name, test_id, decoder):
    """outboxd's slot (made by `slot create`, marker row written) is lost,
    and a slot of the same name now exists in another database of the
    cluster (slot names are cluster-wide: another tool, or outboxd of
    another service, took it). `slot create --if-not-exists` must not
    call that slot healthy and exit 0: `run` refuses it ("belongs to
    database ..."), so a deployment script goes on to a run that exits,
    and the lost slot's recovery is never named."""
    d = outboxd_factory(start=False)
    rc, _, err = d.run_cmd(["slot", "create"], timeout=120)
    assert rc == 0, err
    pg.drop_slot(slot_name)  # lost: the marker row stays
    other = "other_%s" % test_id.lower()
    pg.sql("CREATE DATABASE %s" % other)
    try:
        pg.sql("SELECT pg_create_logical_replication_slot(%s, %s)",
               (slot_name, decoder), dbname=other)
        rc, _, err = d.run_cmd(["slot", "create", "--if-not-exists"],
                               timeout=120)
        print("slot create --if-not-exists with the name taken in database "
              "%s: exit %d: %s" % (other, rc, err.strip()[-300:]))
        assert rc != 0, "exit 0 on a slot of another database: " + err
        rc, out, err = d.run_cmd(["check"], timeout=60)
        assert rc != 0, out + err
    finally:
        pg.drop_slot(slot_name)
        pg.sql("DROP DATABASE %s" % other)


def test_fork_with_the_broker_down_acknowledges_the_old_timeline_late(
        pair, broker, consumer, outboxd_factory, test_id, slot_name):  # noqa: F811
    """Passed (an interleaving the failover tests do not write down; about
    40 s): the broker is down when the primary dies with a transaction of
    timeline 1 past the switch point in the producer (unacknowledged, the
    queue full: about 4,100 of its 5,000 events); outboxd reconnects to the promoted standby and rewinds
    while they are still in flight, reads the new primary's events, and
    only then does the broker come back: the old timeline's late
    acknowledgements confirm nothing of timeline 2's, every event of the
    new primary is published in commit order per key, the count beyond
    the fork is exact, and the new primary's slot settles at its WAL
    position, never past it."""
    primary, standby = pair
    agg = "late_%s" % test_id
    d, topic, port, warm = start_on_pair(pair, broker, consumer,
                                         outboxd_factory, agg)
    give_standby_the_slot(primary, standby, slot_name)
    broker.cmd("down all")
    try:
        primary.sql("INSERT INTO public.outbox (id, aggregate_type, "
                    "aggregate_id, event_type, payload) SELECT "
                    "gen_random_uuid(), %s, 'k' || (g %% 7), 'big', "
                    "jsonb_build_object('n', g, 'pad', repeat('x', 1000)) "
                    "FROM generate_series(1, 5000) g", (agg,))
        time.sleep(4)  # handed over, unacknowledged
        primary.kill9()
        standby.start()
        standby.promote()
        d.wait_log(r"which left timeline 1 at .* before outboxd's position",
                   30)
        fresh = write_events(standby, agg, 50, prefix="fresh")
        time.sleep(2)
    finally:
        broker.cmd("up all")
    wait_until(lambda: set(warm + fresh) <= set(id_counts(consumer.collect(
        [topic], len(warm) + len(fresh), timeout=2, settle=0.5))), 90, 0.5,
        "the new primary's events published")
    end = lsn_to_int(standby.sql("SELECT pg_current_wal_lsn()")[0][0])
    wait_until(lambda: (standby.slot(slot_name) or {}).get(
        "confirmed_flush_lsn_int", 0) >= end - 1024 * 1024, 30, 0.2,
        "the new primary's slot confirmed")
    time.sleep(2)
    confirmed_at = standby.slot(slot_name)["confirmed_flush_lsn_int"]
    assert confirmed_at <= lsn_to_int(standby.sql(
        "SELECT pg_current_wal_lsn()")[0][0])
    records = consumer.collect([topic], 0, timeout=5, settle=2)
    counts = id_counts(records)
    old = [i for i in counts if i not in set(warm) | set(fresh)]
    beyond = metric_value(port, "outboxd_events_beyond_fork_total")
    print("fork with the broker down pg%d: %d of timeline 1 published past "
          "the fork, counted %s" % (major(), len(old), beyond))
    assert old and beyond == len(old), (len(old), beyond)
    order = {i: n for n, i in enumerate(fresh)}
    last = {}
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        i = dict(r["headers"]).get("id")
        i = i.decode() if isinstance(i, bytes) else i
        if i in order:
            assert order[i] > last.get(r["key"], -1), "key %s reordered" \
                % r["key"]
            last[r["key"]] = order[i]
    assert d.running()


def test_delivery_timeout_alias_is_enforced_by_outboxd_too(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """Passed (about 20 s): kafka.delivery.timeout.ms, librdkafka's other
    name for message.timeout.ms, is read as outboxd's timeout and never
    reaches librdkafka either: an expired record still never lets a later
    one of its key go first."""
    made = []

    def factory(*args, **kwargs):
        made.append(outboxd_factory(*args, **kwargs))
        return made[-1]

    expired_record_goes_first_never(
        own_cluster, broker, consumer, factory, slot_name, test_id,
        timeout_key="delivery.timeout.ms")
    # outboxd's own timeout fired (else the test proves nothing).
    assert "delivery timed out: " in made[0].log_text(), made[0].log_tail()
