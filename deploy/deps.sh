#!/usr/bin/env bash
# deps.sh — installs every Debian 12 package outboxd needs to build, run and
# be tested: the toolchain, the daemon's libraries (librdkafka, libpq,
# jansson, inih, libmicrohttpd, libsystemd), PostgreSQL 15 with the wal2json
# plugin, cmocka, and the Python modules and tools the integration tests use.
#
# Idempotent: when everything is installed already it says so and touches
# nothing (no network); otherwise it runs apt-get update once and installs
# what is missing. Needs root (or sudo) only in that case.
#
#   bash deploy/deps.sh            # install what is missing
#   bash deploy/deps.sh --list     # print the package names and exit
set -euo pipefail

PACKAGES=(
    # build
    build-essential pkg-config meson ninja-build
    libpq-dev librdkafka-dev libjansson-dev libinih-dev libmicrohttpd-dev
    libsystemd-dev
    # tests
    libcmocka-dev clang-format postgresql-15 postgresql-15-wal2json
    python3 python3-confluent-kafka python3-psycopg2 python3-pytest python3-yaml kcat
)

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

if ((${#missing[@]} == 0)); then
    echo "deps: all ${#PACKAGES[@]} packages present"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        SUDO=(sudo)
    else
        echo "deps: missing ${missing[*]}; run this script as root" >&2
        exit 1
    fi
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
echo "deps: done"
