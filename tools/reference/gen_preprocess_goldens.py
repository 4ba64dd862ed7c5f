"""Writes tests/data/preprocess_golden.json (+ preprocess/*.png): each test image through transformers'
load_image and the real Qwen2VLImageProcessorFast, with the checkpoint's pixel bounds and with custom ones.

Per case: the resized size, image_grid_thw, the number of image tokens, the sha256 of pixel_values (float32,
little-endian, C order) and, for the smaller outputs, the resized 8-bit image recovered from pixel_values
(x = v * 127.5 + 127.5, exact for this normalisation) as a PNG, so a test can count differing values.
Run make_images.py first. Deterministic: re-running rewrites identical files."""
import hashlib
import json
import sys

import numpy as np
from PIL import Image
from transformers.image_utils import load_image

import qvl_reference as ref

OUT_DIR = ref.DATA / "preprocess"
MAX_PNG_PIXELS = 260_000  # keep the committed goldens small: PNGs only for outputs up to ~510x510,
MAX_PNG_BYTES = 80_000     # of at most this size each,
PNG_BUDGET = 1_500_000     # and at most this much in all (the other cases are checked by hash alone)

# (file, min_pixels, max_pixels): None keeps the checkpoint's value.
CUSTOM = [
    ("jpeg_1024x768.jpg", None, 200_704),            # downscale to 448x... under a token budget
    ("jpeg_1024x768.jpg", None, 65_536),
    ("jpeg_baseline_420_640x480.jpg", 4096, 100_000),
    ("jpeg_progressive_256x256.jpg", 1024, 30_000),  # downscale 256 -> 160
    ("png_gray8_37x1201.png", 1024, 50_000),
    ("png_gray8_1000x5.png", 1024, 20_000),
    ("gif_static_64x48.gif", 1024, 1_000_000),       # 64x48 -> 64x64 (height up-scaled)
    ("bmp24_33x17.bmp", 1024, 1_000_000),            # 33x17 -> 32x32
    ("jpeg_420_31x33.jpg", 1024, 1_000_000),         # 31x33 -> 32x32
    ("png_palette8_64x40.png", 2048, 1_000_000),
    ("jpeg_gray_100x75.jpg", 4096, 8192),
]


def run(proc, path, min_px, max_px):
    image = load_image(str(path))
    kwargs = {}
    if min_px is not None or max_px is not None:
        kwargs["size"] = {"shortest_edge": min_px or 65536, "longest_edge": max_px or 16777216}
    try:
        out = proc.image_processor(images=[image], return_tensors="pt", **kwargs)
    except ValueError as e:
        return {"error": str(e)}
    pv = out["pixel_values"].numpy().astype("<f4")
    t, gh, gw = (int(v) for v in out["image_grid_thw"][0])
    # Undo the normalisation of temporal slot 0 and un-patchify back to an HxWx3 8-bit image.
    ps, ms = 16, 2
    x = pv.reshape(t, gh // ms, gw // ms, ms, ms, 3, 2, ps, ps)[0, ..., 0, :, :]  # [bh, bw, mh, mw, c, py, px]
    img = x.transpose(0, 2, 5, 1, 3, 6, 4).reshape(gh * ps, gw * ps, 3)
    u8 = np.rint(img.astype(np.float64) * 127.5 + 127.5)
    assert np.abs(img.astype(np.float64) * 127.5 + 127.5 - u8).max() < 1e-3
    return {"resized": [gh * ps, gw * ps], "grid_thw": [t, gh, gw], "tokens": t * gh * gw // 4,
            "pixel_values_shape": list(pv.shape), "pixel_values_sha256": hashlib.sha256(pv.tobytes()).hexdigest(),
            "_u8": u8.astype(np.uint8)}


def main():
    proc = ref.processor()
    decode = json.loads((ref.DATA / "decode_golden.json").read_text())
    files = [img["file"].split("/")[-1] for img in decode["images"]]
    jobs = [(f, None, None) for f in files] + CUSTOM
    OUT_DIR.mkdir(exist_ok=True)
    for old in OUT_DIR.glob("*.png"):
        old.unlink()
    cases = []
    png_bytes = 0
    for f, min_px, max_px in jobs:
        r = run(proc, ref.DATA / "images" / f, min_px, max_px)
        case = {"file": "images/" + f, "min_pixels": min_px, "max_pixels": max_px}
        u8 = r.pop("_u8", None)
        case.update(r)
        src = Image.open(ref.DATA / "images" / f)
        resized = u8 is not None and tuple(u8.shape[:2]) != (src.height, src.width)
        if resized and u8.shape[0] * u8.shape[1] <= MAX_PNG_PIXELS:
            name = f"{f.rsplit('.', 1)[0]}_{min_px or 'd'}_{max_px or 'd'}.png"
            Image.fromarray(u8).save(OUT_DIR / name, optimize=False, compress_level=9)
            size = (OUT_DIR / name).stat().st_size
            if size <= MAX_PNG_BYTES and png_bytes + size <= PNG_BUDGET:
                png_bytes += size
                case["resized_png"] = "preprocess/" + name
            else:
                (OUT_DIR / name).unlink()
        cases.append(case)
    with open(ref.DATA / "preprocess_golden.json", "w") as fh:
        json.dump({"processor": "Qwen2VLImageProcessorFast", "cases": cases}, fh, indent=1)
        fh.write("\n")
    n_png = sum("resized_png" in c for c in cases)
    print(f"{len(cases)} cases, {n_png} with PNG", file=sys.stderr)


if __name__ == "__main__":
    main()
