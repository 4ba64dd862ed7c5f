#!/usr/bin/env python3
"""Concurrency figures for `qvl serve`: N clients at once, each streaming one image request through
/v1/chat/completions; prints the median and p95 of the time to first token and of the total latency.

Usage: tools/load_test.py --url http://127.0.0.1:8080 --image FILE [--concurrency 1,3,8] [--max-tokens 64]
Standard library only (threads + urllib), so it runs anywhere the server does.
"""
import argparse
import base64
import json
import statistics
import threading
import time
import urllib.request


def one_request(url, image_b64, max_tokens, out):
    body = json.dumps({
        "model": "qvl",
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}},
            {"type": "text", "text": "Describe this image."}]}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True,
    }).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                if first is None:
                    first = time.monotonic() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    out.append({"ttft": first if first is not None else float("nan"), "total": time.monotonic() - t0,
                "tokens": tokens})


def p95(values):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--image", required=True)
    ap.add_argument("--concurrency", default="1,3,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    image_b64 = base64.b64encode(open(args.image, "rb").read()).decode()
    print("| concurrent | TTFT median | TTFT p95 | latency median | latency p95 | all done | tokens each |")
    print("|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.concurrency.split(",")]:
        out = []
        threads = [threading.Thread(target=one_request, args=(args.url, image_b64, args.max_tokens, out))
                   for _ in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        ttft = [r["ttft"] for r in out]
        total = [r["total"] for r in out]
        print(f"| {n} | {statistics.median(ttft):.1f} s | {p95(ttft):.1f} s | {statistics.median(total):.1f} s | "
              f"{p95(total):.1f} s | {wall:.1f} s | {out[0]['tokens']} |", flush=True)


if __name__ == "__main__":
    main()
