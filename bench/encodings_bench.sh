#!/usr/bin/env bash
# encodings_bench.sh: one table per layer encoding of the same model (issue 28): what a full
# load costs through modelfs beside the init container that downloads, checks and unpacks the
# same layers, all measured in one run on one machine.
#
# The model is `modelfs-synth safetensors` (bf16), published five ways:
#   raw          `modelfs push` (one .raw layer per file)
#   tar          `modelfs push --tar`
#   zstd-frames  `modelfs push --compress zstd` (.tar+zstd in independent frames, one per chunk)
#   zstd         the tar layers re-encoded by `zstd -3` (one frame per layer; reencode_model.py)
#   gzip         the tar layers re-encoded by `gzip -6 -n`
# and a volume image for each (`push` writes it; `modelfs convert` for the re-encoded ones).
#
# Per topology, encoding, loader and run (page cache dropped before each measure):
#   init         every blob at once: curl | tee >(openssl dgst -sha256) | [gzip -d|zstd -d] |
#                tar -x (or to a file for raw), digests checked, then the loader over the files
#   cold         `modelfs mount` of the volume image on an empty cache + the loader through it
#                (the mount's CPU and the bytes it fetched are recorded)
# and in the first topology only:
#   warm         mount again on the cache the cold load filled, drop caches, load; the opens
#                served by passthrough (stats passthrough_opens) and page-cache copies after it
#   local disk   the loader over the init container's files
#   ready        from `modelfs mount` to a listed mountpoint on an empty cache, then the
#                compressed bytes fetched by a 4 MiB read at a random offset of the largest file
# Topologies: loopback (docker-registry on 127.0.0.1, storage on disk) and RATE (the registry in
# a network namespace behind a veth pair shaped with tc tbf, bench/netns.sh), e.g. 2gbit.
# Times are medians of RUNS. Nothing is asserted.
#
# Usage: bench/encodings_bench.sh BUILD_DIR
#   env: MIB=2048 RUNS=3 ENCODINGS="raw tar zstd-frames zstd gzip" LOADERS="read mmap"
#        TOPOLOGIES="loopback 2gbit" WORK=/tmp FORCE=1 (run above load average 0.5)
#   Quick check: MIB=256 RUNS=1 TOPOLOGIES=loopback bench/encodings_bench.sh build
# Needs root (FUSE, drop_caches, namespaces), docker-registry, curl, openssl, gzip, zstd, tar,
# python3, ip and tc (iproute2), fincore (util-linux).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=bench/netns.sh
source "$(dirname "$0")/netns.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
fi
BUILD=$1
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
REENCODE=$(realpath "$(dirname "$0")/reencode_model.py")
MIB=${MIB:-2048}
RUNS=${RUNS:-3}
ENCODINGS=${ENCODINGS:-"raw tar zstd-frames zstd gzip"}
LOADERS=${LOADERS:-"read mmap"}
TOPOLOGIES=${TOPOLOGIES:-"loopback 2gbit"}
read -ra TOPOS <<< "$TOPOLOGIES"
FIRST=${TOPOS[0]}
require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_tools docker-registry curl openssl gzip zstd tar fincore ip tc "$PY"
require_quiet encodings_bench

