"""Writes tests/data/unicode_sweep_golden.json: HF `tokenizers` on every code point and on ill-formed UTF-8.

Three sweeps, each cut into chunks whose ids are recorded as a count and an FNV-1a 64 hash (of the ids as
4-byte little-endian integers), so that the file stays small while covering everything:

- code points: every code point but the surrogates (1,112,064), in each of the `contexts` below, where
  `{}` stands for the code point: the classes of the split regex (letter after a letter, before a digit, after
  a space, after an apostrophe) and NFC (composition with a preceding `e` and a following U+0301,
  reordering against marks of class 230 and 220);
- composites: every primary composite HF's NFC recomposes (Hangul syllables: every 97th), given decomposed, and decomposed with a mark of
  class 220 appended (the composition table and canonical reordering);
- bytes: ill-formed and truncated UTF-8, every sequence of the byte families below (the cartesian product
  of each family's lists), between two letters and at the end of the text, decoded as Python decodes
  bytes for HF (errors="replace": one U+FFFD per maximal subpart).

All text is encoded as user text (control tokens not matched), as qvl encodes what users send.
Deterministic: re-running reproduces the file byte for byte.
"""
import json
import sys
from pathlib import Path

import tokenizers
from tokenizers import normalizers

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen3-vl-2b-instruct"
OUT = ROOT / "tests" / "data" / "unicode_sweep_golden.json"

CONTEXTS = ["a{}1 {}'{}\n", "e{}\u0301\u0323 "]
CHUNK = 4096
REP = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4,
       0xF5, 0xFF]
BYTE_FAMILIES = [
    [list(range(0x00, 0x100))],
    [list(range(0x80, 0x100)), REP],
    [list(range(0xC0, 0x100)), list(range(0x80, 0xC0)), [0x41, 0x80, 0xBF, 0xC2]],
    [list(range(0xF0, 0xF8)), [0x80, 0x8F, 0x90, 0xBF], [0x41, 0x80, 0xBF], [0x41, 0x80, 0xBF, 0xF0]],
]
BYTE_CONTEXTS = [["a", "b"], ["a", ""]]  # before and after each sequence; "" after: at the end of the text
BYTE_CHUNK = 256


def fnv(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in (i & 0xFFFFFFFF).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def product(lists):
    out = [[]]
    for lst in lists:
        out = [p + [x] for p in out for x in lst]
    return out


def main():
    tok = tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.encode_special_tokens = True
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]

    code_point_chunks = []
    for ci, ctx in enumerate(CONTEXTS):
        for i in range(0, len(cps), CHUNK):
            chunk = cps[i:i + CHUNK]
            ids = enc("".join(ctx.replace("{}", chr(cp)) for cp in chunk))
            code_point_chunks.append({"context": ci, "first": chunk[0], "last": chunk[-1], "count": len(ids),
                                      "hash": fnv(ids)})

    nfd, nfc = normalizers.NFD(), normalizers.NFC()
    composites = []
    for cp in cps:
        d = nfd.normalize_str(chr(cp))
        if d != chr(cp) and nfc.normalize_str(d) == chr(cp) and len(d) > 1:
            if 0xAC00 <= cp <= 0xD7A3 and cp % 97:  # Hangul by arithmetic: a sample of the 11,172
                continue
            composites.append(d)
    composite_cases = []
    for suffix in ["", "\u0323"]:
        texts = [d + suffix for d in composites]
        ids = enc(" ".join(texts))
        composite_cases.append({"suffix": suffix, "count": len(ids), "hash": fnv(ids)})

    byte_chunks = []
    seqs = [bytes(s) for fam in BYTE_FAMILIES for s in product(fam)]
    for bi, (pre, post) in enumerate(BYTE_CONTEXTS):
        for i in range(0, len(seqs), BYTE_CHUNK):
            # Each sequence is its own text: "at the end of the text" must mean the end.
            ids = []
            for s in seqs[i:i + BYTE_CHUNK]:
                ids += enc((pre.encode() + s + post.encode()).decode("utf-8", errors="replace"))
            byte_chunks.append({"context": bi, "first": i, "count": len(ids), "hash": fnv(ids)})

    doc = {
        "tokenizers_version": tokenizers.__version__,
        "hash": "FNV-1a 64 of the ids as 4-byte little-endian integers",
        "contexts": CONTEXTS,
        "chunk": CHUNK,
        "code_points": len(cps),
        "composites": composites,
        "byte_families": BYTE_FAMILIES,
        "byte_contexts": BYTE_CONTEXTS,
        "byte_chunk": BYTE_CHUNK,
        "byte_sequences": len(seqs),
        "code_point_chunks": code_point_chunks,
        "composite_cases": composite_cases,
        "byte_chunks": byte_chunks,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("{\n")
        items = list(doc.items())
        for k, (key, val) in enumerate(items):
            if isinstance(val, list) and val and isinstance(val[0], dict):
                f.write(f" {json.dumps(key)}: [\n")
                f.write(",\n".join("  " + json.dumps(v) for v in val))
                f.write("\n ]")
            else:
                f.write(f" {json.dumps(key)}: {json.dumps(val)}")
            f.write(",\n" if k + 1 < len(items) else "\n")
        f.write("}\n")
    print(f"{OUT.relative_to(ROOT)}: {len(cps)} code points x {len(CONTEXTS)} contexts, {len(composites)} composites, "
          f"{len(seqs)} byte sequences x {len(BYTE_CONTEXTS)} contexts", file=sys.stderr)


if __name__ == "__main__":
    main()
