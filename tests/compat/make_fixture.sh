#!/usr/bin/env bash
# Writes the on-disk compatibility fixture tests/compat/fixtures/<commit>/ with the binaries of an
# older modelfs (built from that commit), so that compat_e2e_test can check that this tree reads
# what that release wrote. It was run once per fixture, by hand; the fixture is checked in.
#   usage: tests/compat/make_fixture.sh OLD_BUILD_DIR COMMIT
# OLD_BUILD_DIR holds cmd/modelfs and bench/modelfs-synth of COMMIT. As root (FUSE mounts).
# What it writes under fixtures/<commit>/:
#   registry/   a Distribution 2.8 storage directory: two models, each a ModelPack artifact M
#               plus its volume image V, pushed by that release's `modelfs push`:
#               compat/raw (raw layers) and compat/tarzstd (`--tar --compress zstd`)
#   cache/      the blob cache and chunk journal that release's `modelfs mount` left after
#               reading both models whole (cache.db checkpointed, no -wal)
#   refs.txt    "<name> <repository>@<V digest>" per model
#   origin.txt  the registry's host:port at push time: V names M there, so the test maps it to
#               its own registry with a hosts.toml mirror
#   files.sha256  sha256sum of every file of each model, as served ("<name>/<path>")
set -euo pipefail
OLD=${1:?old build dir}; COMMIT=${2:?commit}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/fixtures/$COMMIT
rm -rf "$OUT"; mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/modelfs-compat.XXXXXX)
REG_PID=
cleanup() {
  set +e
  for m in "$WORK"/mnt-*; do mountpoint -q "$m" && "$OLD/cmd/modelfs" umount "$m"; done
  [ -n "$REG_PID" ] && kill "$REG_PID" && wait "$REG_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $OUT/registry
  delete:
    enabled: false
http:
  addr: 127.0.0.1:$PORT
YML
docker-registry serve "$WORK/registry.yml" > "$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null && break; sleep 0.1; done
REG=127.0.0.1:$PORT

# A small llama-shaped model: two bf16 safetensors shards with their index, a config, and a
# Q8_0 GGUF (about 400 KiB in all, so the fixture stays small).
mkdir -p "$WORK/raw"
python3 - "$WORK/raw" <<'PY'
import json, random, struct, sys
out = sys.argv[1]
rng = random.Random(29)
def shard(name, tensors):
    header, blob = {}, b""
    for tname, shape in tensors:
        n = 1
        for d in shape: n *= d
        data = bytes(rng.getrandbits(8) for _ in range(2 * n))
        header[tname] = {"dtype": "BF16", "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(f"{out}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
    return [t for t, _ in tensors]
hidden, ffn, vocab = 64, 128, 300
a = shard("model-00001-of-00002.safetensors", [("model.embed_tokens.weight", [vocab, hidden]),
      ("model.layers.0.self_attn.q_proj.weight", [hidden, hidden]),
      ("model.layers.0.self_attn.k_proj.weight", [hidden // 2, hidden]),
      ("model.layers.0.self_attn.v_proj.weight", [hidden // 2, hidden]),
      ("model.layers.0.self_attn.o_proj.weight", [hidden, hidden])])
b = shard("model-00002-of-00002.safetensors", [("model.layers.0.mlp.gate_proj.weight", [ffn, hidden]),
      ("model.layers.0.mlp.up_proj.weight", [ffn, hidden]),
      ("model.layers.0.mlp.down_proj.weight", [hidden, ffn]),
      ("model.layers.0.input_layernorm.weight", [hidden]),
      ("model.layers.0.post_attention_layernorm.weight", [hidden]),
      ("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])])
wm = {t: "model-00001-of-00002.safetensors" for t in a}
wm.update({t: "model-00002-of-00002.safetensors" for t in b})
json.dump({"metadata": {}, "weight_map": wm}, open(f"{out}/model.safetensors.index.json", "w"), indent=1)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": ffn, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "vocab_size": vocab, "torch_dtype": "bfloat16"},
          open(f"{out}/config.json", "w"), indent=1)
PY
"$OLD/bench/modelfs-synth" llama-gguf "$WORK/raw/tiny-q8_0.gguf" --type q8_0 --layers 1 \
  --embedding 64 --ffn 128 --heads 4 --kv-heads 2 --vocab 300
cp -r "$WORK/raw" "$WORK/tarzstd"
"$OLD/cmd/modelfs" push --plain-http "$REG/compat/raw:v1" "$WORK/raw" > "$WORK/push-raw.txt"
"$OLD/cmd/modelfs" push --plain-http --tar --compress zstd "$REG/compat/tarzstd:v1" "$WORK/tarzstd" \
  > "$WORK/push-tarzstd.txt"
: > "$OUT/refs.txt"; : > "$OUT/files.sha256"; echo "$REG" > "$OUT/origin.txt"
for name in raw tarzstd; do
  v=$(awk '$1 == "volume" {print $3}' "$WORK/push-$name.txt")
  [ -n "$v" ] || { cat "$WORK/push-$name.txt"; echo "no volume digest" >&2; exit 1; }
  echo "$name compat/$name@$v" >> "$OUT/refs.txt"
  mkdir -p "$WORK/mnt-$name"
  pid=$("$OLD/cmd/modelfs" mount --plain-http --cache "$WORK/cache" \
    "$REG/compat/$name@$v" "$WORK/mnt-$name" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p')
  (cd "$WORK/mnt-$name" && find . -type f ! -name .modelinfo.json | sort | xargs sha256sum) \
    | sed "s#  \./#  $name/#" >> "$OUT/files.sha256"
  "$OLD/cmd/modelfs" umount "$WORK/mnt-$name"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done   # the daemon closes the journal
done
sqlite3 "$WORK/cache/cache.db" 'PRAGMA wal_checkpoint(TRUNCATE);' > /dev/null
cp -a "$WORK/cache" "$OUT/cache"
rm -f "$OUT/cache/lock" "$OUT/cache/cache.db-wal" "$OUT/cache/cache.db-shm"
echo "fixture written: $OUT ($(du -sh "$OUT" | cut -f1))"
