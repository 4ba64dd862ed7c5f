#!/usr/bin/env python3
"""PDFs written by qvl's tests themselves: a small PDF 1.4 writer (objects, streams, xref) and the corpus the
document tests read, plus the hostile files of the attack suite. Standard library only, deterministic bytes.

    python3 tests/pdf/pdfgen.py OUT_DIR            # the corpus (tests/data/pdf holds a copy; a test compares)
    python3 tests/pdf/pdfgen.py --hostile OUT_DIR  # damaged, truncated, encrypted, recursive, bomb files

Page sizes are in points (1/72 inch): A4 is 595 x 842, US letter 612 x 792.
"""
import hashlib
import os
import struct
import sys
import zlib

A4 = (595, 842)
LETTER = (612, 792)


class Pdf:
    """Objects numbered from 1 in the order added; write() lays them out with a cross-reference table."""

    def __init__(self):
        self.objects = []  # bytes of each object's body, index = number - 1

    def reserve(self):
        self.objects.append(None)
        return len(self.objects)

    def set(self, num, body):
        self.objects[num - 1] = body if isinstance(body, bytes) else body.encode("latin-1")

    def add(self, body):
        num = self.reserve()
        self.set(num, body)
        return num

    def stream(self, data, extra="", compress=False):
        if compress:
            data = zlib.compress(data, 9)
            extra += " /Filter /FlateDecode"
        return self.add(b"<< /Length %d%s >>\nstream\n" % (len(data), extra.encode()) + data + b"\nendstream")

    def write(self, root, trailer_extra=b""):
        out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        offsets = []
        for i, body in enumerate(self.objects):
            offsets.append(len(out))
            out += b"%d 0 obj\n" % (i + 1) + body + b"\nendobj\n"
        xref = len(out)
        out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(self.objects) + 1)
        for off in offsets:
            out += b"%010d 00000 n \n" % off
        out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
            len(self.objects) + 1, root, trailer_extra, xref)
        return bytes(out)


def document(pages, extra_page=None):
    """pages: list of (width_pt, height_pt, content bytes, resources str, rotate). Returns the file's bytes."""
    pdf = Pdf()
    catalog = pdf.reserve()
    tree = pdf.reserve()
    font = pdf.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for (w, h, content, resources, rotate) in pages:
        c = pdf.stream(content, compress=True)
        res = "<< /Font << /F1 %d 0 R >> %s >>" % (font, resources)
        rot = " /Rotate %d" % rotate if rotate else ""
        kids.append(pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %s %s] /Resources %s /Contents %d 0 R%s >>"
                            % (tree, w, h, res, c, rot)))
    pdf.set(tree, "<< /Type /Pages /Kids [%s] /Count %d >>" % (" ".join("%d 0 R" % k for k in kids), len(kids)))
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    return pdf.write(catalog)


def text_page(lines, size=A4, rotate=0, font_size=24):
    w, h = size
    ops = [b"BT /F1 %d Tf" % font_size]
    y = h - 72
    for line in lines:
        ops.append(b"1 0 0 1 72 %d Tm (%s) Tj" % (y, line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")))
        y -= int(font_size * 1.5)
    ops.append(b"ET")
    return (w, h, b"\n".join(ops), "", rotate)


def shapes_page(size=A4):
    w, h = size
    k = 0.5523  # a circle from four Bezier curves
    cx, cy, r = w / 2, h / 2, 120
    ops = [
        b"0.9 0.1 0.1 rg 60 60 200 120 re f",              # red rectangle
        b"0.1 0.3 0.9 RG 8 w 320 80 m 540 260 l S",         # thick blue line
        b"0.1 0.7 0.2 rg %.2f %.2f m" % (cx + r, cy),
        b"%.2f %.2f %.2f %.2f %.2f %.2f c" % (cx + r, cy + k * r, cx + k * r, cy + r, cx, cy + r),
        b"%.2f %.2f %.2f %.2f %.2f %.2f c" % (cx - k * r, cy + r, cx - r, cy + k * r, cx - r, cy),
        b"%.2f %.2f %.2f %.2f %.2f %.2f c" % (cx - r, cy - k * r, cx - k * r, cy - r, cx, cy - r),
        b"%.2f %.2f %.2f %.2f %.2f %.2f c f" % (cx + k * r, cy - r, cx + r, cy - k * r, cx + r, cy),
        b"0 0 0 rg 100 700 m 300 780 l 500 700 l h f",      # black triangle
    ]
    return (w, h, b"\n".join(ops), "", 0)


def small_jpeg():
    """A 640 x 480 baseline JPEG from the test images (tests/data/images), else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "data", "images", "jpeg_baseline_420_640x480.jpg")
    if os.path.exists(path):
        return open(path, "rb").read()
    return None


def jpeg_dimensions(data):
    i = 2
    while i < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xC0, 0xC1, 0xC2):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        seg = struct.unpack(">H", data[i + 2:i + 4])[0]
        i += 2 + seg
    raise ValueError("no SOF marker")


def jpeg_document(jpeg, size=LETTER):
    """One page with the JPEG drawn over most of it (a DCTDecode image XObject) and a caption."""
    iw, ih = jpeg_dimensions(jpeg)
    pdf = Pdf()
    catalog, tree = pdf.reserve(), pdf.reserve()
    font = pdf.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    img = pdf.add(b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 "
                  b"/Filter /DCTDecode /Length %d >>\nstream\n" % (iw, ih, len(jpeg)) + jpeg + b"\nendstream")
    w, h = size
    content = b"q 480 360 0 0 66 360 cm /Im1 Do Q BT /F1 20 Tf 1 0 0 1 72 300 Tm (A photograph on a page) Tj ET"
    c = pdf.stream(content, compress=True)
    page = pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Resources << /Font << /F1 %d 0 R >> "
                   "/XObject << /Im1 %d 0 R >> >> /Contents %d 0 R >>" % (tree, w, h, font, img, c))
    pdf.set(tree, "<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % page)
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    return pdf.write(catalog)


def corpus():
    """name -> bytes: the files the document tests read."""
    files = {
        "text.pdf": document([text_page(["Invoice 2026-12-06", "Total due: 1,234.50 EUR", "Thank you."])]),
        "shapes.pdf": document([shapes_page()]),
        "rotated.pdf": document([text_page(["Rotated 90"], rotate=90), text_page(["Upright"]),
                                 text_page(["Rotated 270"], size=LETTER, rotate=270)]),
        "pages100.pdf": document([text_page(["Page %d of 100" % (i + 1)], font_size=48) for i in range(100)]),
        "mixed.pdf": document([text_page(["A4 portrait"]), text_page(["Letter"], size=LETTER),
                               text_page(["A4 landscape"], size=(842, 595)), text_page(["Index card"], size=(360, 216)),
                               text_page(["A3"], size=(842, 1191))]),
        "three_a4.pdf": document([text_page(["Quarterly report, page %d" % (i + 1), "Revenue grew %d%%." % (10 + i)])
                                  for i in range(3)]),
    }
    jpeg = small_jpeg()
    if jpeg is not None:
        files["jpeg.pdf"] = jpeg_document(jpeg)
    return files


# --- hostile files -------------------------------------------------------------------------------------------

def rc4(key, data):
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) & 255
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for b in data:
        i = (i + 1) & 255
        j = (j + s[i]) & 255
        s[i], s[j] = s[j], s[i]
        out.append(b ^ s[(s[i] + s[j]) & 255])
    return bytes(out)


PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def encrypted(user_password=b""):
    """A one-page PDF under the standard security handler, revision 2 (RC4, 40-bit): with an empty user password
    a reader opens it (it is still encrypted); with another, it cannot without the password."""
    file_id = hashlib.md5(b"qvl test document").digest()
    p = -4  # every permission
    o = rc4(hashlib.md5((b"owner" + PAD)[:32]).digest()[:5], (user_password + PAD)[:32])
    key = hashlib.md5((user_password + PAD)[:32] + o + struct.pack("<i", p) + file_id).digest()[:5]
    u = rc4(key, PAD)
    pdf = Pdf()
    catalog, tree = pdf.reserve(), pdf.reserve()
    font = pdf.add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    content = b"BT /F1 24 Tf 1 0 0 1 72 700 Tm (Secret) Tj ET"
    cnum = pdf.reserve()
    obj_key = hashlib.md5(key + struct.pack("<i", cnum)[:3] + b"\0\0").digest()[:10]
    data = rc4(obj_key, content)
    pdf.set(cnum, b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream")
    page = pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 %d 0 R >> >> "
                   "/Contents %d 0 R >>" % (tree, font, cnum))
    pdf.set(tree, "<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % page)
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    enc = pdf.add(b"<< /Filter /Standard /V 1 /R 2 /O <" + o.hex().encode() + b"> /U <" + u.hex().encode() +
                  b"> /P %d >>" % p)
    return pdf.write(catalog, b"/Encrypt %d 0 R /ID [<%s> <%s>] " % (enc, file_id.hex().encode(), file_id.hex().encode()))


def recursive():
    """A page tree whose node is its own kid, and a content stream whose /Length refers to itself."""
    pdf = Pdf()
    catalog, tree = pdf.reserve(), pdf.reserve()
    inner = pdf.reserve()
    pdf.set(inner, "<< /Type /Pages /Parent %d 0 R /Kids [%d 0 R %d 0 R] /Count 2 >>" % (tree, inner, inner))
    c = pdf.reserve()
    pdf.set(c, b"<< /Length %d 0 R >>\nstream\n0 0 m 10 10 l S\nendstream" % c)
    page = pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R >>" % (tree, c))
    pdf.set(tree, "<< /Type /Pages /Kids [%d 0 R %d 0 R] /Count 3 >>" % (inner, page))
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    return pdf.write(catalog)


def form_bomb(depth=40):
    """Form XObjects each drawing the previous one twice: 2^depth drawings of a rectangle (a time bomb)."""
    pdf = Pdf()
    catalog, tree = pdf.reserve(), pdf.reserve()
    prev = pdf.stream(b"0 0 1 1 re f", extra=" /Type /XObject /Subtype /Form /BBox [0 0 1 1]")
    for _ in range(depth):
        prev = pdf.stream(b"/X Do /X Do", extra=" /Type /XObject /Subtype /Form /BBox [0 0 1 1] "
                                                 "/Resources << /XObject << /X %d 0 R >> >>" % prev)
    c = pdf.stream(b"q 500 0 0 700 40 40 cm /X Do Q")
    page = pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Resources << /XObject << /X %d 0 R >> >> "
                   "/Contents %d 0 R >>" % (tree, prev, c))
    pdf.set(tree, "<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % page)
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    return pdf.write(catalog)


def _adler32_repeat(chunk, count):
    """zlib's Adler-32 of `chunk` repeated `count` times, by doubling (adler32_combine's arithmetic)."""
    mod = 65521

    def combine(x, y, len_y):
        a1, b1 = x & 0xFFFF, x >> 16
        a2, b2 = y & 0xFFFF, y >> 16
        a = (a1 + a2 - 1) % mod
        b = (b1 + b2 + (len_y % mod) * (a1 - 1)) % mod
        return (b << 16) | a

    result, result_len = 1, 0  # the Adler-32 of nothing
    power, power_len = zlib.adler32(chunk), len(chunk)
    while count:
        if count & 1:
            result, result_len = combine(result, power, power_len), result_len + power_len
        power, power_len = combine(power, power, power_len), power_len * 2
        count >>= 1
    return result


def decompression_bomb(gigabytes=4):
    """A page whose content stream inflates to `gigabytes` GiB of drawing operators through two Flate filters
    (a few KiB in the file): a renderer must be stopped by its time limit."""
    chunk = b"0 0 1 1 re f\n" * 80660  # about 1 MiB of operators
    count = gigabytes * 1024
    # One zlib stream of `count` chunks: after a full flush the deflate state is reset, so every chunk after the
    # first compresses to the same bytes, which are repeated rather than computed count times.
    c = zlib.compressobj(9)
    first = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush(zlib.Z_FINISH)[:-4]  # the final empty block; the checksum is written below
    inner = first + again * (count - 1) + tail + struct.pack(">I", _adler32_repeat(chunk, count))
    outer = zlib.compress(inner, 9)
    pdf = Pdf()
    catalog, tree = pdf.reserve(), pdf.reserve()
    c_num = pdf.add(b"<< /Length %d /Filter [/FlateDecode /FlateDecode] >>\nstream\n" % len(outer) + outer +
                    b"\nendstream")
    page = pdf.add("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R >>" % (tree, c_num))
    pdf.set(tree, "<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % page)
    pdf.set(catalog, "<< /Type /Catalog /Pages %d 0 R >>" % tree)
    return pdf.write(catalog)


def hostile():
    """name -> bytes: files a server must answer with a JSON 4xx, staying up."""
    good = document([text_page(["Fine so far"])])
    return {
        "damaged.pdf": good[:200] + bytes(range(256)) * 4 + good[1200:],
        "truncated.pdf": good[: len(good) // 2],
        "garbage.pdf": b"%PDF-1.7\n" + hashlib.sha256(b"x").digest() * 64,
        "encrypted_empty_password.pdf": encrypted(b""),
        "encrypted_password.pdf": encrypted(b"secret"),
        "recursive.pdf": recursive(),
        "form_bomb.pdf": form_bomb(),
        "decompression_bomb.pdf": decompression_bomb(),
        "huge_page.pdf": document([text_page(["Two hundred inches"], size=(14400, 14400))]),
        "thin_page.pdf": document([text_page(["thin"], size=(14400, 10))]),
    }


def main(argv):
    files = hostile() if argv[1:2] == ["--hostile"] else corpus()
    out = argv[-1]
    os.makedirs(out, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
