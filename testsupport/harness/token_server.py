#!/usr/bin/env python3
"""A Distribution-compatible token server for tests (docker/distribution docs/spec/auth/token.md).

GET /token?service=S&scope=repository:NAME:ACTIONS[&scope=...] with optional Basic credentials.
Returns {"token", "access_token", "expires_in", "issued_at"}; the token is an RS256 JWT whose
header carries the signing certificate in x5c (the registry checks it against rootcertbundle)
and whose claims are iss, sub, aud, exp, nbf, iat, jti and access [{type, name, actions}].
Signing uses the openssl CLI so the test needs nothing beyond the Python standard library.

Known users get every action they ask for; anonymous callers get pull only with
--anonymous-pull and nothing otherwise; a wrong password is a 401. GET /stats returns
{"token_requests": N, "last_scopes": [...]}.

--password-file: the password is read from this file at every request (rotated by the test).
--refresh-token: POST /token with grant_type=refresh_token&refresh_token=T&service=S&scope=...
(the OAuth2 form of distribution's token spec, what docker does with an identity token) grants
--user's access; another refresh token is a 401.
"""
import argparse
import base64
import datetime
import http.server
import json
import os
import subprocess
import threading
import time
import urllib.parse


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.token_requests = 0
        self.last_scopes = []
        der = subprocess.run(["openssl", "x509", "-in", args.cert, "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()

    def password(self) -> str:
        if self.args.password_file:
            with open(self.args.password_file) as f:
                return f.read().strip()
        return self.args.password

    def sign(self, signing_input: bytes) -> bytes:
        return subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.args.key],
                              input=signing_input, check=True, capture_output=True).stdout

    def make_token(self, subject, access):
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {
            "iss": self.args.issuer, "sub": subject, "aud": self.args.service,
            "exp": now + self.args.expires_in, "nbf": now - 1, "iat": now,
            "jti": b64url(os.urandom(12)), "access": access,
        }
        signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "." +
                         b64url(json.dumps(claims, separators=(",", ":")).encode())).encode()
        return signing_input.decode() + "." + b64url(self.sign(signing_input))


def make_handler(state: State):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # keep test output quiet
            pass

        def reply(self, code, body: dict, extra=None):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/stats":
                with state.lock:
                    self.reply(200, {"token_requests": state.token_requests,
                                     "last_scopes": state.last_scopes})
                return
            if url.path != "/token":
                self.reply(404, {"error": "not found"})
                return
            query = urllib.parse.parse_qs(url.query)
            scopes = query.get("scope", [])
            with state.lock:
                state.token_requests += 1
                state.last_scopes = scopes
            user = None
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                try:
                    u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                except Exception:
                    u, p = "", ""
                if u != state.args.user or p != state.password():
                    self.reply(401, {"errors": [{"code": "UNAUTHORIZED",
                                                 "message": "bad username or password"}]},
                               {"WWW-Authenticate": 'Basic realm="token"'})
                    return
                user = u
            self.grant(user, query, scopes)

        def do_POST(self):
            url = urllib.parse.urlsplit(self.path)
            n = int(self.headers.get("Content-Length", "0") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(n).decode()) if n else {}
            if url.path != "/token" or form.get("grant_type", [""])[0] != "refresh_token":
                self.reply(400, {"error": "unsupported_grant_type"})
                return
            scopes = form.get("scope", [])
            with state.lock:
                state.token_requests += 1
                state.last_scopes = scopes
            refresh = form.get("refresh_token", [""])[0]
            if not state.args.refresh_token or refresh != state.args.refresh_token:
                self.reply(401, {"error": "invalid_grant"})
                return
            self.grant(state.args.user, form, scopes)

        def grant(self, user, query, scopes):
            if query.get("service", [""])[0] != state.args.service:
                self.reply(400, {"errors": [{"code": "UNSUPPORTED", "message": "wrong service"}]})
                return
            access = []
            for scope in scopes:
                for one in scope.split(" "):
                    parts = one.split(":")
                    if len(parts) < 3:
                        continue
                    typ, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1].split(",")
                    if user is None:
                        actions = [a for a in actions if a == "pull" and state.args.anonymous_pull]
                    if actions:
                        access.append({"type": typ, "name": name, "actions": actions})
            token = state.make_token(user or "", access)
            issued = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.reply(200, {"token": token, "access_token": token,
                             "expires_in": state.args.expires_in, "issued_at": issued})

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--issuer", required=True)
    ap.add_argument("--service", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--expires-in", type=int, default=300)
    ap.add_argument("--anonymous-pull", action="store_true")
    ap.add_argument("--password-file", default="")
    ap.add_argument("--refresh-token", default="")
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(State(args)))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
