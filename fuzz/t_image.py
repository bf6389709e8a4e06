"""Target ``image``: encoded images through picpac's decoders, under a pixel limit.

Seeds are small JPEGs (baseline, progressive, grey, 4:4:4, restart markers, an EXIF orientation), PNGs
(grey, RGB, RGBA, 16-bit) and one image of every other format OpenCV writes here (BMP, GIF, TIFF, WebP,
PNM/PAM/PFM, Sun raster, Radiance HDR, AVIF, JPEG 2000), plus decompression bombs. Mutations are the byte
ones, header sizes set to interesting values, and PNGs with their chunk CRCs made valid again.

Each case: ``image_size`` and ``jpeg_header`` never raise; ``decode`` and ``decode_channels`` (channels
1, 3, -1; reduction 1, 2, 4; RGB or BGR) give None, an ImageTooLargeError, or an image of at most
``LIMIT`` pixels; a region decode gives the region's shape or the whole image's, and where it gives the
region its pixels are the whole decode's there; the C extension ``_jpeg.decode``, called directly, gives
None, rows of exactly the asked size, or a ValueError for a JPEG over its own pixel limit (2**28).
"""
from __future__ import annotations

import random
import struct
import zlib

import cv2
import numpy as np

from picpac import image
from picpac.image import decoding, headers

from .common import Target, attempt, check, outcome
from .mutate import interesting, mutate, put_int

LIMIT = 1 << 18
"""The pixel limit of every decode in this target (a 512x512 image)."""


