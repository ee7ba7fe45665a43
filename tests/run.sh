#!/usr/bin/env bash
# tests/run.sh — THE test command for outboxd:
#
#   bash tests/run.sh
#
# 1. installs what is missing (deploy/deps.sh; as root on Debian 12),
# 2. configures and builds with meson/ninja into build/,
# 3. runs the unit tests (meson test --suite unit, cmocka),
# 4. runs the integration tests (pytest tests/integration: a throwaway
#    PostgreSQL 15 with wal2json and librdkafka's mock Kafka broker),
# 5. prints one last line "N passed, N failed" over unit test cases and
#    integration tests, and exits non-zero if anything failed, was skipped
#    (a missing part must fail, never skip) or nothing ran.
#
# Environment: PYTEST_ARGS adds pytest arguments (e.g. "-k stream -x");
# OUTBOXD_SKIP_DEPS=1 skips step 1. pytest gets SIGINT after 40 minutes
# (so its fixtures still stop Postgres and the broker).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
BUILD="$ROOT/build"
PY=/usr/bin/python3

say() { printf '\n=== %s\n' "$*"; }

# Prints the final line and exits: $1 passed, $2 failed.
finish() {
    local passed=$1 failed=$2
    echo
    echo "$passed passed, $failed failed"
    if ((failed > 0 || passed == 0)); then
        exit 1
    fi
    exit 0
}

if [[ "${OUTBOXD_SKIP_DEPS:-0}" != 1 ]]; then
    say "dependencies"
    if ! bash deploy/deps.sh; then
        echo "could not install dependencies" >&2
        finish 0 1
    fi
fi

say "build"
# Warnings are errors here (README, "Code style"); a plain `meson setup` keeps them
# as warnings for people building on other compilers.
if [[ -f "$BUILD/build.ninja" ]]; then
    meson setup --reconfigure -Dwerror=true -Dtest_hooks=true "$BUILD" >"$ROOT/build-setup.log" 2>&1
else
    meson setup -Dwerror=true -Dtest_hooks=true "$BUILD" >"$ROOT/build-setup.log" 2>&1
fi
rc=$?
if ((rc != 0)); then
    cat "$ROOT/build-setup.log"
    rm -f "$ROOT/build-setup.log"
    echo "meson setup failed" >&2
    finish 0 1
fi
rm -f "$ROOT/build-setup.log"
if ! ninja -C "$BUILD"; then
    echo "build failed" >&2
    finish 0 1
fi

# --- style: the C sources are formatted as .clang-format says --------------
say "style"
style_failed=0
if ! clang-format --dry-run --Werror src/*.c include/outboxd/*.h tests/unit/*.c tests/unit/*.h \
        tests/broker/*.c; then
    echo "clang-format: run clang-format -i on the files above" >&2
    style_failed=1
fi

# --- unit tests: count cmocka cases from meson's test log -----------------
say "unit tests"
rm -f "$BUILD/meson-logs/testlog.json"
meson test -C "$BUILD" --suite unit --print-errorlogs
unit_rc=$?
read -r unit_passed unit_failed < <("$PY" - "$BUILD/meson-logs/testlog.json" <<'EOF'
# Counts cmocka cases by their "[       OK ] name" and "[  FAILED  ] name"
# lines on stdout (CMOCKA_MESSAGE_OUTPUT=stdout); the "N test(s)" summaries
# go to stderr and count only when stdout has no case lines.
import json, re, sys
passed = failed = 0
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    t = json.loads(line)
    out = t.get("stdout") or ""
    err = t.get("stderr") or ""
    p = len(re.findall(r"^\[       OK \] ", out, re.M))
    f = len(re.findall(r"^\[  (?:FAILED|ERROR)\s*\] (?!\d+ test)", out, re.M))
    if p == 0 and f == 0:
        both = out + err
        p = sum(int(n) for n in re.findall(r"\[  PASSED  \] (\d+) test", both))
        f = sum(int(n) for n in re.findall(r"\[  FAILED  \] (\d+) test", both))
    ok = t.get("result") in ("OK", "EXPECTEDFAIL")
    if not ok and f == 0:
        f = 1      # crashed, timed out or failed without a cmocka case line
    if ok and p == 0 and f == 0:
        p = 1      # a test that is not cmocka
    passed += p
    failed += f
print(passed, failed)
EOF
)
unit_passed=${unit_passed:-0}
unit_failed=${unit_failed:-0}
if ((unit_rc != 0 && unit_failed == 0)); then
    unit_failed=1  # meson itself failed
fi
echo "unit: $unit_passed passed, $unit_failed failed"

# --- integration tests -------------------------------------------------------
say "integration tests"
junit="$BUILD/integration-junit.xml"
rm -f "$junit"
export OUTBOXD_BUILD="$BUILD"
# shellcheck disable=SC2086
timeout --signal=INT --kill-after=60 2400 \
    "$PY" -m pytest tests/integration -q -p no:cacheprovider -rfEs \
    --junitxml="$junit" ${PYTEST_ARGS:-}
it_rc=$?
read -r it_passed it_failed < <("$PY" - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print(0, 0)
    sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
tests = failed = 0
for s in suites:
    tests += int(s.get("tests", 0))
    # skipped counts as failed: a missing part must fail, never skip
    failed += sum(int(s.get(k, 0)) for k in ("failures", "errors", "skipped"))
print(tests - failed, failed)
EOF
)
it_passed=${it_passed:-0}
it_failed=${it_failed:-0}
if ((it_rc != 0 && it_failed == 0)); then
    it_failed=1  # pytest crashed, timed out, or collected nothing (rc 5)
fi
echo "integration: $it_passed passed, $it_failed failed"

finish $((unit_passed + it_passed + 1 - style_failed)) $((unit_failed + it_failed + style_failed))
