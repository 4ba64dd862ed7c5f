"""Writes the video benchmark's clip (BENCHMARKS.md "Video"): 10 s of 640x360 H.264 at 30 fps, moving shapes
over a drifting gradient with some noise, deterministic. Not committed (about 1 MB); written where asked.

Usage: make_bench_clip.py OUT.mp4 [--seconds 10] [--size 640x360] [--fps 30]
"""
import argparse
from fractions import Fraction

import av
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--size", default="640x360")
    ap.add_argument("--fps", type=int, default=30)
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    n = int(round(a.seconds * a.fps))
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 24, size=(h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(a.out, "w") as c:
        s = c.add_stream("libx264", rate=Fraction(a.fps))
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"crf": "23", "preset": "medium", "threads": "1"}
        for i in range(n):
            t = i / a.fps
            img = np.empty((h, w, 3), np.uint8)
            img[..., 0] = (xx * 255 // w + i * 2) % 256
            img[..., 1] = (yy * 255 // h + i) % 256
            img[..., 2] = 128
            for k, (r, col) in enumerate([(40, (255, 40, 40)), (28, (40, 255, 80)), (55, (60, 60, 255))]):
                cx = int((0.5 + 0.4 * np.sin(t * (0.7 + k * 0.3) + k)) * w)
                cy = int((0.5 + 0.4 * np.cos(t * (0.5 + k * 0.2) + 2 * k)) * h)
                img[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = col
            img = np.clip(img.astype(np.int16) + np.roll(noise, i * 7, axis=1) - 12, 0, 255).astype(np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


if __name__ == "__main__":
    main()
