#!/usr/bin/env python3
"""reencode_model.py: re-encode every .tar layer of a ModelPack artifact with a standard
compressor and push the result as a new tag, the way a publisher using other tools would
(modctl, or the shem runtime's zstd level 3). For bench/encodings_bench.sh.

  reencode_model.py REGISTRY(host:port) REPO SRC_TAG DST_TAG gzip|zstd

gzip: `gzip -6 -n`; zstd: `zstd -3`, one frame per layer (the zstd tool's default for a
stream). The config is kept (its diffIds already name the uncompressed tars); each layer gets
the spec's media type with +gzip or +zstd and the digest and size of its compressed bytes.
Plain HTTP only (a registry on loopback or in a bench namespace). Prints one JSON line:
{"reference", "manifest", "layers": [{"digest", "size", "diff_id"}]}."""
import hashlib
import http.client
import json
import subprocess
import sys
import tempfile
import urllib.parse

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def request(conn, method, path, body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    return r, data


def put_blob(conn, repo, path, digest, size):
    r, _ = request(conn, "HEAD", f"/v2/{repo}/blobs/{digest}")
    if r.status == 200:
        return
    r, _ = request(conn, "POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
    if r.status != 202:
        sys.exit(f"POST upload for {repo}: HTTP {r.status}")
    loc = urllib.parse.urlsplit(r.getheader("Location"))
    q = (loc.query + "&" if loc.query else "") + "digest=" + urllib.parse.quote(digest)
    with open(path, "rb") as f:
        r, data = request(conn, "PUT", f"{loc.path}?{q}", body=f,
                          headers={"Content-Length": str(size),
                                   "Content-Type": "application/octet-stream"})
    if r.status != 201:
        sys.exit(f"PUT {digest}: HTTP {r.status} {data[:200]!r}")


def main():
    if len(sys.argv) != 6 or sys.argv[5] not in ("gzip", "zstd"):
        sys.exit(__doc__)
    registry, repo, src, dst, codec = sys.argv[1:]
    conn = http.client.HTTPConnection(registry, timeout=600)
    r, data = request(conn, "GET", f"/v2/{repo}/manifests/{src}", headers={"Accept": MANIFEST})
    if r.status != 200:
        sys.exit(f"GET manifest {repo}:{src}: HTTP {r.status}")
    manifest = json.loads(data)
    out = []
    for layer in manifest["layers"]:
        mt = layer["mediaType"]
        if not mt.endswith(".tar"):
            sys.exit(f"layer {layer['digest']} is {mt}, not a .tar layer (push with --tar)")
        r, tar = request(conn, "GET", f"/v2/{repo}/blobs/{layer['digest']}")
        if r.status != 200:
            sys.exit(f"GET {layer['digest']}: HTTP {r.status}")
        if "sha256:" + hashlib.sha256(tar).hexdigest() != layer["digest"]:
            sys.exit(f"layer {layer['digest']}: the registry's bytes do not match")
        cmd = ["gzip", "-6", "-n", "-c"] if codec == "gzip" else ["zstd", "-3", "-q", "-c"]
        with tempfile.NamedTemporaryFile(dir="/tmp") as f:
            subprocess.run(cmd, input=tar, stdout=f, check=True)
            f.flush()
            with open(f.name, "rb") as g:
                h = hashlib.sha256()
                size = 0
                for piece in iter(lambda: g.read(1 << 20), b""):
                    h.update(piece)
                    size += len(piece)
            digest = "sha256:" + h.hexdigest()
            put_blob(conn, repo, f.name, digest, size)
        out.append({"digest": digest, "size": size, "diff_id": layer["digest"]})
        layer["mediaType"] = mt + "+" + codec
        layer["digest"] = digest
        layer["size"] = size
    body = json.dumps(manifest, separators=(",", ":")).encode()
    r, data = request(conn, "PUT", f"/v2/{repo}/manifests/{dst}", body=body,
                      headers={"Content-Type": MANIFEST})
    if r.status != 201:
        sys.exit(f"PUT manifest {repo}:{dst}: HTTP {r.status} {data[:200]!r}")
    print(json.dumps({"reference": f"{registry}/{repo}:{dst}",
                      "manifest": "sha256:" + hashlib.sha256(body).hexdigest(), "layers": out}))


if __name__ == "__main__":
    main()
