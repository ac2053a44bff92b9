#!/usr/bin/env bash
# stargz_bench.sh: the lazy peer a platform team weighs against modelfs, the stargz snapshotter
# 0.14.3, loading the same model as inference servers load it, beside an init container measured
# in the same run. Its table sits beside tp_bench.sh's (same model, same loaders).
#
# The model is `modelfs-synth safetensors` (SIZE_MIB in SHARD_MIB shards, as tp_bench.sh), in a
# KServe modelcar built by buildah as modelcar_bench.sh builds it (a small busybox base layer,
# the model under /models in a layer of its own), pushed gzip to a docker-registry on loopback
# (plain http, access log on). A private containerd 2.1.4 (the release in ../shared/tools,
# extracted into BUILD_DIR/third_party as modelcar_bench.sh does) with containerd-stargz-grpc as
# its proxy snapshotter `stargz` converts it: `ctr-remote content fetch`, `image convert
# --estargz --oci` (its defaults: gzip level 9, default chunk size), `image push --plain-http`.
#
# Loads (bench/load_main.cc, as tp_bench.sh): one reader (`modelfs-load --mode read`) and TP = N
# for N in RANKS (`modelfs-load --mode mmap --ranks N`: N processes, each mapping every shard and
# copying its Megatron slice of every tensor; the time is until the last rank is done).
# Each run, for every load, the page cache dropped before each measure:
#   init container   every layer blob at once, curl | tee FILE | openssl dgst -sha256, then
#                    `tar -xzf` of each layer in order, then the load over models/ (from the
#                    page cache, as the pod's container reads what its init container wrote)
#   stargz default   a fresh containerd and containerd-stargz-grpc (empty root: no cache) with
#                    an empty config (background fetch and prefetch on), then timed:
#                    `ctr-remote image rpull --plain-http` of the eStargz image (a FUSE mount
#                    per layer), `ctr images mount --snapshotter stargz` (a View of the image's
#                    top snapshot: overlayfs over the layers' FUSE mounts), the load over
#                    models/. Recorded: time to the last rank from the rpull and of the load
#                    alone; the daemon's CPU-s (utime + stime from /proc over the whole measure)
#                    and peak RSS (VmHWM); the registry's response bytes and requests (access
#                    log); the size on disk of the daemon's root after the load (its cache:
#                    du -x, FUSE mounts not entered) and of its fscache (the inflated chunks);
#                    the FUSE mounts it made
#   stargz no_bg     the same with `no_background_fetch = true` (purely on demand)
#   modelfs          the same gzip modelcar, `modelfs convert` (its volume image V: chunk and
#                    seek indexes, tar header records), then timed: `modelfs mount` of V on an
#                    empty cache until models/ lists (the FUSE mount modelfs-snapshotter serves a
#                    pod's image volume from; no containerd round trip, which for a remote
#                    snapshot is one manifest fetch), the load over models/. Recorded as for
#                    stargz; the mount's CPU-s and peak RSS; cache: du of its cache directory
# Nothing is asserted. Times are medians of RUNS.
#
# Usage: bench/stargz_bench.sh BUILD_DIR
#   env: SIZE_MIB=2048 SHARD_MIB=405 RUNS=3 RANKS="1 4 8" WORK=/tmp SETTLE_MIB (lib.sh)
#        STARGZ_CONFIGS="default no_bg" (either or both) FORCE=1 to run on a machine whose load
#        average is above 0.5 (every table then says so)
#        MODELFS_CONTAINERD21_TARBALL, MODELFS_STARGZ_TARBALL (default: ../shared/tools beside
#        the source)
#   Quick check: SIZE_MIB=256 SHARD_MIB=64 RUNS=1 RANKS=4 FORCE=1 bench/stargz_bench.sh build
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load (with --ranks).
#   WITH_MODELFS=0 leaves modelfs out (stargz and the init container only).
# Needs root (FUSE, overlay mounts, drop_caches), docker-registry, buildah, busybox (static),
# curl, openssl, tar, gzip, python3; about 10x the model free under WORK (buildah's vfs copies,
# the registry holds gzip and eStargz, containerd's content store, the stargz cache). WORK's
# path must be short: containerd's sockets live under it.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
fi
BUILD=$(realpath "$1")
SRCDIR=$(cd "$(dirname "$0")/.." && pwd)
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
MODELFS=$BUILD/cmd/modelfs
WITH_MODELFS=${WITH_MODELFS:-1}
SIZE_MIB=${SIZE_MIB:-2048}
SHARD_MIB=${SHARD_MIB:-405}
RUNS=${RUNS:-3}
RANKS=${RANKS:-"1 4 8"}
STARGZ_CONFIGS=${STARGZ_CONFIGS:-"default no_bg"}
# The releases and their pinned SHA-256s (containerd's as in
# testsupport/harness/containerd_release.h; stargz's as ../shared/tools holds it).
CTD_TARBALL=${MODELFS_CONTAINERD21_TARBALL:-$SRCDIR/../shared/tools/containerd-2.1.4-linux-amd64.tar.xz}
CTD_SHA256=12ecd7a0218944e837f137fcc299c9e82e64c8f90f8b741481226289c7c6bf5a
CTD_DIR=$BUILD/third_party/containerd-2.1.4
SGZ_TARBALL=${MODELFS_STARGZ_TARBALL:-$SRCDIR/../shared/tools/stargz-snapshotter-0.14.3-linux-amd64.tar.xz}
SGZ_SHA256=f1c949393406f3e4567534f835876eb7e71d994ff36aae3249566ae1bccbe60b
SGZ_DIR=$BUILD/third_party/stargz-snapshotter-0.14.3
BUSYBOX=/bin/busybox  # Debian's busybox-static
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
[[ $WITH_MODELFS == 0 ]] || require_exec "$MODELFS" "build target modelfs"
require_exec "$BUSYBOX" "package busybox-static"
require_tools docker-registry buildah curl openssl tee tar gzip du mountpoint "$PY"
[[ $(id -u) == 0 ]] || { echo "stargz_bench: needs root (FUSE, overlay mounts, drop_caches)" >&2; exit 2; }
for n in $RANKS; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "RANKS: $n is not a rank count" >&2; exit 2; }
done
for c in $STARGZ_CONFIGS; do
  [[ $c == default || $c == no_bg ]] || { echo "STARGZ_CONFIGS: $c is not default or no_bg" >&2; exit 2; }
