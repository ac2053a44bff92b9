#!/usr/bin/env bash
# Builds modelfs and its Debian package (CPack): modelfs_<version>_<arch>.deb with the CLI,
# the modelfs-snapshotter daemon, its systemd unit, /etc/modelfs/snapshotter.toml and docs.
# Prints the path of the .deb on the last line.
# Usage: scripts/package.sh [--fast]
#   --fast  build only the two binaries the package holds, not the tests and benchmarks
# Environment: BUILD_DIR (default build), OUT_DIR (default $BUILD_DIR/packages), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/packages}
FAST=0
[ "${1:-}" = "--fast" ] && FAST=1

# A .deb installs under /usr; an existing build dir is reconfigured (objects are kept).
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
fi
if [ "$FAST" = 1 ]; then
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
      -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
  fi
  targets=(modelfs)
  if cmake --build "$BUILD_DIR" --target help | grep -q '^modelfs-snapshotter:'; then
    targets+=(modelfs-snapshotter)
  fi
  cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
else
  BUILD_DIR=$BUILD_DIR ./scripts/build.sh -DCMAKE_INSTALL_PREFIX=/usr
fi

mkdir -p "$OUT_DIR"
OUT_ABS=$(cd "$OUT_DIR" && pwd)
rm -f "$OUT_ABS"/modelfs_*.deb
(cd "$BUILD_DIR" && cpack -G DEB --config CPackConfig.cmake -B "$OUT_ABS") >&2
deb=$(ls "$OUT_ABS"/modelfs_*.deb)
dpkg-deb -I "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Recommends\):/  \1:/p' >&2
echo "$deb"
