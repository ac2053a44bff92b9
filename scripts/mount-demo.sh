#!/usr/bin/env bash
# The main job, end to end on loopback: installs what it needs, builds modelfs, starts a local
# docker-registry, generates a model, pushes it as a ModelPack artifact plus volume image,
# mounts it lazily, prints .modelinfo.json, and reads one file back verified. Cleans up after.
# Usage: scripts/mount-demo.sh [--mib N]   (size of the generated model, default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=64
[ "${1:-}" = "--mib" ] && MIB=${2:?}

./scripts/install-deps.sh
./scripts/build.sh >/dev/null
BIN=$PWD/${BUILD_DIR:-build}
MODELFS=$BIN/cmd/modelfs
SYNTH=$BIN/bench/modelfs-synth

WORK=$(mktemp -d /tmp/modelfs-demo.XXXXXX)
REG_PID=""
MNT=$WORK/mnt
cleanup() {
  if mountpoint -q "$MNT" 2>/dev/null; then "$MODELFS" umount "$MNT" || fusermount3 -u "$MNT" || true; fi
  [ -n "$REG_PID" ] && kill "$REG_PID" 2>/dev/null && wait "$REG_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/registry.yml" <<YML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $WORK/registry}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$PORT}
YML
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
echo "== registry on 127.0.0.1:$PORT (pid $REG_PID)"

echo "== generating a ${MIB} MiB llama-shaped model"
"$SYNTH" safetensors "$WORK/model" --mib "$MIB"
"$SYNTH" tiny-gguf "$WORK/model/tiny-q8.gguf"

echo "== modelfs inspect / memory (headers only)"
"$MODELFS" inspect "$WORK/model/model.safetensors" | head -8
"$MODELFS" memory "$WORK/model" --ctx 8192 --seqs 4 --gpu-gib 24

REF=127.0.0.1:$PORT/demo/llama:v1
echo "== modelfs push $REF"
"$MODELFS" push --plain-http "$REF" "$WORK/model"

echo "== modelfs mount (lazy) $REF-volume -> $MNT"
mkdir -p "$MNT"
"$MODELFS" mount --plain-http --cache "$WORK/cache" "$REF-volume" "$MNT"
echo "== $MNT/.modelinfo.json"
cat "$MNT/.modelinfo.json"
echo
echo "== reading model.safetensors through the mount and comparing with the source"
a=$(sha256sum < "$MNT/model.safetensors" | cut -d' ' -f1)
b=$(sha256sum < "$WORK/model/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] && echo "verified: sha256:$a" || { echo "MISMATCH: $a != $b"; exit 1; }
"$MODELFS" stats "$MNT" 2>/dev/null || true
