"""GGUF models (issue 16): the tiny test model converted by tools/gguf_convert.py into llama.cpp's layout (a
`qwen3vl` text GGUF and a `clip` mmproj), loaded by qvl, gives the safetensors model's logits: identically
from F32 files (bf16 weights are exact in float32), and the same greedy answer from Q8_0 files as the
safetensors model quantized to q8_0 at load (the same blocks)."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import IMAGES, ROOT, _binary, _model_files, scaled


def run(*args, check=True):
    r = subprocess.run([str(_binary()), *args], capture_output=True, text=True, timeout=scaled(300))
    if check and r.returncode != 0:
        raise AssertionError(f"qvl {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    run("make-test-model", "--preset", "tiny", "--seed", "1", "--out", str(d / "tiny"), "--model-files", str(_model_files()))
    for t in ("f32", "q8_0"):
        subprocess.run([sys.executable, str(ROOT / "tools" / "gguf_convert.py"), str(d / "tiny"), str(d / t), "--outtype", t],
                       check=True, capture_output=True, timeout=scaled(300))
    return d


def answer(model, dump, *extra):
    image = str(IMAGES / "png_rgb8_256x256.png")
    r = run("run", "--model", str(model), "-i", image, "-p", "Describe it.", "-n", "8", "--temp", "0", "-t", "2",
            "--max-pixels", "65536", "--dump", str(dump), *extra)
    return r.stdout, np.load(dump / "lm_head.npy") if (dump / "lm_head.npy").exists() else None


def test_f32_gguf_gives_the_safetensors_logits(models, tmp_path):
    f32 = ["--text-weights", "f32", "--vision-weights", "f32"]
    want, want_logits = answer(models / "tiny", tmp_path / "st", *f32)
    got, got_logits = answer(models / "f32" / "tiny-f32.gguf", tmp_path / "gguf", *f32)
    assert got == want
    assert want_logits is not None and got_logits is not None
    err = np.abs(got_logits - want_logits).max() / np.abs(want_logits).max()
    assert err <= 1e-6, err
    # A folder holding both files is a model too.
    got_dir, _ = answer(models / "f32", tmp_path / "dir", *f32)
    assert got_dir == want


def test_q8_0_gguf_answers_as_the_model_quantized_at_load(models, tmp_path):
    q8 = ["--text-weights", "q8_0", "--vision-weights", "q8_0"]
    want, _ = answer(models / "tiny", tmp_path / "st", *q8)
    got, _ = answer(models / "q8_0" / "tiny-q8_0.gguf", tmp_path / "gguf", *q8)
    assert got == want


def test_refusals_say_what_is_missing(models, tmp_path):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "m.gguf").write_bytes((models / "q8_0" / "tiny-q8_0.gguf").read_bytes())
    (lonely / "cut.gguf").write_bytes((models / "q8_0" / "tiny-q8_0.gguf").read_bytes()[:100000])
    r = run("run", "--model", str(lonely / "cut.gguf"), "-p", "hi", "-n", "1", check=False)
    assert r.returncode != 0 and "cut.gguf" in r.stderr, r.stderr
    # A text GGUF alone answers text, and refuses an image saying which file would let it see.
    run("run", "--model", str(lonely / "m.gguf"), "-p", "hi", "-n", "1")
    r = run("run", "--model", str(lonely / "m.gguf"), "-i", str(IMAGES / "png_rgb8_256x256.png"), "-p", "hi", "-n", "1",
            check=False)
    assert r.returncode != 0 and "--mmproj" in r.stderr, r.stderr
    r = run("run", "--model", str(models / "q8_0" / "mmproj-tiny-q8_0.gguf"), "-p", "hi", check=False)
    assert r.returncode != 0 and "vision (mmproj) file" in r.stderr, r.stderr


def test_qvl_written_gguf_reads_as_llama_cpp_lays_it_out(models, tmp_path):
    """`qvl quantize --format gguf` writes what the converter writes: the same tensor names, types and
    metadata keys, read by the gguf package (llama.cpp's own reader)."""
    import gguf

    out = tmp_path / "qvl"
    run("quantize", "--model", str(models / "tiny"), "--out", str(out), "--format", "gguf")
    for ours, theirs in [("tiny-q8_0.gguf", "tiny-q8_0.gguf"), ("mmproj-tiny-q8_0.gguf", "mmproj-tiny-q8_0.gguf")]:
        a, b = gguf.GGUFReader(str(out / ours)), gguf.GGUFReader(str(models / "q8_0" / theirs))
        assert {t.name: t.tensor_type for t in a.tensors} == {t.name: t.tensor_type for t in b.tensors}
        assert {t.name: list(t.shape) for t in a.tensors} == {t.name: list(t.shape) for t in b.tensors}
        assert set(a.fields) == set(b.fields)
    want, _ = answer(models / "q8_0" / "tiny-q8_0.gguf", tmp_path / "conv")
    got, _ = answer(out / "tiny-q8_0.gguf", tmp_path / "ours")
    assert got == want


def test_k_quant_gguf_reads_as_the_gguf_package_dequantizes_it(models, tmp_path):
    """`qvl quantize --format gguf --text-weights q4_k_m`: the gguf package (llama.cpp's reader and its
    reference dequantization) reads Q4_K / Q6_K matrices whose values are the model's, within the types'
    rounding; a wrong block layout would give noise."""
    import gguf
    from gguf import quants

    out = tmp_path / "k"
    run("quantize", "--model", str(models / "tiny"), "--out", str(out), "--format", "gguf",
        "--text-weights", "q4_k_m", "--vision-weights", "q8_0")
    r = gguf.GGUFReader(str(out / "tiny-q4_k_m.gguf"))
    tensors = {t.name: t for t in r.tensors}
    assert tensors["blk.0.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_K
    assert tensors["blk.3.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q6_K
    # The model's own values: its F32 GGUF (bf16 weights are exact in float32).
    f32 = {t.name: t for t in gguf.GGUFReader(str(models / "f32" / "tiny-f32.gguf")).tensors}
    for layer, bound in [(0, 0.12), (3, 0.03)]:
        t = tensors[f"blk.{layer}.ffn_down.weight"]
        got = quants.dequantize(t.data, t.tensor_type).reshape(-1)
        want = np.asarray(f32[f"blk.{layer}.ffn_down.weight"].data, dtype=np.float32).reshape(-1)
        err = np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2))
        assert err < bound, (layer, err)
    # qvl loads it and answers.
    got, _ = answer(out / "tiny-q4_k_m.gguf", tmp_path / "ans")
    assert got.strip()

