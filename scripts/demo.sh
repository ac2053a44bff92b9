#!/usr/bin/env bash
# The main job, as a Kubernetes node does it, end to end on loopback:
#   a local docker-registry; a generated model pushed as a ModelPack artifact M plus volume
#   image V; the modelfs-snapshotter daemon; a containerd 1.6 with modelfs as its proxy
#   snapshotter and the CRI plugin using it; a CRI PullImage of V (what kubelet does for an
#   image volume); then the image-volume step, Prepare(key, parent = V's chain ID) mounted
#   and read back: .modelinfo.json printed, a weight file verified against the source.
# Installs what it needs (install-deps.sh --demo) and builds the four binaries it runs first.
# Everything runs in a temporary directory
# and is stopped (by PID) and unmounted at the end.
# Usage: scripts/demo.sh [--mib N]   (size of the generated model, default 64)
# As root, or as a user with sudo: it needs root (containerd, FUSE and overlay mounts), and
# re-runs itself under sudo when started as another user. The output is a few lines per step;
# apt's, npm's and the build's go to log files, named on the way.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "demo: run as root (containerd, FUSE and overlay mounts)" >&2; exit 2; }
  echo "demo: not root; re-running under sudo"
  exec sudo env BUILD_DIR="${BUILD_DIR:-build}" "$PWD/scripts/demo.sh" "$@"
fi
MIB=64
[ "${1:-}" = "--mib" ] && MIB=${2:?}

echo "== installing what is missing (scripts/install-deps.sh --demo)"
./scripts/install-deps.sh --demo
BUILD_LOG=/tmp/modelfs-demo-build.log
# Only the four binaries the demo runs; scripts/test.sh builds the rest (tests, fuzzers, benches).
echo "== building modelfs, modelfs-snapshotter, modelfs-synth, modelfs-cri-client into ${BUILD_DIR:-build} (log: $BUILD_LOG)"
if ! TARGETS="modelfs modelfs-snapshotter modelfs-synth modelfs-cri-client" ./scripts/build.sh >"$BUILD_LOG" 2>&1; then
  echo "demo: the build failed; the end of $BUILD_LOG:" >&2
  tail -n 30 "$BUILD_LOG" >&2
  exit 1
fi
BIN=$PWD/${BUILD_DIR:-build}
MODELFS=$BIN/cmd/modelfs
SNAPSHOTTER=$BIN/cmd/modelfs-snapshotter
SYNTH=$BIN/bench/modelfs-synth
CRI=$BIN/testsupport/cri/modelfs-cri-client

WORK=$(mktemp -d /tmp/modelfs-demo.XXXXXX)
PIDS=()
cleanup() {
  set +e
  # Unmount what we and containerd mounted (deepest first), then stop the daemons by PID.
  for m in $(awk -v d="$WORK" '$5 == d || index($5, d "/") == 1 {print length($5), $5}' \
      /proc/self/mountinfo | sort -rn | cut -d' ' -f2); do
    umount -l "$m" 2>/dev/null
  done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill "${PIDS[$i]}" 2>/dev/null && wait "${PIDS[$i]}" 2>/dev/null
  done
  for m in $(awk -v d="$WORK" 'index($5, d "/") == 1 {print $5}' /proc/self/mountinfo); do
    umount -l "$m" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 300); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "demo: timed out: $1" >&2; exit 1; }

PORT=$(free_port)
cat > "$WORK/registry.yml" <<YML
version: 0.1
log: {level: error, accesslog: {disabled: false}}
storage: {filesystem: {rootdirectory: $WORK/registry}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$PORT}
YML
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
PIDS+=($!)
wait_for "curl -fsS http://127.0.0.1:$PORT/v2/"
echo "== registry on 127.0.0.1:$PORT"

echo "== generating a ${MIB} MiB llama-shaped model"
"$SYNTH" safetensors "$WORK/model" --mib "$MIB"
"$SYNTH" tiny-gguf "$WORK/model/tiny-q8.gguf"

REF=127.0.0.1:$PORT/demo/llama:v1
echo "== modelfs push $REF (writes M, and V as $REF-volume)"
"$MODELFS" push --plain-http "$REF" "$WORK/model"

