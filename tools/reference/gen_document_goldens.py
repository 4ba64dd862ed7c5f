"""Writes tests/data/document_golden.json: PDF pages (tests/data/pdf, written by tests/pdf/pdfgen.py) as the
model sees them, through the real Qwen3VLProcessor.

Per case: the pages sent, each page's render size (qvl's documented rule, implemented here a second time: the DPI
at which the page's area is the image budget max_pixels, at most 150 DPI, sides rounded), the page rendered by
Poppler's pdftoppm run directly (-cropbox -scale-to-x/-y, the way qvl's confined worker runs it), then the
conversation [{"role": "user", "content": ["Page n: ", page image, ..., question]}] through apply_chat_template and
the processor: input_ids, image_grid_thw and the sha256 of pixel_values. The pixels, and so the hash, are
Poppler's (Debian 12's poppler-utils 22.12); the ids and grids depend only on the sizes.
Deterministic: re-running rewrites an identical file."""
import hashlib
import io
import json
import math
import subprocess

from PIL import Image

import qvl_reference as ref

PDF_DIR = ref.DATA / "pdf"
MAX_DPI = 150
QUESTION = "What does the document say?"

# (file, pages from 1 or None for all, max_pixels or None for the processor's)
CASES = [
    ("text.pdf", None, None),
    ("three_a4.pdf", [1, 3], 200_704),
    ("rotated.pdf", None, 300_000),
    ("mixed.pdf", None, 250_000),
    ("jpeg.pdf", None, 400_000),
    ("shapes.pdf", None, 500_000),
]


def pdfinfo(path):
    out = subprocess.run(["pdfinfo", "-f", "1", "-l", "2000", str(path)], check=True, capture_output=True,
                         text=True).stdout
    pages = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0] == "Page" and parts[2] == "size:":
            pages.setdefault(int(parts[1]), {})["size"] = (float(parts[3]), float(parts[5]))
        elif len(parts) >= 4 and parts[0] == "Page" and parts[2] == "rot:":
            pages.setdefault(int(parts[1]), {})["rot"] = int(parts[3])
    return pages


def plan(w_pt, h_pt, max_pixels):
    """The render size: DPI = min(150, 72 * sqrt(max_pixels / area)), sides round(pt * dpi / 72), shrunk by
    0.1 % steps while the rounded sides exceed the budget."""
    dpi = min(MAX_DPI, 72.0 * math.sqrt(max_pixels / (w_pt * h_pt)))

    def side(pt):
        return max(1, int(math.floor(pt * dpi / 72.0 + 0.5)))  # C's lround: halves away from zero

    w, h = side(w_pt), side(h_pt)
    while w * h > max_pixels and w > 1 and h > 1:
        dpi *= 0.999
        w, h = side(w_pt), side(h_pt)
    return w, h


def render(path, number, rot, w, h):
    sx, sy = (h, w) if rot % 180 else (w, h)  # pdftoppm scales the page before its rotation
    png = subprocess.run(["pdftoppm", "-f", str(number), "-l", str(number), "-cropbox", "-scale-to-x", str(sx),
                          "-scale-to-y", str(sy), "-png", str(path)], check=True, capture_output=True).stdout
    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert img.size == (w, h), (path, number, img.size, (w, h))
    return img


def main():
    proc = ref.processor()
    pre = json.loads((ref.MODEL / "preprocessor_config.json").read_text())
    default_max = pre["size"]["longest_edge"]
    cases = []
    for name, pages, max_pixels in CASES:
        path = PDF_DIR / name
        info = pdfinfo(path)
        numbers = pages or sorted(info)
        budget = max_pixels or default_max
        content, images, sizes = [], [], []
        for n in numbers:
            w_pt, h_pt = info[n]["size"]
            rot = info[n].get("rot", 0)
            shown = (h_pt, w_pt) if rot % 180 else (w_pt, h_pt)
            w, h = plan(shown[0], shown[1], budget)
            sizes.append([w, h])
            images.append(render(path, n, rot, w, h))
            content += [{"type": "text", "text": "Page %d: " % n}, {"type": "image"}]
        content.append({"type": "text", "text": QUESTION})
        text = proc.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                        add_generation_prompt=True)
        kwargs = {}
        if max_pixels is not None:
            kwargs["images_kwargs"] = {"size": {"shortest_edge": pre["size"]["shortest_edge"], "longest_edge": max_pixels}}
        out = proc(text=[text], images=images, return_tensors="pt", **kwargs)
        pv = out["pixel_values"].numpy().astype("<f4")
        cases.append({
            "file": name, "pages": numbers, "max_pixels": max_pixels, "question": QUESTION,
            "render_sizes": sizes,
            "image_grid_thw": [[int(v) for v in g] for g in out["image_grid_thw"]],
            "input_ids": [int(v) for v in out["input_ids"][0]],
            "pixel_values_sha256": hashlib.sha256(pv.tobytes()).hexdigest(),
        })
    (ref.DATA / "document_golden.json").write_text(json.dumps({
        "source": "tools/reference/gen_document_goldens.py: Qwen3VLProcessor on pages rendered by pdftoppm",
        "max_dpi": MAX_DPI, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
