#!/usr/bin/env bash
# diff_bench.sh: `modelfs diff` of two large models that share all but one transformer layer's
# tensors (issue 46: under 1 MiB read of either), from V's tensor indexes, beside the same diff
# of their ModelPack artifacts M (no index: the files' headers are read and the files that differ
# are hashed, what any tool without an index must do) measured in the same run. Model A is a
# Llama-shaped bf16 safetensors model of SIZE_MIB in shards of SHARD_MIB (modelfs-synth); B is A
# with every tensor of layer LAYER rewritten with other bytes (one shard differs). Both are pushed
# to a docker-registry on loopback. Prints medians of RUNS: wall time, bytes read from the
# registry (the command's own count and the registry's access log), tensors changed.
#
# Usage: bench/diff_bench.sh [BUILD_DIR]   env: SIZE_MIB=8192 SHARD_MIB=2048 LAYER=5 RUNS=3
#        WORK=/tmp (needs about 3x SIZE_MIB of disk). Needs docker-registry, python3, curl and a
#        quiet machine (FORCE=1 otherwise).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
require_quiet diff_bench

BUILD=${1:-build}
MODELFS=$(realpath "$BUILD/cmd/modelfs")
SYNTH=$(realpath "$BUILD/bench/modelfs-synth")
SIZE_MIB=${SIZE_MIB:-8192}
SHARD_MIB=${SHARD_MIB:-2048}
LAYER=${LAYER:-5}
RUNS=${RUNS:-3}
WORK=$(mktemp -d "${WORK:-/tmp}/modelfs-diff-bench-XXXXXX")
export DOCKER_CONFIG="$WORK/no-docker-config"
require_tools docker-registry curl
for f in "$MODELFS" "$SYNTH"; do require_exec "$f" "build targets modelfs modelfs-synth"; done
cleanup() { stop_registry; rm -rf "$WORK"; }
trap cleanup EXIT

echo "generating A: ${SIZE_MIB} MiB in ${SHARD_MIB} MiB shards" >&2
"$SYNTH" safetensors "$WORK/a" --mib "$SIZE_MIB" --shard-mib "$SHARD_MIB" > /dev/null
# B: hard links to A's files but for the shard holding layer LAYER, copied and rewritten.
cp -al "$WORK/a" "$WORK/b"
CHANGED=$("$PY" - "$WORK/b" "$LAYER" <<'PY'
import json, os, struct, sys
d, layer = sys.argv[1], int(sys.argv[2])
prefix = f"model.layers.{layer}."
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
shards = sorted({f for t, f in idx["weight_map"].items() if t.startswith(prefix)})
n = 0
for shard in shards:
    path = os.path.join(d, shard)
    data = open(path, "rb").read()          # a fresh file, not a link to A's
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)
    del data
    with open(path, "r+b") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(hlen))
        for name, t in header.items():
            if not name.startswith(prefix):
                continue
            a, b = t["data_offsets"]
            f.seek(8 + hlen + a)
            f.write(os.urandom(b - a))
            n += 1
print(n)
PY
)
echo "B: $CHANGED tensors of layer $LAYER rewritten" >&2

start_registry "$WORK/registry" --accesslog
"$MODELFS" push --plain-http "$REG/bench/a:v1" "$WORK/a" > /dev/null
"$MODELFS" push --plain-http "$REG/bench/b:v1" "$WORK/b" > /dev/null
MODEL_BYTES=$(du -sbL "$WORK/a" | cut -f1)

# one_diff A B: runs `modelfs diff --json`, prints "seconds bytes_read changed registry_bytes"
one_diff() {
  local before after t0 t1 out
  before=$(log_size "$REG_LOG")
  t0=$(now)
  out=$("$MODELFS" diff --json --plain-http "$1" "$2")
  t1=$(now)
  after=$(log_size "$REG_LOG")
  local served
  served=$(tail -c +"$((before + 1))" "$REG_LOG" | head -c "$((after - before))" |
    "$PY" -c 'import re,sys
print(sum(int(m.group(1)) for m in re.finditer(r"\" [0-9]{3} ([0-9]+) \"", sys.stdin.read())))')
  "$PY" -c 'import json,sys
j=json.loads(sys.argv[1]); s=j.get("summary", j)
print(sys.argv[2], j["bytes_read"], s.get("changed", "n/a"), sys.argv[3])' "$out" "$(elapsed "$t0" "$t1")" "$served"
}

for r in $(seq "$RUNS"); do
  echo "run $r/$RUNS" >&2
  read -r t b c s < <(one_diff "$REG/bench/a:v1-volume" "$REG/bench/b:v1-volume")
  add v_t "$t"; add v_b "$b"; add v_s "$s"; VC=$c
  read -r t b c s < <(one_diff "$REG/bench/a:v1" "$REG/bench/b:v1")
  add m_t "$t"; add m_b "$b"; add m_s "$s"; MC=$c
done

medint() { "$PY" -c 'import sys; print(f"{int(float(sys.argv[1])):,}")' "$(med "$1")"; }
echo
echo "## modelfs diff of two $(human "$MODEL_BYTES") models sharing all but layer $LAYER ($CHANGED tensors rewritten); medians of $RUNS; $(nproc) cores, loopback"
load_line
echo
echo "| diff of | source | wall s | bytes read (modelfs) | bytes served (registry log) | tensors changed |"
echo "|---|---|---|---|---|---|"
echo "| V and V | tensor indexes | $(med v_t) | $(medint v_b) | $(medint v_s) | $VC |"
echo "| M and M (baseline: no index) | headers + hashing | $(med m_t) | $(medint m_b) | $(medint m_s) | $MC |"
echo
echo "ratio (M / V): time $(ratio "$(med m_t)" "$(med v_t)"), bytes $(ratio "$(med m_b)" "$(med v_b)")"
