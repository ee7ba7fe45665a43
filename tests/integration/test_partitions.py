"""Partitioned outbox tables with wal2json (sql/README.md, "Partitioned outbox
tables"): wal2json names the leaf partition a row went to and reads only
the tables named when its stream started, so outboxd streams every leaf,
reads the set of leaves again every second, and reads the slot again when a
partition appears.

Every test has an outbox table of its own, partitioned by range on
created_at, with the columns of sql/outbox.sql. created_at defaults to the
setting outbox_test.day when a transaction sets it (SET LOCAL), else to
now(), so a writer puts rows into the current partition and a transaction
that sets the day puts them into that day's partition. The record timestamp
is the commit time (timestamp_column empty): the days are in 2100.

Also here: a partitioned outbox table with a default partition is not
read as empty (a past defect)."""

import random
import re
import time

from harness import int_to_lsn, wait_until
from test_faults import (Feed, Writer, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         confirmed, make_topic, probe, wait_confirmed,
                         wait_streaming)

assert probe  # a fixture, used by name

NEW_PARTITIONS = "new partitions of"


def make_table(pg, name, first=""):
    """The partitioned outbox table `name` with a partition for the present
    (name_now) and one for 2100-01-01 (name_d0), made in one transaction
    that runs the SQL first before; returns 'public.<name>'."""
    pg.sql(first + """
        CREATE TABLE public.%(t)s (
            id             uuid        NOT NULL DEFAULT gen_random_uuid(),
            aggregate_type text        NOT NULL,
            aggregate_id   text        NOT NULL,
            event_type     text        NOT NULL,
            payload        jsonb,
            headers        jsonb,
            created_at     timestamptz NOT NULL DEFAULT coalesce(
                nullif(current_setting('outbox_test.day', true), '')::timestamptz,
                now()),
            PRIMARY KEY (id, created_at)
        ) PARTITION BY RANGE (created_at);
        CREATE TABLE public.%(t)s_now PARTITION OF public.%(t)s
            FOR VALUES FROM ('2000-01-01') TO ('2090-01-01');
        CREATE TABLE public.%(t)s_d0 PARTITION OF public.%(t)s
            FOR VALUES FROM ('2100-01-01') TO ('2100-01-02');
        """ % {"t": name})
    return "public." + name


def day_sql(n):
    """The n-th day after 2100-01-01, as an SQL expression."""
    return "('2100-01-01'::date + %d)" % n


def into_day(n, create=None):
    """A before= step for Feed.commit: the transaction's rows go to day n's
    partition; with create (the table's name), that partition is created
    first, in the same transaction."""
    def step(cur):
        if create is not None:
            cur.execute("CREATE TABLE public.%s_d%d PARTITION OF public.%s "
                        "FOR VALUES FROM (%s) TO (%s)"
                        % (create, n, create, day_sql(n), day_sql(n + 1)))
        cur.execute("SELECT set_config('outbox_test.day', (%s)::text, true)"
                    % day_sql(n))
    return step


def config(table):
    return {"outbox": {"table": table, "timestamp_column": ""}}


def start_outboxd(pg, broker, outboxd_factory, test_id, aggs, keys=7):
    """A partitioned outbox table of the test's own, one Feed into it (and
    its topic) per aggregate-type prefix in aggs, and outboxd on the table:
    (table name, feeds, daemon)."""
    name = "pobx_%s" % test_id
    table = make_table(pg, name)
    feeds = [Feed(pg, "%s_%s" % (a, test_id), table=table, keys=keys)
             for a in aggs]
    for f in feeds:
        make_topic(broker, f.agg)
    return name, feeds, outboxd_factory(config(table))


def check_feeds(consumer, feeds, exactly_once):
    """Every row of every feed published (exactly once if asked), nothing
    else, and per key the first deliveries in commit order."""
    for f in feeds:
        records = collect_all(consumer, "outbox.event.%s" % f.agg, f.ids,
                              timeout=120)
        check_delivery(records, f.ids, exactly_once)
        check_first_deliveries_in_commit_order(records, f)


