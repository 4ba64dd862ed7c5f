#!/usr/bin/env python3
"""Runs every shell, curl and Python example of README.md and docs/*.md against `qvl serve --demo`.

CTest runs it as docs_examples, so a documented example that stops working fails CI.

Usage: tests/docs/run_docs.py QVL_BINARY [FILE.md ...]      (default: README.md and docs/*.md)

What runs: fenced blocks tagged sh, bash, shell or console (console: the `$ ` lines only), python, and any
other block with a line that starts with `curl`, `qvl` or `build/qvl` (run as shell). Each file's blocks run
in order in a fresh working directory, all against one `qvl serve --demo` on a free 127.0.0.1 port (the
documented `127.0.0.1:8080` / `localhost:8080` are replaced with it; $QVL_DOCS_PORT holds it), but for blocks
annotated `server PRESET` (below). A file's shell blocks share their variables (IMG=... in one block, "$IMG"
in the next), its Python blocks one interpreter (the venv of tests/docs/requirements.txt: openai, ollama,
pydantic). In the working directory:
  photo.jpg             a JPEG from tests/data/images
  report.pdf            a three-page A4 PDF from tests/data/pdf
  qvl, build/qvl        the binary under test, with one change: `qvl serve ...` starts the server on a free
                        port (its --port replaced), waits for /health 200, stops it with SIGTERM and passes when
                        it exits 0; a hub id resolves against tests/hub/fake_hub.py serving the tiny test model
                        as Qwen/Qwen3-VL-2B-Instruct (HF_ENDPOINT, MODELSCOPE_ENDPOINT; caches in a temp dir)
  curl                  curl --fail-with-body: an HTTP error fails the block
Annotations, HTML comments on the lines right before a fence (several may stack):
  <!-- docs-test: skip (REASON) -->       not run (docker, kubectl, systemd, ...); the reason is printed
  <!-- docs-test: xfail (REASON) -->      run, expected to fail (a known bug); passing is a failure
  <!-- docs-test: model-dir PATH -->      a tiny generated model directory at PATH (a placeholder path)
  <!-- docs-test: stub PATH (REASON) -->  PATH is a command that does nothing (e.g. scripts/setup: CI ran it)
  <!-- docs-test: timeout SECONDS -->     instead of the default 120 s
  <!-- docs-test: server PRESET -->       run against its own `qvl serve --model` of `make-test-model --preset
                                          PRESET --seed 1` (tiny-embedding or tiny-reranker: models the demo cannot
                                          stand in for), started on a free port when a block first needs it and
                                          stopped at the end; the documented port is replaced with that one
A runnable block with neither an annotation nor a passing run fails; so does an unknown annotation.
Prints file:line and pass/fail/skipped/xfail per block (with its output when it fails, or always with
QVL_DOCS_VERBOSE=1), then "N passed, N failed, N skipped"; exit 1 on a failure. Environment: QVL_MODEL_FILES_DIR (default models/qwen3-vl-2b-instruct), QVL_DOCS_VENV (default
build/docs-venv; built when missing or when requirements.txt changed). Talks to 127.0.0.1 only (and PyPI when
it builds the venv).
"""
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
PHOTO = ROOT / "tests" / "data" / "images" / "jpeg_baseline_420_640x480.jpg"
REPORT = ROOT / "tests" / "data" / "pdf" / "three_a4.pdf"  # three A4 pages of text (tests/pdf/pdfgen.py)
HUB_REPO = "Qwen/Qwen3-VL-2B-Instruct"
DEFAULT_TIMEOUT = 120
SERVER_PRESETS = ("tiny-embedding", "tiny-reranker")  # models the demo server cannot stand in for
SHELL_LANGS = {"sh", "bash", "shell", "console", "shell-session", "sh-session"}
PYTHON_LANGS = {"python", "py", "python3"}
COMMAND_LINE = re.compile(r"^\s*(\$\s+)?(curl|qvl|build/qvl)\s")
ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")


# ---------------------------------------------------------------------------------------------------------
# The markdown: fenced blocks and their annotations

