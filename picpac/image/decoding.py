"""The image layer: decode, measure, shrink and re-encode images with OpenCV.

Decoding only part of a JPEG (a region, at a reduced scale) goes through picpac's optional C
extension ``picpac.image._jpeg`` over the system's libjpeg-turbo; without it every JPEG is decoded whole.
"""
from __future__ import annotations

import struct
from typing import Any

import cv2
import numpy as np

from ..errors import PicPacValueError

try:
    from . import _jpeg
except ImportError:  # built without libjpeg's headers: decode whole images with OpenCV
    _jpeg = None

REGION_DECODE = _jpeg is not None
"""Whether this build decodes regions of JPEGs (the C extension picpac.image._jpeg was built)."""

# Extensions cv2.imencode writes; anything else is re-encoded as PNG.
_ENCODABLE = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
_LOSSY = frozenset({".jpg", ".jpeg", ".webp"})
_QUALITY = 95
_QUALITY_PARAMS = {".jpg": [cv2.IMWRITE_JPEG_QUALITY, _QUALITY], ".jpeg": [cv2.IMWRITE_JPEG_QUALITY, _QUALITY],
                   ".webp": [cv2.IMWRITE_WEBP_QUALITY, _QUALITY]}


# JPEG has no alpha, so decoding it with orientation applied loses nothing; other formats keep alpha.
_JPEG_AS_SHOWN = cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH


def decode(data: Any, flags: int | None = None) -> np.ndarray | None:
    """Decode encoded image bytes (any bytes-like object, not copied); None if they are no image.

    By default the image comes out as viewers show it: a JPEG's EXIF orientation is applied
    (as OpenCV's IMREAD_COLOR does), other formats keep their channels, alpha and bit depth.
    """
    buf = np.frombuffer(data, np.uint8)
    if buf.size == 0:
        return None
    if flags is None:
        flags = _JPEG_AS_SHOWN if buf[:2].tobytes() == b"\xff\xd8" else cv2.IMREAD_UNCHANGED
    try:
        return cv2.imdecode(buf, flags)
    except cv2.error:
        return None


def shape_of(img: np.ndarray) -> tuple[int, int, int]:
    """(width, height, channels) of a decoded image."""
    height, width = img.shape[:2]
    return width, height, 1 if img.ndim == 2 else img.shape[2]


def shrink(img: np.ndarray, max_size: int, *, nearest: bool = False) -> np.ndarray | None:
    """``img`` resized so that its longer side is ``max_size``, or None when it already fits.

    ``nearest`` resizes by nearest neighbour, which keeps the values of label masks; otherwise
    INTER_AREA averages (the right filter for shrinking photographs).
    """
    width, height, _ = shape_of(img)
    longer = max(width, height)
    if longer <= max_size:
        return None
    size = (max(1, round(width * max_size / longer)), max(1, round(height * max_size / longer)))
    return cv2.resize(img, size, interpolation=cv2.INTER_NEAREST if nearest else cv2.INTER_AREA)


def encode(img: np.ndarray, ext: str, *, lossless: bool = False) -> bytes:
    """Encode ``img`` in the format of file extension ``ext`` (JPEG/WebP at quality 95).

    ``lossless`` (for masks) and extensions OpenCV cannot write give PNG instead.
    """
    ext = ext.lower()
    if ext not in _ENCODABLE or (lossless and ext in _LOSSY):
        ext = ".png"
    ok, buf = cv2.imencode(ext, img, _QUALITY_PARAMS.get(ext, []))
    if not ok:
        raise PicPacValueError(f"OpenCV could not encode a {img.dtype} image of shape {img.shape} as {ext}")
    return buf.tobytes()


