#!/usr/bin/env python3
"""outboxd benchmark (tests/README.md, "Benchmark"); run it through tests/bench/run.sh.

Method. One throwaway PostgreSQL 15 cluster and one mock Kafka broker. For
each mode (table rows, then logical messages) one slot per (tool, round) is
created BEFORE the backlog is written, so every drain decodes the same WAL
from the same start. The tools: pg_recvlogical and outboxd with wal2json,
then (unless --skip-pgoutput) pg_recvlogical and outboxd with pgoutput, on
pgoutput slots created after the publication (sql/publication.sql, made
when the cluster is set up: pgoutput reads the publication as of each change
it decodes, so it must be older than the slot). Then the drains alternate:
round 1 of each tool in that order, round 2 of each, ...

- pg_recvlogical (the reference: the walsender's decode speed is the limit
  on one slot) runs with exactly the plugin options outboxd sends
  (src/pgrepl.c ob_pgrepl_start: wal2json's, or proto_version 1,
  publication_names, messages true), writes to /dev/null and stops by
  itself at --endpos = the WAL end recorded after the fill. Wall time is
  process start to exit; CPU and max RSS come from wait4's rusage.
- outboxd streams its slot to the broker; it is timed from process start
  until the slot's confirmed_flush_lsn reaches the same end LSN (polled every
  50 ms; outboxd confirms at most every 100 ms), then stopped with SIGTERM.
  CPU (utime+stime of all threads) and peak RSS (VmHWM) are read from /proc
  just before the SIGTERM.
- outboxd with pgoutput is measured the same way (postgres.plugin =
  pgoutput); its targets compare it with pg_recvlogical-wal2json (the
  decode limit of the default decoder), with outboxd-wal2json (CPU per
  event) and report it against pg_recvlogical-pgoutput, its own limit.
- In table mode each round also (unless --skip-backlog) lets outboxd
  publish the same rows as the backlog of a slot it creates (backlog_where
  = true: read with SQL from the new slot's snapshot, not decoded from the
  WAL), timed from process start until it logs the slot created, which is
  once every row is acknowledged: the backlog's publish rate next to the
  stream's drain rate.
- For all, the walsender's CPU (the server side of the slot, found through
  pg_replication_slots.active_pid) is sampled from /proc as well: the decode
  work is the same for both tools of a plugin, so it shows how much of a
  difference is the server's.

Latency: outboxd streams (with outbox.timestamp_column empty, so a record's
timestamp is its commit time) while a writer commits 50-row transactions on
a fixed schedule (rate E/s, synchronous_commit on: the walsender sends only
flushed WAL). Commit -> broker-ack latency comes from the
outboxd_publish_latency_seconds histogram, diffed over the window. Window A
has nothing else reading; in window B a Kafka consumer adds the commit ->
consume view (its clock minus the record timestamp) and its own CPU load.
Window B's consumer reads partition 0 of each topic (a quarter of the
events, which keys spread evenly) with fetch.wait.max.ms=1, for the test
broker's sake: librdkafka 2.0.2's mock cluster finds a fetch offset by
walking the partition's whole log (one entry per produced batch, up to
5 MB), for every partition of every FetchRequest, on the one thread that
also answers ProduceRequests, and it holds an empty fetch for its full
wait instead of answering when records arrive, as Kafka does. A consumer
of all 16 partitions with a 5 ms wait put that thread at 0.8-0.9 CPU s
per second and the produce acks behind it (ack p50 2.6 -> 13-18 ms).
The broker's CPU per second is reported for each window.

Sporadic phase (--first-starts N, --first-topics M, --sporadic K): latency
of events that arrive alone, where a periodic timer (librdkafka's 1 s topic
scan, a linger, a poll timeout) can show that a steady stream hides. (a)
After each of N fresh starts of outboxd on one slot, the first event to each
of M topics that exist on the broker but that the process has never
produced to; (b) then, on the last process, K single events to the
benchmark's four topics, which it has produced to by then. Each event is a
one-row transaction; commits follow each other at seeded random gaps of
200-500 ms on a schedule of their own, so they meet every phase of any
timer. A consumer assigned every partition involved, which has already read
back a marker record it produced into each (its fetch loop runs), gives
commit -> consumed (its clock minus the record timestamp); outboxd's
latency histogram, scraped as events arrive, gives commit -> ack. Targets:
p99 of (a) and of (b) <= window B's commit -> consumed p99 +
SPORADIC_ALLOWANCE_MS, and p99 of (a) <= p99 of (b) + SPORADIC_ALLOWANCE_MS
(a reference measured under the same load, which window B's p99 on a busy
machine is not).

--profile: one outboxd drain under `perf record --call-graph dwarf`,
reported by thread, by library, by function (self) and by outboxd function
(inclusive, so library time is charged to the outboxd code that called it).

Absolute numbers on a shared 2-core machine are noise; the ratios are what
to look at.
"""

import argparse
import glob
import math
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import harness  # noqa: E402
from harness import int_to_lsn, wait_until  # noqa: E402

PG_BIN = harness.PG_BIN
TXN_ROWS = 100
# Sporadic / first-event targets: p99 <= steady-state commit -> consumed
# p99 + this, and first-event p99 <= known-topic p99 + this. It covers what
# a lone event may pay that a steady stream does not (tests/README.md, "Benchmark"):
# a new topic's metadata round trip and maybe a connection to its
# partition's leader, the record timestamp's truncation to the ms, and one
# scheduler delay on 2 shared cores in a p99 that, with fewer than 100
# events, is the maximum. The 1 s topic-scan wait it must catch is 100x.
SPORADIC_ALLOWANCE_MS = 10.0
LAT_WARMUP = 3.0
# Window B's consumer: the partitions it reads of each topic, and its
# fetch.wait.max.ms (see the module docstring: the test broker's fetch).
B_PARTITIONS = 1
B_FETCH_WAIT_MS = 1
AGG_TYPES = ("order", "customer", "payment", "shipment")
# Partitions per topic (--partitions) and the broker's added round trip
# (--rtt-ms: each response held back that long, as a network would).
PARTITIONS = 4
RTT_MS = 0
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Exactly the options ob_pgrepl_start() passes with the default [outbox]
# settings (table public.outbox, message_prefix outbox).
WAL2JSON_OPTS = [
    ("format-version", "2"),
    ("include-xids", "1"),
    ("include-timestamp", "1"),
    ("include-lsn", "1"),
    ("include-types", "1"),
    ("include-typmod", "0"),
    ("include-transaction", "1"),
    ("add-tables", "public.outbox"),
    ("actions", "insert"),
    ("add-msg-prefixes", "outbox"),
]

# pgoutput: the publication sql/publication.sql creates (outboxd's default
# postgres.publication), made before any pgoutput slot (pgoutput reads the
# publication as of each change it decodes), and exactly the options
# ob_pgrepl_start() passes with postgres.plugin = pgoutput.
PUBLICATION = "outboxd"
PGOUTPUT_OPTS = [
    ("proto_version", "1"),
    ("publication_names", PUBLICATION),
    ("messages", "true"),
]

# The drains of a mode, in the order they run in each round: (key, label,
# client, plugin). The pgoutput pair runs only without --skip-pgoutput.
TOOLS = [
    ("recv", "pg_recvlogical, wal2json", "recv", "wal2json"),
    ("obd", "outboxd, wal2json", "obd", "wal2json"),
    ("precv", "pg_recvlogical, pgoutput", "recv", "pgoutput"),
    ("pobd", "outboxd, pgoutput", "obd", "pgoutput"),
]

PG_CONF = {
    "shared_buffers": "256MB",
    "wal_buffers": "16MB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "autovacuum": "off",            # no vacuum WAL in the middle of a drain
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "log_min_messages": "warning",
    "log_replication_commands": "off",
}

# Event generator, server side: g -> one event. Payload ~400 bytes of JSON,
# headers a small object (traceparent, tenant).
SETUP_SQL = """
CREATE OR REPLACE FUNCTION bench_agg_type(g bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT (ARRAY['order','customer','payment','shipment'])[1 + (g % 4)::int]
$$;
CREATE OR REPLACE FUNCTION bench_agg_id(g bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT bench_agg_type(g) || '-' || (g % 20000)
$$;
CREATE OR REPLACE FUNCTION bench_payload(g bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'order_id', 'ord-' || g,
    'customer_id', 'cust-' || (g % 5000),
    'status', 'created',
    'currency', 'EUR',
    'total', round((g % 10000) * 1.37, 2),
    'created_by', 'bench',
    'lines', jsonb_build_array(
       jsonb_build_object('sku', 'sku-' || (g % 997), 'qty', 1 + g % 5,
                          'price', 19.99),
       jsonb_build_object('sku', 'sku-' || (g % 991), 'qty', 1 + g % 3,
                          'price', 5.25)),
    'shipping', jsonb_build_object('street', md5(g::text),
                                   'city', 'Springfield',
                                   'zip', lpad((g % 99999)::text, 5, '0'),
                                   'country', 'DE'),
    'note', md5((g * 7)::text) || md5((g * 13)::text) || md5((g * 17)::text))
$$;
CREATE OR REPLACE FUNCTION bench_headers(g bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'traceparent', '00-' || md5(g::text) || '-'
                   || substr(md5((g + 1)::text), 1, 16) || '-01',
    'tenant', 'tenant-' || (g % 50))
$$;
"""

