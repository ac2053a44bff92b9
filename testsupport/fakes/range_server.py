#!/usr/bin/env python3
"""A small HTTP/1.1 file server with Range support and fault injection, for tests.

Serves the files under --root (GET and HEAD, single-range `Range: bytes=a-b`, `a-`, `-n`,
206 + Content-Range, 416 with `bytes */N`, keep-alive). Binds 127.0.0.1 on an ephemeral port
and prints "PORT <n>" as its first stdout line.

Fault modes (combine freely):
  --ignore-range          always answer 200 with the whole file
  --corrupt-offset N      flip (xor 0xff) the byte at absolute offset N of every served file
  --reset-after-bytes N   send at most N body bytes per response, then reset the connection
  --delay-ms N            sleep N ms before answering each request (after logging it)
  --fail-first N          answer --fail-status (503) to the first N requests
  --require-token T       answer 401 unless the request carries "Authorization: Bearer T"
  --token-realm PATH      with --require-token: the 401 names http://<Host>PATH as the Bearer
                          realm, and PATH itself is served without a token (put a token
                          response, {"token": "T", "expires_in": N}, in a file there)
  --redirect-host H       answer 302 to http://H:<port><path> unless the Host header names H
                          (a cross-host redirect: 127.0.0.1 -> localhost, say)
  --log FILE              one JSON line per request: method, path, query, range, status, bytes
                          (body bytes the response carries), conn (client port; equal values
                          mean a reused connection), auth (whether Authorization was sent; the
                          value is never logged). A line is written before the body is sent, so
                          a client that has its response can read the line.
  --exit-on-stdin-eof     exit when stdin closes (the parent that holds the pipe died)

Faults can also be changed while the server runs: `PUT /__faults` with a JSON object whose
keys are the fault flags with underscores (ignore_range, corrupt_offset, reset_after_bytes,
delay_ms, fail_first, fail_status, require_token, token_realm, redirect_host) replaces all of them (absent
keys are off) and restarts the fail_first count. Control requests are neither logged nor faulted.

A PUT to any other path is an upload: the body is read whole, logged with its length as
`bytes`, and answered 201 (nothing is stored).

Only the Python 3 standard library is used.
"""

import argparse
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse


FAULT_DEFAULTS = {
    "ignore_range": False,
    "corrupt_offset": None,
    "reset_after_bytes": None,
    "delay_ms": 0,
    "fail_first": 0,
    "fail_status": 503,
    "require_token": None,
    "token_realm": None,
    "redirect_host": None,
}


class State:
    def __init__(self, args):
        self.root = os.path.realpath(args.root)
        self.lock = threading.Lock()
        self.faults = {k: getattr(args, k) for k in FAULT_DEFAULTS}
        self.fail_remaining = self.faults["fail_first"]
        self.log = open(args.log, "a", buffering=1) if args.log else None

    def set_faults(self, faults):
        unknown = set(faults) - set(FAULT_DEFAULTS)
        if unknown:
            raise ValueError("unknown faults: %s" % ", ".join(sorted(unknown)))
        with self.lock:
            self.faults = dict(FAULT_DEFAULTS, **faults)
            self.fail_remaining = self.faults["fail_first"] or 0

    def begin_request(self):
        """Returns (the faults for this request, whether it is one of the first N to fail)."""
        with self.lock:
            fail = self.fail_remaining > 0
            if fail:
                self.fail_remaining -= 1
            return dict(self.faults), fail

    def write_log(self, entry):
        if self.log is None:
            return
        line = json.dumps(entry, sort_keys=True)
        with self.lock:
            self.log.write(line + "\n")
            self.log.flush()


