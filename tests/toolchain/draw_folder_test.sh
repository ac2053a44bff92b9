#!/usr/bin/env bash
# draw_folder_test: scripts/draw-folder.sh puts rooms on floors so every arrow points down, and
# exits 1 naming the include when two rooms reach each other (an arrow back up). A planted folder
# of three rooms (a -> b -> c, c a header alone), then c.h made to include a.h; and the tree's
# core/cache has no arrow back up.
# Usage: draw_folder_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: draw_folder_test.sh SOURCE_DIR}
draw="$src/scripts/draw-folder.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "draw_folder_test: FAIL: $*" >&2; cat "$work/out" >&2 2>/dev/null || true; exit 1; }

mkdir -p "$work/lib/x"
printf '#pragma once\n#include "lib/x/b.h"\n' >"$work/lib/x/a.h"
printf '#include "lib/x/a.h"\n#include <vector>\n' >"$work/lib/x/a.cc"
printf '#pragma once\n#include "c.h"\n' >"$work/lib/x/b.h"
printf '#include "lib/x/b.h"\n' >"$work/lib/x/b.cc"
printf '#pragma once\n' >"$work/lib/x/c.h"

"$draw" lib/x "$work" >"$work/out" 2>&1 || fail "an acyclic folder exits $?"
grep -q '^lib/x: 3 rooms on 3 floors, 2 arrows, 0 back up$' "$work/out" || fail "summary line"
# Top floor first: a on 2, b on 1, c on 0.
[ "$(grep -E '^floor|^  [abc] ' "$work/out" | awk '{print $1}' | tr '\n' ' ')" = \
  "floor a floor b floor c " ] || fail "floors are not a, b, c from the top"

printf '#pragma once\n#include "lib/x/a.h"\n' >"$work/lib/x/c.h"
rc=0
"$draw" lib/x "$work" >"$work/out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a cycle exits $rc, not 1"
grep -q '^arrow back up: c -> a (lib/x/c.h:2)$' "$work/out" || fail "the arrow back up is not named"
grep -q '^lib/x: 3 rooms on 1 floors, 3 arrows, 3 back up$' "$work/out" || fail "summary of the cycle"

# The tree's own core/cache: its parts include down to the LayerTable and the pieces, never back
# up into BlobCache (issue 47).
"$draw" core/cache "$src" >"$work/out" 2>&1 || fail "core/cache has an arrow back up"

rc=0
"$draw" no/such "$work" >"$work/out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a missing folder exits $rc, not 2"
echo "draw_folder_test: ok"
