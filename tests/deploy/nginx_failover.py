#!/usr/bin/env python3
"""Replicas behind nginx, with faults: deploy/nginx/qvl.conf in front of three `qvl serve --demo` replicas on
loopback; 60 chat requests (half streamed), and while they run replica A is killed with SIGKILL and replica
B drained with SIGTERM. Checks:
  - every request that did not end on the killed replica succeeds, complete (streams end with [DONE]);
  - the only requests that fail are streams that had started on the killed replica, and their client sees
    an error (the chunked body ends without its last chunk), not a clean end and not silence;
  - requests that A or B did not take (refused, reset, 503 while draining) were retried on another replica;
  - B finishes its running requests and exits 0.
Prints the counts. Standard library only; nginx from Debian (scripts/setup installs nginx-light).
Usage: nginx_failover.py QVL_BINARY [--nginx PATH] [--keep DIR]
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "tests"))
from timing import scaled  # noqa: E402  (tests/timing.py: every timeout here is at Release speed)
REQUESTS = 60
CONCURRENCY = 24


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(timeout))
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def metric(port, name):
    try:
        _, page = get(port, "/metrics", timeout=2)
    except OSError:
        return -1
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return -1


def wait_until(check, seconds, what):
    seconds = scaled(seconds)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"nginx_failover: timed out after {seconds:.0f} s waiting for {what}")


def nginx_config(work, port, replicas):
    """The main nginx.conf: deploy/nginx's two files as they are, but for the listen line and the ports."""
    with open(os.path.join(ROOT, "deploy", "nginx", "qvl-upstream.conf")) as f:
        upstream = f.read()
    lines = [l for l in upstream.splitlines() if not l.strip().startswith("server 127.0.0.1:")]
    at = next(i for i, l in enumerate(lines) if l.strip() == "least_conn;")
    for p in reversed(replicas):
        lines.insert(at + 1, f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;")
    with open(os.path.join(work, "qvl-upstream.conf"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(ROOT, "deploy", "nginx", "qvl.conf")) as f:
        site = f.read()
    assert "    listen 80;\n" in site, "deploy/nginx/qvl.conf: expected its 'listen 80;' line"
    with open(os.path.join(work, "qvl.conf"), "w") as f:
        f.write(site.replace("    listen 80;\n", f"    listen 127.0.0.1:{port};\n"))
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(work, "tmp", d), exist_ok=True)
    conf = f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log info;
events {{ worker_connections 512; }}
http {{
    log_format failover '$http_x_test_id "$upstream_addr" "$upstream_status" $status $bytes_sent';
    access_log {work}/access.log failover;
    client_body_temp_path {work}/tmp/body;
    proxy_temp_path {work}/tmp/proxy;
    fastcgi_temp_path {work}/tmp/fastcgi;
    uwsgi_temp_path {work}/tmp/uwsgi;
    scgi_temp_path {work}/tmp/scgi;
    include {work}/qvl-upstream.conf;
    include {work}/qvl.conf;
}}
"""
    path = os.path.join(work, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return path


def one_request(port, i, stream, max_tokens):
    """Sends chat request i through nginx. Returns a dict: outcome ok | cut | failed, and what was seen."""
    body = json.dumps({
        "model": "qvl-demo-tiny",
        "messages": [{"role": "user", "content": f"Request {i}: describe the weather in {random.random()}"}],
        "max_tokens": max_tokens, "stream": stream, "temperature": 0,
    })
    out = {"id": i, "stream": stream, "status": None, "bytes": 0, "outcome": "failed", "detail": ""}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(120))
    try:
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Content-Type": "application/json", "X-Test-Id": str(i)})
        r = c.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["detail"] = r.read().decode("utf-8", "replace")[:300]
            return out
        data = b""
        try:
            while True:
                piece = r.read1(65536) if stream else r.read()
                if not piece:
                    break
                data += piece
                out["bytes"] = len(data)
                if not stream:
                    break
        except (http.client.IncompleteRead, ConnectionError, OSError) as e:
            out["outcome"] = "cut"
            out["detail"] = f"{type(e).__name__} after {len(data)} bytes"
            return out
        text = data.decode("utf-8", "replace")
        if stream:
            events = [l[6:] for l in text.splitlines() if l.startswith("data: ")]
            if events and events[-1] == "[DONE]" and any('"finish_reason":"length"' in e or '"finish_reason":"stop"' in e
                                                          for e in events[-3:]):
                out["outcome"] = "ok"
            else:
                out["detail"] = "stream ended without [DONE] and a finish_reason: " + text[-200:]
        else:
            try:
                j = json.loads(text)
                out["outcome"] = "ok" if j["choices"][0]["finish_reason"] in ("length", "stop") else "failed"
            except (ValueError, KeyError, IndexError) as e:
                out["detail"] = f"not a completion ({e}): {text[:200]}"
        return out
    except (ConnectionError, OSError, http.client.HTTPException) as e:
        out["outcome"] = "cut" if out["status"] == 200 else "failed"
        out["detail"] = f"{type(e).__name__}: {e}"
        return out
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("qvl")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--keep", help="keep the logs in this folder")
    args = ap.parse_args()
    if not os.path.exists(args.nginx):
        raise SystemExit(f"nginx_failover: no nginx at {args.nginx} (scripts/setup installs nginx-light)")
    random.seed(7)
    work = tempfile.mkdtemp(prefix="qvl-nginx-")
    os.chmod(work, 0o755)
    procs, logs = {}, {}
    nginx = None
    try:
        ports = {name: free_port() for name in "ABC"}
        for name, p in ports.items():
            logs[name] = open(os.path.join(work, f"replica-{name}.log"), "w")
            procs[name] = subprocess.Popen(
                [args.qvl, "serve", "--demo", "--port", str(p), "--threads", "1", "--parallel", "4",
                 "--queue", "64", "--shutdown-grace", str(round(scaled(60)))],
                stdout=logs[name], stderr=subprocess.STDOUT)
        for name, p in ports.items():
            wait_until(lambda p=p: get(p, "/readyz")[0] == 200, 120, f"replica {name} ready")
        port = free_port()
        conf = nginx_config(work, port, list(ports.values()))
        test = subprocess.run([args.nginx, "-t", "-c", conf, "-p", work], capture_output=True, text=True)
        if test.returncode != 0:
            raise SystemExit("nginx_failover: nginx -t refused the config:\n" + test.stderr)
        nginx = subprocess.Popen([args.nginx, "-c", conf, "-p", work, "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "nginx.stderr"), "w"))
        wait_until(lambda: get(port, "/nginx-health")[0] == 200, 10, "nginx")

        jobs = []
        with cf.ThreadPoolExecutor(CONCURRENCY) as pool:
            for i in range(REQUESTS):
                jobs.append(pool.submit(one_request, port, i, i % 2 == 0, random.randint(150, 450)))
                time.sleep(0.02)
            # Faults while the first requests run: both replicas busy first, so streams are cut mid-answer
            # and requests are in flight on the draining one.
            wait_until(lambda: metric(ports["A"], "qvl_requests_running") >= 2 and
                       metric(ports["B"], "qvl_requests_running") >= 2, 60, "replicas A and B both answering")
            procs["A"].send_signal(signal.SIGKILL)
            t_kill = time.monotonic()
            time.sleep(0.3)
            procs["B"].send_signal(signal.SIGTERM)
            results = [j.result(timeout=scaled(300)) for j in jobs]
        b_rc = procs["B"].wait(timeout=scaled(90))
        elapsed = time.monotonic() - t_kill

        nginx.send_signal(signal.SIGQUIT)  # graceful: flushes the access log
        nginx.wait(timeout=scaled(10))
        upstream_of = {}
        with open(os.path.join(work, "access.log")) as f:
            for line in f:
                parts = line.split('"')
                rid = parts[0].strip()
                if rid.isdigit():
                    upstream_of[int(rid)] = (parts[1], parts[3])
        a_addr = f"127.0.0.1:{ports['A']}"
        names = {f"127.0.0.1:{p}": n for n, p in ports.items()}

        failures = []
        counts = {"requests": len(results), "ok": 0, "cut_on_killed": 0, "retried": 0,
                  "final_replica": {"A": 0, "B": 0, "C": 0}}
        for r in results:
            addrs, statuses = upstream_of.get(r["id"], ("", ""))
            tried = [a.strip() for a in addrs.replace(" : ", ", ").split(",") if a.strip()]
            final = tried[-1] if tried else ""
            if len(tried) > 1:
                counts["retried"] += 1
            if final in names:
                counts["final_replica"][names[final]] += 1
            if r["outcome"] == "ok":
                counts["ok"] += 1
            elif r["outcome"] == "cut" and r["stream"] and final == a_addr and r["status"] == 200:
                counts["cut_on_killed"] += 1
            else:
                failures.append(f"request {r['id']} ({'stream' if r['stream'] else 'plain'}): {r['outcome']}, "
                                f"HTTP {r['status']}, {r['bytes']} bytes, upstreams '{addrs}' statuses "
                                f"'{statuses}': {r['detail']}")
        if b_rc != 0:
            failures.append(f"replica B (SIGTERM) exited with {b_rc}, expected 0 after draining")
        if counts["final_replica"]["C"] == 0:
            failures.append("replica C took no request: the failover had nowhere to go?")
        counts["seconds_after_kill"] = round(elapsed, 1)
        print("nginx_failover: " + json.dumps(counts))
        if failures:
            print("nginx_failover: FAILED\n  " + "\n  ".join(failures) + f"\n  logs in {work}", file=sys.stderr)
            args.keep = args.keep or work
            return 1
        print("nginx_failover: passed")
        return 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        if nginx and nginx.poll() is None:
            nginx.kill()
            nginx.wait()
        for f in logs.values():
            f.close()
        if args.keep:
            if os.path.abspath(args.keep) != work:
                shutil.copytree(work, args.keep, dirs_exist_ok=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
