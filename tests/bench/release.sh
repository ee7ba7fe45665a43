#!/usr/bin/env bash
# tests/bench/release.sh — holding and releasing a key's events: time and
# memory (tests/README.md, "Releasing held keys"):
#
#   bash tests/bench/release.sh     # about a minute on 2 cores
#
# Runs tests/integration/bench_release.py (one bad event of a key, then
# OUTBOXD_RELEASE_EVENTS more of it, default 100,000, all held, then
# `outboxd dlq release`) against build/ (or $OUTBOXD_BUILD) and prints one
# markdown table. Numbers are reported, never asserted.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
export OUTBOXD_RELEASE_RESULTS="$OUT"
export OUTBOXD_BUILD="${OUTBOXD_BUILD:-build}"
rc=0
/usr/bin/python3 -m pytest tests/integration/bench_release.py -q -p no:cacheprovider || rc=$?
echo
echo "| events released | seconds to hold them | seconds to release | events/s released | peak RSS (MB) |"
echo "|---:|---:|---:|---:|---:|"
cat "$OUT"
exit "$rc"
