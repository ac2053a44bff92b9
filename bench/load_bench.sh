#!/usr/bin/env bash
# load_bench.sh: the full model load a model server does at start (every weight byte read),
# through modelfs beside the baselines, in each of several topologies (where the node fetches
# from), all measured in one run, so that modelfs and what it replaces are compared on the same
# machine under the same load. The model is `modelfs-synth safetensors`
# of each size, pushed with `modelfs push` (M = the ModelPack artifact at :v1, V = the volume
# image at :v1-volume). Loaders (bench/load_main.cc; LOADERS): `read` (16 MiB read() calls,
# vLLM eager) and `mmap` (map, parse the safetensors header, copy each tensor out in offset
# order: safetensors load_file, llama.cpp).
#
# A topology is BACKEND-NET-STORE, its words in any order, each optional:
#   BACKEND registry (default): docker-registry serves the blobs itself;
#           redirect: docker-registry answers blob GETs with a 307 to an nginx that serves its
#           storage directory (sendfile, Range), as registries on object storage or a CDN do.
#   NET     loopback (default; also "none"): the servers share the node's loopback;
#           10gbit, 25gbit (any tc rate): the servers run in a network namespace behind a veth
#           pair shaped with tc tbf in both directions (bench/netns.sh), as behind a NIC;
#           veth: the namespace, unshaped.
#   STORE   disk (default): the registry's storage on disk (drop_caches empties its cache);
#           tmpfs: the storage in a tmpfs, which drop_caches leaves alone (an object store
#           answering from memory).
# TOPOLOGIES lists them (default below); or BACKEND, RATE and STORE name a single one.
#
# In every topology, each run, with every loader (the page cache dropped before each measure):
#   registry raw        curl each of M's blobs to /dev/null, one after another; no load
#   init (a) serial     curl each blob to disk, then `openssl dgst -sha256` each, then load
#   init (b) overlapped every blob at once, curl | tee FILE | openssl dgst; then load
#   modelfs cold        `modelfs mount` of V on an empty cache + load through the mount
# with the mount's CPU, the registry's and nginx's CPU, and the statuses they answered during
# each cold load (307s from the registry against 206s from nginx show whether modelfs reuses
# a redirect target for its range reads). In the first topology only, each run:
#   skopeo copy         `skopeo copy docker://...M oci:DIR` (verifies digests) + load
#   local disk          load the init container's files
#   node limits         SHA-256 on one core over the model's files in the page cache, and each
#                       loader over them (no drop)
#   modelfs warm        mount V again on the cache the cold load filled, drop caches, load; twice
#                       (the first load is the disk's first read of the blocks the cold load wrote)
#   and the second table: time to ready, bytes fetched before the first read and by a random
#   read, page-cache copies after a warm load, peak RSS with 16 concurrent cold readers, a
#   second pod that opens the model halfway through a cold load, and the CPU and time of the
#   whole-layer audit after a load.
# The node's limit for a loader in a topology = the largest of: the raw time, the SHA-256 time
# over the cores, and the loader's time over the page cache.
# Times are medians of RUNS runs. "cold vs init" = better init / cold (above 1.00x modelfs is
# faster); "cold vs limit" = cold / limit (1.00x is the limit). Nothing is asserted.
#
# On a VM whose balloon reports free pages to the host, every drop_caches also touches and frees
# SETTLE_MIB of memory (lib.sh; default 3x the model + 1 GiB there, 0 elsewhere), so that each
# measure starts from the same memory state rather than from what the one before it left.
#
# Usage: bench/load_bench.sh BUILD_DIR
#   env: SIZES="2048 8192" (MiB) RUNS=3 WORK=/tmp SETTLE_MIB LOADERS="read mmap"
#        TOPOLOGIES="loopback-disk redirect-tmpfs redirect-10gbit-disk redirect-10gbit-tmpfs
#                    redirect-25gbit-tmpfs"   (or BACKEND=registry|redirect RATE=... STORE=...)
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load.
#   BASE_BUILD=DIR (optional): a previous build's tree (only its cmd/modelfs is used). Each cold
#   and warm modelfs measure is then taken with both binaries, one right after the other (the
#   order swapped every run), and a last table sets them side by side: a change is judged
#   against the build before it under the same load, not against a number from another day.
#   CHUNK_DIGEST=blake3|sha256 (default blake3): the hash of V's chunk indexes (push
#   --chunk-digest); with BASE_BUILD the base binary mounts a second V of the same M with
#   SHA-256 indexes (BASE_CHUNK_DIGEST, default sha256: what a build before BLAKE3 reads), so
#   each variant is measured with the index its users get. Every modelfs row names its hash.
#   The load average (1 min) must be at most 0.5 when the bench starts, else it refuses:
#   numbers from a busy machine measure the other work. FORCE=1 runs anyway, and every table
#   then says so.
#   Quick check: SIZES=256 RUNS=1 bench/load_bench.sh build
# Needs root (FUSE, drop_caches, namespaces), docker-registry, nginx (nginx-light), ip and tc
# (iproute2), skopeo, curl, openssl, fincore (util-linux), python3; about 5x the largest model
# free under WORK, and memory for one more copy of it when a topology keeps its store in tmpfs.
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
SIZES=${SIZES:-"2048 8192"}
RUNS=${RUNS:-3}
LOADERS=${LOADERS:-"read mmap"}
CHUNK_DIGEST=${CHUNK_DIGEST:-blake3}
BASE_CHUNK_DIGEST=${BASE_CHUNK_DIGEST:-sha256}
READERS=16
require_quiet load_bench
# forced_note: a line under every table when the run was forced.
forced_note() { [[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }; }
if [[ -z ${TOPOLOGIES:-} ]]; then
  if [[ -n ${BACKEND:-}${RATE:-}${STORE:-} ]]; then
    TOPOLOGIES="${BACKEND:-registry}-${RATE:-loopback}-${STORE:-disk}"
  else
    TOPOLOGIES="loopback-disk redirect-tmpfs redirect-10gbit-disk redirect-10gbit-tmpfs redirect-25gbit-tmpfs"
  fi
fi
read -ra TOPOS <<< "$TOPOLOGIES"
FIRST=${TOPOS[0]}

# parse_topology NAME: sets T_BACKEND (registry|redirect), T_NET (loopback|veth|RATE) and
# T_STORE (disk|tmpfs).
parse_topology() {
  local w words
  T_BACKEND=registry T_NET=loopback T_STORE=disk
  IFS=- read -ra words <<< "$1"
  for w in "${words[@]}"; do
    case $w in
      registry | redirect) T_BACKEND=$w ;;
      loopback | none) T_NET=loopback ;;
      veth) T_NET=veth ;;
      disk | tmpfs) T_STORE=$w ;;
      *bit | *bps) netns_rate_bytes "$w" > /dev/null || exit 2; T_NET=$w ;;
      *)
        echo "topology $1: unknown word '$w' (want registry|redirect, loopback|veth|RATE, disk|tmpfs)" >&2
        exit 2
        ;;
    esac
  done
}
NEED_TMPFS=0
NEED_NETNS=0
for t in "${TOPOS[@]}"; do
  parse_topology "$t"
  [[ $T_STORE == tmpfs ]] && NEED_TMPFS=1
  [[ $T_NET != loopback ]] && NEED_NETNS=1
