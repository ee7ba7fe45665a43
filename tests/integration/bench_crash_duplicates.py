"""Duplicates per crash, by decoder and table kind: a benchmark, not a test
(its file name keeps it out of the integration run; tests/bench/
crash_duplicates.sh runs it and prints the table, tests/README.md
"Duplicates per crash" records one).

A crash (kill -9) republishes the events the broker acknowledged that the
slot was not yet confirmed past. Two loads, each with wal2json and
pgoutput, on the shipped plain outbox table and on a partitioned one:

- live: a writer commits ROWS-row transactions every PAUSE seconds (about
  10,000 events/s by default) while outboxd is killed KILLS times at
  seeded random moments and started again;
- drain: DRAIN_TXNS transactions of 500 rows are written with outboxd
  stopped, then outboxd drains them and is killed KILLS times meanwhile.

Each case appends one line to $OUTBOXD_CRASH_RESULTS: events, crashes,
extra copies, copies per crash and what that is in milliseconds of the
case's event rate. Every event must arrive (at least once), as in the
tests; the counts are reported, never asserted."""

import os
import random
import tempfile
import time

import pytest

from test_faults import (Feed, Writer, check_delivery, collect_all, id_counts,
                         wait_confirmed, wait_streaming)
from test_partitions import make_table

DECODERS = ("wal2json", "pgoutput")
KILLS = int(os.environ.get("OUTBOXD_CRASH_KILLS", "6"))
ROWS = int(os.environ.get("OUTBOXD_CRASH_ROWS", "400"))
PAUSE = float(os.environ.get("OUTBOXD_CRASH_PAUSE", "0.02"))
DRAIN_TXNS = int(os.environ.get("OUTBOXD_CRASH_DRAIN_TXNS", "300"))
RESULTS = os.environ.get("OUTBOXD_CRASH_RESULTS",
                         os.path.join(tempfile.gettempdir(),
                                      "outboxd-crash-duplicates.txt"))


def start_case(pg, broker, outboxd_factory, test_id, kind):
    """The case's topic, table and daemon (streaming, status updates at
    the default interval)."""
    agg = "crash_%s" % test_id
    # 16 partitions and 64 keys: the test broker keeps only the latest
    # 5 MB of a partition, which 4 would outgrow
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 16)
    table = "public.outbox"
    if kind == "partitioned":
        table = make_table(pg, "pobx_%s" % test_id)
    d = outboxd_factory({"postgres": {"status_interval_ms": 1000},
                         "outbox": {"table": table, "timestamp_column": ""},
                         "log": {"level": "info"}})
    return agg, topic, table, d


def crash(d, pg, slot_name, pid):
    """kill -9, start again, wait for the new walsender; its pid."""
    d.kill9()
    d.start()
    return wait_streaming(pg, slot_name, 60, other_than=pid)


def report(load, d, kind, consumer, topic, feed, seconds):
    records = collect_all(consumer, topic, feed.ids, timeout=300)
    check_delivery(records, feed.ids, exactly_once=False)
    extra = sum(n - 1 for n in id_counts(records).values())
    rate = len(feed.ids) / seconds
    with open(RESULTS, "a") as f:
        f.write("| %s | %s | %s | %d | %.0f | %d | %d | %.0f | %.1f |\n" % (
            load, d.config["postgres"]["plugin"], kind, len(feed.ids), rate,
            KILLS, extra, extra / KILLS, 1000.0 * extra / KILLS / rate))


@pytest.mark.parametrize("kind", ["plain", "partitioned"])
def test_live(pg, broker, consumer, outboxd_factory, slot_name, test_id,
              kind):
    agg, topic, table, d = start_case(pg, broker, outboxd_factory, test_id, kind)
    pid = wait_streaming(pg, slot_name)
    rng = random.Random(test_id)
    feed = Feed(pg, agg, keys=64, table=table)
    started = time.monotonic()
    with Writer(feed, rows=ROWS, pause=PAUSE):
        time.sleep(2)
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.0, 3.0))
            pid = crash(d, pg, slot_name, pid)
        time.sleep(2)
    report("live", d, kind, consumer, topic, feed,
           time.monotonic() - started)


@pytest.mark.parametrize("kind", ["plain", "partitioned"])
def test_drain(pg, broker, consumer, outboxd_factory, slot_name, test_id,
               kind):
    agg, topic, table, d = start_case(pg, broker, outboxd_factory, test_id, kind)
    pid = wait_streaming(pg, slot_name)
    d.stop()
    feed = Feed(pg, agg, keys=64, table=table)
    for _ in range(DRAIN_TXNS):
        feed.commit(500)
    feed.close()
    rng = random.Random(test_id)
    started = time.monotonic()
    d.start()
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.5, 1.2))
        pid = crash(d, pg, slot_name, pid)
    wait_confirmed(pg, slot_name, pg.wal_lsn(), timeout=300)
    report("drain", d, kind, consumer, topic, feed,
           time.monotonic() - started)