echo "== modelfs-snapshotter (root $WORK/modelfs)"
MPORT=$(free_port)
cat > "$WORK/snapshotter.toml" <<TOML
root = "$WORK/modelfs"
address = "$WORK/modelfs.sock"
insecure_hosts = ["127.0.0.1:$PORT"]
metrics_address = "127.0.0.1:$MPORT"
TOML
"$SNAPSHOTTER" --config "$WORK/snapshotter.toml" 2>"$WORK/snapshotter.log" &
PIDS+=($!)
wait_for "test -S $WORK/modelfs.sock"

echo "== containerd $(containerd --version | awk '{print $3}') with proxy snapshotter modelfs and CRI"
mkdir -p "$WORK/certs.d/127.0.0.1:$PORT" "$WORK/cni/bin" "$WORK/cni/conf"
cat > "$WORK/certs.d/127.0.0.1:$PORT/hosts.toml" <<TOML
server = "http://127.0.0.1:$PORT"
[host."http://127.0.0.1:$PORT"]
  capabilities = ["pull", "resolve"]
TOML
cat > "$WORK/containerd.toml" <<TOML
version = 2
root = "$WORK/containerd/root"
state = "$WORK/containerd/state"
[grpc]
  address = "$WORK/containerd.sock"
[ttrpc]
  address = "$WORK/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$WORK/containerd/opt"
[proxy_plugins.modelfs]
  type = "snapshot"
  address = "$WORK/modelfs.sock"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_cgroup = true
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "modelfs"
    disable_snapshot_annotations = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$WORK/cni/bin"
    conf_dir = "$WORK/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$WORK/certs.d"
TOML
containerd --config "$WORK/containerd.toml" >"$WORK/containerd.log" 2>&1 &
PIDS+=($!)
wait_for "ctr --address $WORK/containerd.sock plugins ls | grep -E 'grpc.v1 +cri .* ok'"

C=("$CRI" --address "$WORK/containerd.sock" --namespace k8s.io --snapshotter modelfs)
echo "== CRI PullImage $REF-volume (what kubelet does for an image volume)"
"${C[@]}" pull "$REF-volume"
# V has one uncompressed layer, so its chain ID is that layer's digest.
CHAIN=$(curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://127.0.0.1:$PORT/v2/demo/llama/manifests/v1-volume" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
"${C[@]}" stat "$CHAIN"

echo "== image volume: Prepare(demo-volume, parent $CHAIN), mounted at $WORK/volume"
mkdir -p "$WORK/volume"
"${C[@]}" prepare-mount demo-volume "$CHAIN" "$WORK/volume"
ls -la "$WORK/volume"
echo "== $WORK/volume/.modelinfo.json"
cat "$WORK/volume/.modelinfo.json"
echo
echo "== reading model.safetensors through the volume and comparing with the source"
a=$(sha256sum < "$WORK/volume/model.safetensors" | cut -d' ' -f1)
b=$(sha256sum < "$WORK/model/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] && echo "verified: sha256:$a" || { echo "MISMATCH: $a != $b"; exit 1; }
echo "== registry blob traffic by client (containerd fetched V's config; modelfs read the rest by Range)"
python3 - "$WORK/registry.log" <<'PY'
import re, sys, collections
totals = collections.defaultdict(lambda: [0, 0])
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r'"GET /v2/\S+/blobs/\S+ HTTP/[0-9.]+" (\d+) (\d+) "[^"]*" "([^"/ ]+)', line)
    if m:
        t = totals[(m.group(3), m.group(1))]
        t[0] += 1
        t[1] += int(m.group(2))
for (agent, status), (n, b) in sorted(totals.items()):
    print(f"  {agent:<12} HTTP {status}: {n:3d} requests, {b:>12,} bytes")
PY
echo "== modelfs-snapshotter metrics"
curl -fsS "http://127.0.0.1:$MPORT/metrics" | grep -E '^modelfs_(bytes_fetched_total|active_models|remote_prepares_total|cache_(hits|misses)_total)'
