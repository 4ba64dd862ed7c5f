#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<name>/seed-*) from the repository's test
data and the model files, deterministically. Inputs that fuzzing found later are kept beside them (merged
with libFuzzer's -merge=1; see README.md). Usage: tests/fuzz/make_seeds.py  (standard library only)."""
import json
import random
import re
import shutil
import struct
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
MODEL = ROOT / "models" / "qwen3-vl-2b-instruct"
CORPUS = Path(__file__).resolve().parent / "corpus"


def out(name, seed, data):
    d = CORPUS / name
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{seed}").write_bytes(data if isinstance(data, bytes) else data.encode())


# --- images: small files of every format, good and bad ---------------------------------------------------
def images():
    for p in sorted((DATA / "images").iterdir()):
        if p.is_file() and p.stat().st_size <= 4096:
            out("images", p.name, p.read_bytes())
    for p in sorted((DATA / "images" / "bad").iterdir()):
        if p.stat().st_size <= 8192:
            out("images", "bad-" + p.name, p.read_bytes())
        else:  # the big truncated files, cut to their first 4 KB
            out("images", "bad-head-" + p.name, p.read_bytes()[:4096])


# --- exif: the metadata payloads of the test images, behind fuzz_exif.cpp's container byte ----------------
def exif():
    modes = {"jpeg_exif": 0, "jpeg_xmp": 1, "png_exif": 2, "png_text_exif": 3, "png_raw": 4, "png_xmp": 5,
             "webp_exif": 6, "webp_xmp": 7}
    for p in sorted((DATA / "images").glob("jpeg_*.jpg")):
        b = p.read_bytes()
        i = 2
        while i + 4 <= len(b) and b[i] == 0xFF and b[i + 1] not in (0xDA, 0xD9):
            n = struct.unpack(">H", b[i + 2:i + 4])[0]
            seg = b[i + 4:i + 2 + n]
            if b[i + 1] == 0xE1 and seg.startswith(b"Exif\0\0"):
                out("exif", p.stem + "-exif", bytes([modes["jpeg_exif"]]) + seg[6:])
                out("exif", p.stem + "-exif-in-png", bytes([modes["png_exif"]]) + seg[6:])
                out("exif", p.stem + "-exif-in-webp", bytes([modes["webp_exif"]]) + seg[6:])
            elif b[i + 1] == 0xE1 and seg.startswith(b"http://ns.adobe.com/xap/1.0/\0"):
                out("exif", p.stem + "-xmp", bytes([modes["jpeg_xmp"]]) + seg[29:])
                out("exif", p.stem + "-xmp-in-webp", bytes([modes["webp_xmp"]]) + seg[29:])
                out("exif", p.stem + "-xmp-in-png", bytes([modes["png_xmp"]]) + seg[29:])
            i += 2 + n
    for p in sorted((DATA / "images").glob("png_*.png")):
        b = p.read_bytes()
        i = 8
        while i + 8 <= len(b):
            n, t = struct.unpack(">I4s", b[i:i + 8])
            body = b[i + 8:i + 8 + n]
            if t == b"eXIf":
                out("exif", p.stem, bytes([modes["png_exif"]]) + body)
            elif t == b"tEXt" and body.startswith(b"Raw profile type exif\0"):
                out("exif", p.stem, bytes([modes["png_raw"]]) + body[22:])
            elif t == b"zTXt" and body.startswith(b"Raw profile type exif\0"):
                out("exif", p.stem, bytes([modes["png_raw"]]) + zlib.decompress(body[23:]))
            elif t == b"iTXt" and body.startswith(b"XML:com.adobe.xmp\0"):
                out("exif", p.stem, bytes([modes["png_xmp"]]) + body.split(b"\0", 4)[-1])
            i += 12 + n
    # A minimal big-endian and little-endian IFD0 holding only Orientation = 6 (SHORT), and as a RATIONAL.
    out("exif", "mm-short", bytes([0]) + b"MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0")
    out("exif", "ii-short", bytes([3]) + b"II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x06\0\0\0\0\0\0\0")
    out("exif", "ii-rational", bytes([2]) + b"II*\0\x08\0\0\0\x01\0\x12\x01\x05\0\x01\0\0\0\x1a\0\0\0\0\0\0\0"
        + struct.pack("<II", 12, 2))
    out("exif", "xmp-attr", bytes([1]) + b'<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>')
    out("exif", "raw-profile", bytes([4]) + b"\nexif\n      26\n4d4d002a000000080001011200030000000100060000000000\n")


# --- safetensors and quantized weights -------------------------------------------------------------------
def safetensors_bytes(tensors, metadata=None, raw_header=None):
    """tensors: [(name, dtype, shape, data bytes)] -> file bytes, data in the given order."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))
    h = h.encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors():
    rnd = random.Random(1)
    f32 = lambda n: struct.pack(f"<{n}f", *[rnd.uniform(-1, 1) for _ in range(n)])
    out("safetensors", "f32", safetensors_bytes([("w", "F32", [2, 3], f32(6))], {"format": "pt"}))
    out("safetensors", "mixed", safetensors_bytes([
        ("a.weight", "BF16", [4, 2], bytes(rnd.randrange(256) for _ in range(16))),
        ("b.bias", "F16", [3], bytes(6)), ("q", "U8", [2, 34], bytes(68)), ("empty", "F32", [0, 5], b""),
        ("scalar", "F32", [], f32(1))], {"format": "pt", "qvl.quantized.q": "q8_0"}))
    out("safetensors", "gap", safetensors_bytes([], raw_header=json.dumps(
        {"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})) + bytes(8))
    out("safetensors", "overlap", safetensors_bytes([], raw_header=json.dumps(
        {"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
         "y": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})) + bytes(6))
    out("safetensors", "bad-dtype", safetensors_bytes([("w", "F64", [1], bytes(8))]))
    out("safetensors", "truncated", safetensors_bytes([("w", "F32", [4, 4], f32(16))])[:-10])
    out("safetensors", "header-past-end", struct.pack("<Q", 1 << 40) + b"{}")
    out("safetensors", "empty-header", struct.pack("<Q", 2) + b"{}")
    out("safetensors", "index", json.dumps({"metadata": {"total_size": 11},
                                             "weight_map": {"a": "model-00001-of-00001.safetensors",
                                                            "b": "model-00001-of-00001.safetensors"}}))
    out("safetensors", "index-missing", json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors",
                                                                   "zz": "model-00001-of-00001.safetensors"}}))
    out("safetensors", "index-escape", json.dumps({"weight_map": {"a": "../x.safetensors"}}))


# Keep in step with micro_config() in fuzz_quantized.cpp.
MICRO = dict(v_depth=1, v_hidden=8, v_inter=8, v_in=3, v_t=2, v_patch=2, v_merge=2, v_out=32, v_npos=4,
             deepstack=1, t_hidden=32, t_inter=32, t_layers=1, t_heads=2, t_kv=1, t_hd=16, vocab=8)


def micro_tensors():
    """[(name, shape)] of every tensor the micro configuration binds (weights.cpp's names)."""
    m = MICRO
    h, merged, p = m["v_hidden"], m["v_hidden"] * m["v_merge"] ** 2, "model.visual."
    ts = [(p + "patch_embed.proj.weight", [h, m["v_in"], m["v_t"], m["v_patch"], m["v_patch"]]),
          (p + "patch_embed.proj.bias", [h]), (p + "pos_embed.weight", [m["v_npos"], h])]
    for i in range(m["v_depth"]):
        q = f"{p}blocks.{i}."
        for n in ("norm1", "norm2"):
            ts += [(q + n + ".weight", [h]), (q + n + ".bias", [h])]
        for n, o, k in (("attn.qkv", 3 * h, h), ("attn.proj", h, h), ("mlp.linear_fc1", m["v_inter"], h),
                        ("mlp.linear_fc2", h, m["v_inter"])):
            ts += [(q + n + ".weight", [o, k]), (q + n + ".bias", [o])]

    def merger(q, norm_dim):
        return [(q + ".norm.weight", [norm_dim]), (q + ".norm.bias", [norm_dim]),
                (q + ".linear_fc1.weight", [merged, merged]), (q + ".linear_fc1.bias", [merged]),
                (q + ".linear_fc2.weight", [m["v_out"], merged]), (q + ".linear_fc2.bias", [m["v_out"]])]
    ts += merger(p + "merger", h)
    for j in range(m["deepstack"]):
        ts += merger(f"{p}deepstack_merger_list.{j}", merged)
    t, th, hd = "model.language_model.", m["t_hidden"], m["t_hd"]
    qd, kvd, inter = m["t_heads"] * hd, m["t_kv"] * hd, m["t_inter"]
    ts.append((t + "embed_tokens.weight", [m["vocab"], th]))
    for i in range(m["t_layers"]):
        q = f"{t}layers.{i}."
        ts += [(q + "input_layernorm.weight", [th]), (q + "post_attention_layernorm.weight", [th]),
               (q + "self_attn.q_norm.weight", [hd]), (q + "self_attn.k_norm.weight", [hd]),
               (q + "self_attn.q_proj.weight", [qd, th]), (q + "self_attn.k_proj.weight", [kvd, th]),
               (q + "self_attn.v_proj.weight", [kvd, th]), (q + "self_attn.o_proj.weight", [th, qd]),
               (q + "mlp.gate_proj.weight", [inter, th]), (q + "mlp.up_proj.weight", [inter, th]),
               (q + "mlp.down_proj.weight", [th, inter])]
    ts.append((t + "norm.weight", [th]))
    return ts


def quantized():
    rnd = random.Random(2)

    def bf16(n):  # small normal values: exponent around 1
        return b"".join(struct.pack("<H", 0x3C00 + rnd.randrange(0x800) ^ rnd.choice((0, 0x8000))) for _ in range(n))

    def blocks(kind, rows, cols):  # rows of Q8_0 (f16 d + 32 int8) or Q4_0 (f16 d + 16 nibble bytes) blocks
        per = 34 if kind == "q8_0" else 18
        data = b""
        for _ in range(rows * cols // 32):
            data += struct.pack("<H", 0x2000 + rnd.randrange(0x400)) + bytes(rnd.randrange(256) for _ in range(per - 2))
        return data, [rows, cols // 32 * per]

    def model(quant, lm_head=None):
        tensors, meta = [], {"format": "pt", "qvl.writer": "qvl quantize"}
        for name, shape in micro_tensors():
            numel = 1
            for d in shape:
                numel *= d
            kind = quant(name, shape)
            if kind:
                data, st_shape = blocks(kind.replace("x8", ""), shape[0], numel // shape[0])
                tensors.append((name, "U8", st_shape, data))
                meta["qvl.quantized." + name] = kind
            else:
                tensors.append((name, "BF16", shape, bf16(numel)))
        if lm_head:
            data, st_shape = blocks(lm_head, MICRO["vocab"], MICRO["t_hidden"])
            tensors.append(("lm_head.weight", "U8", st_shape, data))
            meta["qvl.quantized.lm_head.weight"] = lm_head
        tensors.sort(key=lambda t: t[0])
        return safetensors_bytes(tensors, meta)

    def matrix(name, shape):
        return len(shape) == 2 and name.endswith(".weight") and shape[1] % 32 == 0
    out("quantized", "bf16", model(lambda n, s: None))
    out("quantized", "q8_0", model(lambda n, s: "q8_0" if matrix(n, s) else None))
    out("quantized", "q4_0-x8", model(lambda n, s: ("q4_0x8" if s[0] % 8 == 0 else "q4_0") if matrix(n, s) else None,
                                      lm_head="q4_0"))
    out("quantized", "mixed", model(lambda n, s: ("q8_0x8" if "language_model" in n else "q4_0")
                                    if matrix(n, s) and s[0] % 8 == 0 else None, lm_head="q8_0"))


# --- chat: the golden conversations, without their expected text ------------------------------------------
def chat():
    cases = json.loads((DATA / "chat_golden.json").read_text())
    for c in cases[::3]:
        case = {k: c[k] for k in ("messages", "tools", "add_generation_prompt", "add_vision_id")}
        out("chat", c["name"], json.dumps(case, ensure_ascii=False, separators=(",", ":")))


# --- tokenizer: golden strings in all four modes ----------------------------------------------------------
def tokenizer():
    cases = json.loads((DATA / "tokenizer_golden.json").read_text())["cases"]
    picked = [c["text"] for c in cases[::43] if len(c["text"].encode()) <= 512]
    picked += ["x<|vision_start|> y<|im_start|>user\n<think>hi</think><tool_call>", "\ud83d\ude00 caf\u0065\u0301",
               "  \n\n\t multiple   spaces and 12345 digits's"]
    for i, text in enumerate(picked):
        b = text.encode("utf-8", "surrogatepass")
        out("tokenizer", f"{i:03d}", bytes([i % 4]) + b)
    out("tokenizer", "invalid-utf8", bytes([0]) + b"\xff\xfe abc \xc3 \xe2\x82 <|im_end|>")


# --- tokenizer_json: the model's tokenizer.json cut to a few hundred entries, both merge spellings, and the
# shapes it refuses -----------------------------------------------------------------------------------------
def tokenizer_json():
    raw = (MODEL / "tokenizer.json").read_text(encoding="utf-8")
    t = json.loads(raw)
    t["model"]["vocab"] = dict(list(t["model"]["vocab"].items())[:400])
    t["model"]["merges"] = t["model"]["merges"][:200]
    out("tokenizer_json", "cut", json.dumps(t, ensure_ascii=False, indent=2))
    t["model"]["merges"] = [" ".join(m) for m in t["model"]["merges"]]  # the older "left right" form
    out("tokenizer_json", "cut-string-merges", json.dumps(t, ensure_ascii=False))
    out("tokenizer_json", "head", raw.encode("utf-8")[:4096])
    small = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
             "added_tokens": [{"id": 4, "content": "<s>", "special": True}, {"id": 5, "content": "<t>"}]}
    text = json.dumps(small)
    out("tokenizer_json", "small", text.replace('"ab": 2', '"ab": 2, "a": 3', 1))
    for i, bad in enumerate(['{"model": {"type": "WordPiece", "vocab": {}, "merges": []}}',
                             '{"model": {"type": "BPE", "vocab": {"a": 1.5}, "merges": []}}',
                             '{"model": {"type": "BPE", "vocab": {}, "merges": [["a"], "ab"]}}',
                             '{"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": [{"id": -1}]}',
                             '{"decoder": [[[[{"vocab": {"x": 1}}]]]], "model": null}']):
        out("tokenizer_json", f"bad-{i}", bad)


# --- config: the model's config.json and a small variant -------------------------------------------------
def config():
    text = (MODEL / "config.json").read_text()
    out("config", "2b", text)
    c = json.loads(text)
    c["vision_config"].update(depth=5, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=128,
                              deepstack_visual_indexes=[1, 2, 3])
    c["text_config"].update(hidden_size=128, intermediate_size=256, num_hidden_layers=4)
    out("config", "tiny", json.dumps(c, indent=1))


# --- gguf: the type-zoo file written by the gguf package, and cuts of it ---------------------------------
def gguf():
    whole = (DATA / "gguf" / "types.gguf").read_bytes()
    out("gguf", "types", whole)
    for cut in (24, 200, 600, len(whole) // 2):
        out("gguf", f"cut-{cut}", whole[:cut])


# --- video: the test clips (every container and codec), the bad ones, and cuts of two --------------------
def video():
    for p in sorted((DATA / "videos").iterdir()):
        out("video", p.stem, p.read_bytes())
    for name in ("h264_30fps_64x48.mp4", "vp9_25fps_70x50.webm"):
        whole = (DATA / "videos" / name).read_bytes()
        for cut in (64, len(whole) // 3, len(whole) * 2 // 3):
            out("video", f"{name.split('.')[0]}-cut-{cut}", whole[:cut])


# --- http: raw requests, good and refused (the cases tests/test_http_hardening.cpp sends) -------------------
def http():
    host = b"Host: 127.0.0.1:8080\r\n"
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    cases = {
        "get": b"GET /health HTTP/1.1\r\n" + host + b"\r\n",
        "get-10": b"GET /health HTTP/1.0\r\n\r\n",
        "post-length": b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
                       + b"Content-Length: %d\r\n\r\n" % len(body) + body,
        "post-chunked": b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n"
                        + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + 9]), body[i:i + 9]) for i in range(0, len(body), 9))
                        + b"0\r\nX-Trailer: t\r\n\r\n",
        "chunked-bare-lf-first": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n2\n{}\n0\n\n",
        "chunked-bare-lf-second": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n1\n}\r\n0\r\n\r\n",
        "chunked-bare-lf-trailer": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX: y\n\r\n",
        "te-gzip": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: gzip\r\n\r\n",
        "te-chunked-twice": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        "te-and-length": b"POST /api/chat HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "two-hosts": b"GET /health HTTP/1.1\r\n" + host + host + b"\r\n",
        "no-host": b"GET /health HTTP/1.1\r\n\r\n",
        "bad-host": b"GET /health HTTP/1.1\r\nHost: [::1]attacker.example\r\n\r\n",
        "expect": b"POST /api/chat HTTP/1.1\r\n" + host + b"Expect: 200-ok\r\nContent-Length: 0\r\n\r\n",
        "obs-fold": b"GET /health HTTP/1.1\r\n" + host + b"X-A: a\r\n  folded\r\n\r\n",
        "bare-lf-header": b"GET /health HTTP/1.1\n" + host + b"\r\n",
        "trace": b"TRACE /health HTTP/1.1\r\n" + host + b"\r\n",
        "lowercase": b"get /health HTTP/1.1\r\n" + host + b"\r\n",
    }
    for name, data in cases.items():
        out("http", name, data)


# --- documents: pdfinfo answers, selections, PPM output, chat bodies with file parts, PDFs (mode byte first) ---
def documents():
    import base64
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "pdf"))
    import pdfgen
    out("documents", "pdfinfo", b"\0Pages:           2\nEncrypted:       no\nPage    1 size:  595.276 x 841.89 pts (A4)\n"
        b"Page    1 rot:   90\nPage    2 size:  14400 x 10 pts\nPage    2 rot:   0\n")
    out("documents", "pdfinfo-encrypted", b"\0Pages: 1\nEncrypted: yes (print:yes)\nPage    1 size: 1 x 1 pts\n")
    for name, spec in (("selection", b"1-3,7"), ("selection-open", b"5-"), ("selection-all", b"all")):
        out("documents", name, b"\1\x0a" + spec)
    out("documents", "ppm", b"\2P6\n2 1\n255\n" + bytes(range(6)) + b"P6\n1 1\n255\n\xff\x00\x00")
    pdf = (DATA / "pdf" / "text.pdf").read_bytes()
    body = {"messages": [{"role": "user", "content": [
        {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64," +
                                  base64.b64encode(pdf).decode(), "pages": [1]}, "max_pixels": 200704},
        {"type": "text", "text": "?"}]}, {"role": "system", "content": [{"type": "file", "file": {"filename": "b.pdf"}}]}]}
    out("documents", "chat", b"\3" + json.dumps(body).encode())
    for name in ("text.pdf", "rotated.pdf", "shapes.pdf"):
        out("documents", name, b"\4" + (DATA / "pdf" / name).read_bytes())
    for name, data in pdfgen.hostile().items():
        if len(data) <= 16384:
            out("documents", "hostile-" + name, b"\4" + data)