done
"$LOAD" --mode mmap --ranks 2 /dev/null > /dev/null 2>&1 || [[ $? != 2 ]] ||
  { echo "$LOAD has no --ranks: build the target modelfs-load again" >&2; exit 2; }
require_quiet stargz_bench
RUN_START=$(now)

WORK=$(mktemp -d "${WORK:-/tmp}/stargz-bench.XXXXXX")
if (( $(df --output=avail -k "$WORK" | tail -1) < SIZE_MIB * 1024 * 10 )); then
  echo "stargz_bench: $WORK has less than 10x the model ($SIZE_MIB MiB) free; set WORK" >&2
  rmdir "$WORK"
  exit 2
fi
# buildah, ctr-remote and the stargz daemon: no credentials of the host (buildah wants the file).
export DOCKER_CONFIG="$WORK/no-docker-config"
mkdir -p "$DOCKER_CONFIG"
echo '{}' > "$DOCKER_CONFIG/config.json"
REG_PID=""
CTD_PID=""
SGZ_PID=""
RUN=""
MFS_MNT=""
cleanup() {
  if [[ -n $MFS_MNT ]] && mountpoint -q "$MFS_MNT"; then "$MODELFS" umount "$MFS_MNT" 2> /dev/null || fusermount3 -u -z "$MFS_MNT" || true; fi
  sgz_stop || true
  stop_registry
  umount_under "$WORK"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- helpers -----------------------------------------------------------------------------------
peak_rss() { awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$1/status"; }
# load LOADER DIR: LOADER is "read" or "tpN"; every regular file under DIR, sorted; warns when
# the bytes read are not the model's.
load() {
  local l=$1 got files
  mapfile -t files < <(find "$2" -type f | sort)
  if [[ $l == read ]]; then
    "$LOAD" --mode read --json "${files[@]}" > "$WORK/load.json"
  else
    "$LOAD" --mode mmap --ranks "${l#tp}" --json "${files[@]}" > "$WORK/load.json"
  fi
  got=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load.json")
  [[ $l != read || $got == "$TOTAL" ]] || echo "warning: a load of $2 read $got bytes, the model has $TOTAL" >&2
}
loaders() { echo read; for n in $RANKS; do echo "tp$n"; done; }
# wire LOG_OFFSET: "BYTES REQUESTS" of the registry's access log lines for /v2/$REPO/ after
# byte LOG_OFFSET of the log (manifests and blobs; a range response counts what it carried).
wire() {
  "$PY" - "$REG_LOG" "$1" "$REPO" << 'PY'
import re, sys
with open(sys.argv[1], 'rb') as f:
    f.seek(int(sys.argv[2]))
    text = f.read().decode('utf-8', 'replace')
pat = re.compile(r'"[A-Z]+ /v2/' + re.escape(sys.argv[3]) + r'/\S* HTTP/[0-9.]+" \d{3} (\d+)')
sizes = [int(m.group(1)) for m in pat.finditer(text)]
print(sum(sizes), len(sizes))
PY
}
# manifest_field TAG EXPR: EXPR (python, over the manifest m) of $REPO:TAG's OCI or Docker manifest.
manifest_field() {
  curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REG/v2/$REPO/manifests/$1" |
    "$PY" -c "import json,sys; m=json.load(sys.stdin); print($2)"
}
# fuse_mounts DIR: how many FUSE mounts are at or below DIR.
fuse_mounts() {
  awk -v d="$1" '{split($0, p, " - "); split(p[2], f, " ")}
    ($5 == d || index($5, d "/") == 1) && f[1] ~ /^fuse/ {n++} END {print n + 0}' /proc/self/mountinfo
}

# --- the releases ------------------------------------------------------------------------------
# release TARBALL SHA256 DIR BINARY...: the release extracted once into DIR (as
# testsupport/harness/containerd_release.cc does: checked against its pinned digest, staged,
# stamped last, renamed into place).
release() {
  local tarball=$1 sha=$2 dir=$3 got staging b
  shift 3
  [[ -f $tarball ]] || { echo "release not found at $tarball" >&2; exit 2; }
  [[ $(cat "$dir/.sha256" 2> /dev/null) == "$sha" ]] && return 0
  got=$(sha256sum "$tarball" | cut -d' ' -f1)
  [[ $got == "$sha" ]] || { echo "$tarball has sha256:$got, want sha256:$sha" >&2; exit 1; }
  staging="$dir.tmp-$$"
  rm -rf "$staging"
  mkdir -p "$staging"
  tar -xJf "$tarball" -C "$staging"
  for b in "$@"; do
    [[ -x $staging/$b ]] || { echo "$tarball has no top-level $b" >&2; rm -rf "$staging"; exit 1; }
  done
  printf '%s' "$sha" > "$staging/.sha256"
  rm -rf "$dir"
  mv "$staging" "$dir"
}
CTR=$CTD_DIR/ctr
CTR_REMOTE=$SGZ_DIR/ctr-remote

# --- containerd 2.1.4 with the stargz snapshotter ----------------------------------------------
# sgz_start CONFIG: a fresh containerd-stargz-grpc (CONFIG default: an empty config file; no_bg:
# no_background_fetch = true) with its root, socket and log in a new directory RUN under WORK,
# then a fresh containerd 2.1.4 there (CRI off: nothing here runs a container) with it as the
# proxy snapshotter `stargz`. Sets RUN, SGZ_PID, CTD_PID, CTD_SOCK.
sgz_start() {
  RUN=$(mktemp -d "$WORK/run.XXXXXX")
  CTD_SOCK=$RUN/containerd.sock
  if [[ $1 == no_bg ]]; then echo 'no_background_fetch = true' > "$RUN/stargz.toml"; else : > "$RUN/stargz.toml"; fi
  "$SGZ_DIR/containerd-stargz-grpc" --address "$RUN/stargz.sock" --root "$RUN/stargz-root" \
    --config "$RUN/stargz.toml" > "$RUN/stargz.log" 2>&1 &
  SGZ_PID=$!
  for _ in $(seq 600); do [[ -S $RUN/stargz.sock ]] && break; kill -0 "$SGZ_PID" 2> /dev/null || break; sleep 0.05; done
  [[ -S $RUN/stargz.sock ]] || { echo "containerd-stargz-grpc did not start:" >&2; tail -30 "$RUN/stargz.log" >&2; exit 1; }
  cat > "$RUN/config.toml" << TOML
version = 3
root = "$RUN/root"
state = "$RUN/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"]
[grpc]
  address = "$CTD_SOCK"
[ttrpc]
  address = "$CTD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$RUN/opt"
[proxy_plugins.stargz]
  type = "snapshot"
  address = "$RUN/stargz.sock"
TOML
  PATH="$CTD_DIR:$PATH" "$CTD_DIR/containerd" --config "$RUN/config.toml" > "$RUN/containerd.log" 2>&1 &
  CTD_PID=$!
  for _ in $(seq 600); do
    if [[ $("$CTR" --address "$CTD_SOCK" plugins ls 2> /dev/null |
      awk '$1 == "io.containerd.snapshotter.v1" && $2 == "stargz" {print $NF}') == ok ]]; then
      return 0
    fi
    kill -0 "$CTD_PID" 2> /dev/null || break
    sleep 0.05
  done
  echo "containerd 2.1.4 did not come up with the stargz snapshotter:" >&2
  tail -30 "$RUN/containerd.log" >&2
  exit 1
}
# The view first, then containerd, then the daemon; its FUSE mounts are left to umount_under
# (0.14.3 leaves them mounted when it stops).
sgz_stop() {
  [[ -n $RUN ]] || return 0
  umount_under "$RUN/mnt"
  stop_pid "$CTD_PID"
  CTD_PID=""
  stop_pid "$SGZ_PID"
  SGZ_PID=""
  umount_under "$RUN"
  rm -rf "$RUN"
  RUN=""
}
sgz_fail() {  # sgz_fail WHAT: the logs, then exit
  echo "stargz_bench: $1 failed:" >&2
  tail -20 "$RUN/rpull.log" "$RUN/mount.log" "$RUN/containerd.log" "$RUN/stargz.log" 2> /dev/null >&2
  exit 1
}

# --- measures ----------------------------------------------------------------------------------
measure_init() {  # every layer blob at once through openssl into files; tar -x; then the load
  local l=$1 dl=$WORK/init root=$WORK/rootfs t0 t1 t2 d h off b n pids=() failed=0
  rm -rf "$dl" "$root" "$WORK/sums"
  mkdir -p "$dl" "$root" "$WORK/sums"
  off=$(log_size "$REG_LOG")
  drop_caches
  t0=$(now)
  for d in $LAYERS; do
    h=${d#sha256:}
    (curl -fsL "http://$REG/v2/$REPO/blobs/$d" | tee "$dl/$h" | openssl dgst -sha256 -r > "$WORK/sums/$h") &
    pids+=($!)
  done
  for h in "${pids[@]}"; do wait "$h" || failed=1; done
  [[ $failed == 0 ]] || { echo "init container: a download failed" >&2; exit 1; }
  for d in $LAYERS; do
    [[ "sha256:$(cut -d' ' -f1 "$WORK/sums/${d#sha256:}")" == "$d" ]] ||
      { echo "init container: $d has another digest" >&2; exit 1; }
    tar -xzf "$dl/${d#sha256:}" -C "$root"
  done
  t1=$(now)
  load "$l" "$root/models"
  t2=$(now)
  add "init:ready:$l" "$(elapsed "$t0" "$t1")"
  add "init:load:$l" "$(elapsed "$t1" "$t2")"
  add "init:last:$l" "$(elapsed "$t0" "$t2")"
  read -r b n <<< "$(wire "$off")"
  add "init:wire:$l" "$b"
  add "init:reqs:$l" "$n"
  rm -rf "$dl" "$root" "$WORK/sums"
}

# record KEY T0 T1 T2 CPU_S PID OFF CACHE_DIR: what every path's measure adds: ready (T0..T1),
# load (T1..T2) and last; the daemon's CPU-s and peak RSS (PID); the registry's bytes and
# requests after log offset OFF; the size of CACHE_DIR.
record() {
  local k=$1 b n
  add "$k:cpu" "$5"
  add "$k:rss" "$(peak_rss "$6")"
  add "$k:ready" "$(elapsed "$2" "$3")"
  add "$k:load" "$(elapsed "$3" "$4")"
  add "$k:last" "$(elapsed "$2" "$4")"
  read -r b n <<< "$(wire "$7")"
  add "$k:wire" "$b"
  add "$k:reqs" "$n"
  add "$k:cache" "$(du -sx -B1 "$8" | cut -f1)"
}

# measure_stargz CONFIG LOADER: rpull + mount + load on a fresh daemon with an empty cache.
measure_stargz() {
  local cfg=$1 l=$2 k="$1:$2" mnt t0 t1 t2 c0 off n
  sgz_start "$cfg"
  mnt=$RUN/mnt
  mkdir -p "$mnt"
  off=$(log_size "$REG_LOG")
  drop_caches
  c0=$(cpu_seconds "$SGZ_PID")
  t0=$(now)
  "$CTR_REMOTE" --address "$CTD_SOCK" image rpull --plain-http "$ESGZ" > "$RUN/rpull.log" 2>&1 || sgz_fail "rpull of $ESGZ"
  "$CTR" --address "$CTD_SOCK" images mount --snapshotter stargz "$ESGZ" "$mnt" > "$RUN/mount.log" 2>&1 || sgz_fail "ctr images mount"
  ls "$mnt/models" > /dev/null
  t1=$(now)
  load "$l" "$mnt/models"
  t2=$(now)
  record "$k" "$t0" "$t1" "$t2" "$(calc 'a - b' "$(cpu_seconds "$SGZ_PID")" "$c0")" "$SGZ_PID" "$off" \
    "$RUN/stargz-root"
  add "$k:fscache" "$(du -sx -B1 "$RUN/stargz-root/stargz/fscache" 2> /dev/null | cut -f1 || echo 0)"
  # The layers must be served from stargz's FUSE mounts, not pulled and unpacked.
  n=$(fuse_mounts "$RUN")
  add "$k:fuse" "$n"
  [[ $n -gt 0 ]] || echo "warning: stargz $cfg: no FUSE mount under $RUN; the image was pulled and unpacked" >&2
  sgz_stop
}

# measure_modelfs LOADER: `modelfs mount` of the modelcar's V on an empty cache, then the load.
measure_modelfs() {
  local l=$1 k="modelfs:$1" cache=$WORK/mfs-cache out pid t0 t1 t2 off
  MFS_MNT=$WORK/mfs-mnt
  rm -rf "$cache"
  mkdir -p "$MFS_MNT"
  off=$(log_size "$REG_LOG")
  drop_caches
  t0=$(now)
  out=$("$MODELFS" mount --plain-http --cache "$cache" --log "$WORK/mfs-mount.log" "$VREF" "$MFS_MNT") ||
    { echo "stargz_bench: modelfs mount of $VREF failed:" >&2; tail -20 "$WORK/mfs-mount.log" >&2; exit 1; }
  pid=$(mount_pid <<< "$out")
  ls "$MFS_MNT/models" > /dev/null
  t1=$(now)
  load "$l" "$MFS_MNT/models"
  t2=$(now)
  record "$k" "$t0" "$t1" "$t2" "$(cpu_seconds "$pid")" "$pid" "$off" "$cache"
  add "$k:fscache" 0
  add "$k:fuse" 1
  umount_wait "$MFS_MNT" "$pid"
  rm -rf "$cache"
}

# --- the modelcar and its eStargz --------------------------------------------------------------
release "$CTD_TARBALL" "$CTD_SHA256" "$CTD_DIR" containerd ctr containerd-shim-runc-v2
release "$SGZ_TARBALL" "$SGZ_SHA256" "$SGZ_DIR" containerd-stargz-grpc ctr-remote
SRC=$WORK/model
"$SYNTH" safetensors "$SRC" --mib "$SIZE_MIB" --shard-mib "$SHARD_MIB" > /dev/null
TOTAL=$(find "$SRC" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
NFILES=$(find "$SRC" -type f | wc -l)
GIB=$(calc 'a / 1073741824' "$TOTAL")
BASE=$WORK/base
mkdir -p "$BASE/bin" "$BASE/etc"
cp "$BUSYBOX" "$BASE/bin/busybox"
ln -s busybox "$BASE/bin/sh"
echo modelcar > "$BASE/etc/hostname"
c1=$(buildah_ from scratch)
buildah_ copy "$c1" "$BASE" / > /dev/null
buildah_ commit -q "$c1" modelcar-base > /dev/null
c2=$(buildah_ from modelcar-base)
buildah_ copy "$c2" "$SRC" /models/ > /dev/null
buildah_ commit -q "$c2" modelcar > /dev/null
REPO=bench/modelcar
start_registry "$WORK/registry" --storage "$WORK/store" --accesslog
buildah_ push -q --tls-verify=false --compression-format gzip modelcar "docker://$REG/$REPO:v1" > /dev/null
buildah_ rm -a > /dev/null
rm -rf "$WORK/buildah" "$SRC" "$BASE"
LAYERS=$(manifest_field v1 "' '.join(l['digest'] for l in m['layers'])")
GZ_BYTES=$(manifest_field v1 "sum(l['size'] for l in m['layers'])")

# eStargz, converted by ctr-remote through containerd and the stargz snapshotter.
ESGZ=$REG/$REPO:v1-esgz
t0=$(now)
sgz_start default
"$CTR_REMOTE" --address "$CTD_SOCK" content fetch --plain-http "$REG/$REPO:v1" > "$RUN/rpull.log" 2>&1 || sgz_fail "content fetch"
"$CTR_REMOTE" --address "$CTD_SOCK" image convert --estargz --oci "$REG/$REPO:v1" "$ESGZ" > "$RUN/rpull.log" 2>&1 || sgz_fail "image convert --estargz"
"$CTR_REMOTE" --address "$CTD_SOCK" image push --plain-http "$ESGZ" > "$RUN/rpull.log" 2>&1 || sgz_fail "image push"
sgz_stop
CONVERT_S=$(elapsed "$t0" "$(now)")
ESGZ_BYTES=$(manifest_field v1-esgz "sum(l['size'] for l in m['layers'])")
ESGZ_TOCS=$(manifest_field v1-esgz "sum('containerd.io/snapshot/stargz/toc.digest' in l.get('annotations', {}) for l in m['layers'])")
NLAYERS=$(wc -w <<< "$LAYERS")
[[ $ESGZ_TOCS == "$NLAYERS" ]] || { echo "stargz_bench: $ESGZ has $ESGZ_TOCS eStargz layers of $NLAYERS" >&2; exit 1; }

# modelfs: the volume image of the same gzip modelcar (convert reads the image once).
VREF=""
CONVERT_MFS_S=n/a
if [[ $WITH_MODELFS != 0 ]]; then
  t0=$(now)
  DOCKER_CONFIG="$DOCKER_CONFIG" "$MODELFS" convert --plain-http --json "$REG/$REPO:v1" > "$WORK/convert.json" 2> "$WORK/convert.log" ||
    { echo "stargz_bench: modelfs convert of $REG/$REPO:v1 failed:" >&2; tail -20 "$WORK/convert.log" >&2; exit 1; }
  CONVERT_MFS_S=$(elapsed "$t0" "$(now)")
  VREF=$REG/$REPO@$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['volume']['digest'])" "$WORK/convert.json")
fi

set_settle "$SIZE_MIB"
for run in $(seq "$RUNS"); do
  echo "run $run/$RUNS ($(elapsed "$RUN_START" "$(now)") s in) ..." >&2
  for l in $(loaders); do
    measure_init "$l"
    for c in $STARGZ_CONFIGS; do measure_stargz "$c" "$l"; done
    [[ $WITH_MODELFS == 0 ]] || measure_modelfs "$l"
  done
done

# --- the table ---------------------------------------------------------------------------------
f2() { calc "f'{a:.2f}'" "$1" | tr -d "'"; }
row() { printf '| %-30s | %-27s | %8s | %8s | %8s | %7s | %6s | %9s | %10s | %5s | %10s | %10s | %9s | %4s |\n' "$@"; }
cfg_name() {
  case $1 in
    default) echo "stargz, default" ;;
    no_bg) echo "stargz, no_background_fetch" ;;
    modelfs) echo "modelfs, gzip modelcar V" ;;
  esac
}
CONFIGS="$STARGZ_CONFIGS"
[[ $WITH_MODELFS == 0 ]] || CONFIGS="$CONFIGS modelfs"
echo
echo "### stargz 0.14.3 beside an init container: a $(human "$TOTAL") llama-shaped BF16 model in $NFILES files" \
  "(shards of $SHARD_MIB MiB) under /models of a modelcar; registry on loopback (disk); medians of $RUNS, $(nproc) cores"
echo "load average: $LOAD_AT_START at start ($([[ -z $FORCED ]] && echo "quiet, not forced" || echo FORCED))," \
  "$(cut -d' ' -f1 /proc/loadavg) at the end; drop_caches before every measure: $([[ $DROP_OK == 1 ]] && echo yes || echo NOT permitted)," \
  "then touch and free $SETTLE_MIB MiB (SETTLE_MIB)"
[[ -z $FORCED ]] || echo "** $FORCED **"
echo "layers: gzip (buildah) $(human "$GZ_BYTES"), eStargz (ctr-remote convert, $CONVERT_S s) $(human "$ESGZ_BYTES");" \
  "containerd $("$CTD_DIR/containerd" --version | awk '{print $3}'), $("$SGZ_DIR/containerd-stargz-grpc" -version 2>&1 | head -1)," \
  "$(buildah --version | head -1), kernel $(uname -r)"
[[ $WITH_MODELFS == 0 ]] || echo "modelfs: \`modelfs convert\` of the gzip modelcar into its volume image took $CONVERT_MFS_S s; modelfs $("$MODELFS" --version 2> /dev/null | head -1)"
echo
row load path "ready s" "load s" "last s" "vs init" CPU-s CPU-s/GiB registry reqs cache inflated "peak RSS" FUSE
row --- --- --- --- --- --- --- --- --- --- --- --- --- ---
for l in $(loaders); do
  name=$([[ $l == read ]] && echo "one reader (read), cold" || echo "TP = ${l#tp} (mmap slices), cold")
  il=$(med "init:last:$l")
  row "$name" "init container" "$(med "init:ready:$l")" "$(med "init:load:$l")" "$il" "" "" "" \
    "$(human "$(med "init:wire:$l")")" "$(calc 'int(a)' "$(med "init:reqs:$l")")" "" "" "" ""
  for c in $CONFIGS; do
    k="$c:$l"
    cpu=$(med "$k:cpu")
    row "$name" "$(cfg_name "$c")" "$(med "$k:ready")" "$(med "$k:load")" "$(med "$k:last")" \
      "$(sratio "$il" "$(med "$k:last")")" "$(f2 "$cpu")" "$(f2 "$(calc 'a / b' "$cpu" "$GIB")")" \
      "$(human "$(med "$k:wire")")" "$(calc 'int(a)' "$(med "$k:reqs")")" "$(human "$(med "$k:cache")")" \
      "$(human "$(med "$k:fscache")")" \
      "$(human "$(med "$k:rss")")" "$(calc 'int(a)' "$(med "$k:fuse")")"
  done
done
[[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }
echo
echo "ready: from the start until models/ lists (init: every layer downloaded, hashed and untarred; stargz:"
echo "ctr-remote image rpull + ctr images mount; modelfs: modelfs mount of V). load: the loader over models/ after that (TP: until the last"
echo "rank is done). last = ready + load. vs init: init container / the path (above 1.00x the path is faster)."
echo "CPU-s: containerd-stargz-grpc's (modelfs: the mount's) utime + stime over the measure (the loader's and containerd's not counted);"
echo "registry: response bytes and requests in the registry's access log during the measure (background fetches"
echo "still in flight at the end not counted); cache: du -x of the daemon's root after the load, of which inflated:"
echo "its fscache (the chunks inflated; the rest is mostly httpcache, the compressed ranges fetched); peak RSS:"
echo "the daemon's VmHWM; FUSE: mounts under its root (one per layer). Took $(elapsed "$RUN_START" "$(now)") s; load average after:" \
  "$(cut -d' ' -f1-3 /proc/loadavg)."
