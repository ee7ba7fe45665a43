#!/usr/bin/env bash
# rdkafka.sh — builds a current librdkafka (2.15.1) beside Debian 12's 2.0.2
# (librdkafka-dev, from deploy/deps.sh), so that outboxd can be built and
# tested against both. Its source comes from the npm package
# @confluentinc/kafka-javascript, which carries librdkafka's full source
# under deps/librdkafka; it is built with its own ./configure against
# Debian's libraries (the -dev packages below, installed when missing) and
# only the C library is installed, into
#
#   $OUTBOXD_RDKAFKA_CACHE/librdkafka-<version>/   (default /var/cache/outboxd-rdkafka)
#       include/librdkafka/rdkafka.h, rdkafka_mock.h
#       lib/librdkafka.so.1, librdkafka.so, librdkafka.a
#       lib/pkgconfig/rdkafka.pc, rdkafka-static.pc
#       share/doc/librdkafka/LICENSES.txt             (its licence and its parts')
#       .version                                  (the npm version, written last)
#
# readable by everyone. A build whose .version names the pinned npm version
# and whose library reports the pinned librdkafka version is reused without
# any network; otherwise it is fetched (npm pack) and built anew in a
# temporary directory that replaces the old one only once complete.
#
# Nothing but npm downloads: configure runs with --no-download (no mklove
# module fetched) and without --install-deps (no dependency fetched or
# built from source), and wget and curl are replaced by commands that
# refuse to run while it and make run. A feature whose Debian library is missing, and cannot be
# installed, is disabled (and said so), never downloaded.
#
# The last line on standard output is the pkg-config directory:
#
#   bash deploy/rdkafka.sh                   # build if missing; print the pkg-config dir
#   bash deploy/rdkafka.sh --pkgconfig-dir   # print it only (no build)
#   bash deploy/rdkafka.sh --list            # print "librdkafka-version npm-package@version"
#
#   PKG_CONFIG_PATH=$(bash deploy/rdkafka.sh) meson setup build-rdk215 ...
#
# The library's directory is no system one: meson puts it in the binaries'
# RUNPATH in the build tree (check with ldd and outboxd --version).
set -euo pipefail

PKG="@confluentinc/kafka-javascript"
NPM_VERSION="1.10.1"
RDKAFKA_VERSION="2.15.1"
CACHE=${OUTBOXD_RDKAFKA_CACHE:-/var/cache/outboxd-rdkafka}
PREFIX="$CACHE/librdkafka-$RDKAFKA_VERSION"
PCDIR="$PREFIX/lib/pkgconfig"
LICENSES=share/doc/librdkafka/LICENSES.txt

# Debian's -dev packages of the features it is built with, and the
# configure option that turns each off when its package cannot be had.
declare -A FEATURES=(
    [zlib1g-dev]="--disable-zlib"
    [libssl-dev]="--disable-ssl"
    [libsasl2-dev]="--disable-gssapi"
    [libzstd-dev]="--disable-zstd"
    [liblz4-dev]="--disable-lz4-ext"
    [libcurl4-openssl-dev]="--disable-curl"
)
# The config.h symbol each one sets when configure found it.
declare -A FEATURE_DEFINE=(
    [zlib1g-dev]="WITH_ZLIB"
    [libssl-dev]="WITH_SSL"
    [libsasl2-dev]="WITH_SASL_CYRUS"
    [libzstd-dev]="WITH_ZSTD"
    [liblz4-dev]="WITH_LZ4_EXT"
    [libcurl4-openssl-dev]="WITH_CURL"
)
DEV_PACKAGES=(zlib1g-dev libssl-dev libsasl2-dev libzstd-dev liblz4-dev libcurl4-openssl-dev)
# To build at all: a C compiler, make, pkg-config, python3 (its Makefile
# asks python3 for the version), npm and node.
TOOL_PACKAGES=(build-essential pkg-config python3)

# Seconds since $1 (an $EPOCHREALTIME), to a tenth.
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
die() { echo "rdkafka: $*" >&2; exit 1; }
say() { echo "rdkafka: $*" >&2; }

case "${1:-}" in
    --pkgconfig-dir) echo "$PCDIR"; exit 0 ;;
    --list) echo "$RDKAFKA_VERSION $PKG@$NPM_VERSION"; exit 0 ;;
    "") ;;
    *) die "unknown argument '$1' (expected --pkgconfig-dir or --list)" ;;
