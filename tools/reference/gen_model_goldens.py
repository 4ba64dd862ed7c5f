"""Writes tests/data/model/<case>/: transformers' float32 eager forward of a test model made by
`qvl make-test-model`, for the C++ forward-pass tests.

Usage: gen_model_goldens.py MODEL_DIR [OUT_DIR] [--cases=a,b]   (MODEL_DIR: e.g. from
`build/qvl make-test-model --preset tiny --seed 1 --out out/qvl-tiny`)

Per case it stores (npy, float32): the vision tower output (`visual.npy`) and each DeepStack feature
(`deepstack_<j>.npy`), the hidden state after every text layer including the DeepStack addition
(`layer_<i>.npy`), and in `case.json`: the prompt ids, image grids, per-position logit summaries (argmax,
logsumexp over the whole vocabulary, the top-16 and 64 fixed ids with their values) and 32 greedy tokens.
A video case (one_video) gives the processor the clip's frames decoded as qvl_reference.decode_video does, with
its frame count and fps as metadata (fps sampling at the processor's default, 2 per second); its `visual.npy` and
`deepstack_<j>.npy` are the video's features. case.json lists the videos (file, budgets, requested fps: null for
the default) and their grids, empty for the other cases.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import GenerationConfig, Qwen3VLForConditionalGeneration
from transformers.image_utils import load_image
from transformers.video_utils import VideoMetadata

import qvl_reference as ref

IMAGES = ref.DATA / "images"
VIDEOS = ref.DATA / "videos"
SMALL = {"shortest_edge": 4096, "longest_edge": 16384}  # 64x64 .. 128x128 px: a handful of image tokens
VIDEO_SMALL = {"shortest_edge": 4096, "longest_edge": 65536}  # 4 frames of 64x48 -> 64x64: 2 groups of 4 tokens

CASES = {
    "text_only": dict(messages=[{"role": "user", "content": "What is the capital of France? Answer briefly."}],
                      images=[]),
    "one_image": dict(messages=[{"role": "user", "content": [{"type": "image"},
                                                             {"type": "text", "text": "Describe this image."}]}],
                      images=["jpeg_baseline_420_640x480.jpg"]),
    "two_images": dict(messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                                              {"type": "image"},
                                                              {"type": "text", "text": "What differs?"}]}],
                       images=["png_rgb8_256x256.png", "jpeg_progressive_256x256.jpg"]),
    "two_turns": dict(messages=[{"role": "user", "content": [{"type": "image"},
                                                             {"type": "text", "text": "What is this?"}]},
                                {"role": "assistant", "content": "A colourful gradient."},
                                {"role": "user", "content": [{"type": "text", "text": "Which colours?"}]}],
                      images=["gif_static_64x48.gif"]),
    "one_video": dict(messages=[{"role": "user", "content": [{"type": "video"},
                                                             {"type": "text", "text": "What happens in this clip?"}]}],
                      images=[], videos=["h264_30fps_64x48.mp4"]),
}
N_GREEDY = 32
FIXED_IDS = np.random.default_rng(7).choice(151936, size=64, replace=False).tolist()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    model_dir = Path(args[0])
    out_root = Path(args[1]) if len(args) > 1 else ref.DATA / "model"
    only = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--cases=")]
    cases = {k: v for k, v in CASES.items() if not only or k in only[0]}
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    proc = ref.processor()
    layers = model.model.language_model.layers
    for name, case in cases.items():
        text = proc.apply_chat_template(case["messages"], add_generation_prompt=True, tokenize=False)
        images = [load_image(str(IMAGES / f)) for f in case["images"]] or None
        videos = [ref.decode_video(VIDEOS / f) for f in case.get("videos", [])]
        kw = {}
        if videos:
            # Metadata and budgets go inside videos_kwargs: transformers 4.57.1 drops a flat video_metadata= there.
            kw = dict(videos=[v for v, _, _ in videos], videos_kwargs={
                "size": dict(VIDEO_SMALL), "do_sample_frames": True,
                "video_metadata": [VideoMetadata(total_num_frames=n, fps=fps) for _, n, fps in videos]})
        enc = proc(text=[text], images=images, return_tensors="pt", images_kwargs={"size": SMALL}, **kw)
        captured = {}
        hooks = []
        # The hidden state after layer i (DeepStack included) is the input of layer i + 1, or of the final norm.
        for i in range(len(layers)):
            nxt = layers[i + 1] if i + 1 < len(layers) else model.model.language_model.norm
            hooks.append(nxt.register_forward_pre_hook(
                lambda mod, a, i=i: captured.__setitem__(f"layer_{i}", a[0][0].detach().clone())))
        visual = model.model.visual
        hooks.append(visual.register_forward_hook(
            lambda mod, a, out: captured.__setitem__("visual", (out[0].detach().clone(),
                                                                [d.detach().clone() for d in out[1]]))))
        with torch.no_grad():
            out = model(**enc, use_cache=False)
        for h in hooks:
            h.remove()
        logits = out.logits[0].float()  # [L, vocab]
        d = out_root / name
        d.mkdir(parents=True, exist_ok=True)
        for f in d.glob("*.npy"):
            f.unlink()
        if "visual" in captured:
            emb, ds = captured["visual"]
            np.save(d / "visual.npy", emb.numpy().astype("<f4"))
            for j, t in enumerate(ds):
                np.save(d / f"deepstack_{j}.npy", t.numpy().astype("<f4"))
        for i in range(len(layers)):
            np.save(d / f"layer_{i}.npy", captured[f"layer_{i}"].numpy().astype("<f4"))
        top = torch.topk(logits, 16, dim=-1)
        summary = {
            "argmax": logits.argmax(-1).tolist(),
            "logsumexp": torch.logsumexp(logits.double(), -1).tolist(),
            "top_ids": top.indices.tolist(),
            "top_values": top.values.tolist(),
            "fixed_ids": FIXED_IDS,
            "fixed_values": logits[:, FIXED_IDS].tolist(),
            "max_abs": logits.abs().max(-1).values.tolist(),
        }
        # Replace the model's own generation config (do_sample=True, temperature 0.7, ...): a config passed to
        # generate() would have its default-valued fields (do_sample=False!) overridden by the model's.
        model.generation_config = GenerationConfig(do_sample=False, max_new_tokens=N_GREEDY, eos_token_id=None,
                                                   pad_token_id=151643)
        with torch.no_grad():
            gen = model.generate(**enc)
        greedy = gen[0, enc["input_ids"].shape[1]:].tolist()
        record = {
            "messages": case["messages"], "images": ["images/" + f for f in case["images"]],
            "min_pixels": SMALL["shortest_edge"], "max_pixels": SMALL["longest_edge"],
            "input_ids": enc["input_ids"][0].tolist(),
            "image_grid_thw": enc["image_grid_thw"].tolist() if "image_grid_thw" in enc else [],
            "videos": [{"file": "videos/" + f, "min_pixels": VIDEO_SMALL["shortest_edge"],
                        "max_pixels": VIDEO_SMALL["longest_edge"], "fps": None} for f in case.get("videos", [])],
            "video_grid_thw": enc["video_grid_thw"].tolist() if "video_grid_thw" in enc else [],
            "logits": summary, "greedy": greedy,
        }
        with open(d / "case.json", "w") as f:
            json.dump(record, f)
            f.write("\n")
        print(f"{name}: {len(record['input_ids'])} tokens, greedy {greedy[:8]}...", file=sys.stderr)


if __name__ == "__main__":
    main()
