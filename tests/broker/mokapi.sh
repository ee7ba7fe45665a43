#!/usr/bin/env bash
# mokapi.sh — fetches mokapi, a Kafka-protocol server written in Go (not
# built on librdkafka), for the second-broker smoke test
# (tests/integration/test_mokapi.py; tests/README.md, "A second
# Kafka-protocol server: mokapi"). It comes from the npm package
# @go-mokapi/linux-x64 and is unpacked into
#
#   $OUTBOXD_MOKAPI_CACHE/            (default /var/cache/outboxd-mokapi)
#       package/bin/mokapi
#       .version                      (the npm version, written last)
#
# A cache whose .version names the pinned version is reused without any
# network; otherwise the package is fetched anew into a temporary
# directory that replaces the old one only once complete. Any failure
# exits non-zero: the smoke test then fails, it is never skipped.
#
#   bash tests/broker/mokapi.sh           # fetch unless present
#   bash tests/broker/mokapi.sh --bin     # print the binary's path
set -euo pipefail

PKG="@go-mokapi/linux-x64"
VERSION="0.52.0"
CACHE=${OUTBOXD_MOKAPI_CACHE:-/var/cache/outboxd-mokapi}
BIN="$CACHE/package/bin/mokapi"

die() { echo "mokapi: $*" >&2; exit 1; }

if [[ "${1:-}" == "--bin" ]]; then
    echo "$BIN"
    exit 0
fi
[[ $# -eq 0 ]] || die "unknown argument '$1' (expected --bin or nothing)"

if [[ -f "$CACHE/.version" && "$(cat "$CACHE/.version")" == "$VERSION" ]] &&
    "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
    echo "mokapi: $VERSION present ($BIN)"
    exit 0
fi

command -v npm >/dev/null || die "npm is missing (deploy/deps.sh installs it)"
parent=$(dirname "$CACHE")
mkdir -p "$parent"
tmp=$(mktemp -d "$parent/.mokapi-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "mokapi: fetching $PKG@$VERSION"
(cd "$tmp" && npm pack --silent "$PKG@$VERSION" >/dev/null) || die "npm pack $PKG@$VERSION failed"
tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)
[[ -n "$tgz" ]] || die "npm pack $PKG@$VERSION left no tarball"
tar -xzf "$tgz" -C "$tmp" --no-same-owner || die "could not unpack $tgz"
rm -f "$tgz"
chmod -R a+rX,go-w "$tmp"
"$tmp/package/bin/mokapi" --version | grep -q "$VERSION" ||
    die "$PKG@$VERSION: its mokapi does not run or is not $VERSION"
echo "$VERSION" >"$tmp/.version"
rm -rf "$CACHE"
mv "$tmp" "$CACHE"
trap - EXIT
echo "mokapi: $VERSION ready ($BIN)"
