#!/usr/bin/env bash
# rollout_bench.sh: many nodes, one origin. A model rollout starts the same model on N
# nodes at once; each node mounts V (`modelfs mount`, its own cache) and reads every file in
# full (bench/modelfs-load --mode read). Measured three ways for each N, in one run:
#   no mirror     the nodes read from the origin registry;
#   mirror cold   a pull-through cache (a second docker-registry, `proxy: remoteurl:` = the
#                 origin, empty) is named as a mirror in the nodes' hosts.toml;
#   mirror warm   the same, once the cache holds the model (the cold run filled it).
# Topology (bench/netns.sh): the origin, the mirror and every node each in a network namespace
# of its own, linked through this host's namespace (IP forwarding on for the run), every link
# shaped with tc tbf: the origin's at ORIGIN_RATE (an origin across a WAN), the mirror's at
# MIRROR_RATE (a cache in the cluster), each node's at NODE_RATE. NETNS=0 runs everything on
# loopback instead, unshaped.
# Bytes are counted from the registries' access logs (Distribution logs each response's size):
# the origin's blob bytes (to the mirror and to modelfs) per model byte, the mirror's blob bytes,
# and the mirror's blob answers by status. Wall time is from the first mount's start until the
# last node has read everything (unmounts are not counted). Every node must read exactly the
# model's bytes (modelfs verifies each chunk against the manifest's digests, so a wrong byte is
# an EIO, never a byte read).
# The nodes share this machine's cores (2 here): with N nodes the rollout is CPU-bound, and wall
# times grow with N for that reason alone. Nothing is asserted: the script only prints.
#
# Usage: bench/rollout_bench.sh BUILD_DIR [BASELINE_BUILD_DIR]
#   env: SIZE_MIB=1024 NODES="1 4 8" ORIGIN_RATE=2gbit MIRROR_RATE=10gbit NODE_RATE=10gbit
#        NETNS=1 WORK=/tmp KEEP= (set: keep WORK, with the registries' and mounts' logs)
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load. With a baseline
#   build dir (its cmd/modelfs), every row is measured with both, baseline first.
#   Quick check: SIZE_MIB=256 NODES="1 2" bench/rollout_bench.sh build
# Needs root (FUSE, network namespaces, drop_caches), docker-registry, iproute2 (ip, tc),
# nsenter (util-linux), curl, python3, and about (NODES max + 3) x SIZE_MIB free under WORK.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
require_quiet rollout_bench
# shellcheck source=bench/netns.sh
source "$(dirname "$0")/netns.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,30p' "$0" >&2
  exit 2
fi
BUILD=$1
BASE_BUILD=${2:-}
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
LOAD=$(realpath "$BUILD/bench/modelfs-load")
SIZE_MIB=${SIZE_MIB:-1024}
NODES=${NODES:-"1 4 8"}
ORIGIN_RATE=${ORIGIN_RATE:-2gbit}
MIRROR_RATE=${MIRROR_RATE:-10gbit}
NODE_RATE=${NODE_RATE:-10gbit}
NETNS=${NETNS:-1}

require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
BINARIES=("$MODELFS")
LABELS=("this build")
if [[ -n $BASE_BUILD ]]; then
  require_exec "$BASE_BUILD/cmd/modelfs" "baseline build's modelfs"
  BINARIES=("$(realpath "$BASE_BUILD/cmd/modelfs")" "$MODELFS")
  LABELS=("baseline" "this build")
fi
require_tools docker-registry curl python3 mountpoint fusermount3 sync
[[ $(id -u) == 0 ]] || { echo "rollout_bench.sh needs root" >&2; exit 2; }
if [[ $NETNS == 1 ]]; then require_tools ip tc nsenter flock; fi

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-rollout-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
NAMESPACES=()
SERVER_PIDS=()
MOUNTS=()
FORWARD0=""