def _exif(orientation: int) -> bytes:
    tiff = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0)
    body = b"Exif\0\0" + tiff + b"\0\0\0\0"
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def image_seeds() -> list[bytes]:
    rng = np.random.default_rng(7)
    color = rng.integers(0, 256, (24, 40, 3), np.uint8)
    color[:12] //= 3
    grey = color[:, :, 1].copy()
    jpg = cv2.IMWRITE_JPEG_QUALITY
    seeds = [
        cv2.imencode(".jpg", color, [jpg, 90])[1].tobytes(),
        cv2.imencode(".jpg", grey, [jpg, 80])[1].tobytes(),
        cv2.imencode(".jpg", color, [jpg, 75, cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes(),
        cv2.imencode(".jpg", color, [jpg, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                     cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444])[1].tobytes(),
        cv2.imencode(".jpg", color, [jpg, 85, cv2.IMWRITE_JPEG_RST_INTERVAL, 1])[1].tobytes(),
        cv2.imencode(".png", color)[1].tobytes(),
        cv2.imencode(".png", grey)[1].tobytes(),
        cv2.imencode(".png", np.dstack([color, grey]))[1].tobytes(),
        cv2.imencode(".png", (grey.astype(np.uint16) * 257))[1].tobytes(),
    ]
    plain = seeds[0]
    seeds.append(plain[:2] + _exif(6) + plain[2:])  # rotated as shown: 24x40 -> 40x24
    big = rng.integers(0, 256, (64, 64, 3), np.uint8)
    for ext, pixels in ((".bmp", color), (".gif", color), (".tif", color), (".webp", color), (".ppm", color),
                        (".pgm", grey), (".pam", color), (".pfm", color.astype(np.float32) / 255),
                        (".ras", color), (".hdr", color.astype(np.float32) / 255), (".avif", color),
                        (".jp2", big)):
        try:
            ok, buf = cv2.imencode(ext, pixels)
        except cv2.error:
            continue
        if ok:
            seeds.append(buf.tobytes())
    seeds.append(_jpeg_sized(plain, 65500, 65500))  # bombs: a small file declaring a huge image
    seeds.append(_png_sized(seeds[5], 30000, 30000))
    return seeds


def _sof(data: bytes | bytearray) -> int | None:
    """The position of a JPEG's start-of-frame marker."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return i
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


def _jpeg_sized(data: bytes, width: int, height: int) -> bytes:
    buf = bytearray(data)
    at = _sof(buf)
    if at is not None and at + 9 <= len(buf):
        buf[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(buf)


def fix_png(data: bytes) -> bytes:
    """Every whole chunk's CRC made valid (libpng checks them; the decoder past them is the target)."""
    buf = bytearray(data)
    at = 8
    while at + 12 <= len(buf):
        (length,) = struct.unpack_from(">I", buf, at)
        end = at + 8 + length
        if end + 4 > len(buf):
            break
        buf[end:end + 4] = struct.pack(">I", zlib.crc32(buf[at + 4:end]))
        at = end + 4
    return bytes(buf)


def _png_sized(data: bytes, width: int, height: int) -> bytes:
    buf = bytearray(data)
    buf[16:24] = struct.pack(">II", width, height)
    return fix_png(bytes(buf))


# where each format keeps its width and height: (magic, offset, size of each, big-endian)
_SIZE_FIELDS = ((b"BM", 18, 4, False), (b"GIF8", 6, 2, False), (b"\x59\xa6\x6a\x95", 4, 4, True),
                (b"RIFF", 26, 2, False), (b"\x89PNG", 16, 4, True))


def image_mutate(seed: bytes, rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.15:  # the declared size: often a bomb, sometimes zero or one
        big = rng.random() < 0.6
        width = rng.choice((65500, 65535, 40000, 2**14)) if big else rng.choice((0, 1, 2, 7, 8, 9, 17, 640))
        height = rng.choice((65500, 65535, 40000, 2**14, 1)) if big else rng.choice((0, 1, 3, 8, 16, 480))
        if seed[:2] == b"\xff\xd8":
            return _jpeg_sized(seed, width, height)
        if seed[:4] == b"\x89PNG":
            return _png_sized(seed, width, height)
        for magic, at, size, big_endian in _SIZE_FIELDS:
            if seed.startswith(magic):
                buf = bytearray(seed)
                put_int(buf, at, width if size == 4 else min(width, 65535), size, big_endian)
                put_int(buf, at + size, height if size == 4 else min(height, 65535), size, big_endian)
                return bytes(buf)
        buf = bytearray(seed)
        for _ in range(2):
            put_int(buf, rng.randrange(min(len(buf), 64)), interesting(rng, 4), 4, rng.random() < 0.5)
        return bytes(buf)
    data = mutate(seed, rng, hot=160)
    if seed[:4] == b"\x89PNG" and rng.random() < 0.6:
        data = fix_png(data)
    return data


_COMBOS = [(c, r, rgb) for c in (3, 1, -1) for r in (1, 2, 4) for rgb in (False, True)]


def run_image(data: bytes) -> str:
    errors = []
    size = headers.image_size(data)  # never raises
    check(size is None or (len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)),
          f"image_size gave {size!r}", "header-size")
    header = headers.jpeg_header(data)
    pixels, err = attempt(image.decode, data, max_pixels=LIMIT)
    errors.append(err)
    _within(pixels, "decode")
    if size is not None and pixels is not None:  # the size checked is the size decoded (else a bomb gets past)
        check((pixels.shape[1], pixels.shape[0]) in {size, size[::-1]},
              f"an image whose header says {size} decoded to {pixels.shape}", "header-disagrees")
    pick = zlib.crc32(data)
    for channels, reduction, rgb in (_COMBOS[pick % len(_COMBOS)], _COMBOS[(pick >> 8) % len(_COMBOS)]):
        whole, err = attempt(decoding.decode_channels, data, channels, rgb, reduction, max_pixels=LIMIT)
        errors.append(err)
        _within(whole, "decode_channels")
        if header is None or channels == -1 or header[2] != 1:  # regions are for upright JPEGs only
            continue
        width, height = -(-header[0] // reduction), -(-header[1] // reduction)
        x, y = (pick >> 3) % max(1, width), (pick >> 11) % max(1, height)
        region = (x, y, max(1, min(width - x, 1 + (pick >> 17) % 48)), max(1, min(height - y, 1 + (pick >> 23) % 32)))
        part, err = attempt(decoding.decode_channels, data, channels, rgb, reduction, region, max_pixels=LIMIT)
        errors.append(err)
        _within(part, "decode_channels(region)")
        if part is None or whole is None:
            continue
        rx, ry, rw, rh = region
        if part.shape[:2] == (rh, rw) and part.shape[:2] != whole.shape[:2]:
            check(part.shape == whole[ry:ry + rh, rx:rx + rw].shape and np.array_equal(part, whole[ry:ry + rh, rx:rx + rw]),
                  f"region {region} of a {whole.shape} decode differs from the whole decode there", "region-differs")
        else:
            check(part.shape == whole.shape, f"region {region}: shape {part.shape}, whole {whole.shape}", "region-shape")
    if decoding._jpeg is not None and data[:2] == b"\xff\xd8":
        reduction = (1, 2, 4, 8)[pick % 4]
        x, y, w, h, mode = (pick >> 2) % 80, (pick >> 9) % 40, 1 + (pick >> 15) % 64, 1 + (pick >> 21) % 32, (pick >> 27) % 3
        try:
            answer = decoding._jpeg.decode(data, reduction, x, y, w, h, mode)
        except ValueError as exc:  # a bomb, refused by the C call's own pixel limit
            check("more than max_pixels" in str(exc), f"_jpeg.decode raised {exc}", "jpeg-value-error")
            answer = None
        if answer is not None:
            rows, first, row_width = answer
            check(first <= x and len(rows) == h * row_width * (1 if mode == 0 else 3),
                  f"_jpeg.decode gave {len(rows)} bytes, x0 {first}, row width {row_width} for {w}x{h} at ({x}, {y})",
                  "jpeg-rows")
    return outcome(errors)


def _within(pixels: np.ndarray | None, what: str) -> None:
    if pixels is not None:
        check(pixels.shape[0] * pixels.shape[1] <= LIMIT, f"{what} gave {pixels.shape} over max_pixels={LIMIT}",
              "over-limit")


TARGETS = [
    Target("image", "JPEG, PNG and every other format: decoders under a pixel limit, regions as whole decodes",
           image_seeds, image_mutate, run_image),
]
