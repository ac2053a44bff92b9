#!/usr/bin/env bash
# modelcar_bench.sh: a KServe modelcar (an ordinary image with the model under /models, issue
# 30) reaching a pod three ways, measured in one run on one machine, once per layer compression.
#
# The modelcar is built by Debian's buildah as KServe's Dockerfile would build it: `from
# scratch`, a small base layer (busybox-static and a symlink to it), then the model under
# /models by `buildah copy` in a second layer. The model is `modelfs-synth safetensors` (bf16,
# several shards, config.json). It is pushed to a docker-registry on loopback (access log on)
# once per COMPRESSIONS entry, each to its own repository, and `modelfs convert` writes its
# volume image V. Per compression, loader and run (page cache dropped before each measure):
#   (a) containerd  a fresh containerd 2.1.4 (the release in ../shared/tools, extracted into
#                   BUILD_DIR/third_party as the e2e harness does) with CRI and its overlayfs
#                   snapshotter: CRI PullImage (download, check, unpack), then a View of the
#                   image's chain ID mounted (`modelfs-cri-client view-mount`), first byte of
#                   the first shard, then the loader over models/
#   (b) modelfs     `modelfs mount` of V on an empty cache (not the pod path through
#                   modelfs-snapshotter: the mount is what serves a pod's image volume), first
#                   byte, then the loader over models/; the mount process's CPU, the bytes the
#                   registry sent and the mount's counters. Then warm: V mounted again on the
#                   filled cache, caches dropped, the loader timed. And cold again with the
#                   mount's process pinned to each of MOUNT_CORES cores (taskset)
#   (c) init        `skopeo copy docker://... oci:DIR` (skopeo checks every blob's digest), then
#                   each layer in order `tar -xzf` or `zstd -d | tar -x`, first byte, loader
#   (d) snapshotter a fresh modelfs-snapshotter as containerd 2.1.4's proxy snapshotter (as
#                   docs/install.md configures a node): CRI PullImage of V (`volume`, a pod's
#                   image volume) or of the modelcar itself (`lazy`, its repository in
#                   lazy_images), a View of the image mounted, first byte, loader
#   local disk      the loader over (c)'s unpacked models/
#   ready           `modelfs mount` on an empty cache until the mountpoint lists, then 4 MiB at
#                   a random offset of the largest shard: the bytes that read fetched
# Nothing is asserted. Times are medians of RUNS.
#
# Usage: bench/modelcar_bench.sh BUILD_DIR
#   env: SIZE_MIB=2048 RUNS=3 COMPRESSIONS="gzip zstd" (also zstd:chunked; FORMAT/LEVEL such as
#        gzip/9 for buildah push --compression-level) LOADERS="read mmap"
#        MOUNT_CORES="1" (extra cold loads with the mount pinned to that many cores; "" for none)
#        NODE_PATHS="volume lazy" (the (d) paths below; "" for none)
#        SHARD_MIB (default SIZE_MIB/4) WORK=/tmp FREE_X=10 (free disk wanted, x the model) SETTLE_MIB (lib.sh) FORCE=1 (run above load
#        average 0.5) MODELFS_CONTAINERD21_TARBALL (default ../shared/tools beside the source)
#   Quick check: SIZE_MIB=64 RUNS=1 FORCE=1 bench/modelcar_bench.sh build
# The build needs targets modelfs modelfs-synth modelfs-load modelfs-cri-client
# modelfs-snapshotter. Needs root
# (FUSE, overlay mounts, drop_caches), docker-registry, buildah, skopeo, busybox (static),
# curl, openssl, gzip, zstd, tar, python3.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
fi
BUILD=$(realpath "$1")
SRCDIR=$(cd "$(dirname "$0")/.." && pwd)
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
CRICLIENT=$(realpath "$BUILD/testsupport/cri/modelfs-cri-client")
SNAPSHOTTER=$(realpath "$BUILD/cmd/modelfs-snapshotter")
SIZE_MIB=${SIZE_MIB:-2048}
SHARD_MIB=${SHARD_MIB:-$(( SIZE_MIB / 4 > 0 ? SIZE_MIB / 4 : 1 ))}
RUNS=${RUNS:-3}
COMPRESSIONS=${COMPRESSIONS:-"gzip zstd"}
LOADERS=${LOADERS:-"read mmap"}
# Extra cold loads with the mount's process pinned to each of these core counts (at most nproc):
# how the span decompression scales with cores.
MOUNT_CORES=${MOUNT_CORES-1}
# The node's paths through modelfs-snapshotter (containerd 2.1.4, CRI pull, then a View):
# `volume` pulls V (a pod's image volume of V), `lazy` the modelcar itself with its repository
# in lazy_images.
NODE_PATHS=${NODE_PATHS-"volume lazy"}
# The containerd 2.1.4 release and its pinned SHA-256 (testsupport/harness/containerd_release.h).
CTD_TARBALL=${MODELFS_CONTAINERD21_TARBALL:-$SRCDIR/../shared/tools/containerd-2.1.4-linux-amd64.tar.xz}
CTD_SHA256=12ecd7a0218944e837f137fcc299c9e82e64c8f90f8b741481226289c7c6bf5a
CTD_DIR=$BUILD/third_party/containerd-2.1.4
BUSYBOX=/bin/busybox  # Debian's busybox-static
require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_exec "$CRICLIENT" "build target modelfs-cri-client"
[[ -z $NODE_PATHS ]] || require_exec "$SNAPSHOTTER" "build target modelfs-snapshotter"
require_exec "$BUSYBOX" "package busybox-static"
require_tools docker-registry buildah skopeo curl openssl gzip zstd tar mountpoint fusermount3 "$PY"
[[ $(id -u) == 0 ]] || { echo "modelcar_bench: needs root (FUSE, overlay mounts, drop_caches)" >&2; exit 2; }
for p in $NODE_PATHS; do
  [[ $p == volume || $p == lazy ]] || { echo "NODE_PATHS: $p is not volume or lazy" >&2; exit 2; }
