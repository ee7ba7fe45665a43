#!/usr/bin/env bash
# tests/bench/run.sh — outboxd's benchmark, one command (tests/README.md, "Benchmark"):
#
#   bash tests/bench/run.sh [--rows N] [--rounds R] [options]
#
# It builds a release binary into build-release/, starts a throwaway
# PostgreSQL 15 (wal2json) and the mock Kafka broker, fills a backlog of
# outbox rows with the daemon stopped, and drains it with pg_recvlogical
# (same wal2json options, to /dev/null: the reference) and with outboxd (to
# the broker), then the same two with pgoutput (publication outboxd, made
# before the slots), alternating, R rounds each, and in table mode publishes
# the same rows once more per round as the backlog of a slot outboxd creates
# (read with SQL instead of decoded). Then the same for events written
# as pg_logical_emit_message, then end-to-end latency at a steady rate
# (window A: outboxd alone; window B: with a Kafka consumer reading), then
# the sporadic phase: after each of N fresh starts of outboxd, the first
# event to each of M topics new to it, then K single events to topics it
# knows, 200-500 ms apart, commit -> consumed against window B's p99. It
# prints a markdown results table with PASS/MISS per target and writes it to
# build-release/bench-results.md. Targets are reported, never asserted: the
# exit code is 0 whenever the benchmark ran to the end.
#
# Options (all optional):
#   --rows N              backlog size, table mode and message mode (200000)
#   --rounds R            drain rounds per tool and mode (3)
#   --msg-rows N          backlog size of the message mode (= --rows)
#   --rate E              steady rate of the latency run, events/s (5000)
#   --latency-seconds S   length of the latency window (20)
#   --skip-messages       no message-mode drains
#   --skip-pgoutput       no pgoutput drains (pg_recvlogical and outboxd
#                         with postgres.plugin = pgoutput)
#   --skip-backlog        no table-mode backlog rounds (the same rows read
#                         with SQL by a slot outboxd creates)
#   --skip-latency        no steady-rate latency run (the sporadic phase's
#                         targets are then n/a)
#   --first-starts N      sporadic phase: fresh starts of outboxd (3)
#   --first-topics M      new topics per start, one first event each (5)
#   --sporadic K          single events to known topics afterwards (50)
#   --sporadic-seed S     seed of the 200-500 ms gaps (1)
#   --skip-sporadic       no sporadic phase (about 35 s with the defaults)
#   --partitions N        partitions of each topic on the mock broker (4)
#   --rtt-ms M            ms the mock broker holds back each response, as
#                         a network round trip would (0)
#   --latency-only        only the latency runs (steady and sporadic; no
#                         drains)
#   --profile             instead of the benchmark: drain --rows (default
#                         then 100000) table rows with outboxd under
#                         `perf record` and print where its CPU goes (by
#                         part: decoding, mapping, the record, librdkafka,
#                         the loop; README, "Where the CPU goes")
#   --profile-messages    with --profile: a message-mode backlog instead
#   --profile-plugin P    with --profile: decoder wal2json (default) or
#                         pgoutput
#   --out FILE            results file (build-release/bench-results.md)
#   --keep                keep the temporary Postgres cluster and logs
#
# Environment: OUTBOXD_SKIP_BUILD=1 uses build-release/ (or --build) as it
# is; OUTBOXD_BROKER_BIN names the test broker of another build (outboxd
# built against librdkafka 2.15.1, the broker on 2.0.2);
# OUTBOXD_BENCH_KAFKA="key=value,..." adds librdkafka settings (tuning);
# OUTBOXD_PG_BIN overrides /usr/lib/postgresql/15/bin.
#
# Needs what tests/run.sh needs (deploy/deps.sh installs it); --profile also
# needs linux-perf. A default run takes about 3 minutes on 2 cores (the
# sporadic phase about 30 s of it), plus about 30 s for the pgoutput drains
# (their drains and slots at 200,000 events, measured without the phases
# after the drains).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
BUILD="$ROOT/build-release"
PY=/usr/bin/python3

if [[ "${OUTBOXD_SKIP_BUILD:-0}" != 1 ]]; then
    echo "=== release build ($BUILD)"
    if [[ ! -f "$BUILD/build.ninja" ]]; then
        meson setup "$BUILD" --buildtype=release >/dev/null
    fi
    ninja -C "$BUILD" outboxd tests/ob-mockbroker >/dev/null
fi

exec "$PY" "$ROOT/tests/bench/bench.py" --build "$BUILD" "$@"
