#!/usr/bin/env python3
"""outboxd's randomized fault checker (see tests/chaos/README.md).

    python3 tests/chaos/chaos.py                   # the fixed seeds (seeds.txt)
    python3 tests/chaos/chaos.py --seed 7 --seed 12
    python3 tests/chaos/chaos.py --seeds 50        # soak: 50 new seeds
    python3 tests/chaos/chaos.py --minutes 30      # soak: new seeds for 30 min

Each seed is one run: a throwaway Postgres 15 cluster, outboxd (the seed
picks the decoder and a plain or partitioned outbox table), the workload
and the faults of the seed, a drain, and the checker. One mock broker
serves all runs of a process. Ends with `chaos: N passed, N failed` (each
seed a test) and exits non-zero when a seed failed or nothing ran; a
missing part (Postgres, wal2json, the broker or outboxd binaries) fails
the seeds, never skips them.

Binaries come from $OUTBOXD_BUILD (default build/, relative to the repo
root); a failed run's logs are kept under --keep (default
/tmp/outboxd-chaos)."""

import argparse
import collections
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import checker  # noqa: E402
import faults  # noqa: E402
from workload import FEATURES, Driver  # noqa: E402

PARTITIONS = 8
DRAIN_TIMEOUT = 90
SEEDS_FILE = HERE / "seeds.txt"


