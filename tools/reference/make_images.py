#!/usr/bin/env python3
"""Writes the image-decoding test set (tests/data/images/) and its golden file (tests/data/decode_golden.json).

Every good image is loaded the way transformers.image_utils.load_image does it (PIL.Image.open ->
PIL.ImageOps.exif_transpose -> convert("RGB")); the golden file records the size, the sha256 of the RGB
bytes (row-major HWC) and a few sampled pixels. Each good file is also cut short at a few lengths, and
the golden file records whether PIL refuses each cut file (and, where it does not, what it decodes).
Every bad file records whether PIL refused it.

Deterministic: fixed seeds, explicit encoder options, and hand-written PNG/GIF/BMP encoders for the
variants PIL cannot write (16-bit RGB PNG, interlaced PNG, odd GIF frames, RLE/16-bit/top-down BMP).
Run from anywhere:  tools/reference/.venv/bin/python tools/reference/make_images.py
"""

import hashlib
import io
import json
import os
import shutil
import struct
import sys
import warnings
import zlib

import numpy as np
import PIL
import PIL.Image
import PIL.ImageOps
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(DATA, "images")
BAD = os.path.join(OUT, "bad")


# ----------------------------------------------------------------------------------------------------
# Pixel content: smooth gradients, a few hard edges (so a wrong flip or rotation is visible), mild noise.


