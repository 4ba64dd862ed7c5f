"""Fixtures of the Python client and browser tests: a `qvl serve --demo` on a free port, and test images.

The binary and the model's files come from the environment (CTest sets both):
  QVL_BINARY            the built qvl (default: build/qvl)
  QVL_MODEL_FILES_DIR   the checkpoint's config and tokenizer files (default: models/qwen3-vl-2b-instruct)
  QVL_TEST_OUTPUT_DIR   where the browser test writes its screenshots (default: build/python-tests)
Every timeout and wait goes through scaled() (tests/timing.py: QVL_TEST_TIME_SCALE on a slow machine).
"""
import base64
import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGES = ROOT / "tests" / "data" / "images"
sys.path.insert(0, str(ROOT / "tests"))
from timing import scaled  # noqa: E402  (tests/timing.py, shared with the attack and deployment tests)


def _binary() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("QVL_BINARY", ROOT / "build" / "qvl"))
    if not path.is_file():
        pytest.exit(f"qvl binary not found at {path}; build it (scripts/setup) or set QVL_BINARY", returncode=2)
    return path


def _model_files() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("QVL_MODEL_FILES_DIR", ROOT / "models" / "qwen3-vl-2b-instruct"))
    if not (path / "config.json").is_file():
        pytest.exit(f"no model files (config.json) in {path}; set QVL_MODEL_FILES_DIR", returncode=2)
    return path


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    """(status, parsed JSON body or None) of a GET, errors included; `timeout` at Release speed, scaled here."""
    try:
        with urllib.request.urlopen(url, timeout=scaled(timeout)) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, None


@dataclass
class Server:
    url: str
    model: str  # the model id the server reports
    api_key: str | None
    log: pathlib.Path


@contextlib.contextmanager
def run_server(*extra_args: str, api_key: str | None = None, env: dict | None = None, model: pathlib.Path | None = None):
    """Starts `qvl serve --demo` (or `--model MODEL`) on a free port (with `env` added to the environment), waits
    for /health 200, yields a Server, stops it with SIGTERM."""
    binary = _binary()
    which = ["--model", str(model)] if model else ["--demo", "--model-files", str(_model_files())]
    args = list(extra_args) + (["--api-key", api_key] if api_key else [])
    log = pathlib.Path(tempfile.mkstemp(prefix="qvl-serve-", suffix=".log")[1])
    for attempt in range(3):  # a free port can be taken between the probe and the bind: try another
        port = _free_port()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(binary), "serve", *which, "--port", str(port), "--threads", "1", *args],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + scaled(120)
        status, body = 0, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = get_json(url + "/health", timeout=2)
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.2)
        if status == 200:
            break
        proc.kill()
        proc.wait()
        text = log.read_text(errors="replace")
        if "cannot listen" not in text or attempt == 2:
            pytest.fail(f"qvl serve did not become ready (last /health: {status} {body}); its log:\n{text}")
    try:
        yield Server(url=url, model=body["model"], api_key=api_key, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode not in (0, -15):
            print(f"qvl serve exited with {proc.returncode}; its log:\n{log.read_text(errors='replace')}")
        log.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def server():
    """One server for the whole session: one slot, the tiny random-weight model."""
    with run_server() as s:
        yield s


@pytest.fixture(scope="session")
def image_path() -> pathlib.Path:
    return IMAGES / "jpeg_baseline_420_640x480.jpg"


@pytest.fixture(scope="session")
def image_b64(image_path) -> str:
    return base64.b64encode(image_path.read_bytes()).decode()


@pytest.fixture(scope="session")
def image_data_uri(image_b64) -> str:
    return "data:image/jpeg;base64," + image_b64


@pytest.fixture(scope="session")
def output_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("QVL_TEST_OUTPUT_DIR", ROOT / "build" / "python-tests"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    """The tiny test model (generated weights, seed 1) as a model directory."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([str(_binary()), "make-test-model", "--preset", "tiny", "--seed", "1", "--out", str(out),
                    "--model-files", str(_model_files())], check=True, stdout=subprocess.DEVNULL, timeout=scaled(120))
    return out
