"""Writes tests/data/video_golden.json and tests/data/video_preprocess/<case>.npy: how the reference decodes the
clips of tests/data/videos/ (make_videos.py) and turns them into model input, for qvl's video tests.

- "clips": each clip decoded as qvl_reference.decode_video does (PyAV as transformers' read_video_pyav, frames
  turned upright by the container's display rotation; animated WebP through Pillow): size of the upright frames,
  frame count, fps, rotation (FFmpeg's counter-clockwise degrees: -90 = shown turned 90 degrees clockwise,
  applied as np.rot90(frame, k=rotation // 90)), the sha256 of every RGB frame (H x W x 3 uint8, row-major),
  and two extras: "frame_mean_rgb" (per frame, the mean of R, G and B, 3 decimals, for a tolerant check) and
  "frame_yuv_sha256" (per frame, sha256 of the decoder's Y, U, V planes without row padding, before any
  rotation; null for decoders that do not give yuv420p): the RGB bytes depend on libswscale's yuv->rgb
  arithmetic (BT.601 limited range, chroma not interpolated), the planes only on the decoder.
- "bad": files the reference refuses (PyAV cannot open them, or the processor raises for one frame); each is
  checked here.
- "sampling": Qwen3VLVideoProcessor.sample_frames for frame counts, source fps and requested fps (null: the
  processor's default, 2). min_frames/max_frames take effect only as processor attributes (the config):
  passed as call kwargs, sample_frames ignores them in transformers 4.57.1, so rows with other values set the
  attributes.
- "smart_resize": video_processing_qwen3_vl.smart_resize(num_frames=t, height=h, width=w, temporal_factor=2,
  factor=32, min_pixels, max_pixels) -> [h_bar, w_bar], or {"error": true} where it raises ValueError.
- "timestamps": Qwen3VLProcessor._calculate_timestamps(indices, fps, merge_size=2) as the prompt prints them.
- "cases": the real Qwen3VLProcessor on decoded clips (fps and metadata passed inside videos_kwargs, where
  4.57.1 reads them: a flat video_metadata= beside videos_kwargs is silently dropped and fps falls back to 24):
  sampled indices, grid, timestamps, the chat template's text tokenized with the video (and image) tokens
  expanded, Qwen3VLModel.get_rope_index's 3-D positions, and pixel_values_videos (float32 [patches, 1536], all
  videos of the case in order) in video_preprocess/<name>.npy. The top-level "clip", "indices", "grid_thw",
  "timestamps" describe the case's first video; "videos" lists them for every video and "images" every image.

Deterministic: fixed lists and seeds; run twice, the outputs are byte-identical.
"""
import hashlib
import json
import sys
from types import SimpleNamespace

import numpy as np
import torch
from transformers.image_utils import load_image
from transformers.models.qwen3_vl import video_processing_qwen3_vl as vpq
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel
from transformers.video_utils import VideoMetadata

import qvl_reference as ref

VIDEOS = ref.DATA / "videos"
NPY = ref.DATA / "video_preprocess"
CLIPS = ["h264_30fps_64x48.mp4", "vp9_25fps_70x50.webm", "h264_24fps_96x64.mkv", "mpeg4_15fps_80x60_rot90.mov",
         "anim_10fps_48x40.gif", "anim_8fps_40x40.webp", "h264_bt709_full_72x40.mp4"]
BAD = ["bad_truncated.mp4", "bad_garbage.mp4", "bad_still_1frame.mp4"]
DEFAULT = (4096, 25165824)  # the checkpoint's video budgets (video_preprocessor_config.json: size)


def log(msg):
    print(msg, file=sys.stderr)


# ----------------------------------------------------------------------------------------------------
def clips():
    out = []
    for name in CLIPS:
        d = ref.decode_video(VIDEOS / name, details=True)
        fr = d["frames"]
        out.append({
            "file": "videos/" + name, "width": int(fr.shape[2]), "height": int(fr.shape[1]),
            "total_frames": d["total"], "fps": d["fps"], "rotation": d["rotation"],
            "frame_sha256": [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in fr],
            "frame_mean_rgb": [[round(float(v), 3) for v in f.reshape(-1, 3).mean(0)] for f in fr],
            "frame_yuv_sha256": d["yuv_sha256"],
        })
    log(f"clips: {len(out)} ({sum(c['total_frames'] for c in out)} frames)")
    return out


