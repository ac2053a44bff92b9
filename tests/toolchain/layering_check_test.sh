#!/usr/bin/env bash
# layering_check_test: scripts/check-layers.sh passes on the real tree, and fails, naming the
# file, the line and the rule, on a tiny tree with one upward include planted in it.
# Usage: layering_check_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: layering_check_test.sh SOURCE_DIR}
check="$src/scripts/check-layers.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "layering_check_test: FAIL: $*" >&2; exit 1; }

# 1. The real tree keeps to the layers.
"$check" "$src" >"$work/real.out" 2>&1 || { cat "$work/real.out" >&2; fail "the real tree breaks the layers"; }

# 2. A tiny tree that does too: core/oci (layer 2) includes core/cache (layer 3).
tree="$work/tree"
mkdir -p "$tree/core/oci" "$tree/core/cache" "$tree/core/status"
printf '#pragma once\n' >"$tree/core/status/status_macros.h"
printf '#pragma once\n#include "core/status/status_macros.h"\n' >"$tree/core/cache/blob_cache.h"
printf '#pragma once\n#include "core/status/status_macros.h"\n' >"$tree/core/oci/digest.h"
"$check" "$tree" >"$work/ok.out" 2>&1 || { cat "$work/ok.out" >&2; fail "a clean tiny tree fails"; }
printf '#include "core/oci/digest.h"\n\n#include "core/cache/blob_cache.h"\n' >"$tree/core/oci/digest.cc"
rc=0
"$check" "$tree" >"$work/bad.out" 2>&1 || rc=$?
cat "$work/bad.out"
[ "$rc" -eq 1 ] || fail "an upward include exits $rc, not 1"
grep -q 'core/oci/digest.cc:3: core/cache/blob_cache.h: core/oci (layer 2) includes upward into core/cache (layer 3)' \
  "$work/bad.out" || fail "the report does not name the file, line and rule"

# 3. tests/ may not include integration/ (the support leaf is testsupport/).
mkdir -p "$tree/tests/oci" "$tree/integration/mount"
printf '#pragma once\n' >"$tree/integration/mount/mount_test_env.h"
printf '#include "integration/mount/mount_test_env.h"\n' >"$tree/tests/oci/digest_test.cc"
rm "$tree/core/oci/digest.cc"
rc=0
"$check" "$tree" >"$work/cross.out" 2>&1 || rc=$?
cat "$work/cross.out"
[ "$rc" -eq 1 ] || fail "tests/ including integration/ exits $rc, not 1"
grep -q 'tests/oci/digest_test.cc:1: .*tests (layer 11) may not include integration' "$work/cross.out" ||
  fail "the report does not name the across-the-line include"
echo "layering_check_test: ok"
