#!/usr/bin/env bash
# tests/bench/crash_duplicates.sh — duplicates per crash, by decoder and
# table kind (tests/README.md, "Duplicates per crash"):
#
#   bash tests/bench/crash_duplicates.sh     # about 3 minutes on 2 cores
#
# Runs tests/integration/bench_crash_duplicates.py (a live writer at about
# 10,000 events/s, then a backlog drain, each with wal2json and pgoutput on
# a plain and a partitioned outbox table, outboxd killed with -9 six times
# in each) against build/ (or $OUTBOXD_BUILD) and prints one markdown
# table. OUTBOXD_CRASH_KILLS, _ROWS, _PAUSE and _DRAIN_TXNS change the
# load. Counts are reported, never asserted: the exit code says only
# whether every event arrived.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
export OUTBOXD_CRASH_RESULTS="$OUT"
export OUTBOXD_BUILD="${OUTBOXD_BUILD:-build}"
rc=0
/usr/bin/python3 -m pytest tests/integration/bench_crash_duplicates.py -q \
    -p no:cacheprovider || rc=$?
echo
echo "| load | decoder | table | events | events/s | crashes | extra copies | per crash | ms of events per crash |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
sort "$OUT"
exit "$rc"
