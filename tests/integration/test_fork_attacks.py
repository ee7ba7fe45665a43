"""Attacks on the newest changes (fork.c: the stream across a promotion;
slot create; outboxd's own kafka.message.timeout.ms): faults and
interleavings the other tests do not inject. Each test says what it
found."""

import time

import psycopg2
import pytest

from harness import lsn_to_int, wait_until
from test_failover import (SnapshotNudger, copy_slot_files,
                           give_standby_the_slot, major, metric_value, pair,
                           start_on_pair, sync_ready, write_events)  # noqa: F401
from test_broker_errors import (
    test_expired_record_never_lets_a_later_one_of_its_key_go_first as
    expired_record_goes_first_never)
from test_faults import id_counts

# Kills, outages and a past defect's timing: the plain pass only, on 15.
pytestmark = [pytest.mark.no_sanitizers, pytest.mark.no_version_matrix]


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
                        "gen_random_uuid(), %s, 'k' || (g %% 7), 'big', "
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
        broker.cmd("down all")
        try:
            big.commit()  # T's commit: past the switch point
            time.sleep(5)  # outboxd hands T over until the queue is full
            primary.kill9()
        finally:
            broker.cmd("up all")
    finally:
        big.close()
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
