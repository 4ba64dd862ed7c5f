#!/usr/bin/env python3
"""Concurrency figures for `qvl serve` (or any OpenAI-compatible server, e.g. llama-server), from the client
side: streaming requests through /v1/chat/completions, timed chunk by chunk.

Scenarios (--scenario, comma-separated; default: concurrent):
  concurrent   N clients at once (--concurrency 1,3,8), each streaming one image request; each client gets
               its own picture (--image variants with a few pixels changed) unless --same-image. Prints the
               time to first token, the latency, when all are done and each stream's largest gap between
               two tokens after its first.
  decode       N text-only streams at once (--decode-streams, --decode-tokens): aggregate tokens per second
               while all N decode, against one stream alone.
  conversation --turns turns about one image, each sent whole (earlier answers included): time to first token
               of each turn.
  same-image   N clients send the same image at once: how many vision encodes the server ran
               (qvl_images_encoded_total from /metrics, qvl only).

Usage: tools/load_test.py --url http://127.0.0.1:8080 --image FILE.png [--scenario concurrent,decode,...]
Standard library only (threads + urllib + zlib), so it runs anywhere the server does.
"""
import argparse
import base64
import json
import statistics
import struct
import threading
import time
import urllib.request
import zlib


def png_variant(png: bytes, k: int) -> bytes:
    """The same PNG with its first pixel row's bytes shifted by k (a different picture to a cache, same size).
    Works on 8-bit RGB/RGBA non-interlaced PNGs (re-encodes the IDAT)."""
    if k == 0:
        return png
    pos, chunks = 8, []
    while pos < len(png):
        n = struct.unpack(">I", png[pos:pos + 4])[0]
        chunks.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]))
        pos += 12 + n
    ihdr = next(d for t, d in chunks if t == b"IHDR")
    w, h, depth, ctype = struct.unpack(">IIBB", ihdr[:10])
    if depth != 8 or ctype not in (2, 6):
        raise SystemExit("--image must be an 8-bit RGB or RGBA PNG to make variants (or use --same-image)")
    raw = bytearray(zlib.decompress(b"".join(d for t, d in chunks if t == b"IDAT")))
    bpp = 3 if ctype == 2 else 4
    stride = 1 + w * bpp
    # Unfilter row 0 is only needed if its filter is not None: force filter 0 on a fresh row 0 of our own.
    raw[0] = 0
    for i in range(1, stride):
        raw[i] = (raw[i] + 17 * k) & 255
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    out = png[:8] + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + chunk(b"IEND", b"")
    return out


def stream_chat(url, messages, max_tokens, model="qvl"):
    """Streams one request; returns arrival-relative times of each content chunk, the text and usage."""
    body = json.dumps({
        "model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True,
    }).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    times, text, usage = [], [], {}
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                times.append(time.monotonic())
                text.append(chunk["choices"][0]["delta"]["content"])
            if chunk.get("usage"):
                usage = chunk["usage"]
    end = time.monotonic()
    return {"t0": t0, "times": times, "end": end, "text": "".join(text), "usage": usage,
            "ttft": times[0] - t0 if times else float("nan"), "total": end - t0,
            "max_gap": max((b - a for a, b in zip(times, times[1:])), default=0.0)}


def image_message(png, text):
    b64 = base64.b64encode(png).decode()
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
                                        {"type": "text", "text": text}]}


def run_parallel(fn, n):
    out = [None] * n
    def work(i):
        out[i] = fn(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.monotonic() - t0


def p95(values):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))]


def metric(url, name):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except Exception:
        return None
    return None


