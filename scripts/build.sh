#!/usr/bin/env bash
# Configures and builds modelfs with clang (so the libFuzzer targets build too) into ./build,
# warnings as errors (MODELFS_WERROR, off in a plain cmake build).
# Usage: scripts/build.sh [extra cmake args...]   (CCACHE=0: no ccache; scripts/ccache-launcher.sh;
#   TARGETS="a b": build only those targets, as scripts/demo.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# shellcheck source=scripts/ccache-launcher.sh
source scripts/ccache-launcher.sh
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
    -DMODELFS_WERROR=ON "${launcher[@]}" "$@"
fi
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
