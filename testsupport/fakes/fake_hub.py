#!/usr/bin/env python3
"""A fake Hugging Face Hub for tests: the Hub's HTTP behaviour on loopback, plus a "CDN".

Two HTTP/1.1 servers on 127.0.0.1 with ephemeral ports, written to --port-file as
{"hub": N, "cdn": M} once both listen:

  hub  GET /api/models/{repo}/revision/{rev}[?blobs=true]
         200 {"id", "modelId", "sha", "private", "gated", "siblings": [{"rfilename",
         "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]} (size, blobId and lfs
         only with blobs=true, as the Hub does); a branch or tag resolves to its commit.
       GET|HEAD /{repo}/resolve/{rev}/{path}
         LFS files: 302 to http://127.0.0.1:<cdn>/lfs/<sha256>?X-Amz-Signature=... with
           X-Repo-Commit, X-Linked-Etag ("<sha256>") and X-Linked-Size; no body.
         other files: 200 with the bytes, X-Repo-Commit and ETag ("<git blob sha1>").
       errors carry X-Error-Code and X-Error-Message like the Hub: 404 RepoNotFound /
         RevisionNotFound / EntryNotFound; 401 RepoNotFound for a missing or private repository
         without a token; 401 GatedRepo from resolve for a gated repository without a token
         (its API metadata stays public); 401 "Invalid credentials in Authorization header" for
         a wrong token; 403 GatedRepo for a valid token the repository has not approved.
  cdn  GET|HEAD /lfs/<sha256>: the bytes (flipped at the repository's "tamper" offsets).

The state is a JSON file (--state), read again on every request so a test can change it
between calls:

  {"tokens": {"hf_good": ["org/gated"]},   # token -> repositories it is approved for ("*": all)
   "lfs_threshold": 1024,                   # files of at least this many bytes live in LFS
   "repos": {"org/name": {
       "gated": false | "auto" | "manual", "private": false,
       "commits": {"<40 hex>": "<directory of the files, absolute or relative to the state>"},
       "refs": {"main": ["<sha A>", "<sha B>"]},  # each revision-API call for the ref answers
                                                    # the next entry (the last one sticks), so
                                                    # a branch moves between two calls
       "tamper": {"model.safetensors": 100},        # the CDN flips the byte at this offset
       "lfs": ["small.bin"]}}}                      # also in LFS whatever their size

--log FILE appends one JSON line per request: server, method, path, status, auth (whether an
Authorization header came; its value is never logged). Only the Python standard library.
"""

import argparse
import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
import urllib.parse


class Hub:
    def __init__(self, args):
        self.state_path = os.path.abspath(args.state)
        self.lock = threading.Lock()
        self.ref_calls = {}  # (repo, ref) -> revision-API calls answered
        self.hash_cache = {}
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.cdn_port = 0

    def state(self):
        with open(self.state_path) as f:
            return json.load(f)

    def write_log(self, **entry):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(entry) + "\n")

    def commit_dir(self, repo_state, sha):
        d = repo_state["commits"][sha]
        return d if os.path.isabs(d) else os.path.join(os.path.dirname(self.state_path), d)

    def files(self, repo_state, sha):
        root = self.commit_dir(repo_state, sha)
        out = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), full))
        return sorted(out)

    def hashes(self, full):
        st = os.stat(full)
        key = (full, st.st_size, st.st_mtime_ns)
        if key not in self.hash_cache:
            with open(full, "rb") as f:
                data = f.read()
            sha256 = hashlib.sha256(data).hexdigest()
            git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
                       % (sha256, len(data))).encode()
            pointer_id = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
            self.hash_cache[key] = (len(data), sha256, git, pointer_id, len(pointer))
        return self.hash_cache[key]

    def is_lfs(self, state, repo_state, path, size):
        return path in repo_state.get("lfs", []) or size >= state.get("lfs_threshold", 1024)

    def resolve(self, repo_state, repo, rev, advance):
        """The commit for rev, or None. A ref answers its current entry; `advance` moves it."""
        if rev in repo_state.get("commits", {}):
            return rev
        refs = repo_state.get("refs", {})
        if rev not in refs:
            return None
        targets = refs[rev] if isinstance(refs[rev], list) else [refs[rev]]
        with self.lock:
            n = self.ref_calls.get((repo, rev), 0)
            if advance:
                self.ref_calls[(repo, rev)] = n + 1
        return targets[min(n, len(targets) - 1)]


def split_repo(parts):
    """['org', 'name', ...] -> ('org/name', rest); a repository id has at most one '/'."""
    if len(parts) >= 2:
        return "/".join(parts[:2]), parts[2:]
    return None, parts


class HubHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-hub/1"

    def log_message(self, fmt, *args):
        pass

    @property
    def hub(self):
        return self.server.hub

    def send(self, status, body=b"", headers=None, content_type="application/json"):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.hub.write_log(server="hub", method=self.command, path=self.path, status=status,
                           auth="Authorization" in self.headers)

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send(status, body, {"X-Error-Code": code, "X-Error-Message": message})

    def token(self):
        h = self.headers.get("Authorization", "")
        return h[len("Bearer "):].strip() if h.startswith("Bearer ") else None

    def access(self, state, repo, repo_state, for_files):
        """True when allowed; otherwise the error answer is sent and this returns False."""
        token = self.token()
        tokens = state.get("tokens", {})
        if token is not None and token not in tokens:
            self.error(401, "", "Invalid credentials in Authorization header")
            return False
        approved = token is not None and (repo in tokens[token] or "*" in tokens[token])
        if repo_state is None or (repo_state.get("private") and not approved):
            if token is None:
                self.error(401, "RepoNotFound", "Repository not found")
            else:
                self.error(404, "RepoNotFound", "Repository not found")
            return False
        if for_files and repo_state.get("gated") and not approved:
            msg = ("Access to model %s is restricted. You must have access to it and be "
                   "authenticated to access it. Please log in." % repo)
            if token is None:
                self.error(401, "GatedRepo", msg)
            else:
                self.error(403, "GatedRepo", "Access to model %s is restricted and you are not "
                           "in the authorized list." % repo)
            return False
        return True

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        try:
            state = self.hub.state()
        except (OSError, ValueError) as e:
            self.send(500, str(e).encode(), content_type="text/plain")
            return
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "models":
            repo, rest = split_repo(parts[2:])
            if repo is None or len(rest) != 2 or rest[0] != "revision":
                self.error(404, "", "Not found")
                return
            self.api_revision(state, repo, rest[1], query.get("blobs", ["false"])[0] == "true")
            return
        repo, rest = split_repo(parts)
        if repo is None or len(rest) < 3 or rest[0] != "resolve":
            self.error(404, "", "Not found")
            return
        self.resolve_file(state, repo, rest[1], "/".join(rest[2:]))

    def api_revision(self, state, repo, rev, blobs):
        repo_state = state.get("repos", {}).get(repo)
        if not self.access(state, repo, repo_state, for_files=False):
            return
        sha = self.hub.resolve(repo_state, repo, rev, advance=True)
        if sha is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return
        siblings = []
        for path, full in self.hub.files(repo_state, sha):
            entry = {"rfilename": path}
            if blobs:
                size, sha256, git, pointer_id, pointer_size = self.hub.hashes(full)
                entry["size"] = size
                if self.hub.is_lfs(state, repo_state, path, size):
                    entry["blobId"] = pointer_id
                    entry["lfs"] = {"sha256": sha256, "size": size, "pointerSize": pointer_size}
                else:
                    entry["blobId"] = git
            siblings.append(entry)
        body = {"_id": "fake" + sha[:20], "id": repo, "modelId": repo, "sha": sha,
                "private": bool(repo_state.get("private")), "gated": repo_state.get("gated", False),
                "disabled": False, "lastModified": "2026-01-01T00:00:00.000Z",
                "siblings": siblings}
        self.send(200, json.dumps(body).encode())

    def resolve_file(self, state, repo, rev, path):
        repo_state = state.get("repos", {}).get(repo)
        if not self.access(state, repo, repo_state, for_files=True):
            return
        sha = self.hub.resolve(repo_state, repo, rev, advance=False)
        if sha is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return
        full = dict(self.hub.files(repo_state, sha)).get(path)
        if full is None:
            self.error(404, "EntryNotFound", "Entry not found")
            return
        size, sha256, git, _, _ = self.hub.hashes(full)
        if self.hub.is_lfs(state, repo_state, path, size):
            tamper = repo_state.get("tamper", {}).get(path)
            q = urllib.parse.urlencode({"repo": repo, "path": path,
                                        "X-Amz-Signature": "fake" + sha256[:16]})
            location = "http://127.0.0.1:%d/lfs/%s?%s" % (self.hub.cdn_port, sha256, q)
            self.send(302, b"", {"Location": location, "X-Repo-Commit": sha,
                                 "X-Linked-Etag": '"%s"' % sha256, "X-Linked-Size": str(size),
                                 "ETag": '"%s"' % sha256}, content_type="text/plain")
            return
        with open(full, "rb") as f:
            data = f.read()
        self.send(200, data, {"X-Repo-Commit": sha, "ETag": '"%s"' % git},
                  content_type="application/octet-stream")


class CdnHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-cdn/1"

    def log_message(self, fmt, *args):
        pass

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        hub = self.server.hub
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = url.path.split("/")[1:]
        status, data = 404, b"no such object"
        if len(parts) == 2 and parts[0] == "lfs":
            state = hub.state()
            repo = query.get("repo", [""])[0]
            path = query.get("path", [""])[0]
            repo_state = state.get("repos", {}).get(repo, {})
            for sha in repo_state.get("commits", {}):
                full = dict(hub.files(repo_state, sha)).get(path)
                if full and hub.hashes(full)[1] == parts[1]:
                    with open(full, "rb") as f:
                        data = bytearray(f.read())
                    offset = repo_state.get("tamper", {}).get(path)
                    if offset is not None and offset < len(data):
                        data[offset] ^= 0xFF
                    status, data = 200, bytes(data)
                    break
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        hub.write_log(server="cdn", method=self.command, path=url.path, status=status,
                      auth="Authorization" in self.headers)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log")
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    args = p.parse_args()
    hub = Hub(args)
    servers = []
    for handler in (HubHandler, CdnHandler):
        s = Server(("127.0.0.1", 0), handler)
        s.hub = hub
        servers.append(s)
        threading.Thread(target=s.serve_forever, daemon=True).start()
    hub.cdn_port = servers[1].server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"hub": servers[0].server_address[1], "cdn": hub.cdn_port}, f)
    os.rename(tmp, args.port_file)
    if args.exit_on_stdin_eof:
        sys.stdin.read()
    else:
        threading.Event().wait()


if __name__ == "__main__":
    main()
