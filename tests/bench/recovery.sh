#!/usr/bin/env bash
# tests/bench/recovery.sh — a slot recovery's time and memory
# (tests/README.md, "Slot recovery"):
#
#   bash tests/bench/recovery.sh     # about 2 minutes on 2 cores
#
# Runs tests/integration/bench_recovery.py (outboxd's slot dropped, then
# OUTBOXD_RECOVERY_ROWS rows, default 1,000,000, written past its recovery
# point, then recovered from the table) against build/ (or $OUTBOXD_BUILD)
# and prints one markdown table. Numbers are reported, never asserted.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
export OUTBOXD_RECOVERY_RESULTS="$OUT"
export OUTBOXD_BUILD="${OUTBOXD_BUILD:-build}"
rc=0
/usr/bin/python3 -m pytest tests/integration/bench_recovery.py -q -p no:cacheprovider || rc=$?
echo
echo "| rows published again | seconds | rows/s | peak RSS (MB) |"
echo "|---:|---:|---:|---:|"
cat "$OUT"
exit "$rc"
