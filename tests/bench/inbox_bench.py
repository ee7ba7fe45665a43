#!/usr/bin/env python3
"""Benchmark of `outboxd inbox` (sql/README.md, "The inbox tables"): records per second into
the inbox table, and CPU per record, with inbox.batch_max 1, 100 and 500.

    python3 tests/bench/inbox_bench.py [--records N] [--build DIR]

Not part of the test run. One throwaway Postgres and one mock broker; N
records (JSON values of ~100 bytes, id and type headers) are produced once
to a 4-partition topic; then, for each batch size, the inbox tables are
emptied and outboxd inbox starts with a consumer group of its own and
drains the whole topic. The rate is N over the time from the first row's
transaction to the last one's (received_at), so the group join is not
counted; CPU is the daemon's user+system time over the run, per record.
Absolute numbers on a shared machine are noise; compare the batch sizes.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

TOPIC = "bench.inbox"


def cpu_seconds(pid):
    """User plus system CPU seconds of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(broker, n):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstraps, "linger.ms": 20,
                  "log_level": 3})
    for i in range(n):
        eid = str(uuid.uuid4())
        p.produce(TOPIC, key=("k-%d" % (i % 64)).encode(),
                  value=json.dumps({"n": i, "id": eid, "amount": i * 1.5,
                                    "status": "paid"}).encode(),
                  headers=[("id", eid.encode()), ("type", b"order.paid")])
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def run_one(pg, broker, build, tmp, n, batch):
    pg.sql("TRUNCATE public.inbox, public.outboxd_inbox_offsets", dbname="bench")
    cfg = {
        "inbox": {"conninfo": pg.conninfo("bench"), "topics": TOPIC,
                  "group": "bench-%d-%d" % (batch, time.time()),
                  "batch_max": batch},
        "kafka": {"bootstrap.servers": broker.bootstraps},
        "http": {"listen": ""},
        "log": {"level": "warning"},
    }
    d = harness.Outboxd(os.path.join(build, "outboxd"), cfg,
                        os.path.join(tmp, "b%d" % batch), command="inbox")
    try:
        def stored():
            r = pg.sql("SELECT coalesce(sum(next_offset), 0) FROM "
                       "public.outboxd_inbox_offsets", dbname="bench")
            return int(r[0][0]) >= n
        harness.wait_until(stored, 600, 0.2, "all records stored")
        cpu = cpu_seconds(d.pid)
        span = pg.sql("SELECT extract(epoch FROM max(received_at) - min(received_at)), "
                      "count(*) FROM public.inbox", dbname="bench")[0]
    finally:
        d.stop()
    seconds, rows = float(span[0]), int(span[1])
    assert rows == n, (rows, n)
    return seconds, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="outboxd-inbox-bench-")
    pg = harness.PgCluster(os.path.join(tmp, "pg")).start()
    broker = harness.MockBroker(os.path.join(args.build, "tests", "ob-mockbroker"))
    try:
        pg.create_db("bench")
        pg.run_file(os.path.join(ROOT, "sql", "inbox.sql"), "bench")
        broker.create_topic(TOPIC, 4)
        produce(broker, args.records)
        print("%-10s %12s %14s %16s" % ("batch_max", "seconds", "records/s",
                                         "CPU us/record"))
        for batch in (1, 100, 500):
            seconds, cpu = run_one(pg, broker, args.build, tmp, args.records, batch)
            print("%-10d %12.2f %14.0f %16.1f" % (
                batch, seconds, args.records / max(seconds, 1e-6),
                cpu * 1e6 / args.records), flush=True)
    finally:
        broker.stop()
        pg.destroy()


if __name__ == "__main__":
    main()
