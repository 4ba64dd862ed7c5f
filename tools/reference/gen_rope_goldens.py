"""Writes tests/data/rope_golden.json: prompts with images through the real Qwen3VLProcessor (chat template,
image token expansion, tokenization) and Qwen3VLModel.get_rope_index: input_ids, image_grid_thw, the 3-D
position ids and rope_deltas. Images are synthetic (only their size matters here)."""
import json
import sys
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

import qvl_reference as ref


def img(w, h):
    return {"type": "image", "image": f"synthetic:{w}x{h}"}


def txt(t):
    return {"type": "text", "text": t}


CASES = [
    ("text_only", [{"role": "user", "content": "Hello, who are you?"}], {}),
    ("text_only_system", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [txt("Hi")]}], {}),
    ("one_image", [{"role": "user", "content": [img(512, 384), txt("Describe this image.")]}], {}),
    ("one_image_after_text", [{"role": "user", "content": [txt("Look: "), img(640, 480), txt(" what is it?")]}], {}),
    ("small_image_upscaled", [{"role": "user", "content": [img(100, 100), txt("What?")]}], {}),
    ("wide_image", [{"role": "user", "content": [img(800, 80), txt("Read the text.")]}], {}),
    ("tall_image", [{"role": "user", "content": [img(90, 1400), txt("Read it.")]}], {}),
    ("non_square_odd", [{"role": "user", "content": [img(333, 517), txt("?")]}], {}),
    ("two_images", [{"role": "user", "content": [img(512, 384), img(256, 256), txt("Compare them.")]}], {}),
    ("images_between_text", [{"role": "user", "content": [txt("First "), img(320, 320), txt(" then "),
                                                          img(640, 360), txt(" and last "), img(300, 700),
                                                          txt(" done.")]}], {}),
    ("three_images_vision_id", [{"role": "user", "content": [img(256, 256), img(512, 512), img(448, 448),
                                                             txt("Which is largest?")]}], {"add_vision_id": True}),
    ("multi_turn_image_first", [
        {"role": "user", "content": [img(448, 448), txt("What is this?")]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": [txt("What colour is it?")]}], {}),
    ("multi_turn_images_each_turn", [
        {"role": "system", "content": "You describe pictures."},
        {"role": "user", "content": [img(512, 384), txt("And this?")]},
        {"role": "assistant", "content": "A dog on grass."},
        {"role": "user", "content": [txt("Now this one: "), img(384, 512)]},
        {"role": "assistant", "content": [txt("A tree.")]},
        {"role": "user", "content": "Which did you like?"}], {}),
    ("tool_response_with_image", [
        {"role": "user", "content": "Take a photo."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "camera", "arguments": {"zoom": 2}}}]},
        {"role": "tool", "content": [img(320, 240), txt("photo taken")]},
        {"role": "user", "content": "What do you see?"}], {}),
    ("no_generation_prompt", [{"role": "user", "content": [img(256, 256), txt("x")]}], {"add_generation_prompt": False}),
    ("large_image_capped", [{"role": "user", "content": [img(2000, 1500), txt("Describe.")]}], {}),
    ("large_image_custom_max", [{"role": "user", "content": [img(2000, 1500), txt("Describe.")]}],
     {"max_pixels": 200704}),
    ("custom_min_pixels", [{"role": "user", "content": [img(64, 48), txt("Tiny.")]}], {"min_pixels": 4096}),
    ("user_types_special_text", [{"role": "user", "content": [img(256, 256),
                                                              txt("ignore <|im_end|> and <|vision_start|>")]}],
     {"user_text": "ignore <|im_end|> and <|vision_start|>"}),
    ("chinese_prompt", [{"role": "user", "content": [img(512, 512), txt("请描述这张图片")]}], {}),
]


def main():
    proc = ref.processor()
    cfg = ref.config()
    fake = SimpleNamespace(config=SimpleNamespace(
        vision_config=SimpleNamespace(spatial_merge_size=cfg["vision_config"]["spatial_merge_size"]),
        image_token_id=cfg["image_token_id"], video_token_id=cfg["video_token_id"],
        vision_start_token_id=cfg["vision_start_token_id"]))
    out = []
    for name, messages, opts in CASES:
        add_gen = opts.get("add_generation_prompt", True)
        vision_id = opts.get("add_vision_id", False)
        text = proc.apply_chat_template(messages, add_generation_prompt=add_gen, add_vision_id=vision_id,
                                        tokenize=False)
        sizes = []
        for m in messages:
            if isinstance(m["content"], list):
                for part in m["content"]:
                    if part.get("type") == "image":
                        w, h = map(int, part["image"].split(":")[1].split("x"))
                        sizes.append((w, h))
        images = [Image.fromarray(np.zeros((h, w, 3), np.uint8)) for w, h in sizes] or None
        kwargs = {}
        if "min_pixels" in opts or "max_pixels" in opts:
            kwargs["images_kwargs"] = {"size": {"shortest_edge": opts.get("min_pixels", 65536),
                                                "longest_edge": opts.get("max_pixels", 16777216)}}
        enc = proc(text=[text], images=images, return_tensors="pt", **kwargs)
        ids = enc["input_ids"]
        grids = enc.get("image_grid_thw")
        extra = {}
        if opts.get("user_text"):
            # transformers turns control-token text that a user typed into control tokens. qvl tokenizes user
            # text as plain text; the expected ids are HF's with the user's text encoded that way
            # (prefix and suffix end/start at control tokens, so encoding the pieces apart changes nothing else).
            extra["hf_input_ids_unsafe"] = ids[0].tolist()
            user = opts["user_text"]
            at = text.index(user)
            tok = proc.tokenizer._tokenizer
            def enc_piece(s, special):
                tok.encode_special_tokens = not special
                out = tok.encode(s, add_special_tokens=False).ids
                tok.encode_special_tokens = False
                return out
            raw = enc_piece(text[:at], True) + enc_piece(user, False) + enc_piece(text[at + len(user):], True)
            n_tokens = [int(g.prod()) // 4 for g in grids]
            expanded, k = [], 0
            for t in raw:
                if t == ref.config()["image_token_id"]:
                    expanded += [t] * n_tokens[k]
                    k += 1
                else:
                    expanded.append(t)
            ids = torch.tensor([expanded])
        pos, delta = Qwen3VLModel.get_rope_index(fake, ids, grids, None, None)
        out.append({
            "name": name, "messages": messages, "add_generation_prompt": add_gen, "add_vision_id": vision_id,
            "min_pixels": opts.get("min_pixels"), "max_pixels": opts.get("max_pixels"),
            "image_sizes": [list(s) for s in sizes], "text": text,
            "input_ids": ids[0].tolist(),
            "image_grid_thw": grids.tolist() if grids is not None else [],
            "position_ids": pos[:, 0, :].tolist(), "rope_delta": int(delta.reshape(-1)[0]),
            **extra,
        })
    path = ref.DATA / "rope_golden.json"
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        for i, c in enumerate(out):
            f.write(json.dumps(c, ensure_ascii=False, separators=(",", ":")) + (",\n" if i + 1 < len(out) else "\n"))
        f.write("]\n")
    print(f"{path}: {len(out)} cases", file=sys.stderr)


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
