#!/usr/bin/env bash
# load_bench.sh: the full model load a model server does at start (every weight byte read), through
# modelfs beside the baselines, all measured in one run against a docker-registry on loopback
# (issue 10). The model is `modelfs-synth safetensors` of each size, pushed with `modelfs push`
# (M = the ModelPack artifact at :v1, V = the volume image at :v1-volume). Two loaders
# (bench/load_main.cc): `read` (16 MiB read() calls, vLLM eager) and `mmap` (map, parse the
# safetensors header, copy each tensor out in offset order: safetensors load_file, llama.cpp).
# The page cache is dropped before every measure. Paths, each with both loaders:
#   registry raw     curl each of M's blobs to /dev/null, no load: the machine's limit
#   init container   curl each blob to disk + `openssl dgst -sha256` each + load from disk
#   skopeo copy      `skopeo copy docker://...M oci:DIR` (verifies digests) + load the blob files
#   modelfs cold     `modelfs mount` of V on an empty cache + load through the mount
#   local disk       load the init container's files
#   modelfs warm     mount V again on the cache the cold load filled, drop caches, load
# Second table: time to ready of a mount and bytes fetched before the first read; bytes fetched
# by reading .modelinfo.json plus 4 MiB at a random offset; page-cache copies of the weights after
# a warm load (fincore on the mount's files and on the cache's data files); peak RSS (VmHWM) of
# the mount process while 16 `modelfs-load --mode read` processes load the model cold; the CPU
# the registry spends serving the raw curls and a cold load (on this machine it shares the cores).
# Times are medians of RUNS runs. Ratios are baseline time / modelfs time (above 1.0x modelfs is
# faster). Nothing is asserted: the script only prints.
#
# On a VM whose balloon reports free pages to the host, every drop_caches also touches and frees
# SETTLE_MIB of memory (lib.sh; default 3x the model + 1 GiB there, 0 elsewhere), so that each
# measure starts from the same memory state rather than from what the one before it left.
# Usage: bench/load_bench.sh BUILD_DIR   env: SIZES="2048 8192" (MiB) RUNS=3 WORK=/tmp SETTLE_MIB
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load.
#   Quick check: SIZES=256 RUNS=1 bench/load_bench.sh build
# Needs root (FUSE, drop_caches), docker-registry, skopeo, curl, openssl, fincore (util-linux),
# python3, and about 5x the largest model size free under WORK.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,29p' "$0" >&2
  exit 2
fi
BUILD=$1
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
SIZES=${SIZES:-"2048 8192"}
RUNS=${RUNS:-3}
LOADERS="read mmap"
READERS=16

require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_tools docker-registry skopeo curl openssl fincore python3 dd find mountpoint fusermount3 sync
[[ $(id -u) == 0 ]] || { echo "load_bench.sh needs root (FUSE mounts, drop_caches)" >&2; exit 2; }
[[ -w /proc/sys/vm/drop_caches ]] || { echo "cannot write /proc/sys/vm/drop_caches" >&2; exit 2; }

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-load-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
REG_PID=""
MOUNTS=()       # mountpoints this run created
READER_PIDS=()  # background loaders of the concurrency measure
SKOPEO_GLOBAL=()
[[ -f /etc/containers/policy.json ]] || SKOPEO_GLOBAL=(--insecure-policy)

