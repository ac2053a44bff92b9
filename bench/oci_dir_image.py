#!/usr/bin/env python3
"""oci_dir_image.py: push a directory as an ordinary single-layer OCI image (the baseline that
containerd downloads and unpacks), for bench/cri_pull_bench.sh.

  oci_dir_image.py REGISTRY(host:port) REPO TAG DIR

The layer is an uncompressed tar of DIR's files (paths relative to DIR, sorted, mtime 0,
uid/gid 0), streamed from a temporary file to the registry with a monolithic PUT over plain
HTTP. Prints one JSON line: {"reference", "layer", "size", "chain_id"} (chain_id = the layer
digest: one uncompressed layer)."""
import hashlib
import http.client
import json
import os
import sys
import tarfile
import tempfile
import urllib.parse


def put_blob(conn, repo, path_or_bytes, digest, size):
    conn.request("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
    r = conn.getresponse()
    r.read()
    if r.status != 202:
        sys.exit(f"POST upload for {repo}: HTTP {r.status}")
    loc = urllib.parse.urlsplit(r.getheader("Location"))
    q = (loc.query + "&" if loc.query else "") + "digest=" + urllib.parse.quote(digest)
    headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
    if isinstance(path_or_bytes, bytes):
        conn.request("PUT", f"{loc.path}?{q}", body=path_or_bytes, headers=headers)
    else:
        with open(path_or_bytes, "rb") as f:
            conn.request("PUT", f"{loc.path}?{q}", body=f, headers=headers)
    r = conn.getresponse()
    r.read()
    if r.status != 201:
        sys.exit(f"PUT blob {digest}: HTTP {r.status}")


def main():
    reg, repo, tag, src = sys.argv[1:5]
    files = sorted(
        os.path.relpath(os.path.join(d, n), src) for d, _, ns in os.walk(src) for n in ns)
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(os.path.abspath(src)), suffix=".tar") as t:
        with tarfile.open(fileobj=t, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in files:
                info = tar.gettarinfo(os.path.join(src, rel), arcname=rel)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with open(os.path.join(src, rel), "rb") as f:
                    tar.addfile(info, f)
        t.flush()
        size = os.path.getsize(t.name)
        h = hashlib.sha256()
        with open(t.name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        layer = "sha256:" + h.hexdigest()
        conn = http.client.HTTPConnection(reg, timeout=600, blocksize=1 << 20)
        put_blob(conn, repo, t.name, layer, size)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [layer]}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    put_blob(conn, repo, config, config_digest, len(config))
    mt = "application/vnd.oci.image.manifest.v1+json"
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": mt,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer, "size": size}]}).encode()
    conn.request("PUT", f"/v2/{repo}/manifests/{tag}", body=manifest,
                 headers={"Content-Type": mt, "Content-Length": str(len(manifest))})
    r = conn.getresponse()
    r.read()
    if r.status != 201:
        sys.exit(f"PUT manifest {repo}:{tag}: HTTP {r.status}")
    print(json.dumps({"reference": f"{reg}/{repo}:{tag}", "layer": layer, "size": size,
                      "chain_id": layer}))


if __name__ == "__main__":
    main()
