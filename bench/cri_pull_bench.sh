#!/usr/bin/env bash
# cri_pull_bench.sh: time from a CRI PullImage to the first readable byte of the model's first
# weight file, as a kubelet + containerd 1.6 + runtime would see it, for
#   modelfs   the volume image V (`modelfs push`) pulled through CRI into the modelfs proxy
#             snapshotter: containerd hands V's layer to modelfs-snapshotter, which resolves the
#             model M, mounts it lazily; Prepare + mount + read of the first byte
#   overlay   a plain OCI image holding the same files as one ordinary tar layer, pulled through
#             CRI into containerd's overlayfs snapshotter (download + unpack), Prepare + mount + read
# Each run starts a fresh containerd (and a fresh snapshotter root) so every pull is cold; the
# page cache is dropped before each run. Times are medians of RUNS runs; ratio = overlay/modelfs
# (above 1.0: modelfs is faster). "fetched" is the sum of response bytes in the registry's access
# log for the run's repository (blobs, manifests). Needs root, /dev/fuse, containerd 1.6 + ctr,
# docker-registry, python3.
#
# Usage: bench/cri_pull_bench.sh [BUILD_DIR]   env: SIZES="2048 8192" (MiB) RUNS=3 WORK=/tmp
#        MODELFS_SNAPSHOTTER_BIN=<path> (default BUILD_DIR/cmd/modelfs-snapshotter)
# The build needs targets: modelfs modelfs-synth modelfs-snapshotter modelfs-cri-client.
set -euo pipefail
# shellcheck source=bench/quiet.sh
source "$(dirname "$0")/quiet.sh"
require_quiet cri_pull_bench

BUILD=${1:-build}
SRCDIR=$(cd "$(dirname "$0")/.." && pwd)
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
SNAPSHOTTER=$(realpath "${MODELFS_SNAPSHOTTER_BIN:-$BUILD/cmd/modelfs-snapshotter}")
CRICLIENT=$(realpath "$BUILD/testsupport/cri/modelfs-cri-client")
SIZES=${SIZES:-"2048 8192"}
RUNS=${RUNS:-3}
WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-cri-bench-XXXXXX")
REG_PID=""
CTD_PID=""
SNAP_PID=""
RUNDIR=""
export DOCKER_CONFIG="$WORK/no-docker-config"

detach_under() {  # unmount everything at or below $1, deepest first
  [[ -n "$1" ]] || return 0
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print length($5) " " $5}' /proc/self/mountinfo |
    sort -rn | cut -d' ' -f2- | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
