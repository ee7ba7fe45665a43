#!/usr/bin/env bash
# tests/rdkafka.sh — the second librdkafka: outboxd built against a current
# librdkafka (2.15.1, built by deploy/rdkafka.sh from npm's source package
# into /var/cache/outboxd-rdkafka) and the integration tests that touch the
# producer, its faults and the inbox's consumer run against that build.
#
#   bash tests/rdkafka.sh              # build (when missing) and test
#   bash tests/rdkafka.sh --build-only # build only
#
# The tests: test_stream.py (exactly once, per-key order, restarts, Kafka
# down), three of test_broker_errors.py (batches refused under steady
# load, a batch refused as a whole, errors with requests in flight; the
# rest of it runs on 2.0.2, and the fault checker's seeds below refuse
# records and batches here too: the CI budget) and
# test_inbox.py (the consumer group, positions, dead letters, kill -9),
# and a broker without JoinGroup v0 (the inbox joins it; `check`'s
# `kafka fit` line, whose verdict differs from 2.11 on), and the inbox's
# topic ids (the tests marked topic_ids in test_inbox_guards.py: a topic
# deleted and created again, a broker that gives no ids), with the wal2json
# decoder (the decoder is not what differs here); then the fault
# checker's seeds that exercise the producer and the broker most
# (tests/chaos, each seed one test; OUTBOXD_RDKAFKA_SEEDS below).
# The test broker stays the one built against Debian's 2.0.2
# ($OUTBOXD_BUILD/tests/ob-mockbroker, via OUTBOXD_BROKER_BIN): built
# against 2.15.1 its mock cluster takes ProduceRequest v9 and v10, which
# the broker's sequence checks (tests/broker/seqcheck.c) do not read, so
# its fault injection and idempotence checks would be off. The tests of
# topic ids alone run a broker built against 2.15.1
# ($OUTBOXD_BUILD_RDKAFKA/tests/ob-mockbroker, via
# OUTBOXD_BROKER_TOPIC_IDS_BIN), the one whose mock cluster gives topic
# ids, deletes topics and names a controller (DescribeTopics is sent
# there): their records come from Debian's librdkafka (confluent_kafka),
# whose ProduceRequests (v7 at most) the sequence checks read, and they
# inject no faults.
#
# Binaries: outboxd and the broker of the topic-id tests into
# $OUTBOXD_BUILD_RDKAFKA (default build-rdk215/), the broker from
# $OUTBOXD_BUILD (default build/), built already.
# PYTEST_ARGS adds pytest arguments. Prints what failed and last
# "rdkafka: N passed, N failed"; exits non-zero when anything failed or
# nothing ran.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
PY=/usr/bin/python3
BUILD=${OUTBOXD_BUILD:-build}
[[ "$BUILD" == /* ]] || BUILD="$ROOT/$BUILD"
RDK_BUILD=${OUTBOXD_BUILD_RDKAFKA:-build-rdk215}
[[ "$RDK_BUILD" == /* ]] || RDK_BUILD="$ROOT/$RDK_BUILD"
IT=tests/integration
TESTS=("$IT/test_stream.py" "$IT/test_inbox.py"
    "$IT/test_broker_errors.py::test_batch_errors_under_steady_load_lose_nothing"
    "$IT/test_broker_errors.py::test_batch_refused_as_a_whole_retries_suspects_alone"
    "$IT/test_broker_errors.py::test_broker_errors_with_requests_in_flight_keep_key_order"
    "$IT/test_inbox_groups.py::test_inbox_joins_a_broker_without_joingroup_v0"
    "$IT/test_inbox_groups.py::test_check_says_whether_librdkafka_and_the_brokers_fit"
    "$IT/test_inbox_guards.py::test_inbox_recreated_topic_told_by_its_id"
    "$IT/test_inbox_guards.py::test_inbox_broker_without_topic_ids")

fail() {
    echo "rdkafka: $*" >&2
    echo "rdkafka: 0 passed, 1 failed"
    exit 1
}

pcdir=$(bash deploy/rdkafka.sh | tail -n 1) || fail "deploy/rdkafka.sh could not build librdkafka"
[[ -f "$pcdir/rdkafka.pc" ]] || fail "no rdkafka.pc in '$pcdir'"
if [[ -f "$RDK_BUILD/build.ninja" ]]; then
    PKG_CONFIG_PATH="$pcdir" meson setup --reconfigure "$RDK_BUILD" \
        -Dwerror=true -Dtest_hooks=true >"$RDK_BUILD.setup.log" 2>&1
else
    PKG_CONFIG_PATH="$pcdir" meson setup "$RDK_BUILD" \
        -Dwerror=true -Dtest_hooks=true >"$RDK_BUILD.setup.log" 2>&1
fi || fail "meson setup of $RDK_BUILD failed (see $RDK_BUILD.setup.log)"
ninja -C "$RDK_BUILD" outboxd tests/ob-mockbroker >"$RDK_BUILD/ninja.log" 2>&1 ||
    fail "outboxd or its test broker did not build against librdkafka in $pcdir (see $RDK_BUILD/ninja.log)"
version=$("$RDK_BUILD/outboxd" --version | sed -n 's/^librdkafka //p')
[[ "$version" == 2.15.* ]] || fail "$RDK_BUILD/outboxd runs with librdkafka '$version', not 2.15"
echo "rdkafka: $RDK_BUILD/outboxd runs with librdkafka $version"
[[ "${1:-}" == "--build-only" ]] && exit 0

[[ -x "$BUILD/tests/ob-mockbroker" ]] || fail "the test broker $BUILD/tests/ob-mockbroker is not built"
junit="$RDK_BUILD/rdkafka-junit.xml"
failures="$RDK_BUILD/rdkafka-failures.txt"
rm -f "$junit" "$failures"
# shellcheck disable=SC2086
OUTBOXD_BUILD="$RDK_BUILD" OUTBOXD_BROKER_BIN="$BUILD/tests/ob-mockbroker" \
    OUTBOXD_BROKER_TOPIC_IDS_BIN="$RDK_BUILD/tests/ob-mockbroker" \
    OUTBOXD_TEST_DECODERS=wal2json \
    timeout --signal=INT --kill-after=60 1200 \
    "$PY" -m pytest "${TESTS[@]}" -q -p no:cacheprovider -rfEs \
    --junitxml="$junit" ${PYTEST_ARGS:-}
rc=$?
read -r p f < <("$PY" tests/junit_count.py "$junit" "librdkafka $version" "$failures")
p=${p:-0}
f=${f:-0}
if ((rc != 0 && f == 0)); then
    f=1 # pytest crashed, timed out, or collected nothing (rc 5)
    echo "librdkafka $version: pytest exited $rc" >>"$failures"
fi

# The fault checker's seeds that exercise the producer and the broker
# most (record errors, broker outages and slowness, leader moves and
# retriable errors on Produce), each one test; four, for the test
# command's time (every fixed seed passes with 2.15.1 too).
# OUTBOXD_RDKAFKA_SEEDS: "all" runs every fixed seed (tests/chaos/seeds.txt),
# "none" none, a list of numbers those seeds.
SEEDS=${OUTBOXD_RDKAFKA_SEEDS:-"600 100096 234570 234571"}

# Runs the seeds of SEEDS; sets cp and cf (seeds passed and failed).
run_chaos() {
    local log="$RDK_BUILD/rdkafka-chaos.log" args=() s
    cp=0 cf=0
    [[ "$SEEDS" == none ]] && return
    # No --seed: chaos.py runs every fixed seed, as seeds.txt says.
    if [[ "$SEEDS" != all ]]; then
        for s in $SEEDS; do args+=(--seed "$s"); done
    fi
    OUTBOXD_BUILD="$RDK_BUILD" OUTBOXD_BROKER_BIN="$BUILD/tests/ob-mockbroker" \
        timeout --kill-after=60 1200 "$PY" tests/chaos/chaos.py "${args[@]}" \
        --keep /tmp/outboxd-chaos-rdkafka >"$log" 2>&1
    read -r cp cf < <(sed -n 's/^chaos: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$log")
    if [[ -z "${cp:-}" ]]; then
        cp=0 cf=1
        echo "librdkafka $version: the fault checker ended without its summary line ($log)" >>"$failures"
    elif ((cf > 0)); then
        grep -E '^seed [0-9]+ .*: (FAIL|ERROR) ' "$log" |
            sed "s/^/librdkafka $version chaos: /" >>"$failures"
    fi
    echo "rdkafka: fault checker: $cp passed, $cf failed (seeds $SEEDS; $log)"
}
run_chaos
p=$((p + cp))
f=$((f + cf))
if [[ -s "$failures" ]]; then
    printf '\n=== what failed\n'
    cat "$failures"
fi
echo "rdkafka: $p passed, $f failed"
((f == 0 && p > 0))
