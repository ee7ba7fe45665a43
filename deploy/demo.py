#!/usr/bin/env python3
"""The main job, on one machine: outboxd streaming from a throwaway
PostgreSQL 15 (with wal2json) to a local Kafka-protocol broker, with sample
outbox events written by a fake application and each Kafka record printed
as it arrives; and the other end, `outboxd inbox`, storing the same
records as rows of an inbox table in a second database, printed as they
land.

    bash deploy/demo.sh              # builds first, then runs this
    python3 deploy/demo.py [--events N] [--rate R]

It uses the test harness (tests/integration/harness.py) for the throwaway
Postgres cluster and the broker (librdkafka's mock cluster, a real Kafka
protocol server on loopback). Ctrl-C stops outboxd with SIGTERM (it flushes
and confirms), then the broker and the cluster, and deletes their files.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

TOPICS = ["outbox.event.order", "outbox.event.customer", "outbox.dlq"]


def write_events(pg, stop, rate):
    """The fake application: a domain change and its outbox row in one
    transaction (the row deleted right away, the table stays empty), and
    every fifth event a transactional logical message instead of a row."""
    conn = pg.connect()
    conn.autocommit = False
    n = 0
    while not stop.is_set():
        n += 1
        order = "order-%d" % random.randint(1, 5)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO demo_orders(id, total) VALUES (%s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total",
                        (order, n * 10))
            payload = json.dumps({"order": order, "total": n * 10, "n": n})
            headers = json.dumps({"traceparent": "00-%s-01" % uuid.uuid4().hex})
            if n % 5 == 0:
                message = {"id": str(uuid.uuid4()), "aggregate_type": "customer",
                           "aggregate_id": "customer-%d" % (n % 3),
                           "event_type": "customer.touched",
                           "payload": {"n": n}, "headers": {"source": "message"}}
                cur.execute("SELECT pg_logical_emit_message(true, 'outbox', %s)",
                            (json.dumps(message),))
            else:
                cur.execute("INSERT INTO outbox(aggregate_type, aggregate_id, "
                            "event_type, payload, headers) VALUES "
                            "('order', %s, 'order.updated', %s, %s) RETURNING id",
                            (order, payload, headers))
                (row_id,) = cur.fetchone()
                cur.execute("DELETE FROM outbox WHERE id = %s", (row_id,))
        conn.commit()
        stop.wait(1.0 / rate)
    conn.close()


def show(record):
    headers = ", ".join("%s=%s" % (k, v.decode("utf-8", "replace"))
                        for k, v in record["headers"])
    value = record["value"].decode("utf-8", "replace") if record["value"] else "(tombstone)"
    print("%-22s partition=%d offset=%-4d key=%-12s headers={%s}\n%24svalue=%s"
          % (record["topic"], record["partition"], record["offset"], record["key"],
             headers, "", value), flush=True)


class InboxRows:
    """Prints the rows of the demo's inbox table that were not shown yet."""

    def __init__(self, pg):
        self.pg = pg
        self.shown = 0

    def show_new(self):
        new = self.pg.sql("SELECT id, topic, type, payload::text FROM public.inbox "
                          "ORDER BY received_at, kafka_offset OFFSET %s", (self.shown,),
                          dbname="inbox_demo")
        for r in new:
            print("  inbox row  id=%s  %s  type=%s  payload=%s" % r, flush=True)
        self.shown += len(new)

    def wait_for(self, n, timeout):
        """Shows rows until n are in the table (or timeout seconds)."""
        deadline = time.monotonic() + timeout
        while self.shown < n and time.monotonic() < deadline:
            self.show_new()
            time.sleep(0.2)
        print("%d rows in the inbox table" % self.shown, flush=True)


def bind_error(address):
    """Why outboxd could not listen on address (host:port), as its bind
    would say it, or None when the address is free."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except (OSError, ValueError) as e:
            return getattr(e, "strerror", None) or str(e)
    return None


def step(what, fn):
    """Runs one cleanup step; a failure is printed, not raised, so the
    steps after it still run. Returns fn's result (None on failure)."""
    try:
        return fn()
    except Exception as e:
        print("demo: could not %s: %s" % (what, e), file=sys.stderr)
        return None


