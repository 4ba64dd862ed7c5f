"""Writes tests/data/embedding_golden.json: Qwen3-VL-Embedding vectors and Qwen3-VL-Reranker scores computed by
transformers in float32 with eager attention, following step by step the official reference scripts
(github.com/QwenLM/Qwen3-VL-Embedding: src/models/qwen3_vl_embedding.py and qwen3_vl_reranker.py), written out
again here, on a test model made by `qvl make-test-model`.

Usage: gen_embedding_goldens.py MODEL_DIR [RERANKER_MODEL_DIR] [--out=FILE]
  (MODEL_DIR: e.g. from `build/qvl make-test-model --preset tiny-embedding --seed 1 --out out/qvl-emb`;
   RERANKER_MODEL_DIR defaults to MODEL_DIR; FILE defaults to tests/data/embedding_golden.json)
Needs qwen-vl-utils 0.0.14 (its process_vision_info loads and resizes the images and frames, as the official
scripts do) besides the pinned reference.

Embedding (Qwen3VLEmbedder.process): each input becomes the conversation
  [system: instruction (stripped, "." appended unless its last character is Unicode punctuation; empty or
   missing: "Represent the user's input."), user: videos, then images (min_pixels 4*32*32, max_pixels
   1800*32*32), then texts; "NULL" when the input has none of them];
the inputs of a case go TOGETHER through apply_chat_template(add_generation_prompt=True), process_vision_info
(image_patch_size=16, with video metadata and kwargs) and the processor (truncation to 8192, right padding,
do_resize=False: the images arrive already resized by qwen-vl-utils with PIL). The embedding is the last hidden
state of Qwen3VLModel at each row's last unpadded position, L2-normalised; "matryoshka" holds the first d
components of the unnormalised vector, L2-normalised, for d in 32 and 64.

Reranker (Qwen3VLReranker.process): each (query, document) pair becomes
  [system: the fixed judging prompt, user: "<Instruct>: " + instruction (default "Given a search query, retrieve
   relevant candidates that answer the query."), "<Query>:", the query's videos, images, texts (or "NULL"),
   "\\n<Document>:", the document's (same rule)]
and is scored alone: sigmoid((lm_head[yes] - lm_head[no]) . h) with h the last position's final hidden state.

Inputs name files under tests/data/images; "video" names a clip under tests/data/videos, read as the official scripts
pass a video file (fps 1, max_frames 64) through qwen-vl-utils' fetch_video: its torchvision reader's sampling
(smart_nframes, torch.linspace(...).round()) and metadata, its per-frame smart_resize into [128, 768] tokens and
torchvision's antialiased bicubic resize; the frames themselves come from qvl_reference.decode_video (PyAV as
transformers reads video, display rotation applied), the decode every video golden of this repository uses. Per case the
file records the rendered prompts, the input ids (without padding), the image (and video) grids and the
results (floats rounded to 9 significant digits). Deterministic: re-running rewrites an identical file.
"""
import json
import sys
import unicodedata
from pathlib import Path

import torch
import torch.nn.functional as F
from qwen_vl_utils import process_vision_info
from transformers import Qwen3VLForConditionalGeneration

import qvl_reference as ref
from qwen_vl_utils import vision_process


def _read_video_repository_decode(ele):
    """qwen-vl-utils' _read_video_torchvision with the frames of qvl_reference.decode_video (TCHW uint8)."""
    path = ele["video"][len("file://"):] if ele["video"].startswith("file://") else ele["video"]
    frames, total_frames, video_fps = ref.decode_video(path)
    video = torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()
    nframes = vision_process.smart_nframes(ele, total_frames=total_frames, video_fps=video_fps)
    idx = torch.linspace(0, total_frames - 1, nframes).round().long()
    sample_fps = nframes / max(total_frames, 1e-6) * video_fps
    metadata = dict(fps=video_fps, frames_indices=idx, total_num_frames=total_frames, video_backend="torchvision")
    return video[idx], metadata, sample_fps


vision_process.VIDEO_READER_BACKENDS["torchvision"] = _read_video_repository_decode
vision_process.get_video_reader_backend = lambda: "torchvision"

IMAGES = ref.DATA / "images"

# The official scripts' constants.
EMBED_MAX_LENGTH = 8192
RERANK_MAX_LENGTH = 10240
IMAGE_FACTOR = 32
MIN_PIXELS = 4 * IMAGE_FACTOR * IMAGE_FACTOR
MAX_PIXELS = 1800 * IMAGE_FACTOR * IMAGE_FACTOR
MAX_FRAMES = 64
EMBED_DEFAULT_INSTRUCTION = "Represent the user's input."
RERANK_DEFAULT_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
RERANK_SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
                 'Note that the answer can only be "yes" or "no".')