WORK=$(mktemp -d "${WORK:-/tmp}/encodings-bench.XXXXXX")
NS=""
MOUNTS=()
cleanup() {
  local m
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2> /dev/null || fusermount3 -u -z "$m" || true; fi
  done
  stop_registry
  netns_destroy "$NS"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

load() {
  local mode=$1
  shift
  "$LOAD" --mode "$mode" --json "$@" > "$WORK/load.json"
  local got
  got=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load.json")
  [[ $got == "$TOTAL" ]] || echo "warning: a load read $got bytes, the model has $TOTAL" >&2
}
mount_files() { find "$1" -type f ! -name .modelinfo.json | sort; }
resident() { fincore -b -n -r -o RES "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }
# mount_v CACHE MNT: mounts this encoding's V; sets MOUNT_PID.
mount_v() {
  local out
  mkdir -p "$2"
  out=$("$MODELFS" mount --plain-http --hosts-dir "$HOSTS_DIR" --cache "$1" --log "$WORK/mount.log" \
    "$PUSH_REG/$REPO:$ENC-volume" "$2")
  MOUNTS+=("$2")
  MOUNT_PID=$(mount_pid <<< "$out")
  [[ -n "$MOUNT_PID" ]] || MOUNT_PID=$(stat_field "$2" pid)
}
# wire_fetched DIR: bytes the mount received from the registry. The cache's bytes_fetched counts
# what it got from its source, which for a lazily decoded layer is the decoded bytes: those are
# swapped for the compressed bytes the decoding source fetched.
wire_fetched() {
  "$MODELFS" stats --json "$1" | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
print(s["bytes_fetched"] - (s.get("decoded_bytes", 0) - s.get("lead_in_bytes", 0)) + s.get("compressed_bytes_fetched", 0))'
}
settled_fetched() {
  local a b
  a=$(wire_fetched "$1")
  for _ in $(seq 20); do
    sleep 0.1
    b=$(wire_fetched "$1")
    [[ $a == "$b" ]] && break
    a=$b
  done
  echo "$a"
}

declare -A BLOBS MTYPE WIRE

# --- the model, published five ways ------------------------------------------------------------
start_registry "$WORK/push" --storage "$WORK/store"
PUSH_REG=$REG
REPO=bench/enc
"$SYNTH" safetensors "$WORK/src" --mib "$MIB" > /dev/null
TOTAL=$(find "$WORK/src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
for e in $ENCODINGS; do
  case $e in
    raw) "$MODELFS" push --plain-http "$REG/$REPO:raw" "$WORK/src" > /dev/null ;;
    tar) "$MODELFS" push --plain-http --tar "$REG/$REPO:tar" "$WORK/src" > /dev/null ;;
    zstd-frames) "$MODELFS" push --plain-http --compress zstd "$REG/$REPO:zstd-frames" "$WORK/src" > /dev/null ;;
    zstd | gzip)
      [[ $(curl -s -o /dev/null -w '%{http_code}' -I "http://$REG/v2/$REPO/manifests/tar") == 200 ]] ||
        "$MODELFS" push --plain-http --tar "$REG/$REPO:tar" "$WORK/src" > /dev/null
      "$PY" "$REENCODE" "$REG" "$REPO" tar "$e" "$e" > /dev/null
      "$MODELFS" convert --plain-http "$REG/$REPO:$e" > "$WORK/convert-$e.log" 2>&1 ||
        { echo "convert of the $e model failed:" >&2; cat "$WORK/convert-$e.log" >&2; exit 1; }
      ;;
    *) echo "unknown encoding $e (want raw tar zstd-frames zstd gzip)" >&2; exit 2 ;;
  esac
  manifest=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/$REPO/manifests/$e")
  BLOBS[$e]=$("$PY" -c "import json,sys; print(' '.join(l['digest'] for l in json.loads(sys.argv[1])['layers']))" "$manifest")
  MTYPE[$e]=$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['layers'][0]['mediaType'].rsplit('.', 1)[-1])" "$manifest")
  WIRE[$e]=$("$PY" -c "import json,sys; print(sum(l['size'] for l in json.loads(sys.argv[1])['layers']))" "$manifest")
done
rm -rf "$WORK/src"
stop_registry

# topo_up NAME: the registry on the pushed store, on loopback or in a shaped namespace; a
# hosts.toml sends the name V was pushed under (PUSH_REG) to it.
topo_up() {
  local listen addr ns_args=()
  if [[ $1 == loopback ]]; then
    listen="127.0.0.1:$(free_port)"
  else
    NS=$(netns_name mfenc)
    addr=$(netns_create "$NS" "$1")
    read -r _ addr <<< "$addr"
    listen="$addr:5000"
    ns_args=(--netns "$NS")
  fi
  rm -rf "$WORK/topo"
  start_registry "$WORK/topo/registry" --listen "$listen" --storage "$WORK/store" "${ns_args[@]}"
  HOSTS_DIR="$WORK/topo/certs.d"
  mkdir -p "$HOSTS_DIR/$PUSH_REG"
  printf 'server = "http://%s"\ncapabilities = ["pull", "resolve"]\n' "$REG" > "$HOSTS_DIR/$PUSH_REG/hosts.toml"
}
topo_down() {
  stop_registry
  netns_destroy "$NS"
  NS=""
}