def photo(w, h, seed, channels=3):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    fx = x / max(w - 1, 1)
    fy = y / max(h - 1, 1)
    planes = []
    for c in range(channels):
        phase = seed * 0.7 + c * 2.1
        v = 0.5 + 0.35 * np.sin(2 * np.pi * (fx * (1.0 + 0.3 * c) + fy * (0.6 - 0.2 * c)) + phase)
        v += 0.15 * (fx - fy) * (1 if c % 2 else -1)
        planes.append(v)
    img = np.stack(planes, axis=-1) * 255.0
    # An asymmetric block in the top-left quadrant and a bar near the right edge.
    img[: max(1, h // 4), : max(1, w // 3)] = img[: max(1, h // 4), : max(1, w // 3)] * 0.3 + 170
    img[:, max(0, w - 1 - w // 8) :] *= 0.5
    img += rng.normal(0.0, 4.0, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def photo16(w, h, seed, channels):
    lo = photo(w, h, seed, channels).astype(np.uint16)
    rng = np.random.default_rng(seed + 1000)
    return (lo * 257 + rng.integers(0, 256, lo.shape, dtype=np.uint16)).astype(np.uint16)


def palette_of(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3), dtype=np.uint8)


def index_image(w, h, n, seed):
    """Smooth index field over n colours."""
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    v = (x * 3 + y * 5 + (x * y) // 7 + rng.integers(0, 2, (h, w))) % n
    return v.astype(np.uint8)


# ----------------------------------------------------------------------------------------------------
# A minimal PNG writer (for bit depths, colour types and chunks PIL does not write).


def png_chunk(ctype, data):
    return struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", zlib.crc32(ctype + data) & 0xFFFFFFFF)


def pack_bits(row, bits):
    """Packs a row of small integers MSB first (PNG/BMP order)."""
    if bits == 8:
        return bytes(row.astype(np.uint8))
    s = "".join(format(int(v), "0%db" % bits) for v in row)
    s += "0" * ((-len(s)) % 8)
    return int(s, 2).to_bytes(len(s) // 8, "big") if s else b""


def png_rows(arr, bitdepth):
    """arr: [h, w] or [h, w, c] integers -> list of raw row bytes."""
    if arr.ndim == 2:
        arr = arr[:, :, None]
    rows = []
    for r in arr:
        if bitdepth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif bitdepth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:
            rows.append(pack_bits(r[:, 0], bitdepth))
    return rows


def adam7_passes(arr):
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    out = []
    for x0, y0, dx, dy in passes:
        sub = arr[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            out.append(sub)
    return out


def write_png(path, arr, bitdepth, ctype, before_idat=b"", after_idat=b"", interlace=False):
    h, w = arr.shape[:2]
    raw = b""
    for sub in adam7_passes(arr) if interlace else [arr]:
        raw += b"".join(b"\x00" + r for r in png_rows(sub, bitdepth))
    ihdr = struct.pack(">IIBBBBB", w, h, bitdepth, ctype, 0, 0, 1 if interlace else 0)
    data = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + before_idat + png_chunk(b"IDAT", zlib.compress(raw, 9))
            + after_idat + png_chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


# ----------------------------------------------------------------------------------------------------
# EXIF blobs (TIFF structure with one IFD0 entry).


def exif_blob(orientation, endian="<", typ=3, count=1, values=None):
    values = [orientation] if values is None else values
    fmt = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i"}[typ]
    payload = struct.pack(endian + fmt * len(values), *values)
    payload = payload.ljust(4, b"\0")
    assert len(payload) == 4
    head = (b"II*\0" if endian == "<" else b"MM\0*") + struct.pack(endian + "I", 8)
    ifd = struct.pack(endian + "H", 1) + struct.pack(endian + "HHI", 0x0112, typ, count) + payload
    ifd += struct.pack(endian + "I", 0)
    return head + ifd


def insert_jpeg_app1(jpeg, payload):
    assert jpeg[:2] == b"\xff\xd8"
    seg = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return jpeg[:2] + seg + jpeg[2:]


def xmp_packet(orientation, attr=True):
    body = ('tiff:Orientation="%d"' % orientation) if attr else ""
    elem = "" if attr else "<tiff:Orientation>%d</tiff:Orientation>" % orientation
    return ('<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
            'xmlns:tiff="http://ns.adobe.com/tiff/1.0/" %s>%s</rdf:Description></rdf:RDF></x:xmpmeta>'
            '<?xpacket end="w"?>' % (body, elem)).encode()


# ----------------------------------------------------------------------------------------------------
# A minimal GIF writer (LZW encoder) for frame layouts PIL does not write.


def lzw_encode(indices, min_code_size):
    clear = 1 << min_code_size
    eoi = clear + 1
    out = bytearray()
    acc = 0
    nacc = 0

    def emit(code, size):
        nonlocal acc, nacc
        acc |= code << nacc
        nacc += size
        while nacc >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nacc -= 8

    def reset():
        return {bytes([i]): i for i in range(clear)}, eoi + 1, min_code_size + 1

    table, nxt, size = reset()
    emit(clear, size)
    w = b""
    for k in indices:
        wk = w + bytes([int(k)])
        if wk in table:
            w = wk
            continue
        emit(table[w], size)
        if nxt < 4096:
            table[wk] = nxt
            nxt += 1
            if nxt > (1 << size) and size < 12:
                size += 1
        else:
            emit(clear, size)
            table, nxt, size = reset()
        w = bytes([int(k)])
    if w:
        emit(table[w], size)
    emit(eoi, size)
    if nacc:
        out.append(acc & 0xFF)
    return bytes(out)


def gif_subblocks(data):
    out = bytearray()
    for i in range(0, len(data), 255):
        part = data[i : i + 255]
        out.append(len(part))
        out += part
    out.append(0)
    return bytes(out)


def gif_color_table(pal, bits):
    table = np.zeros((1 << bits, 3), dtype=np.uint8)
    table[: len(pal)] = pal[: 1 << bits]
    return table.tobytes()


def gif_frame(idx, x0, y0, local_pal=None, local_bits=0, interlace=False, transparency=None, min_code=None):
    h, w = idx.shape
    out = b""
    if transparency is not None:
        out += b"\x21\xf9\x04" + bytes([1]) + struct.pack("<H", 10) + bytes([transparency]) + b"\x00"
    flags = (0x40 if interlace else 0)
    if local_pal is not None:
        flags |= 0x80 | (local_bits - 1)
    out += b"\x2c" + struct.pack("<HHHHB", x0, y0, w, h, flags)
    if local_pal is not None:
        out += gif_color_table(local_pal, local_bits)
    if interlace:
        order = list(range(0, h, 8)) + list(range(4, h, 8)) + list(range(2, h, 4)) + list(range(1, h, 2))
        idx = idx[order]
    mc = min_code if min_code is not None else max(2, local_bits or 8)
    out += bytes([mc]) + gif_subblocks(lzw_encode(idx.reshape(-1), mc))
    return out


def write_gif(path, sw, sh, global_pal, global_bits, frames, background=0):
    flags = 0
    if global_pal is not None:
        flags = 0x80 | ((global_bits - 1) << 4) | (global_bits - 1)
    data = b"GIF89a" + struct.pack("<HHBBB", sw, sh, flags, background, 0)
    if global_pal is not None:
        data += gif_color_table(global_pal, global_bits)
    for fr in frames:
        data += fr
    data += b"\x3b"
    with open(path, "wb") as f:
        f.write(data)


# ----------------------------------------------------------------------------------------------------
# A minimal BMP writer.


def bmp_file(w, h, bits, pixel_rows, palette=None, compression=0, header_size=40, top_down=False, masks=None,
             colors=None, raw_pixels=None):
    """pixel_rows: list of row bytes top to bottom, already packed (unpadded)."""
    if raw_pixels is None:
        stride = ((w * bits + 31) // 32) * 4
        rows = [r.ljust(stride, b"\0") for r in pixel_rows]
        if not top_down:
            rows = rows[::-1]
        raw_pixels = b"".join(rows)
    pal = b""
    if palette is not None:
        if header_size == 12:
            pal = b"".join(bytes([b, g, r]) for r, g, b in palette)
        else:
            pal = b"".join(bytes([b, g, r, 0]) for r, g, b in palette)
    if header_size == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
    else:
        hh = -h if top_down else h
        info = struct.pack("<IiiHHIIiiII", header_size, w, hh, 1, bits, compression, len(raw_pixels), 2835, 2835,
                           colors if colors is not None else (len(palette) if palette is not None else 0), 0)
        extra = b""
        if masks is not None:
            extra = struct.pack("<" + "I" * len(masks), *masks)
        if header_size == 40:
            info += extra  # masks follow a 40-byte header for BI_BITFIELDS
        else:
            info += extra.ljust(header_size - 40, b"\0")
    offset = 14 + len(info) + len(pal)
    head = b"BM" + struct.pack("<IHHI", offset + len(raw_pixels), 0, 0, offset)
    return head + info + pal + raw_pixels


def rle8_encode(idx):
    """Simple BMP RLE8 (runs and absolute blocks), bottom-up rows."""
    out = bytearray()
    h, w = idx.shape
    for y in range(h - 1, -1, -1):
        row = idx[y]
        x = 0
        while x < w:
            run = 1
            while x + run < w and run < 255 and row[x + run] == row[x]:
                run += 1
            if run >= 3 or w - x < 3:
                out += bytes([run, row[x]])
                x += run
            else:
                n = 0
                while x + n < w and n < 255:
                    if x + n + 2 < w and row[x + n] == row[x + n + 1] == row[x + n + 2]:
                        break
                    n += 1
                if n < 3:
                    out += bytes([1, row[x]])
                    x += 1
                    continue
                out += bytes([0, n]) + bytes(row[x : x + n])
                if n % 2:
                    out += b"\0"
                x += n
        out += b"\x00\x00"
    out += b"\x00\x01"
    return bytes(out)


def rle4_encode(idx):
    """BMP RLE4 using only encoded runs of one or two alternating pixels, plus one absolute block per row."""
    out = bytearray()
    h, w = idx.shape
    for y in range(h - 1, -1, -1):
        row = [int(v) for v in idx[y]]
        x = 0
        # one absolute block of up to 6 pixels at the row start (exercises the absolute path)
        n = min(6, w)
        if n >= 3:
            data = row[:n] + [0] * (n % 2)
            packed = bytes((data[i] << 4) | data[i + 1] for i in range(0, len(data), 2))
            out += bytes([0, n]) + packed
            if len(packed) % 2:
                out += b"\0"
            x = n
        while x < w:
            a = row[x]
            b = row[x + 1] if x + 1 < w else 0
            run = 2 if x + 1 < w else 1
            while x + run < w and run < 254 and row[x + run] == (a if run % 2 == 0 else b) \
                    and (x + run + 1 >= w or row[x + run + 1] == (b if run % 2 == 0 else a)):
                run += 2 if x + run + 1 < w else 1
            run = min(run, w - x)
            out += bytes([run, (a << 4) | b])
            x += run
        out += b"\x00\x00"
    out += b"\x00\x01"
    return bytes(out)


# ----------------------------------------------------------------------------------------------------
# The reference load (transformers.image_utils.load_image for a local path).


def reference_load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        im = PIL.Image.open(path)
        src_mode = im.mode
        im = PIL.ImageOps.exif_transpose(im)
        im = im.convert("RGB")
    return im, src_mode


def truncation_cuts(n):
    """Lengths at which to cut a file: inside the headers, through the data, and in the last bytes."""
    cuts = {1, 8, 16, 33, 64} | {n * k // 8 for k in range(1, 8)} | {n - k for k in (1, 2, 3, 4, 8, 12, 16, 20)}
    return sorted(c for c in cuts if 0 < c < n)


def reference_load_bytes(data):
    """reference_load on an in-memory file; returns the RGB sha256 prefix, or None if PIL refuses it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = PIL.Image.open(io.BytesIO(data))
            im = PIL.ImageOps.exif_transpose(im).convert("RGB")
        return hashlib.sha256(np.asarray(im, dtype=np.uint8).tobytes()).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - any refusal counts
        return None


def reference_pages(path):
    """[width, height, sha256 of the RGB bytes] of each page (frame) of a TIFF, as load_image would give it
    after Image.seek(k)."""
    out = []
    im = PIL.Image.open(path)
    if im.format != "TIFF":
        return out
    for k in range(getattr(im, "n_frames", 1)):
        im.seek(k)
        rgb = PIL.ImageOps.exif_transpose(im).convert("RGB")
        out.append([rgb.width, rgb.height, hashlib.sha256(np.asarray(rgb, dtype=np.uint8).tobytes()).hexdigest()])
    return out


def sample_points(w, h):
    pts = [(0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1), (w // 2, h // 2), (w // 3, (2 * h) // 3),
           ((7 * w) // 8, h // 5)]
    seen = []
    for p in pts:
        if p not in seen:
            seen.append(p)
    return seen


# ----------------------------------------------------------------------------------------------------


def save_pil(im, name, **kw):
    im.save(os.path.join(OUT, name), **kw)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(BAD)
    notes = {}

    def P(name):
        return os.path.join(OUT, name)

    # ---------------- JPEG
    jpg = dict(optimize=False, progressive=False, quality=90)
    save_pil(Image.fromarray(photo(640, 480, 1)), "jpeg_baseline_420_640x480.jpg", subsampling=2, **jpg)
    save_pil(Image.fromarray(photo(33, 17, 2)), "jpeg_444_33x17.jpg", subsampling=0, **jpg)
    save_pil(Image.fromarray(photo(37, 29, 3)), "jpeg_422_37x29.jpg", subsampling=1, **jpg)
    save_pil(Image.fromarray(photo(31, 33, 4)), "jpeg_420_31x33.jpg", subsampling=2, **jpg)
    save_pil(Image.fromarray(photo(256, 256, 5)), "jpeg_progressive_256x256.jpg", subsampling=2, quality=85,
             optimize=False, progressive=True)
    save_pil(Image.fromarray(photo(100, 75, 6, 1)[:, :, 0], "L"), "jpeg_gray_100x75.jpg", **jpg)
    cmyk = photo(64, 48, 7, 4)
    save_pil(Image.frombytes("CMYK", (64, 48), cmyk.tobytes()), "jpeg_cmyk_64x48.jpg", **jpg)
    save_pil(Image.fromarray(photo(1024, 768, 8)), "jpeg_1024x768.jpg", subsampling=2, quality=70, optimize=False)
    save_pil(Image.fromarray(photo(1, 1, 9)), "jpeg_1x1.jpg", subsampling=2, **jpg)
    save_pil(Image.fromarray(photo(2000, 12, 10)), "jpeg_2000x12.jpg", subsampling=2, quality=80, optimize=False)
    for o in range(2, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        save_pil(Image.fromarray(photo(41, 23, 20 + o)), "jpeg_exif_orient%d_41x23.jpg" % o, subsampling=2,
                 exif=ex.tobytes(), **jpg)
    # Big-endian EXIF, orientation 5, inserted by hand.
    buf = io.BytesIO()
    Image.fromarray(photo(30, 14, 30)).save(buf, "JPEG", subsampling=2, **jpg)
    with open(P("jpeg_exif_mm_orient5_30x14.jpg"), "wb") as f:
        f.write(insert_jpeg_app1(buf.getvalue(), b"Exif\0\0" + exif_blob(5, ">")))
    save_pil(Image.fromarray(photo(26, 12, 31)), "jpeg_xmp_orient6_26x12.jpg", subsampling=2,
             xmp=xmp_packet(6), **jpg)
    # EXIF orientation 1 wins over XMP orientation 6: no rotation.
    ex = Image.Exif()
    ex[0x0112] = 1
    save_pil(Image.fromarray(photo(20, 10, 32)), "jpeg_exif1_xmp6_20x10.jpg", subsampling=2, exif=ex.tobytes(),
             xmp=xmp_packet(6), **jpg)
    save_pil(Image.fromarray(photo(45, 35, 33)), "jpeg_restart_45x35.jpg", subsampling=2, restart_marker_blocks=3,
             **jpg)
    save_pil(Image.fromarray(photo(64, 40, 34)), "jpeg_smooth_progressive_444_64x40.jpg", subsampling=0, quality=60,
             smooth=30, optimize=True, progressive=True)

    # ---------------- PNG (PIL writer)
    pngo = dict(compress_level=9, optimize=False)
    save_pil(Image.fromarray(photo(512, 384, 40)), "png_rgb8_512x384.png", **pngo)
    save_pil(Image.fromarray(photo(33, 17, 41, 4), "RGBA"), "png_rgba8_33x17.png", **pngo)
    save_pil(Image.fromarray(photo(1000, 5, 42, 1)[:, :, 0], "L"), "png_gray8_1000x5.png", **pngo)
    save_pil(Image.fromarray(photo(5, 1000, 43)), "png_rgb8_5x1000.png", **pngo)
    save_pil(Image.fromarray(photo(30, 20, 44, 2), "LA"), "png_gray_alpha8_30x20.png", **pngo)
    save_pil(Image.fromarray(photo(1, 1, 45)), "png_rgb8_1x1.png", **pngo)
    save_pil(Image.fromarray(photo(256, 256, 46)), "png_rgb8_256x256.png", **pngo)
    save_pil(Image.fromarray(photo(448, 448, 47)), "png_rgb8_448x448.png", **pngo)
    save_pil(Image.fromarray(photo(37, 1201, 48, 1)[:, :, 0], "L"), "png_gray8_37x1201.png", **pngo)
    ex = Image.Exif()
    ex[0x0112] = 6
    save_pil(Image.fromarray(photo(24, 10, 49)), "png_exif_orient6_24x10.png", exif=ex.tobytes(), **pngo)

    # ---------------- PNG (own writer)
    write_png(P("png_rgb16_48x32.png"), photo16(48, 32, 50, 3), 16, 2)
    write_png(P("png_rgba16_20x12.png"), photo16(20, 12, 51, 4), 16, 6)
    write_png(P("png_gray_alpha16_16x9.png"), photo16(16, 9, 52, 2), 16, 4)
    g16 = photo16(20, 20, 53, 1)[:, :, 0]
    g16[:, :7] //= 300  # some values below 256, which PIL keeps (it clips, not scales, I;16 -> RGB)
    write_png(P("png_gray16_20x20.png"), g16, 16, 0)
    pal = palette_of(256, 54)
    plte = png_chunk(b"PLTE", pal.tobytes())
    write_png(P("png_palette8_64x40.png"), index_image(64, 40, 256, 55), 8, 3, before_idat=plte)
    trns = png_chunk(b"tRNS", bytes(np.random.default_rng(56).integers(0, 256, 200, dtype=np.uint8)))
    write_png(P("png_palette8_trns_64x64.png"), index_image(64, 64, 256, 57), 8, 3, before_idat=plte + trns)
    for bits, (w, h) in ((1, (19, 7)), (2, (21, 9)), (4, (23, 11))):
        n = 1 << bits
        p = png_chunk(b"PLTE", palette_of(n, 60 + bits).tobytes())
        write_png(P("png_palette%dbit_%dx%d.png" % (bits, w, h)), index_image(w, h, n, 63 + bits), bits, 3,
                  before_idat=p)
        write_png(P("png_gray%dbit_%dx%d.png" % (bits, w, h)), index_image(w, h, n, 66 + bits), bits, 0)
    # Palette with 3 entries but indices up to 255: PIL maps missing entries to black.
    short = png_chunk(b"PLTE", palette_of(3, 70).tobytes())
    write_png(P("png_palette_short_16x16.png"), index_image(16, 16, 256, 71), 8, 3, before_idat=short)
    write_png(P("png_rgb8_trns_20x10.png"), photo(20, 10, 72), 8, 2,
              before_idat=png_chunk(b"tRNS", struct.pack(">HHH", 10, 20, 30)))
    write_png(P("png_interlaced_rgb8_37x29.png"), photo(37, 29, 73), 8, 2, interlace=True)
    write_png(P("png_interlaced_gray2bit_13x11.png"), index_image(13, 11, 4, 74), 2, 0, interlace=True)
    write_png(P("png_interlaced_rgba16_9x7.png"), photo16(9, 7, 75, 4), 16, 6, interlace=True)
    # EXIF in an eXIf chunk after IDAT (PIL reads it when the image is loaded), big-endian.
    write_png(P("png_exif_after_idat_orient3_22x13.png"), photo(22, 13, 76), 8, 2,
              after_idat=png_chunk(b"eXIf", exif_blob(3, ">")))
    # EXIF orientation stored with unusual types/counts.
    write_png(P("png_exif_long_orient8_15x9.png"), photo(15, 9, 77), 8, 2,
              before_idat=png_chunk(b"eXIf", exif_blob(8, "<", typ=4)))
    write_png(P("png_exif_count2_orient7_15x9.png"), photo(15, 9, 78), 8, 2,
              before_idat=png_chunk(b"eXIf", exif_blob(7, "<", typ=3, count=2, values=[7, 1])))
    write_png(P("png_exif_byte_orient6_15x9.png"), photo(15, 9, 79), 8, 2,
              before_idat=png_chunk(b"eXIf", exif_blob(6, "<", typ=1)))
    # XMP orientation in iTXt (used only when EXIF has no orientation).
    itxt = png_chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp_packet(8, attr=False))
    write_png(P("png_xmp_orient8_18x11.png"), photo(18, 11, 80), 8, 2, before_idat=itxt)
    # ImageMagick-style "Raw profile type exif" in a zTXt chunk.
    blob = b"Exif\0\0" + exif_blob(6, "<")
    raw_profile = ("\nexif\n%8d\n" % len(blob)) + blob.hex() + "\n"
    ztxt = png_chunk(b"zTXt", b"Raw profile type exif\0\0" + zlib.compress(raw_profile.encode("latin-1"), 9))
    write_png(P("png_rawprofile_orient6_17x8.png"), photo(17, 8, 81), 8, 2, before_idat=ztxt)

    # ---------------- WebP
    save_pil(Image.fromarray(photo(128, 96, 90)), "webp_lossy_128x96.webp", quality=80, method=4, lossless=False)
    save_pil(Image.fromarray(photo(33, 17, 91)), "webp_lossy_33x17.webp", quality=90, method=6, lossless=False)
    save_pil(Image.fromarray(photo(64, 64, 92)), "webp_lossless_64x64.webp", lossless=True, quality=80, method=4)
    save_pil(Image.fromarray(photo(64, 48, 93, 4), "RGBA"), "webp_lossy_alpha_64x48.webp", quality=80, method=4,
             lossless=False)
    save_pil(Image.fromarray(photo(50, 30, 94, 4), "RGBA"), "webp_lossless_alpha_50x30.webp", lossless=True,
             method=4, exact=True)
    ex = Image.Exif()
    ex[0x0112] = 6
    save_pil(Image.fromarray(photo(40, 20, 95)), "webp_exif_orient6_40x20.webp", lossless=True, method=4,
             exif=ex.tobytes())
    save_pil(Image.fromarray(photo(30, 16, 99)), "webp_xmp_orient3_30x16.webp", lossless=True, method=4,
             xmp=xmp_packet(3))
    frames = [Image.fromarray(photo(48, 32, 96 + i)) for i in range(3)]
    frames[0].save(P("webp_animated_48x32.webp"), save_all=True, append_images=frames[1:], duration=100, loop=0,
                   lossless=True, method=4)

    # ---------------- GIF
    gpal = palette_of(256, 100)
    gp = Image.fromarray(index_image(64, 48, 256, 101), "P")
    gp.putpalette(gpal.tobytes())
    save_pil(gp, "gif_static_64x48.gif", optimize=False)
    frames = []
    for i in range(3):
        f = Image.fromarray(index_image(40, 30, 256, 102 + i), "P")
        f.putpalette(gpal.tobytes())
        frames.append(f)
    frames[0].save(P("gif_animated_40x30.gif"), save_all=True, append_images=frames[1:], duration=100, loop=0,
                   optimize=False)
    # First frame smaller than the screen, with and without transparency (PIL fills the rest with the
    # transparency index, else with index 0).
    pal16 = palette_of(16, 103)
    write_gif(P("gif_subframe_transparent_40x30.gif"), 40, 30, pal16, 4,
              [gif_frame(index_image(20, 10, 16, 104), 5, 4, transparency=7),
               gif_frame(index_image(40, 30, 16, 105), 0, 0)])
    write_gif(P("gif_subframe_40x30.gif"), 40, 30, pal16, 4, [gif_frame(index_image(20, 10, 16, 106), 9, 3)])
    # Frame extends past the logical screen: PIL grows the image.
    write_gif(P("gif_frame_beyond_screen_20x10.gif"), 20, 10, pal16, 4,
              [gif_frame(index_image(16, 12, 16, 107), 8, 2)])
    write_gif(P("gif_interlaced_33x21.gif"), 33, 21, gpal, 8, [gif_frame(index_image(33, 21, 256, 108), 0, 0,
                                                                           interlace=True)])
    write_gif(P("gif_local_palette_25x14.gif"), 25, 14, pal16, 4,
              [gif_frame(index_image(25, 14, 32, 109), 0, 0, local_pal=palette_of(32, 110), local_bits=5)])
    # Identity grey palette: PIL opens this as mode "L".
    grey = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    write_gif(P("gif_grey_palette_30x20.gif"), 30, 20, grey, 8, [gif_frame(index_image(30, 20, 256, 111), 0, 0)])
    # Two-colour palette, LZW code size 3, indices up to 7: entries past the palette.
    write_gif(P("gif_index_past_palette_12x6.gif"), 12, 6, palette_of(2, 112), 1,
              [gif_frame(index_image(12, 6, 8, 113), 0, 0, min_code=3)])
    # No palette at all: PIL uses the index as grey.
    write_gif(P("gif_no_palette_10x8.gif"), 10, 8, None, 0, [gif_frame(index_image(10, 8, 256, 114), 0, 0,
                                                                          min_code=8)])

    # ---------------- BMP
    save_pil(Image.fromarray(photo(33, 17, 120)), "bmp24_33x17.bmp")
    save_pil(Image.fromarray(photo(20, 15, 121, 4), "RGBA"), "bmp32_20x15.bmp")
    bp = Image.fromarray(index_image(30, 22, 256, 122), "P")
    bp.putpalette(palette_of(256, 123).tobytes())
    save_pil(bp, "bmp8_palette_30x22.bmp")
    save_pil(Image.fromarray(photo(27, 13, 124, 1)[:, :, 0], "L"), "bmp8_gray_27x13.bmp")
    save_pil(Image.fromarray(photo(29, 11, 125, 1)[:, :, 0] > 128), "bmp1_bw_29x11.bmp")

    def wb(name, data):
        with open(P(name), "wb") as f:
            f.write(data)

    # An 8-bit image whose two-colour palette is black, white: PIL reads the rows as 1-bit data.
    idx = index_image(20, 3, 2, 140)
    wb("bmp8_bw_palette_quirk_20x3.bmp",
       bmp_file(20, 3, 8, [r.tobytes() for r in idx], palette=[(0, 0, 0), (255, 255, 255)]))
    for bits, (w, h) in ((1, (21, 9)), (4, (19, 7))):
        n = 1 << bits
        idx = index_image(w, h, n, 126 + bits)
        wb("bmp%d_palette_%dx%d.bmp" % (bits, w, h),
           bmp_file(w, h, bits, [pack_bits(r, bits) for r in idx], palette=palette_of(n, 128 + bits)))
    img = photo(18, 9, 131)
    rows24 = [r[:, ::-1].tobytes() for r in img]
    wb("bmp24_topdown_18x9.bmp", bmp_file(18, 9, 24, rows24, top_down=True))
    wb("bmp24_os2_18x9.bmp", bmp_file(18, 9, 24, rows24, header_size=12))
    idx = index_image(15, 6, 100, 132)
    wb("bmp8_palette100_topdown_15x6.bmp",
       bmp_file(15, 6, 8, [r.tobytes() for r in idx], palette=palette_of(100, 133), top_down=True))
    # 16-bit: default 5-5-5, and 5-6-5 bitfields.
    v = np.random.default_rng(134).integers(0, 65536, (8, 11), dtype=np.uint16)
    wb("bmp16_555_11x8.bmp", bmp_file(11, 8, 16, [r.astype("<u2").tobytes() for r in v]))
    wb("bmp16_565_11x8.bmp", bmp_file(11, 8, 16, [r.astype("<u2").tobytes() for r in v], compression=3,
                                      masks=(0xF800, 0x7E0, 0x1F)))
    # 32-bit bitfields in a V5 header: RGBA byte order and XBGR order.
    img = photo(13, 7, 135, 4)
    wb("bmp32_v5_rgba_13x7.bmp", bmp_file(13, 7, 32, [r.tobytes() for r in img], compression=3, header_size=124,
                                          masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000)))
    wb("bmp32_xbgr_13x7.bmp", bmp_file(13, 7, 32, [r[:, ::-1].tobytes() for r in img], compression=3,
                                       header_size=56, masks=(0xFF000000, 0xFF0000, 0xFF00, 0)))
    # RLE8 and RLE4.
    idx = index_image(23, 10, 6, 136)
    idx[2:5, 3:20] = 4
    wb("bmp_rle8_23x10.bmp", bmp_file(23, 10, 8, None, palette=palette_of(256, 137), compression=1,
                                      raw_pixels=rle8_encode(idx)))
    idx = index_image(21, 9, 16, 138) % 3
    wb("bmp_rle4_21x9.bmp", bmp_file(21, 9, 4, None, palette=palette_of(16, 139), compression=2,
                                     raw_pixels=rle4_encode(idx)))

    # ---------------- Netpbm (PBM, PGM, PPM; own writer: plain and raw, odd maxvals, comments)
    def pnm(magic, w, h, maxval, body, header_extra=b""):
        head = b"%s\n%s%d %d\n" % (magic, header_extra, w, h)
        return head + (b"%d\n" % maxval if maxval else b"") + body

    rgb = photo(33, 17, 160)
    wb("ppm_p6_33x17.ppm", pnm(b"P6", 33, 17, 255, rgb.tobytes()))
    gray = photo(27, 13, 161, 1)[:, :, 0]
    wb("pgm_p5_27x13.pgm", pnm(b"P5", 27, 13, 255, gray.tobytes(), header_extra=b"# written by make_images.py\n"))
    bits = photo(29, 11, 162, 1)[:, :, 0] > 128
    wb("pbm_p4_29x11.pbm", pnm(b"P4", 29, 11, 0, b"".join(np.packbits(r).tobytes() for r in bits)))
    rng = np.random.default_rng(163)
    v = rng.integers(0, 1001, (9, 20, 3))
    wb("ppm_p6_maxval1000_20x9.ppm", pnm(b"P6", 20, 9, 1000, v.astype(">u2").tobytes()))
    v = rng.integers(0, 600, (7, 19))  # 16-bit gray: Pillow keeps 0..65535 (mode I), convert('RGB') clips
    wb("pgm_p5_maxval65535_19x7.pgm", pnm(b"P5", 19, 7, 65535, v.astype(">u2").tobytes()))
    v = rng.integers(0, 4001, (6, 17))
    wb("pgm_p5_maxval4000_17x6.pgm", pnm(b"P5", 17, 6, 4000, v.astype(">u2").tobytes()))
    v = np.arange(0, 16 * 8).reshape(8, 16) % 16  # every value of maxval 15, halves rounded to even
    wb("pgm_p5_maxval15_16x8.pgm", pnm(b"P5", 16, 8, 15, v.astype("u1").tobytes()))
    v = rng.integers(0, 201, (5, 11, 3))
    toks = [str(int(x)) for x in v.reshape(-1)]
    toks[0] = "+" + toks[0]                 # Python int() takes a sign ...
    toks[5] = toks[5][:1] + "_" + toks[5][1:] if len(toks[5]) > 1 else toks[5]  # ... and '_' between digits
    lines = [" ".join(toks[i:i + 7]) for i in range(0, len(toks), 7)]
    body = ("\t\r\n".join(lines)).encode()
    body = body.replace(b" ", b" # a comment between samples\n", 1)
    glued = toks[9]  # a comment inside a sample glues its halves
    if len(glued) > 1:
        body = body.replace((" " + glued + " ").encode(), (" " + glued[:1] + "#x\r" + glued[1:] + " ").encode(), 1)
    wb("ppm_p3_plain_comments_11x5.ppm", b"P3\n# size next\n1#c\n1 5 200\n" + body + b"\n")
    bits = photo(13, 6, 164, 1)[:, :, 0] > 120
    rows = ["".join("1" if b else "0" for b in r) for r in bits]
    body = (rows[0] + "\n" + " ".join(rows[1]) + "\n# comment\n" + "\n".join(rows[2:])).encode()
    wb("pbm_p1_plain_13x6.pbm", pnm(b"P1", 13, 6, 0, body))
    v = rng.integers(0, 1024, (4, 9))
    wb("pgm_p2_plain_maxval1023_9x4.pgm", pnm(b"P2", 9, 4, 1023, "\n".join(" ".join(str(int(x)) for x in r) for r in v).encode()))

    # ---------------- ICO (Pillow's writer: PNG or BMP entries; and by hand: palette bitmaps, equal sizes)
    icon = Image.fromarray(photo(48, 48, 170))
    save_pil(icon, "ico_png_16_32_48.ico", sizes=[(16, 16), (32, 32), (48, 48)])
    save_pil(Image.fromarray(photo(32, 32, 171)), "ico_bmp_16_32.ico", sizes=[(16, 16), (32, 32)], bitmap_format="bmp")

    def dib_entry(w, h, bits, idx, palette):
        """A headerless BMP as icons store it: height doubled, colour rows then a 1-bit AND mask."""
        bmp = bmp_file(w, h, bits, [pack_bits(r, bits) if bits < 8 else r.astype("u1").tobytes() for r in idx],
                       palette=palette)
        info = bytearray(bmp[14:])
        struct.pack_into("<i", info, 8, 2 * h)
        mask_stride = ((w + 31) // 32) * 4
        return bytes(info) + bytes(mask_stride * h)

    def ico_file(entries):
        """entries: (width, height, colours, bpp, data)."""
        out = struct.pack("<HHH", 0, 1, len(entries))
        offset = 6 + 16 * len(entries)
        blobs = b""
        for w, h, colours, bpp, data in entries:
            out += struct.pack("<BBBBHHII", w % 256, h % 256, colours, 0, 1, bpp, len(data), offset + len(blobs))
            blobs += data
        return out + blobs

    idx4 = index_image(24, 24, 16, 172)
    idx8 = index_image(24, 24, 256, 173)
    small = io.BytesIO()
    Image.fromarray(photo(16, 16, 174)).save(small, "PNG")
    # Two 24x24 entries: the 4-bit one has the lower colour depth, so it is the one opened; a smaller PNG.
    wb("ico_bmp4_bmp8_24_png16.ico", ico_file([
        (24, 24, 0, 8, dib_entry(24, 24, 8, idx8, palette_of(256, 175))),
        (24, 24, 16, 4, dib_entry(24, 24, 4, idx4, palette_of(16, 176))),
        (16, 16, 0, 32, small.getvalue())]))
    # A 1-bit icon whose colour count says 2 and bpp says 0.
    idx1 = index_image(20, 12, 2, 177)
    wb("ico_bmp1_20x12.ico", ico_file([(20, 12, 2, 0, dib_entry(20, 12, 1, idx1, [(10, 20, 30), (250, 240, 230)]))]))

    # ---------------- TIFF: Pillow's writer (its libtiff codecs) and tifffile (layouts Pillow cannot write)
    import tifffile

    def tif(name, data, **kw):
        buf = io.BytesIO()
        tifffile.imwrite(buf, data, **kw)
        wb(name, buf.getvalue())

    base = Image.fromarray(photo(40, 30, 301))
    for comp in ["raw", "tiff_lzw", "tiff_adobe_deflate", "packbits", "jpeg"]:
        save_pil(base, "tiff_rgb_%s_40x30.tif" % comp, format="TIFF", compression=comp)
    save_pil(base.convert("YCbCr"), "tiff_ycbcr_jpeg_40x30.tif", format="TIFF", compression="jpeg")
    tif("tiff_ycbcr_jpeg_sub22_40x30.tif", photo(40, 30, 302), photometric="ycbcr", compression="jpeg",
        subsampling=(2, 2))
    bw = base.convert("L").point(lambda v: 255 if v > 120 else 0).convert("1")
    for comp in ["raw", "group3", "group4", "tiff_lzw"]:
        save_pil(bw, "tiff_bilevel_%s_40x30.tif" % comp, format="TIFF", compression=comp)
    tif("tiff_bilevel_miniswhite_tiled_50x40.tif", photo(50, 40, 303)[..., 0] > 128, photometric="miniswhite",
        tile=(16, 16), compression="lzw")
    save_pil(base.convert("L"), "tiff_grey8_deflate_40x30.tif", format="TIFF", compression="tiff_adobe_deflate")
    tif("tiff_grey8_miniswhite_9x7.tif", photo(9, 7, 304)[..., 0], photometric="miniswhite")
    tif("tiff_grey8_signed_9x7.tif", (photo(9, 7, 305)[..., 0].astype(np.int16) - 128).astype(np.int8),
        photometric="minisblack")
    tif("tiff_grey4_9x7.tif", photo(9, 7, 306)[..., 0] >> 4, bitspersample=4, photometric="minisblack")
    tif("tiff_grey2_miniswhite_9x7.tif", photo(9, 7, 307)[..., 0] >> 6, bitspersample=2, photometric="miniswhite")
    save_pil(Image.fromarray(photo16(33, 17, 308, 1)[..., 0]), "tiff_grey16_33x17.tif", format="TIFF")
    tif("tiff_grey16_be_deflate_pred_33x17.tif", photo16(33, 17, 309, 1)[..., 0] // 200, byteorder=">",
        compression="zlib", predictor=True)
    save_pil(base.convert("LA"), "tiff_la_40x30.tif", format="TIFF")
    save_pil(Image.fromarray(photo(40, 30, 310, 4)), "tiff_rgba_40x30.tif", format="TIFF", compression="tiff_lzw")
    premul = photo(12, 10, 311, 4)
    premul[..., 3] = np.linspace(0, 255, 120).reshape(10, 12).astype(np.uint8)  # alpha 0 and 255 included
    premul[..., :3] = (premul[..., :3].astype(np.uint32) * premul[..., 3:4] // 255).astype(np.uint8)
    tif("tiff_rgba_premultiplied_12x10.tif", premul, photometric="rgb", extrasamples=[1])
    tif("tiff_rgbx_12x10.tif", photo(12, 10, 312, 4), photometric="rgb", extrasamples=[0])
    tif("tiff_rgb16_33x17.tif", photo16(33, 17, 313, 3), photometric="rgb")
    tif("tiff_rgb16_be_lzw_pred_33x17.tif", photo16(33, 17, 314, 3), photometric="rgb", byteorder=">",
        compression="lzw", predictor=True)
    tif("tiff_rgb_be_planar_33x17.tif", np.moveaxis(photo(33, 17, 315), -1, 0), photometric="rgb",
        planarconfig="separate", byteorder=">")
    tif("tiff_rgb_tiled_50x40.tif", photo(50, 40, 316), photometric="rgb", tile=(16, 16), compression="zlib")
    tif("tiff_rgb_tiled_planar_50x40.tif", np.moveaxis(photo(50, 40, 317), -1, 0), photometric="rgb",
        planarconfig="separate", tile=(16, 16), compression="packbits")
    tif("tiff_rgb_strips_zstd_33x17.tif", photo(33, 17, 318), photometric="rgb", compression="zstd", rowsperstrip=5)
    tif("tiff_bigtiff_rgb_33x17.tif", photo(33, 17, 319), photometric="rgb", bigtiff=True)
    save_pil(base.convert("P", palette=Image.Palette.ADAPTIVE, colors=200), "tiff_palette8_lzw_40x30.tif",
             format="TIFF", compression="tiff_lzw")
    save_pil(base.convert("PA"), "tiff_palette_alpha_40x30.tif", format="TIFF")
    save_pil(base.convert("CMYK"), "tiff_cmyk_lzw_40x30.tif", format="TIFF", compression="tiff_lzw")
    tif("tiff_cmyk16_12x10.tif", photo16(12, 10, 320, 4), photometric="separated")
    oriented = base.copy()
    exif = oriented.getexif()
    exif[274] = 6
    save_pil(oriented, "tiff_orientation6_40x30.tif", format="TIFF", exif=exif)
    tif("tiff_xmp_orientation8_12x10.tif", photo(12, 10, 321), photometric="rgb",
        extratags=[(700, "B", 0, xmp_packet(8), True)])
    save_pil(base, "tiff_multipage_3.tif", format="TIFF", save_all=True, compression="tiff_lzw",
             append_images=[Image.fromarray(photo(20, 10, 322)).convert("L"), Image.fromarray(photo(17, 23, 323))])

    # ---------------- Bad files
    def bad(name, data):
        with open(os.path.join(BAD, name), "wb") as f:
            f.write(data)

    def read(name):
        with open(P(name), "rb") as f:
            return f.read()

    j = read("jpeg_baseline_420_640x480.jpg")
    bad("truncated.jpg", j[: len(j) // 2])
    bad("truncated_header.jpg", j[:300])
    p = read("png_rgb8_512x384.png")
    bad("truncated.png", p[: len(p) // 2])
    bad("truncated.webp", read("webp_lossy_128x96.webp")[:200])
    bad("truncated.gif", read("gif_static_64x48.gif")[:600])
    bad("truncated.bmp", read("bmp24_33x17.bmp")[:1000])
    bad("random.bin", bytes(np.random.default_rng(200).integers(0, 256, 4096, dtype=np.uint8)))
    bad("text.txt", b"This is not an image.\nJust some text.\n")
    bad("empty.bin", b"")
    bad("zero.gif", b"")
    # PNG whose header claims 100000 x 100000 pixels (decompression bomb).
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    bad("bomb_100000x100000.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + png_chunk(b"IEND", b""))
    # GIF whose screen claims 65535 x 65535 and a frame of the same size (4.3 GP).
    bad("bomb_65535x65535.gif", b"GIF89a" + struct.pack("<HHBBB", 65535, 65535, 0x80, 0, 0) + b"\0" * 6
        + b"\x2c" + struct.pack("<HHHHB", 0, 0, 65535, 65535, 0) + b"\x02\x02\x4c\x01\x00\x3b")
    ihdr0 = struct.pack(">IIBBBBB", 0, 0, 8, 2, 0, 0, 0)
    bad("zero_size.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr0) + png_chunk(b"IDAT", zlib.compress(b""))
        + png_chunk(b"IEND", b""))
    bad("bmp_jpeg_compression.bmp", bmp_file(4, 4, 24, None, compression=4, raw_pixels=b"\xff\xd8" + b"\0" * 62))
    bad("bmp_2bit.bmp", bmp_file(4, 4, 2, [b"\0"] * 4, palette=palette_of(4, 201)))
    bad("gif_no_frames.gif", b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0x80, 0, 0) + b"\0" * 6 + b"\x3b")
    bad("jpeg_header_only.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    bad("png_signature_only.png", b"\x89PNG\r\n\x1a\n")
    bad("ico_no_entries.ico", struct.pack("<HHH", 0, 1, 0))
    bad("ico_truncated_directory.ico", struct.pack("<HHH", 0, 1, 2) + b"\0" * 20)
    bad("ico_offset_beyond_end.ico", struct.pack("<HHH", 0, 1, 1) + struct.pack("<BBBBHHII", 16, 16, 0, 0, 1, 32, 100, 5000))
    ib = read("ico_bmp1_20x12.ico")
    bad("ico_bitmap_truncated.ico", ib[: len(ib) - 40])
    bad("ppm_maxval0.ppm", b"P6\n2 2\n0\n" + b"\0" * 12)
    bad("ppm_maxval65536.ppm", b"P6\n2 2\n65536\n" + b"\0" * 24)
    bad("ppm_plain_sample_over_maxval.ppm", b"P3\n2 1\n100\n1 2 3 4 5 101\n")
    bad("ppm_plain_negative_sample.ppm", b"P3\n2 1\n100\n1 2 3 4 5 -1\n")
    bad("pbm_plain_bad_token.pbm", b"P1\n3 1\n0 1 2\n")
    bad("pgm_token_too_long.pgm", b"P5\n000000000002 2\n255\n" + b"\0" * 4)
    bad("pgm_plain_not_a_number.pgm", b"P2\n2 1\n255\n1 x\n")
    bad("ppm_raw_truncated.ppm", b"P6\n4 4\n255\n" + b"\x80" * 47)
    bad("ppm_bomb_100000x100000.ppm", b"P6\n100000 100000\n255\n" + b"\0" * 30)
    bad("pam_p7.pam", b"P7\nWIDTH 1\nHEIGHT 1\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n\0\0\0")
    # TIFF: a header claiming 100000 x 100000 pixels, an IFD past the end, premultiplied grey + alpha
    # (Pillow's La, which it cannot convert to RGB), a page past the last.
    def tiff_ifd(entries, data=b""):  # a little-endian classic TIFF with one IFD of (tag, type, value)
        ifd = struct.pack("<H", len(entries))
        for tag, typ, value in sorted(entries):
            ifd += struct.pack("<HHI", tag, typ, 1) + (struct.pack("<HH", value, 0) if typ == 3 else struct.pack("<I", value))
        ifd += b"\0\0\0\0"
        return b"II*\0" + struct.pack("<I", 8) + ifd + data
    n_entries = 8
    data_at = 8 + 2 + 12 * n_entries + 4
    bomb = tiff_ifd([(256, 4, 100000), (257, 4, 100000), (258, 3, 8), (259, 3, 1), (262, 3, 1),
                     (273, 4, data_at), (278, 4, 100000), (279, 4, 64)], b"\0" * 64)
    bad("tiff_bomb_100000x100000.tif", bytes(bomb))
    bad("tiff_ifd_beyond_end.tif", b"II*\0" + struct.pack("<I", 100000) + b"\0" * 8)
    buf = io.BytesIO()
    tifffile.imwrite(buf, photo(6, 5, 324)[..., :2], photometric="minisblack", extrasamples=[1])
    bad("tiff_grey_premultiplied_alpha.tif", buf.getvalue())
    bad("tiff_header_only.tif", b"MM\0*\0\0\0\x08")
    pc = bytearray(read("png_gray8_1000x5.png"))
    pc[8 + 8 + 13] ^= 0xFF  # corrupt the IHDR CRC
    bad("png_bad_ihdr_crc.png", bytes(pc))

    # ---------------- Golden
    golden = {"generator": "tools/reference/make_images.py", "pillow": PIL.__version__,
              "reference": "PIL.Image.open -> PIL.ImageOps.exif_transpose -> convert('RGB')",
              "images": [], "bad": []}
    for name in sorted(os.listdir(OUT)):
        path = P(name)
        if not os.path.isfile(path):
            continue
        im, src_mode = reference_load(path)
        with open(path, "rb") as f:
            data = f.read()
        rgb = np.asarray(im, dtype=np.uint8)
        h, w = rgb.shape[:2]
        golden["images"].append({
            "file": "images/" + name,
            "source_mode": src_mode,
            "width": w,
            "height": h,
            "sha256": hashlib.sha256(rgb.tobytes()).hexdigest(),
            "samples": [{"x": x, "y": y, "rgb": [int(c) for c in rgb[y, x]]} for x, y in sample_points(w, h)],
            # [length, first 16 hex digits of the RGB sha256, or null where PIL refuses the cut file]
            "truncations": [[c, reference_load_bytes(data[:c])] for c in truncation_cuts(len(data))],
        })
        pages = reference_pages(path)
        if len(pages) > 1:
            golden["images"][-1]["pages"] = pages
    for name in sorted(os.listdir(BAD)):
        try:
            im, _ = reference_load(os.path.join(BAD, name))
            refused, err = False, ""
        except Exception as e:  # noqa: BLE001 - any refusal counts
            msg = str(e).splitlines()[0] if str(e) else ""
            refused, err = True, "%s: %s" % (type(e).__name__, msg.replace(BAD + os.sep, ""))
        golden["bad"].append({"file": "images/bad/" + name, "pil_refused": refused, "pil_error": err})
    with open(os.path.join(DATA, "decode_golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(OUT) for fn in fns)
    print("wrote %d good and %d bad files, %d bytes" % (len(golden["images"]), len(golden["bad"]), total))
    accepted = [b["file"] for b in golden["bad"] if not b["pil_refused"]]
    if accepted:
        print("warning: PIL accepted these 'bad' files:", accepted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