def scenario_concurrent(args, png):
    print("\n### concurrent image streams" + (" (the same image)" if args.same_image else " (a different image each)"))
    print("| concurrent | TTFT median | TTFT p95 | latency median | latency p95 | all done | max gap after first token | tokens each |")
    print("|---|---|---|---|---|---|---|---|")
    base = 1000 * int(time.time()) % 100000  # fresh variants each run: nothing from an earlier run's cache
    for n in [int(x) for x in args.concurrency.split(",")]:
        base += n
        out, wall = run_parallel(lambda i: stream_chat(args.url, [image_message(
            png if args.same_image else png_variant(png, base + i), "Describe this image.")], args.max_tokens, args.model), n)
        ttft = [r["ttft"] for r in out]
        total = [r["total"] for r in out]
        print(f"| {n} | {statistics.median(ttft):.1f} s | {p95(ttft):.1f} s | {statistics.median(total):.1f} s | "
              f"{p95(total):.1f} s | {wall:.1f} s | {max(r['max_gap'] for r in out):.2f} s | "
              f"{out[0]['usage'].get('completion_tokens', len(out[0]['times']))} |", flush=True)


def scenario_decode(args):
    print(f"\n### decode throughput ({args.decode_tokens} tokens, text prompts)")
    def one(i):
        return stream_chat(args.url, [{"role": "user", "content": f"Count slowly from {i} to one thousand."}],
                           args.decode_tokens, args.model)
    single, _ = run_parallel(one, 1)
    s = single[0]
    single_rate = (len(s["times"]) - 1) / (s["times"][-1] - s["times"][0])
    n = args.decode_streams
    out, _ = run_parallel(one, n)
    # The window in which every stream is decoding: from the last first token to the first last token.
    lo = max(r["times"][0] for r in out)
    hi = min(r["times"][-1] for r in out)
    tokens = sum(sum(1 for t in r["times"] if lo < t <= hi) for r in out)
    agg = tokens / (hi - lo) if hi > lo else float("nan")
    print("| streams | tokens/s (all streams) | x one stream |")
    print("|---|---|---|")
    print(f"| 1 | {single_rate:.1f} | 1.0 |")
    print(f"| {n} | {agg:.1f} | {agg / single_rate:.2f} |", flush=True)


def scenario_conversation(args, png):
    print(f"\n### conversation: {args.turns} turns about one image, each sent whole")
    print("| turn | prompt tokens | cached tokens | TTFT | latency |")
    print("|---|---|---|---|---|")
    questions = ["Describe this image.", "What colours do you see?", "Is there any text?", "What is in the corner?",
                 "Summarise everything in one sentence.", "Anything else?"]
    messages = [image_message(png_variant(png, 7 + int(time.time()) % 1000), questions[0])]
    for turn in range(args.turns):
        r = stream_chat(args.url, messages, args.max_tokens, args.model)
        u = r["usage"]
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", "-")
        print(f"| {turn + 1} | {u.get('prompt_tokens', '-')} | {cached} | {r['ttft']:.2f} s | {r['total']:.1f} s |", flush=True)
        messages.append({"role": "assistant", "content": r["text"]})
        messages.append({"role": "user", "content": questions[(turn + 1) % len(questions)]})


def scenario_same_image(args, png):
    n = args.same_image_clients
    variant = png_variant(png, 500 + int(time.time()) % 1000)
    before = metric(args.url, "qvl_images_encoded_total")
    out, wall = run_parallel(lambda i: stream_chat(args.url, [image_message(variant, f"Question {i}: what is this?")],
                                                   args.max_tokens, args.model), n)
    after = metric(args.url, "qvl_images_encoded_total")
    encodes = "-" if before is None or after is None else f"{after - before:.0f}"
    print(f"\n### {n} clients, the same image at once")
    print("| clients | vision encodes | TTFT median | all done |")
    print("|---|---|---|---|")
    print(f"| {n} | {encodes} | {statistics.median(r['ttft'] for r in out):.1f} s | {wall:.1f} s |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="qvl")
    ap.add_argument("--image", required=True)
    ap.add_argument("--scenario", default="concurrent")
    ap.add_argument("--concurrency", default="1,3,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--same-image", action="store_true")
    ap.add_argument("--decode-streams", type=int, default=8)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--same-image-clients", type=int, default=3)
    args = ap.parse_args()
    png = open(args.image, "rb").read()
    for s in args.scenario.split(","):
        {"concurrent": lambda: scenario_concurrent(args, png), "decode": lambda: scenario_decode(args),
         "conversation": lambda: scenario_conversation(args, png),
         "same-image": lambda: scenario_same_image(args, png)}[s]()


if __name__ == "__main__":
    main()
