#!/usr/bin/env bash
# layering_check_test: scripts/check-layers.sh passes on the real tree, and on a copy of it fails
# (exit 1), naming the file and what it broke, for each violation planted in turn: an upward
# include in angle brackets, the FUSE tree including the FUSE ops, core/model including
# core/registry, core/resolve including the cache, an upward include in a .hpp and in a .inc,
# two rows of one layer naming each other, a CMake link list the table does not name, a table
# row CMake does not link, tests/ including integration/, and a source file in no target. Each plant is undone before the next.
# Usage: layering_check_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: layering_check_test.sh SOURCE_DIR}
check="$src/scripts/check-layers.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "layering_check_test: FAIL: $*" >&2; exit 1; }

# 1. The real tree keeps to the layers.
"$check" "$src" >"$work/real.out" 2>&1 || { cat "$work/real.out" >&2; fail "the real tree breaks the layers"; }

# A copy of the tree: its sources, CMake files and docs (no build trees, no .git).
tree="$work/tree"
mkdir "$tree"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=node_modules -cf - . | tar -C "$tree" -xf -
"$check" "$tree" >"$work/copy.out" 2>&1 || { cat "$work/copy.out" >&2; fail "the copy breaks the layers"; }

cases=0
# expect_violation NAME PATTERN: the check fails (exit 1) on the tree as planted, and its report
# matches PATTERN (grep -E); then the tree is restored from the real one.
expect_violation() {
  local name=$1 pattern=$2 rc=0
  "$check" "$tree" >"$work/$name.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || { cat "$work/$name.out" >&2; fail "$name: exits $rc, not 1"; }
  grep -Eq -- "$pattern" "$work/$name.out" || { cat "$work/$name.out" >&2; fail "$name: no line matches: $pattern"; }
  echo "layering_check_test: $name: $(grep -E -- "$pattern" "$work/$name.out" | head -1)"
  cases=$((cases + 1))
}
restore() { for f in "$@"; do cp "$src/$f" "$tree/$f"; done; }
append() { printf '%s\n' "$2" >>"$tree/$1"; }

# 2. An angle-bracket include going up: core/oci (layer 2) includes host/ (layer 7).
append core/oci/digest.cc '#include <host/model_host.h>'
expect_violation angle 'core/oci/digest.cc:[0-9]+: host/model_host.h: modelfs_oci \(layer 2, design.md:[0-9]+\) includes upward into modelfs_host \(layer 7\)'
restore core/oci/digest.cc

# 3. One folder, two rows: the FUSE tree may not include the FUSE ops (a target above it).
append fuse/model_tree.cc '#include "fuse/fuse_ops.h"'
expect_violation fuse_tree 'fuse/model_tree.cc:[0-9]+: fuse/fuse_ops.h: modelfs_fuse_tree \(layer 6, design.md:[0-9]+\) includes modelfs_fuse \(layer 6\), which its row does not name'
restore fuse/model_tree.cc

# 4. core/model may not include core/registry (it resolves through core/resolve).
append core/model/modelinfo.cc '#include "core/registry/reference.h"'
expect_violation model_registry 'core/model/modelinfo.cc:[0-9]+: core/registry/reference.h: modelfs_model \(layer 5, .*\) includes modelfs_registry \(layer 3\), which its row does not name'
restore core/model/modelinfo.cc

# 5. core/resolve may not include the cache.
append core/resolve/model_ref.cc '#include "core/cache/blob_cache.h"'
expect_violation resolve_cache 'core/resolve/model_ref.cc:[0-9]+: core/cache/blob_cache.h: modelfs_resolve \(layer 4, .*\) includes modelfs_cache \(layer 3\), which its row does not name'
restore core/resolve/model_ref.cc

# 6. A .hpp and a .inc are read like any header, and a header found relative to its folder too.
printf '#pragma once\n#include "snapshotter/model/model_snapshotter.h"\n' >"$tree/core/oci/planted.hpp"
expect_violation hpp 'core/oci/planted.hpp:2: snapshotter/model/model_snapshotter.h: modelfs_oci \(layer 2, .*\) includes upward into modelfs_model_snapshotter \(layer 8\)'
rm "$tree/core/oci/planted.hpp"
printf '#include "../../host/model_host.h"\n' >"$tree/core/cache/planted.inc"
expect_violation inc 'core/cache/planted.inc:1: ../../host/model_host.h: modelfs_cache \(layer 3, .*\) includes upward into modelfs_host'
rm "$tree/core/cache/planted.inc"

# 7. Two rows of one layer naming each other: a cycle in the table (core/cache <-> core/registry).
sed -i 's/^    core\/cache     cache ............. oci io sqlite base status/    core\/cache     cache ............. oci io sqlite base status registry/' "$tree/docs/design.md"
grep -q 'cache ............. oci io sqlite base status registry' "$tree/docs/design.md" || fail "the table's cache row was not found to plant the cycle"
sed -i 's/^ 3  core\/registry  registry .......... oci base http status/ 3  core\/registry  registry .......... oci base http status cache/' "$tree/docs/design.md"
expect_violation cycle 'a cycle in the table: modelfs_(cache -> modelfs_registry -> modelfs_cache|registry -> modelfs_cache -> modelfs_registry)'
restore docs/design.md

# 8. A CMake link the table does not name, and a row CMake does not link.
sed -i 's/  DEPS modelfs_cache modelfs_resolve modelfs_oci/  DEPS modelfs_hub modelfs_cache modelfs_resolve modelfs_oci/' "$tree/core/model/CMakeLists.txt"
expect_violation cmake_extra 'core/model/CMakeLists.txt:[0-9]+: modelfs_model links modelfs_hub, which its row \(design.md:[0-9]+\) does not name'
restore core/model/CMakeLists.txt
sed -i 's/modelfs_layer_applier //' "$tree/snapshotter/model/CMakeLists.txt"
expect_violation cmake_missing "design.md:[0-9]+: modelfs_model_snapshotter's row names modelfs_layer_applier, which snapshotter/model/CMakeLists.txt:[0-9]+ does not link"
restore snapshotter/model/CMakeLists.txt

# 9. tests/ may not include integration/ (the support leaf is testsupport/).
printf '#pragma once\n' >"$tree/integration/planted_env.h"
append tests/oci/chunk_index_test.cc '#include "integration/planted_env.h"'
expect_violation across 'tests/oci/chunk_index_test.cc:[0-9]+: integration/planted_env.h: tests/ \(layer 11, .*\) includes integration/ \(layer 11\), which its row does not name'
rm "$tree/integration/planted_env.h"
restore tests/oci/chunk_index_test.cc

# 10. A source file no target lists.
printf 'int planted = 1;\n' >"$tree/core/oci/planted.cpp"
expect_violation orphan 'core/oci/planted.cpp: in no target.s source list'
rm "$tree/core/oci/planted.cpp"

"$check" "$tree" >"$work/after.out" 2>&1 || { cat "$work/after.out" >&2; fail "the restored copy fails"; }
echo "layering_check_test: ok ($cases violations reported)"