ROW_SELECT = """
SELECT bench_agg_type(g), bench_agg_id(g), bench_agg_type(g) || '.created',
       bench_payload(g), bench_headers(g)
FROM generate_series({lo}::bigint, {hi}::bigint) AS g"""

INSERT_ROWS = ("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
               "event_type, payload, headers)" + ROW_SELECT)

# One event as a one-row transaction (autocommit): aggregate type %s (so
# topic outbox.event.<type>), key 'lat-<g>' so the consumer can tell which
# event a record is.
INSERT_ONE = """
INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload,
                           headers)
SELECT %s, 'lat-' || g, %s || '.created', bench_payload(g), bench_headers(g)
FROM (SELECT %s::bigint AS g) AS s"""

EMIT_MESSAGES = """
PERFORM pg_logical_emit_message(true, 'outbox', json_build_object(
          'id', gen_random_uuid(),
          'aggregate_type', bench_agg_type(g),
          'aggregate_id', bench_agg_id(g),
          'event_type', bench_agg_type(g) || '.created',
          'payload', bench_payload(g),
          'headers', bench_headers(g))::text)
FROM generate_series({lo}::bigint, {hi}::bigint) AS g"""


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T_START, msg), flush=True)


T_START = time.monotonic()


# ---------------------------------------------------------------------------
# /proc


