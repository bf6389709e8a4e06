"""Image sizes read from file headers alone, without decoding: what the pixel limit is checked on.

:func:`image_size` knows every format OpenCV decodes here: JPEG, PNG, GIF, BMP, WebP, TIFF (and
BigTIFF), PNM (P1-P7), PFM, Sun raster, Radiance HDR, JPEG 2000 (JP2 and J2K) and AVIF.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

_TEXT_HEAD = 4096
"""Bytes read of a text header (PNM, PAM, PFM, HDR); a longer header is not understood."""
_JP2_HEAD = 1 << 20
"""Bytes of a JPEG 2000 file searched for its codestream's SIZ segment."""


def image_size(data: Any) -> tuple[int, int] | None:
    """(width, height) of encoded image bytes, read from the header; None when the format is not
    known or the header is not understood."""
    b = memoryview(data).cast("B")
    reader = next((reader for magic, reader in _READERS if bytes(b[:len(magic)]) == magic),
                  _isobmff_size if bytes(b[4:8]) == b"ftyp" else None)
    if reader is None:
        return None
    try:
        size = reader(b)
    except (IndexError, struct.error, ValueError, OverflowError):
        return None
    return size if size is not None and size[0] > 0 and size[1] > 0 else None


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_chunks_fit(data: Any) -> bool:
    """Whether every chunk of a PNG lies within ``data`` (up to IEND). libpng allocates a chunk's declared
    length before reading it, so a few bytes declaring a 2 GB chunk would cost 2 GB: such a file is refused."""
    b = memoryview(data).cast("B")
    at, end = len(PNG_MAGIC), len(b)
    while at + 8 <= end:
        length, kind = struct.unpack_from(">I4s", b, at)
        at += 12 + length
        if at > end:
            return False
        if kind == b"IEND":
            return True
    return at == end


def jpeg_header(data: Any) -> tuple[int, int, int] | None:
    """(width, height, EXIF orientation) of a JPEG, read from its header alone; the size is as
    shown, with the orientation (1: upright) applied, as picpac's decode applies it.

    None when ``data`` is no JPEG or the header is not understood: the caller then decodes it.
    """
    frame = jpeg_frame(data)
    return None if frame is None else frame[:3]


def jpeg_frame(data: Any) -> tuple[int, int, int, bool] | None:
    """:func:`jpeg_header`'s (width, height, orientation), and whether the JPEG is a baseline one: 8-bit,
    sequential Huffman coding, one (grey) or three (YCbCr) components, the kind every JPEG decoder takes (GPUs'
    included).

    The orientation is picpac's one reading of it, which every decode follows (picpac applies it itself, never
    OpenCV): that of the first APP1 Exif segment before the first scan, whether it comes before the frame header or
    after it; a later Exif segment is ignored."""
    b = memoryview(data).cast("B")
    if len(b) < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return None
    i, orientation, frame = 2, None, None
    try:
        while i + 4 <= len(b):
            marker = b[i + 1]
            if b[i] != 0xFF or marker in (0xFF, 0x00):
                # a fill byte, or a stray one: libjpeg skips these (with a warning) and decodes the
                # image, so its size must be found past them too
                i += 1
                continue
            if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, RSTn: markers without a length
                i += 2
                continue
            if marker == 0xDA:  # the first scan: the header ends
                break
            length = (b[i + 2] << 8) | b[i + 3]
            if marker == 0xE1 and orientation is None and bytes(b[i + 4:i + 10]) == b"Exif\0\0":
                orientation = _exif_orientation(bytes(b[i + 10:i + 2 + length]))
            elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and frame is None:  # start of frame
                height, width = (b[i + 5] << 8) | b[i + 6], (b[i + 7] << 8) | b[i + 8]
                if not width or not height:
                    return None
                frame = width, height, marker in (0xC0, 0xC1) and b[i + 4] == 8 and b[i + 9] in (1, 3)
            i += 2 + length
    except IndexError:
        pass
    if frame is None:
        return None
    width, height, baseline = frame
    orientation = orientation or 1
    if orientation in (5, 6, 7, 8):
        return height, width, orientation, baseline
    return width, height, orientation, baseline


def _exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of EXIF's first IFD, 1 when absent or unreadable."""
    try:
        order = {b"II": "<", b"MM": ">"}[tiff[:2]]
        (offset,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, offset)
        for k in range(count):
            tag, _, _, value = struct.unpack_from(order + "HHIH", tiff, offset + 2 + 12 * k)
            if tag == 0x0112:
                return value if 1 <= value <= 8 else 1
    except (KeyError, struct.error):
        pass
    return 1


def _jpeg(b: memoryview) -> tuple[int, int] | None:
    header = jpeg_header(b)
    return None if header is None else header[:2]


def _png(b: memoryview) -> tuple[int, int] | None:
    if bytes(b[12:16]) != b"IHDR":
        return None
    return struct.unpack_from(">II", b, 16)


def _gif(b: memoryview) -> tuple[int, int]:
    # the logical screen: OpenCV decodes to it and refuses frames reaching outside it
    return struct.unpack_from("<HH", b, 6)


def _bmp(b: memoryview) -> tuple[int, int]:
    (info,) = struct.unpack_from("<I", b, 14)
    if info == 12:  # BITMAPCOREHEADER: 16-bit sizes
        return struct.unpack_from("<HH", b, 18)
    width, height = struct.unpack_from("<ii", b, 18)
    return width, abs(height)  # a negative height is a top-down bitmap