done

require_exec "$MODELFS" "build target modelfs"
NEW_MODELFS=$MODELFS
VARIANTS=(new)  # new: BUILD_DIR's modelfs; base: BASE_BUILD's (its keys are prefixed "base_")
if [[ -n ${BASE_BUILD:-} ]]; then
  BASE_MODELFS=$(realpath "$BASE_BUILD/cmd/modelfs")
  require_exec "$BASE_MODELFS" "BASE_BUILD's modelfs"
  VARIANTS+=(base)
fi
V=""
VOLUME_TAG_SUFFIX="-volume"
use_variant() {  # use_variant new|base: the modelfs binary (and its V) the next measures run
  if [[ $1 == new ]]; then
    V="" MODELFS=$NEW_MODELFS VOLUME_TAG_SUFFIX="-volume"
  else
    V="base_" MODELFS=$BASE_MODELFS VOLUME_TAG_SUFFIX="-volume-$BASE_CHUNK_DIGEST"
  fi
}
# The variants in the order of run N: swapped every run, so neither always goes first.
variants_for_run() {
  if (( $1 % 2 == 1 )); then echo "${VARIANTS[@]}"; else printf '%s ' "${VARIANTS[@]}" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i; print ""}'; fi
}
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_tools docker-registry nginx skopeo curl openssl fincore python3 dd find mountpoint fusermount3 sync tee
[[ $NEED_NETNS == 0 ]] || require_tools ip tc flock
[[ $(id -u) == 0 ]] || { echo "load_bench.sh needs root (FUSE mounts, drop_caches, namespaces)" >&2; exit 2; }
[[ -w /proc/sys/vm/drop_caches ]] || { echo "cannot write /proc/sys/vm/drop_caches" >&2; exit 2; }

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-load-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
REG_PID=""
NG_PID=""
NG_LOG=""
NS=""           # the current topology's network namespace, if any
TMPFS=""        # the tmpfs store of the current size, if mounted
MOUNTS=()       # mountpoints this run created
READER_PIDS=()  # background loaders of the concurrency measure
SKOPEO_GLOBAL=()
[[ -f /etc/containers/policy.json ]] || SKOPEO_GLOBAL=(--insecure-policy)

