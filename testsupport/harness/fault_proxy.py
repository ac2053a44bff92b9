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
  --blob-fault MODE   break the body of GET .../blobs/... answers (200 or 206) that reach the
                      registry, in one of these ways:
        reset         send --blob-fault-bytes body bytes, then reset the connection (RST);
        truncate      announce the full Content-Length, send --blob-fault-bytes body bytes,
                      then close the connection (FIN): a body shorter than Content-Length;
        stall         send --blob-fault-bytes body bytes, then send nothing more and hold the
                      connection open until the client gives up (closes it), at most 120 s;
        corrupt       flip (XOR 0xff) the body byte at --blob-fault-offset;
        wrong-range   a 206 claims another range than the one sent: Content-Range shifted by
                      --blob-fault-range-shift bytes (default: the range's length, so it names
                      the next range); the body is the requested range.
  --blob-fault-first M  only the first M such answers are broken (0: every one), so that
                      retries succeed.
  --blob-fault-path SUBSTR  only answers whose path contains SUBSTR (default "/blobs/"; a blob
                      digest aims at one layer and spares the config).
  --blob-fault-bytes N  body bytes sent before a reset, truncation or stall (default -1: half
                      of the body).
  --blob-fault-offset K  body offset of the corrupt byte (default -1: the middle of the body).
  --blob-fault-from B  only requests whose Range starts at blob offset B or later (default 0;
                      a request without Range starts at 0), e.g. the readahead past a read.
  --rate BYTES_PER_S  send the bodies of GET .../blobs/... answers at most this fast, all
                      connections together (one shaped link; 0: unshaped), for loads that must
                      last a while (credentials that expire during a cold load).
  --bearer-max-age S  answer a request whose bearer token (a JWT) was issued (iat) more than S
                      seconds ago with the registry's own 401 and challenge (the request sent on
                      without it): a token revoked before its expires_in, as a registry without
                      Distribution's leeway on exp would refuse it.