def proc_cpu(pid):
    """utime+stime in seconds of process pid (all its threads), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def machine_busy():
    """(busy jiffies, total jiffies) of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def proc_status_kb(pid, key):
    """A 'kB' field (VmHWM, VmRSS) of /proc/pid/status, or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def main_thread_wakeups(pid):
    """How often pid's main thread has gone to sleep (its voluntary
    context switches), or None: fewer for a backlog read in naps
    (test_backlog_is_read_in_naps asserts only a bound speed cannot
    break; the figure is measured here)."""
    try:
        with open("/proc/%d/task/%d/status" % (pid, pid)) as f:
            m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)$", f.read(),
                          re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


# ---------------------------------------------------------------------------
# metrics


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        return r.read().decode()


def parse_metrics(text):
    """-> (published total, {le: cumulative count}, sum, count)"""
    published = 0.0
    buckets = {}
    lsum = lcount = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("outboxd_events_published_total"):
            published += float(value)
        elif name.startswith("outboxd_publish_latency_seconds_bucket"):
            le = re.search(r'le="([^"]+)"', name).group(1)
            buckets[float("inf") if le == "+Inf" else float(le)] = float(value)
        elif name == "outboxd_publish_latency_seconds_sum":
            lsum = float(value)
        elif name == "outboxd_publish_latency_seconds_count":
            lcount = float(value)
    return published, buckets, lsum, lcount


def hist_quantile(q, cum):
    """Prometheus histogram_quantile over {upper bound: cumulative count}:
    linear interpolation inside the bucket; None if empty."""
    bounds = sorted(cum)
    total = cum[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b in bounds:
        c = cum[b]
        if c >= rank:
            if b == float("inf"):
                return prev_b
            if c == prev_c:
                return b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = b, c
    return bounds[-1]


def hist_max_bucket(cum):
    """Upper bound of the highest non-empty bucket."""
    bounds = sorted(cum)
    prev = 0.0
    top = None
    for b in bounds:
        if cum[b] > prev:
            top = b
        prev = cum[b]
    return top


# ---------------------------------------------------------------------------
# the rig


class Rig:
    def __init__(self, args):
        self.args = args
        self.build = Path(args.build)
        self.outboxd_bin = str(self.build / "outboxd")
        # OUTBOXD_BROKER_BIN: the test broker of another build (outboxd
        # built against another librdkafka, the broker kept on 2.0.2).
        self.broker_bin = os.environ.get(
            "OUTBOXD_BROKER_BIN", str(self.build / "tests" / "ob-mockbroker"))
        self.tmp = tempfile.mkdtemp(prefix="outboxd-bench-")
        os.chmod(self.tmp, 0o755)
        self.pg = None
        self.broker = None
        self.mon = None
        self.daemons = []

    def start(self):
        log("starting PostgreSQL 15 and the mock broker (tmp %s)" % self.tmp)
        self.pg = harness.PgCluster(os.path.join(self.tmp, "pg"),
                                    extra_conf=PG_CONF)
        self.pg.start()
        self.pg.run_file(str(ROOT / "sql" / "outbox.sql"))
        self.pg.sql(SETUP_SQL)
        if not self.args.skip_pgoutput:
            # Before any pgoutput slot exists, as a deployment must.
            self.pg.run_file(str(ROOT / "sql" / "publication.sql"))
        self.mon = self.pg.connect()
        self.broker = harness.MockBroker(
            self.broker_bin, brokers=3, partitions=PARTITIONS,
            logfile=os.path.join(self.tmp, "ob-mockbroker.log"))
        # A topic of many partitions takes the broker a while (it places
        # every partition's leader).
        for t in ["outbox.event.%s" % a for a in AGG_TYPES] + ["outbox.dlq"]:
            assert self.broker.cmd("topic %s %d" % (t, PARTITIONS), timeout=120) == "ok"
        if RTT_MS:
            assert self.broker.cmd("rtt all %d" % RTT_MS) == "ok"

    def close(self):
        for d in self.daemons:
            try:
                d.stop(10)
            except Exception:
                pass
        if self.mon is not None:
            self.mon.close()
        if self.broker is not None:
            self.broker.stop()
        if self.pg is not None:
            if self.args.keep:
                self.pg.stop()
                log("kept %s and %s" % (self.tmp, self.pg.base))
            else:
                self.pg.destroy()
        if not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- SQL helpers ----------------------------------------------------------

    def q1(self, sql, params=None):
        with self.mon.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone()

    def wal_insert_lsn(self):
        return int(self.q1("SELECT pg_current_wal_insert_lsn() - '0/0'")[0])

    def settled_end_lsn(self):
        """The WAL end once everything written is flushed (the walsender only
        sends flushed WAL; synchronous_commit is off)."""
        end = self.wal_insert_lsn()
        wait_until(lambda: int(self.q1(
            "SELECT pg_current_wal_flush_lsn() - '0/0'")[0]) >= end,
            30, 0.05, "WAL flushed")
        return end

    def slot_state(self, slot):
        """(active_pid or None, confirmed_flush_lsn as int)"""
        row = self.q1("SELECT active_pid, confirmed_flush_lsn - '0/0' "
                      "FROM pg_replication_slots WHERE slot_name = %s",
                      (slot,))
        if row is None:
            raise harness.HarnessError("slot %s vanished" % slot)
        return row[0], int(row[1]) if row[1] is not None else 0

    def create_slots(self, names, plugin="wal2json"):
        for n in names:
            self.q1("SELECT pg_create_logical_replication_slot(%s, %s)",
                    (n, plugin))

    def drop_slots(self, names):
        for n in names:
            try:
                self.pg.drop_slot(n)
            except Exception as e:
                log("could not drop slot %s: %s" % (n, e))

    def fill(self, mode, n, base):
        """Writes n events (g = base+1 .. base+n) in transactions of
        TXN_ROWS, server-side, one COMMIT per transaction. Returns
        (seconds, start lsn, end lsn)."""
        start = self.wal_insert_lsn()
        t0 = time.monotonic()
        stmt = INSERT_ROWS if mode == "table" else EMIT_MESSAGES
        body = stmt.format(lo="b * %d + 1" % TXN_ROWS,
                           hi="b * %d + %d" % (TXN_ROWS, TXN_ROWS))
        chunk = 100 * TXN_ROWS      # one DO block per 100 transactions
        done = 0
        conn = self.pg.connect()
        try:
            with conn.cursor() as cur:
                # Only the fill skips the wait for WAL flush at commit; the
                # latency writer commits with the server default (on).
                cur.execute("SET synchronous_commit = off")
                while done < n:
                    m = min(chunk, n - done)
                    first = (base + done) // TXN_ROWS
                    ntx = (m + TXN_ROWS - 1) // TXN_ROWS
                    cur.execute(
                        "DO $bench$ DECLARE b bigint; BEGIN "
                        "FOR b IN %d..%d LOOP %s; COMMIT; END LOOP; "
                        "END $bench$" % (first, first + ntx - 1, body))
                    done += ntx * TXN_ROWS
        finally:
            conn.close()
        end = self.settled_end_lsn()
        return time.monotonic() - t0, start, end

    # -- the drains -----------------------------------------------------------

    def _sample_walsender(self, slot, ws):
        """Reads the slot; records the CPU seconds of the walsender serving
        it (summed over walsenders if the client reconnected) in ws["cpu"].
        Returns the confirmed_flush_lsn."""
        pid, confirmed = self.slot_state(slot)
        if pid:
            cpu = proc_cpu(pid)
            if cpu is not None:
                ws.setdefault("by_pid", {})[pid] = cpu
                ws["cpu"] = sum(ws["by_pid"].values())
        return confirmed

    def drain_recvlogical(self, slot, end, n, plugin="wal2json"):
        argv = [os.path.join(PG_BIN, "pg_recvlogical"),
                "-d", self.pg.conninfo(), "--slot", slot, "--start",
                "--plugin", plugin,
                "--no-loop", "-f", "-", "-E", int_to_lsn(end)]
        for k, v in (PGOUTPUT_OPTS if plugin == "pgoutput"
                     else WAL2JSON_OPTS):
            argv += ["-o", "%s=%s" % (k, v)]
        errlog = open(os.path.join(self.tmp, "recvlogical-%s.log" % slot),
                      "wb")
        ws = {}
        done = {}
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=errlog)

        def waiter():
            _, status, ru = os.wait4(p.pid, 0)
            done["t"] = time.monotonic()
            done["status"] = status
            done["ru"] = ru

        th = threading.Thread(target=waiter, daemon=True)
        th.start()
        deadline = t0 + 1800
        while th.is_alive() and time.monotonic() < deadline:
            self._sample_walsender(slot, ws)
            th.join(0.05)
        if th.is_alive():
            p.kill()
            th.join()
        p.returncode = os.waitstatus_to_exitcode(done["status"])
        errlog.close()
        if p.returncode != 0:
            raise harness.HarnessError(
                "pg_recvlogical exited %d:\n%s" % (p.returncode, harness._tail(
                    errlog.name)))
        ru = done["ru"]
        wall = done["t"] - t0
        return {"wall": wall, "eps": n / wall,
                "cpu": ru.ru_utime + ru.ru_stime,
                "rss_mb": ru.ru_maxrss / 1024.0,
                "ws_cpu": ws.get("cpu"), "published": None,
                "broker_cpu": None}

    def outboxd_config(self, slot, http_port, extra_outbox=None,
                       plugin="wal2json"):
        outbox = {"table": "public.outbox"}
        outbox.update(extra_outbox or {})
        pg = {"conninfo": self.pg.conninfo(), "slot": slot,
              "create_slot": False, "plugin": plugin}
        if plugin == "pgoutput":
            pg["publication"] = PUBLICATION
        return {
            "postgres": pg,
            "outbox": outbox,
            "kafka": dict([("bootstrap.servers", self.broker.bootstraps)] + [
                kv.split("=", 1) for kv in
                os.environ.get("OUTBOXD_BENCH_KAFKA", "").split(",") if kv]),
            "http": {"listen": "127.0.0.1:%d" % http_port},
            "log": {"level": "info"},
        }

    def drain_outboxd(self, slot, end, n, perf_out=None, backlog=False,
                      plugin="wal2json"):
        """outboxd streaming slot until it is confirmed at end; or, with
        backlog, publishing the same rows as the backlog of a slot it
        creates (backlog_where = true: read with SQL from the new slot's
        own snapshot) until it logs the slot created, which is once every
        row is acknowledged."""
        port = harness.free_port()
        cfg = self.outboxd_config(
            slot, port, {"backlog_where": "true"} if backlog else None,
            plugin)
        cfg["postgres"]["create_slot"] = backlog
        ws = {}
        perf = None
        t0 = time.monotonic()
        d = harness.Outboxd(self.outboxd_bin, cfg,
                            os.path.join(self.tmp, "outboxd"))
        self.daemons.append(d)
        if perf_out:
            # perf follows the threads there are when it attaches: wait
            # for librdkafka's (the producer exists before the stream).
            wait_until(lambda: any(
                open(os.path.join(t, "comm")).read().startswith("rdk:broker")
                for t in glob.glob("/proc/%d/task/*" % d.pid)), 30, 0.01,
                "librdkafka's threads started")
            perf = subprocess.Popen(
                ["perf", "record", "-q", "-F", "1999", "--call-graph",
                 "dwarf,16384",
                 "-o", perf_out, "-p", str(d.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cpu = hwm = None
        broker_cpu0 = proc_cpu(self.broker.proc.pid)
        batches0 = self.broker_batches()
        deadline = t0 + 1800
        while True:
            if backlog:
                done = "created replication slot" in d.log_text()
            else:
                done = self._sample_walsender(slot, ws) >= end
            now = time.monotonic()
            if done:
                t1 = now
                break
            if not d.running():
                raise harness.HarnessError(
                    "outboxd exited (rc=%s) during the drain; log:\n%s"
                    % (d.proc.returncode, d.log_tail()))
            if now > deadline:
                raise harness.HarnessError("outboxd drain timed out; log:\n%s"
                                           % d.log_tail())
            c = proc_cpu(d.pid)
            if c is not None:
                cpu = c
            time.sleep(0.05)
        c = proc_cpu(d.pid)
        cpu = c if c is not None else cpu
        hwm = proc_status_kb(d.pid, "VmHWM")
        wakeups = main_thread_wakeups(d.pid)
        broker_cpu = proc_cpu(self.broker.proc.pid) - broker_cpu0
        batches = self.broker_batches() - batches0
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        try:
            text = scrape(port)
            published = parse_metrics(text)[0]
            if backlog:
                published = float(re.search(
                    r"^outboxd_backlog_events_total (\S+)$", text,
                    re.M).group(1))
        except OSError:
            published = None
        rc = d.stop(40)
        self.daemons.remove(d)
        if rc != 0:
            log("WARNING: outboxd exited %s; log tail:\n%s"
                % (rc, d.log_tail(3000)))
        wall = t1 - t0
        return {"wall": wall, "eps": n / wall, "cpu": cpu,
                "rss_mb": hwm / 1024.0 if hwm else None,
                "ws_cpu": ws.get("cpu"), "published": published,
                "broker_cpu": broker_cpu, "batches": batches,
                "wakeups": wakeups}

    def broker_batches(self):
        """Record batches the broker took for the event topics so far:
        a backlog drained through the late client (linger.ms 5) needs
        fewer than through the fresh one; how many fewer depends on the
        machine's speed, so it is measured here, not asserted in a test."""
        return sum(int(self.broker.cmd("batches outbox.event.%s" % t)
                       .split()[1]) for t in AGG_TYPES)

    # -- a whole mode ---------------------------------------------------------

    def run_mode(self, mode, n, rounds, base):
        tag = "t" if mode == "table" else "m"
        tools = [t for t in TOOLS
                 if t[3] == "wal2json" or not self.args.skip_pgoutput]
        slots = {(key, r): "bench_%s_%s%d" % (tag, key, r)
                 for r in range(1, rounds + 1) for key, _, _, _ in tools}
        for key, _, _, plugin in tools:
            self.create_slots([slots[(key, r)]
                               for r in range(1, rounds + 1)], plugin)
        log("%s mode: filling %d events in transactions of %d"
            % (mode, n, TXN_ROWS))
        secs, start, end = self.fill(mode, n, base)
        walmb = (end - start) / 1048576.0
        log("%s mode: filled in %.1fs (%.0f events/s), %.1f MB of WAL, end "
            "LSN %s" % (mode, secs, n / secs, walmb, int_to_lsn(end)))
        res = {key: [] for key, _, _, _ in tools}
        res.update({"bl": [], "wal_mb": walmb, "fill_s": secs, "n": n})
        backlog = mode == "table" and not self.args.skip_backlog
        for r in range(1, rounds + 1):
            for key, label, client, plugin in tools:
                if client == "recv":
                    x = self.drain_recvlogical(slots[(key, r)], end, n,
                                               plugin)
                    log("%s round %d %-25s %.2fs %.0f ev/s cpu %.2fs "
                        "(walsender %.2fs)" % (
                            mode, r, label + ":", x["wall"], x["eps"],
                            x["cpu"], x["ws_cpu"] or 0))
                else:
                    x = self.drain_outboxd(slots[(key, r)], end, n,
                                           plugin=plugin)
                    log("%s round %d %-25s %.2fs %.0f ev/s cpu %.2fs "
                        "(walsender %.2fs, broker %.2fs) rss %.1f MB "
                        "published %s, %.1f batches and %.1f main-thread "
                        "wake-ups per 1,000 events" % (
                            mode, r, label + ":", x["wall"], x["eps"],
                            x["cpu"] or 0, x["ws_cpu"] or 0,
                            x["broker_cpu"] or 0, x["rss_mb"] or 0,
                            x["published"], 1000.0 * x["batches"] / n,
                            1000.0 * (x["wakeups"] or 0) / n))
                    if (x["published"] is not None
                            and int(x["published"]) != n):
                        log("WARNING: outboxd published %d events, expected "
                            "%d" % (x["published"], n))
                res[key].append(x)
            if not backlog:
                continue
            # The same rows once more, as the backlog of a new slot.
            bl_slot = "bench_t_bl%d" % r
            x = self.drain_outboxd(bl_slot, 0, n, backlog=True)
            self.drop_slots([bl_slot])
            res["bl"].append(x)
            log("%s round %d outboxd backlog: %.2fs %.0f ev/s cpu %.2fs "
                "(broker %.2fs) rss %.1f MB published %s, %.1f batches per "
                "1,000 events"
                % (mode, r, x["wall"], x["eps"], x["cpu"] or 0,
                   x["broker_cpu"] or 0, x["rss_mb"] or 0, x["published"],
                   1000.0 * x["batches"] / n))
        self.drop_slots(slots.values())
        return res

    # -- latency ----------------------------------------------------------------

    def run_latency(self, rate, seconds, base):
        """Two windows on one outboxd: A with nothing else reading, B with a
        Kafka consumer measuring commit -> consume as well."""
        slot = "bench_latency"
        self.create_slots([slot])
        port = harness.free_port()
        cfg = self.outboxd_config(slot, port, {"timestamp_column": ""})
        d = harness.Outboxd(self.outboxd_bin, cfg,
                            os.path.join(self.tmp, "outboxd"))
        self.daemons.append(d)
        wait_until(lambda: self.slot_state(slot)[0], 30, 0.1,
                   "outboxd streaming")

        def ready():
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/readyz" % port, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(ready, 30, 0.1, "outboxd ready")
        cpu0 = proc_cpu(d.pid)
        res = {}
        g = base
        for name, with_consumer in (("A", False), ("B", True)):
            res[name], g = self._latency_window(slot, port, rate, seconds, g,
                                                with_consumer)
        cpu = proc_cpu(d.pid) - cpu0
        hwm = proc_status_kb(d.pid, "VmHWM")
        d.stop(40)
        self.daemons.remove(d)
        self.drop_slots([slot])
        res["cpu_per_s"] = cpu / (res["A"]["seconds"] + res["B"]["seconds"]
                                  + 2 * LAT_WARMUP)
        res["rss_mb"] = hwm / 1024.0 if hwm else None
        res["rate"] = rate
        res["seconds"] = seconds
        return res

    def _latency_window(self, slot, port, rate, seconds, g, with_consumer):
        cons = None
        samples = []
        stop = threading.Event()
        window = {}
        cth = None
        if with_consumer:
            from confluent_kafka import Consumer, TopicPartition, OFFSET_END
            cons = Consumer({
                "bootstrap.servers": self.broker.bootstraps,
                "group.id": "outboxd-bench", "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": B_FETCH_WAIT_MS,
                "fetch.error.backoff.ms": 5, "log_level": 3})
            cons.assign([TopicPartition("outbox.event.%s" % t, p, OFFSET_END)
                         for t in AGG_TYPES for p in range(B_PARTITIONS)])

            def consume():
                while not stop.is_set():
                    m = cons.poll(0.1)
                    if m is None:
                        continue
                    # poll returns at the first record; take what else is
                    # there without waiting.
                    msgs = [m] + cons.consume(1000, 0)
                    now_ms = time.time() * 1000.0
                    w0 = window.get("t0_ms")
                    for m in msgs:
                        if m.error() is not None:
                            continue
                        ts = m.timestamp()[1]
                        if w0 is not None and ts >= w0:
                            samples.append(now_ms - ts)

            cth = threading.Thread(target=consume, daemon=True)
            cth.start()

        per_txn = 50
        interval = per_txn / float(rate)
        wconn = self.pg.connect()
        wcur = wconn.cursor()
        rows = 0
        behind_max = 0.0
        log("latency window %s: writing %d events/s (%d-row transactions "
            "every %.0f ms) for %.0fs + %.0fs warm-up%s"
            % ("B" if with_consumer else "A", rate, per_txn, interval * 1000,
               seconds, LAT_WARMUP,
               ", with a Kafka consumer" if with_consumer else ""))
        t_start = time.monotonic()
        next_t = t_start
        before = None
        busy0 = None
        broker0 = None
        t_w0 = None
        while True:
            now = time.monotonic()
            if before is None and now - t_start >= LAT_WARMUP:
                before = parse_metrics(scrape(port))
                busy0 = machine_busy()
                broker0 = proc_cpu(self.broker.proc.pid)
                t_w0 = time.monotonic()
                window["t0_ms"] = time.time() * 1000.0
                rows = 0
            if t_w0 is not None and now - t_w0 >= seconds:
                break
            if now < next_t:
                time.sleep(next_t - now)
                continue
            if t_w0 is not None:
                behind_max = max(behind_max, now - next_t)
            wcur.execute(INSERT_ROWS.format(lo=g + 1, hi=g + per_txn))
            g += per_txn
            rows += per_txn
            next_t += interval
        t_w1 = time.monotonic()
        busy1 = machine_busy()
        broker1 = proc_cpu(self.broker.proc.pid)
        achieved = rows / (t_w1 - t_w0)
        end = self.settled_end_lsn()
        wait_until(lambda: self.slot_state(slot)[1] >= end, 60, 0.05,
                   "outboxd caught up")
        time.sleep(0.5)   # last consumer fetches
        after = parse_metrics(scrape(port))
        stop.set()
        if cth is not None:
            cth.join(5)
            cons.close()
        wconn.close()

        cum = {b: after[1].get(b, 0) - before[1].get(b, 0) for b in after[1]}
        count = after[3] - before[3]
        mean = (after[2] - before[2]) / count if count else None
        samples.sort()

        def pct(q):
            if not samples:
                return None
            return samples[min(len(samples) - 1, int(q * len(samples)))]
        r = {
            "achieved": achieved, "seconds": t_w1 - t_w0,
            "behind_max_ms": behind_max * 1000, "hist_count": count,
            "p50": hist_quantile(0.5, cum), "p99": hist_quantile(0.99, cum),
            "max_bucket": hist_max_bucket(cum), "mean": mean,
            "consumer": with_consumer,
            "busy": (busy1[0] - busy0[0]) / float(busy1[1] - busy0[1]),
            "broker_cpu_per_s": (broker1 - broker0) / (t_w1 - t_w0),
            "cons_count": len(samples), "cons_p50": pct(0.5),
            "cons_p99": pct(0.99),
            "cons_max": samples[-1] if samples else None,
        }
        log("window: %.0f ev/s, ack p50 %s p99 %s ms; consumed p50 %s p99 %s;"
            " broker %.2f CPU s/s"
            % (achieved, fmt(r["p50"] and r["p50"] * 1000, "%.1f"),
               fmt(r["p99"] and r["p99"] * 1000, "%.1f"),
               fmt(r["cons_p50"], "%.1f"), fmt(r["cons_p99"], "%.1f"),
               r["broker_cpu_per_s"]))
        return r, g

    # -- sporadic and first-event latency -----------------------------------

    def run_sporadic(self, starts, ntopics, k, seed, base):
        """(a) For each of `starts` fresh starts of outboxd, the first event
        to each of `ntopics` topics that exist on the broker but that this
        outboxd process has never produced to; (b) then, on the last
        process, k single events to topics it has already produced to.
        Every event is a one-row transaction; commits follow each other at
        seeded random gaps of 200-500 ms, a schedule of its own (a commit
        does not wait for the previous event to arrive), so events fall at
        every phase of any periodic timer in outboxd or librdkafka.
        Commit -> consumed: a consumer that already reads every partition
        involved (it has read back a marker record in each). Commit -> ack:
        the outboxd_publish_latency_seconds histogram, scraped as events
        arrive (see _collect_acks)."""
        rng = random.Random(seed)
        slot = "bench_sporadic"
        new = [["bench_s%d_t%d" % (s + 1, j + 1) for j in range(ntopics)]
               for s in range(starts)]
        for aggs in new:
            for a in aggs:
                self.broker.create_topic("outbox.event." + a, PARTITIONS)
        topics = ["outbox.event." + a for a in AGG_TYPES] + [
            "outbox.event." + a for aggs in new for a in aggs]
        log("sporadic: %d fresh starts x %d new topics, then %d single "
            "events to known topics (seed %d); consumer on %d partitions"
            % (starts, ntopics, k, seed, len(topics) * PARTITIONS))
        cons = MarkerConsumer(self.broker.bootstraps, topics)
        self.create_slots([slot])
        wconn = self.pg.connect()
        wcur = wconn.cursor()
        r = {"first": [], "first_ack": [], "sporadic": [], "sporadic_ack": [],
             "starts": starts, "topics": ntopics, "k": k, "seed": seed}
        ev = {"g": base}
        busy0 = machine_busy()
        d = None
        try:
            for s in range(starts):
                d, port = self._start_streaming(slot)
                state = {"m": parse_metrics(scrape(port))}
                xs, acks = self._series(wcur, cons, port, state, new[s], rng,
                                        ev)
                for x in xs:
                    x["start"] = s + 1
                r["first"] += xs
                r["first_ack"] += acks
                log("sporadic: start %d, first event per topic, commit -> "
                    "consumed ms: %s" % (s + 1, ", ".join(
                        fmt(x["consumed"], "%.0f") for x in xs)))
                if s < starts - 1:
                    self._stop_streaming(d, slot)
                    d = None
            # (b): make the benchmark's usual topics known to this process
            # (not measured), then the single events.
            self._series(wcur, cons, port, state, AGG_TYPES, rng, ev)
            r["sporadic"], r["sporadic_ack"] = self._series(
                wcur, cons, port, state,
                [rng.choice(AGG_TYPES) for _ in range(k)], rng, ev)
            busy1 = machine_busy()
            self._stop_streaming(d, slot)
            d = None
        finally:
            if d is not None:
                d.stop(40)
                self.daemons.remove(d)
            cons.close()
            wconn.close()
        self.drop_slots([slot])
        r["busy"] = (busy1[0] - busy0[0]) / float(busy1[1] - busy0[1])
        for name in ("first", "sporadic"):
            xs = [x["consumed"] for x in r[name]]
            acks = r[name + "_ack"]
            log("sporadic: %s: commit -> consumed p50 %s p99 %s max %s ms; "
                "commit -> ack p50 %s p99 %s max %s ms; %d lost"
                % ((name,) + tuple(fmt(nearest_rank(q, xs), "%.1f")
                                   for q in (0.5, 0.99, 1.0))
                   + tuple(fmt_ack(q, acks, len(xs))
                           for q in (0.5, 0.99, 1.0))
                   + (sum(1 for x in xs if x is None),)))
        return r

    def _start_streaming(self, slot):
        """A fresh outboxd on slot (record timestamp = commit time), once it
        streams and /readyz answers 200. -> (Outboxd, http port)"""
        port = harness.free_port()
        cfg = self.outboxd_config(slot, port, {"timestamp_column": ""})
        d = harness.Outboxd(self.outboxd_bin, cfg,
                            os.path.join(self.tmp, "outboxd"))
        self.daemons.append(d)
        wait_until(lambda: self.slot_state(slot)[0], 30, 0.05,
                   "outboxd streaming")

        def ready():
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/readyz" % port, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(ready, 30, 0.05, "outboxd ready")
        return d, port

    def _stop_streaming(self, d, slot):
        """Stops d once the slot is confirmed past everything written, so
        the next start re-publishes nothing."""
        end = self.settled_end_lsn()
        wait_until(lambda: self.slot_state(slot)[1] >= end, 60, 0.05,
                   "outboxd caught up")
        rc = d.stop(40)
        self.daemons.remove(d)
        if rc != 0:
            log("WARNING: outboxd exited %s; log tail:\n%s"
                % (rc, d.log_tail(3000)))

    def _series(self, wcur, cons, port, state, aggs, rng, ev):
        """One one-row event to outbox.event.<agg> for each agg in turn, the
        first 200-500 ms from now and each next one 200-500 ms after the
        previous one was due. Returns once every event arrived at the
        consumer (or 10 s after the last commit) and outboxd counted their
        acknowledgements. -> ([{"topic", "consumed": ms or None if lost}],
        acks as _collect_acks makes them)"""
        events, acks, pending = [], [], {}
        state["base"] = state["m"][3]
        i = arrived = 0
        due = time.monotonic() + rng.uniform(0.2, 0.5)
        deadline = None
        while i < len(aggs) or pending:
            now = time.monotonic()
            if i < len(aggs) and now >= due:
                ev["g"] += 1
                x = {"topic": aggs[i], "consumed": None}
                events.append(x)
                pending["lat-%d" % ev["g"]] = x
                wcur.execute(INSERT_ONE, (aggs[i], aggs[i], ev["g"]))
                i += 1
                due += rng.uniform(0.2, 0.5)
                if i == len(aggs):
                    deadline = time.monotonic() + 10.0
                continue
            if deadline is not None and now >= deadline:
                for key, x in pending.items():
                    log("WARNING: event %s to outbox.event.%s not consumed "
                        "within 10 s" % (key, x["topic"]))
                break
            got = cons.wait_any(list(pending), (due if deadline is None
                                                else deadline) - now)
            for key, (t_ms, ts) in got:
                pending.pop(key)["consumed"] = t_ms - ts
            if got:
                arrived += len(got)
                self._collect_acks(port, state, arrived, acks)
        return events, acks

    @staticmethod
    def _collect_acks(port, state, arrived, acks):
        """Scrapes /metrics until outboxd counted at least `arrived`
        acknowledgements since state["base"], the count when the series
        began (a record reaches the consumer about when its ack reaches
        outboxd), then appends the new ones to acks as (ms, exact): exact
        when the histogram's count went up by one since the last scrape
        (the sum's increase is that event's latency), else each one's
        bucket upper bound, exact False."""
        m0 = state["m"]
        base = state["base"]
        deadline = time.monotonic() + 5.0
        while True:
            m1 = parse_metrics(scrape(port))
            if m1[3] - base >= arrived or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        n = int(m1[3] - m0[3])
        if n == 1:
            acks.append(((m1[2] - m0[2]) * 1000.0, True))
        elif n > 1:
            prev = 0
            for b in sorted(m1[1]):
                c = int(m1[1][b] - m0[1].get(b, 0))
                acks += [(b * 1000.0, False)] * (c - prev)
                prev = c
        state["m"] = m1