# --- retrieval: /v1/embeddings, /api/embed and /v1/rerank bodies ---------------------------------------------
def retrieval():
    img = "data:image/png;base64,iVBORw0KGgo="
    bodies = {
        "strings": {"model": "m", "input": ["a cat", "a dog"], "dimensions": 64, "encoding_format": "base64"},
        "one": {"input": "hello", "instruction": "Find pictures"},
        "objects": {"input": [{"text": ["a", "b"], "image": [img, "file:///x.png"], "instruction": "  Find  "},
                              {"video": "clip.mp4"}, {}, "plain"]},
        "tokens": {"input": [[1, 2, 3]]},
        "ollama": {"model": "m", "input": ["x", {"image_url": {"url": img}}], "truncate": True, "dimensions": 3},
        "rerank": {"query": "capital of France", "documents": ["Paris", {"text": "Lyon", "image": img}, {}],
                   "top_n": 2, "return_documents": True, "instruction": "Judge"},
        "rerank-image-query": {"query": {"image": img}, "documents": [{"text": ["a", "b"]}]},
        "bad-types": {"input": {"text": 3, "image": {"url": 1}}, "dimensions": -1, "top_n": "x"},
    }
    for name, body in bodies.items():
        out("retrieval", name, json.dumps(body))


if __name__ == "__main__":
    for name in ("images", "exif", "safetensors", "quantized", "chat", "tokenizer", "tokenizer_json", "config", "gguf",
                 "video", "http", "documents", "retrieval"):
        for p in (CORPUS / name).glob("seed-*"):
            p.unlink()
        globals()[name]()
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    print(f"corpora: {total} bytes in {sum(1 for p in CORPUS.rglob('*') if p.is_file())} files")