GET /__stats returns counters as JSON. GET /__clear-faults turns --blob-fault off (answers
already stalled stay stalled); GET /__set-faults?mode=M&first=N&path=P&bytes=B&offset=K&from=F sets
them (omitted fields keep their values).
"""
import argparse
import base64
import http.client
import http.server
import json
import os
import select
import socket
import struct
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate"}


def range_start(value):
    """The first byte a "bytes=A-B" request header asks for; 0 without one."""
    try:
        return int(value.split("=", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return 0


def shifted_range(value, shift):
    """"bytes A-B/T" claimed as "bytes (A+S)-(B+S)/T" (S: shift, or B-A+1 when 0)."""
    try:
        unit, rest = value.split(" ", 1)
        span, total = rest.split("/", 1)
        a, b = (int(x) for x in span.split("-", 1))
    except ValueError:
        return value
    s = shift or (b - a + 1)
    return "%s %d-%d/%s" % (unit, a + s, b + s, total)


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
    ap.add_argument("--blob-fault", default="",
                    choices=["", "reset", "truncate", "stall", "corrupt", "wrong-range"])
    ap.add_argument("--blob-fault-first", type=int, default=0)
    ap.add_argument("--blob-fault-path", default="/blobs/")
    ap.add_argument("--blob-fault-bytes", type=int, default=-1)
    ap.add_argument("--blob-fault-offset", type=int, default=-1)
    ap.add_argument("--blob-fault-range-shift", type=int, default=0)
    ap.add_argument("--blob-fault-from", type=int, default=0)
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--bearer-max-age", type=float, default=0)
    args = ap.parse_args()
    # --blob-fault-first counts down; this says whether it was given at all (0: every answer).
    args.blob_fault_limited = args.blob_fault_first > 0

    lock = threading.Lock()
    stats = {"requests": 0, "injected": 0, "redirects": 0, "storage_requests": 0,
             "storage_expired": 0, "storage_with_auth": 0, "refused_writes": 0,
             "blob_gets": 0, "blob_faults": 0, "stalls_ended": 0, "bearer_refused": 0}
    generation_uses = {}
    next_generation = [1]
    link_free_at = [0.0]  # --rate: when the shaped link has sent what it was given

    def shaped_write(wfile, payload):
        """Writes payload through the one shaped link: 16 KiB pieces, each when the link is free."""
        for i in range(0, len(payload), 16384):
            piece = payload[i:i + 16384]
            with lock:
                start = max(time.monotonic(), link_free_at[0])
                link_free_at[0] = start + len(piece) / args.rate
            delay = start - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            wfile.write(piece)
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
            conn.close()
            fault = self.blob_fault(path, resp.status)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    if fault == "wrong-range" and k.lower() == "content-range":
                        v = shifted_range(v, args.blob_fault_range_shift)
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command == "HEAD":
                return
            if fault == "corrupt" and payload:
                k = args.blob_fault_offset if args.blob_fault_offset >= 0 else len(payload) // 2
                if k < len(payload):
                    payload = payload[:k] + bytes([payload[k] ^ 0xff]) + payload[k + 1:]
            if fault not in ("reset", "truncate", "stall"):
                if (args.rate > 0 and self.command == "GET" and "/blobs/" in path and
                        resp.status in (200, 206)):
                    shaped_write(self.wfile, payload)
                else:
                    self.wfile.write(payload)
                return
            n = args.blob_fault_bytes if args.blob_fault_bytes >= 0 else len(payload) // 2
            n = min(n, max(len(payload) - 1, 0))  # always short of the whole body
            try:
                self.wfile.write(payload[:n])
                self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
            sock = self.connection
            if fault == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            elif fault == "truncate":
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            else:
                self.stall(sock)

        def blob_fault(self, path, status):
            """The fault to apply to this answer ("" for none), counted against the budget."""
            if (self.command != "GET" or "/blobs/" not in path or "/uploads/" in path or
                    status not in (200, 206)):
                return ""
            with lock:
                stats["blob_gets"] += 1
                if not args.blob_fault or args.blob_fault_path not in path:
                    return ""
                if range_start(self.headers.get("Range", "")) < args.blob_fault_from:
                    return ""
                if args.blob_fault == "wrong-range" and status != 206:
                    return ""
                if args.blob_fault_limited:
                    if args.blob_fault_first <= 0:
                        return ""
                    args.blob_fault_first -= 1
                stats["blob_faults"] += 1
                return args.blob_fault

        def stall(self, sock):
            # Nothing more is sent; the client's close (a readable socket that reads EOF or
            # fails) ends it. Whatever the client sends meanwhile is read and dropped.
            end = time.monotonic() + 120
            sock.setblocking(False)
            while time.monotonic() < end:
                r, _, _ = select.select([sock], [], [], 0.2)
                if not r:
                    continue
                try:
                    if not sock.recv(65536):
                        break
                except BlockingIOError:
                    continue
                except OSError:
                    break
            with lock:
                stats["stalls_ended"] += 1
            try:
                sock.close()
            except OSError:
                pass

        def bearer_too_old(self):
            """Whether the request carries a JWT bearer token issued over --bearer-max-age ago."""
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                return False
            try:
                payload = auth[7:].split(".")[1]
                claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
                return time.time() - float(claims["iat"]) > args.bearer_max_age
            except (IndexError, KeyError, ValueError, TypeError):
                return False

        def handle_any(self):
            path = self.path
            if path == "/__stats":
                with lock:
                    self.simple(200, json.dumps(stats).encode(),
                                {"Content-Type": "application/json"})
                return
            if path == "/__clear-faults":
                with lock:
                    args.blob_fault = ""
                self.simple(200, b"cleared")
                return
            if path.startswith("/__set-faults"):
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query, keep_blank_values=True)
                with lock:
                    if "mode" in q:
                        args.blob_fault = q["mode"][0]
                    if "first" in q:
                        args.blob_fault_first = int(q["first"][0])
                        args.blob_fault_limited = args.blob_fault_first > 0
                    if "path" in q:
                        args.blob_fault_path = q["path"][0]
                    if "bytes" in q:
                        args.blob_fault_bytes = int(q["bytes"][0])
                    if "offset" in q:
                        args.blob_fault_offset = int(q["offset"][0])
                    if "from" in q:
                        args.blob_fault_from = int(q["from"][0])
                self.simple(200, b"set")
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
            if args.bearer_max_age > 0 and self.bearer_too_old():
                with lock:
                    stats["bearer_refused"] += 1
                # The registry's own 401 and challenge: the request without its token.
                self.forward(path, drop_auth=True)
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
