"""outbox.retention (deploy/README.md, "Retention"): outboxd deletes the
outbox rows that are older than the retention and published (behind the
recovery point), so a recovery from the point never needs one.

Each test runs on a cluster of its own (the deleted-rows check reads the
table's statistics) with the point taken every second and the idle pause
of retention shortened (a test build's OUTBOXD_TEST_RECPOINT_MS and
OUTBOXD_TEST_RETENTION_MS)."""

import re
import time

from harness import free_port, wait_until
from test_faults import (Feed, Writer, check_delivery, collect_all, scrape,
                         wait_streaming)
from test_partitions import make_table
from test_slot_recovery import RECOVERED, drop_slot, report
from test_faults import make_topic, on_cluster
from conftest import UNSET

ENV = {"OUTBOXD_TEST_RECPOINT_MS": "1000", "OUTBOXD_TEST_RETENTION_MS": "500"}


def start(c, outboxd_factory, port, **settings):
    settings.setdefault("outbox_message_prefix", UNSET)
    cfg = on_cluster(c, outbox_retention="1s", **settings)
    cfg["http"] = {"listen": "127.0.0.1:%d" % port}
    return outboxd_factory(cfg, env=ENV)


def deleted(port):
    return scrape(port).get("outboxd_outbox_rows_deleted_total", 0)


def test_retention_deletes_only_published_rows(own_cluster, broker, consumer,
                                               outboxd_factory, slot_name,
                                               test_id):
    """A writer at full speed, the broker down for a while (rows older
    than the retention wait unpublished), retention deleting meanwhile:
    the slot is dropped and outboxd killed right after a deletion pass,
    and the recovery publishes every event: retention deleted no row a
    recovery needed. Its deletes are outboxd's own: no halt for rows
    deleted by others."""
    c = own_cluster()
    agg = "ret_%s" % test_id
    topic = make_topic(broker, agg)
    port = free_port()
    d = start(c, outboxd_factory, port)
    wait_streaming(c, slot_name)
    feed = Feed(c, agg)
    with Writer(feed, rows=20, pause=0.005) as w:
        w.wait_txns(100)
        assert broker.cmd("down all") == "ok"
        time.sleep(4)  # rows past the point age past the retention
        assert broker.cmd("up all") == "ok"
        before = deleted(port)
        wait_until(lambda: deleted(port) > before, 60, 0.05, "a deletion pass")
        d.kill9()
        drop_slot(c, slot_name)
        w.wait_txns(20)
    left = c.sql("SELECT count(*) FROM public.outbox")[0][0]
    assert 0 < left < len(feed.ids), (left, len(feed.ids))
    d.start()
    d.wait_log(RECOVERED, 90)
    recs = collect_all(consumer, topic, feed.ids, timeout=120)
    check_delivery(recs, feed.ids, exactly_once=False)
    report("retention then loss", feed.ids, recs)
    assert c.sql("SELECT deletes_seen_at FROM public.outboxd_slots") == [(None,)]
    print("retention deleted %d of %d rows" % (len(feed.ids) - left, len(feed.ids)))


def test_retention_on_a_partitioned_table(own_cluster, broker, consumer,
                                          outboxd_factory, slot_name, test_id):
    """A partitioned outbox table: rows are deleted from its leaves, and
    every event is published."""
    c = own_cluster()
    agg = "retp_%s" % test_id
    topic = make_topic(broker, agg)
    table = make_table(c, "pret_%s" % test_id)
    port = free_port()
    start(c, outboxd_factory, port, outbox_table=table)
    wait_streaming(c, slot_name)
    feed = Feed(c, agg, table=table)
    for _ in range(20):
        feed.commit(10)
    wait_until(lambda: c.sql("SELECT count(*) FROM %s" % table)[0][0] == 0, 60, 0.5,
               "every published row deleted")
    assert deleted(port) == 200
    recs = collect_all(consumer, topic, feed.ids)
    check_delivery(recs, feed.ids, exactly_once=True)


def test_check_says_what_retention_costs(own_cluster, outboxd_factory,
                                         slot_name):
    """`check` prints an outbox retention line: off by default; with a
    retention shorter than the time max_slot_wal_keep_size lets a slot be
    down at the server's WAL rate, a warning that a recovery by hand with
    a time would miss rows (outboxd's own misses none)."""
    c = own_cluster(max_slot_wal_keep_size="'100GB'")
    d = outboxd_factory(on_cluster(c), start=False)
    rc, out, _ = d.run_cmd(["check"])
    assert re.search(r"^outbox retention\s+ok\s+off: outboxd deletes no outbox rows",
                     out, re.M), out
    rc, out, _ = d.run_cmd(["check", "-s", "outbox.retention=1min"])
    assert re.search(r"^outbox retention\s+warn\s+outbox.retention \(1min\) is shorter "
                     r"than the about \S+ a slot may be down", out, re.M), out
    rc, out, _ = d.run_cmd(["check", "-s", "outbox.retention=1min",
                            "-s", "outbox.timestamp_column="])
    assert rc == 2 and "outbox.retention needs outbox.timestamp_column" in out + _, out