class MarkerConsumer:
    """A Kafka consumer on every partition of the given topics, from their
    current ends. Built only once it has read back a marker record it
    produced into each partition: its fetch loop is running everywhere
    before anything is measured. Records keyed 'lat-...' are noted with the
    consumer's clock (ms) when they were handed over and their timestamp."""

    def __init__(self, bootstraps, topics):
        from confluent_kafka import Consumer, Producer, TopicPartition
        self.cons = Consumer({
            "bootstrap.servers": bootstraps,
            "group.id": "outboxd-bench-sporadic", "enable.auto.commit": False,
            "enable.partition.eof": False, "fetch.wait.max.ms": 5,
            "fetch.error.backoff.ms": 5, "log_level": 3})
        parts = []
        for t in topics:
            for p in range(PARTITIONS):
                _, hi = self.cons.get_watermark_offsets(
                    TopicPartition(t, p), timeout=10)
                parts.append(TopicPartition(t, p, hi))
        self.cons.assign(parts)
        self.arrivals = {}
        self.markers = set()
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()
        prod = Producer({"bootstrap.servers": bootstraps, "linger.ms": 0,
                         "log_level": 3})
        for tp in parts:
            prod.produce(tp.topic, b"marker", b"marker",
                         partition=tp.partition)
        if prod.flush(30) != 0:
            raise harness.HarnessError("marker records not delivered")
        want = {(tp.topic, tp.partition) for tp in parts}
        with self.cond:
            if not self.cond.wait_for(lambda: self.markers >= want, 30):
                raise harness.HarnessError(
                    "consumer read no marker from %d partitions"
                    % len(want - self.markers))

    def _run(self):
        while not self.stop.is_set():
            m = self.cons.poll(0.1)
            if m is None:
                continue
            msgs = [m] + self.cons.consume(1000, 0)
            now_ms = time.time() * 1000.0
            with self.cond:
                for m in msgs:
                    if m.error() is not None:
                        continue
                    k = m.key() or b""
                    if k == b"marker":
                        self.markers.add((m.topic(), m.partition()))
                    elif k.startswith(b"lat-"):
                        self.arrivals[k.decode()] = (now_ms,
                                                     m.timestamp()[1])
                self.cond.notify_all()

    def wait_any(self, keys, timeout):
        """Waits up to timeout s until one of keys has arrived. -> [(key,
        (consumer clock ms, record timestamp ms))] of those that have."""
        with self.cond:
            self.cond.wait_for(lambda: any(k in self.arrivals for k in keys),
                               max(0.0, timeout))
            return [(k, self.arrivals[k]) for k in keys if k in self.arrivals]

    def close(self):
        self.stop.set()
        self.th.join(5)
        self.cons.close()


