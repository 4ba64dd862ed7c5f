"""Ollama's /api/pull through the official `ollama` package: `hf.co/ORG/NAME` pulled by qvl's own hub client from
a fake hub on 127.0.0.1 (tests/hub/fake_hub.py) into the hub's cache, with Ollama's progress lines; offline mode,
the hub token and bad names; the model-management endpoints qvl does not have answer 501."""
import contextlib
import json
import pathlib
import subprocess
import sys
import urllib.request

import ollama
import pytest

from conftest import ROOT, _binary, _model_files, run_server, scaled

REPO = "qvl-test/Tiny-VL-0.1"


@contextlib.contextmanager
def fake_hub(root: pathlib.Path, *args: str):
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hub" / "fake_hub.py"), "--root", str(root),
                             "--repo", REPO, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        proc.wait()


@pytest.fixture(scope="module")
def tiny(tiny_model) -> pathlib.Path:
    return tiny_model


def test_pull_streams_progress_into_the_hub_cache(tiny, tmp_path):
    with fake_hub(tiny, "--require-token", "sekrit") as hub, \
         run_server("--allow-pull", env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "sekrit"}) as s:
        client = ollama.Client(host=s.url, timeout=scaled(120))
        events = list(client.pull(f"hf.co/{REPO}", stream=True))
        statuses = [e.status for e in events]
        assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
        files = {e.digest: (e.completed, e.total) for e in events if e.digest}
        assert "model.safetensors" in files and "config.json" in files
        done, total = files["model.safetensors"]
        assert done == total == (tiny / "model.safetensors").stat().st_size
        snapshot = next((tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots").iterdir())
        assert (snapshot / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
        # Again: already there, nothing downloaded; without streaming, one answer.
        assert client.pull(f"huggingface.co/{REPO}:latest", stream=False).status == "success"
        # A library name, a bad name, a missing repository.
        for name, words in [("qwen3-vl:2b", "Ollama library name"), ("hf.co/a/b/c", "not ORG/NAME"),
                            ("hf.co/qvl-test/Missing", "pulling")]:
            with pytest.raises(ollama.ResponseError) as e:
                client.pull(name, stream=False)
            assert words in str(e.value), str(e.value)


def test_pull_offline_uses_the_cache_only(tiny, tmp_path):
    with fake_hub(tiny) as hub, run_server("--allow-pull", env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"),
                                                                "HF_HUB_OFFLINE": "1"}) as s:
        client = ollama.Client(host=s.url, timeout=scaled(60))
        with pytest.raises(ollama.ResponseError) as e:
            client.pull(f"hf.co/{REPO}", stream=False)
        assert "offline" in str(e.value).lower(), str(e.value)
        with pytest.raises(ollama.ResponseError) as e:  # streamed: the error line ends the stream
            list(client.pull(f"hf.co/{REPO}", stream=True))
        assert "HF_HUB_OFFLINE" in str(e.value)


def test_pull_is_off_unless_allowed(server):
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=server.url, timeout=scaled(30)).pull(f"hf.co/{REPO}", stream=False)
    assert e.value.status_code == 403 and "--allow-pull" in str(e.value)


def test_model_management_is_501(server):
    for method, path, body in [("POST", "/api/create", {"model": "x", "from": "y"}), ("POST", "/api/copy", {"source": "a", "destination": "b"}),
                               ("POST", "/api/push", {"model": "x"}), ("DELETE", "/api/delete", {"model": "x"})]:
        req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=scaled(10))
        assert e.value.code == 501
        assert "not supported" in json.loads(e.value.read())["error"]
