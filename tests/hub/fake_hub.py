#!/usr/bin/env python3
"""A fake Hugging Face hub and ModelScope on 127.0.0.1 for the qvl pull tests (Python 3 standard library only).

Serves one repository made of the files of --root through the APIs qvl uses, as the real services answer them:
  Hugging Face  GET  /api/models/ORG/NAME/revision/REV[?blobs=true]   {"sha", "siblings": [{"rfilename", "size",
                                                                       "blobId", "lfs": {"sha256", "size"}}]}
                HEAD/GET /ORG/NAME/resolve/REV/FILE    small files: 200, ETag = git blob sha1
                                                       LFS files (*.safetensors, > 1 MiB): 302 to /_cdn/SHA256 with
                                                       X-Linked-Etag, X-Linked-Size; X-Repo-Commit on both
                HEAD/GET /_cdn/SHA256                  the bytes (the "second path" of the redirect)
  ModelScope    GET  /api/v1/models/ORG/NAME/repo/files?Revision=R&Recursive=true
                                                       {"Code": 200, "Data": {"Files": [{"Path", "Size", "Sha256",
                                                       "Type": "blob", ...}]}, "Success": true}
                GET  /api/v1/models/ORG/NAME/repo?Revision=R&FilePath=F   the bytes
Every byte response honours "Range: bytes=N-". Faults: --drop-once FILE:BYTES (the first GET of FILE sends BYTES
bytes, then the connection is cut), --corrupt FILE (one byte flipped), --status CODE [--status-path SUBSTR]
(answer CODE), --rate BYTES_PER_S (slow bodies), --require-token TOKEN (401 without "Authorization: Bearer TOKEN"
or the cookie m_session_id=TOKEN), --fake-size FILE:N (the listings claim N bytes). Every request is appended to
--log as a JSON line {method, path, range, authorization, cookie}. Prints "PORT <n>" once listening.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Repo:
    def __init__(self, root, corrupt):
        self.files = {}  # name -> dict(data, sha256, sha1, lfs)
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            sha256 = hashlib.sha256(data).hexdigest()
            sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            served = data
            if name == corrupt and data:
                b = bytearray(data)
                b[len(b) // 2] ^= 0xFF
                served = bytes(b)
            lfs = name.endswith(".safetensors") or len(data) > (1 << 20)
            self.files[name] = dict(data=served, size=len(data), sha256=sha256, sha1=sha1, lfs=lfs)
        self.by_sha256 = {f["sha256"]: n for n, f in self.files.items()}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the JSON log is what the tests read
        pass

    # ---- helpers ---------------------------------------------------------------------------------------------
    def record(self):
        cfg = self.server.cfg
        if not cfg.log:
            return
        entry = dict(method=self.command, path=self.path, range=self.headers.get("Range", ""),
                     authorization=self.headers.get("Authorization", ""), cookie=self.headers.get("Cookie", ""))
        with self.server.lock:
            with open(cfg.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def send_json(self, code, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def fault(self):
        """Answers --status and --require-token; True when the request was answered."""
        cfg = self.server.cfg
        if cfg.status and (not cfg.status_path or cfg.status_path in self.path):
            code = cfg.status
            extra = {}
            if code == 401:
                extra["X-Error-Code"] = "GatedRepo"
            elif code == 404:
                extra["X-Error-Code"] = "EntryNotFound"
            self.send_json(code, {"error": "fake hub fault %d" % code}, extra)
            return True
        if cfg.require_token:
            ok = self.headers.get("Authorization", "") == "Bearer " + cfg.require_token or \
                 ("m_session_id=" + cfg.require_token) in self.headers.get("Cookie", "")
            if not ok:
                self.send_json(401, {"error": "Invalid credentials"}, {"X-Error-Code": "GatedRepo"})
                return True
        return False

    def repo_ok(self, org, name):
        return "%s/%s" % (org, name) == self.server.cfg.repo

    def send_bytes(self, name, extra=None):
        """The file's bytes with Range support, rate limit and the drop fault."""
        cfg, repo = self.server.cfg, self.server.repo
        f = repo.files[name]
        data = f["data"]
        total = len(data)
        start = 0
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes="):
            first = rng[len("bytes="):].split("-")[0]
            start = int(first) if first else 0
            if start >= total:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % total)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, total - 1, total))
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(total - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        limit = total
        with self.server.lock:
            if self.command == "GET" and cfg.drop_file == name and not self.server.dropped:
                self.server.dropped = True
                limit = min(total, start + cfg.drop_bytes)
        pos, chunk = start, 65536
        t0 = time.monotonic()
        try:
            while pos < limit:
                n = min(chunk, limit - pos)
                self.wfile.write(data[pos:pos + n])
                pos += n
                if cfg.rate:
                    ahead = (pos - start) / cfg.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if limit < total:  # the drop fault: cut the connection mid-body
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass

    # ---- routes ----------------------------------------------------------------------------------------------
    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def route(self):
        self.record()
        if self.fault():
            return
        cfg, repo = self.server.cfg, self.server.repo
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        # Hugging Face: the revision's listing
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "revision":
            org, name, rev = parts[2], parts[3], "/".join(parts[5:])
            if not self.repo_ok(org, name):
                return self.send_json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if rev not in ("main", cfg.commit):
                return self.send_json(404, {"error": "Invalid rev id: " + rev}, {"X-Error-Code": "RevisionNotFound"})
            siblings = []
            for n, f in repo.files.items():
                size = cfg.fake_sizes.get(n, f["size"])
                s = {"rfilename": n, "blobId": f["sha1"], "size": size}
                if f["lfs"]:
                    s["lfs"] = {"sha256": f["sha256"], "size": size, "pointerSize": 134}
                siblings.append(s)
            return self.send_json(200, {"id": cfg.repo, "sha": cfg.commit, "siblings": siblings})
        # Hugging Face: resolve
        if len(parts) >= 5 and parts[2] == "resolve":
            org, name, rev, fname = parts[0], parts[1], parts[3], "/".join(parts[4:])
            if not self.repo_ok(org, name):
                return self.send_json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if rev not in ("main", cfg.commit):
                return self.send_json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            f = repo.files.get(fname)
            if f is None:
                return self.send_json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            common = {"X-Repo-Commit": cfg.commit}
            if f["lfs"]:
                host = self.headers.get("Host", "127.0.0.1")
                self.send_response(302)
                self.send_header("Location", "http://%s/_cdn/%s" % (host, f["sha256"]))
                self.send_header("X-Repo-Commit", cfg.commit)
                self.send_header("X-Linked-Etag", '"%s"' % f["sha256"])
                self.send_header("X-Linked-Size", str(f["size"]))
                self.send_header("ETag", '"%s"' % f["sha1"])  # the pointer file's
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            return self.send_bytes(fname, dict(common, ETag='"%s"' % f["sha1"]))
        if len(parts) == 2 and parts[0] == "_cdn" and parts[1] in repo.by_sha256:
            return self.send_bytes(repo.by_sha256[parts[1]], {"ETag": '"%s"' % parts[1]})
        # ModelScope
        if len(parts) >= 6 and parts[:3] == ["api", "v1", "models"] and parts[5] == "repo":
            org, name = parts[3], parts[4]
            if not self.repo_ok(org, name):
                return self.send_json(404, {"Code": 10010205, "Message": "model not found", "Success": False})
            if query.get("Revision", "master") not in ("master", cfg.commit):
                return self.send_json(404, {"Code": 10010205, "Message": "revision not found", "Success": False})
            if parts[5:] == ["repo", "files"]:
                files = [dict(Name=n, Path=n, Size=cfg.fake_sizes.get(n, f["size"]), Sha256=f["sha256"], Type="blob",
                              Revision=cfg.commit, IsLFS=f["lfs"]) for n, f in repo.files.items()]
                return self.send_json(200, {"Code": 200, "Data": {"Files": files}, "Message": "success",
                                            "Success": True})
            fname = query.get("FilePath", "")
            if fname not in repo.files:
                return self.send_json(404, {"Code": 10010205, "Message": "file not found", "Success": False})
            return self.send_bytes(fname)
        return self.send_json(404, {"error": "no such path"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--repo", default="qvl-test/Tiny-VL-0.1")
    ap.add_argument("--commit", default=DEFAULT_COMMIT)
    ap.add_argument("--log", default="")
    ap.add_argument("--drop-once", default="")
    ap.add_argument("--corrupt", default="")
    ap.add_argument("--status", type=int, default=0)
    ap.add_argument("--status-path", default="")
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--require-token", default="")
    ap.add_argument("--fake-size", action="append", default=[])
    cfg = ap.parse_args()
    cfg.drop_file, cfg.drop_bytes = "", 0
    if cfg.drop_once:
        cfg.drop_file, n = cfg.drop_once.rsplit(":", 1)
        cfg.drop_bytes = int(n)
    cfg.fake_sizes = {k: int(v) for k, v in (s.rsplit(":", 1) for s in cfg.fake_size)}

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.cfg = cfg
    server.repo = Repo(cfg.root, cfg.corrupt)
    server.lock = threading.Lock()
    server.dropped = False
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
