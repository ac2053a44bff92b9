#!/usr/bin/env bash
# push_pull_bench.sh: `modelfs push` / `modelfs pull` time and throughput for a synthetic model
# against a local docker-registry, beside curl moving the same blobs in the same run (the
# baseline: sha256sum + monolithic POST/PUT per blob for push, GET + sha256sum per blob for
# pull). Every run starts from an empty registry. Prints medians of RUNS runs as a table.
#
#   bench/push_pull_bench.sh [BUILD_DIR] [--mib N] [--runs N] [--keep]
#
# Not a test; run by hand (or `cmake --build BUILD_DIR --target push_pull_bench`).
# Needs docker-registry, curl, sha256sum, python3. Uses about 3x the model size in $TMPDIR.
set -euo pipefail

BUILD=build
MIB=2048
RUNS=3
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mib) MIB="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) BUILD="$1"; shift ;;
  esac
done
MODELFS="$BUILD/cmd/modelfs"
SYNTH="$BUILD/bench/modelfs-synth"
for tool in "$MODELFS" "$SYNTH"; do
  [[ -x "$tool" ]] || { echo "missing $tool (build targets modelfs and modelfs-synth)" >&2; exit 2; }
done
for tool in docker-registry curl sha256sum python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/modelfs-push-pull-bench-XXXXXX")
REGISTRY_PID=""
stop_registry() {
  if [[ -n "$REGISTRY_PID" ]]; then
    kill "$REGISTRY_PID" 2>/dev/null || true
    wait "$REGISTRY_PID" 2>/dev/null || true
    REGISTRY_PID=""
  fi
}
cleanup() {
  stop_registry
  if [[ $KEEP -eq 0 ]]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HOST="127.0.0.1:$PORT"

# A fresh registry with empty storage.
start_registry() {
  stop_registry
  rm -rf "$WORK/storage"
  mkdir -p "$WORK/storage"
  cat > "$WORK/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $WORK/storage
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $HOST
EOF
  docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
  REGISTRY_PID=$!
  for _ in $(seq 1 200); do
    curl -fsS "http://$HOST/v2/" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "docker-registry did not start:" >&2
  cat "$WORK/registry.log" >&2
  exit 1
}

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.3f}')"; }
json_field() { python3 -c "import json,sys; print(json.load(open('$1'))$2)"; }

# shellcheck source=bench/quiet.sh
source "$(dirname "$0")/quiet.sh"
require_quiet push_pull_bench
echo "generating a ${MIB} MiB synthetic safetensors model..." >&2
"$SYNTH" safetensors "$WORK/model" --mib "$MIB" >/dev/null
mapfile -t FILES < <(cd "$WORK/model" && find . -type f | sed 's|^\./||' | sort)
MODEL_BYTES=$(cd "$WORK/model" && du -cb "${FILES[@]}" | tail -1 | cut -f1)

