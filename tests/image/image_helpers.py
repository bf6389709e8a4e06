"""Helpers of the image layer's tests: JPEGs with EXIF segments where a test wants them."""
from __future__ import annotations

import struct


def exif(orientation: int | None, order: str = "<") -> bytes:
    """An APP1 EXIF segment whose first IFD holds Orientation (or, with None, only another tag)."""
    tag = 0x0112 if orientation is not None else 0x010F
    tiff = ((b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8) + struct.pack(order + "H", 1)
            + struct.pack(order + "HHIHH", tag, 3, 1, orientation or 0, 0) + struct.pack(order + "I", 0))
    body = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def with_segment(jpeg: bytes, segment: bytes) -> bytes:
    """``segment`` put right after the JPEG's SOI."""
    return jpeg[:2] + segment + jpeg[2:]


def after_frame(jpeg: bytes, segment: bytes) -> bytes:
    """``segment`` put right after the JPEG's frame header (SOF0), before its first scan."""
    at = jpeg.index(b"\xff\xc0")
    end = at + 2 + struct.unpack(">H", jpeg[at + 2:at + 4])[0]
    return jpeg[:end] + segment + jpeg[end:]
