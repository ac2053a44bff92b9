#!/usr/bin/env bash
# node_ls_bench.sh: how long `modelfs node ls` (text and --json) takes on a node holding MODELS
# models and MODELS x (SNAPS + 1) snapshots (default 50 and 500: 50 model snapshots and 450
# containers' root filesystems on top), against a modelfs-snapshotter and a docker-registry on
# loopback. The models are registered as containerd's pull would register them (the remote
# Prepare of each volume layer), so no weight byte is fetched. Prints median, min and max of
# RUNS calls of each, beside the same call of `modelfs node ls` on an empty daemon measured in
# the same run (the baseline: the CLI's and the socket's fixed cost). Goal (issue 45): under
# 100 ms. Needs root (FUSE), docker-registry, python3, and a quiet machine (FORCE=1 otherwise).
#
# Usage: bench/node_ls_bench.sh [BUILD_DIR]   env: MODELS=50 SNAPS=9 RUNS=21 WORK=/tmp/...
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
require_quiet node_ls_bench

BUILD=${1:-build}
MODELFS=$(realpath "$BUILD/cmd/modelfs")
DAEMON=$(realpath "$BUILD/cmd/modelfs-snapshotter")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
POPULATE=$(realpath "$BUILD/bench/modelfs-node-populate")
MODELS=${MODELS:-50}
SNAPS=${SNAPS:-9}
RUNS=${RUNS:-21}
WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-node-ls-bench-XXXXXX")
REG_PID=""
DAEMON_PID=""
export DOCKER_CONFIG="$WORK/no-docker-config"
require_tools docker-registry curl
for f in "$MODELFS" "$DAEMON" "$SYNTH" "$POPULATE"; do
  require_exec "$f" "build targets modelfs modelfs-snapshotter modelfs-synth modelfs-node-populate"
done

cleanup() {
  stop_pid "${DAEMON_PID:-}"
  umount -l "$WORK/root/mnt" 2> /dev/null || true
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT

start_daemon() {  # start_daemon NAME: a daemon with its own root and sockets under $WORK/NAME
  local d=$WORK/$1
  mkdir -p "$d"
  cat > "$d/snapshotter.toml" <<TOML
root = "$d/root"
address = "$d/snapshotter.sock"
admin_socket = "$d/admin.sock"
insecure_hosts = ["$REG"]
containerd_address = ""
docker_config = "$WORK/no-docker-config.json"
[cache]
prefetch = "none"
TOML
  "$DAEMON" --config "$d/snapshotter.toml" > "$d/log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 200); do
    [[ -S $d/admin.sock && -S $d/snapshotter.sock ]] && return 0
    sleep 0.05
  done
  echo "modelfs-snapshotter did not start:" >&2
  cat "$d/log" >&2
  exit 1
}

# time_ls CONFIG ARGS...: RUNS calls, one time per line (seconds)
time_ls() {
  local config=$1 t0 t1
  shift
  for _ in $(seq "$RUNS"); do
    t0=$(now)
    "$MODELFS" node ls --config "$config" "$@" > /dev/null
    t1=$(now)
    elapsed "$t0" "$t1"
  done
}
stats() {  # stats TIMES...: "median min max" in ms
  "$PY" -c "import sys,statistics; v=[float(x)*1000 for x in sys.argv[1:]]
print(f'{statistics.median(v):8.1f} {min(v):8.1f} {max(v):8.1f}')" "$@"
}

start_registry "$WORK/registry"
"$SYNTH" safetensors "$WORK/model" --mib 1 > /dev/null
echo "pushing $MODELS models to $REG ..." >&2
for i in $(seq 0 $((MODELS - 1))); do
  echo "model $i" > "$WORK/model/README.md"
  "$MODELFS" push --plain-http "$REG/bench/m-$i:v1" "$WORK/model" > /dev/null
done

start_daemon empty
EMPTY_CONFIG=$WORK/empty/snapshotter.toml
read -r -a base_text <<< "$(stats $(time_ls "$EMPTY_CONFIG"))"
read -r -a base_json <<< "$(stats $(time_ls "$EMPTY_CONFIG" --json))"
stop_pid "$DAEMON_PID"
umount -l "$WORK/empty/root/mnt" 2> /dev/null || true

start_daemon full
FULL_CONFIG=$WORK/full/snapshotter.toml
"$POPULATE" "$WORK/full/snapshotter.sock" "$REG" bench/m "$MODELS" "$SNAPS" >&2
got=$("$MODELFS" node ls --config "$FULL_CONFIG" --json | "$PY" -c "import json,sys
d=json.load(sys.stdin); print(len(d['models']), sum(len(m['snapshots']) for m in d['models']))")
read -r -a full_text <<< "$(stats $(time_ls "$FULL_CONFIG"))"
read -r -a full_json <<< "$(stats $(time_ls "$FULL_CONFIG" --json))"
stop_pid "$DAEMON_PID"
umount -l "$WORK/full/root/mnt" 2> /dev/null || true
DAEMON_PID=""

echo
echo "modelfs node ls: $got (models, snapshots listed), $RUNS runs each; times in ms"
load_line
printf '%-34s %8s %8s %8s\n' "" median min max
printf '%-34s %8s %8s %8s\n' "empty daemon, text (baseline)" "${base_text[@]}"
printf '%-34s %8s %8s %8s\n' "empty daemon, --json (baseline)" "${base_json[@]}"
printf '%-34s %8s %8s %8s\n' "$MODELS models, text" "${full_text[@]}"
printf '%-34s %8s %8s %8s\n' "$MODELS models, --json" "${full_json[@]}"
[[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }
