"""Writes tests/data/gguf/types.gguf and tests/data/gguf_golden.json: a small GGUF file written by the `gguf`
package (llama.cpp's own Python writer) holding a tensor of every GGML type qvl reads, with random blocks
(finite scales), and metadata of every value type; and what the `gguf` package reads back: each metadata
value, each tensor's type and dims, and the sha256 of its values dequantized by gguf.quants.dequantize (the
reference for qvl's gguf_dequantize_row), with a few values in the clear.

Deterministic: fixed seeds; re-running reproduces both files byte for byte.
"""
import hashlib
import importlib.metadata
import json
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "tests" / "data" / "gguf"
GOLDEN = ROOT / "tests" / "data" / "gguf_golden.json"


def f16_bytes(rng, n, lo=1e-3, hi=5e-2):
    v = rng.uniform(lo, hi, n) * rng.choice([-1, 1], n)
    return v.astype("<f2").view(np.uint8).reshape(n, 2)


def random_blocks(rng, qtype, rows, cols):
    """Random bytes for rows x cols values of a block type, with each block's f16 scale(s) finite and small."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    if qtype in (Q.Q4_0, Q.Q8_0):
        raw[:, 0:2] = f16_bytes(rng, nb)
    elif qtype in (Q.Q4_K, Q.Q5_K):
        raw[:, 0:2] = f16_bytes(rng, nb)          # d
        raw[:, 2:4] = f16_bytes(rng, nb, 0, 1e-2)  # dmin
    elif qtype == Q.Q6_K:
        raw[:, 208:210] = f16_bytes(rng, nb)     # d comes last
    return raw.reshape(rows, cols // block * size)


def main():
    rng = np.random.default_rng(20261201)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / "types.gguf"
    w = gguf.GGUFWriter(str(path), "qvltest")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "Qwen3-VL \u00e9\u4e2d\U0001f600")
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.25])
    w.add_array("test.strings", ["a", "", "\u00df"])
    w.add_array("test.bools", [True, False, True])

    tensors = []
    f32 = rng.standard_normal((3, 40)).astype(np.float32)
    w.add_tensor("t.f32", f32)
    tensors.append(("t.f32", Q.F32, f32.view(np.uint8)))
    f16 = rng.standard_normal((2, 48)).astype(np.float16)
    w.add_tensor("t.f16", f16)
    tensors.append(("t.f16", Q.F16, f16.view(np.uint8)))
    bf = (rng.standard_normal((2, 32)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("t.bf16", bf.view(np.uint8), raw_shape=bf.view(np.uint8).shape, raw_dtype=Q.BF16)
    tensors.append(("t.bf16", Q.BF16, bf.view(np.uint8)))
    for name, qtype, rows, cols in [("t.q8_0", Q.Q8_0, 3, 64), ("t.q4_0", Q.Q4_0, 2, 96), ("t.q4_k", Q.Q4_K, 3, 512),
                                    ("t.q5_k", Q.Q5_K, 2, 768), ("t.q6_k", Q.Q6_K, 3, 512)]:
        raw = random_blocks(rng, qtype, rows, cols)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        tensors.append((name, qtype, raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(str(path))
    meta = {}
    for field in r.fields.values():
        if not field.name.startswith("test."):
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = field.types[-1]
            vals = [field.parts[i] for i in field.data]
            if et == gguf.GGUFValueType.STRING:
                meta[field.name] = [bytes(v).decode("utf-8") for v in vals]
            else:
                meta[field.name] = [v.tolist()[0] for v in vals]
        elif vt == gguf.GGUFValueType.STRING:
            meta[field.name] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            meta[field.name] = field.parts[field.data[0]].tolist()[0]
    golden = {"generator": "tools/reference/gen_gguf_goldens.py", "gguf": importlib.metadata.version("gguf"), "file": "gguf/types.gguf",
              "metadata": meta, "tensors": []}
    for t in r.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        golden["tensors"].append({
            "name": t.name, "type": int(t.tensor_type), "type_name": t.tensor_type.name, "ne": [int(x) for x in t.shape],
            "sha256": hashlib.sha256(values.tobytes()).hexdigest(),
            "first": [float(x) for x in values[:8]],
            "last": [float(x) for x in values[-4:]],
        })
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes) and {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