MATRYOSHKA = [32, 64]

VIDEOS = ref.DATA / "videos"

EMBEDDING_CASES = [
    ("text_default", [{"text": "A photo of a cat sitting on a mat."}]),
    ("text_instruction_no_punct", [{"text": "A red bicycle leaning against a wall.",
                                    "instruction": "  Retrieve images that match the caption  "}]),
    ("text_instruction_punct", [{"text": "What is the tallest mountain on Earth?",
                                 "instruction": "Represent this question for retrieving answers:"}]),
    ("empty", [{}]),
    ("image_only", [{"image": "png_rgb8_256x256.png"}]),
    ("image_text", [{"image": "jpeg_baseline_420_640x480.jpg", "text": "A test photograph with smooth colours."}]),
    ("small_image", [{"image": "gif_static_64x48.gif", "text": "A tiny picture."}]),
    ("two_images_text", [{"image": ["png_rgb8_256x256.png", "jpeg_progressive_256x256.jpg"],
                          "text": "Two pictures of the same size."}]),
    ("two_texts", [{"text": ["First part.", " Second part."]}]),
    ("batch_three", [{"text": "Short."},
                     {"text": "A considerably longer input text, so that the other rows of the batch are padded on "
                              "the right to its length.", "instruction": "Find documents about padding"},
                     {"image": "gif_static_64x48.gif", "text": "Tiny.", "instruction": "   "}]),
    ("non_ascii", [{"text": "日本語のテキストと emoji 🎉"}]),
    ("video", [{"video": "h264_30fps_64x48.mp4", "text": "A short clip."}]),
    ("video_image_text", [{"video": "vp9_25fps_70x50.webm", "image": "gif_static_64x48.gif", "text": "Both."}]),
]

RERANK_DOCS = [{"text": "Paris is the capital and largest city of France."},
               {"text": "The Eiffel Tower was completed in 1889."},
               {"text": "Bananas are a good source of potassium."}]
RERANKER_CASES = [
    ("text_default", None, {"text": "What is the capital of France?"}, RERANK_DOCS),
    ("text_custom_instruction", "Retrieve passages that answer the question",
     {"text": "What is the capital of France?"}, RERANK_DOCS),
    ("text_query_image_document", None, {"text": "A colourful gradient."},
     [{"image": "png_rgb8_256x256.png"}, {"image": "gif_static_64x48.gif", "text": "A small picture."}]),
    ("image_query_text_document", "Find the caption that describes the picture",
     {"image": "jpeg_baseline_420_640x480.jpg"}, [{"text": "A photograph with smooth colours."}]),
    ("empty_document", None, {"text": "Anything at all?"}, [{"text": "Something."}, {}]),
    ("video_query", None, {"video": "h264_24fps_96x64.mkv", "text": "What happens in the clip?"},
     [{"text": "Two pictures alternate."}]),
]


