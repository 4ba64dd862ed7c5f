"""The full-size check of the forward pass: qvl against transformers float32 on the `2b` test model (the exact
Qwen3-VL-2B shapes, generated weights) and one image prompt. Not a CI test: it needs the reference venv,
about 13 GB of memory at its peak (transformers' float32 model) and minutes of CPU time.

Usage (from anywhere; the wrapper `tools/reference/check_full_size` runs this with the venv's python):

    tools/reference/check_full_size [--qvl BIN] [--model DIR] [--work DIR] [--threads N] [-n N] [--no-report]
    tools/reference/check_full_size --report-only [--work DIR]    # re-render the report of an earlier run
    tools/reference/check_full_size --preset tiny --report out/x.md   # a seconds-long smoke test of this script

1. Makes the model if DIR (default out/qvl-2b) has none: `qvl make-test-model --preset 2b --seed 1`, written
   to a temporary sibling and renamed, so a concurrent user never sees half a model. It is kept for reuse.
2. Runs `qvl run ... --dump` under /usr/bin/time -v (every named intermediate of the vision pass and the
   prefill as .npy, the generated ids, qvl's timing line, wall time and max RSS), and `qvl preprocess`.
3. Runs transformers 4.57.1 (float32, eager attention) in a child process of its own, after qvl has exited:
   the same processor, message and image; forward hooks capture the same intermediates during the prefill of
   a greedy generate() of the same number of tokens (output_logits for the per-step logit margins).
4. Compares: per intermediate the max relative error max|ours - theirs| / max|theirs|, the first one above
   1e-4, the last-position logits, the greedy agreement; prints it and writes docs/full_size_check.md.

The dumped `model.language_model.embed_tokens` is the input of the first layer (the token embeddings with the
image embeddings scattered in), compared with the input of transformers' layer 0; `model.language_model.layers.N`
is the output after the DeepStack addition, compared with the input of layer N + 1 (or of the final norm);
`model.visual.pos_embed_added` is compared with the input of vision block 0.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL_FILES = ROOT / "models" / "qwen3-vl-2b-instruct"
IMAGE = ROOT / "tests" / "data" / "images" / "png_rgb8_448x448.png"
PROMPT = "Describe this image."
THRESHOLD = 1e-4
PAD_ID = 151643  # <|endoftext|>


def log(msg):
    print(f"[check_full_size] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# The transformers side (runs in a child process, so its ~9 GB are gone before and after).


def hf_worker(args):
    import torch
    import transformers
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration
    from transformers.image_utils import load_image

    sys.path.insert(0, str(HERE))
    import qvl_reference as ref

    torch.set_num_threads(args.threads)
    out = Path(args.work) / "hf"
    out.mkdir(parents=True, exist_ok=True)
    info = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": args.threads}

    t0 = time.perf_counter()
    model = Qwen3VLForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    info["load_s"] = time.perf_counter() - t0
    proc = ref.processor()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": args.prompt}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    enc = proc(text=[text], images=[load_image(str(args.image))], return_tensors="pt")
    ids = enc["input_ids"][0]
    info["prompt_tokens"] = int(ids.numel())
    info["image_grid_thw"] = enc["image_grid_thw"].tolist()
    info["image_tokens"] = int((ids == model.config.image_token_id).sum())
    np.save(out / "input_ids.npy", ids.numpy().astype("<i8"))
    np.save(out / "pixel_values.npy", enc["pixel_values"].float().numpy().astype("<f4"))
    emb = model.model.language_model.embed_tokens.weight
    np.save(out / "embed_rows.npy", emb[ids].detach().numpy().astype("<f4"))  # the plain table lookup
    np.save(out / "image_mask.npy", (ids == model.config.image_token_id).numpy())

    # Hooks keep the first call only: the vision pass and the prefill (decode steps call the layers again).
    captured = {}

    def keep(name, t):
        if name not in captured:
            captured[name] = t.detach().float().clone()

    visual, lm = model.model.visual, model.model.language_model
    hooks = []
    hooks.append(visual.patch_embed.register_forward_hook(lambda m, a, o: keep("model.visual.patch_embed", o)))
    hooks.append(visual.blocks[0].register_forward_pre_hook(
        lambda m, a: keep("model.visual.pos_embed_added", a[0])))
    for i, blk in enumerate(visual.blocks):
        hooks.append(blk.register_forward_hook(lambda m, a, o, i=i: keep(f"model.visual.blocks.{i}", o)))
    for j, mod in enumerate(visual.deepstack_merger_list):
        hooks.append(mod.register_forward_hook(
            lambda m, a, o, j=j: keep(f"model.visual.deepstack_merger_list.{j}", o)))
    hooks.append(visual.merger.register_forward_hook(lambda m, a, o: keep("model.visual.merger", o)))
    hooks.append(lm.layers[0].register_forward_pre_hook(
        lambda m, a: keep("model.language_model.embed_tokens", a[0][0])))
    for i in range(len(lm.layers)):
        nxt = lm.layers[i + 1] if i + 1 < len(lm.layers) else lm.norm
        hooks.append(nxt.register_forward_pre_hook(
            lambda m, a, i=i: keep(f"model.language_model.layers.{i}", a[0][0])))
    hooks.append(lm.norm.register_forward_hook(lambda m, a, o: keep("model.language_model.norm", o[0, -1:])))
    stamps = {}

    def lm_head_hook(m, a, o):
        keep("lm_head", o[0, -1:])
        stamps.setdefault("first_logits", time.perf_counter())

    hooks.append(model.lm_head.register_forward_hook(lm_head_hook))

    # Replace the model's own generation config (do_sample=True, temperature 0.7, ...): a config passed to
    # generate() would have its default-valued fields (do_sample=False!) overridden by the model's.
    model.generation_config = GenerationConfig(do_sample=False, max_new_tokens=args.n, eos_token_id=None,
                                               pad_token_id=PAD_ID)
    t0 = time.perf_counter()
    with torch.no_grad():
        gen = model.generate(**enc, output_logits=True, return_dict_in_generate=True)
    t1 = time.perf_counter()
    for h in hooks:
        h.remove()
    info["generate_s"] = t1 - t0
    info["first_token_s"] = stamps["first_logits"] - t0
    new = gen.sequences[0, ids.numel():].tolist()
    info["generated_ids"] = new
    info["decode_tok_s"] = (len(new) - 1) / (t1 - stamps["first_logits"]) if len(new) > 1 else 0.0
    steps = torch.stack([lg[0].float() for lg in gen.logits])  # [steps, vocab], raw logits
    top = torch.topk(steps, 5, dim=-1)
    np.save(out / "step_top_ids.npy", top.indices.numpy())
    np.save(out / "step_top_values.npy", top.values.numpy())
    np.save(out / "step_logits_max_abs.npy", steps.abs().max(-1).values.numpy())
    np.save(out / "step_logits.npy", steps.numpy().astype("<f4"))  # 64 x 151936 floats, ~39 MB
    for name, t in captured.items():
        np.save(out / f"{name}.npy", t.numpy().astype("<f4"))
    (Path(args.work) / "hf.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"transformers: load {info['load_s']:.1f} s, generate {info['generate_s']:.1f} s")


# ---------------------------------------------------------------------------------------------------------
# The driver.


def run_logged(cmd, stdout_path, stderr_path, time_path):
    """Runs cmd under /usr/bin/time -v; returns (returncode, wall seconds, /usr/bin/time's report)."""
    log("$ " + shlex.join(cmd))
    t0 = time.perf_counter()
    with open(stdout_path, "w") as so, open(stderr_path, "w") as se:
        rc = subprocess.call(["/usr/bin/time", "-v", "-o", str(time_path)] + cmd, stdout=so, stderr=se)
    wall = time.perf_counter() - t0
    report = Path(time_path).read_text() if Path(time_path).exists() else ""
    return rc, wall, report


def time_field(report, key):
    m = re.search(re.escape(key) + r":\s*(.+)", report)
    return m.group(1).strip() if m else None


def wall_seconds(report):
    v = time_field(report, "Elapsed (wall clock) time (h:mm:ss or m:ss)")
    if not v:
        return None
    s = 0.0
    for part in v.split(":"):
        s = s * 60 + float(part)
    return s


def ensure_model(qvl, model_dir, preset):
    d = Path(model_dir)
    if (d / "config.json").exists() and (d / "model.safetensors").exists():
        log(f"reusing {d}")
        return None
    tmp = d.parent / f".{d.name}.tmp-{os.getpid()}"
    cmd = [qvl, "make-test-model", "--preset", preset, "--seed", "1", "--out", str(tmp), "--model-files",
           str(MODEL_FILES)]
    log("$ " + shlex.join(cmd))
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, check=True)
        if d.exists():  # someone else finished first
            log(f"{d} appeared meanwhile; using it")
        else:
            tmp.rename(d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return time.perf_counter() - t0


def rel_err(ours, theirs):
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    diff = np.abs(ours - theirs)
    scale = np.abs(theirs).max()
    return float(diff.max() / scale) if scale > 0 else float(diff.max()), float(diff.max()), float(scale)


def intermediate_names(config):
    v, t = config["vision_config"], config["text_config"]
    names = ["model.visual.patch_embed", "model.visual.pos_embed_added"]
    ds = v["deepstack_visual_indexes"]
    for i in range(v["depth"]):
        names.append(f"model.visual.blocks.{i}")
        if i in ds:
            names.append(f"model.visual.deepstack_merger_list.{ds.index(i)}")
    names += ["model.visual.merger", "model.language_model.embed_tokens"]
    names += [f"model.language_model.layers.{i}" for i in range(t["num_hidden_layers"])]
    names += ["model.language_model.norm", "lm_head"]
    return names


def parse_qvl_timings(stderr_text):
    line = next((l for l in reversed(stderr_text.splitlines()) if l.startswith("load ")), "")
    num = r"([0-9.]+)"
    pats = {
        "load_ms": r"load " + num + " ms", "preprocess_ms": r"preprocess " + num + " ms",
        "vision_ms": r"image encode " + num + " ms", "image_tokens": r"\(" + num + " image tokens\)",
        "prefill_ms": r"prefill " + num + " ms", "prompt_tokens": r"prefill [0-9.]+ ms \(" + num + " tokens",
        "prefill_tok_s": r"tokens, " + num + " tok/s\)", "first_token_ms": r"first token " + num + " ms",
        "decode_tokens": r"decode " + num + " tokens", "decode_ms": r"tokens in " + num + " ms",
        "decode_tok_s": r"ms \(" + num + " tok/s\) \|",
    }
    out = {"line": line}
    for k, p in pats.items():
        m = re.search(p, line)
        out[k] = float(m.group(1)) if m else None
    return out


def machine():
    model_name, cores = platform.processor(), os.cpu_count()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", lscpu)
        model_name = m.group(1).strip() if m else model_name
        c = re.search(r"^CPU\(s\):\s*(\d+)", lscpu, re.M)
        cores = int(c.group(1)) if c else cores
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, AttributeError):
        pass
    return model_name, cores, mem