esac

building=
trap '[[ -z "$building" ]] || rm -rf "$building"' EXIT

# The version a library reports at run time (rd_kafka_version_str()), from
# a little program linked against the .pc in $1 (the library's directory in
# its RUNPATH).
runtime_version() {
    local pcdir=$1 libdir out
    libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=libdir rdkafka) || return 1
    out=$(mktemp -d)
    printf '%s\n' '#include <stdio.h>' '#include <librdkafka/rdkafka.h>' \
        'int main(void) { puts(rd_kafka_version_str()); return 0; }' >"$out/v.c"
    # shellcheck disable=SC2046
    if cc -o "$out/v" "$out/v.c" $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs rdkafka) \
        -Wl,-rpath,"$libdir" 2>/dev/null; then
        "$out/v"
    fi
    rm -rf "$out"
}

# Is the pinned version built, with a library that says so?
present() {
    [[ -f "$PREFIX/.version" && "$(cat "$PREFIX/.version")" == "$PKG@$NPM_VERSION" ]] || return 1
    [[ -f "$PCDIR/rdkafka.pc" && -f "$PREFIX/$LICENSES" ]] || return 1
    [[ "$(PKG_CONFIG_PATH="$PCDIR" pkg-config --modversion rdkafka 2>/dev/null)" == "$RDKAFKA_VERSION" ]] || return 1
    [[ "$(runtime_version "$PCDIR")" == "$RDKAFKA_VERSION" ]]
}

installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == "installed" ]]
}

