#!/usr/bin/env python3
"""The container image, tested without a container engine (none runs on these machines: `docker build`
needs a Docker daemon): deploy/container/make-base.sh debootstraps the slim Debian 12 base, this script
carries out the Dockerfile's final stage on it (RUN in a chroot, COPY, ENV, USER, VOLUME, HEALTHCHECK,
ENTRYPOINT, CMD; `COPY --from=build` from this build's `cmake --install`), then runs the image's
entrypoint in a chroot of that root filesystem as the image's user, with /proc and /sys mounted as a
container has them, and checks what the image promises:
  - every shared library the binary needs is in the image; the image's size;
  - the entrypoint serves as the non-root user, the model from a mounted folder (read-only) or, by default,
    Qwen/Qwen3-VL-2B-Instruct from the hub cache in HF_HOME on the /cache volume (offline here: it must name
    that model and that cache);
  - it listens on 127.0.0.1 (and says so) unless given an API key, then on 0.0.0.0 with the key enforced;
  - the HEALTHCHECK command fails while loading and passes when ready;
  - threads follow the CPUs the "container" is given: a cpuset of one CPU, a cgroup CPU quota of one CPU;
  - SIGTERM (the STOPSIGNAL) drains and exits 0.
Needs root (debootstrap, chroot, mount). Exit 77 (CTest: skipped) without them, unless CI is set.
Usage: container_rootfs.py BUILD_DIR [--keep DIR]"""
import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "tests"))
from timing import scaled  # noqa: E402  (tests/timing.py: every timeout here is at Release speed)
DOCKERFILE = os.path.join(ROOT, "deploy", "container", "Dockerfile")
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def skip(reason):
    if os.environ.get("CI"):
        raise SystemExit(f"container_rootfs: cannot run ({reason}), and CI must run it")
    print(f"container_rootfs: skipped: {reason}")
    sys.exit(77)