def dims(seed):
    """(decoder, table kind) of a seed: the four pairs in turn."""
    return (("wal2json", "pgoutput")[seed % 2],
            ("plain", "partitioned")[(seed // 2) % 2])


class Parts:
    """The binaries and the shared mock broker of this process."""

    def __init__(self, build, logdir):
        self.outboxd = str(build / "outboxd")
        broker_bin = str(build / "tests" / "ob-mockbroker")
        self.broker = harness.MockBroker(
            broker_bin, brokers=3, partitions=PARTITIONS,
            logfile=str(Path(logdir) / "ob-mockbroker.log"))
        self.runs = 0

    def close(self):
        self.broker.stop()


class Clock:
    """Run time: seconds since start() (the workload's start)."""

    def __init__(self):
        self.t0 = time.monotonic()

    def start(self):
        self.t0 = time.monotonic()

    def __call__(self):
        return time.monotonic() - self.t0


class Result:
    """One seed's outcome: report (checker.Report, or None when the run
    itself broke), error (the traceback then), faults (FaultLog), the
    run's seconds and directory."""

    def __init__(self, seed):
        self.seed = seed
        self.report = None
        self.error = None
        self.faults = None
        self.seconds = 0.0
        self.dir = None

    @property
    def passed(self):
        return self.error is None and not self.report.findings


def outboxd_config(pg, broker, slot, agg, decoder, rng):
    """The daemon's settings for a run."""
    return {
        "postgres": {"conninfo": pg.conninfo(), "slot": slot,
                     "create_slot": True, "plugin": decoder,
                     "publication": "chaos",
                     "status_interval_ms": rng.choice([100, 300, 1000]),
                     "reconnect_max_backoff_ms": 1000,
                     "standby_retry_ms": 500},
        "outbox": {"table": "public.outbox",
                   "topic": "outbox.event.{aggregate_type}",
                   "dlq_topic": "chaos.%s.dlq" % agg},
        "kafka": {"bootstrap.servers": broker.bootstraps},
        "http": {"listen": ""},
        "log": {"level": "info"},
    }


def read_topic(bootstraps, topic):
    """Every record of topic, read from the beginning up to the high
    watermark of each partition (what the broker holds once the producer
    is stopped), as harness.Consumer-style dicts."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstraps, "group.id": "chaos",
                  "enable.auto.commit": False, "log_level": 3,
                  "allow.auto.create.topics": False})
    try:
        md = c.list_topics(topic, timeout=20).topics[topic]
        want = {}
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p),
                                             timeout=20)
            if hi > lo:
                want[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in want])
        out, deadline = [], time.monotonic() + 60
        pos = {p: 0 for p in want}
        while any(pos[p] < want[p] for p in want):
            if time.monotonic() > deadline:
                raise harness.HarnessError("could not read %s to its end: "
                                           "%s of %s" % (topic, pos, want))
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            pos[m.partition()] = m.offset() + 1
            key = m.key()
            out.append({"topic": topic, "partition": m.partition(),
                        "offset": m.offset(),
                        "key": key.decode() if key is not None else None,
                        "value": m.value(),
                        "headers": list(m.headers() or [])})
        return out
    finally:
        c.close()


def drain(pg, slot, end, injector):
    """Waits (restarting an outboxd that exits) until the slot is
    confirmed to end; returns the confirmed position reached."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while True:
        row = pg.slot(slot)
        got = row["confirmed_flush_lsn_int"] if row else None
        if (got is not None and got >= end) or time.monotonic() > deadline:
            return got
        injector.watch()
        time.sleep(0.2)


def run_seed(parts, seed, seconds, keep, without=frozenset()):
    """Runs one seed end to end (its workload lacking the features in
    without); returns its Result."""
    res = Result(seed)
    clock = Clock()
    started = time.monotonic()
    rng = random.Random(seed)
    decoder, table = dims(seed)
    parts.runs += 1
    agg = "c%d_%d" % (seed, parts.runs)
    workdir = tempfile.mkdtemp(prefix="chaos-%d-" % seed)
    res.dir = workdir
    pg = daemon = None
    try:
        pg = harness.PgCluster(workdir, extra_conf={
            "logical_decoding_work_mem": "'64kB'",
            "max_prepared_transactions": "10",
            "wal_sender_timeout": "'10s'"})
        pg.start()
        Driver.setup_schema(pg, table == "partitioned",
                            str(REPO / "sql" / "outbox.sql"))
        broker = parts.broker
        topic = "outbox.event.%s" % agg
        broker.create_topic(topic, PARTITIONS)
        cfg = outboxd_config(pg, broker, "chaos", agg, decoder, rng)
        broker.create_topic(cfg["outbox"]["dlq_topic"], 2)
        daemon = harness.Outboxd(parts.outboxd, cfg, workdir, start=False)
        rc, out, err = daemon.run_cmd(["slot", "create"])
        if rc != 0:
            raise harness.HarnessError("outboxd slot create: %s %s"
                                       % (out, err))
        daemon.start()
        rtt = rng.choice([0, 0, 5, 20, 100])
        broker.cmd("rtt all %d" % rtt)
        driver = Driver(pg, rng, agg, table == "partitioned", "chaos", clock,
                        without)
        clock.start()
        injector = faults.Injector(faults.plan(rng, seconds), pg,
                                   broker, daemon, "chaos", clock, rtt)
        res.faults = injector.log
        driver.on_commit = injector.commit_seen
        injector.start()
        try:
            while clock() < seconds:
                driver.step()
                time.sleep(rng.expovariate(50))
        finally:
            injector.stop()
        if injector.error is not None:
            raise injector.error
        injector.heal()
        driver.finish()
        end = driver.fence()
        driver.close()
        confirmed = drain(pg, "chaos", end, injector)
        final_rc = daemon.stop(60)
        records = read_topic(broker.bootstraps, topic)
        dead = read_topic(broker.bootstraps, cfg["outbox"]["dlq_topic"])
        res.report = checker.check(driver.history, records, dead,
                                   injector.log, daemon.log_text(),
                                   PARTITIONS, (end, confirmed, final_rc))
    except Exception:
        res.error = traceback.format_exc()
    finally:
        if daemon is not None:
            daemon.stop(30)
        if pg is not None:
            pg.stop("immediate")
        res.seconds = time.monotonic() - started
        _keep_or_remove(res, pg, workdir, keep)
    return res


def _keep_or_remove(res, pg, workdir, keep):
    """Copies a failed run's logs to keep/seed-N (res.dir then names it);
    removes the run's directory."""
    if not res.passed:
        dest = Path(keep) / ("seed-%d" % res.seed)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        for f in Path(workdir).glob("outboxd-*.log"):
            shutil.copy(f, dest)
        if pg is not None and os.path.exists(pg.logfile):
            shutil.copy(pg.logfile, dest)
        res.dir = str(dest)
    if pg is not None:
        pg.destroy()
    shutil.rmtree(workdir, ignore_errors=True)


def print_result(res):
    """One line per seed; a failure adds its findings, fault log and the
    command that replays it."""
    decoder, table = dims(res.seed)
    head = "seed %d (%s, %s)" % (res.seed, decoder, table)
    if res.error is not None:
        print("%s: ERROR in %.1f s\n%s" % (head, res.seconds, res.error))
        return
    s = res.report.stats
    kinds = collections.Counter(res.faults.kinds())
    print("%s: %s in %.1f s: %d events in %d txns, %d records, %d dup, "
          "%d dead letters; faults %s" % (
              head, "PASS" if res.passed else "FAIL", res.seconds,
              s["events"], s["committed_txns"], s["records"],
              s["duplicated_events"], s["dead_letters"],
              ", ".join("%s x%d" % kv for kv in sorted(kinds.items()))
              or "none"))
    if res.passed:
        return
    for f in res.report.findings:
        print(f.render())
    print("  fault log (run seconds):")
    print("\n".join(res.faults.lines()))
    for n in res.report.notes:
        print("  note: %s" % n)
    print("  logs: %s" % res.dir)
    print("  replay: python3 tests/chaos/chaos.py --seed %d" % res.seed)


def fixed_seeds():
    """The seeds of seeds.txt (`seed  # note` lines)."""
    out = []
    for line in SEEDS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(int(line))
    return out


def summary(results, started):
    """The soak summary: runs, events, faults of each kind, findings."""
    kinds, findings, events = collections.Counter(), [], 0
    for r in results:
        if r.faults is not None:
            kinds.update(r.faults.kinds())
        if r.report is not None:
            events += r.report.stats["events"]
            findings += [(r.seed, f) for f in r.report.findings]
        elif r.error is not None:
            findings.append((r.seed, checker.Finding(
                "error", r.error.strip().splitlines()[-1])))
    print("\n=== chaos summary (%.0f s)" % (time.monotonic() - started))
    print("histories: %d, committed events: %d" % (len(results), events))
    print("faults: %s" % (", ".join("%s %d" % kv for kv in
                                    sorted(kinds.items())) or "none"))
    print("findings: %d" % len(findings))
    for seed, f in findings:
        print("  seed %d: %s: %s" % (seed, f.kind, f.summary))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, action="append",
                    help="run this seed (repeatable)")
    ap.add_argument("--seeds", type=int, help="soak: run N new seeds")
    ap.add_argument("--minutes", type=float,
                    help="soak: run new seeds for M minutes")
    ap.add_argument("--start", type=int,
                    help="soak: first seed (default: random)")
    ap.add_argument("--seconds", type=float, default=10,
                    help="how long each run's workload lasts (default 10)")
    ap.add_argument("--only", default="",
                    help="soak: only seeds of these dimensions, e.g. "
                    "wal2json or pgoutput,partitioned")
    ap.add_argument("--without", default="",
                    help="workload features to leave out, comma-separated "
                    "(%s): steers around a known defect while it is "
                    "being fixed" % ", ".join(sorted(FEATURES)))
    ap.add_argument("--keep", default="/tmp/outboxd-chaos",
                    help="where failed runs' logs are kept")
    args = ap.parse_args(argv)

    build = Path(os.environ.get("OUTBOXD_BUILD", "build"))
    build = build if build.is_absolute() else REPO / build
    soak = args.seeds is not None or args.minutes is not None
    if args.seed:
        seeds = iter(args.seed)
    elif soak:
        first = args.start if args.start is not None \
            else random.randrange(10 ** 6)
        only = set(filter(None, args.only.split(",")))
        seeds = (s for s in range(first, first + 10 ** 9)
                 if only <= set(dims(s)))
        if args.seeds:
            seeds = (s for _, s in zip(range(args.seeds), seeds))
    else:
        seeds = iter(fixed_seeds())
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None

    without = set(filter(None, args.without.split(",")))
    if not without <= FEATURES:
        ap.error("--without: unknown feature(s) %s"
                 % ", ".join(sorted(without - FEATURES)))
    started = time.monotonic()
    os.makedirs(args.keep, exist_ok=True)
    results = []
    parts = None
    try:
        parts = Parts(build, args.keep)
    except Exception:
        err = traceback.format_exc()
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        if parts is None:
            res = Result(seed)
            res.error = err
        else:
            res = run_seed(parts, seed, args.seconds, args.keep, without)
        print_result(res)
        sys.stdout.flush()
        results.append(res)
    if parts is not None:
        parts.close()
    if soak:
        summary(results, started)
    passed = sum(1 for r in results if r.passed)
    print("chaos: %d passed, %d failed" % (passed, len(results) - passed))
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
