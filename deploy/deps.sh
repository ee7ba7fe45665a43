#!/usr/bin/env bash
# deps.sh — installs every Debian 12 package outboxd needs to build, run and
# be tested: the toolchain, the daemon's libraries (librdkafka, libpq,
# jansson, inih, libmicrohttpd, libsystemd), PostgreSQL 15 with the wal2json
# plugin, cmocka, the Python modules and tools the integration tests use, and
# clang-14 with its runtime libraries (libFuzzer, the sanitizers) for the
# fuzz targets. gcc's AddressSanitizer and UndefinedBehaviorSanitizer
# runtimes come with build-essential.
#
# Last, it runs deploy/pgversions.sh: the PostgreSQL 16, 17 and 18 servers
# of the version matrix (tests/versions.sh), from npm (node and npm come
# from Debian's nodejs and npm when missing), cached in
# /var/cache/outboxd-pg and reused; a failure there fails this script.
#
# It also generates the de_DE.UTF-8 locale: the integration tests run a
# Postgres cluster with lc_messages = de_DE.UTF-8 (a server answering in
# German must be understood by outboxd all the same).
#
# Idempotent: when everything is installed already it says so and touches
# nothing (no network); otherwise it runs apt-get update once and installs
# what is missing. Needs root (or sudo) only in that case.
#
#   bash deploy/deps.sh            # install what is missing
#   bash deploy/deps.sh --build    # only what building outboxd needs (a host that runs it)
#   bash deploy/deps.sh --list     # print the package names and exit
set -euo pipefail

BUILD_PACKAGES=(
    build-essential pkg-config meson ninja-build
    libpq-dev librdkafka-dev libjansson-dev libinih-dev libmicrohttpd-dev
    libsystemd-dev
    # tests/meson.build, part of the meson project, needs cmocka to configure
    libcmocka-dev
)
PACKAGES=(
    "${BUILD_PACKAGES[@]}"
    # tests
    clang-format postgresql-15 postgresql-15-wal2json
    python3 python3-confluent-kafka python3-kafka python3-lz4 python3-psycopg2 python3-pytest python3-yaml kcat
    locales openssl
    # the failover test with a real failover manager (test_patroni.py)
    patroni etcd-server
    # fuzzing: clang-14 recommends, but does not pull in, libFuzzer
    clang-14 libclang-rt-14-dev
)
# The locale the tests' German-speaking Postgres cluster uses.
TEST_LOCALE="de_DE.UTF-8"

BUILD_ONLY=false
if [[ "${1:-}" == "--build" ]]; then
    BUILD_ONLY=true
    PACKAGES=("${BUILD_PACKAGES[@]}")
fi
if [[ "${1:-}" == "--list" ]]; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

# A package counts as present when dpkg has it fully installed.
missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "installed" ]] || missing+=("$p")
done
# npm and node fetch the matrix's servers; any install of them will do
# (a nodejs from elsewhere may carry npm itself).
if ! $BUILD_ONLY && { ! command -v npm >/dev/null || ! command -v node >/dev/null; }; then
    missing+=(nodejs npm)
fi

# locale -a spells it de_DE.utf8; a build needs none.
have_locale() {
    $BUILD_ONLY || locale -a 2>/dev/null | grep -qix "${TEST_LOCALE/UTF-8/utf8}"
}

HERE=$(dirname "${BASH_SOURCE[0]}")

if ((${#missing[@]} == 0)) && $BUILD_ONLY; then
    echo "deps: all ${#PACKAGES[@]} build packages present"
    exit 0
fi
if ((${#missing[@]} == 0)) && have_locale; then
    echo "deps: all ${#PACKAGES[@]} packages present, locale $TEST_LOCALE generated"
    bash "$HERE/pgversions.sh"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        SUDO=(sudo)
    else
        echo "deps: missing ${missing[*]:-} (locale $TEST_LOCALE?); run this script as root" >&2
        exit 1
    fi
fi

if ((${#missing[@]} > 0)); then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
fi

if ! have_locale; then
    echo "deps: generating locale $TEST_LOCALE"
    # Uncomment its line in /etc/locale.gen, or add one; then generate.
    "${SUDO[@]}" sed -i "s/^# *\(${TEST_LOCALE} UTF-8\)\$/\1/" /etc/locale.gen
    if ! grep -qx "${TEST_LOCALE} UTF-8" /etc/locale.gen; then
        echo "${TEST_LOCALE} UTF-8" | "${SUDO[@]}" tee -a /etc/locale.gen >/dev/null
    fi
    "${SUDO[@]}" locale-gen >/dev/null
    have_locale || { echo "deps: could not generate locale $TEST_LOCALE" >&2; exit 1; }
fi
$BUILD_ONLY || bash "$HERE/pgversions.sh"
echo "deps: done"
