#!/usr/bin/env bash
# llama_load_bench.sh: llama.cpp as the loader: the time until a model server built on
# llama.cpp has loaded a GGUF and evaluated its first token, through modelfs beside the baselines,
# in one run against a docker-registry on loopback. The model is `modelfs-synth llama-gguf` of
# each size (llama architecture, embedding 1024, 16 heads, 4 KV heads, FFN 2816, TYPE weights),
# pushed with `modelfs push` (M at :v1, V at :v1-volume). llama.cpp is node-llama-cpp's prebuilt
# CPU build (testsupport/llama/eval.mjs: loads the file, evaluates 8 fixed tokens, generates one).
# The page cache is dropped before every measure. Paths:
#   init container   curl M's GGUF blob to disk + `openssl dgst -sha256` + load from disk
#   local disk       load the init container's file
#   modelfs cold     `modelfs mount` of V on an empty cache + load through the mount (mmap)
#   modelfs cold, no mmap   the same with llama.cpp's use_mmap=false (read into memory)
#   modelfs warm     mount V again on the cache the cold load filled, drop caches, load (mmap)
# Each time is the path's own work (download, hash, mount) plus llama.cpp's model load through the
# first token; llama.cpp's own start (loading its shared libraries, about a second, the same on
# every path) is left out and printed once. Every path must generate the local file's tokens (else
# the run fails). Times are medians of RUNS runs; ratios are baseline / modelfs (above 1.0x
# modelfs is faster). Nothing is asserted beyond the tokens: the script only prints.
# Usage: bench/llama_load_bench.sh BUILD_DIR   env: SIZES="64 256" (MiB) RUNS=3 TYPE=q8_0 WORK=/tmp
#   Quick check: SIZES=64 RUNS=1 bench/llama_load_bench.sh build
# Needs root (FUSE, drop_caches), docker-registry, curl, openssl, python3, node >= 20 and
# `npm ci` in testsupport/llama (scripts/install-deps.sh), and about 4x the largest size free.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
require_quiet llama_load_bench

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,23p' "$0" >&2
  exit 2
fi
BUILD=$1
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
EVAL=$(realpath "$(dirname "$0")/../testsupport/llama/eval.mjs")
SIZES=${SIZES:-"64 256"}
RUNS=${RUNS:-3}
TYPE=${TYPE:-q8_0}

require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_tools docker-registry curl openssl python3 node mountpoint fusermount3 sync
[[ -f "$(dirname "$EVAL")/node_modules/node-llama-cpp/package.json" ]] ||
  { echo "llama.cpp is not installed: run scripts/install-deps.sh (npm ci in testsupport/llama)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "llama_load_bench.sh needs root (FUSE mounts, drop_caches)" >&2; exit 2; }

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-llama-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
REG_PID=""
MOUNTS=()
cleanup() {
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$WORK/eval.json" "$1"; }

# llama FILE [--no-mmap]: loads FILE with llama.cpp; leaves its JSON in $WORK/eval.json, sets LOAD_S
# to the seconds from the model load's start to the first token, and checks the tokens.
llama() {
  node "$EVAL" "$@" --steps 1 --threads "$(nproc)" > "$WORK/eval.json"
  local tokens; tokens=$(field tokens)
  if [[ -z "${WANT_TOKENS:-}" ]]; then
    WANT_TOKENS=$tokens
  elif [[ $tokens != "$WANT_TOKENS" ]]; then
    echo "llama.cpp on $1 generated $tokens, the local file $WANT_TOKENS" >&2
    exit 1
  fi
  add init "$(python3 -c "print($(field init_ms) / 1000)")"
  LOAD_S=$(python3 -c "print($(field first_token_ms) / 1000)")
}

mount_v() {  # mount_v CACHE MNT: sets MOUNT_PID
  local out
  mkdir -p "$2"
  out=$("$MODELFS" mount --plain-http --cache "$1" --log "$WORK/mount.log" "$REF-volume" "$2")
  MOUNTS+=("$2")
  MOUNT_PID=$(mount_pid <<< "$out")
}

measure_init_container() {
  local t0 t1 got
  rm -f "$DL"
  drop_caches
  t0=$(now)
  curl -fs -o "$DL" "http://$REG/v2/$REPO/blobs/$BLOB"
  got=$(openssl dgst -sha256 -r "$DL" | cut -d' ' -f1)
  [[ "sha256:$got" == "$BLOB" ]] || { echo "init container: $BLOB has digest sha256:$got" >&2; exit 1; }
  t1=$(now)
  llama "$DL"
  add init_container "$(python3 -c "print($(elapsed "$t0" "$t1") + $LOAD_S)")"
}

measure_local_disk() {
  drop_caches
  llama "$DL"
  add disk "$LOAD_S"
}

# measure_cold KEY [--no-mmap]: mount V on an empty cache and load through it.
measure_cold() {
  local key=$1 cache="$WORK/cache-$1" mnt="$WORK/mnt" t0 t1
  shift
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt"
  t1=$(now)
  llama "$mnt/model.gguf" "$@"
  add "$key" "$(python3 -c "print($(elapsed "$t0" "$t1") + $LOAD_S)")"
  umount_wait "$mnt" "$MOUNT_PID"
  WARM_CACHE=$cache
}

measure_warm() {
  local mnt="$WORK/mnt"
  mount_v "$WARM_CACHE" "$mnt"
  drop_caches
  llama "$mnt/model.gguf"
  add warm "$LOAD_S"
  umount_wait "$mnt" "$MOUNT_PID"
}

start_registry "$WORK/registry"
REPO=bench/llama
printf '## llama.cpp load to first token (%s, %s runs, %s cores)\n\n' "$TYPE" "$RUNS" "$(nproc)"
load_line
echo
printf '| %-9s | %-16s | %-10s | %-12s | %-20s | %-12s | %-13s | %-13s |\n' size "init container" \
  "local disk" "modelfs cold" "modelfs cold no mmap" "modelfs warm" "cold vs init" "cold vs disk"
printf '|%s|\n' "-----------|------------------|------------|--------------|----------------------|--------------|---------------|---------------"
for size in $SIZES; do
  for k in "${!R[@]}"; do unset "R[$k]"; done
  WANT_TOKENS=""
  dir="$WORK/model-$size"
  mkdir -p "$dir"
  "$SYNTH" llama-gguf "$dir/model.gguf" --type "$TYPE" --mib "$size" --embedding 1024 \
    --heads 16 --kv-heads 4 --ffn 2816 > /dev/null
  bytes=$(stat -c %s "$dir/model.gguf")
  REF="$REG/$REPO:v$size"
  "$MODELFS" push --plain-http "$REF" "$dir/model.gguf" > /dev/null
  BLOB="sha256:$(openssl dgst -sha256 -r "$dir/model.gguf" | cut -d' ' -f1)"
  DL="$WORK/blob-$size"
  set_settle "$size"
  for _ in $(seq "$RUNS"); do
    measure_init_container
    measure_local_disk
    measure_cold cold
    measure_cold cold_read --no-mmap
    measure_warm
  done
  rm -rf "$dir" "$DL" "$WORK"/cache-*
  printf '| %-9s | %-16s | %-10s | %-12s | %-20s | %-12s | %-13s | %-13s |\n' "$(human "$bytes")" \
    "$(med init_container) s" "$(med disk) s" "$(med cold) s" "$(med cold_read) s" "$(med warm) s" \
    "$(ratio "$(med init_container)" "$(med cold)")" "$(ratio "$(med disk)" "$(med cold)")"
done
printf '\nllama.cpp start (shared libraries, before any path): median %s s; generated tokens equal on every path.\n' "$(med init)"
