#!/usr/bin/env bash
# tp_bench.sh: model loads as inference servers do them, through modelfs beside the baselines,
# all measured in one run on a registry on loopback (its storage on disk).
#
#   TP = N ranks   `modelfs-load --mode mmap --ranks N` (bench/load_main.cc): N processes at
#                  once, each maps every shard and copies its slice of every tensor, split as
#                  Megatron-LM splits a llama (q/k/v/gate/up/embed/lm_head by rows: one range
#                  per rank; o_proj/down_proj by columns: N-way strided pieces of every row;
#                  norms whole). The time is until the last rank is done.
#   one reader     `modelfs-load --mode read` (16 MiB read() calls, front to back).
#
# Each run, the page cache dropped before each measure:
#   init container  every blob at once, curl | tee FILE | openssl dgst -sha256, then the load
#                   over the files (from the page cache), for each loader
#   modelfs cold    `modelfs mount` of V on an empty cache, then the load through the mount:
#                   time, the mount's CPU-s/GiB, registry bytes, the mount's peak RSS
#   second pod      a cold load (one reader), then after DELAY seconds a second full read
#                   through the same mount, as the next pod on the node does: once with the page
#                   cache dropped just before it ("dropped"), once as the node left it
#                   ("as left"); and `passthrough_opens` after it
#   fresh mount     the same complete cache mounted anew, page cache dropped
#   local disk      the init container's files, page cache dropped; and from the page cache
#   page-cache copies  growth of the node's Cached over the second pod's "as left" read after
#                   a drop, divided by the model's size (1.0: one copy)
# Nothing is asserted; medians of RUNS runs.
#
# Usage: bench/tp_bench.sh BUILD_DIR
#   env: SIZE_MIB=2048 SHARD_MIB=405 RUNS=3 RANKS="1 4 8" DELAYS="0 2 15 45" WORK=/tmp
#        SETTLE_MIB (lib.sh); FORCE=1 to run on a machine whose load average is above 0.5
#        (every table then says so). The modelfs daemon runs with its defaults; MOUNT_ARGS adds
#        `modelfs mount` flags (e.g. "--no-audit") to every mount, to try a setting.
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load.
# Needs root (FUSE, drop_caches), docker-registry, curl, openssl, python3; about 4x the model
# free under WORK.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
fi
BUILD=$1
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
SIZE_MIB=${SIZE_MIB:-2048}
SHARD_MIB=${SHARD_MIB:-405}
RUNS=${RUNS:-3}
RANKS=${RANKS:-"1 4 8"}
DELAYS=${DELAYS:-"0 2 15 45"}
read -ra MOUNT_EXTRA <<< "${MOUNT_ARGS:-}"
require_quiet tp_bench
require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_tools docker-registry curl openssl python3 tee mountpoint fusermount3
[[ $(id -u) == 0 ]] || { echo "tp_bench.sh needs root (FUSE mounts, drop_caches)" >&2; exit 2; }

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-tp-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
REG_PID=""
NG_PID=""
MNT="$WORK/mnt"
MOUNT_PID=""
cleanup() {
  if mountpoint -q "$MNT"; then "$MODELFS" umount "$MNT" 2> /dev/null || fusermount3 -u -z "$MNT" || true; fi
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- helpers ---------------------------------------------------------------------------------
blob_url() { echo "http://$REG/v2/$REPO/blobs/$1"; }
mount_files() { find "$1" -type f ! -name .modelinfo.json | sort; }
# load LOADER FILE...: LOADER is "read" or "tpN"; the bytes read land in $WORK/load.json.
load() {
  local l=$1
  shift
  if [[ $l == read ]]; then
    "$LOAD" --mode read --json "$@" > "$WORK/load.json"
  else
    "$LOAD" --mode mmap --ranks "${l#tp}" --json "$@" > "$WORK/load.json"
  fi
}
mount_v() {  # mount_v CACHE: mounts V at $MNT; sets MOUNT_PID
  local out
  mkdir -p "$MNT"
  out=$("$MODELFS" mount --plain-http --cache "$1" --log "$WORK/mount.log" "${MOUNT_EXTRA[@]}" \
    "$REF-volume" "$MNT")
  MOUNT_PID=$(mount_pid <<< "$out")
  [[ -n "$MOUNT_PID" ]] || MOUNT_PID=$(stat_field "$MNT" pid)
}
unmount_v() { umount_wait "$MNT" "$MOUNT_PID"; MOUNT_PID=""; }
# Registry bytes: the mount's own count once it stops moving.
settled_fetched() {
  local a b
  a=$(fresh_stat "$MNT" bytes_fetched)
  for _ in $(seq 20); do
    b=$(fresh_stat "$MNT" bytes_fetched)
    [[ $a == "$b" ]] && break
    a=$b
  done
  echo "$a"
}
loaders() { echo read; for n in $RANKS; do echo "tp$n"; done; }

# --- measures --------------------------------------------------------------------------------
measure_init() {  # every blob at once through openssl into files; then the load
  local l=$1 t0 t1 t2 d h pids=() failed=0
  rm -rf "$DL" "$WORK/sums"
  mkdir -p "$DL" "$WORK/sums"
  drop_caches
  t0=$(now)
  for d in $BLOBS; do
    h=${d#sha256:}
    (curl -fsL "$(blob_url "$d")" | tee "$DL/$h" | openssl dgst -sha256 -r > "$WORK/sums/$h") &
    pids+=($!)
  done
  for h in "${pids[@]}"; do wait "$h" || failed=1; done
  [[ $failed == 0 ]] || { echo "init container: a download failed" >&2; exit 1; }
  for d in $BLOBS; do
    [[ "sha256:$(cut -d' ' -f1 "$WORK/sums/${d#sha256:}")" == "$d" ]] ||
      { echo "init container: $d has another digest" >&2; exit 1; }
  done
  t1=$(now)
  load "$l" "$DL"/*
  t2=$(now)
  add "init:$l" "$(elapsed "$t0" "$t2")"
  add "init_load:$l" "$(elapsed "$t1" "$t2")"
}

measure_cold() {
  local l=$1 cache="$WORK/cache-cold" t0 t1 files
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache"
  mapfile -t files < <(mount_files "$MNT")
  load "$l" "${files[@]}"
  t1=$(now)
  add "cold:$l" "$(elapsed "$t0" "$t1")"
  add "cold_cpu:$l" "$(calc 'a / (b / 2**30)' "$(cpu_seconds "$MOUNT_PID")" "$TOTAL")"
  add "cold_rss:$l" "$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$MOUNT_PID/status")"
  add "cold_fetched:$l" "$(settled_fetched)"
  unmount_v
  rm -rf "$cache"
}

# A cold load (one reader), DELAY seconds, then the second pod's read through the same mount.
measure_second_pod() {
  local d=$1 how=$2 cache="$WORK/cache-2pod" t0 t1 files c0
  rm -rf "$cache"
  drop_caches
  mount_v "$cache"
  mapfile -t files < <(mount_files "$MNT")
  load read "${files[@]}"
  sleep "$d"
  [[ $how == as_left ]] || drop_caches
  c0=$(page_cache_bytes)
  t0=$(now)
  load read "${files[@]}"
  t1=$(now)
  add "second:$how:$d" "$(elapsed "$t0" "$t1")"
  if [[ $how == as_left ]]; then
    add "second_pc:$d" "$(calc '(b - a) / c' "$c0" "$(page_cache_bytes)" "$TOTAL")"
  fi
  add "second_pt:$how:$d" "$(fresh_stat "$MNT" passthrough_opens)"
  unmount_v
  if [[ $how == dropped && $d == "${DELAYS##* }" ]]; then
    # The same complete cache on a fresh mount.
    mount_v "$cache"
    mapfile -t files < <(mount_files "$MNT")
    drop_caches
    t0=$(now)
    load read "${files[@]}"
    t1=$(now)
    add "fresh_mount" "$(elapsed "$t0" "$t1")"
    unmount_v
  fi
  rm -rf "$cache"
}

measure_disk() {
  local t0 t1
  drop_caches
  t0=$(now)
  load read "$DL"/*
  t1=$(now)
  add "disk:dropped" "$(elapsed "$t0" "$t1")"
  t0=$(now)
  load read "$DL"/*
  t1=$(now)
  add "disk:cached" "$(elapsed "$t0" "$t1")"
}

# --- main ------------------------------------------------------------------------------------
T_START=$(now)
echo "tp_bench: $(nproc) CPUs, kernel $(uname -r), SIZE_MIB=$SIZE_MIB SHARD_MIB=$SHARD_MIB" \
  "RUNS=$RUNS RANKS=\"$RANKS\" DELAYS=\"$DELAYS\" MOUNT_ARGS=\"${MOUNT_ARGS:-}\"," \
  "load average at start: $LOAD_AT_START ($([[ -z $FORCED ]] && echo "quiet, not forced" || echo FORCED))"
REPO="bench/tp$SIZE_MIB"
DL="$WORK/init"
start_registry "$WORK/registry" --storage "$WORK/store"
"$SYNTH" safetensors "$WORK/src" --mib "$SIZE_MIB" --shard-mib "$SHARD_MIB" > /dev/null
NFILES=$(find "$WORK/src" -type f | wc -l)
REF="$REG/$REPO:v1"
"$MODELFS" push --plain-http "$REF" "$WORK/src" > /dev/null
rm -rf "$WORK/src"
MANIFEST=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/$REPO/manifests/v1")
BLOBS=$("$PY" -c "import sys,json; print(' '.join(l['digest'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
TOTAL=$("$PY" -c "import sys,json; print(sum(l['size'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
set_settle "$SIZE_MIB"
for run in $(seq "$RUNS"); do
  echo "run $run/$RUNS ($(elapsed "$T_START" "$(now)") s in) ..." >&2
  for l in $(loaders); do
    measure_init "$l"
    measure_cold "$l"
  done
  measure_disk
  for d in $DELAYS; do
    measure_second_pod "$d" dropped
    measure_second_pod "$d" as_left
  done
done

f2() { calc "f'{a:.2f}'" "$1" | tr -d "'"; }
row() { printf '| %-30s | %9s | %9s | %8s | %8s | %10s | %9s |\n' "$@"; }
echo
echo "### $(human "$TOTAL") llama-shaped BF16 model in $NFILES files (shards of $SHARD_MIB MiB)," \
  "registry on loopback (disk); medians of $RUNS"
echo
row "load" "init s" "modelfs s" "vs init" "TP/one" "CPU-s/GiB" "peak RSS"
row "---" "---" "---" "---" "---" "---" "---"
one=$(med cold:read)
for l in $(loaders); do
  c=$(med "cold:$l")
  row "$([[ $l == read ]] && echo "one reader (read), cold" || echo "TP = ${l#tp} (mmap slices), cold")" \
    "$(med "init:$l")" "$c" "$(ratio "$(med "init:$l")" "$c")" \
    "$(calc "f'{a / b:.2f}'" "$c" "$one" | tr -d "'")" "$(f2 "$(med "cold_cpu:$l")")" \
    "$(human "$(med "cold_rss:$l")")"
done
echo
echo "Registry bytes per cold load:$(for l in $(loaders); do printf ' %s %s;' "$l" "$(human "$(med "cold_fetched:$l")")"; done)" \
  "init loads from the page cache:$(for l in $(loaders); do printf ' %s %s s;' "$l" "$(med "init_load:$l")"; done)"
echo
row2() { printf '| %-44s | %9s | %-22s | %-14s |\n' "$@"; }
row2 "a second pod's full read (one reader)" "seconds" "vs local disk" "passthrough"
row2 "---" "---" "---" "---"
row2 "local disk, page cache dropped" "$(med disk:dropped)" "" ""
row2 "local disk, from the page cache" "$(med disk:cached)" "" ""
for d in $DELAYS; do
  s=$(med "second:dropped:$d")
  row2 "same mount, ${d} s after the cold load, dropped" "$s" "$(ratio "$(med disk:dropped)" "$s") disk (dropped)" \
    "$(med "second_pt:dropped:$d" | cut -d. -f1) opens"
  s=$(med "second:as_left:$d")
  row2 "same mount, ${d} s after, as the load left it" "$s" "$(ratio "$(med disk:cached)" "$s") disk (cached)" \
    "$(med "second_pt:as_left:$d" | cut -d. -f1) opens"
done
s=$(med fresh_mount)
row2 "fresh mount on the complete cache, dropped" "$s" "$(ratio "$(med disk:dropped)" "$s") disk (dropped)" ""
echo
echo "Page-cache copies over the as-left read (growth of Cached / model size):$(for d in $DELAYS; do printf ' %s s: %s;' "$d" "$(f2 "$(med "second_pc:$d")")"; done)"
[[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }
echo "vs init: init container / modelfs (above 1.00x modelfs is faster); TP/one: the TP load" \
  "through modelfs / the one-reader load through modelfs (goal <= 1.1); vs local disk: disk /" \
  "modelfs. Load average after: $(cut -d' ' -f1-3 /proc/loadavg). drop_caches:" \
  "$([[ $DROP_OK == 1 ]] && echo yes || echo NOT permitted). Took $(elapsed "$T_START" "$(now)") s."