@dataclasses.dataclass
class Block:
    file: pathlib.Path
    line: int            # the opening fence's line, 1-based
    kind: str            # "shell", "console", "python" or "" (not runnable)
    code: str
    skip: str = ""       # the reason, when annotated skip
    xfail: str = ""
    model_dirs: list = dataclasses.field(default_factory=list)
    stubs: list = dataclasses.field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    server: str = ""     # a preset of SERVER_PRESETS: run against its server instead of the demo
    errors: list = dataclasses.field(default_factory=list)  # bad annotations

    @property
    def where(self):
        return f"{self.file.relative_to(ROOT) if self.file.is_relative_to(ROOT) else self.file}:{self.line}"


def parse_annotation(block, text):
    m = re.fullmatch(r"(skip|xfail)\s*\((.+)\)", text)
    if m:
        setattr(block, m.group(1), m.group(2))
        return
    m = re.fullmatch(r"model-dir\s+(\S+)", text)
    if m:
        block.model_dirs.append(m.group(1))
        return
    m = re.fullmatch(r"stub\s+(\S+)\s*\((.+)\)", text)
    if m:
        block.stubs.append(m.group(1))
        return
    m = re.fullmatch(r"timeout\s+(\d+)", text)
    if m:
        block.timeout = float(m.group(1))
        return
    m = re.fullmatch(r"server\s+(\S+)", text)
    if m:
        if m.group(1) in SERVER_PRESETS:
            block.server = m.group(1)
        else:
            block.errors.append(f"<!-- docs-test: {text} -->: no such server preset; expected one of "
                                f"{', '.join(SERVER_PRESETS)}")
        return
    block.errors.append(f"unknown annotation <!-- docs-test: {text} --> (see tests/docs/run_docs.py)")


def blocks_of(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), lines[i]):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())  # a list item's fence
            i += 1
        i += 1  # the closing fence
        code = "\n".join(body) + "\n"
        if lang in PYTHON_LANGS:
            kind = "python"
        elif lang in SHELL_LANGS:
            kind = "console" if lang == "console" or any(l.startswith("$ ") for l in body) else "shell"
        elif any(COMMAND_LINE.match(l) for l in body):
            kind = "console" if any(l.lstrip().startswith("$ ") for l in body) else "shell"
        else:
            kind = ""
        block = Block(path, start + 1, kind, code)
        j = start - 1
        while j >= 0 and ANNOTATION.match(lines[j]):
            parse_annotation(block, ANNOTATION.match(lines[j]).group(1))
            j -= 1
        out.append(block)
    return out


def console_commands(code):
    """The commands of a console block: `$ ` lines and their `\\` continuations; output lines dropped."""
    cmds, cont = [], False
    for line in code.splitlines():
        if cont or line.startswith("$ "):
            text = line if cont else line[2:]
            cmds.append(text)
            cont = text.rstrip().endswith("\\")
    return "\n".join(cmds) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Processes: free ports, /health, the fake hub, the demo server

