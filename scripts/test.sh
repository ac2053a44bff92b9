#!/usr/bin/env bash
# Sets everything up on a fresh Debian bookworm machine (as root) and runs every test:
# the layering check, unit tests, fuzz smoke runs and end-to-end tests against real services on loopback, then the
# unit and FUSE tests again under ThreadSanitizer (ctest label tsan, tree ./build-tsan, built by
# scripts/tsan.sh). TSAN=0 leaves the ThreadSanitizer run out.
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit   (the args apply to the
# ordinary tree; the tsan run is always the whole label)
# As root, or as a user with sudo: started as another user it re-runs itself under sudo (FUSE,
# containerd and the package installs need root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "test.sh: run as root (FUSE, containerd, apt)" >&2; exit 2; }
  echo "test.sh: not root; re-running under sudo"
  exec sudo env TSAN="${TSAN:-1}" BUILD_DIR="${BUILD_DIR:-build}" \
    TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-build-tsan}" CI="${CI:-}" "$PWD/scripts/test.sh" "$@"
fi
./scripts/install-deps.sh
# The layers of docs/design.md §1: no include goes up a layer or across a line (seconds; the
# unit test layering_check_test also runs it).
./scripts/check-layers.sh
./scripts/build.sh
# Debian's gcc 12 accepts every translation unit, warnings as errors (GCC_CHECK=0 skips it).
if [ "${GCC_CHECK:-1}" != 0 ]; then
  ./scripts/gcc-check.sh "${BUILD_DIR:-build}"
fi
# FUSE tests need the device node and the kernel module; say so plainly when they are missing.
[ -e /dev/fuse ] || echo "test.sh: warning: /dev/fuse is missing; FUSE tests will fail" >&2
# A fresh tree knows no test durations, so ctest would start the slow end-to-end tests in any
# order and the last one could run alone at the end: seed it with durations measured on a
# 2-core machine (tests/ctest-costs.txt; ctest keeps them up to date in the tree), so it starts
# the slowest first.
costs="${BUILD_DIR:-build}/Testing/Temporary/CTestCostData.txt"
if [ ! -f "$costs" ]; then
  mkdir -p "$(dirname "$costs")"
  cp tests/ctest-costs.txt "$costs"
fi
rc=0
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j 2 "$@" || rc=$?
if [ "${TSAN:-1}" != 0 ]; then
  ./scripts/tsan.sh
  # halt_on_error: the first race fails its test at once, with its report; the tests append
  # tests/tsan/suppressions.txt (cmake/modelfs.cmake).
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "${TSAN_BUILD_DIR:-build-tsan}" -L tsan \
    --output-on-failure --timeout 600 -j 2 || rc=$?
fi
exit "$rc"