def sha256_short(path):
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def git_state():
    def g(*a):
        return subprocess.run(["git", "-C", str(ROOT)] + list(a), capture_output=True, text=True).stdout.strip()
    head = g("rev-parse", "--short", "HEAD")
    dirty = g("status", "--porcelain", "--untracked-files=no", "--", "src", "include", "CMakeLists.txt")
    return head + (" + uncommitted changes under src/" if dirty else "")


def driver(args):
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    qvl = str(Path(args.qvl).resolve())
    make_s = ensure_model(qvl, args.model, args.preset)
    config = json.loads((Path(args.model) / "config.json").read_text())
    ref_config = json.loads((MODEL_FILES / "config.json").read_text())
    if args.preset == "2b" and config != ref_config:
        sys.exit(f"{args.model}/config.json is not the 2b preset's (the checkpoint's config.json); remove it")

    # qvl: the preprocessed image (cheap), then the run with the dump.
    subprocess.run([qvl, "preprocess", "--model", args.model, "--image", str(args.image), "--out",
                    str(work / "qvl_pixel_values.npy")], check=True, stdout=subprocess.DEVNULL)
    qvl_cmd = [qvl, "run", "--model", args.model, "--image", str(args.image), "-p", args.prompt, "-n", str(args.n),
               "--temp", "0", "--ignore-eos", "--threads", str(args.threads), "--dump", str(work / "qvl")]
    load_before_qvl = loadavg()
    rc, qvl_wall, qvl_time = run_logged(qvl_cmd, work / "qvl_stdout.txt", work / "qvl_stderr.txt",
                                        work / "qvl_time.txt")
    qvl_stderr = (work / "qvl_stderr.txt").read_text()
    if rc != 0:
        sys.exit(f"qvl run failed ({rc}):\n{qvl_stderr}")
    qt = parse_qvl_timings(qvl_stderr)
    log("qvl: " + qt["line"])

    # transformers, in a process of its own.
    hf_cmd = [sys.executable, "-W", "ignore", str(Path(__file__).resolve()), "--hf-worker", "--model", args.model,
              "--image", str(args.image), "-p", args.prompt, "-n", str(args.n), "--threads", str(args.threads),
              "--work", str(work)]
    load_before_hf = loadavg()
    rc, hf_wall, hf_time = run_logged(hf_cmd, work / "hf_stdout.txt", work / "hf_stderr.txt", work / "hf_time.txt")
    if rc != 0:
        sys.exit(f"the transformers worker failed ({rc}):\n{(work / 'hf_stderr.txt').read_text()[-4000:]}")
    hf = json.loads((work / "hf.json").read_text())
    H = work / "hf"

    # The prompt: same length, and every text position embeds the same token as transformers'.
    ours_embed = np.load(work / "qvl" / "model.language_model.embed_tokens.npy")
    hf_ids = np.load(H / "input_ids.npy")
    mask = np.load(H / "image_mask.npy")
    rows = np.load(H / "embed_rows.npy")
    prompt_same_len = ours_embed.shape[0] == hf_ids.size
    text_rows_exact = bool(prompt_same_len and np.array_equal(ours_embed[~mask], rows[~mask]))
    pix_ours = np.load(work / "qvl_pixel_values.npy")
    pix_hf = np.load(H / "pixel_values.npy")
    pix = rel_err(pix_ours, pix_hf) if pix_ours.shape == pix_hf.shape else None

    # Per intermediate.
    results = []
    for name in intermediate_names(config):
        po, pt = work / "qvl" / f"{name}.npy", H / f"{name}.npy"
        if not po.exists() or not pt.exists():
            results.append(dict(name=name, missing=("qvl " if not po.exists() else "") +
                                ("transformers" if not pt.exists() else "")))
            continue
        a, b = np.load(po), np.load(pt)
        if a.shape != b.shape:
            results.append(dict(name=name, shape_mismatch=f"{a.shape} vs {b.shape}"))
            continue
        r, d, s = rel_err(a, b)
        results.append(dict(name=name, shape=list(a.shape), rel=r, max_abs_diff=d, max_abs=s))
    bad = [r for r in results if "rel" not in r or r["rel"] > THRESHOLD]
    first_bad = bad[0] if bad else None

    # The logits of the last prompt position.
    ours_logits = np.load(work / "qvl" / "lm_head.npy")[-1].astype(np.float64)
    hf_step_logits = np.load(H / "step_logits.npy")
    hf_logits = hf_step_logits[0].astype(np.float64)
    logit_rel = rel_err(ours_logits, hf_logits)
    o2 = np.argsort(-ours_logits)[:2]
    h2 = np.argsort(-hf_logits)[:2]

    # Greedy agreement.
    ours_gen = json.loads((work / "qvl" / "generated_ids.json").read_text())
    hf_gen = hf["generated_ids"]
    n = min(len(ours_gen), len(hf_gen))
    leading = next((i for i in range(n) if ours_gen[i] != hf_gen[i]), n)
    total_same = sum(1 for i in range(n) if ours_gen[i] == hf_gen[i])
    top_ids, top_vals = np.load(H / "step_top_ids.npy"), np.load(H / "step_top_values.npy")
    margins = (top_vals[:, 0] - top_vals[:, 1]).astype(np.float64)
    divergence = None
    if leading < n:
        s = leading
        divergence = dict(step=s, ours=int(ours_gen[s]), hf=int(hf_gen[s]), hf_top2_ids=top_ids[s, :2].tolist(),
                          hf_top2_values=top_vals[s, :2].tolist(), hf_margin=float(margins[s]),
                          hf_logit_of_ours=float(hf_step_logits[s, ours_gen[s]]),
                          hf_max_abs=float(np.abs(hf_step_logits[s]).max()))
        divergence["hf_gap_to_ours"] = float(top_vals[s, 0] - divergence["hf_logit_of_ours"])
    min_margin_before = float(margins[:leading].min()) if leading > 0 else None

    summary = dict(
        model=args.model, image=str(args.image), prompt=args.prompt, n=args.n, threads=args.threads,
        make_model_s=make_s, prompt_tokens_qvl=int(ours_embed.shape[0]), prompt_tokens_hf=int(hf_ids.size),
        image_tokens_hf=hf["image_tokens"], image_grid_thw=hf["image_grid_thw"], text_rows_exact=text_rows_exact,
        pixel_values=pix, intermediates=results, first_above_threshold=first_bad, logit_rel=logit_rel,
        ours_top2=o2.tolist(), hf_top2=h2.tolist(), hf_margin_step0=float(margins[0]),
        ours_margin_step0=float(ours_logits[o2[0]] - ours_logits[o2[1]]), greedy_leading=leading,
        greedy_total=total_same, greedy_n=n, divergence=divergence, min_hf_margin_before_divergence=min_margin_before,
        ours_generated=ours_gen, hf_generated=hf_gen, qvl_timings=qt, qvl_wall_s=wall_seconds(qvl_time) or qvl_wall,
        qvl_max_rss_kb=int(time_field(qvl_time, "Maximum resident set size (kbytes)") or 0),
        hf=hf, hf_wall_s=wall_seconds(hf_time) or hf_wall,
        hf_max_rss_kb=int(time_field(hf_time, "Maximum resident set size (kbytes)") or 0),
        loadavg_before_qvl=load_before_qvl, loadavg_before_hf=load_before_hf, loadavg_after=loadavg(),
        date=subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip(),
        machine=machine(), hf_step_margins=margins.tolist(),
        qvl_cmd=shlex.join(qvl_cmd), qvl_binary=qvl, git=git_state(), command=args.command_line,
        preset=args.preset, qvl_sha256=sha256_short(qvl),
        qvl_mtime=datetime.datetime.fromtimestamp(os.path.getmtime(qvl), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    (work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print_summary(summary)
    if not args.no_report:
        write_report(summary, args)


def write_report(summary, args):
    report = Path(args.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown(summary, args))
    log(f"wrote {report}")


def report_only(args):
    """Renders the report again from WORK/summary.json (and WORK/hf/) of an earlier run."""
    work = Path(args.work)
    summary = json.loads((work / "summary.json").read_text())
    if "date" not in summary:  # written by an earlier version of this script: the run ended as it was written
        mtime = os.path.getmtime(work / "summary.json")
        summary["date"] = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime(
            "%a %b %d %H:%M:%S UTC %Y")
    if "hf_step_margins" not in summary:
        v = np.load(work / "hf" / "step_top_values.npy")
        summary["hf_step_margins"] = (v[:, 0] - v[:, 1]).astype(float).tolist()
    summary.setdefault("machine", machine())
    print_summary(summary)
    write_report(summary, args)


def loadavg():
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return None


def fmt_e(x):
    return f"{x:.2e}" if x is not None else "—"


def print_summary(s):
    print(f"prompt tokens: qvl {s['prompt_tokens_qvl']}, transformers {s['prompt_tokens_hf']} "
          f"({s['image_tokens_hf']} image tokens); text rows embed the same tokens: {s['text_rows_exact']}")
    if s["pixel_values"]:
        print(f"pixel_values (qvl preprocess vs processor): rel {fmt_e(s['pixel_values'][0])}")
    for r in s["intermediates"]:
        if "rel" in r:
            print(f"  {r['name']:45s} {str(tuple(r['shape'])):14s} rel {r['rel']:.2e}  "
                  f"(max|diff| {r['max_abs_diff']:.3e}, max|ref| {r['max_abs']:.3e})")
        else:
            print(f"  {r['name']:45s} {r}")
    fb = s["first_above_threshold"]
    print("first intermediate above 1e-4:", fb["name"] if fb else "none")
    print(f"last-position logits: max rel error {s['logit_rel'][0]:.2e} (max|diff| {s['logit_rel'][1]:.3e}, "
          f"max|logit| {s['logit_rel'][2]:.3f}); top-2 ours {s['ours_top2']}, transformers {s['hf_top2']}")
    print(f"greedy: {s['greedy_leading']} leading identical of {s['greedy_n']}, {s['greedy_total']} identical in all")
    if s["divergence"]:
        print("divergence:", json.dumps(s["divergence"]))
    print("qvl:", s["qvl_timings"]["line"])
    print(f"qvl run wall {s['qvl_wall_s']:.1f} s, max RSS {s['qvl_max_rss_kb'] / 2**20:.2f} GiB; transformers worker "
          f"wall {s['hf_wall_s']:.1f} s (load {s['hf']['load_s']:.1f} s, generate {s['hf']['generate_s']:.1f} s), "
          f"max RSS {s['hf_max_rss_kb'] / 2**20:.2f} GiB")


def markdown(s, args):
    date = s["date"]
    cpu, cores, mem = s["machine"]
    hf, qt = s["hf"], s["qvl_timings"]
    fb = s["first_above_threshold"]
    rels = [r["rel"] for r in s["intermediates"] if "rel" in r]
    L = []
    L.append("# Full-size check of the forward pass against transformers\n")
    if s["preset"] != "2b":
        L.append(f"**Smoke test on the `{s['preset']}` preset, not the full-size check.**\n")
    L.append("qvl's forward pass on the `2b` test model — the exact Qwen3-VL-2B-Instruct shapes and config, weights "
             "generated by `qvl make-test-model --preset 2b --seed 1` (BF16) — against transformers in float32 "
             "with eager attention, on one image prompt. Not a CI test (it needs the reference venv, ~13 GB of "
             "memory and minutes of CPU); rerun it after changes to the model code. The CI tests check the same "
             "forward on the `tiny` preset against goldens (tests/data/model/).\n")
    L.append("## Command\n")
    L.append("```sh\n" + s["command"] + "\n```\n")
    L.append(f"It makes the model if `{s['model']}` has none (kept for reuse), then runs, one after the other:\n")
    L.append("```sh\n/usr/bin/time -v " + s["qvl_cmd"] + "\n```\n")
    L.append("and transformers 4.57.1 in a child process (`check_full_size.py --hf-worker`): "
             "`Qwen3VLForConditionalGeneration.from_pretrained(DIR, dtype=torch.float32, "
             "attn_implementation=\"eager\")`, the processor of `qvl_reference.processor()`, the same message "
             "(image, then the text, `add_generation_prompt`), the image through `transformers.image_utils.load_image`, "
             "forward hooks on the same modules during the prefill, and `generate()` with "
             f"`GenerationConfig(do_sample=False, max_new_tokens={s['n']}, eos_token_id=None)` "
             "(qvl: `--temp 0 --ignore-eos`).\n")
    L.append("## Run\n")
    L.append(f"- date: {date}")
    L.append(f"- machine: {cpu}, {cores} CPUs, {mem} RAM (shared); both sides use {s['threads']} threads")
    if s.get("loadavg_before_qvl"):
        L.append(f"- load average (1/5/15 min) before qvl: {' '.join(s['loadavg_before_qvl'])}, before transformers: "
                 f"{' '.join(s['loadavg_before_hf'])}, after: {' '.join(s['loadavg_after'])} — other jobs on the "
                 "machine slow both sides")
    L.append(f"- versions: torch {hf['torch']}, transformers {hf['transformers']}, Python {platform.python_version()}; "
             f"qvl binary `{s['qvl_binary']}` (built {s['qvl_mtime']}, sha256 {s['qvl_sha256']}), working tree at "
             f"{s['git']}")
    L.append(f"- prompt: \"{s['prompt']}\" with `{Path(s['image']).relative_to(ROOT) if Path(s['image']).is_relative_to(ROOT) else s['image']}` "
             f"(grid {s['image_grid_thw'][0]}, {s['image_tokens_hf']} image tokens); "
             f"{s['prompt_tokens_qvl']} prompt tokens in qvl, {s['prompt_tokens_hf']} in transformers; "
             f"every text position embeds the same token: {'yes' if s['text_rows_exact'] else 'NO'}")
    if s["pixel_values"]:
        L.append(f"- pixel values (`qvl preprocess` vs the processor): max relative error {fmt_e(s['pixel_values'][0])}")
    L.append("")
    L.append("## Results\n")
    verdict = ("every intermediate within 1e-4" if not fb else f"first intermediate above 1e-4: `{fb['name']}`")
    L.append(f"- intermediates: max relative error (max\\|ours − theirs\\| / max\\|theirs\\|) at most "
             f"{fmt_e(max(rels) if rels else None)}; {verdict}")
    lr = s["logit_rel"]
    L.append(f"- last prompt position logits: max relative error **{lr[0]:.2e}** (max\\|diff\\| {lr[1]:.3e}, "
             f"max\\|logit\\| {lr[2]:.3f}); argmax qvl {s['ours_top2'][0]}, transformers {s['hf_top2'][0]}; "
             f"top-2 margin {s['hf_margin_step0']:.4f} (transformers), {s['ours_margin_step0']:.4f} (qvl)")
    L.append(f"- greedy, {s['greedy_n']} tokens: **{s['greedy_leading']}** leading tokens identical, "
             f"{s['greedy_total']} identical in all")
    d = s["divergence"]
    if d:
        L.append(f"- divergence at step {d['step']}: qvl chose {d['ours']}, transformers {d['hf']}; transformers' "
                 f"top-2 there {d['hf_top2_ids']} with logits {d['hf_top2_values'][0]:.4f} / "
                 f"{d['hf_top2_values'][1]:.4f} (margin {d['hf_margin']:.2e}, logits up to {d['hf_max_abs']:.2f}); "
                 f"transformers' logit of qvl's token is {d['hf_gap_to_ours']:.2e} below its top-1")
    distinct = sorted(set(s["hf_generated"]))
    m = s["hf_step_margins"]
    L.append(f"- transformers' greedy tokens: {len(distinct)} distinct id(s) ({', '.join(map(str, distinct[:8]))}"
             f"{', ...' if len(distinct) > 8 else ''}); its top-2 margin over the {len(m)} steps: min {min(m):.3f}, "
             f"max {max(m):.3f}")
    if len(distinct) <= 4:
        L.append("- caveat: with generated weights the model repeats itself, with margins far above the logit "
                 "error, so the greedy agreement shows that the decode steps pick the same top-1 but says little "
                 "about the decode path's numbers (KV cache, positions after the image). qvl's dump stops at the "
                 "prefill; comparing the decode steps' logits would need qvl to dump them too (transformers' are in "
                 "`WORK/hf/step_logits.npy`).")
    if s["min_hf_margin_before_divergence"] is not None:
        L.append(f"- smallest top-2 margin of transformers over the agreeing steps: "
                 f"{s['min_hf_margin_before_divergence']:.2e}")
    L.append("")
    L.append("| intermediate | shape | max rel. error | max\\|diff\\| | max\\|ref\\| |")
    L.append("|---|---|---|---|---|")
    for r in s["intermediates"]:
        if "rel" in r:
            L.append(f"| `{r['name']}` | {'×'.join(map(str, r['shape']))} | {r['rel']:.2e} | {r['max_abs_diff']:.2e} "
                     f"| {r['max_abs']:.3g} |")
        else:
            L.append(f"| `{r['name']}` | {r.get('shape_mismatch', 'missing: ' + r.get('missing', ''))} | | | |")
    L.append("")
    L.append("`embed_tokens` is the input of the first text layer (image embeddings scattered in); `layers.N` is the "
             "output after the DeepStack addition (transformers: the input of layer N + 1 or of the final norm); "
             "`norm` and `lm_head` are the last prompt position; `pos_embed_added` is the input of vision block 0.\n")
    L.append("## Timings of that run\n")
    f = lambda v, unit="ms": f"{v:.0f} {unit}" if v is not None else "—"
    L.append("| | qvl | transformers (fp32, eager) |")
    L.append("|---|---|---|")
    L.append(f"| load | {f(qt['load_ms'])} | {hf['load_s'] * 1000:.0f} ms |")
    L.append(f"| preprocess + image encode | {f(qt['preprocess_ms'])} + {f(qt['vision_ms'])} | |")
    L.append(f"| prefill ({s['prompt_tokens_qvl']} tokens) | {f(qt['prefill_ms'])} ({qt['prefill_tok_s']} tok/s) | |")
    L.append(f"| first token (from the request) | {f(qt['first_token_ms'])} | {hf['first_token_s'] * 1000:.0f} ms |")
    L.append(f"| decode | {qt['decode_tok_s']} tok/s ({qt['decode_tokens']:.0f} tokens in {f(qt['decode_ms'])}) | "
             f"{hf['decode_tok_s']:.2f} tok/s |")
    L.append(f"| whole process, wall | {s['qvl_wall_s']:.1f} s | {s['hf_wall_s']:.1f} s (generate() {hf['generate_s']:.1f} s) |")
    L.append(f"| max RSS | {s['qvl_max_rss_kb'] / 2**20:.2f} GiB | {s['hf_max_rss_kb'] / 2**20:.2f} GiB |")
    L.append("")
    L.append("qvl's own timing line (stderr):\n")
    L.append("```\n" + qt["line"] + "\n```\n")
    L.append("transformers' first token is timed from the call of `generate()` to the first `lm_head` output; its "
             "decode rate over the remaining tokens. The process wall times include loading (and Python's imports).\n")
    return "\n".join(L)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qvl", default=os.environ.get("QVL", str(ROOT / "build" / "qvl")))
    p.add_argument("--preset", default="2b", choices=["2b", "tiny"],
                   help="tiny: a quick smoke test of this script (model dir default out/qvl-tiny-check)")
    p.add_argument("--model", default=None, help="model directory (default out/qvl-2b)")
    p.add_argument("--image", default=str(IMAGE))
    p.add_argument("-p", "--prompt", default=PROMPT)
    p.add_argument("-n", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", default="out/qvl-full-size-check")
    p.add_argument("--report", default=str(ROOT / "docs" / "full_size_check.md"))
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--report-only", action="store_true", help="render the report again from an earlier run's --work")
    p.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--command", default=None, help=argparse.SUPPRESS)  # how the wrapper was called
    args = p.parse_args()
    if args.model is None:
        args.model = "out/qvl-2b" if args.preset == "2b" else "out/qvl-tiny-check"
    if args.hf_worker:
        return hf_worker(args)
    if args.report_only:
        return report_only(args)
    driver_args = args
    driver_args.command_line = args.command or shlex.join(["tools/reference/check_full_size.py"] + sys.argv[1:])
    return driver(driver_args)


if __name__ == "__main__":
    main()