def test_rows_into_existing_partitions(pg, broker, consumer, outboxd_factory,
                                       slot_name, test_id):
    """Rows into the present partition, a day partition and a partition
    that is itself partitioned (a leaf two levels down) are each published
    once with the table's mapping; `outboxd check` accepts the table and
    counts its leaves; the slot is confirmed past the last row."""
    name = "pobx_%s" % test_id
    table = make_table(pg, name)
    pg.sql("""
        CREATE TABLE public.%(t)s_d1 PARTITION OF public.%(t)s
            FOR VALUES FROM (%(a)s) TO (%(b)s) PARTITION BY HASH (id);
        CREATE TABLE public.%(t)s_d1h0 PARTITION OF public.%(t)s_d1
            FOR VALUES WITH (MODULUS 2, REMAINDER 0);
        CREATE TABLE public.%(t)s_d1h1 PARTITION OF public.%(t)s_d1
            FOR VALUES WITH (MODULUS 2, REMAINDER 1);
        """ % {"t": name, "a": day_sql(1), "b": day_sql(2)})
    agg = "part_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory(config(table))
    rc, out, err = d.run_cmd(["check"])
    assert "(partitioned, 4 partitions)" in out, (rc, out, err)
    assert "outbox table         FAIL" not in out, out
    wait_streaming(pg, slot_name)

    feed = Feed(pg, agg, table=table)
    for i in range(6):
        feed.commit(10, before=None if i % 3 == 0 else into_day(i % 3 - 1))
    counts = pg.sql("SELECT tableoid::regclass::text, count(*) FROM %s "
                    "GROUP BY 1 ORDER BY 1" % table)
    assert [c[0] for c in counts] == [
        "%s_%s" % (name, p) for p in ("d0", "d1h0", "d1h1", "now")], counts
    end = pg.wal_lsn()
    check_feeds(consumer, [feed], exactly_once=True)
    wait_confirmed(pg, slot_name, end)
    assert d.running(), d.log_tail()
    assert NEW_PARTITIONS not in d.log_text(), d.log_tail()


def test_partitions_created_while_streaming(pg, broker, consumer,
                                            outboxd_factory, slot_name,
                                            test_id):
    """While a writer keeps inserting into the present partition, day
    partitions are created one after the other, each with rows inserted in
    the creating transaction and in transactions right after it: every row
    is published at least once, nothing else, per key first deliveries in
    commit order, each new partition is noticed, and the slot ends
    confirmed past the last row."""
    name, (old, new), d = start_outboxd(pg, broker, outboxd_factory, test_id,
                                        ("pold", "pnew"))
    wait_streaming(pg, slot_name)
    with Writer(old, rows=4, pause=0.01) as w:
        w.wait_txns(10)
        for n in range(1, 5):
            assert new.commit(5, before=into_day(n, create=name))
            for _ in range(3):
                assert new.commit(5, before=into_day(n))
            w.wait_txns(5)
        w.wait_txns(20)
    end = pg.wal_lsn()
    check_feeds(consumer, [old, new], exactly_once=False)
    wait_confirmed(pg, slot_name, end, timeout=30)
    log = d.log_text()
    assert log.count(NEW_PARTITIONS) >= 1, d.log_tail()
    for n in range(1, 5):
        assert "public.%s_d%d" % (name, n) in log, d.log_tail()
    assert d.running(), d.log_tail()