topo_down() {
  stop_registry
  stop_nginx
  netns_destroy "$NS"
  NS=""
}
cleanup() {
  local p m
  for p in "${READER_PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2> /dev/null || fusermount3 -u -z "$m" || true; fi
  done
  topo_down
  if [[ -n $TMPFS ]] && mountpoint -q "$TMPFS"; then umount "$TMPFS" || umount -l "$TMPFS" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need_mib=$((5 * $(tr ' ' '\n' <<< "$SIZES" | sort -n | tail -1)))
have_mib=$(df --output=avail -BM "$WORK" | tail -1 | tr -dc 0-9)
if [[ $have_mib -lt $need_mib ]]; then
  echo "need about $need_mib MiB free under $WORK, have $have_mib MiB" >&2
  exit 2
fi

# --- helpers ---------------------------------------------------------------------------------
# R[key] collects one value per run; medians are taken when printing. Keys of the per-topology
# measures start with "TOPOLOGY|".
# medi KEY: the median of counts, as a whole number (n/a: none recorded, such as nginx's where
# the registry serves the blobs itself).
medi() { local m; m=$(med "$1"); [[ $m == n/a ]] && echo "$m" || printf '%.0f\n' "$m"; }

# load LOADER FILE...: runs modelfs-load; the bytes it read are checked after the caller's timer.
load() {
  local mode=$1
  shift
  "$LOAD" --mode "$mode" --json "$@" > "$WORK/load.json"
}
check_loaded() {  # check_loaded WHAT: warns when a loader read other than the model's bytes
  local got
  got=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load.json")
  [[ $got == "$TOTAL" ]] || echo "warning: $1 read $got bytes, the model has $TOTAL" >&2
}
mount_files() { find "$1" -type f ! -name .modelinfo.json | sort; }
blob_url() { echo "http://$REG/v2/$REPO/blobs/$1"; }

# mount_v CACHE MNT: mounts V in the background; sets MOUNT_PID.
mount_v() {
  local out
  mkdir -p "$2"
  out=$("$MODELFS" mount --plain-http --hosts-dir "$HOSTS_DIR" --cache "$1" --log "$WORK/mount.log" \
    "$REF$VOLUME_TAG_SUFFIX" "$2")
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
# user_seconds: the user CPU seconds a process has used so far (lib.sh's cpu_seconds: user +
# system).
user_seconds() {
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", $12 / hz}'
}
# The servers' CPU so far: the registry's, and nginx's master and worker (0 without nginx; the
# callers record nginx's only behind a redirect, so that its column says n/a elsewhere).
reg_cpu() { cpu_seconds "$REG_PID"; }
ng_cpu() { if [[ -n $NG_PID ]]; then tree_cpu_seconds "$NG_PID"; else echo 0; fi; }
# count STATUSES CODE...: the sum of those codes' counts in log_statuses' output.
count() {
  local s=$1 n=0 c v
  shift
  for c in "$@"; do
    v=$(grep -o "\b$c=[0-9]*" <<< "$s" | cut -d= -f2 || true)
    n=$((n + ${v:-0}))
  done
  echo "$n"
}
# The kernel side of a mount: its bdi's readahead and the max_read option (FUSE request sizes).
mount_shape() {
  local dev opts
  dev=$(awk -v m="$(realpath "$1")" '$5 == m {print $3}' /proc/self/mountinfo | tail -1)
  opts=$(awk -v m="$(realpath "$1")" '$2 == m {print $4}' /proc/mounts | tail -1)
  echo "read_ahead_kb $(cat "/sys/class/bdi/$dev/read_ahead_kb" 2>/dev/null || echo '?'), $(grep -o 'max_read=[0-9]*' <<< "$opts" || echo 'max_read unset')"
}
resident() { fincore -b -n -r -o RES "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }
# page_cache_bytes (lib.sh), the node's whole page cache: its growth over a warm load counts
# every copy of the weights, whoever holds it; fincore cannot tell a FUSE passthrough file from
# its backing file (it maps the file, and the mapping is the backing file's).

# --- topologies ------------------------------------------------------------------------------
# topo_up NAME: starts the topology's servers (and its namespace) on the current size's store;
# sets TK (the key prefix), REG and, behind a redirect, NG_PID and NG_LOG. The volume image
# names the repository it was pushed to (PUSH_REG, a registry that is gone by now) as the
# model's home, so a hosts.toml in HOSTS_DIR sends that name to this topology's registry, the
# way a node's certs.d points a registry name at a server.
topo_up() {
  local store=$STORE_DISK reg_listen ng_listen addr dir="$WORK/topo" ns_args=()
  parse_topology "$1"
  TK="$1|"
  [[ $T_STORE == tmpfs ]] && store=$TMPFS
  rm -rf "$dir"
  mkdir -p "$dir"
  if [[ $T_NET == loopback ]]; then
    reg_listen="127.0.0.1:$(free_port)"
    ng_listen="127.0.0.1:$(free_port)"
  else
    NS=$(netns_name mfbench)
    addr=$(netns_create "$NS" "$([[ $T_NET == veth ]] || echo "$T_NET")")
    read -r _ addr <<< "$addr"
    reg_listen="$addr:5000"
    ng_listen="$addr:8080"
    ns_args=(--netns "$NS")
  fi
  NG_LOG=""
  if [[ $T_BACKEND == redirect ]]; then
    start_nginx "$dir/nginx" "$store" "$ng_listen" "$NS"
    start_registry "$dir/registry" --listen "$reg_listen" --storage "$store" --accesslog \
      --redirect "http://$ng_listen" "${ns_args[@]}"
  else
    start_registry "$dir/registry" --listen "$reg_listen" --storage "$store" --accesslog "${ns_args[@]}"
  fi
  HOSTS_DIR="$dir/certs.d"
  mkdir -p "$HOSTS_DIR/$PUSH_REG"
  printf 'server = "http://%s"\ncapabilities = ["pull", "resolve"]\n' "$REG" > "$HOSTS_DIR/$PUSH_REG/hosts.toml"
}

# --- paths (each records its total seconds for one loader) -----------------------------------
# Every blob to /dev/null, one after another, no load: the wire's time.
measure_raw() {
  local t0 t1 reg0 ng0 d
  drop_caches
  reg0=$(reg_cpu)
  ng0=$(ng_cpu)
  t0=$(now)
  for d in $BLOBS; do curl -fsL -o /dev/null "$(blob_url "$d")"; done
  t1=$(now)
  add "${TK}raw" "$(elapsed "$t0" "$t1")"
  add "${TK}raw_reg_cpu" "$(elapsed "$reg0" "$(reg_cpu)")"
  [[ -z $NG_PID ]] || add "${TK}raw_ng_cpu" "$(elapsed "$ng0" "$(ng_cpu)")"
}

# (a) blob by blob: download, then hash, then load. Leaves the verified files in $DL.
measure_init_serial() {
  local mode=$1 t0 t1 t2 t3 got d
  rm -rf "$DL"
  mkdir -p "$DL"
  drop_caches
  t0=$(now)
  for d in $BLOBS; do curl -fsL -o "$DL/${d#sha256:}" "$(blob_url "$d")"; done
  t1=$(now)
  for d in $BLOBS; do
    got=$(openssl dgst -sha256 -r "$DL/${d#sha256:}" | cut -d' ' -f1)
    [[ "sha256:$got" == "$d" ]] || { echo "init container: $d has digest sha256:$got" >&2; exit 1; }
  done
  t2=$(now)
  load "$mode" "$DL"/*
  t3=$(now)
  check_loaded "init container (a, $mode)"
  add "${TK}init_a:$mode" "$(elapsed "$t0" "$t3")"
  add "${TK}init_a_dl:$mode" "$(elapsed "$t0" "$t1")"
  add "${TK}init_a_sha:$mode" "$(elapsed "$t1" "$t2")"
  add "${TK}init_a_load:$mode" "$(elapsed "$t2" "$t3")"
}

# (b) every blob at once, each through tee into openssl (download and hash overlap); then load.
# Leaves the verified files in $DL.
measure_init_overlapped() {
  local mode=$1 t0 t1 t2 got d h pids=() failed=0
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
  [[ $failed == 0 ]] || { echo "init container (b): a download failed" >&2; exit 1; }
  for d in $BLOBS; do
    got=$(cut -d' ' -f1 "$WORK/sums/${d#sha256:}")
    [[ "sha256:$got" == "$d" ]] || { echo "init container (b): $d has digest sha256:$got" >&2; exit 1; }
  done
  t1=$(now)
  load "$mode" "$DL"/*
  t2=$(now)
  check_loaded "init container (b, $mode)"
  add "${TK}init_b:$mode" "$(elapsed "$t0" "$t2")"
  add "${TK}init_b_fetch:$mode" "$(elapsed "$t0" "$t1")"
  add "${TK}init_b_load:$mode" "$(elapsed "$t1" "$t2")"
}

measure_skopeo() {
  local mode=$1 dir="$WORK/skopeo" t0 t1 t2 files=() d
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

# The node's own limits, with the model's files in the page cache (no drop): SHA-256 of every
# file on one core, and each loader over them (after one load to warm the mappings' files).
measure_limits() {
  local t0 t1 f l
  cat "$DL"/* > /dev/null
  t0=$(now)
  for f in "$DL"/*; do openssl dgst -sha256 "$f" > /dev/null; done
  t1=$(now)
  add sha1 "$(elapsed "$t0" "$t1")"
  for l in $LOADERS; do
    load "$l" "$DL"/*
    t0=$(now)
    load "$l" "$DL"/*
    t1=$(now)
    check_loaded "page-cache load ($l)"
    add "cached:$l" "$(elapsed "$t0" "$t1")"
  done
}

# From the start of `modelfs mount` (empty cache) until the loader ends. In the first topology
# it leaves the filled cache in $WARM_CACHE for the warm measure.
measure_modelfs_cold() {
  local mode=$1 cache="$WORK/cache-cold-$1" mnt="$WORK/mnt" t0 t1 t2 files reg0 ng0 rl0 nl0 st
  [[ -z "${WARM_CACHE:-}" ]] || rm -rf "$WARM_CACHE"
  WARM_CACHE=""
  rm -rf "$cache"
  drop_caches
  reg0=$(reg_cpu)
  ng0=$(ng_cpu)
  rl0=$(log_size "$REG_LOG")
  nl0=$(log_size "$NG_LOG")
  t0=$(now)
  mount_v "$cache" "$mnt"
  t1=$(now)
  mapfile -t files < <(mount_files "$mnt")
  load "$mode" "${files[@]}"
  t2=$(now)
  # The mount's CPU over the load (the whole-layer audit starts a second after it).
  add "${TK}${V}cold_cpu:$mode" "$(cpu_seconds "$MOUNT_PID")"
  add "${TK}${V}cold_user:$mode" "$(user_seconds "$MOUNT_PID")"
  add "${TK}${V}cold_reg_cpu:$mode" "$(elapsed "$reg0" "$(reg_cpu)")"
  [[ -z $NG_PID ]] || add "${TK}${V}cold_ng_cpu:$mode" "$(elapsed "$ng0" "$(ng_cpu)")"
  check_loaded "modelfs cold ($mode)"
  add "${TK}${V}cold:$mode" "$(elapsed "$t0" "$t2")"
  add "${TK}${V}cold_mount:$mode" "$(elapsed "$t0" "$t1")"
  add "${TK}${V}cold_fetched:$mode" "$(settled_fetched "$mnt")"
  add "${TK}${V}cold_rss:$mode" "$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$MOUNT_PID/status")"
  umount_wait "$mnt" "$MOUNT_PID"
  # The requests of the load (and of the mount), counted once both servers have logged them.
  st=$(log_statuses "$REG_LOG" "$rl0")
  add "${TK}${V}cold_reg_307:$mode" "$(count "$st" 307)"
  add "${TK}${V}cold_reg_2xx:$mode" "$(count "$st" 200 206)"
  add "${TK}${V}cold_reg_206:$mode" "$(count "$st" 206)"
  if [[ -n $NG_LOG ]]; then
    st=$(log_statuses "$NG_LOG" "$nl0")
    add "${TK}${V}cold_ng_206:$mode" "$(count "$st" 206)"
    add "${TK}${V}cold_ng_200:$mode" "$(count "$st" 200)"
  fi
  if [[ ${TK%|} == "$FIRST" ]]; then WARM_CACHE=$cache; else rm -rf "$cache"; fi
}

# Mount on the filled cache, drop caches, time the load twice; then count page-cache copies.
# The first load after the cold one is the first time the disk reads the blocks the cold load
# wrote (with fdatasync); on this VM's virtual disk that read is several times slower than
# later ones, with or without modelfs, while the local-disk row reads files the init
# container's load already read once. The first is warm1, the second the warm row.
measure_modelfs_warm() {
  local mode=$1 mnt="$WORK/mnt" t0 t1 cpu0 files fuse_res cache_res cached0
  mount_v "$WARM_CACHE" "$mnt"
  mapfile -t files < <(mount_files "$mnt")
  drop_caches
  t0=$(now)
  load "$mode" "${files[@]}"
  t1=$(now)
  add "${V}warm1:$mode" "$(elapsed "$t0" "$t1")"
  drop_caches
  cached0=$(page_cache_bytes)
  cpu0=$(cpu_seconds "$MOUNT_PID")
  t0=$(now)
  load "$mode" "${files[@]}"
  t1=$(now)
  add "${V}pc_node:$mode" "$("$PY" -c "import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / int(sys.argv[3]))" "$cached0" "$(page_cache_bytes)" "$TOTAL")"
  check_loaded "modelfs warm ($mode)"
  add "${V}warm:$mode" "$(elapsed "$t0" "$t1")"
  add "${V}warm_cpu:$mode" "$(elapsed "$cpu0" "$(cpu_seconds "$MOUNT_PID")")"
  add "${V}warm_fetched:$mode" "$(settled_fetched "$mnt")"
  fuse_res=$(resident "${files[@]}")
  cache_res=$(resident "$WARM_CACHE"/blobs/sha256/*.data)
  add "${V}pc_fuse:$mode" "$fuse_res"
  add "${V}pc_cache:$mode" "$cache_res"
  add "${V}pc_x:$mode" "$("$PY" -c "import sys; print((int(sys.argv[1]) + int(sys.argv[2])) / int(sys.argv[3]))" "$fuse_res" "$cache_res" "$TOTAL")"
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
  off=$("$PY" -c "import random,sys; print(random.randrange(0, max(1, int(sys.argv[1]) - (4 << 20))))" "$size")
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
f2() { calc "f'{a:.2f}'" "$1" | tr -d "'"; }
# limit TOPOLOGY LOADER: "SECONDS WHICH", the largest of the wire, SHA over the cores and the
# loader over the page cache.
# A second pod opens the model when the first is halfway through a cold load (half the model's
# bytes in the cache), both with the read loader; then the whole-layer audit that follows the
# load (cache.audit): the mount's CPU and the time until every sealed layer is audited.
measure_second_pod() {
  local cache="$WORK/cache-2pod" mnt="$WORK/mnt" files ta0 ta1 tb0 tb1 pa cpu0 t0 s a
  rm -rf "$cache"
  drop_caches
  mount_v "$cache" "$mnt"
  mapfile -t files < <(mount_files "$mnt")
  ta0=$(now)
  ("$LOAD" --mode read "${files[@]}" > /dev/null && now > "$WORK/pod-a.end") &
  pa=$!
  READER_PIDS=("$pa")
  while kill -0 "$pa" 2> /dev/null &&
    [[ $(($(du -sk "$cache/blobs" | cut -f1) * 1024)) -lt $((TOTAL / 2)) ]]; do
    sleep 0.1
  done
  tb0=$(now)
  "$LOAD" --mode read "${files[@]}" > /dev/null
  tb1=$(now)
  wait "$pa" || echo "warning: the first pod's loader failed" >&2
  READER_PIDS=()
  ta1=$(cat "$WORK/pod-a.end")
  add pod_a "$(elapsed "$ta0" "$ta1")"
  add pod_b "$(elapsed "$tb0" "$tb1")"
  add pod_b_start "$(elapsed "$ta0" "$tb0")"
  cpu0=$(cpu_seconds "$MOUNT_PID")
  t0=$(now)
  for _ in $(seq 240); do
    s=$(stat_field "$mnt" sealed_layers)
    a=$(stat_field "$mnt" audited_layers)
    [[ $s -gt 0 && $a -ge $s ]] && break
    sleep 0.5
  done
  add audit_cpu "$(elapsed "$cpu0" "$(cpu_seconds "$MOUNT_PID")")"
  add audit_time "$(elapsed "$t0" "$(now)")"
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

limit() {
  "$PY" - "$(med "$1|raw")" "$(med sha1)" "$(nproc)" "$(med "cached:$2")" <<'PY'
import sys
def num(s):
    try:
        return float(s)
    except ValueError:
        return None
raw, sha, cores, loader = num(sys.argv[1]), num(sys.argv[2]), int(sys.argv[3]), num(sys.argv[4])
c = [(v, k) for v, k in ((raw, 'wire'), (sha / cores if sha else None, f'SHA over {cores} cores'),
                         (loader, 'loader')) if v is not None]
print(f'{max(c)[0]:.3f} {max(c)[1]}' if c else 'n/a n/a')
PY
}
trow() { printf '| %-24s | %-6s | %-6s | %8s | %8s | %8s | %-28s | %9s | %9s | %9s |\n' "$@"; }
print_topology_tables() {
  local t l cold a b lim better
  echo
  echo "Cold load against the init container and the node's limit (seconds; medians of $RUNS):"
  echo
  trow "topology" "loader" "hash" "cold" "init (a)" "init (b)" "limit (which)" "vs init" "vs limit" "CPU-s/GiB"
  trow "---" "---" "---" "---" "---" "---" "---" "---" "---" "---"
  for t in "${TOPOS[@]}"; do
    for l in $LOADERS; do
      cold=$(med "$t|cold:$l")
      a=$(med "$t|init_a:$l")
      b=$(med "$t|init_b:$l")
      better=$(calc 'min(a, b)' "$a" "$b")
      lim=$(limit "$t" "$l")
      trow "$t" "$l" "$CHUNK_DIGEST" "$cold" "$a" "$b" "$lim" \
        "$(calc "f'{a / b:.2f}x'" "$better" "$cold" | tr -d "'")" \
        "$(calc "f'{a / b:.2f}x'" "$cold" "${lim%% *}" | tr -d "'")" \
        "$(calc "f'{a / (b / 2**30):.2f}'" "$(med "$t|cold_cpu:$l")" "$TOTAL" | tr -d "'")"
    done
  done
  echo
  echo "The wire and the servers (raw: every blob to /dev/null; CPU-s of the registry / nginx;"
  echo "requests of each cold load: the registry's 307s and 200/206s, nginx's 206s and 200s):"
  echo
  local cpus
  cpus="raw / cold $(sed 's/ / \/ /g' <<< "$LOADERS")"
  printf '| %-24s | %7s | %6s | %-22s | %-22s |' "topology" "raw s" "MB/s" "registry CPU-s: $cpus" \
    "nginx CPU-s: $cpus"
  for l in $LOADERS; do printf ' %-18s |' "cold $l: 307 / reg 2xx / nginx 206 / 200"; done
  echo
  printf '| %s ' --- --- --- --- ---
  for l in $LOADERS; do printf '| %s ' ---; done
  echo '|'
  for t in "${TOPOS[@]}"; do
    local regc ngc
    regc="$(med "$t|raw_reg_cpu")"
    ngc="$(med "$t|raw_ng_cpu")"
    for l in $LOADERS; do
      regc+=" / $(med "$t|cold_reg_cpu:$l")"
      ngc+=" / $(med "$t|cold_ng_cpu:$l")"
    done
    printf '| %-24s | %7s | %6s | %-22s | %-22s |' "$t" "$(med "$t|raw")" \
      "$(mbps "$TOTAL" "$(med "$t|raw")")" "$regc" "$ngc"
    for l in $LOADERS; do
      printf ' %-18s |' "$(medi "$t|cold_reg_307:$l") / $(medi "$t|cold_reg_2xx:$l") / $(medi "$t|cold_ng_206:$l") / $(medi "$t|cold_ng_200:$l")"
    done
    echo
  done
  echo
  echo "The node's limits: SHA-256 on one core over the model (page cache): $(med sha1) s" \
    "($(mbps "$TOTAL" "$(med sha1)") MB/s), over $(nproc) cores $(calc "f'{a / b:.3f}'" "$(med sha1)" "$(nproc)" | tr -d "'") s;" \
    "each loader over the page cache:$(for l in $LOADERS; do printf ' %s %s s' "$l" "$(med "cached:$l")"; done)"
  echo
  for t in "${TOPOS[@]}"; do
    for l in $LOADERS; do
      echo "$t, $l: init (a) download $(med "$t|init_a_dl:$l") + openssl $(med "$t|init_a_sha:$l") + load $(med "$t|init_a_load:$l") s;" \
        "init (b) fetch and hash $(med "$t|init_b_fetch:$l") + load $(med "$t|init_b_load:$l") s;" \
        "cold: mount returned after $(med "$t|cold_mount:$l") s, mount CPU $(med "$t|cold_cpu:$l") s (user $(med "$t|cold_user:$l") s)," \
        "fetched $(human "$(med "$t|cold_fetched:$l")")"
    done
  done
}

row() { printf '| %-34s | %9s | %9s | %-26s | %-26s | %-21s |\n' "$@"; }
print_first_tables() {
  local raw r m l F="$FIRST|"
  raw=$(med "${F}raw")
  echo
  echo "In $FIRST, every path (seconds; medians of $RUNS):"
  echo
  row "path" "read s" "mmap s" "read: baseline/modelfs" "mmap: baseline/modelfs" "fetched (read / mmap)"
  row "---" "---" "---" "---" "---" "---"
  row "registry raw (curl > /dev/null)" "$raw" "$raw" "$(mbps "$TOTAL" "$raw") MB/s, no load" "" ""
  row "init container (a) serial" "$(med "${F}init_a:read")" "$(med "${F}init_a:mmap")" "" "" ""
  row "init container (b) overlapped" "$(med "${F}init_b:read")" "$(med "${F}init_b:mmap")" "" "" ""
  row "skopeo copy + load" "$(med skopeo:read)" "$(med skopeo:mmap)" "" "" ""
  r=$(med "${F}cold:read")
  m=$(med "${F}cold:mmap")
  row "modelfs cold (mount + load), $CHUNK_DIGEST" "$r" "$m" \
    "$(ratio "$(calc 'min(a, b)' "$(med "${F}init_a:read")" "$(med "${F}init_b:read")")" "$r") init, $(ratio "$raw" "$r") raw" \
    "$(ratio "$(calc 'min(a, b)' "$(med "${F}init_a:mmap")" "$(med "${F}init_b:mmap")")" "$m") init, $(ratio "$raw" "$m") raw" \
    "$(human "$(med "${F}cold_fetched:read")") / $(human "$(med "${F}cold_fetched:mmap")")"
  row "local disk" "$(med disk:read)" "$(med disk:mmap)" "" "" ""
  r=$(med warm1:read)
  m=$(med warm1:mmap)
  row "modelfs warm, 1st load after the fill" "$r" "$m" "$(ratio "$(med disk:read)" "$r") disk" \
    "$(ratio "$(med disk:mmap)" "$m") disk" ""
  r=$(med warm:read)
  m=$(med warm:mmap)
  row "modelfs warm (load), $CHUNK_DIGEST" "$r" "$m" "$(ratio "$(med disk:read)" "$r") disk" \
    "$(ratio "$(med disk:mmap)" "$m") disk" \
    "$(human "$(med warm_fetched:read)") / $(human "$(med warm_fetched:mmap)")"
  echo
  printf '| %-58s | %-40s |\n' "measure (in $FIRST)" "value"
  printf '| %-58s | %-40s |\n' "---" "---"
  printf '| %-58s | %-40s |\n' "time to ready (mount until the mountpoint lists)" "$(med ready) s"
  printf '| %-58s | %-40s |\n' "fetched before the first read" \
    "$(human "$(med ready_fetched)") ($("$PY" -c "import sys; print(f'{100*float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$(med ready_fetched)" "$TOTAL")% of the model)"
  printf '| %-58s | %-40s |\n' "fetched by .modelinfo.json + 4 MiB at a random offset" "$(human "$(med random_fetched)")"
  for l in $LOADERS; do
    printf '| %-58s | %-40s |\n' "page cache after warm $l load: mount / cache files / sum" \
      "$(human "$(med "pc_fuse:$l")") / $(human "$(med "pc_cache:$l")") / $(f2 "$(med "pc_x:$l")")x model"
    printf '| %-58s | %-40s |\n' "node page cache growth over the warm $l load" \
      "$(f2 "$(med "pc_node:$l")")x model (meminfo Cached)"
  done
  printf '| %-58s | %-40s |\n' "peak RSS of the mount process, $READERS concurrent cold readers" \
    "$(human "$(med rss)") (all done in $(med rss_time) s)"
  printf '| %-58s | %-40s |\n' "peak RSS of the mount process, one cold load (read / mmap)" \
    "$(human "$(med "${F}cold_rss:read")") / $(human "$(med "${F}cold_rss:mmap")")"
  printf '| %-58s | %-40s |\n' "second pod opened halfway through a cold read load: first" \
    "$(med pod_a) s ($(mbps "$TOTAL" "$(med pod_a)") MB/s)"
  printf '| %-58s | %-40s |\n' "... second (opened $(med pod_b_start) s in)" \
    "$(med pod_b) s ($(mbps "$TOTAL" "$(med pod_b)") MB/s)"
  printf '| %-58s | %-40s |\n' "whole-layer audit after the load: mount CPU / until done" \
    "$(med audit_cpu) s / $(med audit_time) s (idle wait included)"
  printf '| %-58s | %-40s |\n' "mount: bdi readahead, FUSE max_read" "$MOUNT_SHAPE"
  for l in $LOADERS; do
    printf '| %-58s | %-40s |\n' "CPU of the mount process, cold (of it user) / warm, $l loader" \
      "$(med "${F}cold_cpu:$l") s ($(med "${F}cold_user:$l") s) / $(med "warm_cpu:$l") s"
  done
  echo
  for l in $LOADERS; do echo "skopeo, $l: copy $(med "skopeo_copy:$l") s"; done
}

btrow() { printf '| %-24s | %-6s | %-5s | %8s | %8s | %10s | %9s | %9s |\n' "$@"; }
print_base_table() {
  local t l n b
  echo
  echo "This build beside BASE_BUILD ($BASE_BUILD), measured one after the other in each run"
  echo "(seconds and the mount's CPU-s; medians of $RUNS; base/new above 1.00x: this build is faster;"
  echo "this build mounts V with $CHUNK_DIGEST indexes, the base one V with $BASE_CHUNK_DIGEST indexes):"
  echo
  btrow "topology" "loader" "path" "new s" "base s" "base/new" "new CPU-s" "base CPU-s"
  btrow "---" "---" "---" "---" "---" "---" "---" "---"
  for t in "${TOPOS[@]}"; do
    for l in $LOADERS; do
      n=$(med "$t|cold:$l")
      b=$(med "$t|base_cold:$l")
      btrow "$t" "$l" "cold" "$n" "$b" "$(ratio "$b" "$n")" "$(med "$t|cold_cpu:$l")" "$(med "$t|base_cold_cpu:$l")"
    done
  done
  for l in $LOADERS; do
    n=$(med "warm:$l")
    b=$(med "base_warm:$l")
    btrow "$FIRST" "$l" "warm" "$n" "$b" "$(ratio "$b" "$n")" "$(med "warm_cpu:$l")" "$(med "base_warm_cpu:$l")"
  done
}

# --- main ------------------------------------------------------------------------------------
T_START=$(now)
echo "load_bench: $(nproc) CPUs, kernel $(uname -r), SIZES=\"$SIZES\" RUNS=$RUNS LOADERS=\"$LOADERS\"," \
  "CHUNK_DIGEST=$CHUNK_DIGEST, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -z $FORCED ]] || echo "** $FORCED **"
echo "topologies: ${TOPOS[*]} (skopeo, local disk, node limits, warm and the second table in $FIRST)"
STORE_DISK="$WORK/store"
for MIB in $SIZES; do
  R=()
  WARM_CACHE=""
  REPO="bench/m$MIB"
  DL="$WORK/init-$MIB"
  # Push once to a registry on loopback; every topology serves this store (or its tmpfs copy).
  start_registry "$WORK/push" --storage "$STORE_DISK"
  "$SYNTH" safetensors "$WORK/src" --mib "$MIB" > /dev/null
  NFILES=$(find "$WORK/src" -type f | wc -l)
  PUSH_REG=$REG
  REF="$PUSH_REG/$REPO:v1"
  "$MODELFS" push --plain-http --chunk-digest "$CHUNK_DIGEST" "$REF" "$WORK/src" > /dev/null
  if [[ -n ${BASE_BUILD:-} ]]; then
    # The same M, a second V with the index the base build reads.
    "$MODELFS" convert --plain-http --chunk-digest "$BASE_CHUNK_DIGEST" \
      --volume-tag "v1-volume-$BASE_CHUNK_DIGEST" "$REF" > /dev/null
  fi
  rm -rf "$WORK/src"
  MANIFEST=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/$REPO/manifests/v1")
  stop_registry
  BLOBS=$("$PY" -c "import sys,json; print(' '.join(l['digest'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
  TOTAL=$("$PY" -c "import sys,json; print(sum(l['size'] for l in json.loads(sys.argv[1])['layers']))" "$MANIFEST")
  store_mib=$(du -sm "$STORE_DISK" | cut -f1)
  if [[ $NEED_TMPFS == 1 ]]; then
    TMPFS="$WORK/store-tmpfs"
    mkdir -p "$TMPFS"
    mount -t tmpfs -o "size=$((store_mib + 64))m,mode=0700" modelfs-bench-store "$TMPFS"
    cp -a "$STORE_DISK/." "$TMPFS/"
  fi
  set_settle "$MIB"  # after the tmpfs is filled: what it holds is not available
  echo "${MIB} MiB: before every measure drop_caches, then touch and free ${SETTLE_MIB} MiB" \
    "(SETTLE_MIB; virtio balloon free page reporting: $(balloon_reporting))"
  for run in $(seq "$RUNS"); do
    for t in "${TOPOS[@]}"; do
      echo "${MIB} MiB, run $run/$RUNS, $t ($(elapsed "$T_START" "$(now)") s in) ..." >&2
      topo_up "$t"
      measure_raw
      for l in $LOADERS; do measure_init_serial "$l"; done
      for l in $LOADERS; do measure_init_overlapped "$l"; done
      for l in $LOADERS; do
        for v in $(variants_for_run "$run"); do use_variant "$v"; measure_modelfs_cold "$l"; done
      done
      use_variant new
      if [[ $t == "$FIRST" ]]; then
        for l in $LOADERS; do measure_skopeo "$l"; done
        for l in $LOADERS; do measure_local_disk "$l"; done
        measure_limits
        for l in $LOADERS; do
          for v in $(variants_for_run "$run"); do use_variant "$v"; measure_modelfs_warm "$l"; done
        done
        use_variant new
        rm -rf "$WARM_CACHE"
        WARM_CACHE=""
        measure_ready_and_random_read
        measure_rss_concurrent
        measure_second_pod
      fi
      topo_down
    done
  done
  rm -rf "$DL"
  echo
  echo "### ${MIB} MiB model: $(human "$TOTAL") in $NFILES files; medians of $RUNS run(s)"
  print_topology_tables
  print_first_tables
  [[ ${#VARIANTS[@]} == 1 ]] || print_base_table
  forced_note
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [[ -n $TMPFS ]]; then umount "$TMPFS"; TMPFS=""; fi
  rm -rf "$STORE_DISK" "$WORK/push"
done
echo
echo "vs init: the better init container / modelfs cold (above 1.00x modelfs is faster; the" \
  "goal >= 1.5x); vs limit: modelfs cold / the node's limit (goal <= 1.5x, <= 1.15x where the wire" \
  "is the limit); CPU-s/GiB: the mount process over the cold load (goal <= 1.5). warm vs disk:" \
  "disk / warm (goal >= 0.9x). drop_caches before every measure:" \
  "$([[ $DROP_OK == 1 ]] && echo yes || echo NOT permitted). Took $(elapsed "$T_START" "$(now)") s."
