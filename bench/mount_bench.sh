#!/usr/bin/env bash
# mount_bench.sh: `modelfs mount` against the init-container baseline, measured in the same run
# against a docker-registry on loopback. For each model size it prints:
#   ready      time until the model directory is usable, and bytes fetched by then:
#              modelfs mount (returns when mounted) vs curl every blob to disk + sha256sum
#   cold read  cat every file through a fresh mount with an empty cache (page cache dropped)
#              vs the same baseline (download + verify is what an init container does first)
#   warm read  cache on disk, page cache dropped: cat every file through a fresh mount vs
#              cat of the cache's data files directly
#   hot read   cat again, everything in the page cache
#   peak RSS   VmHWM of the mount daemon after streaming the model cold
# Times are medians of RUNS runs. Ratios: baseline time / modelfs time (above 1.0: modelfs is
# faster). Needs root (FUSE, drop_caches), docker-registry, curl, python3.
#
# Usage: bench/mount_bench.sh [BUILD_DIR]   env: SIZES="256 2048" RUNS=3 WORK=/tmp/...
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
require_quiet mount_bench
load_line

BUILD=${1:-build-mounttest}
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
SIZES=${SIZES:-"256 2048"}
RUNS=${RUNS:-3}
WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-mount-bench-XXXXXX")
REG_PID=""
MOUNTS=()
export DOCKER_CONFIG="$WORK/no-docker-config"

cleanup() {
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT

cat_all() { find "$1" -type f ! -name .modelinfo.json -exec cat {} + > /dev/null; }

# --- registry --------------------------------------------------------------------------------
start_registry "$WORK/registry"

printf '%-7s %-34s %12s %12s %14s %10s\n' "model" "measure" "modelfs" "baseline" "ratio(b/m)" "fetched"
for MIB in $SIZES; do
  SRC="$WORK/src-$MIB"
  "$SYNTH" safetensors "$SRC" --mib "$MIB" > /dev/null
  REF="$REG/bench/m$MIB:v1"
  "$MODELFS" push --plain-http "$REF" "$SRC" > /dev/null
  TOTAL=$(du -sb --apparent-size "$SRC" | cut -f1)
  # The model's blobs (M's layers) as an init container would list them.
  BLOBS=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REG/v2/bench/m$MIB/manifests/v1" |
    python3 -c "import sys,json; print(' '.join(l['digest'] for l in json.load(sys.stdin)['layers']))")
  BLOB_BYTES=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REG/v2/bench/m$MIB/manifests/v1" |
    python3 -c "import sys,json; print(sum(l['size'] for l in json.load(sys.stdin)['layers']))")

  # --- baseline: init container (curl every blob to disk, then sha256sum) --------------------
  base=()
  for r in $(seq "$RUNS"); do
    DL="$WORK/dl-$MIB"; rm -rf "$DL"; mkdir -p "$DL"
    drop_caches
    t0=$(now)
    for d in $BLOBS; do curl -fs -o "$DL/${d#sha256:}" "http://$REG/v2/bench/m$MIB/blobs/$d"; done
    (cd "$DL" && for d in $BLOBS; do echo "${d#sha256:}  ${d#sha256:}"; done | sha256sum -c --quiet -)
    t1=$(now)
    base+=("$(elapsed "$t0" "$t1")")
    rm -rf "$DL"
  done
  BASE=$(median "${base[@]}")

  # --- modelfs: time to ready, then a cold sequential read of every file --------------------
  ready=(); cold=(); ready_fetched=""; cold_fetched=""; RSS=""
  MNT="$WORK/mnt-$MIB"; mkdir -p "$MNT"; MOUNTS+=("$MNT")
  for r in $(seq "$RUNS"); do
    CACHE="$WORK/cache-$MIB-$r"; rm -rf "$CACHE"
    drop_caches
    t0=$(now)
    PID=$("$MODELFS" mount --plain-http --cache "$CACHE" "$REF-volume" "$MNT" | mount_pid)
    t1=$(now)
    ready+=("$(elapsed "$t0" "$t1")")
    ready_fetched=$(stat_field "$MNT" bytes_fetched)
    t0=$(now); cat_all "$MNT"; t1=$(now)
    cold+=("$(elapsed "$t0" "$t1")")
    cold_fetched=$(fresh_stat "$MNT" bytes_fetched)
    RSS=$(awk '/VmHWM/ {print $2 " " $3}' "/proc/$PID/status")
    umount_wait "$MNT" "$PID"
    [[ $r -lt $RUNS ]] && rm -rf "$CACHE"
  done
  READY=$(median "${ready[@]}"); COLD=$(median "${cold[@]}")

  # --- warm: same cache, page cache dropped; baseline: the cache's data files read directly ---
  warm=(); direct=(); hot=(); warm_fetched=""
  for r in $(seq "$RUNS"); do
    drop_caches
    PID=$("$MODELFS" mount --plain-http --prefetch none --cache "$CACHE" "$REF-volume" "$MNT" | mount_pid)
    t0=$(now); cat_all "$MNT"; t1=$(now)
    warm+=("$(elapsed "$t0" "$t1")")
    t0=$(now); cat_all "$MNT"; t1=$(now)
    hot+=("$(elapsed "$t0" "$t1")")
    warm_fetched=$(fresh_stat "$MNT" bytes_fetched)
    umount_wait "$MNT" "$PID"
    drop_caches
    t0=$(now); cat "$CACHE"/blobs/sha256/*.data > /dev/null; t1=$(now)
    direct+=("$(elapsed "$t0" "$t1")")
  done
  WARM=$(median "${warm[@]}"); DIRECT=$(median "${direct[@]}"); HOT=$(median "${hot[@]}")
  rm -rf "$CACHE"

  M="${MIB}MiB"
  printf '%-7s %-34s %11ss %11ss %14s %10s\n' "$M" "time to ready (mount vs dl+sha)" "$READY" "$BASE" "$(ratio "$BASE" "$READY")" "$ready_fetched"
  printf '%-7s %-34s %12s %12s %14s %10s\n' "$M" "bytes fetched by ready" "$ready_fetched" "$BLOB_BYTES" "" ""
  printf '%-7s %-34s %11ss %11ss %14s %10s\n' "$M" "cold read all (cat vs dl+sha)" "$COLD" "$BASE" "$(ratio "$BASE" "$COLD")" "$cold_fetched"
  printf '%-7s %-34s %9sMB/s %9sMB/s %14s\n' "$M" "  throughput" "$(mbps "$TOTAL" "$COLD")" "$(mbps "$TOTAL" "$BASE")" ""
  printf '%-7s %-34s %11ss %11ss %14s %10s\n' "$M" "warm read (mount vs cache file)" "$WARM" "$DIRECT" "$(ratio "$DIRECT" "$WARM")" "$warm_fetched"
  printf '%-7s %-34s %11ss %12s %14s\n' "$M" "hot read (page cache)" "$HOT" "" "$(mbps "$TOTAL" "$HOT")MB/s"
  printf '%-7s %-34s %12s\n' "$M" "peak RSS of mount daemon (VmHWM)" "$RSS"
done
echo "runs per measure: $RUNS (medians); drop_caches: $([[ $DROP_OK == 1 ]] && echo yes || echo NOT permitted)"
