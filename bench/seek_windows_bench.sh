#!/usr/bin/env bash
# seek_windows_bench.sh: what gzip seek windows fetched per point (issue 44, docs/seek-index.md
# "Windows file") do to a gzip modelcar's ready time as the model grows. For each size in SIZES
# a KServe modelcar is built, pushed gzip and converted by modelcar_bench.sh, which then runs
# only its ready measure (LOADERS=" ", a space: it takes an empty value as its default; no
# node paths, no pinned cores), once with BUILD_DIR (V with windows: a mount fetches the windows
# tables only) and, when given, once with BASELINE_BUILD_DIR (a build before windows: its V
# carries every window inline, thinned past 64 MiB, and its mount fetches them all).
# Prints one table: ready time, bytes fetched before ready, the compressed bytes a 4 MiB random
# read then fetched, and each build's ready time at every size over its ready time at the
# smallest (the issue's goal: within 10% from 2 GiB to 16 GiB).
#
# Usage: sudo bench/seek_windows_bench.sh BUILD_DIR [BASELINE_BUILD_DIR]
#   env: SIZES="2048 16384" (MiB) RUNS=3 WORK=/tmp FORCE=1 (run above load average 0.5)
#   Disk: about 4x the largest size under WORK at the peak (the model, buildah's copies, the
#   pushed layer); modelcar_bench.sh wants 10x free unless FREE_X says less (FREE_X=5 for 8 GiB
#   on a disk with 76 GB free). Cleaned after each size.
#   Quick check: SIZES="64 256" RUNS=1 FORCE=1 bench/seek_windows_bench.sh build
# Needs what modelcar_bench.sh needs (root, docker-registry, buildah, skopeo, ...).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/quiet.sh
source "$HERE/quiet.sh"
BUILD=${1:?usage: seek_windows_bench.sh BUILD_DIR [BASELINE_BUILD_DIR]}
BASELINE=${2:-}
SIZES=${SIZES:-2048 16384}
RUNS=${RUNS:-3}
require_quiet seek_windows_bench
RUN_START=$(date +%s)

declare -A READY FETCHED RAND
builds=("$BUILD")
[[ -z $BASELINE ]] || builds+=("$BASELINE")
for b in "${builds[@]}"; do
  for s in $SIZES; do
    out=$(FORCE=1 SIZE_MIB=$s RUNS=$RUNS COMPRESSIONS=gzip LOADERS=" " MOUNT_CORES="" NODE_PATHS="" \
      "$HERE/modelcar_bench.sh" "$b" 2>&1) || { echo "$out" >&2; exit 1; }
    # "## gzip (...): ... ready 0.41 s after fetching 3.2 MiB; then a 4 MiB random read fetched
    # 5.1 MiB compressed (...)"
    line=$(grep '^## gzip' <<< "$out" | head -1)
    READY[$b,$s]=$(sed -n 's/.*; ready \([0-9.]*\) s after fetching.*/\1/p' <<< "$line")
    FETCHED[$b,$s]=$(sed -n 's/.* s after fetching \(.*\); then a 4 MiB.*/\1/p' <<< "$line")
    RAND[$b,$s]=$(sed -n 's/.*random read fetched \(.*\) compressed.*/\1/p' <<< "$line")
  done
done

echo
echo "# seek_windows_bench: gzip modelcars of ${SIZES// / and } MiB, ready time through \`modelfs mount\`, medians of $RUNS, $(nproc) cores"
load_line
[[ -z $FORCED ]] || echo "** $FORCED **"
echo "load average at the end: $(cut -d' ' -f1 /proc/loadavg); the run took $(($(date +%s) - RUN_START)) s"
echo
printf '| %-34s | %9s | %9s | %22s | %24s |\n' build "size MiB" "ready s" "fetched before ready" "4 MiB random read fetched"
printf '|%s|\n' "------------------------------------|-----------|-----------|------------------------|--------------------------"
first=${SIZES%% *}
for b in "${builds[@]}"; do
  name="this tree (windows per point)"
  [[ $b == "$BUILD" ]] || name="baseline (windows inline)"
  for s in $SIZES; do
    printf '| %-34s | %9s | %9s | %22s | %24s |\n' "$name" "$s" "${READY[$b,$s]:-?}" "${FETCHED[$b,$s]:-?}" "${RAND[$b,$s]:-?}"
  done
  for s in $SIZES; do
    [[ $s != "$first" ]] || continue
    ratio=$(python3 -c 'import sys; a, b = sys.argv[1:]; print(round(float(a) / float(b), 2) if a and b and float(b) else "?")' \
      "${READY[$b,$s]:-}" "${READY[$b,$first]:-}" 2> /dev/null || echo "?")
    echo "  $name: ready at $s MiB / ready at $first MiB = $ratio (goal: at most 1.10)"
  done
done
