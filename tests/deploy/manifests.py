#!/usr/bin/env python3
"""The deployment files, checked against their schemas and against qvl itself:
  - deploy/k8s: every manifest valid against the Kubernetes schemas (strict: unknown fields refused) of the
    newest and an older supported release; the pieces agree (Service selector, claim and secret names, HPA
    target); probes, drain timing and ports agree with what qvl serves and with its settings;
  - deploy/systemd/qvl.service: `systemd-analyze verify` silent, `systemd-analyze security` exposure <= 2.0;
  - deploy/container: compose.yaml and the Dockerfile refer to files the build context holds;
  - every QVL_* variable any of them sets is an option of `qvl serve`, and docs/DEPLOY.md lists them all;
  - the readiness contract: `qvl serve --demo` under $NOTIFY_SOCKET sends READY=1 once /readyz is 200,
    each probe path the manifests use answers 200, the HPA's metric is on /metrics, and SIGTERM sends
    STOPPING=1 and exits 0.
Usage (tests/deploy/run manifests.py QVL_BINARY)."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import kubernetes_validate
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "tests"))
from timing import scaled  # noqa: E402  (tests/timing.py: every timeout here is at Release speed)
DEPLOY = os.path.join(ROOT, "deploy")
K8S_VERSIONS = ["1.37.0", "1.31.0"]
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def serve_env_names(qvl):
    out = subprocess.run([qvl, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\[(QVL_[A-Z0-9_]+)\]", out))


def qvl_vars_in(text):
    return set(re.findall(r"\b(QVL_[A-Z0-9_]+)\b", text))


# Variables the container entrypoint reads itself (deploy/container/entrypoint.sh), not qvl serve options.
ENTRYPOINT_VARS = {"QVL_LISTEN_ALL", "QVL_BINARY"}


def seconds(value):
    m = re.fullmatch(r"(\d+)(s|min)?", str(value).strip())
    assert m, f"not a duration: {value}"
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def check_kubernetes(env_names):
    docs = {}
    for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                name = os.path.relpath(path, ROOT)
                if doc.get("kind") == "Kustomization":
                    listed = set(doc["resources"])
                    present = {os.path.basename(p) for p in glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))}
                    check(listed == present - {"kustomization.yaml"},
                          f"{name}: resources {sorted(listed)} != the manifests {sorted(present)}")
                    continue
                for version in K8S_VERSIONS:
                    try:
                        kubernetes_validate.validate(doc, version, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        failures.append(f"{name}: {doc.get('kind')} invalid for Kubernetes {version}: {e.message} "
                                        f"at {'/'.join(str(p) for p in e.path)}")
                docs[doc["kind"]] = doc
    for kind in ("Deployment", "Service", "PersistentVolumeClaim", "Secret", "HorizontalPodAutoscaler"):
        check(kind in docs, f"deploy/k8s: no {kind}")
    dep = docs["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(dep["spec"]["selector"]["matchLabels"].items() <= labels.items(), "Deployment selector does not match its pods")
    check(docs["Service"]["spec"]["selector"].items() <= labels.items(), "Service selector does not match the pods")
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    check(hpa["scaleTargetRef"]["name"] == dep["metadata"]["name"], "HPA scales another Deployment")
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    check(docs["PersistentVolumeClaim"]["metadata"]["name"] in claims, "the pods do not mount the model-cache claim")
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    for e in env:
        if e.startswith("QVL_"):
            check(e in env_names, f"deploy/k8s/deployment.yaml sets {e}, which is no option of qvl serve")
    secret_refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in env.values() if "valueFrom" in e}
    check(docs["Secret"]["metadata"]["name"] in secret_refs, "the pods do not read the API key secret")
    port = int(env["QVL_PORT"]["value"])
    check(container["ports"][0]["containerPort"] == port, "containerPort differs from QVL_PORT")
    probes = {k: container[k]["httpGet"]["path"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    check(probes["readinessProbe"] == "/readyz", "the readiness probe should be /readyz (it turns 503 on SIGTERM)")
    check(probes["livenessProbe"] == "/livez", "the liveness probe should be /livez")
    grace = int(env["QVL_SHUTDOWN_GRACE"]["value"])
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    check(pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop + grace + 5,
          f"terminationGracePeriodSeconds {pod['spec']['terminationGracePeriodSeconds']} < preStop {pre_stop} + "
          f"QVL_SHUTDOWN_GRACE {grace} + 5: the kubelet would SIGKILL answers still draining")
    check(pod["spec"]["securityContext"].get("runAsNonRoot") is True, "pods must run as non-root")
    metric = hpa["metrics"][0]["pods"]["metric"]["name"]
    return {"probes": sorted(set(probes.values())), "metric": metric}


def check_systemd(qvl, env_names):
    unit = os.path.join(DEPLOY, "systemd", "qvl.service")
    with open(unit) as f:
        text = f.read()
    check("ExecStart=/usr/local/bin/qvl serve" in text, "qvl.service: expected ExecStart=/usr/local/bin/qvl serve")
    for name in qvl_vars_in(text):
        check(name in env_names, f"qvl.service sets {name}, which is no option of qvl serve")
    grace = int(re.search(r"QVL_SHUTDOWN_GRACE=(\d+)", text).group(1))
    check(seconds(re.search(r"^TimeoutStopSec=(\S+)", text, re.M).group(1)) > grace,
          "qvl.service: TimeoutStopSec must exceed QVL_SHUTDOWN_GRACE")
    if not shutil.which("systemd-analyze"):
        failures.append("systemd-analyze not found (Debian: systemd; scripts/setup installs it)")
        return
    with tempfile.TemporaryDirectory() as d:
        # verify checks that ExecStart's program exists: point it at the built binary.
        copy = os.path.join(d, "qvl.service")
        with open(copy, "w") as f:
            f.write(text.replace("ExecStart=/usr/local/bin/qvl", "ExecStart=" + os.path.abspath(qvl)))
        v = subprocess.run(["systemd-analyze", "verify", copy], capture_output=True, text=True)
        said = (v.stdout + v.stderr).strip()
        check(v.returncode == 0 and not said, f"systemd-analyze verify qvl.service: rc {v.returncode}: {said}")
        s = subprocess.run(["systemd-analyze", "security", "--offline=yes", copy], capture_output=True, text=True)
        m = re.search(r"Overall exposure level for qvl.service: ([0-9.]+)", s.stdout + s.stderr)
        if check(m is not None, f"systemd-analyze security printed no exposure level: {s.stdout[-300:]}{s.stderr[-300:]}"):
            check(float(m.group(1)) <= 2.0, f"qvl.service: exposure level {m.group(1)} > 2.0")
            print(f"manifests: systemd-analyze security exposure {m.group(1)}")


def dockerignore_allows(path):
    allowed = True
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            pat = line[1:] if neg else line
            pat = pat.rstrip("/")
            if pat == "*" or path == pat or path.startswith(pat + "/"):
                allowed = neg
    return allowed


def check_container(env_names):
    c = os.path.join(DEPLOY, "container")
    with open(os.path.join(c, "Dockerfile")) as f:
        dockerfile = f.read()
    for src in re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.M):
        check(os.path.exists(os.path.join(ROOT, src)), f"Dockerfile copies {src}, which the repository lacks")
        check(dockerignore_allows(src.rstrip("/")), f"Dockerfile copies {src}, which .dockerignore leaves out")
    check(re.search(r"^USER (?!root)\S+", dockerfile, re.M) is not None, "Dockerfile: the image must run as non-root")
    check("HEALTHCHECK" in dockerfile and "/health" in dockerfile, "Dockerfile: no HEALTHCHECK on /health")
    with open(os.path.join(c, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    svc = compose["services"]["qvl"]
    ctx = os.path.normpath(os.path.join(c, svc["build"]["context"]))
    check(ctx == ROOT, f"compose.yaml: build context {ctx} is not the repository root")
    check(os.path.isfile(os.path.join(ctx, svc["build"]["dockerfile"])), "compose.yaml: the dockerfile is not there")
    for name in svc["environment"]:
        if name.startswith("QVL_"):
            check(name in env_names or name in ENTRYPOINT_VARS, f"compose.yaml sets {name}, no option of qvl serve")
    check(seconds(svc["stop_grace_period"]) > int(svc["environment"]["QVL_SHUTDOWN_GRACE"]),
          "compose.yaml: stop_grace_period must exceed QVL_SHUTDOWN_GRACE")
    check("cpus" in svc and "mem_limit" in svc, "compose.yaml: CPU and memory limits are missing")
    with open(os.path.join(c, "entrypoint.sh")) as f:
        for name in qvl_vars_in(f.read()):
            check(name in env_names or name in ENTRYPOINT_VARS, f"entrypoint.sh reads {name}, no option of qvl serve")


def check_docs(env_names):
    with open(os.path.join(ROOT, "docs", "DEPLOY.md")) as f:
        listed = qvl_vars_in(f.read())
    missing = sorted(env_names - listed)
    check(not missing, f"docs/DEPLOY.md does not list {missing}")
    unknown = sorted(listed - env_names - ENTRYPOINT_VARS)
    check(not unknown, f"docs/DEPLOY.md lists {unknown}, which qvl serve does not read")


def check_readiness_contract(qvl, probe_paths, metric):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(scaled(120))
        env = dict(os.environ, NOTIFY_SOCKET=path)
        p = subprocess.Popen([qvl, "serve", "--demo", "--port", str(port), "--quiet"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            got = []
            while not any(m.startswith("READY=1") for m in got):
                got.append(sock.recv(4096).decode())
            check(got[0].startswith("STATUS=loading"), f"first notification {got[0]!r}: expected STATUS=loading")

            def status(p_):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{p_}", timeout=scaled(5)) as r:
                        return r.status, r.read().decode()
                except urllib.error.HTTPError as e:
                    return e.code, e.read().decode()
            check(status("/readyz")[0] == 200, "READY=1 came before /readyz answered 200")
            for pp in probe_paths:
                check(status(pp)[0] == 200, f"the manifests probe {pp}, which answers {status(pp)[0]}")
            page = status("/metrics")[1]
            check(re.search(rf"^{metric} \d", page, re.M) is not None, f"/metrics has no {metric} (the HPA's metric)")
            p.send_signal(signal.SIGTERM)
            got = sock.recv(4096).decode()
            check(got.startswith("STOPPING=1"), f"after SIGTERM: {got!r}, expected STOPPING=1")
            rc = p.wait(timeout=scaled(60))
            check(rc == 0, f"qvl serve exited {rc} after SIGTERM: {p.stderr.read()[-500:]}")
            print(f"manifests: notifications {got!r} after SIGTERM; exit {rc}")
        except socket.timeout:
            failures.append(f"no READY=1/STOPPING=1 on NOTIFY_SOCKET within {scaled(120):.0f} s")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            sock.close()


def main():
    qvl = sys.argv[1]
    env_names = serve_env_names(qvl)
    check(len(env_names) >= 20, f"`qvl serve --help` names only {len(env_names)} QVL_* variables")
    k8s = check_kubernetes(env_names)
    check_systemd(qvl, env_names)
    check_container(env_names)
    check_docs(env_names)
    check_readiness_contract(qvl, k8s["probes"], k8s["metric"])
    if failures:
        print("manifests: FAILED\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"manifests: passed ({len(env_names)} QVL_* options; Kubernetes {', '.join(K8S_VERSIONS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