# ---------------------------------------------------------------------------
# report


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def nearest_rank(q, xs):
    """The q-quantile of xs by nearest rank (the smallest value with at
    least q of the values at or below it): with fewer than 100 values, p99
    is the maximum. None if xs has no value; a lost event (None) counts as
    larger than any value."""
    if not xs:
        return None
    vals = sorted(x for x in xs if x is not None)
    i = max(0, math.ceil(q * len(xs) - 1e-9) - 1)
    return vals[i] if i < len(vals) else None


def ack_rank(q, acks, n):
    """nearest_rank over (ms, exact) acks of n events (missing ones count
    as larger than any) -> (ms or None, exact)."""
    vals = sorted(acks) + [(None, True)] * max(0, n - len(acks))
    if not vals:
        return None, True
    return vals[max(0, math.ceil(q * len(vals) - 1e-9) - 1)]


def fmt_ack(q, acks, n):
    v, exact = ack_rank(q, acks, n)
    return fmt(v, "%.1f") if exact else "≤ %g" % v


def fmt_lost(v, spec="%.1f"):
    """A commit -> consumed figure; None there means an event never
    arrived."""
    return "lost" if v is None else spec % v


def fmt(v, spec="%.2f"):
    return "n/a" if v is None else spec % v


def machine_info(pg, args_build):
    info = {}
    info["nproc"] = os.cpu_count()
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu"] = model
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["mem"] = "%.1f GB" % (kb / 1048576.0)
    except (OSError, ValueError):
        info["mem"] = "?"
    info["kernel"] = platform.release()
    info["postgres"] = pg.sql("SHOW server_version")[0][0]

    def dpkg(p):
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", p],
                           capture_output=True, text=True)
        return r.stdout.strip() or "?"
    info["wal2json"] = dpkg("postgresql-15-wal2json")
    info["librdkafka"] = dpkg("librdkafka1")
    r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always",
                        "--dirty"], capture_output=True, text=True)
    info["commit"] = r.stdout.strip() or "?"
    build = Path(args_build).resolve()
    if build != (ROOT / "build-release").resolve():
        # The commit above is the benchmark's tree, not necessarily the
        # binary's: name the binary too.
        info["commit"] += ", binary from %s" % build
    return info


