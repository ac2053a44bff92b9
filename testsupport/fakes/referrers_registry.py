#!/usr/bin/env python3
# A fake OCI Distribution registry in memory that answers the OCI 1.1 referrers API
# (GET /v2/<repo>/referrers/<digest>, filtered by ?artifactType=), for the one path
# docker-registry 2.8 cannot exercise: writers that push a referrer where the registry indexes
# them. Blobs (monolithic POST + PUT ?digest=), manifests by tag or digest (GET/HEAD/PUT).
# Nothing else; no auth. Usage: referrers_registry.py PORT_FILE  (writes the port it bound).
import hashlib
import json
import re
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
BLOBS = {}      # (repo, digest) -> bytes
MANIFESTS = {}  # (repo, digest) -> (media_type, bytes)
TAGS = {}       # (repo, tag) -> digest
UPLOADS = {}    # uuid -> repo

NAME = r"(?P<repo>[a-z0-9._/-]+?)"


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def route(self):
        u = urllib.parse.urlparse(self.path)
        return u.path, urllib.parse.parse_qs(u.query)

    def do_GET(self):
        path, query = self.route()
        if path == "/v2/":
            return self.reply(200, b"{}")
        m = re.fullmatch(r"/v2/" + NAME + r"/referrers/(?P<d>sha256:[0-9a-f]{64})", path)
        if m:
            want = query.get("artifactType", [None])[0]
            out = []
            with LOCK:
                for (repo, d), (mt, b) in MANIFESTS.items():
                    if repo != m["repo"]:
                        continue
                    j = json.loads(b)
                    if (j.get("subject") or {}).get("digest") != m["d"]:
                        continue
                    at = j.get("artifactType") or (j.get("config") or {}).get("mediaType")
                    if want and at != want:
                        continue
                    desc = {"mediaType": mt, "digest": d, "size": len(b), "artifactType": at}
                    if j.get("annotations"):
                        desc["annotations"] = j["annotations"]
                    out.append(desc)
            body = json.dumps({"schemaVersion": 2,
                               "mediaType": "application/vnd.oci.image.index.v1+json",
                               "manifests": out}).encode()
            return self.reply(200, body, {"Content-Type": "application/vnd.oci.image.index.v1+json"})
        m = re.fullmatch(r"/v2/" + NAME + r"/manifests/(?P<ref>[^/]+)", path)
        if m:
            with LOCK:
                d = m["ref"] if m["ref"].startswith("sha256:") else TAGS.get((m["repo"], m["ref"]))
                got = MANIFESTS.get((m["repo"], d))
            if got is None:
                return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            return self.reply(200, got[1], {"Content-Type": got[0], "Docker-Content-Digest": d})
        m = re.fullmatch(r"/v2/" + NAME + r"/blobs/(?P<d>sha256:[0-9a-f]{64})", path)
        if m:
            with LOCK:
                b = BLOBS.get((m["repo"], m["d"]))
            if b is None:
                return self.reply(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
            return self.reply(200, b, {"Docker-Content-Digest": m["d"]})
        return self.reply(404)

    do_HEAD = do_GET

    def do_POST(self):
        path, _ = self.route()
        self.body()
        m = re.fullmatch(r"/v2/" + NAME + r"/blobs/uploads/", path)
        if not m:
            return self.reply(404)
        with LOCK:
            uid = str(len(UPLOADS) + 1)
            UPLOADS[uid] = m["repo"]
        return self.reply(202, b"", {"Location": "/v2/%s/blobs/uploads/%s" % (m["repo"], uid)})

    def do_PUT(self):
        path, query = self.route()
        data = self.body()
        m = re.fullmatch(r"/v2/" + NAME + r"/blobs/uploads/(?P<id>\d+)", path)
        if m:
            d = query.get("digest", [""])[0]
            if sha(data) != d:
                return self.reply(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            with LOCK:
                BLOBS[(m["repo"], d)] = data
            return self.reply(201, b"", {"Docker-Content-Digest": d})
        m = re.fullmatch(r"/v2/" + NAME + r"/manifests/(?P<ref>[^/]+)", path)
        if m:
            d = sha(data)
            if m["ref"].startswith("sha256:") and m["ref"] != d:
                return self.reply(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            mt = self.headers.get("Content-Type", "")
            with LOCK:
                MANIFESTS[(m["repo"], d)] = (mt, data)
                if not m["ref"].startswith("sha256:"):
                    TAGS[(m["repo"], m["ref"])] = d
            return self.reply(201, b"", {"Docker-Content-Digest": d})
        return self.reply(404)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
