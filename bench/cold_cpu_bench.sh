#!/usr/bin/env bash
# cold_cpu_bench.sh: the mount's own CPU for a cold read of a raw model on loopback, for two
# builds measured in the same run: each run mounts the volume image on an empty cache with each
# binary in turn (the order swapped every run), reads every file once with LOADER, and takes
# the mount process's CPU (user + system, /proc) and its counters. Prints medians of RUNS:
# mount CPU-s per GiB, user and system apart, the load's wall time, the mount's peak RSS
# (VmHWM), and bytes_in_place / bytes_fetched (a build without the counter prints n/a). Nothing is asserted.
#
# Usage: BASE_BUILD=DIR bench/cold_cpu_bench.sh BUILD_DIR
#   BUILD_DIR needs cmd/modelfs, bench/modelfs-synth and bench/modelfs-load; BASE_BUILD only
#   cmd/modelfs (optional: without it only BUILD_DIR's binary is measured).
#   env: MIB=2048 RUNS=3 WORK=/tmp LOADER=read|mmap|cat (default read) CHUNK_DIGEST=blake3
#   PERF=DIR: `perf record -e cpu-clock -g` of the mount during each load, DIR/VARIANT-runN.data.
#   The load average must be at most 0.5 at the start (bench/quiet.sh); FORCE=1 runs anyway
#   and says so under the table.
# Needs root (FUSE, drop_caches), docker-registry, curl, python3.
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
MIB=${MIB:-2048}
RUNS=${RUNS:-3}
LOADER=${LOADER:-read}
CHUNK_DIGEST=${CHUNK_DIGEST:-blake3}
require_exec "$MODELFS" "build target modelfs"
require_exec "$SYNTH" "build target modelfs-synth"
require_exec "$LOAD" "build target modelfs-load"
require_tools docker-registry curl
require_quiet cold_cpu_bench
declare -A BIN=([new]=$MODELFS)
VARIANTS=(new)
if [[ -n ${BASE_BUILD:-} ]]; then
  BIN[base]=$(realpath "$BASE_BUILD/cmd/modelfs")
  require_exec "${BIN[base]}" "BASE_BUILD's modelfs"
  VARIANTS=(base new)
fi

WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-cold-cpu-XXXXXX")
MNT="$WORK/mnt"
cleanup() {
  if mountpoint -q "$MNT" 2> /dev/null; then "$MODELFS" umount "$MNT" || fusermount3 -u -z "$MNT" || true; fi
  stop_registry
  rm -rf "$WORK"
}
trap cleanup EXIT

start_registry "$WORK/reg"
REF="$REG/bench/cold$MIB:v1"
"$SYNTH" safetensors "$WORK/src" --mib "$MIB" > /dev/null
"$MODELFS" push --plain-http --chunk-digest "$CHUNK_DIGEST" "$REF" "$WORK/src" > /dev/null
TOTAL=$(du -sb "$WORK/src" | cut -f1)
rm -rf "$WORK/src"
HOSTS_DIR="$WORK/certs.d"
mkdir -p "$HOSTS_DIR/$REG"
printf 'server = "http://%s"\ncapabilities = ["pull", "resolve"]\n' "$REG" > "$HOSTS_DIR/$REG/hosts.toml"

# measure VARIANT: one cold mount + load with that variant's binary.
measure() {
  local bin=${BIN[$1]} out pid t0 t1 cpu user sys files
  rm -rf "$WORK/cache"
  mkdir -p "$MNT"
  drop_caches
  out=$("$bin" mount --plain-http --hosts-dir "$HOSTS_DIR" --cache "$WORK/cache" \
    --log "$WORK/mount.log" "$REF-volume" "$MNT")
  pid=$(mount_pid <<< "$out")
  MODELFS=$bin
  [[ -n $pid ]] || pid=$(stat_field "$MNT" pid)
  mapfile -t files < <(find "$MNT" -type f ! -name .modelinfo.json | sort)
  local perf_pid=""
  if [[ -n ${PERF:-} ]]; then
    mkdir -p "$PERF"
    perf record -q -e cpu-clock -g -p "$pid" -o "$PERF/$1-run$run.data" > /dev/null 2>&1 &
    perf_pid=$!
    sleep 0.5
  fi
  t0=$(now)
  case $LOADER in
    cat) cat "${files[@]}" > /dev/null ;;
    *) "$LOAD" --mode "$LOADER" --json "${files[@]}" > "$WORK/load.json" ;;
  esac
  t1=$(now)
  if [[ -n $perf_pid ]]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  # Per GiB of the model: user + system, user, system.
  read -r cpu user sys < <(sed 's/.*) //' "/proc/$pid/stat" |
    awk -v hz="$(getconf CLK_TCK)" -v gib="$(calc "a / 1073741824" "$TOTAL")" \
      '{printf "%.3f %.3f %.3f\n", ($12 + $13) / hz / gib, $12 / hz / gib, $13 / hz / gib}')
  add "$1_cpu" "$cpu"
  add "$1_user" "$user"
  add "$1_sys" "$sys"
  add "$1_wall" "$(elapsed "$t0" "$t1")"
  add "$1_hwm" "$(awk '/^VmHWM:/ {printf "%.0f\n", $2 / 1024}' "/proc/$pid/status")"
  local in_place
  in_place=$("$bin" stats "$MNT" --json | "$PY" -c "import sys,json; j=json.load(sys.stdin); print(f\"{j['bytes_in_place'] / max(1, j['bytes_fetched']):.2f}\" if 'bytes_in_place' in j else 'n/a')")
  [[ $in_place == n/a ]] || add "$1_in_place" "$in_place"
  umount_wait "$MNT" "$pid"
  MODELFS=${BIN[new]}
}

echo "cold_cpu_bench: $(nproc) CPUs, kernel $(uname -r), MIB=$MIB RUNS=$RUNS LOADER=$LOADER CHUNK_DIGEST=$CHUNK_DIGEST"
load_line
for run in $(seq "$RUNS"); do
  if (( run % 2 )); then order=("${VARIANTS[@]}"); else mapfile -t order < <(printf '%s\n' "${VARIANTS[@]}" | tac); fi
  for v in "${order[@]}"; do measure "$v"; done
done
printf '\n%-6s %15s %9s %9s %8s %13s %16s\n' build "mount CPU-s/GiB" "user/GiB" "sys/GiB" \
  "wall s" "peak RSS MiB" "in place/fetched"
for v in "${VARIANTS[@]}"; do
  printf '%-6s %15s %9s %9s %8s %13s %16s\n' "$v" "$(med "${v}_cpu")" "$(med "${v}_user")" \
    "$(med "${v}_sys")" "$(med "${v}_wall")" "$(med "${v}_hwm")" "$(med "${v}_in_place")"
done
echo "(medians of $RUNS; model $(human "$TOTAL"))"
[[ -z $FORCED ]] || { echo; echo "** $FORCED **"; }
