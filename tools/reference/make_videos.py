#!/usr/bin/env python3
"""Writes the video test set, tests/data/videos/: small clips in the containers and codecs qvl reads, and a few
bad files it must refuse. gen_video_goldens.py records how the reference decodes and processes them.

Every clip shows content that changes from frame to frame, so that a frame sampled at the wrong index, a frame
dropped or duplicated, or a wrong rotation shows in the goldens: a colour gradient whose phase moves with time,
two coloured squares moving in opposite directions, and along the top edge the frame number in binary (one
black or white block per bit, least significant bit on the left).

  h264_30fps_64x48.mp4        H.264 High (libx264 preset medium: CABAC, B-frames), MP4, 30 fps, 45 frames
  vp9_25fps_70x50.webm        VP9 profile 0 (libvpx-vp9, alt-ref frames), WebM, 25 fps, 50 frames
  h264_24fps_96x64.mkv        H.264 Constrained Baseline (CAVLC, no B-frames), Matroska, 24 fps, 40 frames
  mpeg4_15fps_80x60_rot90.mov MPEG-4 Part 2, QuickTime, 15 fps, 30 frames of 80x60 with a display matrix
                              [0 1 0; -1 0 0; 0 0 1] in tkhd: shown turned 90 degrees clockwise (60x80); FFmpeg
                              reads the rotation as -90 (its counter-clockwise convention)
  h264_bt709_full_72x40.mp4   H.264 tagged BT.709 matrix, full range, MP4, 30 fps, 20 frames
  anim_10fps_48x40.gif        GIF89a (Pillow), 12 palette frames, 100 ms each, loop 0, disposal 1
  anim_8fps_40x40.webp        animated WebP (Pillow, lossless), 8 frames, 125 ms each
  bad_truncated.mp4           h264_30fps_64x48.mp4 cut at 60% of its bytes (no moov box: unreadable)
  bad_garbage.mp4             an 'ftyp' box followed by random bytes
  bad_still_1frame.mp4        a valid one-frame H.264 MP4 (the reference refuses fewer than 2 sampled frames)

Deterministic: single-threaded encoders with fixed options, bit-exact muxer and encoder flags (no version
strings, no creation times), fixed seeds; PyAV and Pillow are pinned in requirements.txt.
Run from anywhere:  tools/reference/.venv/bin/python tools/reference/make_videos.py
"""
import io
import sys
from fractions import Fraction

import av
import numpy as np
from PIL import Image

import qvl_reference as ref

OUT = ref.DATA / "videos"


def scene(w, h, i, n):
    """Frame i of n: RGB uint8 [h, w, 3]."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    t = i / n
    r = 128 + 90 * np.sin(2 * np.pi * (x / w + t))
    g = 50 + 160 * y / max(h - 1, 1)
    b = 128 + 90 * np.cos(2 * np.pi * (0.7 * y / h - t))
    img = np.stack([r, g, b], -1)
    s = max(8, h // 4)
    x1 = int(round(i * (w - s) / max(n - 1, 1)))           # left to right along the middle
    y1 = h // 2 - s // 2
    img[y1:y1 + s, x1:x1 + s] = (230, 30, 40)
    x2 = w - s - int(round(i * (w - s) / max(n - 1, 1)))  # right to left, lower down
    y2 = h - s - 2
    img[y2:y2 + s // 2, x2:x2 + s] = (250, 220, 30)
    blk = 8 if w >= 64 else 4
    for k in range(w // blk):
        img[0:blk, k * blk:(k + 1) * blk] = 255 if (i >> k) & 1 else 0
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def encode(path, codec, fmt, fps, w, h, n, options, rotation=None, frames=None, yuv=None, **ctx):
    """Encodes n scenes with PyAV. ctx: codec-context attributes (gop_size, bit_rate, colorspace, ...); yuv: the
    RGB -> YUV conversion's reformat arguments (dst_colorspace, dst_color_range)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt, options={"fflags": "+bitexact"}) as c:
        s = c.add_stream(codec, rate=Fraction(fps))
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.codec_context.thread_count = 1
        s.codec_context.flags |= av.codec.context.Flags.bitexact
        for k, v in ctx.items():
            setattr(s.codec_context, k, v)
        s.codec_context.options = options
        if rotation is not None:
            s.set_display_rotation(rotation)
        for i in range(n):
            f = av.VideoFrame.from_ndarray(frames[i] if frames is not None else scene(w, h, i, n), format="rgb24")
            f = f.reformat(format="yuv420p", **(yuv or {}))
            f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    data = buf.getvalue()
    (OUT / path).write_bytes(data)
    return data