def test_partition_attached_while_streaming(pg, broker, consumer,
                                            outboxd_factory, slot_name,
                                            test_id):
    """A table attached as a partition while outboxd streams (rows then
    inserted through the parent, in the attaching transaction and after
    it, and straight into the partition) is read like the others, while a
    writer keeps inserting into the present partition."""
    name, (old, new, direct), d = start_outboxd(
        pg, broker, outboxd_factory, test_id, ("aold", "anew", "adir"))
    pg.sql("CREATE TABLE public.%s_d5 (LIKE public.%s INCLUDING DEFAULTS)"
           % (name, name))
    direct.table = "public.%s_d5" % name  # straight into the partition
    wait_streaming(pg, slot_name)

    def attach(cur):
        cur.execute("ALTER TABLE public.%s ATTACH PARTITION public.%s_d5 "
                    "FOR VALUES FROM (%s) TO (%s)"
                    % (name, name, day_sql(5), day_sql(6)))
        into_day(5)(cur)

    with Writer(old, rows=4, pause=0.01) as w:
        w.wait_txns(10)
        assert new.commit(5, before=attach)
        for _ in range(3):
            assert new.commit(5, before=into_day(5))
            assert direct.commit(3, before=into_day(5))
        w.wait_txns(20)
    end = pg.wal_lsn()
    check_feeds(consumer, [old, new, direct], exactly_once=False)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert "public.%s_d5" % name in d.log_text(), d.log_tail()
    assert d.running(), d.log_tail()