_CHANNEL_FLAGS = {
    (1, 1): cv2.IMREAD_GRAYSCALE, (1, 2): cv2.IMREAD_REDUCED_GRAYSCALE_2, (1, 4): cv2.IMREAD_REDUCED_GRAYSCALE_4,
    (1, 8): cv2.IMREAD_REDUCED_GRAYSCALE_8,
    (3, 1): cv2.IMREAD_COLOR, (3, 2): cv2.IMREAD_REDUCED_COLOR_2, (3, 4): cv2.IMREAD_REDUCED_COLOR_4,
    (3, 8): cv2.IMREAD_REDUCED_COLOR_8,
}
REDUCTIONS = (4, 2, 1)
"""The scales a JPEG is decoded at (1/4, 1/2, 1/1): libjpeg's DCT scaling skips most of the work.
Its 1/8 scale is left out: it keeps only each block's DC term (32.6 dB against an area-averaged
full decode where 1/4 gives 53.7 dB) and decoded no faster than 1/4 here."""


Region = tuple[int, int, int, int]
"""(x, y, width, height) in pixels."""


def decode_channels(data: Any, channels: int, rgb: bool, reduction: int = 1,
                    region: Region | None = None) -> np.ndarray | None:
    """Decode to 1 or 3 channels (or, for -1, as stored); ``rgb`` reorders OpenCV's BGR(A) to RGB(A).

    ``reduction`` 2 or 4 decodes a JPEG at that fraction of its size (1 or 3 channels only;
    other formats decode at full size, which the caller sees from the shape).

    ``region`` (in pixels of the reduced image) asks for that part alone: with REGION_DECODE, a
    JPEG is decoded only as far down as the region reaches, and only the columns around it are
    reconstructed, giving exactly the pixels a whole decode has there. The region is ignored
    where that cannot be done (no extension, CMYK JPEGs, other formats), and the caller tells the
    two answers apart by their shape. The JPEG's EXIF orientation is not applied to a region:
    pass one only for upright JPEGs.
    """
    if region is not None and _jpeg is not None and channels in (1, 3):
        pixels = _decode_region(data, channels, rgb, reduction, region)
        if pixels is not None:
            return pixels
    img = decode(data, _CHANNEL_FLAGS.get((channels, reduction)))
    if rgb and img is not None and img.ndim == 3 and img.shape[2] in (3, 4):
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB if img.shape[2] == 3 else cv2.COLOR_BGRA2RGBA)
    return img


def _decode_region(data: Any, channels: int, rgb: bool, reduction: int, region: Region) -> np.ndarray | None:
    x, y, width, height = region
    # one more column each side: libjpeg's chroma upsampling at the edge of a cropped row would
    # otherwise lack its neighbour and differ from a whole decode there
    left = max(0, x - 1)
    mode = 0 if channels == 1 else 2 if rgb else 1
    answer = _jpeg.decode(data, reduction, left, y, width + x - left + 1, height, mode)
    if answer is None:
        return None
    pixels, first, row_width = answer
    if x + width > first + row_width:  # the region reaches past the right edge
        return None
    rows = np.frombuffer(pixels, np.uint8).reshape((height, row_width, channels) if channels > 1 else (height, row_width))
    return rows[:, x - first:x - first + width]


def jpeg_header(data: Any) -> tuple[int, int, int] | None:
    """(width, height, EXIF orientation) of a JPEG, read from its header alone; the size is as
    shown, with the orientation (1: upright) applied, as OpenCV's decode applies it.

    None when ``data`` is no JPEG or the header is not understood: the caller then decodes it.
    """
    b = memoryview(data).cast("B")
    if len(b) < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return None
    i, orientation = 2, 1
    try:
        while i + 4 <= len(b):
            if b[i] != 0xFF:
                return None
            marker = b[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            length = (b[i + 2] << 8) | b[i + 3]
            if marker == 0xE1 and bytes(b[i + 4:i + 10]) == b"Exif\0\0":
                orientation = _exif_orientation(bytes(b[i + 10:i + 2 + length]))
            elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
                height, width = (b[i + 5] << 8) | b[i + 6], (b[i + 7] << 8) | b[i + 8]
                if not width or not height:
                    return None
                return (height, width, orientation) if orientation in (5, 6, 7, 8) else (width, height, orientation)
            elif marker == 0xDA:  # scan data before any frame header
                return None
            i += 2 + length
    except IndexError:
        return None
    return None


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