# curl baseline: one monolithic upload per file (POST for a session, PUT ?digest= with the body).
curl_push() {
  local repo="$1" sent=0 f d loc n
  for f in "${FILES[@]}"; do
    d=$(sha256sum "$WORK/model/$f" | cut -d' ' -f1)
    loc=$(curl -fsS -o /dev/null -D - -X POST "http://$HOST/v2/$repo/blobs/uploads/" |
          tr -d '\r' | awk 'tolower($1)=="location:" {print $2}')
    [[ "$loc" == /* ]] && loc="http://$HOST$loc"
    if [[ "$loc" == *\?* ]]; then loc="$loc&digest=sha256:$d"; else loc="$loc?digest=sha256:$d"; fi
    n=$(curl -fsS -o /dev/null -w '%{size_upload}' -X PUT -H 'Content-Type: application/octet-stream' \
          -T "$WORK/model/$f" "$loc")
    sent=$((sent + ${n%.*}))
    echo "$d $f" >>"$WORK/curl-digests"
  done
  echo "$sent"
}

# curl baseline: GET each blob into a file while hashing it, 4 at a time (as modelfs pull).
curl_pull() {
  local repo="$1" dest="$2"
  mkdir -p "$dest"
  export HOST repo dest
  # shellcheck disable=SC2016
  xargs -P 4 -L 1 bash -c '
    d="$0"; f="$1"; mkdir -p "$(dirname "$dest/$f")"
    got=$(curl -fsS "http://$HOST/v2/$repo/blobs/sha256:$d" | tee "$dest/$f" | sha256sum | cut -d" " -f1)
    [[ "$got" == "$d" ]] || { echo "digest mismatch for $f" >&2; exit 1; }
  ' <"$WORK/curl-digests"
  du -cb "$dest" >/dev/null
  (cd "$dest" && du -cb "${FILES[@]}" | tail -1 | cut -f1)
}

declare -a MF_PUSH MF_PULL CU_PUSH CU_PULL
MF_PUSH_BYTES=0; MF_PULL_BYTES=0; CU_PUSH_BYTES=0; CU_PULL_BYTES=0
for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS: modelfs" >&2
  start_registry
  t0=$(now)
  "$MODELFS" push --plain-http "$HOST/bench/model:run$run" "$WORK/model" --json >"$WORK/push.json"
  t1=$(now)
  MF_PUSH+=("$(elapsed "$t0" "$t1")")
  MF_PUSH_BYTES=$(json_field "$WORK/push.json" "['bytes_uploaded']")
  rm -rf "$WORK/pulled"
  t0=$(now)
  "$MODELFS" pull --plain-http "$HOST/bench/model:run$run" "$WORK/pulled" --json >"$WORK/pull.json"
  t1=$(now)
  MF_PULL+=("$(elapsed "$t0" "$t1")")
  MF_PULL_BYTES=$(json_field "$WORK/pull.json" "['bytes']")
  rm -rf "$WORK/pulled"

  echo "run $run/$RUNS: curl" >&2
  start_registry
  rm -f "$WORK/curl-digests"
  t0=$(now)
  CU_PUSH_BYTES=$(curl_push "bench/curl")
  t1=$(now)
  CU_PUSH+=("$(elapsed "$t0" "$t1")")
  t0=$(now)
  CU_PULL_BYTES=$(curl_pull "bench/curl" "$WORK/pulled")
  t1=$(now)
  CU_PULL+=("$(elapsed "$t0" "$t1")")
  rm -rf "$WORK/pulled"
  stop_registry
done

load_line
python3 - "$MODEL_BYTES" "$RUNS" "${#FILES[@]}" \
  "${MF_PUSH[*]}" "$MF_PUSH_BYTES" "${CU_PUSH[*]}" "$CU_PUSH_BYTES" \
  "${MF_PULL[*]}" "$MF_PULL_BYTES" "${CU_PULL[*]}" "$CU_PULL_BYTES" <<'EOF'
import statistics, sys
model_bytes, runs, nfiles = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rows = [
    ("push", "modelfs push", sys.argv[4], int(sys.argv[5])),
    ("push", "curl: sha256sum, POST+PUT", sys.argv[6], int(sys.argv[7])),
    ("pull", "modelfs pull (verify, fsync)", sys.argv[8], int(sys.argv[9])),
    ("pull", "curl: GET, tee, sha256sum x4", sys.argv[10], int(sys.argv[11])),
]
print(f"model: {model_bytes:,} bytes in {nfiles} files; median of {runs} runs; loopback registry, warm page cache")
print()
print(f"| {'op':4} | {'tool':30} | {'median s':>8} | {'MiB/s':>8} | {'bytes moved':>15} | runs (s) |")
print(f"|{'-'*6}|{'-'*32}|{'-'*10}|{'-'*10}|{'-'*17}|{'-'*10}|")
for op, tool, times, moved in rows:
    t = [float(x) for x in times.split()]
    med = statistics.median(t)
    mibs = model_bytes / (1 << 20) / med if med > 0 else float("inf")
    print(f"| {op:4} | {tool:30} | {med:8.2f} | {mibs:8.1f} | {moved:15,} | {' '.join(f'{x:.2f}' for x in t)} |")
EOF