def parse_range(header, size):
    """Returns (first, last) for a satisfiable single range, "unsatisfiable", or None to
    serve the whole file (no header, a malformed one, or several ranges)."""
    if header is None:
        return None
    header = header.strip()
    if not header.startswith("bytes=") or "," in header:
        return None
    spec = header[len("bytes="):].strip()
    if "-" not in spec:
        return None
    first_s, last_s = spec.split("-", 1)
    try:
        if first_s == "":
            n = int(last_s)
            if n == 0:
                return "unsatisfiable"
            return (max(0, size - n), size - 1) if size > 0 else "unsatisfiable"
        first = int(first_s)
        last = int(last_s) if last_s != "" else size - 1
    except ValueError:
        return None
    if first < 0 or last < first:
        return None
    if first >= size:
        return "unsatisfiable"
    return (first, min(last, size - 1))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "range_server/1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle and the client's
        # delayed ACK stall every keep-alive response by ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    @property
    def state(self):
        return self.server.state

    def do_GET(self):
        self.serve(send_body=True)

    def do_HEAD(self):
        self.serve(send_body=False)

    def do_PUT(self):
        length = int(self.headers.get("Content-Length") or 0)
        if urllib.parse.urlsplit(self.path).path != "/__faults":
            # An upload: the body is read whole before the answer, so a client never races a
            # reply to a request it is still sending; the log records how many bytes came.
            body = self.rfile.read(length)
            self.state.write_log(self.entry(201, len(body)))
            self.simple(201, b"stored\n", log=False)
            return
        try:
            faults = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(faults, dict):
                raise ValueError("want a JSON object")
            self.state.set_faults(faults)
        except ValueError as e:
            self.simple(400, ("%s\n" % e).encode(), log=False)
            return
        self.simple(200, b"ok\n", log=False)

    def entry(self, status, nbytes):
        return {
            "method": self.command,
            "path": urllib.parse.urlsplit(self.path).path,
            "query": urllib.parse.urlsplit(self.path).query,
            "range": self.headers.get("Range"),
            "status": status,
            "bytes": nbytes,
            "conn": self.client_address[1],
            "auth": self.headers.get("Authorization") is not None,
        }

    def pause(self):
        # The delay comes after the log line, so a client that gave up waiting still finds
        # its request logged, and a later test never sees a late line from an earlier one.
        if getattr(self, "delay_ms", 0):
            time.sleep(self.delay_ms / 1000.0)

    def simple(self, status, body=b"", extra_headers=(), log=True):
        if log:
            self.state.write_log(self.entry(status, len(body) if self.command != "HEAD" else 0))
            self.pause()
        self.send_response(status)
        for k, v in extra_headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def serve(self, send_body):
        faults, fail = self.state.begin_request()
        self.delay_ms = faults["delay_ms"]
        if fail:
            self.simple(faults["fail_status"], b"injected failure\n")
            return
        if faults["redirect_host"]:
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            if host != faults["redirect_host"]:
                port = self.server.server_address[1]
                target = "http://%s:%d%s" % (faults["redirect_host"], port, self.path)
                self.simple(302, b"", [("Location", target)])
                return
        realm_path = faults["token_realm"]
        is_realm = realm_path and urllib.parse.urlsplit(self.path).path == realm_path
        if faults["require_token"] and not is_realm:
            if self.headers.get("Authorization") != "Bearer " + faults["require_token"]:
                realm = "test"
                if realm_path:
                    realm = "http://%s%s" % (self.headers.get("Host") or "127.0.0.1", realm_path)
                self.simple(401, b"unauthorized\n", [("WWW-Authenticate", 'Bearer realm="%s"' % realm)])
                return

        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        full = os.path.realpath(os.path.join(self.state.root, rel))
        if not (full == self.state.root or full.startswith(self.state.root + os.sep)):
            self.simple(403, b"outside the served directory\n")
            return
        if not os.path.isfile(full):
            self.simple(404, b"not found\n")
            return
        size = os.path.getsize(full)

        rng = None if faults["ignore_range"] else parse_range(self.headers.get("Range"), size)
        if rng == "unsatisfiable":
            self.simple(416, b"", [("Content-Range", "bytes */%d" % size)])
            return
        if rng is None:
            status, first, last = 200, 0, size - 1
        else:
            status, (first, last) = 206, rng
        length = last - first + 1 if size > 0 else 0
        to_send = length if send_body else 0
        if faults["reset_after_bytes"] is not None:
            to_send = min(to_send, faults["reset_after_bytes"])
        self.state.write_log(self.entry(status, to_send))
        self.pause()

        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(length))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        if not send_body:
            return
        self.send_file(full, first, length, to_send, faults["corrupt_offset"])

    def send_file(self, full, first, length, to_send, corrupt_offset):
        sent = 0
        with open(full, "rb") as f:
            f.seek(first)
            while sent < to_send:
                chunk = f.read(min(1 << 20, to_send - sent))
                if not chunk:
                    break
                if corrupt_offset is not None:
                    rel = corrupt_offset - (first + sent)
                    if 0 <= rel < len(chunk):
                        chunk = bytearray(chunk)
                        chunk[rel] ^= 0xFF
                        chunk = bytes(chunk)
                self.wfile.write(chunk)
                sent += len(chunk)
        if sent < length:
            self.reset_connection()

    def reset_connection(self):
        self.wfile.flush()
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients that hang up mid-response (and our own resets) are expected here.
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ValueError)):
            return
        super().handle_error(request, client_address)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="directory to serve")
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ignore-range", action="store_true")
    p.add_argument("--corrupt-offset", type=int)
    p.add_argument("--reset-after-bytes", type=int)
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--fail-status", type=int, default=503)
    p.add_argument("--require-token")
    p.add_argument("--token-realm")
    p.add_argument("--redirect-host")
    p.add_argument("--log")
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    args = p.parse_args()

    server = Server((args.bind, args.port), Handler)
    server.state = State(args)
    if args.exit_on_stdin_eof:
        def watch_stdin():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            finally:
                os._exit(0)
        threading.Thread(target=watch_stdin, daemon=True).start()
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