# The init container: every blob at once, checked and unpacked as it arrives, then the load.
measure_init() {
  local mode=$1 t0 t1 t2 d h pids=() failed=0 got
  rm -rf "$DL" "$WORK/sums"
  mkdir -p "$DL" "$WORK/sums"
  drop_caches
  t0=$(now)
  for d in ${BLOBS[$ENC]}; do
    h=${d#sha256:}
    case ${MTYPE[$ENC]} in
      raw) (curl -fsL "http://$REG/v2/$REPO/blobs/$d" | tee "$DL/$h" | openssl dgst -sha256 -r > "$WORK/sums/$h") & ;;
      tar) (curl -fsL "http://$REG/v2/$REPO/blobs/$d" | tee >(openssl dgst -sha256 -r > "$WORK/sums/$h") | tar -x -C "$DL") & ;;
      tar+gzip) (curl -fsL "http://$REG/v2/$REPO/blobs/$d" | tee >(openssl dgst -sha256 -r > "$WORK/sums/$h") | gzip -d | tar -x -C "$DL") & ;;
      tar+zstd) (curl -fsL "http://$REG/v2/$REPO/blobs/$d" | tee >(openssl dgst -sha256 -r > "$WORK/sums/$h") | zstd -d -q | tar -x -C "$DL") & ;;
    esac
    pids+=($!)
  done
  for h in "${pids[@]}"; do wait "$h" || failed=1; done
  [[ $failed == 0 ]] || { echo "init container ($ENC): a download failed" >&2; exit 1; }
  for d in ${BLOBS[$ENC]}; do
    for _ in $(seq 50); do [[ -s $WORK/sums/${d#sha256:} ]] && break; sleep 0.02; done
    got=$(cut -d' ' -f1 "$WORK/sums/${d#sha256:}")
    [[ "sha256:$got" == "$d" ]] || { echo "init container ($ENC): $d has digest sha256:$got" >&2; exit 1; }
  done
  t1=$(now)
  mapfile -t files < <(find "$DL" -type f | sort)
  load "$mode" "${files[@]}"
  t2=$(now)
  add "$TK$ENC|init:$mode" "$(elapsed "$t0" "$t2")"
}
measure_disk() {
  local mode=$1 t0 t1
  drop_caches
  mapfile -t files < <(find "$DL" -type f | sort)
  t0=$(now)
  load "$mode" "${files[@]}"
  t1=$(now)
  add "$ENC|disk:$mode" "$(elapsed "$t0" "$t1")"
}
measure_cold() {
  local mode=$1 cache="$WORK/cache-$ENC" mnt="$WORK/mnt" t0 t1 t2 files
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt"
  t1=$(now)
  mapfile -t files < <(mount_files "$mnt")
  load "$mode" "${files[@]}"
  t2=$(now)
  add "$TK$ENC|cold_cpu:$mode" "$(cpu_seconds "$MOUNT_PID")"
  add "$TK$ENC|cold:$mode" "$(elapsed "$t0" "$t2")"
  add "$TK$ENC|fetched:$mode" "$(settled_fetched "$mnt")"
  umount_wait "$mnt" "$MOUNT_PID"
  if [[ $TK == "$FIRST|" ]]; then
    # warm: the same cache, mounted again; every file should now be passthrough
    mount_v "$cache" "$mnt"
    mapfile -t files < <(mount_files "$mnt")
    # Twice: the first read of the cache files after the cold load filled them is the first
    # time their blocks are read back from the disk (on this VM's virtual disk, blocks written
    # with fdatasync and never read are slower to read the first time, with or without
    # modelfs); the local-disk baseline's files were read once by the init container's load.
    drop_caches
    t0=$(now)
    load "$mode" "${files[@]}"
    t1=$(now)
    add "$ENC|warm1:$mode" "$(elapsed "$t0" "$t1")"
    drop_caches
    local c0 cached0
    c0=$(page_cache_kib)
    t0=$(now)
    load "$mode" "${files[@]}"
    t1=$(now)
    add "$ENC|warm:$mode" "$(elapsed "$t0" "$t1")"
    add "$ENC|pt_opens:$mode" "$(fresh_stat "$mnt" passthrough_opens)"
    add "$ENC|pc_x:$mode" "$(calc '(b - a) * 1024 / c' "$c0" "$(page_cache_kib)" "$TOTAL")"
    umount_wait "$mnt" "$MOUNT_PID"
  fi
  rm -rf "$cache"
}
page_cache_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
measure_ready() {
  local cache="$WORK/cache-ready" mnt="$WORK/mnt" t0 t1 before largest size off
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt"
  ls "$mnt" > /dev/null
  t1=$(now)
  add "$ENC|ready" "$(elapsed "$t0" "$t1")"
  before=$(settled_fetched "$mnt")
  largest=$(find "$mnt" -type f ! -name .modelinfo.json -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  size=$(stat -c %s "$largest")
  off=$(( (RANDOM * 32768 + RANDOM) % (size / 4096 - 1024) * 4096 ))
  dd if="$largest" of=/dev/null bs=4M count=1 iflag=skip_bytes skip="$off" status=none
  add "$ENC|random_fetched" "$(( $(settled_fetched "$mnt") - before ))"
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

for topo in "${TOPOS[@]}"; do
  topo_up "$topo"
  TK="$topo|"
  for run in $(seq "$RUNS"); do
    for ENC in $ENCODINGS; do
      DL="$WORK/init-$ENC"
      for mode in $LOADERS; do
        measure_init "$mode"
        measure_cold "$mode"
        [[ $topo != "$FIRST" ]] || measure_disk "$mode"
      done
      [[ $topo != "$FIRST" ]] || measure_ready
      rm -rf "$DL"
    done
  done
  topo_down
done

# --- tables ------------------------------------------------------------------------------------
GIB=$(calc 'a / 1073741824' "$TOTAL")
echo
echo "# encodings_bench: $(human "$TOTAL") of bf16 safetensors, medians of $RUNS, $(nproc) cores, load average $LOAD_AT_START at start"
[[ -z $FORCED ]] || echo "** $FORCED **"
for ENC in $ENCODINGS; do
  echo
  echo "## $ENC (.${MTYPE[$ENC]}): $(human "${WIRE[$ENC]}") on the wire ($(calc 'round(a / b, 3)' "${WIRE[$ENC]}" "$TOTAL") of the files), ready $(med "$ENC|ready") s, a 4 MiB random read fetched $(human "$(med "$ENC|random_fetched")")"
  echo
  printf '| %-9s | %-6s | %8s | %8s | %13s | %13s | %11s | %10s | %8s | %8s | %13s | %9s | %8s |\n' \
    topology loader "init s" "cold s" "cold vs init" "mount CPU-s/GiB" fetched "warm 1st s" "warm s" "disk s" "warm vs disk" "pt opens" "pc copies"
  printf '|%s|\n' "-----------|--------|----------|----------|---------------|---------------|-------------|------------|----------|----------|---------------|-----------|----------"
  for topo in "${TOPOS[@]}"; do
    for mode in $LOADERS; do
      k="$topo|$ENC|"
      init=$(med "${k}init:$mode"); cold=$(med "${k}cold:$mode")
      if [[ $topo == "$FIRST" ]]; then
        warm1=$(med "$ENC|warm1:$mode"); warm=$(med "$ENC|warm:$mode"); disk=$(med "$ENC|disk:$mode")
        wvd=$(sratio "$disk" "$warm"); pto=$(calc "int(a)" "$(med "$ENC|pt_opens:$mode")"); pcx=$(calc 'round(a, 2)' "$(med "$ENC|pc_x:$mode")")
      else
        warm1=-; warm=-; disk=-; wvd=-; pto=-; pcx=-
      fi
      printf '| %-9s | %-6s | %8s | %8s | %13s | %15s | %11s | %10s | %8s | %8s | %13s | %9s | %9s |\n' \
        "$topo" "$mode" "$init" "$cold" "$(sratio "$init" "$cold")" \
        "$(calc 'round(a / b, 2)' "$(med "${k}cold_cpu:$mode")" "$GIB")" "$(human "$(med "${k}fetched:$mode")")" \
        "$warm1" "$warm" "$disk" "$wvd" "$pto" "$pcx"
    done
  done
done
echo
echo "init: curl | tee >(openssl dgst -sha256) | [gzip -d | zstd -d] | tar -x, every blob at once, then the load."
echo "cold vs init = init / cold (above 1.00x modelfs is faster); warm vs disk = disk / warm."
echo "fetched: bytes from the registry (compressed bytes for lazily decoded layers)."
echo "warm 1st: the first load after the cold one filled the cache (the disk reads those blocks for the first time); warm: the next."
echo "pt opens: opens served by FUSE passthrough during the warm load; pc copies: page-cache growth / model size."
