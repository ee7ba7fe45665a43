#!/usr/bin/env bash
# demo.sh — the main job on a fresh Debian 12 machine (as root): installs
# what the demo needs (deploy/deps.sh --demo: the build, PostgreSQL 15 with
# wal2json, python3's psycopg2 and confluent-kafka; none of the test
# tools), builds outboxd, then runs deploy/demo.py: a throwaway
# PostgreSQL 15 with wal2json, a local Kafka-protocol broker, outboxd
# between them, and sample outbox events shown as they arrive in Kafka.
# Ctrl-C stops everything and removes the throwaway files.
#
#   bash deploy/demo.sh [--events N] [--rate R]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash deploy/deps.sh --demo
echo "demo: building outboxd into build/ (a minute on a fresh clone) ..."
if [[ -f build/build.ninja ]]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build >/dev/null
fi
ninja -C build >/dev/null
exec /usr/bin/python3 deploy/demo.py "$@"
