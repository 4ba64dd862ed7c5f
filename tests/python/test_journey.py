"""A user's journey, end to end (issue 28): the build installed with `cmake --install` into a fresh prefix; the
installed binary, run from an unrelated folder, writes a model and its GGUF pair (`qvl quantize --format gguf`);
the pair is published on a hub (tests/hub/fake_hub.py on 127.0.0.1) and served by its tag; the `openai`
package asks about an image, streamed; the server restarts offline from the hub's cache and answers again;
SIGTERM exits 0 each time.

Needs QVL_BUILD_DIR (the CMake build folder; CTest sets it); skipped without it."""
import base64
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import IMAGES, ROOT, _free_port, get_json
from timing import scaled

BUILD = os.environ.get("QVL_BUILD_DIR")
pytestmark = pytest.mark.skipif(not BUILD, reason="QVL_BUILD_DIR (the build folder to install from) is not set")


def sh(*args, cwd=None, env=None, timeout=scaled(600)):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, args))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


def serve(qvl, model, env, log, cwd):
    """`qvl serve --model MODEL` on a free port; returns (process, url) once /health answers 200."""
    port = _free_port()
    out = open(log, "ab")
    proc = subprocess.Popen([str(qvl), "serve", "--model", model, "--port", str(port), "--threads", "1"],
                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + scaled(180)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"qvl serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            status, _ = get_json(url + "/health", timeout=2)
            if status == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"qvl serve was not ready within 180 s:\n{log.read_text()}")


def stop(proc, log):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=scaled(60)) == 0, log.read_text()


def ask_streamed(url):
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    image = base64.b64encode((IMAGES / "png_rgb8_256x256.png").read_bytes()).decode()
    stream = client.chat.completions.create(
        model="qvl",
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
            {"type": "text", "text": "What is in this picture?"}]}],
        max_tokens=8, stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None and usage.completion_tokens > 0, usage
    assert usage.prompt_tokens > 64, usage  # the image's tokens were read
    return text


def test_installed_binary_serves_a_gguf_from_the_hub_then_offline(tmp_path):
    prefix = tmp_path / "prefix"
    sh("cmake", "--install", BUILD, "--prefix", prefix)
    qvl = prefix / "bin" / "qvl"
    assert qvl.is_file()
    # Run from a folder that has nothing of the repository.
    work = tmp_path / "elsewhere"
    work.mkdir()
    v = sh(qvl, "--version", cwd=work)
    assert v.stdout.startswith("qvl "), v.stdout
    sh(qvl, "make-test-model", "--preset", "tiny", "--seed", "1", "--out", work / "tiny", "--threads", "1", cwd=work)
    sh(qvl, "quantize", "--model", work / "tiny", "--out", work / "repo", "--format", "gguf", cwd=work)
    ggufs = sorted(p.name for p in (work / "repo").glob("*.gguf"))
    assert len(ggufs) == 2 and any("mmproj" in f for f in ggufs), ggufs

    # The pair on a hub, served by its tag (downloaded into the cache on first use).
    repo = "qvl-test/Tiny-VL-GGUF"
    hub = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hub" / "fake_hub.py"), "--root", str(work / "repo"),
                            "--repo", repo], stdout=subprocess.PIPE, text=True)
    try:
        line = hub.stdout.readline()
        assert line.startswith("PORT "), line
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{line.split()[1]}", HF_HUB_CACHE=str(tmp_path / "cache"))
        env.pop("HF_HUB_OFFLINE", None)
        log = tmp_path / "serve.log"
        proc, url = serve(qvl, repo + ":Q8_0", env, log, work)
        try:
            assert ask_streamed(url) is not None
            status, health = get_json(url + "/health")
            assert health["model_info"]["format"] == "gguf", health
            assert health["model_info"]["vision"] is True, health
        finally:
            stop(proc, log)
    finally:
        hub.terminate()
        hub.wait(timeout=scaled(30))

    # Offline, the hub gone: the cached snapshot serves at once.
    env["HF_HUB_OFFLINE"] = "1"
    proc, url = serve(qvl, repo + ":Q8_0", env, log, work)
    try:
        assert ask_streamed(url) is not None
    finally:
        stop(proc, log)
    shutil.rmtree(prefix, ignore_errors=True)