def test_connection_dropped_before_a_new_partition_is_noticed(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The replication connection is terminated right after a partition
    was created with rows in the same transaction, before the once-a-second
    read could notice it, while a writer keeps inserting into the present
    partition: the next stream reads the new partition and the
    transactions it had already read without it again, so nothing is
    lost."""
    name, (old, new), d = start_outboxd(pg, broker, outboxd_factory, test_id,
                                        ("dold", "dnew"))
    pid = wait_streaming(pg, slot_name)
    with Writer(old, rows=4, pause=0.005) as w:
        for n in range(1, 5):
            w.wait_txns(5)
            assert new.commit(5, before=into_day(n, create=name))
            pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
            pid = wait_streaming(pg, slot_name, 30, other_than=pid)
        w.wait_txns(10)
    end = pg.wal_lsn()
    check_feeds(consumer, [old, new], exactly_once=False)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert d.running(), d.log_tail()


def test_kill9_while_partitions_are_created(pg, broker, consumer,
                                            outboxd_factory, slot_name,
                                            test_id):
    """outboxd is killed with SIGKILL three times while a writer inserts
    into the present partition and partitions are created and written
    (each in the transaction that creates it and right after), and
    restarted each time: nothing is lost, per key first deliveries stay in
    commit order."""
    broker.cmd("rtt all 10")  # keep records in flight at the kills
    name, (old, new), d = start_outboxd(pg, broker, outboxd_factory, test_id,
                                        ("kold", "knew"), keys=11)
    pid = wait_streaming(pg, slot_name)
    rng = random.Random(test_id)
    n = 0
    with Writer(old, rows=4, pause=0.005):
        for _ in range(3):
            deadline = time.monotonic() + rng.uniform(0.5, 2.0)
            while time.monotonic() < deadline:
                n += 1
                assert new.commit(3, before=into_day(n, create=name))
                assert new.commit(3, before=into_day(n))
                time.sleep(0.1)
            d.kill9()
            n += 1
            assert new.commit(3, before=into_day(n, create=name))
            time.sleep(rng.uniform(0.0, 0.3))
            d.start()
            pid = wait_streaming(pg, slot_name, 30, other_than=pid)
            assert new.commit(3, before=into_day(n))
        time.sleep(2)
    broker.cmd("rtt all 0")
    end = pg.wal_lsn()
    check_feeds(consumer, [old, new], exactly_once=False)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert d.running(), d.log_tail()


def test_slot_never_confirmed_past_a_row_of_a_new_partition(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, probe):
    """With every broker down, a partition is created with a row in the
    same transaction. The stream started without that partition sees the
    transaction as empty; still the slot is never confirmed up to its
    commit until the row was delivered (after `up all`), and then it
    is."""
    name, (feed,), d = start_outboxd(pg, broker, outboxd_factory, test_id,
                                     ("conf",))
    topic = "outbox.event.%s" % feed.agg
    wait_streaming(pg, slot_name)
    feed.commit(3)
    collect_all(consumer, topic, feed.ids)
    wait_confirmed(pg, slot_name, pg.wal_lsn())

    p = probe("public.%s_d7" % name)
    broker.cmd("down all")
    try:
        assert feed.commit(1, before=into_day(7, create=name))
        end = wait_until(p.commits, 10, 0.1, "the commit of the row")[0][1]
        watched = time.monotonic()
        while time.monotonic() - watched < 6:
            pos = confirmed(pg, slot_name)
            assert pos < end, (
                "slot confirmed %s with every broker down; the row of the new "
                "partition was committed at %s"
                % (int_to_lsn(pos), int_to_lsn(end)))
            time.sleep(0.1)
    finally:
        broker.cmd("up all")
    check_feeds(consumer, [feed], exactly_once=False)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert "public.%s_d7" % name in d.log_text(), d.log_tail()
    assert d.running(), d.log_tail()


def test_check_counts_partitions_of_an_empty_tree(pg, broker,
                                                 outboxd_factory, test_id):
    """`outboxd check` on a partitioned table with no partition yet: it
    passes the table and says it has 0 partitions."""
    name = "pobx_%s" % test_id
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox) "
           "PARTITION BY RANGE (created_at)" % name)
    d = outboxd_factory({"outbox": {"table": "public." + name}}, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert "public.%s (partitioned, 0 partitions)" % name in out, (rc, out, err)


def test_partitioned_outbox_table_is_not_read_as_empty(pg, broker, consumer,
                                                        outboxd_factory, slot_name,
                                                        test_id):
    """wal2json reports rows under the partition's name, so a filter on the
    partitioned table alone would read nothing: check passes it and counts
    its partitions, and rows inserted into its (default) partition are
    published (sql/README.md, "Partitioned outbox tables")."""
    table = "obp_%s" % test_id
    pg.sql("CREATE TABLE public.%s (id uuid NOT NULL DEFAULT gen_random_uuid(), "
           "aggregate_type text, aggregate_id text, event_type text, payload jsonb, "
           "headers jsonb, created_at timestamptz NOT NULL DEFAULT now()) "
           "PARTITION BY RANGE (created_at)" % table)
    pg.sql("CREATE TABLE public.%s_all PARTITION OF public.%s DEFAULT" % (table, table))
    feed = Feed(pg, "obp_%s" % test_id, table="public.%s" % table)
    topic = make_topic(broker, feed.agg)
    d = outboxd_factory({"outbox": {"table": "public.%s" % table}}, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"outbox table\s+ok.*\(partitioned, 1 partitions\)", out), out + err
    d.start()
    wait_streaming(pg, slot_name)
    for _ in range(3):
        feed.commit(5)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, exactly_once=True)
    assert d.running(), d.log_tail()


def test_partitions_named_with_a_tab_or_a_newline(pg, broker, consumer,
                                                  outboxd_factory, slot_name,
                                                  test_id):
    """A partition whose name holds a tab (there at start) and one whose
    name holds a newline (created while streaming): wal2json's add-tables
    list splits at whitespace, so outboxd escapes those too. Every row is
    published once and the stream goes on. Before, START_REPLICATION
    failed ('could not parse value ... for parameter "add-tables"') five
    times and outboxd stopped, publishing nothing."""
    name = "pobx_%s" % test_id
    table = make_table(pg, name)
    pg.sql('CREATE TABLE public."%s_t\tab" PARTITION OF public.%s FOR VALUES '
           "FROM (%s) TO (%s)" % (name, name, day_sql(31), day_sql(32)))
    agg = "names_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory(config(table))
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg, table=table, keys=5)
    for _ in range(5):
        feed.commit(3)
        feed.commit(2, before=into_day(31))
    pg.sql('CREATE TABLE public."%s_n\nl" PARTITION OF public.%s FOR VALUES '
           "FROM (%s) TO (%s)" % (name, name, day_sql(59), day_sql(60)))
    for _ in range(5):
        feed.commit(2, before=into_day(59))
        feed.commit(3)
    feed.close()
    records = collect_all(consumer, "outbox.event.%s" % agg, feed.ids,
                          timeout=60)
    check_delivery(records, feed.ids, exactly_once=True)
    assert d.running(), d.log_tail()
