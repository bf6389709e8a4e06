"""The on-disk layout of a picpac database (docs/format.md is the normative description).

This module knows bytes only: the header and its two commit slots, the record layout, the index
dtype, and how to find and check the committed state of an open file. Writer and Reader build on it.
"""
from __future__ import annotations

import functools
import json
import math
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptError, FormatError, VersionError

MAGIC = b"\x89PICPAC\n"
VERSION = 1
SHARD_INDEX_HEAD = b"# picpac shard index"
"""The first line of a shard index that picpac writes (file/shards.py), by which a reader names one."""

# magic, version, header size
FILE_HEAD = struct.Struct("<8sII")
# seq, commit offset, metadata size, index offset, record count, region crc32, slot crc32
SLOT = struct.Struct("<QQQQQII")
SLOT_OFFSETS = (FILE_HEAD.size, FILE_HEAD.size + SLOT.size)
HEADER_SIZE = FILE_HEAD.size + 2 * SLOT.size

# number of fields, reserved (0), meta size; then per field: field id, size
RECORD_HEAD = struct.Struct("<HHI")
FIELD_ENTRY_SIZE = 12
MAX_FIELDS = 0xFFFF
MAX_META_SIZE = 0xFFFFFFFF

INDEX_DTYPE = np.dtype(
    [
        ("offset", "<u8"),
        ("size", "<u8"),
        ("label", "<f8"),
        ("group", "<i8"),
        ("checksum", "<u4"),
        ("reserved", "<u4"),
    ]
)
INDEX_ALIGN = 8
NO_GROUP = -(2**63)
"""The ``group`` value stored for a record that has no group."""

_FIELD_TABLES = tuple(struct.Struct("<" + "IQ" * n) for n in range(33))  # the usual few fields: made once


@functools.lru_cache(maxsize=8)
def _wide_field_table(nfields: int) -> struct.Struct:
    return struct.Struct("<" + "IQ" * nfields)  # 64 B per field: a small cache, so memory stays bounded


def field_table(nfields: int) -> struct.Struct:
    """The struct of a record's field table with ``nfields`` (id, size) entries. A reader checks that the
    table fits in its record first: the struct takes about 5 times the table's bytes."""
    return _FIELD_TABLES[nfields] if nfields < len(_FIELD_TABLES) else _wide_field_table(nfields)


def load_json(data: Any, error: Callable[[str], Exception]) -> Any:
    """``json.loads`` of bytes read from a file; raises ``error(reason)`` when they are not valid JSON (too
    deeply nested JSON included, which json reports as RecursionError)."""
    try:
        return json.loads(bytes(data))
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer with too many digits
        reason = str(exc)
    raise error(reason)


def crc32(data: Any, crc: int = 0) -> int:
    return zlib.crc32(data, crc)


_BITS = np.arange(32, dtype=np.uint32)


