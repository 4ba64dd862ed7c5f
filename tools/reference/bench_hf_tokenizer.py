"""Hugging Face tokenizers' encode throughput on the texts of bench/bench_tokenizer.cpp (one thread, one
string at a time, as qvl encodes a prompt). Prints the median of several runs in MB/s."""
import json
import os
import statistics
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
import tokenizers  # noqa: E402

import qvl_reference as ref  # noqa: E402


def bench(tok, text, runs=7):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return len(text.encode()) / med / 1e6, len(ids), med


def main():
    tok = tokenizers.Tokenizer.from_file(str(ref.MODEL / "tokenizer.json"))
    # qvl's default: control-token text is plain text (user input); the same in HF.
    tok.encode_special_tokens = True
    english = (ref.ROOT / "bench" / "data" / "english.md").read_text()
    golden = json.loads((ref.DATA / "tokenizer_golden.json").read_text())
    multilingual = "".join(c["text"] + "\n" for c in golden["cases"])
    print(f"tokenizers {tokenizers.__version__}")
    for name, text in (("english bench/data/english.md", english), ("multilingual goldens", multilingual)):
        mbs, n, med = bench(tok, text)
        print(f"{name:22s} {len(text.encode()):9d} bytes {n:8d} tokens  median {med * 1e3:8.2f} ms  {mbs:7.2f} MB/s")


if __name__ == "__main__":
    main()
