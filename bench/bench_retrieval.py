#!/usr/bin/env python3
"""Retrieval throughput on a served Qwen3-VL-Embedding / -Reranker model (BENCHMARKS.md, "Retrieval").

Usage: bench/bench_retrieval.py DIR   (DIR holds b2e/: make-test-model --preset 2b-embedding, b2r/: the same weights
as a reranker, bimg/img0..7.png: 448x448 images, passages.jsonl: text passages; QVL_BINARY, default build/qvl). Prints each
figure three times: the first run is cold; the repeats hit the image and prefix caches (the same inputs)."""
import base64, json, os, subprocess, sys, time, urllib.request, statistics
DIR = sys.argv[1]
QVL = os.environ.get("QVL_BINARY", "build/qvl")
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    t = time.time(); r = json.load(urllib.request.urlopen(req, timeout=600)); return time.time() - t, r
imgs = ["data:image/png;base64," + base64.b64encode(open(f"{DIR}/bimg/img{i}.png", "rb").read()).decode() for i in range(8)]
texts = [json.loads(l) for l in open(f"{DIR}/passages.jsonl")][:8]
def serve(model, parallel, port):
    p = subprocess.Popen([QVL, "serve", "--model", model, "--port", str(port), "--parallel", str(parallel), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); break
        except Exception: time.sleep(0.2)
    return p
for parallel in (1, 8):
    p = serve(f"{DIR}/b2e", parallel, 18450 + parallel)
    port = 18450 + parallel
    post(port, "/v1/embeddings", {"input": texts[:2]})  # warm up
    post(port, "/v1/embeddings", {"input": [{"image": imgs[0]}]})
    res = {}
    for name, inputs in (("images 448x448", [{"image": i} for i in imgs]), ("text passages (119 tokens)", texts)):
        times = []
        for r in range(3):
            if parallel == 1:
                t = sum(post(port, "/v1/embeddings", {"input": [x]})[0] for x in inputs)  # one request each
            else:
                t = post(port, "/v1/embeddings", {"input": inputs})[0]
            times.append(len(inputs) / t)
        print(f"embedding parallel {parallel}: {name}: {statistics.median(times):.2f}/s (runs {[round(x,2) for x in times]})", flush=True)
    rss = int(open(f"/proc/{p.pid}/status").read().split("VmHWM:")[1].split()[0]) / 1024
    print(f"embedding parallel {parallel}: peak RSS {rss:.0f} MB", flush=True)
    p.terminate(); p.wait()
    p = serve(f"{DIR}/b2r", parallel, 18460 + parallel)
    port = 18460 + parallel
    post(port, "/v1/rerank", {"query": "warm", "documents": ["up"]})
    times = []
    for r in range(3):
        t, out = post(port, "/v1/rerank", {"query": "a photo of a fox", "documents": texts})
        times.append(len(texts) / t)
    rss = int(open(f"/proc/{p.pid}/status").read().split("VmHWM:")[1].split()[0]) / 1024
    print(f"reranker parallel {parallel}: 8 text pairs a request: {statistics.median(times):.2f} pairs/s (runs {[round(x,2) for x in times]}), peak RSS {rss:.0f} MB", flush=True)
    p.terminate(); p.wait()