cleanup() {
  local m p n
  for m in "${MOUNTS[@]}"; do
    if mountpoint -q "$m"; then "$MODELFS" umount "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for n in "${NAMESPACES[@]}"; do netns_destroy "$n"; done
  [[ -z $FORWARD0 ]] || echo "$FORWARD0" > /proc/sys/net/ipv4/ip_forward
  if [[ -n ${KEEP:-} ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

max_nodes=$(tr ' ' '\n' <<< "$NODES" | sort -n | tail -1)
need_mib=$(((max_nodes + 3) * SIZE_MIB))
have_mib=$(df --output=avail -BM "$WORK" | tail -1 | tr -dc 0-9)
if [[ $have_mib -lt $need_mib ]]; then
  echo "need about $need_mib MiB free under $WORK, have $have_mib MiB" >&2
  exit 2
fi

# --- topology ---------------------------------------------------------------------------------
# Each place (origin, mirror, node<i>) has an address ADDR[place] and runs commands through
# in_place PLACE CMD... (nsenter into its network namespace only, so FUSE mounts made there are
# seen by the whole machine).
declare -A ADDR NSNAME
make_place() {  # make_place PLACE RATE
  local place=$1 rate=$2 name host ns
  if [[ $NETNS != 1 ]]; then
    ADDR[$place]=127.0.0.1
    return
  fi
  name=$(netns_name "mfr-$place")
  read -r host ns < <(netns_create "$name" "$rate")
  NAMESPACES+=("$name")
  # The other places are reached through this host (forwarding between the veth pairs).
  ip -n "$name" route add "$NETNS_NET.0.0/16" via "$host"
  ADDR[$place]=$ns
  NSNAME[$place]=$name
}
in_place() {
  local place=$1
  shift
  if [[ $NETNS == 1 ]]; then
    nsenter --net="/run/netns/${NSNAME[$place]}" "$@"
  else
    "$@"
  fi
}

if [[ $NETNS == 1 ]]; then
  FORWARD0=$(cat /proc/sys/net/ipv4/ip_forward)
  echo 1 > /proc/sys/net/ipv4/ip_forward
fi
make_place origin "$ORIGIN_RATE"
make_place mirror "$MIRROR_RATE"
for i in $(seq 1 "$max_nodes"); do make_place "node$i" "$NODE_RATE"; done

# --- registries -------------------------------------------------------------------------------
# start_reg NAME PLACE PORT [REMOTE]: docker-registry with its access log in $WORK/NAME/log;
# sets REG_PIDS[NAME].
declare -A REG_PIDS
start_reg() {
  local name=$1 place=$2 port=$3 remote=${4:-} dir="$WORK/$1"
  mkdir -p "$dir"
  cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $dir/storage
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ${ADDR[$place]}:$port
EOF
  [[ -z $remote ]] || printf 'proxy:\n  remoteurl: %s\n' "$remote" >> "$dir/config.yml"
  # Not through in_place: $! must be the registry's own pid (nsenter execs it in place).
  if [[ $NETNS == 1 ]]; then
    nsenter --net="/run/netns/${NSNAME[$place]}" docker-registry serve "$dir/config.yml" \
      >> "$dir/log" 2>&1 &
  else
    docker-registry serve "$dir/config.yml" >> "$dir/log" 2>&1 &
  fi
  REG_PIDS[$name]=$!
  SERVER_PIDS+=("$!")
  for _ in $(seq 200); do
    curl -fs "http://${ADDR[$place]}:$port/v2/" > /dev/null && return 0
    sleep 0.05
  done
  echo "docker-registry $name did not start:" >&2
  cat "$dir/log" >&2
  exit 1
}
stop_reg() {
  local pid=${REG_PIDS[$1]:-}
  [[ -n $pid ]] || return 0
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  REG_PIDS[$1]=""
}

ORIGIN="${ADDR[origin]}:5000"
MIRROR="${ADDR[mirror]}:5001"
start_reg origin origin 5000
REF="$ORIGIN/bench/rollout:v1"

echo "# rollout bench: $SIZE_MIB MiB model, nodes: $NODES; $(nproc) cores" >&2
"$SYNTH" safetensors --mib "$SIZE_MIB" "$WORK/src" > /dev/null
"$MODELFS" push --plain-http "$REF" "$WORK/src" > /dev/null
TOTAL=$(find "$WORK/src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

# hosts.toml for the nodes: with and without the mirror.
mkdir -p "$WORK/hosts-mirror/$ORIGIN" "$WORK/hosts-none/$ORIGIN"
cat > "$WORK/hosts-mirror/$ORIGIN/hosts.toml" <<EOF
server = "http://$ORIGIN"
[host."http://$MIRROR"]
  capabilities = ["pull", "resolve"]
EOF
echo "server = \"http://$ORIGIN\"" > "$WORK/hosts-none/$ORIGIN/hosts.toml"

# Access-log accounting: the blob GETs logged after line FROM of a log.
log_lines() { wc -l < "$1"; }
# blob_stats LOG FROM: "BYTES COUNT200 COUNT206 COUNTOTHER" over GET/HEAD .../blobs/... lines.
blob_stats() {
  python3 - "$1" "$2" <<'EOF'
import re, sys
path, skip = sys.argv[1], int(sys.argv[2])
total = 0; ok = 0; part = 0; other = 0
pat = re.compile(r'"(GET|HEAD) /v2/[^ ]*/blobs/sha256:[0-9a-f]+[^ ]* HTTP/[0-9.]+" (\d+) (\d+|-)')
with open(path, errors="replace") as f:
    for n, line in enumerate(f):
        if n < skip:
            continue
        m = pat.search(line)
        if not m:
            continue
        status = int(m.group(2))
        total += int(m.group(3)) if m.group(3) != "-" else 0
        if status == 200: ok += 1
        elif status == 206: part += 1
        else: other += 1
print(total, ok, part, other)
EOF
}

# --- one rollout ------------------------------------------------------------------------------
# node_load BIN HOSTS I: mounts V on node I (its own cache, its namespace), reads every file,
# checks the byte count, unmounts. Writes "ok" or an error to $WORK/node$I.result.
node_load() {
  local bin=$1 hosts=$2 i=$3 mnt="$WORK/mnt$3" cache="$WORK/cache$3" out pid files got
  rm -rf "$cache"
  mkdir -p "$mnt"
  if ! out=$(in_place "node$i" "$bin" mount --plain-http --hosts-dir "$hosts" --cache "$cache" \
    --log "$WORK/mount$i.log" "$REF-volume" "$mnt" 2>&1); then
    echo "mount failed: $out" > "$WORK/node$i.result"
    return
  fi
  pid=$(MODELFS=$bin mount_pid <<< "$out")
  mapfile -t files < <(find "$mnt" -type f ! -name .modelinfo.json | sort)
  local ok=1
  "$LOAD" --mode read --json "${files[@]}" > "$WORK/load$i.json" 2> "$WORK/load$i.err" || ok=0
  now > "$WORK/node$i.end"  # the rollout's wall time ends here, not after the unmount
  if [[ $ok == 0 ]]; then
    echo "load failed: $(cat "$WORK/load$i.err")" > "$WORK/node$i.result"
  else
    got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$WORK/load$i.json")
    if [[ $got == "$TOTAL" ]]; then echo ok > "$WORK/node$i.result"; else
      echo "read $got bytes, want $TOTAL" > "$WORK/node$i.result"; fi
  fi
  MODELFS=$bin umount_wait "$mnt" "$pid"
  rm -rf "$cache"
}

# rollout BIN HOSTS N: N nodes at once; prints "WALL_S FAILURES".
rollout() {
  local bin=$1 hosts=$2 n=$3 i t0 t1 failures=0
  local pids=()
  rm -f "$WORK"/node*.end "$WORK"/node*.result
  drop_caches
  t0=$(now)
  for i in $(seq 1 "$n"); do
    node_load "$bin" "$hosts" "$i" &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  t1=$(python3 -c "import sys; print(max(float(open(f).read()) for f in sys.argv[1:]))" \
    "$WORK"/node*.end)
  for i in $(seq 1 "$n"); do
    if [[ $(cat "$WORK/node$i.result" 2>/dev/null) != ok ]]; then
      failures=$((failures + 1))
      echo "node $i: $(cat "$WORK/node$i.result" 2>/dev/null || echo 'no result')" >&2
      tail -5 "$WORK/mount$i.log" >&2 || true
    fi
  done
  echo "$(elapsed "$t0" "$t1") $failures"
}

mib() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1048576:,.0f}')" "$1"; }
per_model() { python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.2f}x')" "$1" "$TOTAL"; }

ROWS=()
# measure LABEL BIN N CASE: CASE is none, cold or warm.
measure() {
  local label=$1 bin=$2 n=$3 kase=$4 hosts o0 m0 res wall fails ob mb m200 m206 mother
  if [[ $kase == none ]]; then
    hosts="$WORK/hosts-none"
  else
    hosts="$WORK/hosts-mirror"
    if [[ $kase == cold ]]; then
      stop_reg mirror
      rm -rf "$WORK/mirror"
      start_reg mirror mirror 5001 "http://$ORIGIN"
    fi
  fi
  o0=$(log_lines "$WORK/origin/log")
  m0=0
  [[ $kase == none ]] || m0=$(log_lines "$WORK/mirror/log")
  res=$(rollout "$bin" "$hosts" "$n")
  read -r wall fails <<< "$res"
  if [[ $kase != none ]]; then
    # Distribution stores a missed blob in the background: let it finish before counting.
    sleep 2
  fi
  read -r ob _ _ _ < <(blob_stats "$WORK/origin/log" "$o0")
  if [[ $kase == none ]]; then
    mb="—"; m200="—"; m206="—"; mother="—"
  else
    read -r mb m200 m206 mother < <(blob_stats "$WORK/mirror/log" "$m0")
    mb="$(mib "$mb") MiB"
  fi
  ROWS+=("$(printf '| %s | %d | %s | %s MiB (%s) | %s | %s / %s / %s | %s s | %s |' \
    "$label" "$n" "$kase" "$(mib "$ob")" "$(per_model "$ob")" "$mb" "$m200" "$m206" "$mother" \
    "$wall" "$([[ $fails == 0 ]] && echo "all right" || echo "$fails FAILED")")")
  echo "${ROWS[-1]}" >&2
}

for n in $NODES; do
  for b in "${!BINARIES[@]}"; do
    measure "${LABELS[$b]}" "${BINARIES[$b]}" "$n" none
    measure "${LABELS[$b]}" "${BINARIES[$b]}" "$n" cold
    measure "${LABELS[$b]}" "${BINARIES[$b]}" "$n" warm
  done
done

echo
echo "Rollout of a $(mib "$TOTAL") MiB model (modelfs-synth safetensors, V) to N nodes at once;"
if [[ $NETNS == 1 ]]; then
  echo "origin link $ORIGIN_RATE, mirror link $MIRROR_RATE, node links $NODE_RATE (tc tbf, netns); $(nproc) cores shared by all."
else
  echo "loopback, unshaped; $(nproc) cores shared by all."
fi
load_line
echo "Mirror: docker-registry (Distribution $(docker-registry --version 2>/dev/null | awk '{print $3}')) with proxy.remoteurl = the origin; cold: empty, warm: filled by the cold run."
echo
echo "| build | N | mirror | origin served (per model byte) | mirror served | mirror blob answers 200 / 206 / other | wall | bytes read |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