stop_pid() {  # stop_pid PID: SIGTERM, wait up to 20 s, then SIGKILL
  local p=$1
  [[ -n "$p" ]] || return 0
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 400); do kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || true; return 0; }; sleep 0.05; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
stop_run() {
  detach_under "$RUNDIR/mnt"
  stop_pid "$CTD_PID"; CTD_PID=""
  stop_pid "$SNAP_PID"; SNAP_PID=""
  detach_under "$RUNDIR"
  [[ -n "$RUNDIR" ]] && rm -rf "$RUNDIR"
  RUNDIR=""
}
cleanup() {
  stop_run || true
  stop_pid "$REG_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT

median() { python3 -c "import sys,statistics; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
ratio() { python3 -c "import sys; b,m=map(float,sys.argv[1:]); print(f'{b/m:.1f}x' if m>0 else 'n/a')" "$1" "$2"; }
human() { python3 -c "import sys; n=float(sys.argv[1]); u=['B','KiB','MiB','GiB']; i=0
while n>=1024 and i<3: n/=1024; i+=1
print(f'{n:.1f} {u[i]}')" "$1"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
# Response bytes for /v2/<repo>/ requests in the access log after byte offset $2.
fetched_bytes() {  # fetched_bytes REPO OFFSET
  tail -c +"$(($2 + 1))" "$WORK/registry/log" | python3 -c '
import re, sys
repo = sys.argv[1]
total = 0
for line in sys.stdin:
    m = re.search(r"\"[A-Z]+ /v2/" + re.escape(repo) + r"/\S* HTTP/[0-9.]+\" \d+ (\d+)", line)
    if m: total += int(m.group(1))
print(total)' "$1"
}
log_size() { stat -c %s "$WORK/registry/log"; }

# --- registry (access log on) -----------------------------------------------------------------
PORT=$(free_port)
REG="127.0.0.1:$PORT"
mkdir -p "$WORK/registry"
cat > "$WORK/registry/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $WORK/registry/storage
http:
  addr: $REG
YML
docker-registry serve "$WORK/registry/config.yml" > "$WORK/registry/log" 2>&1 &
REG_PID=$!
for _ in $(seq 200); do curl -fs "http://$REG/v2/" > /dev/null && break; sleep 0.05; done

# start_run SNAPSHOTTER(modelfs|overlayfs): fresh containerd (CRI on) [+ modelfs-snapshotter].
start_run() {
  RUNDIR=$(mktemp -d "$WORK/run-XXXXXX")
  mkdir -p "$RUNDIR/certs.d/$REG" "$RUNDIR/cni/bin" "$RUNDIR/cni/conf" "$RUNDIR/mnt/target"
  cat > "$RUNDIR/certs.d/$REG/hosts.toml" <<TOML
server = "http://$REG"
[host."http://$REG"]
  capabilities = ["pull", "resolve"]
TOML
  local proxy=""
  if [[ "$1" == modelfs ]]; then
    cat > "$RUNDIR/snapshotter.toml" <<TOML
insecure_hosts = ["$REG"]
docker_config = "$RUNDIR/no-docker-config.json"
[cache]
prefetch = "none"
TOML
    "$SNAPSHOTTER" --config "$RUNDIR/snapshotter.toml" --root "$RUNDIR/snap-root" \
      --address "$RUNDIR/snap.sock" --hosts-dir "$RUNDIR/certs.d" > "$RUNDIR/snapshotter.log" 2>&1 &
    SNAP_PID=$!
    for _ in $(seq 600); do [[ -S "$RUNDIR/snap.sock" ]] && break; sleep 0.05; done
    [[ -S "$RUNDIR/snap.sock" ]] || { cat "$RUNDIR/snapshotter.log" >&2; exit 1; }
    proxy="[proxy_plugins.modelfs]
  type = \"snapshot\"
  address = \"$RUNDIR/snap.sock\""
  fi
  cat > "$RUNDIR/containerd.toml" <<TOML
version = 2
root = "$RUNDIR/root"
state = "$RUNDIR/state"
[grpc]
  address = "$RUNDIR/containerd.sock"
[ttrpc]
  address = "$RUNDIR/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$RUNDIR/opt"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  sandbox_image = "registry.invalid/pause:3.6"
  disable_cgroup = true
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$1"
    disable_snapshot_annotations = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$RUNDIR/cni/bin"
    conf_dir = "$RUNDIR/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$RUNDIR/certs.d"
$proxy
TOML
  containerd --config "$RUNDIR/containerd.toml" > "$RUNDIR/containerd.log" 2>&1 &
  CTD_PID=$!
  for _ in $(seq 600); do
    ctr --address "$RUNDIR/containerd.sock" plugins ls 2>/dev/null | grep -q 'cri.*ok' && return 0
    sleep 0.05
  done
  cat "$RUNDIR/containerd.log" >&2
  exit 1
}

# one_run SNAPSHOTTER IMAGE PARENT FILE: sets RUN_PULL and RUN_FIRST (seconds from the start of
# PullImage). Not in a subshell, so a failure exits through the cleanup trap.
one_run() {
  start_run "$1"
  drop_caches
  local out
  out=$("$CRICLIENT" --address "$RUNDIR/containerd.sock" --snapshotter "$1" \
    pull-read "$2" "$3" bench-rw "$RUNDIR/mnt/target" "$4") || {
    echo "pull-read failed ($1 $2)" >&2
    [[ -f "$RUNDIR/snapshotter.log" ]] && tail -50 "$RUNDIR/snapshotter.log" >&2
    tail -30 "$RUNDIR/containerd.log" >&2
    exit 1
  }
  RUN_PULL=$(python3 -c "import sys,json; print(json.loads(sys.argv[1])['pull'])" "$out")
  RUN_FIRST=$(python3 -c "import sys,json; print(json.loads(sys.argv[1])['first_byte'])" "$out")
  stop_run
}

load_line
printf '%-8s %-9s %12s %12s %14s %10s\n' "model" "path" "pull (s)" "1st byte (s)" "fetched" "ratio"
for MIB in $SIZES; do
  SRC="$WORK/src-$MIB"
  "$SYNTH" safetensors "$SRC" --mib "$MIB" > /dev/null
  FIRST=$(cd "$SRC" && ls *.safetensors | sort | head -1)
  # V via modelfs push; its chain ID is its config's only diff ID.
  PUSH=$("$MODELFS" push --plain-http "$REG/bench/m$MIB:v1" "$SRC" --json)
  VCONF=$(python3 -c "import sys,json; print([b['digest'] for b in json.loads(sys.argv[1])['blobs'] if b['role']=='volume config'][0])" "$PUSH")
  VCHAIN=$(curl -fs "http://$REG/v2/bench/m$MIB/blobs/$VCONF" | python3 -c "import sys,json; print(json.load(sys.stdin)['rootfs']['diff_ids'][0])")
  # The same files as one ordinary layer in another repository.
  PLAIN=$(python3 "$SRCDIR/bench/oci_dir_image.py" "$REG" "bench/plain$MIB" v1 "$SRC")
  PCHAIN=$(python3 -c "import sys,json; print(json.loads(sys.argv[1])['chain_id'])" "$PLAIN")
  rm -rf "$SRC"

  for variant in modelfs overlay; do
    pulls=(); firsts=(); fetched=""
    for r in $(seq "$RUNS"); do
      if [[ $variant == modelfs ]]; then
        off=$(log_size)
        one_run modelfs "$REG/bench/m$MIB:v1-volume" "$VCHAIN" "$FIRST"
        fetched=$(fetched_bytes "bench/m$MIB" "$off")
      else
        off=$(log_size)
        one_run overlayfs "$REG/bench/plain$MIB:v1" "$PCHAIN" "$FIRST"
        fetched=$(fetched_bytes "bench/plain$MIB" "$off")
      fi
      pulls+=("$RUN_PULL"); firsts+=("$RUN_FIRST")
    done
    P=$(median "${pulls[@]}"); F=$(median "${firsts[@]}")
    if [[ $variant == modelfs ]]; then M_FIRST=$F; R=""; else R=$(ratio "$F" "$M_FIRST"); fi
    printf '%-8s %-9s %12s %12s %14s %10s\n' "${MIB}MiB" "$variant" "$P" "$F" "$(human "$fetched")" "$R"
  done
done
