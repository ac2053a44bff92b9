#!/usr/bin/env bash
# Sets everything up on a fresh Debian bookworm machine (as root) and runs every test:
# unit tests, fuzz smoke runs and end-to-end tests against real services on loopback, then the
# unit and FUSE tests again under ThreadSanitizer (ctest label tsan, tree ./build-tsan, built by
# scripts/tsan.sh). TSAN=0 leaves the ThreadSanitizer run out.
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit   (the args apply to the
# ordinary tree; the tsan run is always the whole label)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# FUSE tests need the device node and the kernel module; say so plainly when they are missing.
[ -e /dev/fuse ] || echo "test.sh: warning: /dev/fuse is missing; FUSE tests will fail" >&2
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
