#!/usr/bin/env python3
"""outboxd's CPU regression check (tests/README.md, "CPU check"); tests/run.sh runs it.

    python3 tests/bench/cpu_check.py [--build DIR] [--rows N] [--rounds R]

One throwaway PostgreSQL 15 and mock broker (the benchmark's rig,
tests/bench/bench.py), one backlog of N outbox rows in transactions of 100,
and, per decoder (wal2json, then pgoutput), R rounds of two drains of it on
slots of their own: pg_recvlogical to /dev/null, then outboxd to the broker.
The figure is outboxd's CPU time per event divided by pg_recvlogical's, the
median over the rounds of each round's ratio: both tools read the same rows
in the same minute, so a busy machine moves the two together far more than
it moves either's wall time.

Each decoder's ratio is held against the reference kept in
tests/bench/cpu_reference.txt: the check fails when a ratio is more than
MARGIN (25%) above its reference, that is when outboxd spends a quarter more
CPU per event than it did when the reference was recorded. A ratio over the
limit is measured again on R more rounds (slots made for it before the
fill) and judged on the median of all 2R, so one disturbed round does not
fail the run and a real regression fails both.

The reference belongs to the build the check runs on (tests/run.sh: build/,
-O2 -g): after a change that is meant to cost CPU, or on other machines,
record a new one with --record, which writes the measured medians into the
file. Prints one line per decoder and exits 1 when a ratio is over its
limit (or nothing could be measured), 0 otherwise.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402
import harness  # noqa: E402  (bench put tests/integration on the path)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).resolve().parent / "cpu_reference.txt"
MARGIN = 0.25
PLUGINS = ("wal2json", "pgoutput")


def read_reference(path):
    """{plugin: ratio} from lines "plugin ratio"; # starts a comment."""
    ref = {}
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2:
            ref[words[0]] = float(words[1])
    return ref


def write_reference(path, ratios, rows, rounds):
    lines = [ln for ln in path.read_text().splitlines()
             if ln.startswith("#")] if path.exists() else []
    lines = [ln for ln in lines if not ln.startswith("# recorded")]
    lines.append("# recorded %s: --rows %d --rounds %d"
                 % (time.strftime("%Y-%m-%d"), rows, rounds))
    lines += ["%s %.2f" % (p, ratios[p]) for p in PLUGINS]
    path.write_text("\n".join(lines) + "\n")


class Check:
    def __init__(self, args):
        self.args = args
        rig_args = argparse.Namespace(build=args.build, skip_pgoutput=False,
                                      keep=False)
        self.rig = bench.Rig(rig_args)
        self.slots = {}
        self.end = None

    def prepare(self, rounds):
        """Slots for 2*rounds rounds of each tool and decoder (the second
        half only for a retry), made before the backlog is written."""
        for plugin in PLUGINS:
            for tool in ("recv", "obd"):
                names = ["cpu_%s_%s_%d" % (plugin[0], tool, r)
                         for r in range(2 * rounds)]
                self.rig.create_slots(names, plugin)
                self.slots[(plugin, tool)] = names
        _, _, self.end = self.rig.fill("table", self.args.rows, 0)

    def rounds(self, plugin, first, count):
        """Per-round ratios of rounds first..first+count-1."""
        n = self.args.rows
        out = []
        for r in range(first, first + count):
            recv = self.rig.drain_recvlogical(
                self.slots[(plugin, "recv")][r], self.end, n, plugin)
            obd = self.rig.drain_outboxd(
                self.slots[(plugin, "obd")][r], self.end, n, plugin=plugin)
            if obd["published"] is not None and int(obd["published"]) != n:
                raise harness.HarnessError(
                    "outboxd published %d events, expected %d"
                    % (obd["published"], n))
            ratio = (obd["cpu"] / n) / (recv["cpu"] / n)
            bench.log("cpu check %s round %d: pg_recvlogical %.2f CPU s, "
                      "outboxd %.2f CPU s: ratio %.2f"
                      % (plugin, r + 1, recv["cpu"], obd["cpu"], ratio))
            out.append(ratio)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get(
        "OUTBOXD_BUILD", str(ROOT / "build")))
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record", action="store_true",
                    help="write the measured medians into %s" % REFERENCE.name)
    args = ap.parse_args()
    args.build = str(Path(args.build).resolve())
    args.rows = max(bench.TXN_ROWS, args.rows // bench.TXN_ROWS
                    * bench.TXN_ROWS)
    ref = {} if args.record else read_reference(REFERENCE)
    missing = [p for p in PLUGINS if p not in ref]
    if missing and not args.record:
        print("cpu check: no reference for %s in %s"
              % (", ".join(missing), REFERENCE), file=sys.stderr)
        return 1

    check = Check(args)
    medians = {}
    failed = []
    try:
        check.rig.start()
        check.prepare(args.rounds)
        for plugin in PLUGINS:
            ratios = check.rounds(plugin, 0, args.rounds)
            med = statistics.median(ratios)
            if not args.record and med > ref[plugin] * (1 + MARGIN):
                bench.log("cpu check %s: median %.2f is over its limit, "
                          "measuring %d more rounds"
                          % (plugin, med, args.rounds))
                ratios += check.rounds(plugin, args.rounds, args.rounds)
                med = statistics.median(ratios)
            medians[plugin] = med
    finally:
        check.rig.close()

    for plugin in PLUGINS:
        med = medians[plugin]
        if args.record:
            print("cpu check %s: outboxd / pg_recvlogical CPU per event "
                  "%.2f (median)" % (plugin, med))
            continue
        limit = ref[plugin] * (1 + MARGIN)
        ok = med <= limit
        if not ok:
            failed.append(plugin)
        print("cpu check %s: outboxd / pg_recvlogical CPU per event %.2f "
              "(median), reference %.2f, limit %.2f: %s"
              % (plugin, med, ref[plugin], limit, "ok" if ok else "FAILED"))
    if args.record:
        write_reference(REFERENCE, medians, args.rows, args.rounds)
        print("cpu check: wrote %s" % REFERENCE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