def _webp(b: memoryview) -> tuple[int, int] | None:
    chunk = bytes(b[12:16])
    if chunk == b"VP8X":  # extended: the canvas, 24-bit sizes minus one
        w_low, w_high, h_low, h_high = struct.unpack_from("<HBHB", b, 24)
        return 1 + (w_low | w_high << 16), 1 + (h_low | h_high << 16)
    if chunk == b"VP8L":  # lossless: 14-bit sizes minus one after the signature byte
        (bits,) = struct.unpack_from("<I", b, 21)
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 ":  # lossy: 14-bit sizes after the frame tag and start code
        width, height = struct.unpack_from("<HH", b, 26)
        return width & 0x3FFF, height & 0x3FFF
    return None


def _tiff(b: memoryview) -> tuple[int, int] | None:
    """ImageWidth and ImageLength of the first IFD (the page OpenCV decodes)."""
    order = "<" if bytes(b[:2]) == b"II" else ">"
    (version,) = struct.unpack_from(order + "H", b, 2)
    big = version == 43
    offset = struct.unpack_from(order + ("Q" if big else "I"), b, 8 if big else 4)[0]
    (count,) = struct.unpack_from(order + ("Q" if big else "H"), b, offset)
    entry, first = (20, offset + 8) if big else (12, offset + 2)
    values: dict[int, int] = {}
    for k in range(min(count, 4096)):
        at = first + k * entry
        tag, kind = struct.unpack_from(order + "HH", b, at)
        if tag in (256, 257):
            code = {3: "H", 4: "I", 16: "Q"}.get(kind)
            if code is None:
                return None
            values[tag] = struct.unpack_from(order + code, b, at + (12 if big else 8))[0]
    return (values[256], values[257]) if len(values) == 2 else None


def _text_head(b: memoryview) -> bytes:
    return bytes(b[:_TEXT_HEAD])


# A comment runs to its line's end, newline included: with the newline optional a run of '#' could be
# split into comments in 2**n ways, every one tried when no number followed (a 45-byte header took hours).
_PNM_NUMBERS = re.compile(rb"(?:\s|#[^\n]*\n)+(\d+)(?:\s|#[^\n]*\n)+(\d+)")


def _pnm(b: memoryview) -> tuple[int, int] | None:
    """P1-P6 and PFM (PF, Pf): the magic, then width and height, with comments between them."""
    found = _PNM_NUMBERS.match(_text_head(b), 2)
    return None if found is None else (int(found[1]), int(found[2]))


def _pam(b: memoryview) -> tuple[int, int] | None:
    head = _text_head(b)
    width, height = re.search(rb"^\s*WIDTH\s+(\d+)", head, re.M), re.search(rb"^\s*HEIGHT\s+(\d+)", head, re.M)
    return None if width is None or height is None else (int(width[1]), int(height[1]))


def _hdr(b: memoryview) -> tuple[int, int] | None:
    """Radiance: text lines, a blank line, then the resolution line such as ``-Y 480 +X 640``."""
    found = re.search(rb"\n\n([-+][XY]) (\d+) ([-+][XY]) (\d+)\n", _text_head(b))
    if found is None:
        return None
    first, second = int(found[2]), int(found[4])
    return (second, first) if found[1].endswith(b"Y") else (first, second)


def _sun(b: memoryview) -> tuple[int, int]:
    return struct.unpack_from(">ii", b, 4)


def _jpeg2000(b: memoryview) -> tuple[int, int] | None:
    """The codestream's SIZ segment (in a JP2 file, inside its jp2c box): the image area minus its offset."""
    start = bytes(b[:_JP2_HEAD]).find(b"\xff\x4f\xff\x51")
    if start < 0:
        return None
    x, y, x0, y0 = struct.unpack_from(">IIII", b, start + 8)
    return x - x0, y - y0


def _isobmff_size(b: memoryview) -> tuple[int, int] | None:
    """AVIF (and other HEIF-style files): the largest ``ispe`` (image spatial extents) in the meta box;
    a grid image declares its tiles' and its own."""
    at, end = 0, len(b)
    try:
        while at + 8 <= end:
            size, kind = struct.unpack_from(">I4s", b, at)
            header = 8
            if size == 1:
                (size,) = struct.unpack_from(">Q", b, at + 8)
                header = 16
            elif size == 0:
                size = end - at
            if size < header:
                return None
            if kind == b"meta":
                box = bytes(b[at + header:at + size])
                sizes = [struct.unpack_from(">II", box, m.end() + 4) for m in re.finditer(rb"ispe", box)
                         if m.end() + 12 <= len(box)]
                return max(sizes, key=lambda s: s[0] * s[1], default=None)
            at += size
    except struct.error:
        return None
    return None


_READERS: list[tuple[bytes, Callable[[memoryview], tuple[int, int] | None]]] = [
    (b"\xff\xd8", _jpeg),
    (PNG_MAGIC, _png),
    (b"GIF87a", _gif), (b"GIF89a", _gif),
    (b"BM", _bmp),
    (b"RIFF", lambda b: _webp(b) if bytes(b[8:12]) == b"WEBP" else None),
    (b"II*\0", _tiff), (b"MM\0*", _tiff), (b"II+\0", _tiff), (b"MM\0+", _tiff),
    *((b"P%d" % k, _pnm) for k in range(1, 7)), (b"PF", _pnm), (b"Pf", _pnm),
    (b"P7", _pam),
    (b"#?RADIANCE", _hdr), (b"#?RGBE", _hdr),
    (b"\x59\xa6\x6a\x95", _sun),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", _jpeg2000), (b"\xff\x4f\xff\x51", _jpeg2000),
]
"""(magic, reader): the first reader whose magic starts the data reads its size."""
