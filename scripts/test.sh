#!/usr/bin/env bash
# Sets everything up on a fresh Debian bookworm machine (as root) and runs every test:
# unit tests, fuzz smoke runs and end-to-end tests against real services on loopback.
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# FUSE tests need the device node and the kernel module; say so plainly when they are missing.
[ -e /dev/fuse ] || echo "test.sh: warning: /dev/fuse is missing; FUSE tests will fail" >&2
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 -j 2 "$@"
