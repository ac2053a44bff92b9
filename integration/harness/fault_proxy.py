#!/usr/bin/env python3
"""An HTTP proxy in front of a registry that injects the faults the client must survive.

  --fail-first N --fail-status S [--retry-after SECS] [--fail-path SUBSTR]
      the first N requests whose path contains SUBSTR (default: any /v2/<name>/ request)
      are answered with status S (and Retry-After), without reaching the registry.
  --ignore-range      drop the Range header, so the registry answers 200 with the whole blob.
  --redirect-blobs    answer GET/HEAD .../blobs/sha256:... with 307 to a "storage" URL on
                      http://localhost:<port>/__storage/<generation>/<path> (another host
                      name, so the client must drop Authorization; a request that still
                      carries it is refused with 400).
  --storage-uses K    each storage URL generation serves K requests, then answers 403
                      (an expired presigned URL); the client must ask the registry again.
  --read-only         refuse every POST, PUT, PATCH and DELETE with 403 DENIED, as a registry
                      does for credentials that may only pull (Distribution has no per-user
                      access control of its own); reads pass through with their credentials.
GET /__stats returns counters as JSON.
"""
import argparse
import http.client
import http.server
import json
import os
import threading
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=503)
    ap.add_argument("--retry-after", default="")
    ap.add_argument("--fail-path", default="")
    ap.add_argument("--ignore-range", action="store_true")
    ap.add_argument("--redirect-blobs", action="store_true")
    ap.add_argument("--storage-uses", type=int, default=0)
    ap.add_argument("--read-only", action="store_true")
    args = ap.parse_args()

    lock = threading.Lock()
    stats = {"requests": 0, "injected": 0, "redirects": 0, "storage_requests": 0,
             "storage_expired": 0, "storage_with_auth": 0, "refused_writes": 0}
    generation_uses = {}
    next_generation = [1]
    port = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def simple(self, code, body=b"", headers=None):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def body(self):
            n = int(self.headers.get("Content-Length", "0") or 0)
            return self.rfile.read(n) if n else b""

        def forward(self, path, drop_auth=False):
            data = self.body()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            if args.ignore_range:
                headers.pop("Range", None)
            if drop_auth:
                headers.pop("Authorization", None)
            conn = http.client.HTTPConnection(args.upstream, timeout=60)
            conn.request(self.command, path, body=data if data else None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            conn.close()

        def handle_any(self):
            path = self.path
            if path == "/__stats":
                with lock:
                    self.simple(200, json.dumps(stats).encode(),
                                {"Content-Type": "application/json"})
                return
            with lock:
                stats["requests"] += 1
            if path.startswith("/__storage/"):
                _, _, gen, rest = path.split("/", 3)
                with lock:
                    stats["storage_requests"] += 1
                    uses = generation_uses.get(gen, 0) + 1
                    generation_uses[gen] = uses
                    if self.headers.get("Authorization"):
                        stats["storage_with_auth"] += 1
                        self.body()
                        self.simple(400, b"storage got an Authorization header")
                        return
                    if args.storage_uses and uses > args.storage_uses:
                        stats["storage_expired"] += 1
                        self.body()
                        self.simple(403, b"<Error><Code>AccessDenied</Code></Error>")
                        return
                self.forward("/" + rest, drop_auth=True)
                return
            if args.read_only and self.command in ("POST", "PUT", "PATCH", "DELETE"):
                with lock:
                    stats["refused_writes"] += 1
                self.body()
                self.simple(403, json.dumps({"errors": [{
                    "code": "DENIED",
                    "message": "requested access to the resource is denied"}]}).encode(),
                    {"Content-Type": "application/json"})
                return
            target = args.fail_path or "/v2/"
            is_api = path.startswith("/v2/") and path != "/v2/"
            with lock:
                inject = (args.fail_first > 0 and target in path and
                          (is_api or args.fail_path))
                if inject:
                    args.fail_first -= 1
                    stats["injected"] += 1
            if inject:
                self.body()
                headers = {"Content-Type": "application/json"}
                if args.retry_after:
                    headers["Retry-After"] = args.retry_after
                self.simple(args.fail_status,
                            json.dumps({"errors": [{"code": "INJECTED",
                                                    "message": "fault proxy"}]}).encode(),
                            headers)
                return
            if (args.redirect_blobs and self.command in ("GET", "HEAD") and
                    "/blobs/sha256:" in path and "/uploads/" not in path):
                with lock:
                    gen = str(next_generation[0])
                    next_generation[0] += 1
                    stats["redirects"] += 1
                location = "http://localhost:%d/__storage/%s%s" % (port[0], gen, path)
                self.simple(307, b"", {"Location": location})
                return
            self.forward(path)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = handle_any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port[0] = server.server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port[0]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
