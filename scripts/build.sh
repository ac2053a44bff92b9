#!/usr/bin/env bash
# Configures and builds modelfs with clang (so the libFuzzer targets build too) into ./build,
# warnings as errors (MODELFS_WERROR, off in a plain cmake build).
# Usage: scripts/build.sh [extra cmake args...]   (CCACHE=0: no ccache)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# ccache, where installed (scripts/install-deps.sh installs it): a fresh clone on a machine that
# built modelfs before compiles only what changed. Paths are taken relative to this tree and the
# build directory is not hashed, so any clone, anywhere, hits the same cache entries.
launcher=()
if command -v ccache > /dev/null && [ "${CCACHE:-1}" != 0 ]; then
  l="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=true;ccache"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$l" -DCMAKE_CXX_COMPILER_LAUNCHER="$l")
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
    -DMODELFS_WERROR=ON "${launcher[@]}" "$@"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