done
for n in $MOUNT_CORES; do
  [[ $n =~ ^[1-9][0-9]*$ && $n -le $(nproc) ]] || { echo "MOUNT_CORES: $n is not a core count from 1 to $(nproc)" >&2; exit 2; }
done
# A compression is FORMAT or FORMAT/LEVEL (buildah push --compression-level), e.g. gzip/9.
declare -A FMT LEVEL
for c in $COMPRESSIONS; do
  FMT[$c]=${c%%/*}
  LEVEL[$c]=""
  [[ $c != */* ]] || LEVEL[$c]=${c#*/}
  case ${FMT[$c]} in gzip | zstd | zstd:chunked) ;; *) echo "unknown compression $c (want gzip zstd zstd:chunked, optionally /LEVEL)" >&2; exit 2 ;; esac
  [[ ${LEVEL[$c]} =~ ^[0-9]*$ ]] || { echo "bad compression level in $c" >&2; exit 2; }
done
require_quiet modelcar_bench
RUN_START=$(now)

WORK=$(mktemp -d "${WORK:-/tmp}/modelcar-bench.XXXXXX")
# buildah's vfs storage holds full copies of the model while the modelcar is built: about 4x
# the model at its peak (the files, the container's copy, the committed layer, the pushed blob),
# and every measure's copies after. FREE_X lowers the margin for a run that measures less
# (seek_windows_bench.sh: the ready measure only).
if (( $(df --output=avail -k "$WORK" | tail -1) < SIZE_MIB * 1024 * ${FREE_X:-10} )); then
  echo "modelcar_bench: $WORK has less than ${FREE_X:-10}x the model ($SIZE_MIB MiB) free; set WORK or FREE_X" >&2
  rmdir "$WORK"
  exit 2
fi
# skopeo and buildah: no credentials of the host (buildah wants the file to exist)
export DOCKER_CONFIG="$WORK/no-docker-config"
mkdir -p "$DOCKER_CONFIG"
echo '{}' > "$DOCKER_CONFIG/config.json"
CTD_PID=""
CTD_RUN=""
SNAP_PID=""
MOUNTS=()
cleanup() {
  local m
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2> /dev/null || fusermount3 -u -z "$m" || true; fi
  done
  ctd_stop || true
  stop_registry
  umount_under "$WORK"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# CPU seconds (user + system) of a process, its threads and the children it has reaped.
cpu_with_reaped() {
  sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($12 + $13 + $14 + $15) / hz}'
}
# CPU seconds of the commands this shell has run and reaped so far (skopeo, tar, zstd, ...).
shell_children_cpu() {
  sed 's/.*) //' "/proc/$$/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($14 + $15) / hz}'
}
load() {  # load MODE DIR: the loader over every regular file under DIR, sorted
  local mode=$1 got files
  mapfile -t files < <(find "$2" -type f | sort)
  "$LOAD" --mode "$mode" --json "${files[@]}" > "$WORK/load.json"
  got=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load.json")
  [[ $got == "$TOTAL" ]] || echo "warning: a load of $2 read $got bytes, the model has $TOTAL" >&2
}
first_byte() { head -c 1 "$1/$FIRST_SHARD" > /dev/null; }
# wire_bytes REPO OFFSET: response bytes of the registry's access log lines for /v2/REPO/ after
# byte OFFSET of the log (blobs and manifests; ranges count what they carried).
wire_bytes() {
  "$PY" - "$REG_LOG" "$2" "$1" << 'PY'
import re, sys
with open(sys.argv[1], 'rb') as f:
    f.seek(int(sys.argv[2]))
    text = f.read().decode('utf-8', 'replace')
pat = re.compile(r'"[A-Z]+ /v2/' + re.escape(sys.argv[3]) + r'/\S* HTTP/[0-9.]+" \d{3} (\d+)')
print(sum(int(m.group(1)) for m in pat.finditer(text)))
PY
}
stat_json() { "$MODELFS" stats "$1" --json; }
# settled MNT FIELD: the mount's counter once it stops moving (background fetches finish).
settled() {
  local a b
  a=$(fresh_stat "$1" "$2")
  for _ in $(seq 20); do
    b=$(fresh_stat "$1" "$2")
    [[ $a == "$b" ]] && break
    a=$b
  done
  echo "$a"
}