# Installs what is missing of DEV_PACKAGES and TOOL_PACKAGES when it can
# (root or sudo); sets DISABLE to the configure options of the features
# whose package is still missing.
DISABLE=()
ensure_packages() {
    local missing=() p sudo=()
    for p in "${TOOL_PACKAGES[@]}" "${DEV_PACKAGES[@]}"; do
        installed "$p" || missing+=("$p")
    done
    command -v npm >/dev/null || missing+=(npm)
    command -v node >/dev/null || missing+=(nodejs)
    if ((${#missing[@]} > 0)); then
        if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null; then sudo=(sudo); fi
        if [[ $(id -u) -eq 0 || ${#sudo[@]} -gt 0 ]]; then
            say "installing ${missing[*]}"
            export DEBIAN_FRONTEND=noninteractive
            "${sudo[@]}" apt-get update -qq
            # One at a time: a package this Debian lacks only turns its feature off.
            for p in "${missing[@]}"; do
                "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
                    -o Dpkg::Use-Pty=0 "$p" >/dev/null || say "could not install $p"
            done
        else
            say "missing ${missing[*]} and not root: features without their library are disabled"
        fi
    fi
    for p in "${TOOL_PACKAGES[@]}"; do
        installed "$p" || die "$p is missing (deploy/deps.sh installs it)"
    done
    command -v npm >/dev/null || die "npm is missing (deploy/deps.sh installs it)"
    for p in "${DEV_PACKAGES[@]}"; do
        if ! installed "$p"; then
            say "$p missing: building with ${FEATURES[$p]}"
            DISABLE+=("${FEATURES[$p]}")
        fi
    done
}

build() {
    local tmp tgz src nodl dest p nproc=2
    ensure_packages
    mkdir -p "$CACHE"
    chmod 0755 "$CACHE"
    tmp=$(mktemp -d "$CACHE/.build-$RDKAFKA_VERSION.XXXXXX")
    building=$tmp # removed on any exit until it is in place

    say "fetching $PKG@$NPM_VERSION"
    local t0=$EPOCHREALTIME
    (cd "$tmp" && npm pack --silent "$PKG@$NPM_VERSION" >/dev/null) ||
        die "npm pack $PKG@$NPM_VERSION failed"
    tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)
    [[ -n "$tgz" ]] || die "npm pack $PKG@$NPM_VERSION left no tarball"
    tar -xzf "$tgz" -C "$tmp" --no-same-owner package/deps/librdkafka ||
        die "$tgz has no package/deps/librdkafka"
    rm -f "$tgz"
    src="$tmp/package/deps/librdkafka"
    grep -q "^#define RD_KAFKA_VERSION 0x$(printf '%02x%02x%02x' ${RDKAFKA_VERSION//./ })ff" \
        "$src/src/rdkafka.h" || die "$PKG@$NPM_VERSION does not carry librdkafka $RDKAFKA_VERSION"
    say "fetched in $(elapsed "$t0") s"

    # Whatever would download during configure or make fails instead.
    nodl="$tmp/no-download"
    mkdir -p "$nodl"
    for p in wget curl; do
        printf '#!/bin/sh\necho "rdkafka.sh: refusing to run %s $*" >&2\nexit 1\n' "$p" >"$nodl/$p"
        chmod +x "$nodl/$p"
    done

    t0=$EPOCHREALTIME
    say "configuring${DISABLE[*]:+ (${DISABLE[*]})}"
    (cd "$src" && env -u MKL_INSTALL_DEPS -u MKL_SOURCE_DEPS_ONLY PATH="$nodl:$PATH" \
        ./configure --prefix="$PREFIX" --no-download --no-cache "${DISABLE[@]}" \
        >"$tmp/configure.log" 2>&1) ||
        { tail -n 30 "$tmp/configure.log" >&2; die "configure failed (log above)"; }
    ! grep -qi 'refusing to run\|downloading' "$tmp/configure.log" ||
        die "configure tried to download: $(grep -i 'refusing to run\|downloading' "$tmp/configure.log" | head -n 3)"
    # Each feature whose library is installed must have been found.
    for p in "${DEV_PACKAGES[@]}"; do
        installed "$p" || continue
        grep -q "^#define ${FEATURE_DEFINE[$p]} 1" "$src/config.h" ||
            die "configure did not find $p (${FEATURE_DEFINE[$p]}): see $tmp/configure.log"
    done

    say "building (make -j$nproc libs)"
    (cd "$src" && PATH="$nodl:$PATH" make -j"$nproc" libs >"$tmp/make.log" 2>&1) ||
        { tail -n 30 "$tmp/make.log" >&2; die "make failed (log above)"; }
    # The C library, its headers and its .pc files only (no C++ library, no docs).
    dest="$tmp/dest"
    (cd "$src" && PATH="$nodl:$PATH" make -C src install DESTDIR="$dest" >>"$tmp/make.log" 2>&1) ||
        { tail -n 30 "$tmp/make.log" >&2; die "make install failed (log above)"; }
    # Its licence and those of the code it carries, which binary copies
    # must reproduce (the container image ships them).
    install -D -m 0644 "$src/LICENSES.txt" "$dest$PREFIX/$LICENSES"
    say "built in $(elapsed "$t0") s"
    local built_with
    built_with=$(sed -n 's/^#define BUILT_WITH "\(.*\)"$/\1/p' "$src/config.h")

    chmod -R a+rX,go-w "$dest$PREFIX"
    echo "$PKG@$NPM_VERSION" >"$dest$PREFIX/.version"
    chmod 0644 "$dest$PREFIX/.version"
    # The .pc names $PREFIX: it is checked where it will be, after a move
    # that keeps the old build aside until the new one passes.
    rm -rf "$PREFIX.old"
    [[ ! -e "$PREFIX" ]] || mv "$PREFIX" "$PREFIX.old"
    mv "$dest$PREFIX" "$PREFIX"
    if ! present; then
        rm -rf "$PREFIX"
        [[ ! -e "$PREFIX.old" ]] || mv "$PREFIX.old" "$PREFIX"
        die "the build in $PREFIX does not report librdkafka $RDKAFKA_VERSION"
    fi
    rm -rf "$PREFIX.old" "$tmp"
    building=
    say "librdkafka $RDKAFKA_VERSION ready in $PREFIX (built with: $built_with)"
}

# One run at a time checks and builds: two at once (tests/run.sh builds in
# the background while the integration tests run deploy/image-build.sh)
# would both build, and each move the other's directory aside. The second
# waits for the lock and then finds the first one's build. A user who
# cannot write the cache (and so cannot build into it) takes no lock.
if mkdir -p "$CACHE" 2>/dev/null && { exec 9>>"$CACHE/.lock"; } 2>/dev/null; then
    flock 9
fi
if present; then
    say "librdkafka $RDKAFKA_VERSION present ($PREFIX, $PKG@$NPM_VERSION)"
else
    build
fi
echo "$PCDIR"
