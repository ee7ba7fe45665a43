"""The stream's tables are read in snapshots, and a commit is in the WAL
(and decoded) before it is visible to any snapshot; with synchronous
replication that gap lasts as long as the standby wait (sql/README.md,
"Partitioned outbox tables" and "Choosing a decoder").

Defects kept here:
- A transaction that created a partition and wrote into it while waiting
  for a synchronous standby was taken as covered by a read of the leaves
  that could not see it: its rows were never published (wal2json).
- An ALTER PUBLICATION waiting for a standby while rows were inserted: the
  rows were never sent by Postgres, the slot was confirmed past them and
  the halt message named a position after them (pgoutput).
- A plain outbox table replaced by a partitioned one of the same name was
  not watched: the new partitions' rows were filtered out (wal2json).
- A transaction writing a key into a new partition, then one writing it
  into an old partition: the second was published, the slot read again
  for the new partition, and the consumer saw [T2, T1, T2] (wal2json).
"""

import contextlib
import re
import threading
import time

from harness import free_port, lsn_to_int, wait_until
from test_faults import (Feed, check_delivery,
                         check_first_deliveries_in_commit_order, collect_all,
                         make_topic, scrape, wait_streaming)
from test_partitions import config, day_sql, into_day, make_table


@contextlib.contextmanager
def standby_wait(pg):
    """Inside the block, a transaction that sets synchronous_commit = on
    waits at its commit for a standby that never comes; every other one
    commits locally. The wait ends with the block."""
    pg.sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    pg.sql("ALTER SYSTEM SET synchronous_commit = 'local'")
    pg.sql("SELECT pg_reload_conf()")
    try:
        pg.wait_sync_standby_armed()
        yield
    finally:
        pg.sql("ALTER SYSTEM RESET synchronous_standby_names")
        pg.sql("ALTER SYSTEM RESET synchronous_commit")
        pg.sql("SELECT pg_reload_conf()")


class WaitingCommit(threading.Thread):
    """Commits one transaction through feed (Feed.commit(n, before)) that
    waits for the standby at its COMMIT (standby_wait); finish() after the
    wait ends."""

    def __init__(self, pg, feed, n, before):
        super().__init__(daemon=True)
        self.pg = pg
        self.feed = feed
        self.n = n
        self.before = before
        self.error = None

    def run(self):
        def before(cur):
            cur.execute("SET LOCAL synchronous_commit = on")
            self.before(cur)
        try:
            assert self.feed.commit(self.n, before=before) or self.n == 0
        except BaseException as e:  # reported by finish()
            self.error = e
        finally:
            self.feed.close()

    def wait_for_standby(self):
        """Waits until the COMMIT is in the WAL and waits for the standby."""
        wait_until(lambda: not self.is_alive() or self.pg.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            [0][0] == 1, 20, 0.05, "a commit waits for the standby")
        assert self.is_alive(), "the commit did not wait for the standby (%r)" % (
            self.error,)

    def finish(self):
        self.join(30)
        assert not self.is_alive(), "the waiting commit hangs"
        if self.error is not None:
            raise self.error