# --- containerd 2.1.4 --------------------------------------------------------------------------
# The release, extracted once into the build tree (as testsupport/harness/containerd_release.cc
# does: checked against its pinned digest, staged, stamped last, renamed into place).
ctd_release() {
  [[ -f $CTD_TARBALL ]] || { echo "containerd 2.1.4 release not found at $CTD_TARBALL (MODELFS_CONTAINERD21_TARBALL)" >&2; exit 2; }
  local got staging
  got=$(sha256sum "$CTD_TARBALL" | cut -d' ' -f1)
  [[ $got == "$CTD_SHA256" ]] || { echo "$CTD_TARBALL has sha256:$got, want sha256:$CTD_SHA256" >&2; exit 1; }
  [[ $(cat "$CTD_DIR/.sha256" 2> /dev/null) == "$CTD_SHA256" ]] && return 0
  staging="$CTD_DIR.tmp-$$"
  rm -rf "$staging"
  mkdir -p "$staging"
  tar -xJf "$CTD_TARBALL" -C "$staging"
  for b in containerd ctr containerd-shim-runc-v2; do
    [[ -x $staging/$b ]] || { echo "$CTD_TARBALL has no top-level $b" >&2; rm -rf "$staging"; exit 1; }
  done
  printf '%s' "$CTD_SHA256" > "$staging/.sha256"
  rm -rf "$CTD_DIR"
  mv "$staging" "$CTD_DIR"
}
# ctd_start [modelfs [LAZY_REPO]]: a fresh containerd (its own root, state and socket under
# WORK) with CRI, pulling through the overlayfs snapshotter, config laid out as
# testsupport/harness/containerd_fixture.cc writes it for 2.x. With `modelfs`, first a fresh
# modelfs-snapshotter (root under the same directory) as containerd's proxy snapshotter for CRI
# images and image volumes, as docs/install.md configures a node; with LAZY_REPO in its
# lazy_images. Sets CTD_PID, CTD_RUN, CTD_SOCK (and SNAP_PID).
ctd_start() {
  local snap=${1:-overlayfs} lazy=${2:-}
  CTD_RUN=$(mktemp -d "$WORK/containerd.XXXXXX")
  CTD_SOCK=$CTD_RUN/containerd.sock
  local d=$CTD_RUN proxy="" unpack_overlay=""
  mkdir -p "$d/certs.d/$REG" "$d/cni/bin" "$d/cni/conf"
  printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$REG" "$REG" > "$d/certs.d/$REG/hosts.toml"
  if [[ $snap == modelfs ]]; then
    local lazy_toml=""
    [[ -z $lazy ]] || lazy_toml="\"$lazy\""
    cat > "$d/snapshotter.toml" << TOML
insecure_hosts = ["$REG"]
docker_config = "$d/no-docker-config.json"
lazy_images = [$lazy_toml]
TOML
    "$SNAPSHOTTER" --config "$d/snapshotter.toml" --root "$d/snap-root" --address "$d/snap.sock" \
      --hosts-dir "$d/certs.d" > "$d/snapshotter.log" 2>&1 &
    SNAP_PID=$!
    for _ in $(seq 600); do [[ -S $d/snap.sock ]] && break; kill -0 "$SNAP_PID" 2> /dev/null || break; sleep 0.05; done
    [[ -S $d/snap.sock ]] || { echo "modelfs-snapshotter did not start:" >&2; tail -30 "$d/snapshotter.log" >&2; exit 1; }
    proxy="[proxy_plugins.modelfs]
  type = \"snapshot\"
  address = \"$d/snap.sock\"
  [proxy_plugins.modelfs.exports]
    enable_remote_snapshot_annotations = \"true\""
    unpack_overlay="[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]
  platform = \"linux\"
  snapshotter = \"overlayfs\""
  fi
  cat > "$d/config.toml" << TOML
version = 3
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "$CTD_SOCK"
[ttrpc]
  address = "$CTD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
$proxy
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "$snap"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "registry.invalid/pause:3.10"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$d/certs.d"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    snapshotter = "$snap"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$d/cni/bin"]
    conf_dir = "$d/cni/conf"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux"
  snapshotter = "$snap"
$unpack_overlay
TOML
  PATH="$CTD_DIR:$PATH" "$CTD_DIR/containerd" --config "$d/config.toml" > "$d/containerd.log" 2>&1 &
  CTD_PID=$!
  for _ in $(seq 600); do
    # CRI is three plugins in 2.x: the gRPC service, images and runtime
    if [[ $("$CTD_DIR/ctr" --address "$CTD_SOCK" plugins ls 2> /dev/null |
      awk '($1 == "io.containerd.grpc.v1" && $2 == "cri") || ($1 == "io.containerd.cri.v1" && ($2 == "images" || $2 == "runtime")) {print $NF}' |
      grep -cx ok) == 3 ]]; then
      return 0
    fi
    kill -0 "$CTD_PID" 2> /dev/null || break
    sleep 0.05
  done
  echo "containerd 2.1.4 did not come up:" >&2
  tail -30 "$d/containerd.log" >&2
  exit 1
}
ctd_stop() {
  [[ -n $CTD_RUN ]] || return 0
  umount_under "$CTD_RUN/mnt"
  stop_pid "$CTD_PID"
  CTD_PID=""
  stop_pid "$SNAP_PID"
  SNAP_PID=""
  umount_under "$CTD_RUN"
  rm -rf "$CTD_RUN"
  CTD_RUN=""
}