def mode_table(name, res):
    n = res["n"]
    tools = [(key, label) for key, label, _, _ in TOOLS if res.get(key)]
    out = ["### Drain, %s mode: %d events, %d rounds (%.1f MB of WAL)"
           % (name, n, len(res["recv"]), res["wal_mb"]), ""]
    out.append("| tool | wall s (median) | events/s | client CPU s | "
               "client CPU µs/event | walsender CPU s | broker CPU s | "
               "peak RSS MB (max) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    if res["bl"]:
        tools.append(("bl", "outboxd, the same rows as a backlog (SQL)"))
    for tool, label in tools:
        xs = res[tool]
        cpu = med([x["cpu"] for x in xs])
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt(med([x["wall"] for x in xs])),
            fmt(med([x["eps"] for x in xs]), "%.0f"),
            fmt(cpu), fmt(cpu and cpu * 1e6 / n, "%.1f"),
            fmt(med([x["ws_cpu"] for x in xs])),
            fmt(med([x["broker_cpu"] for x in xs])),
            fmt(max([x["rss_mb"] or 0 for x in xs]), "%.1f")))
    for a, b in RATIOS:
        if not (res.get(a) and res.get(b)):
            continue
        out.append("| **%s / %s** | throughput ×%s | | CPU ×%s | | | | |" % (
            tool_label(b), tool_label(a),
            fmt(med(ratio_series(res, "wall", a, b, inverse=True))),
            fmt(med(ratio_series(res, "cpu", a, b)))))
    if res["bl"]:
        out.append("| **backlog / outboxd stream drain** | throughput ×%s | | "
                   "CPU ×%s | | | | |" % (
                       fmt(med([b["eps"] / a["eps"] for a, b in
                                zip(res["obd"], res["bl"])])),
                       fmt(med([b["cpu"] / a["cpu"] for a, b in
                                zip(res["obd"], res["bl"])
                                if a["cpu"] and b["cpu"]]))))
    out.append("")
    out.append("Per round (wall s / client CPU s): " + "; ".join(
        "r%d " % (i + 1) + ", ".join(
            "%s %.2f/%.2f" % (key, res[key][i]["wall"],
                              res[key][i]["cpu"] or 0)
            for key, _ in tools)
        for i in range(len(res["recv"]))) + ".")
    out.append("")
    return out


# The ratios a mode's table shows, (reference, measured): throughput =
# reference time / measured time, CPU = measured CPU / reference CPU (the
# same events, so also the ratio of CPU per event).
RATIOS = [
    ("recv", "obd"),        # outboxd vs its decode limit, wal2json
    ("precv", "pobd"),      # the same with pgoutput
    ("recv", "pobd"),       # outboxd-pgoutput vs the wal2json decode limit
    ("obd", "pobd"),        # the two decoders in outboxd
    ("recv", "precv"),      # the two decoders' own limits
]


def tool_label(key):
    return {k: label for k, label, _, _ in TOOLS}[key]


def ratio_series(res, key, a="recv", b="obd", inverse=False):
    """Per-round b/a ratios of key (a/b if inverse; a and b are tool keys,
    by default pg_recvlogical and outboxd with wal2json): both ran in the
    same round, so pairing them cancels slow drifts of the machine's
    load."""
    out = []
    for x, y in zip(res[a], res[b]):
        if x[key] and y[key]:
            out.append(x[key] / y[key] if inverse else y[key] / x[key])
    return out


