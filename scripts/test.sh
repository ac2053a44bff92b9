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
# The layers of docs/design.md §1: no include goes up a layer or across a line, and the CMake
# link lists are the table's (under a second; the unit test layering_check_test also runs it).
./scripts/check-layers.sh
./scripts/build.sh
# Beside the ordinary tests, at the lowest CPU priority: the ThreadSanitizer tree's build, then
# the check that Debian's gcc 12 accepts every translation unit, warnings as errors
# (TSAN=0, GCC_CHECK=0 leave them out). The end-to-end tests spend most of their time waiting on
# registries, containerd and shaped links, so the compilers use cores that would idle; nothing in
# a test asserts a time. Their output is printed after the tests, in one piece.
side_log=$(mktemp /tmp/modelfs-test-side.XXXXXX)
side_pid=""
if [ "${TSAN:-1}" != 0 ] || [ "${GCC_CHECK:-1}" != 0 ]; then
  # setsid: a process group of its own, so that an interrupted run stops every compiler in it.
  TSAN="${TSAN:-1}" GCC_CHECK="${GCC_CHECK:-1}" BUILD_DIR="${BUILD_DIR:-build}" setsid bash -c '
    side_rc=0
    if [ "$TSAN" != 0 ]; then nice -n 19 ./scripts/tsan.sh || side_rc=1; fi
    if [ "$GCC_CHECK" != 0 ]; then nice -n 19 ./scripts/gcc-check.sh "$BUILD_DIR" || side_rc=1; fi
    exit "$side_rc"' > "$side_log" 2>&1 < /dev/null &
  side_pid=$!
fi
trap '[ -n "$side_pid" ] && kill -- -"$side_pid" 2>/dev/null; rm -f "$side_log"' EXIT
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
# run_ctest LIMIT CMD...: runs ctest with scripts/hang-report.sh beside it, which prints the
# stacks of any test (or anything holding its output) still running after LIMIT seconds.
run_ctest() {
  local limit=$1 ctest_pid reporter run_rc=0
  shift
  "$@" &
  ctest_pid=$!
  ./scripts/hang-report.sh "$ctest_pid" "$limit" &
  reporter=$!
  wait "$ctest_pid" || run_rc=$?
  kill "$reporter" 2> /dev/null
  wait "$reporter" 2> /dev/null || true
  return "$run_rc"
}
rc=0
run_ctest 400 ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j 2 "$@" ||
  rc=$?
if [ -n "$side_pid" ]; then
  side_rc=0
  wait "$side_pid" || side_rc=$?
  side_pid=""
  echo "test.sh: the ThreadSanitizer build and gcc-check, run beside the tests:"
  cat "$side_log"
  if [ "$side_rc" != 0 ]; then
    echo "test.sh: the ThreadSanitizer build or gcc-check failed (above)" >&2
    exit 1
  fi
fi
if [ "${TSAN:-1}" != 0 ]; then
  # halt_on_error: the first race fails its test at once, with its report; the tests append
  # tests/tsan/suppressions.txt (cmake/modelfs.cmake).
  # A test that times out here is run once more (--repeat after-timeout:2): the only one seen,
  # once in many runs, was fuse_mount_test hanging after every test had passed; the hang report
  # above it in the log says where it waited.
  run_ctest 240 env TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "${TSAN_BUILD_DIR:-build-tsan}" \
    -L tsan --output-on-failure --timeout 600 -j 2 --repeat after-timeout:2 || rc=$?
fi
exit "$rc"