cleanup() {
  for p in "${READER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT

need_mib=$((5 * $(tr ' ' '\n' <<< "$SIZES" | sort -n | tail -1)))
have_mib=$(df --output=avail -BM "$WORK" | tail -1 | tr -dc 0-9)
if [[ $have_mib -lt $need_mib ]]; then
  echo "need about $need_mib MiB free under $WORK, have $have_mib MiB" >&2
  exit 2
fi

# --- helpers ---------------------------------------------------------------------------------
# R[path:loader] collects one value per run; medians are taken when printing.
declare -A R
add() { R[$1]="${R[$1]:-} $2"; }
# shellcheck disable=SC2086  # the values are split on purpose
med() { if [[ -n "${R[$1]:-}" ]]; then median ${R[$1]}; else echo n/a; fi; }

# load LOADER FILE...: runs modelfs-load; the bytes it read are checked after the caller's timer.
load() {
  local mode=$1
  shift
  "$LOAD" --mode "$mode" --json "$@" > "$WORK/load.json"
}
check_loaded() {  # check_loaded WHAT: warns when a loader read other than the model's bytes
  local got
  got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load.json")
  [[ $got == "$TOTAL" ]] || echo "warning: $1 read $got bytes, the model has $TOTAL" >&2
}
mount_files() { find "$1" -type f ! -name .modelinfo.json | sort; }

# mount_v CACHE MNT: mounts V in the background; sets MOUNT_PID.
mount_v() {
  local out
  mkdir -p "$2"
  out=$("$MODELFS" mount --plain-http --cache "$1" --log "$WORK/mount.log" "$REF-volume" "$2")
  MOUNTS+=("$2")
  MOUNT_PID=$(mount_pid <<< "$out")
  [[ -n "$MOUNT_PID" ]] || MOUNT_PID=$(stat_field "$2" pid)
}
# Bytes fetched once the counters stop moving (background fetches of the last read finish).
settled_fetched() {
  local a b
  a=$(fresh_stat "$1" bytes_fetched)
  for _ in $(seq 20); do
    b=$(fresh_stat "$1" bytes_fetched)
    [[ $a == "$b" ]] && break
    a=$b
  done
  echo "$a"
}
# CPU seconds (user + system) a process has used so far; user_seconds: user only.
cpu_seconds() {
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($12 + $13) / hz}'
}
user_seconds() {
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", $12 / hz}'
}
# The kernel side of a mount: its bdi's readahead and the max_read option (FUSE request sizes).
mount_shape() {
  local dev opts
  dev=$(awk -v m="$(realpath "$1")" '$5 == m {print $3}' /proc/self/mountinfo | tail -1)
  opts=$(awk -v m="$(realpath "$1")" '$2 == m {print $4}' /proc/mounts | tail -1)
  echo "read_ahead_kb $(cat "/sys/class/bdi/$dev/read_ahead_kb" 2>/dev/null || echo '?'), $(grep -o 'max_read=[0-9]*' <<< "$opts" || echo 'max_read unset')"
}
resident() { fincore -b -n -r -o RES "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }
# The node's whole page cache (Cached in /proc/meminfo), in bytes. Its growth over a warm load
# counts every copy of the weights, whoever holds it; fincore cannot tell a FUSE passthrough
# file from its backing file (it maps the file, and the mapping is the backing file's).
page_cache_bytes() { echo $(( $(awk '/^Cached:/ {print $2}' /proc/meminfo) * 1024 )); }

# --- paths (each records its total seconds for one loader) -----------------------------------
measure_registry_raw() {
  local t0 t1
  drop_caches
  local reg0; reg0=$(cpu_seconds "$REG_PID")
  t0=$(now)
  for d in $BLOBS; do curl -fs -o /dev/null "http://$REG/v2/$REPO/blobs/$d"; done
  t1=$(now)
  add raw "$(elapsed "$t0" "$t1")"
  add raw_reg_cpu "$(elapsed "$reg0" "$(cpu_seconds "$REG_PID")")"
}

# Leaves the verified files in $DL for the local-disk measure.
measure_init_container() {
  local mode=$1 t0 t1 t2 t3 got
  rm -rf "$DL"
  mkdir -p "$DL"
  drop_caches
  t0=$(now)
  for d in $BLOBS; do curl -fs -o "$DL/${d#sha256:}" "http://$REG/v2/$REPO/blobs/$d"; done
  t1=$(now)
  for d in $BLOBS; do
    got=$(openssl dgst -sha256 -r "$DL/${d#sha256:}" | cut -d' ' -f1)
    [[ "sha256:$got" == "$d" ]] || { echo "init container: $d has digest sha256:$got" >&2; exit 1; }
  done
  t2=$(now)
  load "$mode" "$DL"/*
  t3=$(now)
  check_loaded "init container ($mode)"
  add "init:$mode" "$(elapsed "$t0" "$t3")"
  add "init_dl:$mode" "$(elapsed "$t0" "$t1")"
  add "init_sha:$mode" "$(elapsed "$t1" "$t2")"
  add "init_load:$mode" "$(elapsed "$t2" "$t3")"
}

measure_skopeo() {
  local mode=$1 dir="$WORK/skopeo" t0 t1 t2 files=()
  rm -rf "$dir"
  drop_caches
  t0=$(now)
  skopeo "${SKOPEO_GLOBAL[@]}" copy -q --src-tls-verify=false --src-no-creds \
    "docker://$REG/$REPO:v1" "oci:$dir" > "$WORK/skopeo.log" 2>&1 ||
    { echo "skopeo copy failed:" >&2; cat "$WORK/skopeo.log" >&2; exit 1; }
  t1=$(now)
  for d in $BLOBS; do files+=("$dir/blobs/sha256/${d#sha256:}"); done
  load "$mode" "${files[@]}"
  t2=$(now)
  check_loaded "skopeo ($mode)"
  add "skopeo:$mode" "$(elapsed "$t0" "$t2")"
  add "skopeo_copy:$mode" "$(elapsed "$t0" "$t1")"
  rm -rf "$dir"
}

measure_local_disk() {
  local mode=$1 t0 t1
  drop_caches
  t0=$(now)
  load "$mode" "$DL"/*
  t1=$(now)
  check_loaded "local disk ($mode)"
  add "disk:$mode" "$(elapsed "$t0" "$t1")"
}

# From the start of `modelfs mount` (empty cache) until the loader ends. Leaves the filled cache
# in $WARM_CACHE for the warm measure.
measure_modelfs_cold() {
  local mode=$1 cache="$WORK/cache-cold-$1" mnt="$WORK/mnt" t0 t1 t2 files
  [[ -z "${WARM_CACHE:-}" ]] || rm -rf "$WARM_CACHE"
  rm -rf "$cache"
  drop_caches
  local reg0; reg0=$(cpu_seconds "$REG_PID")
  t0=$(now)
  mount_v "$cache" "$mnt"
  t1=$(now)
  mapfile -t files < <(mount_files "$mnt")
  load "$mode" "${files[@]}"
  t2=$(now)
  # The mount's CPU over the load (the whole-layer audit starts a second after it).
  add "cold_cpu:$mode" "$(cpu_seconds "$MOUNT_PID")"
  add "cold_user:$mode" "$(user_seconds "$MOUNT_PID")"
  add "cold_reg_cpu:$mode" "$(elapsed "$reg0" "$(cpu_seconds "$REG_PID")")"
  check_loaded "modelfs cold ($mode)"
  add "cold:$mode" "$(elapsed "$t0" "$t2")"
  add "cold_mount:$mode" "$(elapsed "$t0" "$t1")"
  add "cold_fetched:$mode" "$(settled_fetched "$mnt")"
  add "cold_rss:$mode" "$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$MOUNT_PID/status")"
  umount_wait "$mnt" "$MOUNT_PID"
  WARM_CACHE=$cache
}

# Mount on the filled cache, drop caches, time the load; then count page-cache copies.
measure_modelfs_warm() {
  local mode=$1 mnt="$WORK/mnt" t0 t1 cpu0 files fuse_res cache_res
  mount_v "$WARM_CACHE" "$mnt"
  mapfile -t files < <(mount_files "$mnt")
  drop_caches
  local cached0; cached0=$(page_cache_bytes)
  cpu0=$(cpu_seconds "$MOUNT_PID")
  t0=$(now)
  load "$mode" "${files[@]}"
  t1=$(now)
  add "pc_node:$mode" "$(python3 -c "import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / int(sys.argv[3]))" "$cached0" "$(page_cache_bytes)" "$TOTAL")"
  check_loaded "modelfs warm ($mode)"
  add "warm:$mode" "$(elapsed "$t0" "$t1")"
  add "warm_cpu:$mode" "$(elapsed "$cpu0" "$(cpu_seconds "$MOUNT_PID")")"
  add "warm_fetched:$mode" "$(settled_fetched "$mnt")"
  fuse_res=$(resident "${files[@]}")
  cache_res=$(resident "$WARM_CACHE"/blobs/sha256/*.data)
  add "pc_fuse:$mode" "$fuse_res"
  add "pc_cache:$mode" "$cache_res"
  add "pc_x:$mode" "$(python3 -c "import sys; print((int(sys.argv[1]) + int(sys.argv[2])) / int(sys.argv[3]))" "$fuse_res" "$cache_res" "$TOTAL")"
  umount_wait "$mnt" "$MOUNT_PID"
}

# Fresh mount: time until the mountpoint lists, bytes fetched before any read, then the bytes
# fetched by reading .modelinfo.json and 4 MiB at a random offset of the largest file.
measure_ready_and_random_read() {
  local cache="$WORK/cache-ready" mnt="$WORK/mnt" t0 t1 before after largest size off
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt"
  for _ in $(seq 400); do [[ -n "$(ls -A "$mnt")" ]] && break; sleep 0.005; done
  t1=$(now)
  add ready "$(elapsed "$t0" "$t1")"
  MOUNT_SHAPE=$(mount_shape "$mnt")
  before=$(settled_fetched "$mnt")
  add ready_fetched "$before"
  largest=$(find "$mnt" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  size=$(stat -c %s "$largest")
  off=$(python3 -c "import random,sys; print(random.randrange(0, max(1, int(sys.argv[1]) - (4 << 20))))" "$size")
  cat "$mnt/.modelinfo.json" > /dev/null
  dd if="$largest" of=/dev/null bs=4M skip="$off" count=$((4 << 20)) iflag=skip_bytes,count_bytes status=none
  after=$(settled_fetched "$mnt")
  add random_fetched "$((after - before))"
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

# Fresh mount, empty cache: READERS concurrent read loaders; VmHWM of the mount process.
measure_rss_concurrent() {
  local cache="$WORK/cache-rss" mnt="$WORK/mnt" t0 t1 files p failed=0
  rm -rf "$cache"
  drop_caches
  mount_v "$cache" "$mnt"
  mapfile -t files < <(mount_files "$mnt")
  READER_PIDS=()
  t0=$(now)
  for _ in $(seq "$READERS"); do
    "$LOAD" --mode read "${files[@]}" > /dev/null &
    READER_PIDS+=($!)
  done
  for p in "${READER_PIDS[@]}"; do wait "$p" || failed=1; done
  t1=$(now)
  READER_PIDS=()
  [[ $failed == 0 ]] || echo "warning: a concurrent reader failed" >&2
  add rss "$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$MOUNT_PID/status")"
  add rss_time "$(elapsed "$t0" "$t1")"
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

# --- output ----------------------------------------------------------------------------------
row() { printf '| %-34s | %9s | %9s | %-26s | %-26s | %-21s |\n' "$@"; }
print_tables() {
  local raw r m
  raw=$(med raw)
  echo
  echo "### ${MIB} MiB model: $(human "$TOTAL") in $NFILES files; medians of $RUNS run(s)"
  echo
  row "path" "read s" "mmap s" "read: baseline/modelfs" "mmap: baseline/modelfs" "fetched (read / mmap)"
  row "---" "---" "---" "---" "---" "---"
  row "registry raw (curl > /dev/null)" "$raw" "$raw" "$(mbps "$TOTAL" "$raw") MB/s, no load" "" ""
  row "init container (curl+openssl+load)" "$(med init:read)" "$(med init:mmap)" "" "" ""
  row "skopeo copy + load" "$(med skopeo:read)" "$(med skopeo:mmap)" "" "" ""
  r=$(med cold:read)
  m=$(med cold:mmap)
  row "modelfs cold (mount + load)" "$r" "$m" \
    "$(ratio "$(med init:read)" "$r") init, $(ratio "$raw" "$r") raw" \
    "$(ratio "$(med init:mmap)" "$m") init, $(ratio "$raw" "$m") raw" \
    "$(human "$(med cold_fetched:read)") / $(human "$(med cold_fetched:mmap)")"
  row "local disk" "$(med disk:read)" "$(med disk:mmap)" "" "" ""
  r=$(med warm:read)
  m=$(med warm:mmap)
  row "modelfs warm (load)" "$r" "$m" "$(ratio "$(med disk:read)" "$r") disk" \
    "$(ratio "$(med disk:mmap)" "$m") disk" \
    "$(human "$(med warm_fetched:read)") / $(human "$(med warm_fetched:mmap)")"
  echo
  printf '| %-58s | %-40s |\n' "measure" "value"
  printf '| %-58s | %-40s |\n' "---" "---"
  printf '| %-58s | %-40s |\n' "time to ready (mount until the mountpoint lists)" "$(med ready) s"
  printf '| %-58s | %-40s |\n' "fetched before the first read" \
    "$(human "$(med ready_fetched)") ($(python3 -c "import sys; print(f'{100*float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$(med ready_fetched)" "$TOTAL")% of the model)"
  printf '| %-58s | %-40s |\n' "fetched by .modelinfo.json + 4 MiB at a random offset" "$(human "$(med random_fetched)")"
  for l in $LOADERS; do
    printf '| %-58s | %-40s |\n' "page cache after warm $l load: mount / cache files / sum" \
      "$(human "$(med "pc_fuse:$l")") / $(human "$(med "pc_cache:$l")") / $(python3 -c "import sys; print(f'{float(sys.argv[1]):.2f}')" "$(med "pc_x:$l")")x model"
    printf '| %-58s | %-40s |
' "node page cache growth over the warm $l load" \
      "$(python3 -c "import sys; print(f'{float(sys.argv[1]):.2f}')" "$(med "pc_node:$l")")x model (meminfo Cached)"
  done
  printf '| %-58s | %-40s |\n' "peak RSS of the mount process, $READERS concurrent cold readers" \
    "$(human "$(med rss)") (all done in $(med rss_time) s)"
  printf '| %-58s | %-40s |\n' "peak RSS of the mount process, one cold load (read / mmap)" \
    "$(human "$(med cold_rss:read)") / $(human "$(med cold_rss:mmap)")"
  printf '| %-58s | %-40s |\n' "mount: bdi readahead, FUSE max_read" "$MOUNT_SHAPE"
  printf '| %-58s | %-40s |\n' "CPU of the registry: serving the raw curls / a cold load" \
    "$(med raw_reg_cpu) s / $(med cold_reg_cpu:read) s (read), $(med cold_reg_cpu:mmap) s (mmap)"
  for l in $LOADERS; do
    printf '| %-58s | %-40s |\n' "CPU of the mount process, cold (of it user) / warm, $l loader" \
      "$(med "cold_cpu:$l") s ($(med "cold_user:$l") s) / $(med "warm_cpu:$l") s"
  done
  echo
  for l in $LOADERS; do
    echo "init container, $l: download $(med "init_dl:$l") s + openssl $(med "init_sha:$l") s + load $(med "init_load:$l") s;" \
      "skopeo copy $(med "skopeo_copy:$l") s; modelfs cold: mount returned after $(med "cold_mount:$l") s"
  done
}

# --- main ------------------------------------------------------------------------------------
start_registry "$WORK/registry"
echo "load_bench: $(nproc) CPUs, kernel $(uname -r), SIZES=\"$SIZES\" RUNS=$RUNS, registry $REG, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for MIB in $SIZES; do
  R=()
  WARM_CACHE=""
  set_settle "$MIB"
  echo "${MIB} MiB: before every measure drop_caches, then touch and free ${SETTLE_MIB} MiB" \
    "(SETTLE_MIB; virtio balloon free page reporting: $(balloon_reporting))"
  REPO="bench/m$MIB"
  REF="$REG/$REPO:v1"
  DL="$WORK/init-$MIB"
  "$SYNTH" safetensors "$WORK/src" --mib "$MIB" > /dev/null
  NFILES=$(find "$WORK/src" -type f | wc -l)
  "$MODELFS" push --plain-http "$REF" "$WORK/src" > /dev/null
  rm -rf "$WORK/src"
  MANIFEST=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/$REPO/manifests/v1")
  BLOBS=$(python3 -c "import sys,json; print(' '.join(l['digest'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
  TOTAL=$(python3 -c "import sys,json; print(sum(l['size'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
  for run in $(seq "$RUNS"); do
    echo "${MIB} MiB, run $run/$RUNS ..." >&2
    measure_registry_raw
    for l in $LOADERS; do measure_init_container "$l"; done
    for l in $LOADERS; do measure_skopeo "$l"; done
    for l in $LOADERS; do measure_local_disk "$l"; done
    for l in $LOADERS; do measure_modelfs_cold "$l"; done
    for l in $LOADERS; do measure_modelfs_warm "$l"; done
    rm -rf "$WARM_CACHE"
    WARM_CACHE=""
    measure_ready_and_random_read
    measure_rss_concurrent
  done
  rm -rf "$DL"
  print_tables
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
echo "ratios: baseline time / modelfs time (above 1.00x modelfs is faster; goals in issue 10:" \
  "cold >= 1.5x init and >= 0.7x raw, warm >= 0.9x disk). drop_caches before every measure: $([[ $DROP_OK == 1 ]] && echo yes || echo NOT permitted)"