def _apply(columns: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The GF(2)-linear map with these 32 columns (uint32) applied to each of ``values``."""
    bits = (values[..., None] >> _BITS) & np.uint32(1)
    return np.bitwise_xor.reduce(np.where(bits.astype(bool), columns, np.uint32(0)), axis=-1)


def crc32_powers(length: int, count: int) -> np.ndarray:
    """(count, 32) uint32: row j holds the columns of the linear map that ``zlib.crc32`` applies to a running
    CRC over ``j * length`` more bytes (``crc32(data, v) = map(v) ^ crc32(data, 0)`` for any such data).

    With it, :func:`crc32_joined` gives the CRC of records laid end to end from their own CRCs.
    """
    zeros = bytes(length)
    base = zlib.crc32(zeros)
    step = np.array([zlib.crc32(zeros, 1 << b) ^ base for b in range(32)], np.uint32)
    rows = np.empty((max(count, 1), 32), np.uint32)
    rows[0] = np.uint32(1) << _BITS
    for j in range(1, count):
        rows[j] = _apply(step, rows[j - 1])
    return rows


def crc32_joined(crcs: np.ndarray, powers: np.ndarray) -> int:
    """``zlib.crc32`` of n records of one length laid end to end, from their CRCs (``powers`` for that
    length, at least n rows): record i's CRC carried over the n - 1 - i records after it."""
    crcs = np.asarray(crcs, np.uint32)
    n = len(crcs)
    if not n:
        return 0
    bits = ((crcs[:, None] >> _BITS) & np.uint32(1)).astype(bool)
    carried = np.bitwise_xor.reduce(np.where(bits, powers[n - 1::-1], np.uint32(0)), axis=1)
    return int(np.bitwise_xor.reduce(carried))


@dataclass(frozen=True)
class Commit:
    """One committed state: where its metadata and index lie in the file."""

    seq: int
    offset: int
    meta_size: int
    index_offset: int
    count: int
    crc: int

    @property
    def end(self) -> int:
        """First byte after this commit's region (metadata, padding, index)."""
        return self.index_offset + self.count * INDEX_DTYPE.itemsize

    def pack(self) -> bytes:
        body = SLOT.pack(self.seq, self.offset, self.meta_size, self.index_offset, self.count, self.crc, 0)
        return body[:-4] + struct.pack("<I", crc32(body[:-4]))


EMPTY_COMMIT = Commit(0, 0, 0, 0, 0, 0)


def pack_header(slot_a: Commit, slot_b: Commit) -> bytes:
    return FILE_HEAD.pack(MAGIC, VERSION, HEADER_SIZE) + slot_a.pack() + slot_b.pack()


def unpack_slot(raw: bytes) -> Commit | None:
    """The commit in a slot, or None when the slot's own checksum fails."""
    *values, stored = SLOT.unpack(raw)
    if crc32(raw[:-4]) != stored:
        return None
    seq, offset, meta_size, index_offset, count, crc, = values
    return Commit(seq, offset, meta_size, index_offset, count, crc)


def index_offset_after(meta_end: int) -> int:
    return -(-meta_end // INDEX_ALIGN) * INDEX_ALIGN


@dataclass(frozen=True)
class HeaderState:
    """The parsed header: the newest valid commit and which slots are damaged."""

    current: Commit
    slot: int
    damaged_slots: tuple[int, ...]


def read_header(buf: Any, size: int, path: str) -> HeaderState:
    """Parse the header in ``buf`` (the first bytes of a file of ``size`` bytes)."""
    if size < len(MAGIC) or bytes(buf[:len(MAGIC)]) != MAGIC:
        named = str(path).endswith(".shards")
        if named or bytes(buf[:len(SHARD_INDEX_HEAD)]) == SHARD_INDEX_HEAD:
            raise FormatError(f"{path}: this is a picpac shard index (a text file naming the shards of one "
                              "dataset), not a database: ImageStream, picpac.file.shards.open_database and `picpac "
                              "info`, `verify`, `merge` and `split` read it" + ("" if named else " by a name ending "
                              "in .shards (rename it)") + "; give other tools one of its shards")
        raise FormatError(f"{path}: not a picpac database (bad magic bytes); "
                          "create one with picpac.Writer or `picpac import`")
    if size < HEADER_SIZE:
        raise CorruptError(f"{path}: truncated: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    _, version, header_size = FILE_HEAD.unpack_from(buf, 0)
    if version > VERSION:
        raise VersionError(f"{path}: written by picpac format version {version}, but this picpac "
                           f"reads up to version {VERSION}; upgrade picpac (pip install -U picpac)")
    if version != VERSION or header_size != HEADER_SIZE:
        raise CorruptError(f"{path}: damaged header (version {version}, header size {header_size})")
    slots = [unpack_slot(bytes(buf[o:o + SLOT.size])) for o in SLOT_OFFSETS]
    damaged = tuple(i for i, c in enumerate(slots) if c is None)
    valid = [(c.seq, i) for i, c in enumerate(slots) if c is not None]
    if not valid:
        raise CorruptError(f"{path}: both commit slots in the header are damaged; `picpac repair` recovers "
                           "the records of the newest commit the file still holds")
    seq, slot = max(valid)
    if seq == 0:
        why = " (the other slot is damaged)" if damaged else ""
        raise CorruptError(f"{path}: the database holds no committed state{why}; "
                           "it was never closed by its Writer")
    return HeaderState(slots[slot], slot, damaged)


def check_commit_bounds(commit: Commit, size: int, path: str) -> None:
    """CorruptError unless ``commit``'s region lies after the header and within a file of ``size`` bytes."""
    if commit.end > size or commit.offset + commit.meta_size > commit.index_offset or commit.offset < HEADER_SIZE:
        raise CorruptError(f"{path}: truncated or damaged: the committed index ends at byte {commit.end} "
                           f"but the file has {size} bytes; `picpac repair` recovers the records it still holds")


def read_commit(buf: Any, size: int, commit: Commit, path: str, base: int = 0) -> tuple[dict, np.ndarray]:
    """Check a commit's region and return its metadata and index (a view into ``buf``). ``buf`` holds the
    file's bytes from byte ``base`` on (the whole file, or for a remote one just the commit's region)."""
    check_commit_bounds(commit, size, path)
    region = memoryview(buf)[commit.offset - base:commit.end - base]
    try:
        if len(region) != commit.end - commit.offset or crc32(region) != commit.crc:
            raise CorruptError(f"{path}: the metadata/index region (bytes {commit.offset}-{commit.end}) "
                               "fails its checksum; `picpac repair` recovers the records of the newest intact commit")
    finally:
        region.release()
    metadata = load_json(buf[commit.offset - base:commit.offset - base + commit.meta_size],
                         lambda why: CorruptError(f"{path}: dataset metadata is not valid JSON: {why}"))
    if not isinstance(metadata, dict) or not _str_list(metadata.get("fields")):
        raise FormatError(f"{path}: dataset metadata lacks its field list (a list of str)")
    if len(set(metadata["fields"])) != len(metadata["fields"]):
        raise FormatError(f"{path}: dataset metadata names a field twice in its field list")
    if metadata.get("classes") is not None and not _str_list(metadata["classes"]):
        raise FormatError(f"{path}: dataset metadata 'classes' is not a list of str")
    index = np.frombuffer(buf, INDEX_DTYPE, commit.count, commit.index_offset - base)
    return metadata, index


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# -- array fields ---------------------------------------------------------------------------------
ARRAYS_KEY = "arrays"
"""Dataset metadata key declaring fixed-shape array fields: ``{"image": {"shape": [32, 32, 3], "dtype": "uint8"}}``."""
MAX_ARRAY_DIMS = 32
MAX_ARRAY_BYTES = 2**48
"""The largest array a declaration may describe (a Reader also bounds it by its largest record)."""


@dataclass(frozen=True)
class ArraySpec:
    """A field whose every value is the raw bytes (C order, little-endian) of one array of this shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        name = self.dtype.name if self.dtype.byteorder in "<|=" else self.dtype.str
        return {"shape": list(self.shape), "dtype": name}

    def __str__(self) -> str:
        return f"{'x'.join(map(str, self.shape))} {self.dtype.name}"


def array_dtype(value: Any) -> np.dtype:
    """A plain numeric dtype, little-endian unless the name says otherwise; ValueError if not numeric."""
    if not isinstance(value, (str, type, np.dtype)) or (isinstance(value, str) and len(value) > 32):
        raise ValueError(f"dtype {value!r:.40} is not the name of a plain numeric type")
    dtype = np.dtype(value)
    if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"dtype {dtype} is not a plain numeric type (bool, int, uint, float)")
    return dtype.newbyteorder("<") if dtype.byteorder == "=" else dtype


def parse_arrays(metadata: Any, where: str, error: type[Exception] = FormatError,
                 limit: int = MAX_ARRAY_BYTES) -> dict[str, ArraySpec]:
    """The array fields declared in dataset metadata (``{}`` when none); ``error`` names a bad declaration,
    an array of more than ``limit`` bytes or :data:`MAX_ARRAY_DIMS` dimensions included."""
    declared = metadata.get(ARRAYS_KEY) if isinstance(metadata, dict) else None
    if declared is None:
        return {}
    if not isinstance(declared, dict):
        raise error(f"{where}: metadata '{ARRAYS_KEY}' must map field names to {{'shape': [...], 'dtype': ...}}, "
                    f"got {declared!r:.200}")
    specs = {}
    for name, spec in declared.items():
        bad = f"{where}: metadata '{ARRAYS_KEY}' field {name!r:.100}"
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if not (isinstance(shape, list) and 0 < len(shape) <= MAX_ARRAY_DIMS and all(
                isinstance(s, int) and not isinstance(s, bool) and 0 < s <= MAX_ARRAY_BYTES for s in shape)):
            raise error(f"{bad} needs a 'shape' of 1 to {MAX_ARRAY_DIMS} positive ints (each at most 2**48), "
                        f"got {spec!r:.200}")
        try:
            dtype = array_dtype(spec.get("dtype"))
        except (TypeError, ValueError) as exc:
            raise error(f"{bad} has a bad 'dtype': {exc}") from None
        specs[name] = ArraySpec(tuple(shape), dtype)
        if specs[name].nbytes > limit:  # exact: Python ints
            raise error(f"{bad} declares {specs[name]} arrays of {specs[name].nbytes} bytes, more than {limit}")
    return specs