def bad(proc):
    import av

    for name in BAD:
        try:
            with av.logging.Capture():  # FFmpeg's own complaint ("moov atom not found") stays off stderr
                frames, total, fps = ref.decode_video(VIDEOS / name)
        except (av.error.FFmpegError, IndexError):
            continue
        try:
            run_processor(proc, "<|vision_start|><|video_pad|><|vision_end|>", [(frames, total, fps)], None,
                          *DEFAULT, [])
        except ValueError:
            continue
        raise SystemExit(f"{name}: the reference did not refuse it")
    log(f"bad: {len(BAD)} refused")
    return ["videos/" + n for n in BAD]


# ----------------------------------------------------------------------------------------------------
def sampling(vp):
    fpss = [24000 / 1001, 30000 / 1001, 25.0, 30.0, 60000 / 1001, 12.5, 1.0, 0.5, 120.0]
    reqs = [None, 0.5, 1, 3.5, 4, 10]
    ns = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 16, 17, 24, 25, 29, 30, 31, 45, 50, 59, 60, 61, 99, 100, 119,
          120, 121, 150, 239, 240, 241, 299, 300, 301, 599, 600, 601, 719, 1000, 1001, 1200, 1535, 1536, 1537,
          1999, 2000]
    rng = np.random.default_rng(2024)
    rows = []
    for f in fpss:
        for r in reqs:
            for n in sorted(rng.choice(ns, size=5, replace=False).tolist()):
                rows.append((n, f, r, 4, 768))
    # Lists whose np.linspace points land exactly on .5 (numpy rounds half to even).
    rows += [(7, 12.5, 10, 4, 768), (11, 12.5, 10, 4, 768), (4, 1.0, 0.5, 2, 768), (6, 1.0, 0.5, 2, 768),
             (10, 1.0, 0.5, 2, 768), (14, 1.0, 0.5, 2, 768), (8, 1.0, 1, 2, 5), (10, 1.0, 1, 2, 5), (18, 1.0, 1, 2, 9),
             (2000, 30.0, None, 4, 768), (1999, 30000 / 1001, None, 4, 768), (1000, 25.0, 10, 4, 768)]
    # Other min_frames / max_frames (set as processor attributes, see the docstring).
    for mn, mx in [(2, 16), (8, 32), (1, 768), (4, 10), (16, 16)]:
        for n, f, r in [(1, 30.0, None), (3, 30.0, None), (9, 25.0, None), (30, 30.0, None), (100, 30.0, None),
                        (600, 30000 / 1001, 1), (2000, 24000 / 1001, 10), (45, 15.0, 3.5)]:
            rows.append((n, f, r, mn, mx))
    out, halves = [], 0
    saved = (vp.min_frames, vp.max_frames)
    for n, f, r, mn, mx in rows:
        vp.min_frames, vp.max_frames = mn, mx
        row = {"total": n, "video_fps": f, "fps": r, "min_frames": mn, "max_frames": mx}
        try:
            idx = vp.sample_frames(VideoMetadata(total_num_frames=n, fps=f), fps=r)
            row["indices"] = [int(i) for i in idx]
            k = len(idx)
            pts = np.linspace(0, n - 1, k)
            halves += int(np.any(pts - np.floor(pts) == 0.5))
        except ValueError:
            row["error"] = True
        out.append(row)
    vp.min_frames, vp.max_frames = saved
    log(f"sampling: {len(out)} rows ({halves} with a point at exactly .5, "
        f"{sum('error' in r for r in out)} errors)")
    return out


def smart_resize():
    ts = [1, 2, 3, 4, 7, 8, 20, 64, 768]
    sizes = [(16, 16), (31, 64), (32, 31), (32, 32), (48, 64), (50, 70), (60, 80), (80, 60), (64, 96), (40, 48),
             (100, 100), (101, 333), (517, 333), (360, 640), (480, 640), (1080, 1920), (2160, 4096), (33, 7000),
             (40, 7999), (7999, 40), (35, 6400), (1, 1), (720, 1280), (1024, 1024)]
    budgets = [DEFAULT, (4096, 65536), (16384, 262144), (4096, 16384), (65536, 1048576), (128 * 32 * 32, 768 * 32 * 32)]
    rng = np.random.default_rng(99)
    out = []
    for h, w in sizes:
        for lo, hi in budgets:
            picks = rng.choice(ts, size=2 if (h, w) not in ((16, 16), (1, 1)) else 1, replace=False)
            for t in sorted(int(x) for x in picks):
                row = {"t": t, "h": h, "w": w, "min_pixels": lo, "max_pixels": hi}
                try:
                    hb, wb = vpq.smart_resize(num_frames=t, height=h, width=w, temporal_factor=2, factor=32,
                                              min_pixels=lo, max_pixels=hi)
                    row["out"] = [int(hb), int(wb)]
                except ValueError:
                    row["error"] = True
                out.append(row)
    log(f"smart_resize: {len(out)} rows ({sum('error' in r for r in out)} errors)")
    return out