def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def wait_healthy(proc, port, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if health(port) == 200:
            return True
        time.sleep(0.2)
    return False


def stop(proc, grace=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def serve_probe(binary, args):
    """`qvl serve ARGS` as a docs example runs it: on a free port, until /health is 200, then SIGTERM; exit 0
    when it became ready and exited 0."""
    args = list(args)
    port = free_port()
    for k, a in enumerate(args):
        if a == "--port" and k + 1 < len(args):
            args[k + 1] = str(port)
        elif a.startswith("--port="):
            args[k] = f"--port={port}"
    env = dict(os.environ, QVL_PORT=str(port))
    env.setdefault("QVL_THREADS", "1")
    print(f"docs-test: qvl {' '.join(args)}  (on port {port}, until /health is 200)", file=sys.stderr, flush=True)
    proc = subprocess.Popen([binary, *args], env=env)
    ready = wait_healthy(proc, port, float(os.environ.get("QVL_DOCS_SERVE_WAIT", "90")))
    code = stop(proc)
    if not ready:
        print(f"docs-test: qvl serve did not become ready (exit status {code})", file=sys.stderr)
        return 1
    if code != 0:
        print(f"docs-test: qvl serve became ready but exited with {code} on SIGTERM", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def started(argv, log, port=None, ready_line=None, env=None):
    """A background process; waits for /health 200 on port, or for its first stdout line."""
    out = open(log, "wb")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE if ready_line else out, stderr=out, env=env)
    try:
        if ready_line:
            line = proc.stdout.readline().decode()
            if not line.startswith(ready_line):
                raise SystemExit(f"run_docs: {argv[1]} did not start: {line!r}\n{pathlib.Path(log).read_text()}")
            yield proc, line
        else:
            if not wait_healthy(proc, port, 120):
                raise SystemExit(f"run_docs: {' '.join(map(str, argv))} did not become ready:\n"
                                 f"{pathlib.Path(log).read_text(errors='replace')}")
            yield proc, None
    finally:
        stop(proc)
        out.close()


class PresetServers:
    """The servers of `<!-- docs-test: server PRESET -->` blocks: each preset's model is made and served the first
    time a block asks for it, so a run without such blocks starts none; all are stopped by close()."""

    def __init__(self, tmp, binary, model_files, env):
        self.tmp, self.binary, self.model_files, self.env = tmp, binary, model_files, env
        self.stack = contextlib.ExitStack()
        self.ports = {}   # preset -> port
        self.failed = {}  # preset -> why it could not start (not tried again)

    def port(self, preset):
        """(port, "") of the preset's server, or (0, why not)."""
        if preset in self.ports or preset in self.failed:
            return self.ports.get(preset, 0), self.failed.get(preset, "")
        model = self.tmp / f"{preset}-model"
        made = subprocess.run([self.binary, "make-test-model", "--preset", preset, "--seed", "1", "--out", str(model),
                               "--model-files", self.model_files], capture_output=True, text=True)
        if made.returncode != 0:
            self.failed[preset] = f"make-test-model --preset {preset} failed ({made.returncode}): {made.stderr.strip()}"
            return 0, self.failed[preset]
        port = free_port()
        log = self.tmp / f"{preset}.log"
        try:
            self.stack.enter_context(started([self.binary, "serve", "--model", str(model), "--port", str(port),
                                              "--threads", "1", "--quiet"], log, port=port, env=self.env))
        except SystemExit as e:  # started() says why: this preset's blocks fail, the others run
            self.failed[preset] = str(e)
            return 0, self.failed[preset]
        print(f"run_docs: serving {preset} on port {port} for the blocks annotated `server {preset}`", flush=True)
        self.ports[preset] = port
        return port, ""

    def check(self):
        """Why a started server no longer answers /health, for each that does not."""
        return [f"the {preset} server (port {port}) no longer answers /health:\n"
                f"{(self.tmp / f'{preset}.log').read_text(errors='replace')}"
                for preset, port in self.ports.items() if health(port) != 200]

    def close(self):
        self.stack.close()


# ---------------------------------------------------------------------------------------------------------
# The Python venv and a persistent interpreter per file

def venv_python():
    venv = pathlib.Path(os.environ.get("QVL_DOCS_VENV", ROOT / "build" / "docs-venv"))
    req = HERE / "requirements.txt"
    base = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")
    version = subprocess.run([base, "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout
    stamp = version.strip() + " " + hashlib.sha256(req.read_bytes()).hexdigest()
    stamp_file = venv / ".qvl-stamp"
    if not (venv / "bin" / "python").exists() or not stamp_file.exists() or stamp_file.read_text().strip() != stamp:
        print(f"run_docs: creating the venv in {venv} from {req.relative_to(ROOT)}", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        try:
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", "--no-input", "-r", str(req)], check=True)
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"run_docs: could not build the venv in {venv} ({e}); pip needs PyPI, or a mirror "
                             "in PIP_INDEX_URL, and python3-venv (scripts/test installs it)")
        stamp_file.write_text(stamp + "\n")
    return str(venv / "bin" / "python")


# Runs blocks sent as JSON lines on stdin in one namespace; each block's output goes to the file it names, and
# one JSON line {"ok": bool, "error": str} comes back on the original stdout.
WORKER = r'''
import json, os, sys, traceback
proto = os.fdopen(os.dup(1), "w")
ns = {"__name__": "__main__"}
for line in sys.stdin:
    req = json.loads(line)
    with open(req["out"], "w") as out:
        os.dup2(out.fileno(), 1); os.dup2(out.fileno(), 2)
        sys.stdout = os.fdopen(1, "w", closefd=False); sys.stderr = os.fdopen(2, "w", closefd=False)
        try:
            exec(compile(req["code"], req["name"], "exec"), ns)
            result = {"ok": True, "error": ""}
        except BaseException as e:  # the block's frames only, not this loop's
            result = {"ok": False, "error": "".join(traceback.format_exception(e, e, e.__traceback__.tb_next))}
        sys.stdout.flush(); sys.stderr.flush()
    proto.write(json.dumps(result) + "\n"); proto.flush()
'''


class PythonSession:
    def __init__(self, python, cwd, env):
        self.python, self.cwd, self.env, self.proc = python, cwd, env, None

    def run(self, code, name, out, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([self.python, "-u", "-c", WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, cwd=self.cwd, env=self.env, text=True)
        self.proc.stdin.write(json.dumps({"code": code, "name": name, "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            return False, f"timed out after {timeout:.0f} s (the interpreter was restarted: later blocks lose state)"
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            return False, "the interpreter died"
        result = json.loads(line)
        return result["ok"], result["error"]

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# ---------------------------------------------------------------------------------------------------------
# A file's working directory, its blocks run in order

SHELL_PRELUDE = '''set -eo pipefail
[ -f "$DOCS_STATE" ] && source "$DOCS_STATE"
__docs_vars=" $(compgen -v | tr '\\n' ' ') FUNCNAME "
trap '__docs_save' EXIT
__docs_save() {  # the variables this block set, for the next shell block of the file
  local v
  for v in $(compgen -v); do
    case "$__docs_vars" in *" $v "*) ;; *) [[ $v == __docs* ]] || declare -p "$v" >> "$DOCS_STATE" ;; esac
  done
}
'''


def make_workdir(tmp, binary, tiny_model):
    work = pathlib.Path(tempfile.mkdtemp(prefix="docs-", dir=tmp))
    shutil.copy(PHOTO, work / "photo.jpg")
    shutil.copy(REPORT, work / "report.pdf")
    tools = work / ".docs-bin"
    (work / "build").mkdir()
    tools.mkdir()
    qvl = (f'#!/bin/sh\n# docs-test: qvl, with `qvl serve` run until ready (tests/docs/run_docs.py)\n'
           f'if [ "$1" = serve ]; then exec python3 {pathlib.Path(__file__).resolve()} --serve-probe {binary} "$@"; fi\n'
           f'exec {binary} "$@"\n')
    for path in (tools / "qvl", work / "build" / "qvl"):
        path.write_text(qvl)
        path.chmod(0o755)
    real_curl = shutil.which("curl") or "/usr/bin/curl"
    (tools / "curl").write_text(f'#!/bin/sh\nexec {real_curl} --fail-with-body "$@"\n')
    (tools / "curl").chmod(0o755)
    return work


def prepare(block, work, tiny_model):
    for rel in block.model_dirs:
        dest = work / rel
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(tiny_model, dest)
    for rel in block.stubs:
        dest = work / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f"#!/bin/sh\necho 'docs-test: {rel} is a stub here'\n")
        dest.chmod(0o755)


def substitute_port(code, port):
    return re.sub(r"\b(127\.0\.0\.1|localhost):8080\b", lambda m: f"{m.group(1)}:{port}", code)


def run_file(path, ctx):
    blocks = blocks_of(path)
    work = make_workdir(ctx["tmp"], ctx["binary"], ctx["tiny"])
    env = dict(ctx["env"], PATH=f"{work / '.docs-bin'}:{os.environ['PATH']}", DOCS_STATE=str(work / ".docs-state"))
    python = None
    results = []
    for n, block in enumerate(blocks):
        if not block.kind:
            continue
        if block.errors or block.skip:
            status, detail = ("fail", "; ".join(block.errors)) if block.errors else ("skipped", block.skip)
            results.append((block, status, detail))
            print(f"{block.where}: {status} ({detail})", flush=True)
            continue
        port = ctx["port"]
        if block.server:
            port, why = ctx["servers"].port(block.server)
            if not port:
                results.append((block, "fail", f"the {block.server} server did not start"))
                print(f"{block.where}: fail (the {block.server} server did not start)")
                print("\n".join("    " + l for l in why.strip().splitlines()), flush=True)
                continue
        prepare(block, work, ctx["tiny"])
        code = substitute_port(block.code, port)
        out = work / f".block-{n}.out"
        t0 = time.monotonic()
        if block.kind == "python":
            if python is None:
                python = PythonSession(ctx["python"](), work, env)
            ok, error = python.run(code, block.where, out, block.timeout)
        else:
            if block.kind == "console":
                code = console_commands(code)
            script = work / f".block-{n}.sh"
            script.write_text(SHELL_PRELUDE + code)
            with open(out, "wb") as f:
                proc = subprocess.Popen(["bash", str(script)], cwd=work, env=env, stdout=f, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    proc.wait(timeout=block.timeout)
                    ok, error = proc.returncode == 0, f"exit status {proc.returncode}"
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    ok, error = False, f"timed out after {block.timeout:.0f} s"
        took = time.monotonic() - t0
        output = out.read_text(errors="replace")
        detail = f"{took:.1f} s"
        if block.xfail:
            status = "fail" if ok else "xfail"
            detail = (f"passed, but is marked xfail ({block.xfail}): remove the annotation" if ok
                      else f"{block.xfail}; {detail}")
        else:
            status = "pass" if ok else "fail"
        results.append((block, status, detail))
        print(f"{block.where}: {status} ({detail})", flush=True)
        if status == "fail" or ctx["verbose"]:
            print("\n".join("    " + l for l in error.strip().splitlines()))
            print("    --- its output (the last 40 lines) ---")
            print("\n".join("    | " + l for l in output.splitlines()[-40:]) or "    (none)", flush=True)
    if python is not None:
        python.close()
    return results


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-probe":
        sys.exit(serve_probe(sys.argv[2], sys.argv[3:]))
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = str(pathlib.Path(sys.argv[1]).resolve())
    files = [pathlib.Path(f).resolve() for f in sys.argv[2:]] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    model_files = os.environ.get("QVL_MODEL_FILES_DIR", str(ROOT / "models" / "qwen3-vl-2b-instruct"))
    verbose = os.environ.get("QVL_DOCS_VERBOSE") == "1"

    with tempfile.TemporaryDirectory(prefix="qvl-docs-") as tmp:
        tmp = pathlib.Path(tmp)
        tiny = tmp / "tiny-model"
        subprocess.run([binary, "make-test-model", "--preset", "tiny", "--seed", "1", "--out", str(tiny),
                        "--model-files", model_files], check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        home = tmp / "home"
        home.mkdir()
        with started([sys.executable, str(ROOT / "tests" / "hub" / "fake_hub.py"), "--root", str(tiny),
                      "--repo", HUB_REPO], tmp / "hub.log", ready_line="PORT ") as (_, line):
            hub = f"http://127.0.0.1:{line.split()[1]}"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELSCOPE_", "QVL_"))}
            env.update(HOME=str(home), HF_HOME=str(tmp / "hf"), HF_ENDPOINT=hub, MODELSCOPE_CACHE=str(tmp / "ms"),
                       MODELSCOPE_ENDPOINT=hub, QVL_DOCS_PORT=str(port), PYTHONDONTWRITEBYTECODE="1",
                       QVL_DOCS_SERVE_WAIT=os.environ.get("QVL_DOCS_SERVE_WAIT", "90"))
            # The demo server pulls (Ollama's /api/pull) from the fake hub too.
            with started([binary, "serve", "--demo", "--model-files", model_files, "--port", str(port), "--threads", "1",
                          "--quiet", "--allow-pull"], tmp / "demo.log", port=port, env=env):
                servers = PresetServers(tmp, binary, model_files, env)
                ctx = dict(tmp=tmp, binary=binary, tiny=tiny, port=port, env=env, verbose=verbose,
                           python=functools.cache(venv_python), servers=servers)
                results = []
                try:
                    for f in files:
                        results += run_file(f, ctx)
                    for why in servers.check():
                        print(f"run_docs: {why}")
                        results.append((None, "fail", "a preset server is down"))
                finally:
                    servers.close()
                if health(port) != 200:
                    print(f"run_docs: the demo server no longer answers /health:\n{(tmp / 'demo.log').read_text()}")
                    results.append((None, "fail", "the demo server is down"))

    n = {s: sum(1 for _, t, _ in results if t == s) for s in ("pass", "fail", "skipped", "xfail")}
    xfail = f" (and {n['xfail']} xfail: ran and failed as expected)" if n["xfail"] else ""
    print(f"{n['pass']} passed, {n['fail']} failed, {n['skipped']} skipped{xfail}")
    sys.exit(1 if n["fail"] else 0)


if __name__ == "__main__":
    main()