def test_partition_created_by_a_commit_not_yet_visible(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A transaction attaches a partition and writes 5 rows into it, and
    waits for a synchronous standby while other transactions commit and
    the leaves are read again and again: once it is visible its rows are
    published, and per key in commit order."""
    name = "vis_%s" % test_id
    table = make_table(pg, name)
    feed = Feed(pg, "vis_%s" % test_id, table=table, keys=3)
    make_topic(broker, feed.agg)
    outboxd_factory(config(table))
    wait_streaming(pg, slot_name)
    feed.commit(3)
    waiting = Feed(pg, feed.agg, table=table, keys=3, seed="waiting")
    waiting.keys = ["%s-w%d" % (feed.agg, i) for i in range(3)]

    # CREATE TABLE ... PARTITION OF would lock out every other writer
    # until the standby answers; ATTACH PARTITION does not.
    pg.sql("CREATE TABLE public.%s_d7 (LIKE public.%s INCLUDING DEFAULTS)" % (name, name))

    def create_and_write(cur):
        cur.execute("ALTER TABLE public.%s ATTACH PARTITION public.%s_d7 FOR VALUES "
                    "FROM (%s) TO (%s)" % (name, name, day_sql(7), day_sql(8)))
        into_day(7)(cur)
    with standby_wait(pg):
        t = WaitingCommit(pg, waiting, 5, create_and_write)
        t.start()
        t.wait_for_standby()
        for _ in range(4):
            feed.commit(2)
            time.sleep(0.8)  # the leaves are read every second
    t.finish()
    feed.commit(2)
    ids = feed.ids + waiting.ids
    assert len(waiting.ids) == 5
    records = collect_all(consumer, "outbox.event.%s" % feed.agg, ids, 60)
    check_delivery(records, ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)


def test_publication_altered_by_a_commit_not_yet_visible(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """pgoutput: ALTER PUBLICATION leaves inserts out, and waits for a
    synchronous standby while 5 rows are inserted (Postgres never sends
    them). The slot is never confirmed past them, and outboxd halts naming
    a position before them."""
    agg = "vp_%s" % test_id
    make_topic(broker, agg)
    port = free_port()
    d = outboxd_factory({"postgres": {"plugin": "pgoutput"},
                         "http": {"listen": "127.0.0.1:%d" % port}})
    wait_streaming(pg, slot_name)
    pub = d.config["postgres"]["publication"]
    feed = Feed(pg, agg)
    feed.commit(3)
    collect_all(consumer, "outbox.event.%s" % agg, feed.ids, 30)
    with standby_wait(pg):
        t = WaitingCommit(pg, Feed(pg, agg + "_alter"), 0, lambda cur: cur.execute(
            "ALTER PUBLICATION %s SET (publish = 'update')" % pub))
        t.start()
        t.wait_for_standby()
        before_rows = pg.wal_lsn()
        lost = Feed(pg, agg + "_lost", keys=1)
        for _ in range(5):
            lost.commit(1)
        lost.close()
        # outboxd knows the server's WAL went past the rows; meanwhile it
        # reads the publication every second and sends its position
        # every 500 ms.
        after_rows = pg.wal_lsn()
        wait_until(lambda: scrape(port).get("outboxd_server_wal_end_lsn", 0)
                   >= after_rows, 30, 0.1, "outboxd told of the WAL past the rows")
        time.sleep(3.0)
        confirmed = lsn_to_int(pg.slot(slot_name)["confirmed_flush_lsn"])
        assert confirmed <= before_rows, (
            "slot confirmed to %X, past rows Postgres never sent (from %X)"
            % (confirmed, before_rows))
    t.finish()
    assert d.wait(30) == 1, d.log_tail()
    m = re.search(r"rows written after ([0-9A-F]+/[0-9A-F]+)", d.log_text())
    assert m, d.log_tail()
    assert lsn_to_int(m.group(1)) <= before_rows, m.group(0)
    assert lsn_to_int(pg.slot(slot_name)["confirmed_flush_lsn"]) <= before_rows


def test_plain_table_replaced_by_a_partitioned_one(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """wal2json: while streaming, one transaction renames the plain outbox
    table away and creates a partitioned one of the same name with a
    partition; rows inserted then are published, and so are rows written
    after a restart."""
    name = "swp_%s" % test_id
    pg.sql("CREATE TABLE public.%s (LIKE public.outbox INCLUDING ALL)" % name)
    feed = Feed(pg, "swp_%s" % test_id, table="public." + name, keys=3)
    make_topic(broker, feed.agg)
    d = outboxd_factory(config("public." + name))
    wait_streaming(pg, slot_name)
    feed.commit(3)
    feed.close()
    make_table(pg, name, first="ALTER TABLE public.%(t)s RENAME TO %(t)s_old; "
               "ALTER TABLE public.%(t)s_old RENAME CONSTRAINT %(t)s_pkey TO "
               "%(t)s_old_pkey;" % {"t": name})
    feed.commit(4)
    feed.commit(4, before=into_day(0))
    records = collect_all(consumer, "outbox.event.%s" % feed.agg, feed.ids, 60)
    check_delivery(records, feed.ids, exactly_once=False)
    d.stop()
    feed.commit(2)
    outboxd_factory(config("public." + name))
    records = collect_all(consumer, "outbox.event.%s" % feed.agg, feed.ids, 60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)


def test_key_in_a_new_partition_then_an_old_one_keeps_commit_order(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """wal2json: T1 writes a key into a partition created a moment before,
    T2 writes the same key into an old partition, again and again: per key
    the first deliveries are in commit order."""
    name = "ord_%s" % test_id
    table = make_table(pg, name)
    feed = Feed(pg, "ord_%s" % test_id, table=table, keys=1)
    make_topic(broker, feed.agg)
    outboxd_factory(config(table))
    wait_streaming(pg, slot_name)
    for n in range(1, 7):
        pg.sql("CREATE TABLE public.%s_d%d PARTITION OF public.%s FOR VALUES "
               "FROM ('2100-01-01'::date + %d) TO ('2100-01-01'::date + %d)"
               % (name, n, name, n, n + 1))
        feed.commit(2, before=into_day(n))
        feed.commit(2)
        time.sleep(0.3)
    records = collect_all(consumer, "outbox.event.%s" % feed.agg, feed.ids, 60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)


def test_schema_renamed_by_a_commit_not_yet_visible(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A partition lives in a schema of its own, and ALTER SCHEMA … RENAME
    waits for a synchronous standby. The rename takes no lock on the
    tables in the schema, so the leaves' read did not count it as
    unsettled; rows inserted meanwhile are decoded under the new name,
    which wal2json's table filter (the old names) drops, and the ceiling
    went past them: once the rename was visible the stream was read again
    from after them (3 of 3 rows lost in each of 3 runs). The catalog rows
    that name the stream's tables (their schemas included) are now
    watched like the publication's row: every row is published."""
    name = "ren_%s" % test_id
    schema = "arch_%s" % test_id
    table = make_table(pg, name, first="CREATE SCHEMA %s;" % schema)
    pg.sql("CREATE TABLE %s.%s_d1 PARTITION OF public.%s FOR VALUES FROM "
           "(%s) TO (%s)" % (schema, name, name, day_sql(1), day_sql(2)))
    feed = Feed(pg, "ren_%s" % test_id, table=table, keys=3)
    make_topic(broker, feed.agg)
    d = outboxd_factory(config(table))
    wait_streaming(pg, slot_name)
    feed.commit(2, before=into_day(1))
    renamer = Feed(pg, feed.agg, table=table, keys=1, seed="renamer")

    def rename(cur):
        cur.execute("ALTER SCHEMA %s RENAME TO %s_2" % (schema, schema))
    with standby_wait(pg):
        t = WaitingCommit(pg, renamer, 0, rename)
        t.start()
        t.wait_for_standby()
        for _ in range(3):
            feed.commit(1, before=into_day(1))
            time.sleep(0.8)  # the leaves are read every second
    t.finish()
    feed.commit(1, before=into_day(1))
    records = collect_all(consumer, "outbox.event.%s" % feed.agg, feed.ids,
                          60)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    assert d.running(), d.log_tail()