def image_path(name):
    return "file://" + str(IMAGES / name)


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def content_parts(inp):
    """The content items of one input: its video (a clip file), its images, its texts, or "NULL"."""
    texts = as_list(inp.get("text"))
    images = as_list(inp.get("image"))
    videos = [inp["video"]] if inp.get("video") else []
    if not texts and not images and not videos:
        return [{"type": "text", "text": "NULL"}]
    parts = []
    for name in videos:
        # A video file: fps and max_frames go with it (the official default fps is 1).
        parts.append({"type": "video", "video": "file://" + str(VIDEOS / name), "fps": 1, "max_frames": MAX_FRAMES})
    for name in images:
        parts.append({"type": "image", "image": image_path(name), "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS})
    for text in texts:
        parts.append({"type": "text", "text": text})
    return parts


def embedding_conversation(inp):
    instruction = inp.get("instruction")
    if instruction:
        instruction = instruction.strip()
        if instruction and not unicodedata.category(instruction[-1]).startswith("P"):
            instruction += "."
    return [{"role": "system", "content": [{"type": "text", "text": instruction or EMBED_DEFAULT_INSTRUCTION}]},
            {"role": "user", "content": content_parts(inp)}]


def reranker_conversation(instruction, query, document):
    user = [{"type": "text", "text": "<Instruct>: " + (instruction or RERANK_DEFAULT_INSTRUCTION)},
            {"type": "text", "text": "<Query>:"}] + content_parts(query) + \
           [{"type": "text", "text": "\n<Document>:"}] + content_parts(document)
    return [{"role": "system", "content": [{"type": "text", "text": RERANK_SYSTEM}]},
            {"role": "user", "content": user}]


def encode(proc, conversations, **kw):
    """apply_chat_template + process_vision_info + the processor, as both official scripts call them."""
    prompts = proc.apply_chat_template(conversations, add_generation_prompt=True, tokenize=False)
    images, videos, video_kwargs = process_vision_info(conversations, image_patch_size=16,
                                                       return_video_metadata=True, return_video_kwargs=True)
    metadata = None
    if videos is not None:
        videos, metadata = (list(x) for x in zip(*videos))
    enc = proc(text=prompts, images=images, videos=videos, video_metadata=metadata, do_resize=False, **kw,
               **video_kwargs)
    return prompts, enc


def grids(enc, key):
    return enc[key].tolist() if key in enc else []


def r9(x):
    return float(f"{float(x):.9g}")


def vec(t):
    return [r9(x) for x in t.tolist()]


def load(model_dir):
    model, info = Qwen3VLForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


def embedding_cases(model, proc):
    proc.tokenizer.padding_side = "right"
    out = []
    for name, inputs in EMBEDDING_CASES:
        conversations = [embedding_conversation(inp) for inp in inputs]
        prompts, enc = encode(proc, conversations, truncation=True, max_length=EMBED_MAX_LENGTH, padding=True,
                              return_tensors="pt")
        with torch.no_grad():
            hidden = model.model(**enc).last_hidden_state
        mask = enc["attention_mask"]
        last = mask.shape[1] - 1 - mask.flip(dims=[1]).argmax(dim=1)
        pooled = hidden[torch.arange(hidden.shape[0]), last]
        case = {"name": name, "inputs": inputs, "prompts": prompts,
                "input_ids": [ids[m.bool()].tolist() for ids, m in zip(enc["input_ids"], mask)],
                "image_grid_thw": grids(enc, "image_grid_thw")}
        if "video_grid_thw" in enc:
            case["video_grid_thw"] = grids(enc, "video_grid_thw")
        case["embeddings"] = [vec(v) for v in F.normalize(pooled, p=2, dim=-1)]
        case["matryoshka"] = {str(d): [vec(v) for v in F.normalize(pooled[:, :d], p=2, dim=-1)] for d in MATRYOSHKA}
        out.append(case)
        print(f"embedding {name}: {[len(i) for i in case['input_ids']]} tokens", file=sys.stderr)
    return out


def reranker_cases(model, proc):
    proc.tokenizer.padding_side = "left"
    vocab = proc.tokenizer.get_vocab()
    weight = model.lm_head.weight
    score_weight = (weight[vocab["yes"]] - weight[vocab["no"]])[None]  # the [1, hidden] yes-minus-no row
    out = []
    for name, instruction, query, documents in RERANKER_CASES:
        case = {"name": name, "instruction": instruction, "query": query, "documents": documents,
                "prompts": [], "input_ids": [], "image_grid_thw": [], "scores": []}
        video_grids = []
        for document in documents:
            (prompt,), enc = encode(proc, [reranker_conversation(instruction, query, document)], truncation=False,
                                    padding=False)
            ids = enc["input_ids"][0]
            # The official truncation (special tokens kept, the last 5 tokens kept) only acts past 10240 tokens.
            assert len(ids) <= RERANK_MAX_LENGTH
            inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
            for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
                if key in enc:
                    inputs[key] = torch.as_tensor(enc[key])
            with torch.no_grad():
                h = model.model(**inputs).last_hidden_state[:, -1]
            score = torch.sigmoid(F.linear(h, score_weight)).squeeze(-1)
            case["prompts"].append(prompt)
            case["input_ids"].append(list(ids))
            case["image_grid_thw"] += grids(enc, "image_grid_thw")
            video_grids += grids(enc, "video_grid_thw")
            case["scores"].append(r9(score[0]))
        if video_grids:
            case["video_grid_thw"] = video_grids
        out.append(case)
        print(f"reranker {name}: scores {case['scores']}", file=sys.stderr)
    return out


def dumps(value, indent=0):
    """JSON with lists of numbers or strings on one line, everything else indented by one space per level."""
    pad = " " * (indent + 1)
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(pad + dumps(v, indent + 1) for v in value) + "\n" + " " * indent + "]"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    embed_dir = Path(args[0])
    rerank_dir = Path(args[1]) if len(args) > 1 else embed_dir
    outs = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--out=")]
    out_path = Path(outs[0]) if outs else ref.DATA / "embedding_golden.json"
    torch.manual_seed(0)
    proc = ref.processor()
    result = {"embedding": {"cases": embedding_cases(load(embed_dir), proc)}}
    result["reranker"] = {"cases": reranker_cases(load(rerank_dir), proc)}
    out_path.write_text(dumps(result) + "\n", encoding="utf-8")
    print(f"wrote {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
