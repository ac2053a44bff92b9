#!/usr/bin/env bash
# The other half of the compatibility check, run by hand with an older release's build (the
# CI has no old binaries): what THIS tree writes, read by THAT release.
#   usage: tests/compat/check_rollback.sh OLD_BUILD_DIR NEW_BUILD_DIR
# 1. A model pushed by this tree's `modelfs push` (V of the newest revision, with tensor
#    indexes) is mounted by the old release's `modelfs mount`, every file compared.
# 2. The cache this tree's mount left is then opened by the old release's mount: served with
#    0 bytes fetched.
# 3. A gzip modelcar (buildah) converted by this tree's `modelfs convert` (V with per-point
#    seek windows: a windows layer and a seek-fallback index layer) is mounted by both
#    releases, every file under models/ compared.
# Prints one line per check and exits 1 on the first that fails. As root (FUSE).
set -euo pipefail
OLD=${1:?old build dir}; NEW=${2:?new build dir}
WORK=$(mktemp -d /tmp/modelfs-rollback.XXXXXX)
REG_PID=
cleanup() {
  set +e
  for m in "$WORK"/mnt-*; do mountpoint -q "$m" && fusermount3 -u -z "$m"; done
  [ -d "$WORK/buildah" ] && buildah_ rm -a > /dev/null 2>&1
  [ -n "$REG_PID" ] && kill "$REG_PID" && wait "$REG_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\n' \
  "$WORK/registry" "$PORT" > "$WORK/registry.yml"
docker-registry serve "$WORK/registry.yml" > "$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/v2/" > /dev/null && break; sleep 0.1; done
REG=127.0.0.1:$PORT
buildah_() { buildah --root "$WORK/buildah/root" --runroot "$WORK/buildah/run" --storage-driver vfs "$@"; }
mkdir -p "$WORK/src"
"$NEW/bench/modelfs-synth" llama-gguf "$WORK/src/tiny.gguf" --type q8_0 --layers 2 > /dev/null
"$NEW/bench/modelfs-synth" safetensors "$WORK/src" --mib 64 > /dev/null
"$NEW/cmd/modelfs" push --plain-http "$REG/rollback/m:v1" "$WORK/src" > "$WORK/push.txt"
V=$(awk '$1 == "volume" {print $3}' "$WORK/push.txt")
# mounted_ok BIN CACHE NAME [REF [SUBDIR]]: mounts REF (default this tree's V) with BIN, compares
# every file of src with SUBDIR of the mount, prints the bytes fetched.
mounted_ok() {
  local bin=$1 cache=$2 name=$3 ref=${4:-$REG/rollback/m@$V} sub=${5:-.} pid fetched
  mkdir -p "$WORK/mnt-$name"
  pid=$("$bin" mount --plain-http --prefetch none --cache "$cache" "$ref" \
    "$WORK/mnt-$name" | sed -n 's/.*(pid \([0-9]*\)).*/\1/p')
  (cd "$WORK/src" && find . -type f | sort | while read -r f; do
     cmp -s "$f" "$WORK/mnt-$name/$sub/$f" || { echo "MISMATCH $f"; exit 1; }; done)
  sleep 1.5
  fetched=$("$bin" stats "$WORK/mnt-$name" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_fetched"])')
  "$bin" umount "$WORK/mnt-$name"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  echo "$fetched"
}
echo "pushed by $NEW: V $V"
f=$(mounted_ok "$NEW/cmd/modelfs" "$WORK/cache" new)
echo "ok: this tree mounted its own V, every file equal ($f bytes fetched)"
f=$(mounted_ok "$OLD/cmd/modelfs" "$WORK/cache-old" old)
echo "ok: the old release mounted this tree's V, every file equal ($f bytes fetched)"
f=$(mounted_ok "$OLD/cmd/modelfs" "$WORK/cache" old-on-new-cache)
[ "$f" = 0 ] || { echo "FAIL: the old release fetched $f bytes from the cache this tree wrote"; exit 1; }
echo "ok: the old release served it from the cache this tree wrote, 0 bytes fetched"

# 3. A gzip modelcar whose V carries seek windows.
c=$(buildah_ from scratch)
buildah_ copy "$c" "$WORK/src" /models/ > /dev/null
buildah_ commit -q "$c" rollback-modelcar > /dev/null
buildah_ push -q --tls-verify=false --compression-format gzip rollback-modelcar "docker://$REG/rollback/car:v1" > /dev/null
"$NEW/cmd/modelfs" convert --plain-http --json "$REG/rollback/car:v1" > "$WORK/convert.json"
CV=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["volume"]["digest"])' "$WORK/convert.json")
WIN=$(curl -fs -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/rollback/car/manifests/$CV" |
  python3 -c 'import json,sys; m=json.load(sys.stdin); print(sum(1 for l in m["layers"] if "windows" in json.dumps(l.get("annotations", {}))))')
echo "converted by $NEW: V $CV ($WIN layers annotated as seek windows)"
f=$(mounted_ok "$NEW/cmd/modelfs" "$WORK/cache-car" car-new "$REG/rollback/car@$CV" models)
echo "ok: this tree mounted the modelcar's V, every file equal ($f bytes fetched)"
f=$(mounted_ok "$OLD/cmd/modelfs" "$WORK/cache-car-old" car-old "$REG/rollback/car@$CV" models)
echo "ok: the old release mounted the modelcar's windowed V, every file equal ($f bytes fetched)"