# --- the modelcar, pushed once per compression ----------------------------------------------
ctd_release
SRC=$WORK/model
"$SYNTH" safetensors "$SRC" --mib "$SIZE_MIB" --shard-mib "$SHARD_MIB" > /dev/null
TOTAL=$(find "$SRC" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
NFILES=$(find "$SRC" -type f | wc -l)
FIRST_SHARD=$(cd "$SRC" && find . -name '*.safetensors' | sort | head -1 | sed 's|^\./||')
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
# chain_id CONFIG_JSON: the chain ID of an image config's diff_ids (what containerd names the
# top snapshot).
chain_id() {
  "$PY" - "$1" << 'PY'
import hashlib, json, sys
chain = None
for d in json.loads(sys.argv[1])['rootfs']['diff_ids']:
    chain = d if chain is None else 'sha256:' + hashlib.sha256(f'{chain} {d}'.encode()).hexdigest()
print(chain)
PY
}
declare -A VCHAIN
declare -A REPO VREF WIRE LTYPES CHAIN VWHOLE
# Each compression is pushed through a registry of its own (a new port) on the one store:
# buildah 1.28 (containers/image 5.23) would otherwise mount the blobs it pushed in another
# compression to this registry instead of the ones asked for (its blob info cache knows them
# by registry). The bench's registry serves the store afterwards.
for c in $COMPRESSIONS; do
  n=${c//[:\/]/-}
  REPO[$c]=bench/modelcar-$n
  start_registry "$WORK/push-$n" --storage "$WORK/store"
  buildah_ push -q --tls-verify=false --compression-format "${FMT[$c]}" ${LEVEL[$c]:+--compression-level "${LEVEL[$c]}"} \
    modelcar "docker://$REG/${REPO[$c]}:v1" > /dev/null
  stop_registry
done
start_registry "$WORK/registry" --storage "$WORK/store" --accesslog
for c in $COMPRESSIONS; do
  n=${c//[:\/]/-}
  manifest=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REG/v2/${REPO[$c]}/manifests/v1")
  config=$(curl -fs "http://$REG/v2/${REPO[$c]}/blobs/$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['config']['digest'])" "$manifest")")
  WIRE[$c]=$("$PY" -c "import json,sys; print(sum(l['size'] for l in json.loads(sys.argv[1])['layers']))" "$manifest")
  LTYPES[$c]=$("$PY" -c "import json,sys; print(' '.join(sorted({l['mediaType'] for l in json.loads(sys.argv[1])['layers']})))" "$manifest")
  # buildah must have written what was asked for, not blobs of another compression it knew.
  want=gzip
  [[ ${FMT[$c]} == gzip ]] || want=zstd
  [[ ${LTYPES[$c]} == "application/vnd.oci.image.layer.v1.tar+$want" ]] ||
    { echo "buildah pushed $c as ${LTYPES[$c]}" >&2; exit 1; }
  CHAIN[$c]=$(chain_id "$config")
  "$MODELFS" convert --plain-http --json "$REG/${REPO[$c]}:v1" > "$WORK/convert-$n.json" 2> "$WORK/convert.log" ||
    { echo "modelfs convert of the $c modelcar failed:" >&2; cat "$WORK/convert.log" >&2; exit 1; }
  VREF[$c]=$REG/${REPO[$c]}@$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['volume']['digest'])" "$WORK/convert-$n.json")
  vmanifest=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/${REPO[$c]}/manifests/${VREF[$c]#*@}")
  VCHAIN[$c]=$(chain_id "$(curl -fs "http://$REG/v2/${REPO[$c]}/blobs/$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['config']['digest'])" "$vmanifest")")")
  VWHOLE[$c]=$("$PY" -c "import json,sys; print(len(json.load(open(sys.argv[1])).get('verified_whole', [])))" "$WORK/convert-$n.json")
done
rm -rf "$WORK/buildah" "$SRC" "$BASE"

# --- measures ----------------------------------------------------------------------------------
# (a) containerd 2.1.4's CRI pull through overlayfs, then the read.
measure_containerd() {
  local mode=$1 t0 t1 t2 t3 cpu0 off tgt
  ctd_start overlayfs
  tgt=$CTD_RUN/mnt
  mkdir -p "$tgt"
  off=$(log_size "$REG_LOG")
  drop_caches
  cpu0=$(cpu_with_reaped "$CTD_PID")
  t0=$(now)
  "$CRICLIENT" --address "$CTD_SOCK" pull "$REG/${REPO[$C]}:v1" > /dev/null ||
    { echo "CRI pull of the $C modelcar failed:" >&2; tail -30 "$CTD_RUN/containerd.log" >&2; exit 1; }
  t1=$(now)
  add "$K|a_cpu:$mode" "$(calc 'a - b' "$(cpu_with_reaped "$CTD_PID")" "$cpu0")"
  "$CRICLIENT" --address "$CTD_SOCK" --snapshotter overlayfs view-mount bench-view "${CHAIN[$C]}" "$tgt" > /dev/null
  ls "$tgt/models" > /dev/null
  add "$K|a_ready:$mode" "$(elapsed "$t0" "$(now)")"
  first_byte "$tgt/models"
  t2=$(now)
  load "$mode" "$tgt/models"
  t3=$(now)
  add "$K|a_unpack:$mode" "$(elapsed "$t0" "$t1")"
  add "$K|a_first:$mode" "$(elapsed "$t0" "$t2")"
  add "$K|a_last:$mode" "$(elapsed "$t0" "$t3")"
  add "$K|a_wire:$mode" "$(wire_bytes "${REPO[$C]}" "$off")"
  ctd_stop
}

# (d) the node's path through modelfs-snapshotter: a fresh snapshotter and containerd 2.1.4,
# CRI PullImage of V (`volume`: a pod's image volume of V) or of the modelcar itself (`lazy`:
# its repository in lazy_images, V found by the referrers tag), then a View of the image's
# chain ID mounted (as containerd mounts an image volume), the first byte, the loader over
# models/. CPU: the snapshotter (with its children) and containerd.
measure_node() {
  local path=$1 mode=$2 t0 t1 t2 t3 t4 c0 s0 off tgt image chain k
  k="$K|d_$path"
  if [[ $path == volume ]]; then
    image=${VREF[$C]}; chain=${VCHAIN[$C]}
    ctd_start modelfs
  else
    image=$REG/${REPO[$C]}:v1; chain=${CHAIN[$C]}
    ctd_start modelfs "$REG/${REPO[$C]}"
  fi
  tgt=$CTD_RUN/mnt
  mkdir -p "$tgt"
  off=$(log_size "$REG_LOG")
  drop_caches
  c0=$(cpu_with_reaped "$CTD_PID")
  s0=$(cpu_with_reaped "$SNAP_PID")
  t0=$(now)
  "$CRICLIENT" --address "$CTD_SOCK" pull "$image" > /dev/null ||
    { echo "CRI pull of $image through modelfs-snapshotter failed:" >&2; tail -30 "$CTD_RUN/containerd.log" "$CTD_RUN/snapshotter.log" >&2; exit 1; }
  t1=$(now)
  "$CRICLIENT" --address "$CTD_SOCK" --snapshotter modelfs view-mount bench-view "$chain" "$tgt" > /dev/null ||
    { echo "View of $image through modelfs-snapshotter failed:" >&2; tail -30 "$CTD_RUN/snapshotter.log" >&2; exit 1; }
  ls "$tgt/models" > /dev/null
  t2=$(now)
  # The snapshotter must be serving the view from a FUSE mount of the model, not an unpack.
  if ! awk -v d="$CTD_RUN/" 'index($5, d) == 1 && $0 ~ / - fuse/' /proc/self/mountinfo | grep -q .; then
    echo "warning: (d) $path: no FUSE mount of modelfs-snapshotter's under the view; it was unpacked" >&2
  fi
  first_byte "$tgt/models"
  t3=$(now)
  load "$mode" "$tgt/models"
  t4=$(now)
  add "$k|pull:$mode" "$(elapsed "$t0" "$t1")"
  add "$k|ready:$mode" "$(elapsed "$t0" "$t2")"
  add "$k|first:$mode" "$(elapsed "$t0" "$t3")"
  add "$k|last:$mode" "$(elapsed "$t0" "$t4")"
  add "$k|cpu:$mode" "$(calc 'a + b - c - d' "$(cpu_with_reaped "$SNAP_PID")" "$(cpu_with_reaped "$CTD_PID")" "$s0" "$c0")"
  add "$k|wire:$mode" "$(wire_bytes "${REPO[$C]}" "$off")"
  "$CRICLIENT" umount "$tgt" > /dev/null 2>&1 || true
  ctd_stop
}

# mount_v CACHE MNT [CORES]: mounts V (its process on the first CORES cores only, if given);
# sets MOUNT_PID.
mount_v() {
  local out pin=()
  mkdir -p "$2"
  [[ -z ${3:-} ]] || pin=(taskset -c "0-$(( $3 - 1 ))")
  out=$("${pin[@]}" "$MODELFS" mount --plain-http --cache "$1" --log "$WORK/mount.log" "${VREF[$C]}" "$2")
  MOUNTS+=("$2")
  MOUNT_PID=$(mount_pid <<< "$out")
  [[ -n "$MOUNT_PID" ]] || MOUNT_PID=$(stat_field "$2" pid)
}
# (b) modelfs cold (empty cache), then warm (the filled cache, caches dropped). With CORES,
# only the cold load, the mount's process pinned to that many cores (keys b1_, b2_, ...).
measure_modelfs() {
  local mode=$1 cores=${2:-} cache=$WORK/cache mnt=$WORK/mnt t0 t1 t2 off b=b
  [[ -z $cores ]] || b=b$cores
  rm -rf "$cache"
  off=$(log_size "$REG_LOG")
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt" "$cores"
  ls "$mnt/models" > /dev/null
  add "$K|${b}_ready:$mode" "$(elapsed "$t0" "$(now)")"
  first_byte "$mnt/models"
  t1=$(now)
  load "$mode" "$mnt/models"
  t2=$(now)
  add "$K|${b}_cpu:$mode" "$(cpu_seconds "$MOUNT_PID")"
  add "$K|${b}_first:$mode" "$(elapsed "$t0" "$t1")"
  add "$K|${b}_last:$mode" "$(elapsed "$t0" "$t2")"
  add "$K|${b}_fetched:$mode" "$(settled "$mnt" bytes_fetched)"
  add "$K|${b}_wire:$mode" "$(wire_bytes "${REPO[$C]}" "$off")"
  umount_wait "$mnt" "$MOUNT_PID"
  if [[ -n $cores ]]; then
    rm -rf "$cache"
    return
  fi
  mount_v "$cache" "$mnt"
  ls "$mnt/models" > /dev/null
  drop_caches
  t0=$(now)
  load "$mode" "$mnt/models"
  t1=$(now)
  add "$K|warm:$mode" "$(elapsed "$t0" "$t1")"
  add "$K|pt_opens:$mode" "$(fresh_stat "$mnt" passthrough_opens)"
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

# (c) the init container: skopeo copy (digests checked), unpack each layer in order, read;
# then the same files as local disk.
measure_init() {
  local mode=$1 dir=$WORK/oci root=$WORK/rootfs t0 t1 t2 t3 cpu0 off d mt
  rm -rf "$dir" "$root"
  mkdir -p "$root"
  off=$(log_size "$REG_LOG")
  drop_caches
  cpu0=$(shell_children_cpu)
  t0=$(now)
  skopeo "${SKOPEO_GLOBAL[@]}" copy -q --src-tls-verify=false --src-no-creds \
    "docker://$REG/${REPO[$C]}:v1" "oci:$dir" > "$WORK/skopeo.log" 2>&1 ||
    { echo "skopeo copy failed:" >&2; cat "$WORK/skopeo.log" >&2; exit 1; }
  while read -r mt d; do
    case $mt in
      *tar+gzip) tar -xzf "$dir/blobs/sha256/${d#sha256:}" -C "$root" ;;
      *tar+zstd) zstd -d -q -c "$dir/blobs/sha256/${d#sha256:}" | tar -x -C "$root" ;;
      *) tar -xf "$dir/blobs/sha256/${d#sha256:}" -C "$root" ;;
    esac
  done < <("$PY" - "$dir" << 'PY'
import json, sys
d = sys.argv[1]
index = json.load(open(f'{d}/index.json'))
m = index['manifests'][0]['digest'].split(':', 1)[1]
for l in json.load(open(f'{d}/blobs/sha256/{m}'))['layers']:
    print(l['mediaType'], l['digest'])
PY
)
  t1=$(now)
  add "$K|c_cpu:$mode" "$(calc 'a - b' "$(shell_children_cpu)" "$cpu0")"
  first_byte "$root/models"
  t2=$(now)
  load "$mode" "$root/models"
  t3=$(now)
  add "$K|c_unpack:$mode" "$(elapsed "$t0" "$t1")"
  add "$K|c_first:$mode" "$(elapsed "$t0" "$t2")"
  add "$K|c_last:$mode" "$(elapsed "$t0" "$t3")"
  add "$K|c_wire:$mode" "$(wire_bytes "${REPO[$C]}" "$off")"
  rm -rf "$dir"
  drop_caches
  t0=$(now)
  load "$mode" "$root/models"
  t1=$(now)
  add "$K|disk:$mode" "$(elapsed "$t0" "$t1")"
  rm -rf "$root"
}

# ready, and what a 4 MiB read at a random offset of the largest shard fetched.
measure_ready() {
  local cache=$WORK/cache-ready mnt=$WORK/mnt t0 t1 b0 c0 largest size off
  rm -rf "$cache"
  drop_caches
  t0=$(now)
  mount_v "$cache" "$mnt"
  ls "$mnt/models" > /dev/null
  t1=$(now)
  add "$K|ready" "$(elapsed "$t0" "$t1")"
  b0=$(settled "$mnt" bytes_fetched)
  c0=$(settled "$mnt" compressed_bytes_fetched)
  add "$K|ready_fetched" "$b0"
  largest=$(find "$mnt/models" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  size=$(stat -c %s "$largest")
  off=$(( (RANDOM * 32768 + RANDOM) % (size / 4096 - 1024) * 4096 ))
  dd if="$largest" of=/dev/null bs=4M count=1 iflag=skip_bytes skip="$off" status=none
  add "$K|rand_fetched" "$(( $(settled "$mnt" bytes_fetched) - b0 ))"
  add "$K|rand_compressed" "$(( $(settled "$mnt" compressed_bytes_fetched) - c0 ))"
  SERVING[$C]=$(stat_json "$mnt" | "$PY" -c "
import collections, json, sys
layers = json.load(sys.stdin)['layers']
modes = layers.values() if isinstance(layers, dict) else [l if isinstance(l, str) else l.get('serving', str(l)) for l in layers]
print(', '.join(f'{n} {m}' for m, n in sorted(collections.Counter(modes).items())))")
  umount_wait "$mnt" "$MOUNT_PID"
  rm -rf "$cache"
}

# The node's limits with the layers in the page cache: one core's SHA-256 (openssl) and
# decompression (gzip -d with zlib, zstd -d), in s/GiB of model.
measure_limits() {
  local dir=$WORK/limits t0 t1 blob
  rm -rf "$dir"
  skopeo "${SKOPEO_GLOBAL[@]}" copy -q --src-tls-verify=false --src-no-creds \
    "docker://$REG/${REPO[$C]}:v1" "oci:$dir" > "$WORK/skopeo.log" 2>&1
  blob=$(find "$dir/blobs/sha256" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  cat "$blob" > /dev/null
  t0=$(now); openssl dgst -sha256 "$blob" > /dev/null; t1=$(now)
  add "$K|sha_s" "$(elapsed "$t0" "$t1")"
  t0=$(now)
  case ${FMT[$C]} in gzip) LIMIT_OUT[$C]=$(gzip -d -c < "$blob" | wc -c) ;; *) LIMIT_OUT[$C]=$(zstd -d -q -c < "$blob" | wc -c) ;; esac
  t1=$(now)
  add "$K|inflate_s" "$(elapsed "$t0" "$t1")"
  LIMIT_BLOB[$C]=$(stat -c %s "$blob")
  rm -rf "$dir"
}

SKOPEO_GLOBAL=()
[[ -f /etc/containers/policy.json ]] || SKOPEO_GLOBAL=(--insecure-policy)
set_settle "$SIZE_MIB"
declare -A SERVING LIMIT_BLOB LIMIT_OUT
for run in $(seq "$RUNS"); do
  for C in $COMPRESSIONS; do
    K=$C
    for mode in $LOADERS; do
      measure_containerd "$mode"
      measure_modelfs "$mode"
      for n in $MOUNT_CORES; do measure_modelfs "$mode" "$n"; done
      for p in $NODE_PATHS; do measure_node "$p" "$mode"; done
      measure_init "$mode"
    done
    measure_ready
    [[ $run != 1 ]] || measure_limits
  done
done

# --- tables ------------------------------------------------------------------------------------
ver() { "$@" 2>&1 | head -1; }
echo
echo "# modelcar_bench: a KServe modelcar of $(human "$TOTAL") ($NFILES files under /models: bf16 safetensors in $SHARD_MIB MiB shards, config.json, ...), medians of $RUNS, $(nproc) cores"
echo "load average: $LOAD_AT_START at start, $(cut -d' ' -f1 /proc/loadavg) at the end; the run took $(elapsed "$RUN_START" "$(now)") s;" \
  "drop_caches before every measure, then touch and free $SETTLE_MIB MiB (SETTLE_MIB; balloon free page reporting: $(balloon_reporting))"
[[ -z $FORCED ]] || echo "** $FORCED **"
echo "versions: $(ver "$MODELFS" --version)$([[ -z $NODE_PATHS ]] || echo ", $(ver "$SNAPSHOTTER" --version)"); containerd $("$CTD_DIR/containerd" --version | awk '{print $3}');" \
  "$(ver buildah --version); $(ver skopeo --version); docker-registry $(docker-registry --version 2>&1 | awk '{print $NF}');" \
  "$(ver gzip --version); $(ver zstd --version); $(ver tar --version); $(ver openssl version); kernel $(uname -r)"
for C in $COMPRESSIONS; do
  K=$C
  echo
  echo "## $C (${LTYPES[$C]##*.}): $(human "${WIRE[$C]}") of layers ($(calc 'round(a / b, 3)' "${WIRE[$C]}" "$TOTAL") of the model); V: ${SERVING[$C]:-?}" \
    "(${VWHOLE[$C]} verified whole by convert); ready $(med "$K|ready") s after fetching $(human "$(med "$K|ready_fetched")"); then a 4 MiB random read fetched $(human "$(med "$K|rand_compressed")") compressed" \
    "($(human "$(med "$K|rand_fetched")") bytes_fetched)"
  echo "one core, layers in page cache: openssl sha256 $(calc 'round(a / b * 1073741824, 2)' "$(med "$K|sha_s")" "${LIMIT_BLOB[$C]}") s/GiB of layer;" \
    "$([[ ${FMT[$C]} == gzip ]] && echo 'gzip -d (zlib)' || echo 'zstd -d') $(calc 'round(a / b * 1073741824, 2)' "$(med "$K|inflate_s")" "${LIMIT_OUT[$C]}") s/GiB of output"
  echo
  printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
    path loader wire "ready s" "1st byte" "last byte" CPU-s CPU-s/GiB cores "vs (a)" "vs (c)"
  printf '|%s|\n' "------------------------------------|--------|------------|-----------|-----------|-----------|--------|-----------|--------|---------|---------"
  for mode in $LOADERS; do
    al=$(med "$K|a_last:$mode"); cl=$(med "$K|c_last:$mode"); bl=$(med "$K|b_last:$mode")
    ac=$(med "$K|a_cpu:$mode"); bc=$(med "$K|b_cpu:$mode"); cc=$(med "$K|c_cpu:$mode")
    au=$(med "$K|a_unpack:$mode"); cu=$(med "$K|c_unpack:$mode")
    printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
      "(a) containerd 2.1.4 overlayfs" "$mode" "$(human "$(med "$K|a_wire:$mode")")" "$(med "$K|a_ready:$mode")" "$(med "$K|a_first:$mode")" "$al" \
      "$ac" "$(calc 'round(a / b, 2)' "$ac" "$GIB")" "$(calc 'round(a / b, 2)' "$ac" "$au")" - -
    printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
      "(b) modelfs cold" "$mode" "$(human "$(med "$K|b_wire:$mode")")" "$(med "$K|b_ready:$mode")" "$(med "$K|b_first:$mode")" "$bl" \
      "$bc" "$(calc 'round(a / b, 2)' "$bc" "$GIB")" "$(calc 'round(a / b, 2)' "$bc" "$bl")" "$(sratio "$al" "$bl")" "$(sratio "$cl" "$bl")"
    for n in $MOUNT_CORES; do
      nl=$(med "$K|b${n}_last:$mode"); nc=$(med "$K|b${n}_cpu:$mode")
      printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
        "(b) modelfs cold, mount on $n core$([[ $n == 1 ]] || echo s)" "$mode" "$(human "$(med "$K|b${n}_wire:$mode")")" "$(med "$K|b${n}_ready:$mode")" "$(med "$K|b${n}_first:$mode")" "$nl" \
        "$nc" "$(calc 'round(a / b, 2)' "$nc" "$GIB")" "$(calc 'round(a / b, 2)' "$nc" "$nl")" "$(sratio "$al" "$nl")" "$(sratio "$cl" "$nl")"
    done
    for p in $NODE_PATHS; do
      k="$K|d_$p"
      nl=$(med "$k|last:$mode"); nc=$(med "$k|cpu:$mode")
      printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
        "(d) snapshotter, $([[ $p == volume ]] && echo 'image volume of V' || echo 'lazy_images')" "$mode" "$(human "$(med "$k|wire:$mode")")" \
        "$(med "$k|ready:$mode")" "$(med "$k|first:$mode")" "$nl" \
        "$nc" "$(calc 'round(a / b, 2)' "$nc" "$GIB")" "$(calc 'round(a / b, 2)' "$nc" "$nl")" "$(sratio "$al" "$nl")" "$(sratio "$cl" "$nl")"
    done
    printf '| %-34s | %-6s | %10s | %9s | %9s | %9s | %6s | %9s | %6s | %7s | %7s |\n' \
      "(c) skopeo copy + tar -x" "$mode" "$(human "$(med "$K|c_wire:$mode")")" "$cu" "$(med "$K|c_first:$mode")" "$cl" \
      "$cc" "$(calc 'round(a / b, 2)' "$cc" "$GIB")" "$(calc 'round(a / b, 2)' "$cc" "$cu")" - -
  done
  echo
  printf '| %-6s | %8s | %8s | %12s | %17s |\n' loader "warm s" "disk s" "warm vs disk" "passthrough opens"
  printf '|%s|\n' "--------|----------|----------|--------------|-------------------"
  for mode in $LOADERS; do
    w=$(med "$K|warm:$mode"); d=$(med "$K|disk:$mode")
    printf '| %-6s | %8s | %8s | %12s | %17s |\n' "$mode" "$w" "$d" "$(sratio "$d" "$w")" "$(calc 'int(a)' "$(med "$K|pt_opens:$mode")")"
  done
  [[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }
done
echo
echo "wire: response bytes in the registry's access log for the path's repository (manifests included)."
echo "ready / 1st byte / last byte: seconds from the start (CRI PullImage, modelfs mount, skopeo copy) until models/"
echo "lists (after the unpack for (a) and (c)), until one byte of the first shard, and until the loader has read every"
echo "file under models/; no cache drop in between."
echo "CPU-s: (a) containerd (with what it reaped) over the pull and unpack; (b) the modelfs mount process over the"
echo "whole cold load (fetch, verify, span decompression, serving); (c) skopeo, tar, gzip/zstd. The loader's own"
echo "CPU is not counted. cores = CPU-s / the wall time it was spent in (the pull, the copy and untar; for (b), (d) the last byte)."
echo "vs (a), vs (c): their last byte / modelfs cold's (above 1.00x modelfs is faster); warm vs disk = disk / warm."
[[ -z $NODE_PATHS ]] || echo "(d): a fresh modelfs-snapshotter and containerd 2.1.4, CRI PullImage of V (image volume) or of the modelcar (lazy_images), a View of the image mounted as an image volume is; CPU-s: the snapshotter's and containerd's."
[[ -z $MOUNT_CORES ]] || echo "modelfs cold on N cores: the mount's process pinned (taskset) to N of the $(nproc) cores, the loader not."