def anim(w, h, n):
    return [Image.fromarray(scene(w, h, i, n)) for i in range(n)]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for f in OUT.iterdir():
        f.unlink()
    x264 = {"preset": "medium", "crf": "30"}
    mp4 = encode("h264_30fps_64x48.mp4", "libx264", "mp4", 30, 64, 48, 45, x264, gop_size=15)
    encode("vp9_25fps_70x50.webm", "libvpx-vp9", "webm", 25, 70, 50, 50,
           {"crf": "40", "b": "0", "deadline": "good", "cpu-used": "4", "row-mt": "0", "lag-in-frames": "10",
            "auto-alt-ref": "1"}, gop_size=25)
    encode("h264_24fps_96x64.mkv", "libx264", "matroska", 24, 96, 64, 40,
           {"preset": "medium", "crf": "30", "profile": "baseline"}, gop_size=20)
    encode("mpeg4_15fps_80x60_rot90.mov", "mpeg4", "mov", 15, 80, 60, 30, {}, rotation=-90, gop_size=10,
           bit_rate=150000)
    # BT.709 matrix, full range, tagged in the stream (as phones and HD cameras write): the RGB conversion must
    # follow the tags; 72 wide, not a multiple of 16.
    encode("h264_bt709_full_72x40.mp4", "libx264", "mp4", 30, 72, 40, 20, x264, gop_size=10,
           yuv={"dst_colorspace": "ITU709", "dst_color_range": "JPEG"}, colorspace=1, color_range=2)  # AVCOL_SPC_BT709, AVCOL_RANGE_JPEG

    # GIF: palette frames (a fixed 6x6x6 palette, no dithering); Pillow stores each frame after the first as
    # the rectangle that changed, over the previous one (disposal 1).
    pal = Image.new("P", (1, 1))
    pal.putpalette([v for r in range(6) for g in range(6) for b in range(6) for v in (r * 51, g * 51, b * 51)])
    frames = [im.quantize(palette=pal, dither=Image.Dither.NONE) for im in anim(48, 40, 12)]
    frames[0].save(OUT / "anim_10fps_48x40.gif", save_all=True, append_images=frames[1:], duration=100, loop=0,
                   disposal=1, optimize=False)
    frames = anim(40, 40, 8)
    frames[0].save(OUT / "anim_8fps_40x40.webp", save_all=True, append_images=frames[1:], duration=125, loop=0,
                   lossless=True, quality=80, method=4)

    (OUT / "bad_truncated.mp4").write_bytes(mp4[:len(mp4) * 6 // 10])
    rng = np.random.default_rng(20250601)
    ftyp = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
    (OUT / "bad_garbage.mp4").write_bytes(ftyp + rng.integers(0, 256, 2048, dtype=np.uint8).tobytes())
    encode("bad_still_1frame.mp4", "libx264", "mp4", 30, 64, 48, 1, x264,
           frames=[scene(64, 48, 7, 45)])

    total = 0
    for f in sorted(OUT.iterdir()):
        total += f.stat().st_size
        print(f"{f.name}: {f.stat().st_size} bytes", file=sys.stderr)
    print(f"{OUT}: {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