def report(args, info, table, msg, lat, spor, load0, load1, elapsed):
    L = ["# outboxd benchmark", ""]
    L.append("Machine: %d CPUs, %s, %s RAM, Linux %s; PostgreSQL %s, "
             "wal2json %s, librdkafka %s; outboxd %s (release build). "
             "Load average %s at start, %s at end; total %.0fs." % (
                 info["nproc"], info["cpu"], info["mem"], info["kernel"],
                 info["postgres"], info["wal2json"], info["librdkafka"],
                 info["commit"], load0, load1, elapsed))
    L.append("")
    L.append("Backlog: transactions of %d rows into public.outbox "
             "(sql/outbox.sql), payload ~%s bytes of JSON, headers object "
             "~%s bytes, %d topics × %d partitions on the mock broker (3 "
             "brokers, %d ms added to each response). Each round runs the drains in turn (pg_recvlogical "
             "and outboxd with wal2json%s), each on its own slot "
             "created before the fill (the pgoutput ones after publication "
             "%s, FOR TABLE public.outbox, publish insert, "
             "publish_via_partition_root); throughput ratio = reference "
             "time / measured time, CPU ratio = measured CPU / reference "
             "CPU, each the median of the per-round ratios."
             % (TXN_ROWS, info.get("payload_len", "?"),
                info.get("headers_len", "?"), len(AGG_TYPES), PARTITIONS,
                RTT_MS, "; no pgoutput pair: --skip-pgoutput" if args.skip_pgoutput
                else ", then the same two with pgoutput", PUBLICATION))
    L.append("")
    if table:
        L += mode_table("table", table)
    if msg:
        L += mode_table("message (pg_logical_emit_message)", msg)
        L.append("Message mode vs table mode, events/s: " + ", ".join(
            "%s ×%s" % (label, fmt(med([x["eps"] for x in msg[key]])
                                   / med([x["eps"] for x in table[key]])))
            for key, label, _, _ in TOOLS
            if msg.get(key) and table.get(key)) + ".")
        L.append("")
    if lat:
        ms = 1000.0
        L.append("### End-to-end latency at a steady %d events/s "
                 "(%.0fs windows, 50-row transactions, synchronous_commit "
                 "on)" % (lat["rate"], lat["seconds"]))
        L.append("")
        L.append("Window A: outboxd alone. Window B: a Kafka consumer "
                 "(confluent_kafka, fetch.wait.max.ms=%d) reads partition "
                 "0 of each topic too (a sample of the events, which spares "
                 "the test broker's fetch: see bench.py's docstring); "
                 "record timestamp = commit time "
                 "(outbox.timestamp_column empty), ms resolution. outboxd "
                 "used %s CPU s per second of streaming, peak RSS %s MB."
                 % (B_FETCH_WAIT_MS, fmt(lat["cpu_per_s"]),
                    fmt(lat["rss_mb"], "%.1f")))
        L.append("")
        L.append("| window | achieved events/s (writer max lag ms; "
                 "machine CPU busy; broker CPU s/s) | view | events | "
                 "p50 ms | p99 ms | max ms | mean ms |")
        L.append("|---|---|---|---:|---:|---:|---:|---:|")
        for name in ("A", "B"):
            w = lat[name]
            L.append("| %s | %.0f (%.0f ms; %.0f%%; %.2f) | commit → broker "
                     "ack (outboxd histogram, interpolated; max = top bucket "
                     "bound) | %d | %s | %s | ≤ %s | %s |" % (
                         name, w["achieved"], w["behind_max_ms"],
                         100 * w["busy"], w["broker_cpu_per_s"],
                         w["hist_count"],
                         fmt(w["p50"] and w["p50"] * ms, "%.1f"),
                         fmt(w["p99"] and w["p99"] * ms, "%.1f"),
                         fmt(w["max_bucket"] and w["max_bucket"] * ms,
                             "%g"),
                         fmt(w["mean"] and w["mean"] * ms, "%.1f")))
            if w["consumer"]:
                L.append("| %s | | commit → consumed (consumer clock − record "
                         "timestamp) | %d | %s | %s | %s | |" % (
                             name, w["cons_count"],
                             fmt(w["cons_p50"], "%.1f"),
                             fmt(w["cons_p99"], "%.1f"),
                             fmt(w["cons_max"], "%.1f")))
        L.append("")

    steady = lat["B"]["cons_p99"] if lat else None
    if spor:
        L += sporadic_section(spor, lat)

    # targets
    L.append("### Targets (reported, not asserted)")
    L.append("")
    L.append("| target | measured | result |")
    L.append("|---|---|---|")

    def row(name, value, ok):
        L.append("| %s | %s | %s |" % (name, value,
                                       "n/a" if ok is None else
                                       ("PASS" if ok else "MISS")))
    if table:
        tr = med(ratio_series(table, "wall", inverse=True))
        cr = med(ratio_series(table, "cpu"))
        rss = max(x["rss_mb"] or 0 for x in table["obd"])
        row("drain throughput ≥ 0.95× pg_recvlogical (table mode)",
            "×%s" % fmt(tr), tr is not None and tr >= 0.95)
        row("outboxd CPU ≤ 1.5× pg_recvlogical CPU (table mode)",
            "×%s" % fmt(cr), cr is not None and cr <= 1.5)
        row("peak RSS ≤ 32 MB on a %d-event backlog%s" % (
            table["n"], "" if table["n"] == 200000 else
            " (target is for 200,000)"), "%.1f MB" % rss, rss <= 32)
    if msg:
        tr = med(ratio_series(msg, "wall", inverse=True))
        cr = med(ratio_series(msg, "cpu"))
        row("(message mode) drain throughput ≥ 0.95× pg_recvlogical",
            "×%s" % fmt(tr), tr is not None and tr >= 0.95)
        row("(message mode) outboxd CPU ≤ 1.5× pg_recvlogical CPU",
            "×%s" % fmt(cr), cr is not None and cr <= 1.5)
    for res, mname in ((table, "table mode"), (msg, "message mode")):
        if not (res and res.get("pobd")):
            continue
        tr = med(ratio_series(res, "wall", "recv", "pobd", inverse=True))
        row("outboxd-pgoutput throughput ≥ 1.3× pg_recvlogical-wal2json "
            "(%s)" % mname, "×%s" % fmt(tr), tr is not None and tr >= 1.3)
        cr = med(ratio_series(res, "cpu", "obd", "pobd"))
        row("outboxd-pgoutput CPU per event ≤ outboxd-wal2json's (%s)"
            % mname, "×%s" % fmt(cr), cr is not None and cr <= 1.0)
        rss = max(x["rss_mb"] or 0 for x in res["pobd"])
        row("outboxd-pgoutput peak RSS < 32 MB on a %d-event backlog (%s)"
            % (res["n"], mname), "%.1f MB" % rss, rss < 32)
        tr = med(ratio_series(res, "wall", "precv", "pobd", inverse=True))
        cr = med(ratio_series(res, "cpu", "precv", "pobd"))
        row("outboxd-pgoutput vs pg_recvlogical-pgoutput, its own decode "
            "limit (%s; reported, no target)" % mname,
            "throughput ×%s, CPU ×%s" % (fmt(tr), fmt(cr)), None)
    if lat:
        p99 = lat["A"]["p99"]
        row("latency p99 ≤ 20 ms at %d events/s (commit → ack)" % lat["rate"],
            "%s ms" % fmt(p99 and p99 * 1000, "%.1f"),
            p99 is not None and p99 <= 0.020)
    if spor:
        for name, label in (
                ("first", "first event to a new topic after a fresh start"),
                ("sporadic", "sporadic single events (one every "
                             "200-500 ms)")):
            xs = [x["consumed"] for x in spor[name]]
            if not xs:
                continue
            p99 = nearest_rank(0.99, xs)
            lost = sum(1 for x in xs if x is None)
            if steady is None:
                row("%s: p99 ≤ steady-state p99 + %g ms (commit → consumed)"
                    % (label, SPORADIC_ALLOWANCE_MS),
                    "%s ms; no steady-state run to compare with"
                    % fmt_lost(p99), None)
                continue
            # The writer commits every 10 ms; when it fell 100 ms behind,
            # the machine was saturated and window B's p99 is CPU queueing,
            # too loose a reference: say so next to the result.
            lag = lat["B"]["behind_max_ms"]
            row("%s: p99 ≤ steady-state p99 + %g ms (commit → consumed)"
                % (label, SPORADIC_ALLOWANCE_MS),
                "%s ms vs %.1f + %g ms%s%s" % (
                    fmt_lost(p99), steady, SPORADIC_ALLOWANCE_MS,
                    "; %d of %d never consumed" % (lost, len(xs))
                    if lost else "",
                    "; window B's writer fell %.0f ms behind (a busy "
                    "machine): its p99 is a loose reference, see the "
                    "known-topic row" % lag if lag > 100 else ""),
                lost == 0 and p99 <= steady + SPORADIC_ALLOWANCE_MS)
    if spor and spor["first"] and spor["sporadic"]:
        # The same question asked of events measured a few seconds apart
        # under the same load: does a topic's first event cost more than
        # one to a topic outboxd knows? Unlike window B's p99, this
        # reference is not inflated when the machine is busy.
        f = [x["consumed"] for x in spor["first"]]
        k = [x["consumed"] for x in spor["sporadic"]]
        pf, pk = nearest_rank(0.99, f), nearest_rank(0.99, k)
        row("first event to a new topic: p99 ≤ known-topic sporadic p99 + "
            "%g ms (commit → consumed)" % SPORADIC_ALLOWANCE_MS,
            "%s ms vs %s + %g ms" % (fmt_lost(pf), fmt_lost(pk),
                                      SPORADIC_ALLOWANCE_MS),
            None if pk is None else
            pf is not None and pf <= pk + SPORADIC_ALLOWANCE_MS)
    if table and msg:
        a = med([x["eps"] for x in msg["obd"]])
        b = med([x["eps"] for x in table["obd"]])
        row("message mode faster than table mode (outboxd events/s)",
            "%.0f vs %.0f" % (a, b), a > b)
    L.append("")
    return "\n".join(L)


def sporadic_section(spor, lat):
    L = ["### Sporadic and first-event latency (one-row transactions, "
         "200-500 ms apart)", ""]
    L.append("%d fresh starts of outboxd; after each, the first event to "
             "each of %d topics that exist on the broker but are new to that "
             "process; then, on the last process, %d single events to the "
             "%d topics it has already produced to. Commits follow each other "
             "at random gaps of 200-500 ms (seed %d), whether or not the "
             "previous event has arrived, so events fall at every phase of "
             "any periodic timer. Commit → consumed: a consumer already "
             "fetching every partition (it read back a marker record in each "
             "first), its clock minus the record timestamp (commit time, "
             "ms). Commit → ack: outboxd's publish latency histogram, "
             "scraped as events arrive: exact when one ack came between two "
             "scrapes (the sum's increase), else its bucket's upper bound "
             "(≤). Nearest-rank percentiles: with fewer than 100 events p99 "
             "is the maximum. Machine CPU busy %.0f%%."
             % (spor["starts"], spor["topics"], spor["k"], len(AGG_TYPES),
                spor["seed"], 100 * spor["busy"]))
    L.append("")
    L.append("| events | n | view | p50 ms | p99 ms | max ms |")
    L.append("|---|---:|---|---:|---:|---:|")
    for name, label in (("first", "first event per new topic"),
                        ("sporadic", "sporadic, known topics")):
        vals = [x["consumed"] for x in spor[name]]
        if not vals:
            continue
        lost = sum(1 for v in vals if v is None)
        L.append("| %s | %d%s | commit → consumed | %s | %s | %s |" % (
            label, len(vals), " (%d lost)" % lost if lost else "",
            fmt_lost(nearest_rank(0.5, vals)),
            fmt_lost(nearest_rank(0.99, vals)),
            fmt_lost(nearest_rank(1.0, vals))))
        acks = spor[name + "_ack"]
        L.append("| %s | %d | commit → broker ack | %s | %s | %s |" % (
            label, len(acks), fmt_ack(0.5, acks, len(vals)),
            fmt_ack(0.99, acks, len(vals)), fmt_ack(1.0, acks, len(vals))))
    if lat:
        B = lat["B"]
        L.append("| steady state, %d events/s (window B) | %d | commit → "
                 "consumed | %s | %s | %s |" % (
                     lat["rate"], B["cons_count"], fmt(B["cons_p50"], "%.1f"),
                     fmt(B["cons_p99"], "%.1f"), fmt(B["cons_max"], "%.1f")))
    L.append("")
    if spor["first"]:
        by = {}
        for x in spor["first"]:
            by.setdefault(x["start"], []).append(
                fmt_lost(x["consumed"], "%.0f"))
        L.append("First events, commit → consumed ms, by start: " + "; ".join(
            "%d: %s" % (s, ", ".join(v)) for s, v in sorted(by.items()))
            + ".")
        L.append("")
    return L


# ---------------------------------------------------------------------------
# profile


