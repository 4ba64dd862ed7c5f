#!/usr/bin/env python3
"""Draws the boxes and points of a Qwen3-VL answer onto a copy of the image it refers to.

    tools/draw_boxes.py IMAGE ANSWER OUT.png      (ANSWER: a file with the answer's text, or - for stdin)

The answer holds JSON (often in a ```json block) with "bbox_2d": [x1, y1, x2, y2] or "point_2d": [x, y] in
the model's 0-1000 coordinates of the image, and usually a "label", as the chat page reads it
(src/server/ui/app.js, parseGrounding). Needs Pillow. Prints how many marks it drew.
"""
import json
import re
import sys

from PIL import Image, ImageDraw

COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324"]


def parse_grounding(text):
    candidates = [m.group(1) for m in re.finditer(r"```(?:json)?\s*\n([\s\S]*?)(?:```|$)", text)]
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    last = max(text.rfind("]"), text.rfind("}"))
    if starts and last > min(starts):
        candidates.append(text[min(starts):last + 1])
    items = []

    def clamp(v):
        return min(1000.0, max(0.0, float(v)))

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")

    def visit(v, depth):
        if depth > 8:
            return
        if isinstance(v, list):
            for x in v:
                visit(x, depth + 1)
        elif isinstance(v, dict):
            label = v.get("label") if isinstance(v.get("label"), str) else ""
            b, p = v.get("bbox_2d"), v.get("point_2d")
            if isinstance(b, list) and len(b) == 4 and all(map(num, b)):
                items.append(("box", clamp(min(b[0], b[2])), clamp(min(b[1], b[3])), clamp(max(b[0], b[2])),
                              clamp(max(b[1], b[3])), label))
            elif isinstance(p, list) and len(p) == 2 and all(map(num, p)):
                items.append(("point", clamp(p[0]), clamp(p[1]), label))
            else:
                for x in v.values():
                    visit(x, depth + 1)

    for c in candidates:
        try:
            visit(json.loads(c), 0)
        except ValueError:
            continue
        if items:
            break
    return items[:200]


def draw(image, items):
    out = image.convert("RGB")
    d = ImageDraw.Draw(out)
    w, h = out.size
    width = max(2, round(min(w, h) / 200))
    for i, it in enumerate(items):
        colour = COLOURS[i % len(COLOURS)]
        if it[0] == "box":
            _, x1, y1, x2, y2, label = it
            box = (x1 * w / 1000, y1 * h / 1000, x2 * w / 1000, y2 * h / 1000)
            d.rectangle(box, outline=colour, width=width)
            anchor = (box[0], box[1])
        else:
            _, x, y, label = it
            r = max(3, width * 2)
            cx, cy = x * w / 1000, y * h / 1000
            d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour, outline="white")
            anchor = (cx + r, cy - r)
        if label:
            tb = d.textbbox(anchor, label)
            d.rectangle((tb[0] - 2, tb[1] - 2, tb[2] + 2, tb[3] + 2), fill=colour)
            d.text(anchor, label, fill="white")
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    text = sys.stdin.read() if argv[2] == "-" else open(argv[2], encoding="utf-8").read()
    items = parse_grounding(text)
    draw(Image.open(argv[1]), items).save(argv[3])
    print(f"{len(items)} mark(s) drawn to {argv[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