def instructions(path):
    """The Dockerfile's instructions as (KEYWORD, rest), continuation lines joined, comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            kw, _, rest = cur.strip().partition(" ")
            out.append((kw.upper(), rest.strip()))
            cur = ""
    return out


def final_stage(instrs):
    last = max(i for i, (kw, _) in enumerate(instrs) if kw == "FROM")
    return instrs[last + 1:]


class Image:
    def __init__(self, rootfs, build_dir, work):
        self.rootfs, self.build_dir, self.work = rootfs, build_dir, work
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.user, self.workdir, self.volumes, self.expose = "root", "/", [], []
        self.healthcheck = self.entrypoint = self.cmd = None
        self.stopsignal = "SIGTERM"

    def path(self, p):
        return os.path.join(self.rootfs, p.lstrip("/"))

    def run_in(self, command):
        env = dict(self.env, DEBIAN_FRONTEND="noninteractive")
        r = subprocess.run(["chroot", self.rootfs, "/bin/sh", "-c", command], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"container_rootfs: RUN {command[:120]}... failed ({r.returncode}):\n{r.stderr[-2000:]}")

    def copy(self, src, dest):
        dst = self.path(dest)
        if os.path.isdir(src):
            shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=True)
        else:
            if dest.endswith("/"):
                os.makedirs(dst, exist_ok=True)
                dst = os.path.join(dst, os.path.basename(src))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)

    def apply(self, kw, rest):
        if kw == "RUN":
            self.run_in(rest)
        elif kw == "COPY":
            args = shlex.split(rest)
            if args[0].startswith("--from="):
                # The build stage installs into /opt/qvl: the same install from this build folder.
                src, dest = args[1], args[2]
                check(src.rstrip("/") == "/opt/qvl", f"COPY --from: expected /opt/qvl/, got {src}")
                prefix = os.path.join(self.work, "opt-qvl")
                subprocess.run(["cmake", "--install", self.build_dir, "--prefix", prefix, "--strip"],
                               check=True, capture_output=True)
                self.copy(prefix, dest)
            else:
                self.copy(os.path.join(ROOT, args[0]), args[1])
        elif kw == "ENV":
            for kv in shlex.split(rest):
                k, _, v = kv.partition("=")
                self.env[k] = v
        elif kw == "USER":
            self.user = rest
        elif kw == "WORKDIR":
            self.workdir = rest
            os.makedirs(self.path(rest), exist_ok=True)
        elif kw == "VOLUME":
            self.volumes += rest.split()
        elif kw == "EXPOSE":
            self.expose += [int(p.split("/")[0]) for p in rest.split()]
        elif kw == "HEALTHCHECK":
            self.healthcheck = json.loads(rest[rest.index("CMD") + 3:].strip())
        elif kw == "ENTRYPOINT":
            self.entrypoint = json.loads(rest)
        elif kw == "CMD":
            self.cmd = json.loads(rest)
        elif kw == "STOPSIGNAL":
            self.stopsignal = rest
        elif kw in ("ARG", "LABEL"):
            pass
        else:
            raise SystemExit(f"container_rootfs: the Dockerfile's final stage has {kw}, which this test cannot carry out")

    def uid_gid(self):
        with open(self.path("/etc/passwd")) as f:
            for line in f:
                p = line.split(":")
                if p[0] == self.user:
                    return int(p[2]), int(p[3])
        raise SystemExit(f"container_rootfs: USER {self.user} is not in the image's /etc/passwd")

    def start(self, args=None, env=None, cpus=None, cgroup=None, log=None):
        uid, gid = self.uid_gid()
        e = dict(self.env)
        e.update(env or {})
        argv = ["chroot", f"--userspec={uid}:{gid}", self.rootfs, "/usr/bin/env", f"--chdir={self.workdir}"]
        argv += self.entrypoint + (self.cmd if args is None else args)

        def enter():
            if cgroup:
                with open(cgroup, "w") as f:
                    f.write(str(os.getpid()))
            if cpus:
                os.sched_setaffinity(0, cpus)
        return subprocess.Popen(argv, env=e, stdout=log, stderr=subprocess.STDOUT, preexec_fn=enter)

    def exec_as_user(self, argv, env=None):
        uid, gid = self.uid_gid()
        e = dict(self.env)
        e.update(env or {})
        return subprocess.run(["chroot", f"--userspec={uid}:{gid}", self.rootfs] + argv, env=e, capture_output=True,
                              text=True, timeout=scaled(30))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, headers=None, timeout=10):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=scaled(timeout)) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return -1, ""


def wait_for(cond, seconds):
    deadline = time.monotonic() + scaled(seconds)
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def make_cpu_cgroup(name, cpus):
    """A cgroup with a CPU quota of `cpus`: v2 (cpu.max) or v1 (cpu.cfs_quota_us). Returns (procs file, dir)."""
    v2 = "/sys/fs/cgroup/cgroup.controllers"
    try:
        if os.path.exists(v2) and "cpu" in read(v2).split():
            d = f"/sys/fs/cgroup/{name}"
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cpu.max"), "w") as f:
                f.write(f"{int(cpus * 100000)} 100000")
            return os.path.join(d, "cgroup.procs"), d
        for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
            if os.path.exists(os.path.join(mount, "cpu.cfs_quota_us")):
                d = os.path.join(mount, name)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                    f.write("100000")
                with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                    f.write(str(int(cpus * 100000)))
                return os.path.join(d, "cgroup.procs"), d
    except OSError as e:
        print(f"container_rootfs: no CPU cgroup of our own ({e}); the quota check is left to the unit tests")
    return None, None


def main():
    build_dir = os.path.abspath(sys.argv[1])
    keep = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--keep" else None
    if os.geteuid() != 0:
        skip("needs root (debootstrap, chroot, mount)")
    for tool in ("debootstrap", "chroot", "mount"):
        if not shutil.which(tool):
            skip(f"no {tool} (scripts/setup installs debootstrap)")
    work = tempfile.mkdtemp(prefix="qvl-rootfs-")
    rootfs = os.path.join(work, "rootfs")
    mounts = []
    procs = []
    cgroup_dir = None
    try:
        t0 = time.monotonic()
        subprocess.run([os.path.join(ROOT, "deploy", "container", "make-base.sh"), "--rootfs-only", rootfs],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base_bytes = int(subprocess.run(["du", "-sb", rootfs], capture_output=True, text=True).stdout.split()[0])
        image = Image(rootfs, build_dir, work)
        for kw, rest in final_stage(instructions(DOCKERFILE)):
            image.apply(kw, rest)
        image_bytes = int(subprocess.run(["du", "-sb", rootfs], capture_output=True, text=True).stdout.split()[0])
        print(f"container_rootfs: base {base_bytes / 2**20:.0f} MiB, image {image_bytes / 2**20:.0f} MiB "
              f"(built in {time.monotonic() - t0:.0f} s)")

        # A container has /proc and /sys; the model folder is mounted read-only.
        for src, dst, opts in (("proc", "/proc", ["-t", "proc"]), ("/sys", "/sys", ["--rbind"])):
            os.makedirs(image.path(dst), exist_ok=True)
            subprocess.run(["mount"] + opts + [src, image.path(dst)], check=True)
            mounts.append(image.path(dst))
        model = os.path.join(work, "model")
        subprocess.run([os.path.join(build_dir, "qvl"), "make-test-model", "--preset", "tiny", "--seed", "1",
                        "--out", model], check=True, capture_output=True)
        os.makedirs(image.path("/model"), exist_ok=True)
        subprocess.run(["mount", "--bind", model, image.path("/model")], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", image.path("/model")], check=True)
        mounts.append(image.path("/model"))

        ldd = image.exec_as_user(["/usr/bin/ldd", "/usr/local/bin/qvl"])
        check(ldd.returncode == 0 and "not found" not in ldd.stdout,
              f"libraries missing from the image (deploy/container/runtime-packages.txt):\n{ldd.stdout}")
        uid, _ = image.uid_gid()
        check(uid != 0, "the image's USER is root")
        for v in image.volumes:
            check(os.stat(image.path(v)).st_uid == uid, f"volume {v} is not writable by the image's user")

        # 1. No model given, no key, offline: the default model from the hub cache on the volume.
        port = free_port()
        log = os.path.join(work, "default.log")
        with open(log, "w") as f:
            p = image.start(env={"QVL_PORT": str(port), "HF_HUB_OFFLINE": "1"}, log=f)
            procs.append(p)
            rc = p.wait(timeout=scaled(60))
        out = read(log)
        check(rc != 0, "offline without a cached model, qvl serve should exit with an error")
        check("listening on 127.0.0.1 inside the container" in out, f"no 127.0.0.1 notice without a key:\n{out}")
        check("Qwen/Qwen3-VL-2B-Instruct" in out and "/cache/huggingface" in out,
              f"the default should be Qwen/Qwen3-VL-2B-Instruct in the hub cache under /cache:\n{out}")

        # 2. The mounted model, no key: 127.0.0.1, the image's user, HEALTHCHECK, a CPU quota of one CPU.
        cg_procs, cgroup_dir = make_cpu_cgroup(f"qvl-rootfs-test-{os.getpid()}", 1.0)
        port = free_port()
        log = os.path.join(work, "model.log")
        with open(log, "w") as f:
            p = image.start(args=["serve", "--model", "/model"], env={"QVL_PORT": str(port)}, cgroup=cg_procs,
                            cpus=sorted(os.sched_getaffinity(0)), log=f)
            procs.append(p)
            hc = image.healthcheck
            early = image.exec_as_user(hc, env={"QVL_PORT": str(port)})
            ready = wait_for(lambda: http(port, "/readyz")[0] == 200, 120)
            check(ready, f"the mounted model never became ready:\n{read(log)}")
            check(early.returncode != 0 or ready, "HEALTHCHECK passed before the server answered")
            health = image.exec_as_user(hc, env={"QVL_PORT": str(port)})
            check(health.returncode == 0, f"HEALTHCHECK {hc} failed when ready: {health.stderr}")
            status = read(f"/proc/{p.pid}/status")
            m = re.search(r"^Uid:\s+(\d+)", status, re.M)
            check(m and int(m.group(1)) == uid, f"qvl runs as uid {m.group(1) if m else '?'}, expected {uid}")
            chat = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}).encode()
            code, body = http(port, "/v1/chat/completions", chat, {"Content-Type": "application/json"})
            check(code == 200, f"chat through the image: {code} {body[:200]}")
            # A PDF page through the image: its poppler-utils and the confined worker (posix_spawn of qvl itself).
            pdf = base64.b64encode(open(os.path.join(ROOT, "tests", "data", "pdf", "three_a4.pdf"), "rb").read()).decode()
            doc = json.dumps({"max_tokens": 2, "messages": [{"role": "user", "content": [
                {"type": "file", "file": {"file_data": "data:application/pdf;base64," + pdf, "pages": "2"},
                 "detail": "low"}, {"type": "text", "text": "What does it say?"}]}]}).encode()
            code, body = http(port, "/v1/chat/completions", doc, {"Content-Type": "application/json"})
            check(code == 200, f"a PDF page through the image: {code} {body[:300]}")
            p.send_signal(getattr(signal, image.stopsignal))
            rc = p.wait(timeout=scaled(60))
        out = read(log)
        check(rc == 0 and "stopped" in out, f"after {image.stopsignal}: exit {rc}:\n{out[-800:]}")
        check(f"listening on http://127.0.0.1:{port}" in out, f"without a key it must listen on 127.0.0.1:\n{out}")
        check("PDF documents rendered by Poppler in confined workers" in out, f"the image renders no PDF:\n{out}")
        if cg_procs:
            check(re.search(r"qvl serve: 1 thread: .*cgroup CPU quota 1 ", out) is not None,
                  f"a quota of one CPU should give one thread:\n{out}")

        # 3. An API key: 0.0.0.0, the key enforced; a cpuset of one CPU gives one thread.
        port = free_port()
        log = os.path.join(work, "key.log")
        one_cpu = [min(os.sched_getaffinity(0))]
        with open(log, "w") as f:
            p = image.start(args=["serve", "--model", "/model"], env={"QVL_PORT": str(port), "QVL_API_KEY": "k3y"},
                            cpus=one_cpu, log=f)
            procs.append(p)
            check(wait_for(lambda: http(port, "/readyz")[0] == 200, 120), f"not ready with a key:\n{read(log)}")
            chat = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}).encode()
            code, _ = http(port, "/v1/chat/completions", chat, {"Content-Type": "application/json"})
            check(code == 401, f"without the key: {code}, expected 401")
            code, _ = http(port, "/v1/chat/completions", chat,
                           {"Content-Type": "application/json", "Authorization": "Bearer k3y"})
            check(code == 200, f"with the key: {code}, expected 200")
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=scaled(60))
        out = read(log)
        check(f"listening on http://0.0.0.0:{port}" in out, f"with a key it should listen on 0.0.0.0:\n{out}")
        check("1 thread: 1 physical core among the 1 CPU" in out, f"one CPU in the cpuset should give one thread:\n{out}")

        if failures:
            print("container_rootfs: FAILED\n  " + "\n  ".join(failures), file=sys.stderr)
            keep = keep or os.path.join(build_dir, "container-rootfs-logs")
            return 1
        print(f"container_rootfs: passed (image {image_bytes / 2**20:.0f} MiB)")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for m in reversed(mounts):
            subprocess.run(["umount", "-R", m], capture_output=True)
        if cgroup_dir:
            try:
                os.rmdir(cgroup_dir)
            except OSError:
                pass
        if keep:
            os.makedirs(keep, exist_ok=True)
            for name in os.listdir(work):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(work, name), keep)
        # Never rmtree while something is still mounted inside.
        if not any(os.path.ismount(m) for m in mounts):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