def timestamps(proc):
    cases = [
        ([0, 1], 2.0), ([1, 2], 2.0), ([0, 1, 2, 3], 4.0), ([0, 1], 10.0), ([2, 5], 10.0), ([0], 30.0),
        ([0, 15, 30], 30.0), ([0, 3, 6, 9, 13, 16, 19, 22, 25, 28, 31, 35, 38, 41, 44], 30.0),
        ([0, 15, 29, 44], 30.0), ([0, 15, 29, 44], 30000 / 1001), ([0, 12, 25, 37, 49], 24000 / 1001),
        ([0, 13, 26, 39], 25.0), ([0, 1, 2], 1 / 3), ([0, 2, 5, 7, 9], 1 / 3), ([3, 4], 1 / 3),
        ([0, 1, 2, 3, 4, 5, 6], 12.5), ([1, 2], 20.0), ([3, 4], 20.0), ([5, 6], 20.0), ([7, 8], 20.0),
        ([0, 7, 14, 21, 28, 35, 42, 49, 56, 63, 70], 60000 / 1001), ([0, 1], 0.5), ([0, 3], 4.0),
        ([1, 2], 40.0), ([5, 6], 40.0), ([0, 999, 1999], 30000 / 1001), ([1998, 1999], 24000 / 1001),
        ([0, 3, 7, 10, 14], 14.0), ([17, 18], 4.0), ([9, 10], 4.0),
    ]
    out = []
    for idx, fps in cases:
        ts = proc._calculate_timestamps(list(idx), fps, 2)
        out.append({"indices": idx, "fps": fps, "text": [f"<{t:.1f} seconds>" for t in ts]})
    log(f"timestamps: {len(out)} rows")
    return out


# ----------------------------------------------------------------------------------------------------
def run_processor(proc, text, videos, fps, lo, hi, images, image_size=None):
    """The real processor; videos: [(frames, total, fps)]. Returns (encoding, the sampled metadata)."""
    metas = [VideoMetadata(total_num_frames=n, fps=f) for _, n, f in videos]
    vk = {"size": {"shortest_edge": lo, "longest_edge": hi}, "do_sample_frames": True, "video_metadata": metas}
    if fps is not None:
        vk["fps"] = fps
    kw = {}
    if images:
        kw["images"] = images
        kw["images_kwargs"] = {"size": dict(image_size)}
    enc = proc(text=[text], videos=[v for v, _, _ in videos], videos_kwargs=vk, return_tensors="pt", **kw)
    return enc, metas


def vid(f):
    return ("video", f)