def clean_up(consumer, inbox, rows, seen, daemon, broker, pg):
    """Stops what the demo started (the parts that were started; some may
    have stopped already), each step on its own; returns outboxd's exit
    code (None when it was not started or did not exit)."""
    if consumer is not None:
        step("close the consumer", consumer.close)
    if inbox is not None:
        if rows is not None and inbox.running():
            step("show the last inbox rows", lambda: rows.wait_for(seen, 20))
        inbox.terminate()
        print("outboxd inbox exited with code %s" % step("stop outboxd inbox",
                                                         lambda: inbox.wait(40)),
              flush=True)
    rc = None
    if daemon is not None:
        daemon.terminate()
        rc = step("stop outboxd", lambda: daemon.wait(40))
        print("outboxd exited with code %s" % rc, flush=True)
    if broker is not None:
        step("stop the broker", broker.stop)
    if pg is not None:
        step("remove the PostgreSQL cluster", pg.destroy)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=0,
                    help="stop after this many records (default: until Ctrl-C)")
    ap.add_argument("--rate", type=float, default=2.0, help="events per second")
    ap.add_argument("--http", default="127.0.0.1:7187",
                    help="address of outboxd's /metrics, /healthz and /readyz "
                    "(default %(default)s, outboxd's own; '' for none)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    taken = args.http and bind_error(args.http)
    if taken:
        print("demo: outboxd cannot serve its metrics on %s (%s): choose a free "
              "address with --http HOST:PORT, or --http '' for none" % (args.http, taken),
              file=sys.stderr)
        return 2

    stop = threading.Event()
    # Ctrl-C (a terminal sends SIGINT to the whole process group: the
    # broker, the daemons and Postgres get it too), a closed terminal and
    # SIGTERM all end the loop below; the cleanup copes with whatever
    # already stopped.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    tmp = tempfile.mkdtemp(prefix="outboxd-demo-")
    pg = broker = daemon = inbox = consumer = None
    seen = 0
    rows = None
    failed = False
    try:
        print("starting a throwaway PostgreSQL 15 cluster ...", flush=True)
        pg = harness.PgCluster(os.path.join(tmp, "pg"))
        pg.start()
        pg.run_file(os.path.join(ROOT, "sql", "outbox.sql"))
        pg.sql("CREATE TABLE demo_orders(id text PRIMARY KEY, total int)")
        print("starting the local Kafka-protocol broker ...", flush=True)
        broker = harness.MockBroker(os.path.join(args.build, "tests", "ob-mockbroker"),
                                    logfile=os.path.join(tmp, "ob-mockbroker.log"))
        for t in TOPICS:
            broker.create_topic(t, 4)
        config = {
            "postgres": {"conninfo": pg.conninfo(), "slot": "outboxd_demo"},
            "kafka": {"bootstrap.servers": broker.bootstraps},
            "http": {"listen": args.http},
            "log": {"level": "info"},
        }
        daemon = harness.Outboxd(os.path.join(args.build, "outboxd"), config, tmp)
        daemon.wait_log(r"streaming from slot", timeout=30)
        print("outboxd is streaming (log: %s%s)"
              % (daemon.logfile, "; metrics: http://%s/metrics" % args.http
                 if args.http else ""), flush=True)
        pg.create_db("inbox_demo")
        pg.run_file(os.path.join(ROOT, "sql", "inbox.sql"), "inbox_demo")
        inbox = harness.Outboxd(os.path.join(args.build, "outboxd"), {
            "inbox": {"conninfo": pg.conninfo("inbox_demo"),
                      "topics": "outbox.event.order,outbox.event.customer",
                      "group": "outboxd-demo-inbox"},
            "kafka": {"bootstrap.servers": broker.bootstraps},
            "http": {"listen": ""},
            "log": {"level": "info"},
        }, os.path.join(tmp, "inbox"), command="inbox")
        print("outboxd inbox is storing both topics into inbox_demo.public.inbox "
              "(log: %s)" % inbox.logfile, flush=True)
        rows = InboxRows(pg)
        writer = threading.Thread(target=write_events, args=(pg, stop, args.rate),
                                  daemon=True)
        writer.start()
        print("writing sample events; records as they arrive in Kafka "
              "(Ctrl-C to stop):\n", flush=True)
        consumer = harness.Consumer(broker.bootstraps)
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        consumer._c.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                            for t in TOPICS for p in consumer.partitions(t)])
        while not stop.is_set():
            msg = consumer._c.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            key = msg.key()
            show({"topic": msg.topic(), "partition": msg.partition(),
                  "offset": msg.offset(), "key": key.decode() if key else None,
                  "value": msg.value(), "headers": msg.headers() or []})
            seen += 1
            rows.show_new()
            if args.events and seen >= args.events:
                break
    except Exception as e:
        if not stop.is_set():
            print("demo: %s" % e, file=sys.stderr)
            failed = True
    finally:
        stop.set()
        print("\nstopping ...", flush=True)
        rc = clean_up(consumer, inbox, rows, seen, daemon, broker, pg)
    if failed or rc != 0:
        print("demo: logs kept in %s" % tmp, file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d records shown" % seen)
    return 0 if not failed and rc == 0 and (not args.events or seen >= args.events) else 1


if __name__ == "__main__":
    sys.exit(main())