# The parts of the profile (README, "Where the CPU goes"): a main-thread
# sample belongs to the first of these, looking from the innermost frame
# outwards, that one of its frames names; samples of librdkafka's own
# threads are counted by the library they are in.
PROFILE_PARTS = [
    ("decoding (wal2json scan, pgoutput parse)",
     r"ob_w2j_parse|ob_pgo_parse|ob_pgo_row|ob_pgo_relcache_put"),
    ("delivery reports: outboxd's callback (ack tracking, tags, metrics)",
     r"on_delivery|split_tag|ob_acktrack_ack"),
    ("record: librdkafka's produce call",
     r"rd_kafka_produceva|rd_kafka_topic_new|rd_kafka_topic_destroy"),
    ("record: librdkafka headers",
     r"event_headers|rd_kafka_headers_new|rd_kafka_header_add|"
     r"rd_kafka_headers_destroy"),
    ("mapping (row or message -> record)",
     r"ob_mapper_\w+|map_fields|put_field|get_field|put_template\S*|"
     r"add_object_headers|headers_text|read_timestamp"),
    ("delivery reports: librdkafka (rd_kafka_poll, freeing records)",
     r"rd_kafka_poll|ob_producer_poll|ob_producer_flush"),
    ("reading the stream (libpq, recv)",
     r"ob_pgrepl_read|PQgetCopyData|PQconsumeInput"),
    ("loop: replay, tags, ack tracker (produce side)",
     r"ob_replay_\w+|make_tag|txn_seq|begin_txn|commit_txn|ob_acktrack_\w+"),
    ("loop: status updates, watches, metrics, liveness",
     r"send_status|watch_tables|ob_partwatch_\w+|ob_slotwatch_\w+|"
     r"report_alive|ob_metrics_\w+|ob_notify_\w+|ob_pgrepl_send_status"),
    ("loop: poll(2), sleeping and waking", r"__poll|__GI___poll|poll"),
    ("loop: the rest (relay)",
     r"ob_producer_send|stream|relay_main|handle_\w+|publish|run_connection"),
]


def profile_parts(perf_data):
    """Lines "share  part" of the samples in perf_data (PROFILE_PARTS)."""
    r = subprocess.run(["perf", "script", "-i", perf_data, "-F",
                        "comm,ip,sym,dso"], capture_output=True, text=True)
    parts = [(name, re.compile(r"^(%s)$" % rx)) for name, rx in PROFILE_PARTS]
    counts = {}
    total = 0

    def take(comm, frames):
        nonlocal total
        if comm is None:
            return
        total += 1
        if comm.startswith("rdk:"):
            dso = frames[0][1] if frames else "?"
            key = "librdkafka threads: %s" % (
                "kernel" if "kernel" in dso else
                os.path.basename(dso).split(".so")[0])
        else:
            key = next((name for sym, _ in frames for name, rx in parts
                        if rx.match(sym)), "main thread: elsewhere")
        counts[key] = counts.get(key, 0) + 1

    comm, frames = None, []
    for line in r.stdout.splitlines():
        if not line.strip():
            take(comm, frames)
            comm, frames = None, []
        elif not line[0].isspace():
            take(comm, frames)
            comm, frames = line.split()[0], []
        else:
            m = re.match(r"\s+[0-9a-f]+\s+(\S+?)(?:\+0x[0-9a-f]+)?\s+"
                         r"\((.*)\)$", line)
            if m:
                frames.append((m.group(1), m.group(2)))
    take(comm, frames)
    return ["%6.1f%%  %s" % (100.0 * c / max(total, 1), k)
            for k, c in sorted(counts.items(), key=lambda kv: -kv[1])]


def run_profile(rig, args):
    if shutil.which("perf") is None:
        raise harness.HarnessError("perf is missing: apt-get install "
                                   "linux-perf")
    mode = "message" if args.profile_messages else "table"
    n = args.rows
    slot = "bench_profile"
    rig.create_slots([slot], args.profile_plugin)
    log("profile: filling %d %s events" % (n, mode))
    _, _, end = rig.fill(mode, n, 0)
    perf_data = os.path.join(rig.tmp, "perf.data")
    x = rig.drain_outboxd(slot, end, n, perf_out=perf_data,
                          plugin=args.profile_plugin)
    log("profile: outboxd drained %d events in %.2fs (%.0f ev/s, under "
        "perf), CPU %.2fs, RSS %.1f MB" % (n, x["wall"], x["eps"],
                                           x["cpu"] or 0, x["rss_mb"] or 0))
    out = []
    for title, extra in (
            ("by thread", ["--sort", "comm"]),
            ("by library", ["--sort", "dso"]),
            ("top functions (self time)", ["--sort", "dso,symbol"])):
        r = subprocess.run(
            ["perf", "report", "-i", perf_data, "--stdio", "--no-children",
             "-g", "none", "--percent-limit", "0.7"] + extra,
            capture_output=True, text=True)
        lines = [re.sub(r"(\s+-)+\s*$", "", ln)
                 for ln in r.stdout.splitlines()
                 if ln.strip() and not ln.startswith("#")]
        out.append("### outboxd CPU %s\n\n```\n%s\n```\n"
                   % (title, "\n".join(lines[:40])))
    # Inclusive time of outboxd's own functions: which of them the library
    # time (jansson, libc, librdkafka) is spent under.
    r = subprocess.run(
        ["perf", "report", "-i", perf_data, "--stdio", "--children",
         "--sort", "dso,symbol", "-g", "none", "--percent-limit", "1"],
        capture_output=True, text=True)
    lines = [re.sub(r"(\s+-)+\s*$", "", ln)
             for ln in r.stdout.splitlines()
             if " outboxd " in ln and not ln.startswith("#")]
    out.append("### outboxd's own functions, inclusive (children) vs self\n\n"
               "```\n  children      self\n%s\n```\n" % "\n".join(lines[:40]))
    out.insert(0, "### outboxd CPU by part (share of all its samples)\n\n"
               "```\n%s\n```\n" % "\n".join(profile_parts(perf_data)))
    text = ("# outboxd profile: %d %s events (%s), %.2fs, %.0f ev/s under "
            "perf\n\n" % (n, mode, args.profile_plugin, x["wall"], x["eps"])
            + "\n".join(out))
    if args.keep:
        text += "\nperf data: %s\n" % perf_data
    return text


# ---------------------------------------------------------------------------


def main():
    global PARTITIONS, RTT_MS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build-release"))
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--msg-rows", type=int, default=None)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--skip-messages", action="store_true")
    ap.add_argument("--skip-pgoutput", action="store_true")
    ap.add_argument("--skip-backlog", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--first-starts", type=int, default=3)
    ap.add_argument("--first-topics", type=int, default=5)
    ap.add_argument("--sporadic", type=int, default=50)
    ap.add_argument("--sporadic-seed", type=int, default=1)
    ap.add_argument("--skip-sporadic", action="store_true")
    ap.add_argument("--latency-only", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-messages", action="store_true")
    ap.add_argument("--profile-plugin", choices=("wal2json", "pgoutput"),
                    default="wal2json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--rtt-ms", type=int, default=RTT_MS)
    args = ap.parse_args()
    PARTITIONS, RTT_MS = args.partitions, args.rtt_ms
    if args.rows is None:
        args.rows = 100000 if args.profile else 200000
    args.rows = max(TXN_ROWS, args.rows // TXN_ROWS * TXN_ROWS)
    if args.msg_rows is None:
        args.msg_rows = args.rows
    args.msg_rows = max(TXN_ROWS, args.msg_rows // TXN_ROWS * TXN_ROWS)
    out_path = Path(args.out) if args.out else Path(args.build) / (
        "bench-profile.md" if args.profile else "bench-results.md")

    rig = Rig(args)
    load0 = "%.2f %.2f %.2f" % os.getloadavg()
    try:
        rig.start()
        if args.profile:
            text = run_profile(rig, args)
        else:
            info = machine_info(rig.pg, args.build)
            table = msg = None
            if not args.latency_only:
                table = rig.run_mode("table", args.rows, args.rounds, 0)
            row = rig.pg.sql("SELECT avg(length(bench_payload(g)::text))"
                             "::int, avg(length(bench_headers(g)::text))::int"
                             " FROM generate_series(1, 1000) g")[0]
            info["payload_len"], info["headers_len"] = row
            rig.pg.sql("TRUNCATE public.outbox")
            if not (args.skip_messages or args.latency_only):
                msg = rig.run_mode("message", args.msg_rows, args.rounds,
                                   10 ** 9)
            lat = None
            if not args.skip_latency:
                lat = rig.run_latency(args.rate, args.latency_seconds,
                                      2 * 10 ** 9)
            spor = None
            if not args.skip_sporadic and (
                    args.first_starts * args.first_topics > 0
                    or args.sporadic > 0):
                spor = rig.run_sporadic(
                    max(1, args.first_starts),
                    args.first_topics if args.first_starts > 0 else 0,
                    args.sporadic, args.sporadic_seed, 3 * 10 ** 9)
            load1 = "%.2f %.2f %.2f" % os.getloadavg()
            text = report(args, info, table, msg, lat, spor, load0, load1,
                          time.monotonic() - T_START)
    finally:
        rig.close()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text + "\n")
    print()
    print(text)
    print("(written to %s)" % out_path)


if __name__ == "__main__":
    main()
