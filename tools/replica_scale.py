#!/usr/bin/env python3
"""Scale figures for BENCHMARKS.md (not a test): R replicas of `qvl serve` behind nginx (deploy/nginx, as
tests/deploy/nginx_failover.py configures it), and tools/load_test.py's concurrent scenario through nginx.
Usage: tools/replica_scale.py --qvl build/qvl --model DIR --image FILE.png --replicas 1,2,3
                              [--threads-per-replica N] [--concurrency 6] [--max-tokens 64] [-- serve options]
Each replica gets --threads (default: the machine's cores divided by R, at least 1)."""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "deploy"))
from nginx_failover import free_port, get, nginx_config, wait_until  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--replicas", default="1,2,3")
    ap.add_argument("--threads-per-replica", type=int, default=0)
    ap.add_argument("--concurrency", default="6")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("serve_args", nargs="*")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    for r in [int(x) for x in args.replicas.split(",")]:
        threads = args.threads_per_replica or max(1, cores // r)
        work = tempfile.mkdtemp(prefix="qvl-scale-")
        procs = []
        try:
            ports = [free_port() for _ in range(r)]
            for i, p in enumerate(ports):
                log = open(os.path.join(work, f"replica-{i}.log"), "w")
                procs.append(subprocess.Popen([args.qvl, "serve", "--model", args.model, "--port", str(p),
                                               "--threads", str(threads), "--quiet"] + args.serve_args,
                                              stdout=log, stderr=subprocess.STDOUT))
            for p in ports:
                wait_until(lambda p=p: get(p, "/readyz")[0] == 200, 600, f"replica on {p}")
            port = free_port()
            conf = nginx_config(work, port, ports)
            nginx = subprocess.Popen([args.nginx, "-c", conf, "-p", work, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(nginx)
            wait_until(lambda: get(port, "/nginx-health")[0] == 200, 10, "nginx")
            print(f"== {r} replica(s) x {threads} thread(s) on {cores} CPUs", flush=True)
            subprocess.run([sys.executable, os.path.join(HERE, "load_test.py"), "--url", f"http://127.0.0.1:{port}",
                            "--image", args.image, "--scenario", "concurrent", "--concurrency", args.concurrency,
                            "--max-tokens", str(args.max_tokens)], check=True)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
            shutil.rmtree(work, ignore_errors=True)
        time.sleep(2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
