#!/usr/bin/env bash
# image-build.sh — the container image's build stage (deploy/Dockerfile
# runs it, and tests/integration/test_image.py runs it here, where there is
# no docker): outboxd built against librdkafka 2.15.1 (deploy/rdkafka.sh,
# from npm's source package, with Debian's libraries) and installed into
# DESTDIR with that library beside it:
#
#   DESTDIR/usr/bin/outboxd                   RUNPATH $ORIGIN/../lib/outboxd
#   DESTDIR/usr/lib/outboxd/librdkafka.so.1   the library itself (stripped), not a link
#   DESTDIR/usr/share/man/, usr/share/outboxd/  the rest of `meson install`
#
# The image's runtime stage copies usr/bin/outboxd and usr/lib/outboxd/ and
# installs the Debian packages of the libraries both need, not librdkafka1:
# the binary finds its librdkafka through its RUNPATH, relative to itself,
# so it is the same wherever DESTDIR's tree is put, and no system library
# directory holds a second librdkafka.so.1.
#
#   bash deploy/image-build.sh DESTDIR [BUILDDIR]   # BUILDDIR: default build-image/
#
# A release build (--buildtype=release --prefix=/usr --wrap-mode=nodownload)
# of outboxd alone (not the tests' programs), in a build directory of its
# own (configured again when it exists: the other build directories belong
# to other runs). Relative paths are taken from the repository root. It
# ends by checking what it installed: DESTDIR/usr/bin/outboxd --version
# names librdkafka 2.15.1, ldd finds librdkafka.so.1 in
# DESTDIR/usr/lib/outboxd, and the RUNPATH is that one directory (none of
# the build tree's, which would name the build machine's cache); any
# difference fails it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
# $ORIGIN is the dynamic loader's (the binary's own directory), not the shell's.
# shellcheck disable=SC2016
RPATH='$ORIGIN/../lib/outboxd'
LIBDIR_REL=usr/lib/outboxd

die() { echo "image-build: $*" >&2; exit 1; }
say() { echo "image-build: $*" >&2; }

(($# >= 1 && $# <= 2)) || die "usage: bash deploy/image-build.sh DESTDIR [BUILDDIR]"
DEST=$1
BUILD=${2:-build-image}
[[ "$DEST" == /* ]] || DEST="$ROOT/$DEST"
[[ "$BUILD" == /* ]] || BUILD="$ROOT/$BUILD"

# The version deploy/rdkafka.sh pins ("2.15.1 @confluentinc/...").
read -r want _ < <(bash deploy/rdkafka.sh --list)
# Its last line on standard output is the pkg-config directory; its
# progress goes to standard error.
pcdir=$(bash deploy/rdkafka.sh | tail -n 1)
[[ -f "$pcdir/rdkafka.pc" ]] || die "deploy/rdkafka.sh left no rdkafka.pc in '$pcdir'"
libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=libdir rdkafka)

setup=(--buildtype=release --prefix=/usr --wrap-mode=nodownload "-Dinstall_rpath=$RPATH")
[[ ! -f "$BUILD/build.ninja" ]] || setup=(--reconfigure "${setup[@]}")
say "configuring $BUILD against librdkafka in $libdir"
PKG_CONFIG_PATH="$pcdir" meson setup "${setup[@]}" "$BUILD" >&2
ninja -C "$BUILD" outboxd >&2
# --no-rebuild: what is installed is outboxd (built above), the man pages
# and data files; the tests' programs are not built for the image.
meson install -C "$BUILD" --no-rebuild --destdir "$DEST" >&2
# install(1) copies the file a symbolic link names. The build keeps its
# debugging information (13 MB); stripped as Debian strips its libraries,
# it is 3 MB.
install -D -m 0644 "$libdir/librdkafka.so.1" "$DEST/$LIBDIR_REL/librdkafka.so.1"
strip --strip-unneeded "$DEST/$LIBDIR_REL/librdkafka.so.1"
# librdkafka's licence travels with the binary copy (BSD 2-clause).
install -D -m 0644 "$(dirname "$pcdir")/../share/doc/librdkafka/LICENSES.txt" \
    "$DEST/usr/share/doc/outboxd/librdkafka/LICENSES.txt"

bin="$DEST/usr/bin/outboxd"
runpath=$(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')
[[ "$runpath" == "$RPATH" ]] || die "$bin has RUNPATH '$runpath', not '$RPATH'"
found=$(ldd "$bin" | sed -n 's/^[[:space:]]*librdkafka\.so\.1 => \(.*\) (0x[0-9a-f]*)$/\1/p')
[[ -n "$found" && "$(realpath "$found")" == "$(realpath "$DEST/$LIBDIR_REL/librdkafka.so.1")" ]] ||
    die "ldd finds librdkafka.so.1 for $bin at '$found', not in $DEST/$LIBDIR_REL"
version=$("$bin" --version | sed -n 's/^librdkafka //p')
[[ "$version" == "$want" ]] || die "$bin runs with librdkafka '$version', not $want"
say "$bin runs with librdkafka $version from $DEST/$LIBDIR_REL"
