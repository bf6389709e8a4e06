"""Recovery frames: what lets `picpac repair` keep the records of a truncated file (docs/format.md, "Recovery
frames").

A record's label, group and checksum live only in the index, which a commit writes after the records;
the field names live only in the metadata beside it. A file cut short (an interrupted copy or download)
keeps its records but loses both. So before each record the Writer writes a record frame, 40 bytes
holding the record's size, label, group and CRC, and before the first record (and the first record
with a new field) a metadata frame holding the dataset metadata as a commit would write it. Each frame
is checked by its own CRC. Readers never see frames: they follow the index, which skips them.

Databases that declare array fields (metadata ``arrays``) get no frames: their records stay back to
back, which the stream's batch path reads as one array (``Reader.stride``).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .layout import ARRAYS_KEY, crc32, load_json

RECORD_MAGIC = b"\x89PICREC\n"
METADATA_MAGIC = b"\x89PICMET\n"
# magic, record size, label, group, the record's CRC32, the CRC32 of the frame's 36 bytes before it
RECORD_FRAME = struct.Struct("<8sQdqII")
RECORD_FRAME_DTYPE = np.dtype([("magic", "S8"), ("size", "<u8"), ("label", "<f8"), ("group", "<i8"),
                               ("checksum", "<u4"), ("crc", "<u4")])
"""RECORD_FRAME as a NumPy record, to read the frames of many records at once."""
assert RECORD_FRAME_DTYPE.itemsize == RECORD_FRAME.size
# magic, metadata size, the metadata's CRC32, the CRC32 of the frame's 20 bytes before it; the metadata follows
METADATA_FRAME = struct.Struct("<8sQII")
MAX_METADATA = 256 << 20
"""Dataset metadata larger than this is not looked for by `picpac repair` (in a frame or a commit region)."""


@dataclass(frozen=True)
class RecordFrame:
    """What a record frame says of the record right after it."""

    size: int
    label: float
    group: int
    checksum: int


def framed(metadata: dict[str, Any]) -> bool:
    """Whether a database with this metadata gets frames: all but those declaring array fields."""
    return ARRAYS_KEY not in metadata


def record_frame(size: int, label: float, group: int, checksum: int) -> bytes:
    body = RECORD_FRAME.pack(RECORD_MAGIC, size, label, group, checksum, 0)[:-4]
    return body + struct.pack("<I", crc32(body))


def metadata_frame(metadata: bytes) -> bytes:
    """The frame of the dataset metadata's JSON bytes, followed by them."""
    body = METADATA_FRAME.pack(METADATA_MAGIC, len(metadata), crc32(metadata), 0)[:-4]
    return body + struct.pack("<I", crc32(body)) + metadata


def read_record_frame(buf: Any, position: int, size: int) -> RecordFrame | None:
    """The record frame at ``position`` of ``buf`` (``size`` bytes), None unless one is there, intact."""
    end = position + RECORD_FRAME.size
    if end > size or bytes(buf[position:position + len(RECORD_MAGIC)]) != RECORD_MAGIC:
        return None
    _, length, label, group, checksum, stored = RECORD_FRAME.unpack_from(buf, position)
    if crc32(buf[position:end - 4]) != stored:
        return None
    return RecordFrame(length, label, group, checksum)


def read_metadata_frame(buf: Any, position: int, size: int) -> tuple[dict, int] | None:
    """The metadata of the metadata frame at ``position`` and the frame's length (metadata included), None
    unless an intact one is there whose metadata is a JSON object naming its fields."""
    start = position + METADATA_FRAME.size
    if start > size or bytes(buf[position:position + len(METADATA_MAGIC)]) != METADATA_MAGIC:
        return None
    _, length, checksum, stored = METADATA_FRAME.unpack_from(buf, position)
    if crc32(buf[position:start - 4]) != stored or length > min(MAX_METADATA, size - start) \
            or crc32(buf[start:start + length]) != checksum:
        return None
    try:
        metadata = load_json(buf[start:start + length], ValueError)
    except ValueError:
        return None
    fields = metadata.get("fields") if isinstance(metadata, dict) else None
    if not (isinstance(fields, list) and all(isinstance(f, str) for f in fields)):
        return None
    return metadata, METADATA_FRAME.size + length


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """The dataset metadata's JSON as a commit (and a metadata frame) stores it."""
    return json.dumps(metadata, separators=(",", ":")).encode()