def cases(proc):
    cfg = ref.config()
    fake = SimpleNamespace(config=SimpleNamespace(
        vision_config=SimpleNamespace(spatial_merge_size=cfg["vision_config"]["spatial_merge_size"]),
        image_token_id=cfg["image_token_id"], video_token_id=cfg["video_token_id"],
        vision_start_token_id=cfg["vision_start_token_id"]))
    image_size = {"shortest_edge": 4096, "longest_edge": 16384}
    specs = [
        # name, content parts, fps, (min_pixels, max_pixels)
        ("h264_mp4_default", [vid("h264_30fps_64x48.mp4"), "What happens in this clip?"], None, DEFAULT),
        ("h264_mp4_fps10_small", [vid("h264_30fps_64x48.mp4"), "Count the frames."], 10, (4096, 16384)),
        ("vp9_webm_shrunk", ["Describe: ", vid("vp9_25fps_70x50.webm")], None, (4096, 12288)),
        ("mkv_fps1", [vid("h264_24fps_96x64.mkv"), "What moves?"], 1, DEFAULT),
        ("gif_default", [vid("anim_10fps_48x40.gif"), "What is animated?"], None, DEFAULT),
        ("webp_fps4", [vid("anim_8fps_40x40.webp"), "Describe the animation."], 4, DEFAULT),
        ("rot90_default", [vid("mpeg4_15fps_80x60_rot90.mov"), "Which way is up?"], None, DEFAULT),
        ("two_videos_one_image", ["First ", vid("h264_30fps_64x48.mp4"), " then ", ("image", "png_rgb8_256x256.png"),
                                  " and ", vid("anim_10fps_48x40.gif"), " Compare them."], None, DEFAULT),
    ]
    NPY.mkdir(parents=True, exist_ok=True)
    for f in NPY.glob("*.npy"):
        f.unlink()
    out, total_bytes = [], 0
    for name, parts, fps, (lo, hi) in specs:
        content, videos, vfiles, images, ifiles = [], [], [], [], []
        for p in parts:
            if isinstance(p, str):
                content.append({"type": "text", "text": p})
            elif p[0] == "video":
                content.append({"type": "video"})
                videos.append(ref.decode_video(VIDEOS / p[1]))
                vfiles.append("videos/" + p[1])
            else:
                content.append({"type": "image"})
                images.append(load_image(str(ref.DATA / "images" / p[1])))
                ifiles.append("images/" + p[1])
        messages = [{"role": "user", "content": content}]
        text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        enc, metas = run_processor(proc, text, videos, fps, lo, hi, images, image_size)
        vgrid = enc["video_grid_thw"]
        igrid = enc.get("image_grid_thw")
        pos, delta = Qwen3VLModel.get_rope_index(fake, enc["input_ids"], igrid, vgrid.clone(), None)
        pv = enc["pixel_values_videos"].numpy().astype("<f4")
        npy = NPY / f"{name}.npy"
        np.save(npy, pv)
        total_bytes += npy.stat().st_size
        per_video = []
        decoded = proc.tokenizer.decode(enc["input_ids"][0])
        for k, (m, f) in enumerate(zip(metas, vfiles)):
            idx = [int(i) for i in m.frames_indices]
            vp = proc.video_processor
            assert idx == [int(i) for i in vp.sample_frames(VideoMetadata(total_num_frames=m.total_num_frames,
                                                                          fps=m.fps), fps=fps)]
            ts = [f"<{t:.1f} seconds>" for t in proc._calculate_timestamps(list(idx), m.fps, 2)]
            ts = ts[:int(vgrid[k][0])]
            per_video.append({"clip": f, "indices": idx, "grid_thw": [int(x) for x in vgrid[k]], "timestamps": ts})
        for v in per_video:  # every timestamp appears in the prompt, in order
            at = 0
            for t in v["timestamps"]:
                at = decoded.index(t + "<|vision_start|><|video_pad|>", at) + 1
        first = per_video[0]
        out.append({
            "name": name, "clip": first["clip"], "fps": fps, "min_pixels": lo, "max_pixels": hi,
            "indices": first["indices"], "grid_thw": first["grid_thw"], "timestamps": first["timestamps"],
            "pixel_values": "video_preprocess/" + npy.name, "messages": messages,
            "input_ids": enc["input_ids"][0].tolist(), "position_ids": pos[:, 0, :].tolist(),
            "rope_delta": int(delta.reshape(-1)[0]),
            "videos": per_video,
            "images": [{"file": f, "min_pixels": image_size["shortest_edge"], "max_pixels": image_size["longest_edge"],
                        "grid_thw": [int(x) for x in igrid[i]]} for i, f in enumerate(ifiles)],
        })
    log(f"cases: {len(out)} ({total_bytes} bytes of pixel_values)")
    return out


def main():
    proc = ref.processor()
    doc = {
        "clips": clips(),
        "bad": bad(proc),
        "sampling": sampling(proc.video_processor),
        "smart_resize": smart_resize(),
        "timestamps": timestamps(proc),
        "cases": cases(proc),
    }
    path = ref.DATA / "video_golden.json"
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for i, (k, v) in enumerate(doc.items()):
            f.write(json.dumps(k) + ": [\n")
            for j, row in enumerate(v):
                f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + (",\n" if j + 1 < len(v) else "\n"))
            f.write("]" + (",\n" if i + 1 < len(doc) else "\n"))
        f.write("}\n")
    log(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
