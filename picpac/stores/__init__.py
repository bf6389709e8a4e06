"""Other storage formats: a small reader and writer per format over picpac's record model.

A record is what a picpac database holds: named bytes fields, a float label, an optional int group
and a small JSON meta (:class:`picpac.Record`). Each format here stores exactly that, plus the
dataset metadata (fields, classes, ...), so picpac -> format -> picpac keeps every byte. The layouts
are described in docs/stores.md:

* ``lmdb``: keys ``%010d`` -> the record serialised as PPR1 (:func:`encode_record`); key
  ``__picpac__`` holds the store's description and the dataset metadata. Needs ``lmdb``.
* ``tfrecord``: TFRecord framing (lengths and data with masked CRC32C) of ``tf.train.Example``
  protobufs, encoded and decoded here without TensorFlow.
* ``hdf5``: one variable-length uint8 dataset per field, label/group arrays, meta strings; read
  lazily, record by record. Needs ``h5py``.
* ``npz``: an uncompressed ``.npz`` of plain arrays (each field's bytes joined, plus offsets), read
  through a memory map.
* ``sqlite``: one table, one BLOB column per field, the record number as primary key.
* ``tar``: WebDataset-style members ``%06d.<field>``, ``.cls`` label, ``.json`` meta.
* ``binary``: a data file of PPR1 records and a ``.idx`` NumPy file of their offsets.

This module sits in the sources layer: it imports the file format layer and the standard library
(and lmdb / h5py lazily, inside the functions that need them).
"""
from __future__ import annotations

import functools
import io
import json
import math
import mmap
import numbers
import os
import re
import secrets
import shutil
import sqlite3
import struct
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import (CorruptError, FormatError, MissingPathError, PicPacError, PicPacTypeError,
                     PicPacValueError)
from ..file.layout import NO_GROUP
from ..file.reader import Reader, Record
from ..file.writer import Writer, _as_bytes

KINDS = ("lmdb", "tfrecord", "hdf5", "npz", "sqlite", "tar", "binary")
"""The store formats, as ``picpac import --from`` and ``picpac export --to`` name them."""


class MissingPackageError(PicPacError, ImportError):
    """A format needs an optional package (``pip install picpac[formats]``)."""


def _require(module: str, kind: str):
    try:
        return __import__(module)
    except ImportError:
        raise MissingPackageError(f"the {kind} format needs the {module!r} package: "
                                  "pip install picpac[formats]") from None


def _corrupt(path: str, index: int, reason: str) -> CorruptError:
    error = CorruptError(f"{path}: record {index} {reason}")
    error.path, error.index, error.reason = path, index, reason
    return error


# ------------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), for TFRecord framing
# ------------------------------------------------------------------------------------------------
_CRC32C_POLY = 0x82F63B78  # reflected


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()
_TABLE_NP = np.array(_TABLE, np.uint32)
_ROW = 32  # bytes per row of the NumPy version: many rows are advanced at once, then joined


def crc32c_python(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` continuing ``crc``: a byte at a time (for short inputs)."""
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


@functools.lru_cache(maxsize=None)
def _shift_columns(log2: int) -> tuple[int, ...]:
    """The 32 columns of the linear map that advances a raw CRC register over 2**log2 zero bytes."""
    if log2 == 0:
        return tuple(_TABLE[(1 << b) & 0xFF] ^ ((1 << b) >> 8) for b in range(32))
    half = _shift_columns(log2 - 1)

    def apply(v: int) -> int:
        out, bit = 0, 0
        while v:
            if v & 1:
                out ^= half[bit]
            v >>= 1
            bit += 1
        return out

    return tuple(apply(c) for c in half)


@functools.lru_cache(maxsize=None)
def _shift_tables(log2: int) -> np.ndarray:
    """(4, 256) uint32: the map of :func:`_shift_columns` applied to each byte of a register."""
    columns = np.array(_shift_columns(log2), np.uint32)
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)
    return np.stack([np.bitwise_xor.reduce(np.where(bits, columns[8 * k:8 * k + 8], np.uint32(0)), axis=1)
                     for k in range(4)])


def crc32c_numpy(data: Any, crc: int = 0) -> int:
    """CRC32C of ``data`` continuing ``crc``, vectorised with NumPy (about 270 MB/s on one core here).

    The bytes are cut into rows of 32 (zero-padded in front, which leaves a CRC register of 0 at 0),
    every row's register is advanced together, then pairs of rows are joined (the left one advanced
    over the right one's length by a table of the linear map) until one remains. The initial value
    enters as the first four bytes XORed with it.
    """
    buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    n = len(buf)
    if n < 8 * _ROW:
        return crc32c_python(buf, crc)
    rows = -(-n // _ROW)
    padded = np.zeros(rows * _ROW, np.uint8)
    start = rows * _ROW - n
    padded[start:] = buf
    padded[start:start + 4] ^= np.frombuffer((crc ^ 0xFFFFFFFF).to_bytes(4, "little"), np.uint8)
    columns = padded.reshape(rows, _ROW).T.copy()
    state = np.zeros(rows, np.uint32)
    table = _TABLE_NP
    for j in range(_ROW):
        state = table[(state ^ columns[j]) & 0xFF] ^ (state >> 8)
    level = _ROW.bit_length() - 1
    while len(state) > 1:
        if len(state) & 1:  # a leading zero row changes nothing
            state = np.concatenate((np.zeros(1, np.uint32), state))
        left, right = state[0::2], state[1::2]
        t = _shift_tables(level)
        state = t[0][left & 0xFF] ^ t[1][(left >> 8) & 0xFF] ^ t[2][(left >> 16) & 0xFF] ^ t[3][left >> 24] ^ right
        level += 1
    return int(state[0]) ^ 0xFFFFFFFF


def _google_crc32c():
    try:
        import google_crc32c
    except ImportError:
        return None
    return google_crc32c if google_crc32c.implementation == "c" else None


_GOOGLE = _google_crc32c()
CRC32C_IMPLEMENTATION = "google-crc32c" if _GOOGLE is not None else "numpy"
"""Which CRC32C :func:`crc32c` uses: google-crc32c's C code when installed, else :func:`crc32c_numpy`."""


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing ``crc``."""
    if _GOOGLE is not None and CRC32C_IMPLEMENTATION == "google-crc32c":
        # its argument parser takes bytes and arrays but not memoryviews: an array view, no copy
        return _GOOGLE.extend(crc, data if isinstance(data, bytes) else np.frombuffer(data, np.uint8))
    if len(data) < 8 * _ROW:
        return crc32c_python(data, crc)
    return crc32c_numpy(data, crc)


def masked_crc32c(data: Any) -> int:
    """TFRecord's masked CRC32C: the CRC rotated right by 15 bits plus 0xa282ead8."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------------
# PPR1: one record as a self-describing byte string (LMDB values, binary data files)
# ------------------------------------------------------------------------------------------------
PPR_MAGIC = b"PPR1"
# magic, CRC32 of bytes 8.., number of fields, reserved (0), meta size, label, group (NO_GROUP: none)
_PPR_HEAD = struct.Struct("<4sIHHIdq")
_PPR_FIELD = 10  # per field: u16 name size, u64 data size


def _ppr_table(n: int) -> struct.Struct:
    return struct.Struct("<" + "HQ" * n)


def encode_record(fields: Mapping[str, Any], label: float = 0.0, group: int | None = None,
                  meta: bytes = b"") -> bytes:
    """One record as PPR1 bytes (docs/stores.md): a 32-byte head (magic ``PPR1``, CRC32 of the rest,
    field count, meta size, label, group), a (name size, data size) entry per field, the names, the
    meta JSON and the fields' bytes, all little-endian. :func:`decode_record` reads it back."""
    names = [name.encode() for name in fields]
    views = [_as_bytes(name, value) for name, value in fields.items()]
    table = _ppr_table(len(views)).pack(*[x for name, view in zip(names, views) for x in (len(name), view.nbytes)])
    body = struct.pack("<HHIdq", len(views), 0, len(meta), float(label), NO_GROUP if group is None else group)
    rest = b"".join([body, table, *names, meta, *views])
    return PPR_MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest


def decode_record(data: Any, path: str = "<record>", index: int = 0, check: bool = True
                  ) -> tuple[dict[str, memoryview], float, int | None, memoryview]:
    """(fields, label, group, meta JSON bytes) of PPR1 ``data``; fields are zero-copy views of it.
    A wrong magic, CRC or layout raises CorruptError naming ``path`` and ``index``."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    if len(view) < _PPR_HEAD.size:
        raise _corrupt(path, index, f"is truncated ({len(view)} bytes, a PPR1 record has at least {_PPR_HEAD.size})")
    magic, crc, n, _, meta_size, label, group = _PPR_HEAD.unpack_from(view)
    if magic != PPR_MAGIC:
        raise _corrupt(path, index, f"is not a PPR1 record (starts with {bytes(magic)!r})")
    if check and zlib.crc32(view[8:]) != crc:
        raise _corrupt(path, index, "fails its CRC32 (damaged bytes)")
    try:
        table = _ppr_table(n).unpack_from(view, _PPR_HEAD.size)
        pos = _PPR_HEAD.size + _PPR_FIELD * n
        names = []
        for k in range(0, 2 * n, 2):
            names.append(bytes(view[pos:pos + table[k]]).decode())
            pos += table[k]
        meta = view[pos:pos + meta_size]
        pos += meta_size
        fields = {}
        for k, name in enumerate(names):
            end = pos + table[2 * k + 1]
            fields[name] = view[pos:end]
            pos = end
    except (struct.error, UnicodeDecodeError) as exc:
        raise _corrupt(path, index, f"has a damaged PPR1 layout ({exc})") from None
    if pos != len(view):
        raise _corrupt(path, index, f"has a damaged PPR1 layout (fields end at {pos}, record size {len(view)})")
    return fields, label, None if group == NO_GROUP else group, meta


# ------------------------------------------------------------------------------------------------
# tf.train.Example, encoded and decoded by hand (protobuf wire format)
# ------------------------------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: Mapping[str, tuple[str, list]]) -> bytes:
    """A ``tf.train.Example`` from ``{name: (kind, values)}``, kind ``"bytes"``, ``"float"`` or ``"int64"``;
    float and int64 lists are packed, as TensorFlow writes them."""
    entries = []
    for name, (kind, values) in features.items():
        if kind == "bytes":
            body = _delimited(1, b"".join(_delimited(1, bytes(v)) for v in values))
        elif kind == "float":
            body = _delimited(2, _delimited(1, struct.pack(f"<{len(values)}f", *values)) if values else b"")
        elif kind == "int64":
            body = _delimited(3, _delimited(1, b"".join(map(_varint, values))) if values else b"")
        else:
            raise PicPacValueError(f"feature {name!r}: kind must be bytes, float or int64, got {kind!r}")
        entries.append(_delimited(1, _delimited(1, name.encode()) + _delimited(2, body)))
    return _delimited(1, b"".join(entries))


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint at ``pos``: its value and the position after it."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields_of(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: varints as int, length-delimited as views,
    fixed32/64 as views of 4/8 bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > end:
                raise ValueError("a length-delimited field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ValueError("a fixed-size field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} is not used by tf.train.Example")
        yield number, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_example(data: Any) -> dict[str, tuple[str, list]]:
    """``{name: (kind, values)}`` of a serialised ``tf.train.Example`` (bytes values as zero-copy views).

    Accepts packed and unpacked numeric lists and skips unknown fields, as protobuf parsers do.
    Raises ValueError on a malformed message."""
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    try:
        return _decode_example(buf)
    except (IndexError, struct.error) as exc:
        raise ValueError(f"truncated message ({exc})") from None


def _decode_example(buf: memoryview) -> dict[str, tuple[str, list]]:
    features: dict[str, tuple[str, list]] = {}
    for number, wire, message in _fields_of(buf):
        if number != 1 or wire != 2:
            continue  # Example: only field 1 (features)
        for n1, w1, entry in _fields_of(message):
            if n1 != 1 or w1 != 2:
                continue  # Features: field 1 is the map<string, Feature>
            name, feature = "", None
            for n2, w2, value in _fields_of(entry):
                if n2 == 1 and w2 == 2:
                    name = bytes(value).decode()
                elif n2 == 2 and w2 == 2:
                    feature = value
            kind, values = "bytes", []
            for n3, w3, lst in _fields_of(feature if feature is not None else memoryview(b"")):
                if w3 != 2 or n3 not in (1, 2, 3):
                    continue
                kind, values = {1: "bytes", 2: "float", 3: "int64"}[n3], []  # oneof: the last one counts
                for n4, w4, value in _fields_of(lst):
                    if n4 != 1:
                        continue
                    if kind == "bytes" and w4 == 2:
                        values.append(value)
                    elif kind == "float" and w4 == 2:
                        values.extend(struct.unpack(f"<{len(value) // 4}f", value))
                    elif kind == "float" and w4 == 5:
                        values.append(struct.unpack("<f", value)[0])
                    elif kind == "int64" and w4 == 2:
                        pos = 0
                        while pos < len(value):
                            v, pos = read_varint(value, pos)
                            values.append(_signed64(v))
                    elif kind == "int64" and w4 == 0:
                        values.append(_signed64(value))
            features[name] = (kind, values)
    return features


# ------------------------------------------------------------------------------------------------
# Readers and writers: the common part
# ------------------------------------------------------------------------------------------------
def _check_metadata(metadata: Mapping[str, Any] | None) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise PicPacTypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    if "fields" in metadata:
        raise PicPacValueError("metadata key 'fields' is managed by the writer; do not set it")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise PicPacTypeError(f"metadata must be JSON-serialisable: {exc}") from None
    return dict(metadata)


def _label_value(label: Any) -> float:
    if not isinstance(label, numbers.Real):
        raise PicPacTypeError(f"label must be a number, got {type(label).__name__}")
    return float(label)


class StoreWriter:
    """Writes records to one store, like :class:`picpac.Writer`: ``append(image=..., label=...)``.

    The store is built beside ``path`` and moved to ``path`` by :meth:`close` (replacing what was
    there); leaving a ``with`` block by an exception, or :meth:`abort`, leaves ``path`` untouched.
    """

    kind = ""
    reserved: frozenset[str] = frozenset()
    directory = False

    def __init__(self, path: str | os.PathLike, *, metadata: Mapping[str, Any] | None = None):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise MissingPathError(f"{self.path}: directory {parent} does not exist")
        self._metadata = _check_metadata(metadata)
        self._fields: list[str] = []
        self._count = 0
        self._temp = os.path.join(parent, f".{os.path.basename(self.path)}.{os.getpid()}-{secrets.token_hex(4)}"
                                          ".picpac-tmp")
        self._open = True
        try:
            self._start()
        except BaseException:
            self._discard()
            raise

    @property
    def metadata(self) -> dict:
        """The dataset metadata the store gets: the one given, plus ``fields`` in order of first use."""
        return {"fields": list(self._fields), **self._metadata}

    def __len__(self) -> int:
        return self._count

    def append(self, fields: Mapping[str, Any] | None = None, /, *, label: float = 0.0,
               group: int | None = None, meta: Mapping[str, Any] | None = None, **named_fields: Any) -> int:
        """Add one record (as :meth:`picpac.Writer.append`) and return its index."""
        if not self._open:
            raise PicPacError(f"{self.path}: the {self.kind} writer is closed")
        items = dict(fields or {}, **named_fields)
        if not items:
            raise PicPacValueError("a record needs at least one field, e.g. append(image=jpeg_bytes)")
        views = {}
        for name, value in items.items():
            if not isinstance(name, str) or not name:
                raise PicPacTypeError(f"field names must be non-empty str, got {name!r}")
            if name not in self._fields:
                self._check_name(name)
                self._fields.append(name)
            views[name] = _as_bytes(name, value)
        label = _label_value(label)
        Writer._check_group(group)
        meta_bytes = Writer._encode_meta(meta or None)
        self._write(self._count, views, label, group, meta_bytes)
        self._count += 1
        return self._count - 1

    def _check_name(self, name: str) -> None:
        if name in self.reserved:
            raise PicPacValueError(f"{self.path}: field name {name!r} is reserved in the {self.kind} format "
                                   f"({', '.join(sorted(self.reserved))}); rename the field")

    def close(self) -> None:
        """Finish the store and move it to ``path``. Closing twice is harmless."""
        if not self._open:
            return
        self._open = False
        try:
            self._finish()
            self._replace(self._temp, self.path)
        except BaseException:
            self._discard()
            raise

    def abort(self) -> None:
        """Drop everything written; ``path`` is left as it was."""
        if self._open:
            self._open = False
            self._discard()

    def _replace(self, temp: str, path: str) -> None:
        if self.directory and os.path.lexists(path):
            _remove_store(path, self.kind)
        os.replace(temp, path)

    def _discard(self) -> None:
        try:
            self._release()
        finally:
            for temp in self._temps():
                if os.path.isdir(temp) and not os.path.islink(temp):
                    shutil.rmtree(temp, ignore_errors=True)
                elif os.path.lexists(temp):
                    os.unlink(temp)

    def _temps(self) -> list[str]:
        return [self._temp]

    # the format's part
    def _start(self) -> None:
        raise NotImplementedError

    def _write(self, index: int, fields: dict[str, memoryview], label: float, group: int | None,
               meta: bytes) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """Close open handles (on abort)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_open", False):
            self.abort()


def _remove_store(path: str, kind: str) -> None:
    """Remove an existing store directory that a new one replaces: only one that looks like the format's."""
    if os.path.isdir(path) and not os.path.islink(path):
        names = set(os.listdir(path))
        if kind == "lmdb" and names <= {"data.mdb", "lock.mdb"}:
            shutil.rmtree(path)
            return
        raise PicPacValueError(f"{path}: is a directory that is not an {kind} store; not replacing it")
    os.unlink(path)


class StoreReader:
    """Reads one store: ``len(r)``, ``r[i]`` (a :class:`picpac.Record`), iteration, ``r.metadata``.

    Records are read one at a time on demand. A reader may be used in forked worker processes (a
    child reopens the file handles the format's library cannot share) and is pickled by its path.
    """

    kind = ""

    def __init__(self, path: str | os.PathLike, *, check: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        self.check = check
        if not os.path.exists(self.path):
            raise MissingPathError(f"{self.path}: no such {self.kind} store")
        self.metadata: dict[str, Any] = {}
        self._count = 0
        self._pid = os.getpid()
        self._closed = False
        self._inherited: list[Any] = []  # handles from the parent of a fork: kept, never closed here
        try:
            self._open()
        except BaseException:
            self._close()
            raise

    @property
    def fields(self) -> list[str]:
        return list(self.metadata.get("fields") or [])

    @property
    def classes(self) -> list[str]:
        return list(self.metadata.get("classes") or [])

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> Record:
        if self._closed:
            raise PicPacError(f"{self.path}: the {self.kind} reader is closed")
        try:
            i = i.__index__()
        except AttributeError:
            raise PicPacTypeError(f"record index must be an int, got {type(i).__name__}") from None
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"record {i} out of range for {self.path} with {self._count} records")
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._after_fork()
        return self._read(i)

    def __iter__(self) -> Iterator[Record]:
        for i in range(self._count):
            yield self[i]

    def _record(self, i: int, fields: dict, label: float, group: int | None, meta: Any) -> Record:
        return Record(i, label, group, fields, meta if isinstance(meta, (memoryview, dict)) else memoryview(meta))

    def _ordered(self, fields: dict) -> dict:
        order = self.metadata.get("fields")
        if not order or list(fields) == order[:len(fields)]:
            return fields
        return {name: fields[name] for name in order if name in fields} | fields

    # the format's part
    def _open(self) -> None:
        raise NotImplementedError

    def _read(self, i: int) -> Record:
        raise NotImplementedError

    def _after_fork(self) -> None:
        """In a forked child: reopen what the library cannot share with the parent."""

    def _close(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self):
        return _reopen, (self.path, self.kind, self.check)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, records={self._count}, fields={self.fields})"


class _MappedReader(StoreReader):
    """A reader over one memory-mapped file (inherited as is by forked children)."""

    def _map(self, path: str) -> memoryview:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except IsADirectoryError:
            raise FormatError(f"{path}: is a directory, not a {self.kind} file") from None
        self._view = memoryview(self._mmap) if self._mmap is not None else memoryview(b"")
        return self._view

    def _close(self) -> None:
        view = getattr(self, "_view", None)
        if view is not None:
            view.release()
        mm = getattr(self, "_mmap", None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # records still referenced keep the mapping alive


# ------------------------------------------------------------------------------------------------
# LMDB
# ------------------------------------------------------------------------------------------------
LMDB_META_KEY = b"__picpac__"


def _lmdb_key(i: int) -> bytes:
    return b"%010d" % i


class LmdbWriter(StoreWriter):
    """LMDB environment (a directory with ``data.mdb``): key ``%010d`` -> PPR1 record."""

    kind = "lmdb"
    directory = True
    _BATCH_BYTES = 64 << 20
    _MAP_SIZE = 1 << 30  # the first map size; doubled whenever the map is full

    def _start(self) -> None:
        lmdb = _require("lmdb", "lmdb")
        self._lmdb = lmdb
        self._map_size = self._MAP_SIZE
        self._env = lmdb.open(self._temp, map_size=self._map_size, subdir=True, lock=False, sync=False,
                              metasync=False, meminit=False)
        self._batch: list[tuple[bytes, bytes]] = []
        self._batch_bytes = 0

    def _write(self, index, fields, label, group, meta) -> None:
        value = encode_record(fields, label, group, meta)
        self._batch.append((_lmdb_key(index), value))
        self._batch_bytes += len(value)
        if self._batch_bytes >= self._BATCH_BYTES or len(self._batch) >= 4096:
            self._flush()

    def _flush(self) -> None:
        while self._batch:
            try:
                with self._env.begin(write=True) as txn:
                    for key, value in self._batch:
                        txn.put(key, value, append=True)
            except self._lmdb.MapFullError:
                self._map_size *= 2
                self._env.set_mapsize(self._map_size)
                continue
            self._batch, self._batch_bytes = [], 0

    def _finish(self) -> None:
        meta = {"store": "picpac-lmdb", "version": 1, "serialisation": "PPR1", "key": "%010d",
                "count": self._count, "metadata": self.metadata}
        self._batch.append((LMDB_META_KEY, json.dumps(meta).encode()))
        self._flush()
        self._env.sync(True)
        self._env.close()

    def _release(self) -> None:
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()


_LMDB_ENVS: dict[str, list] = {}
"""Open read-only environments by real path: [environment, readers using it, pid]. py-lmdb allows one
environment per path and process, so readers of one store share it."""


def _lmdb_env(path: str):
    lmdb = _require("lmdb", "lmdb")
    key = os.path.realpath(path)
    entry = _LMDB_ENVS.get(key)
    if entry is not None and entry[2] != os.getpid():
        # inherited from the parent of a fork: LMDB environments must not cross a fork, so the child
        # closes its copy (the parent's stays open) and opens its own
        try:
            entry[0].close()
        except lmdb.Error:
            pass
        del _LMDB_ENVS[key]
        entry = None
    if entry is None:
        try:
            env = lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path), max_readers=1024)
        except lmdb.Error as exc:
            raise FormatError(f"{path}: not an LMDB store ({exc})") from None
        # a page past the end of a truncated file would be a SIGBUS when mapped: check the size first
        data = os.path.join(path, "data.mdb") if os.path.isdir(path) else path
        needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        if os.path.getsize(data) < needed:
            env.close()
            raise CorruptError(f"{path}: truncated LMDB store ({data} has {os.path.getsize(data):,} bytes, "
                               f"its pages need {needed:,})")
        entry = _LMDB_ENVS[key] = [env, 0, os.getpid()]
    entry[1] += 1
    return entry[0]


def _lmdb_release(path: str) -> None:
    key = os.path.realpath(path)
    entry = _LMDB_ENVS.get(key)
    if entry is not None and entry[2] == os.getpid():
        entry[1] -= 1
        if entry[1] <= 0:
            del _LMDB_ENVS[key]
            entry[0].close()


class LmdbReader(StoreReader):
    kind = "lmdb"

    def _open(self) -> None:
        self._env = _lmdb_env(self.path)
        self._txn = self._env.begin(buffers=False)
        raw = self._txn.get(LMDB_META_KEY)
        if raw is None:
            raise FormatError(f"{self.path}: an LMDB store without the {LMDB_META_KEY.decode()} key; "
                              "not written by picpac (picpac export --to lmdb)")
        try:
            info = json.loads(raw)
            self.metadata, self._count = info["metadata"], int(info["count"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptError(f"{self.path}: damaged {LMDB_META_KEY.decode()} entry ({exc})") from None
        if info.get("serialisation") != "PPR1":
            raise FormatError(f"{self.path}: records serialised as {info.get('serialisation')!r}; "
                              "this picpac reads PPR1")

    def _read(self, i: int) -> Record:
        value = self._txn.get(_lmdb_key(i))
        if value is None:
            raise _corrupt(self.path, i, f"is missing (no key {_lmdb_key(i).decode()})")
        fields, label, group, meta = decode_record(value, self.path, i, self.check)
        return self._record(i, fields, label, group, meta)

    def _after_fork(self) -> None:
        self._txn = self._env = None
        self._open()

    def _close(self) -> None:
        if getattr(self, "_env", None) is not None:
            self._txn = self._env = None
            _lmdb_release(self.path)


# ------------------------------------------------------------------------------------------------
# TFRecord
# ------------------------------------------------------------------------------------------------
_TF_PREFIX = "picpac/"
_TF_LABEL, _TF_GROUP, _TF_META, _TF_DATASET = "picpac/label", "picpac/group", "picpac/meta", "picpac/dataset"


def tfrecord_frame(data: Any) -> bytes:
    """One TFRecord: u64 length, masked CRC32C of the length, the data, masked CRC32C of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + bytes(data) + struct.pack("<I", masked_crc32c(data))


def _label_feature(label: float) -> tuple[str, list]:
    """int64 for a whole number (a class id), float when float32 holds it exactly, else the double's bytes."""
    if label.is_integer() and -2**63 <= label < 2**63 and math.copysign(1.0, label) > 0:
        return "int64", [int(label)]
    with np.errstate(over="ignore"):
        if float(np.float32(label)) == label:
            return "float", [label]
    return "bytes", [struct.pack("<d", label)]


class TFRecordWriter(StoreWriter):
    """TFRecord file of ``tf.train.Example``s: one bytes feature per field, ``picpac/label`` (int64 when the
    label is a whole number, float when float32 holds it exactly, else its 8 bytes as a double),
    ``picpac/group`` (int64), ``picpac/meta`` (JSON bytes); the last example also holds the dataset
    metadata as ``picpac/dataset`` (a store of no records: one example holding only that)."""

    kind = "tfrecord"

    def _check_name(self, name: str) -> None:
        if name.startswith(_TF_PREFIX):
            raise PicPacValueError(f"{self.path}: field name {name!r}: names starting with {_TF_PREFIX!r} are "
                                   "reserved in the tfrecord format; rename the field")

    def _start(self) -> None:
        self._file = open(self._temp, "wb")
        self._last: tuple | None = None  # the last record waits: it gets the dataset metadata

    def _example(self, fields, label, group, meta, dataset: dict | None) -> bytes:
        features: dict[str, tuple[str, list]] = {name: ("bytes", [view]) for name, view in fields.items()}
        features[_TF_LABEL] = _label_feature(label)
        if group is not None:
            features[_TF_GROUP] = ("int64", [group])
        if meta:
            features[_TF_META] = ("bytes", [meta])
        if dataset is not None:
            features[_TF_DATASET] = ("bytes", [json.dumps(dataset).encode()])
        return encode_example(features)

    def _write(self, index, fields, label, group, meta) -> None:
        if self._last is not None:
            self._file.write(tfrecord_frame(self._example(*self._last, None)))
        self._last = (fields, label, group, meta)

    def _finish(self) -> None:
        if self._last is None:
            example = encode_example({_TF_DATASET: ("bytes", [json.dumps(self.metadata).encode()])})
        else:
            example = self._example(*self._last, self.metadata)
        self._file.write(tfrecord_frame(example))
        self._file.close()

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class TFRecordReader(_MappedReader):
    """Reads TFRecord files of ``tf.train.Example``s: those written by :class:`TFRecordWriter` exactly,
    others as bytes features -> fields (a list of k > 1 values as ``name[0]`` ...) and numeric
    features -> meta lists. Every record's length and data CRC32C are checked (data: with ``check``)."""

    kind = "tfrecord"

    def _open(self) -> None:
        view = self._map(self.path)
        size = len(view)
        starts, lengths = [], []
        pos = 0
        unpack = struct.Struct("<QI").unpack_from
        while pos < size:
            n = len(starts)
            if pos + 12 > size:
                raise self._bad(n, pos, f"is truncated: {size - pos} bytes where a 12-byte record head starts")
            length, length_crc = unpack(view, pos)
            if masked_crc32c(view[pos:pos + 8]) != length_crc:
                raise self._bad(n, pos, "fails its length CRC32C")
            end = pos + 12 + length + 4
            if end > size:
                raise self._bad(n, pos, f"is truncated: its {length} bytes run past the end of the file ({size} bytes)")
            starts.append(pos + 12)
            lengths.append(length)
            pos = end
        self._starts, self._lengths = starts, lengths
        self._count = len(starts)
        if starts:
            try:
                last = decode_example(self._data(len(starts) - 1))
            except ValueError as exc:
                raise FormatError(f"{self.path}: record {len(starts) - 1} is not a tf.train.Example ({exc})") from None
            if _TF_DATASET in last:
                try:
                    self.metadata = json.loads(bytes(last[_TF_DATASET][1][0]))
                except (ValueError, IndexError) as exc:
                    raise CorruptError(f"{self.path}: damaged {_TF_DATASET} feature ({exc})") from None
                if len(last) == 1:
                    self._count -= 1  # only the dataset metadata: a store of no records

    def _bad(self, n: int, pos: int, reason: str) -> PicPacError:
        if n == 0:
            return FormatError(f"{self.path}: not a TFRecord file (its first record {reason})")
        return _corrupt(self.path, n, f"at byte {pos} {reason}")

    def _data(self, k: int) -> memoryview:
        start, length = self._starts[k], self._lengths[k]
        data = self._view[start:start + length]
        if self.check and masked_crc32c(data) != struct.unpack_from("<I", self._view, start + length)[0]:
            raise _corrupt(self.path, k, "fails its data CRC32C (damaged bytes)")
        return data

    def _read(self, i: int) -> Record:
        try:
            features = decode_example(self._data(i))
        except ValueError as exc:
            raise _corrupt(self.path, i, f"is not a tf.train.Example ({exc})") from None
        return self._from_features(i, features)

    def _from_features(self, i: int, features: dict) -> Record:
        label, group, meta, extra = 0.0, None, b"", {}
        fields = {}
        for name, (kind, values) in features.items():
            if name == _TF_LABEL and values:
                label = float(values[0]) if kind != "bytes" else struct.unpack("<d", values[0])[0]
            elif name == _TF_GROUP and kind == "int64" and values:
                group = values[0]
            elif name == _TF_META and kind == "bytes" and values:
                meta = values[0]
            elif name == _TF_DATASET:
                continue
            elif kind == "bytes":
                if len(values) == 1:
                    fields[name] = values[0]
                else:
                    fields.update((f"{name}[{k}]", v) for k, v in enumerate(values))
            else:
                extra[name] = values
        if extra:
            meta = {**(json.loads(bytes(meta)) if len(meta) else {}), **extra}
        return self._record(i, self._ordered(fields), label, group, meta)


# ------------------------------------------------------------------------------------------------
# HDF5
# ------------------------------------------------------------------------------------------------
class HDF5Writer(StoreWriter):
    """HDF5 file: ``fields/<name>`` variable-length uint8 and ``present/<name>`` bool per field, ``label``
    float64, ``group`` int64 (NO_GROUP: none), ``meta`` UTF-8 strings ("" for none); the root's
    attributes ``picpac_store`` and ``picpac_metadata`` (JSON)."""

    kind = "hdf5"
    _BATCH = 256
    _BATCH_BYTES = 64 << 20

    def _check_name(self, name: str) -> None:
        if "/" in name or name == ".":
            raise PicPacValueError(f"{self.path}: field name {name!r} cannot name an HDF5 dataset ('/' or '.'); "
                                   "rename the field")

    def _start(self) -> None:
        h5py = _require("h5py", "hdf5")
        self._h5py = h5py
        self._file = h5py.File(self._temp, "w")
        self._file.attrs["picpac_store"] = "picpac-hdf5 1"
        f = self._file
        f.create_dataset("label", (0,), maxshape=(None,), dtype="<f8", chunks=(4096,))
        f.create_dataset("group", (0,), maxshape=(None,), dtype="<i8", chunks=(4096,))
        f.create_dataset("meta", (0,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"), chunks=(256,))
        f.create_group("fields")
        f.create_group("present")
        self._pending: list[tuple[dict, float, int, bytes]] = []
        self._pending_bytes = 0
        self._flushed = 0

    def _write(self, index, fields, label, group, meta) -> None:
        self._pending.append(({k: np.frombuffer(v, np.uint8) for k, v in fields.items()}, label,
                              NO_GROUP if group is None else group, meta))
        self._pending_bytes += sum(v.nbytes for v in fields.values())
        if len(self._pending) >= self._BATCH or self._pending_bytes >= self._BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        f, start, k = self._file, self._flushed, len(self._pending)
        end = start + k
        for name in self._fields:
            if name not in f["fields"]:
                f["fields"].create_dataset(name, (start,), maxshape=(None,), dtype=self._h5py.vlen_dtype(np.uint8),
                                           chunks=(64,))
                f["present"].create_dataset(name, (start,), maxshape=(None,), dtype=bool, chunks=(4096,),
                                            fillvalue=False)
            values = np.empty(k, object)
            present = np.zeros(k, bool)
            empty = np.zeros(0, np.uint8)
            for j, record in enumerate(self._pending):
                value = record[0].get(name)
                present[j] = value is not None
                values[j] = empty if value is None else value
            for group, data in (("fields", values), ("present", present)):
                dataset = f[group][name]
                dataset.resize((end,))
                # write_direct hands the object array to HDF5 as is (dataset[a:b] = values would first
                # try to stack values of one length into a 2-D array)
                dataset.write_direct(data, dest_sel=np.s_[start:end])
        for name, data in (("label", np.array([r[1] for r in self._pending], "<f8")),
                           ("group", np.array([r[2] for r in self._pending], "<i8")),
                           ("meta", np.array([r[3].decode() for r in self._pending], object))):
            f[name].resize((end,))
            f[name][start:end] = data
        self._flushed, self._pending, self._pending_bytes = end, [], 0

    def _finish(self) -> None:
        self._flush()
        self._file.attrs["picpac_metadata"] = json.dumps(self.metadata)
        self._file.close()

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None and file.id.valid:
            file.close()


class HDF5Reader(StoreReader):
    """Reads an HDF5 store lazily: opening reads the labels, groups and presence flags; ``r[i]`` reads
    record i's elements of each field dataset and nothing else."""

    kind = "hdf5"

    def _open(self) -> None:
        h5py = _require("h5py", "hdf5")
        if os.path.isdir(self.path):
            raise FormatError(f"{self.path}: is a directory, not an HDF5 file")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            if "truncated" in str(exc):
                raise CorruptError(f"{self.path}: truncated HDF5 file ({exc})") from None
            raise FormatError(f"{self.path}: not an HDF5 file ({exc})") from None
        f = self._file
        if "picpac_store" not in f.attrs:
            raise FormatError(f"{self.path}: an HDF5 file without the picpac_store attribute; "
                              "not written by picpac (picpac export --to hdf5)")
        try:
            self.metadata = json.loads(f.attrs["picpac_metadata"])
            self.labels = f["label"][:]
            self.groups = f["group"][:]
            self._meta = f["meta"]
            self.datasets = {name: f["fields"][name] for name in self.metadata["fields"]}
            self._present = {name: f["present"][name][:] for name in self.metadata["fields"]}
        except (KeyError, ValueError, OSError) as exc:
            raise CorruptError(f"{self.path}: damaged picpac HDF5 layout ({exc})") from None
        self._count = len(self.labels)
        if any(len(d) != self._count for d in [self._meta, *self.datasets.values(), *self._present.values()]):
            raise CorruptError(f"{self.path}: datasets of different lengths")

    def _read(self, i: int) -> Record:
        try:
            fields = {name: memoryview(dataset[i]) for name, dataset in self.datasets.items()
                      if self._present[name][i]}
            meta = self._meta[i]
        except (OSError, ValueError) as exc:
            raise _corrupt(self.path, i, f"cannot be read ({exc})") from None
        group = int(self.groups[i])
        return self._record(i, fields, float(self.labels[i]), None if group == NO_GROUP else group,
                            meta.encode() if isinstance(meta, str) else meta)

    def _after_fork(self) -> None:
        self._inherited.append(self._file)
        self._open()

    def _close(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None and self._pid == os.getpid() and file.id.valid:
            file.close()


# ------------------------------------------------------------------------------------------------
# NumPy npz
# ------------------------------------------------------------------------------------------------
NPZ_META_KEY = "__picpac__"


class NpzWriter(StoreWriter):
    """Uncompressed ``.npz`` (what ``np.savez`` writes) of plain arrays: ``data:<field>`` uint8 (the field's
    values joined), ``offsets:<field>`` int64 (N+1), ``present:<field>`` bool, ``label`` float64, ``group``
    int64, ``meta`` uint8 + ``meta_offsets`` int64, ``__picpac__`` uint8 (the dataset metadata JSON).
    Field bytes are spooled to temporary files and copied into the archive at close."""

    kind = "npz"

    def _start(self) -> None:
        self._spools: dict[str, tuple[Any, list[int], list[bool]]] = {}
        self._labels: list[float] = []
        self._groups: list[int] = []
        self._meta = io.BytesIO()
        self._meta_offsets = [0]

    def _write(self, index, fields, label, group, meta) -> None:
        directory = os.path.dirname(self._temp)
        for name in self._fields:
            if name not in self._spools:
                self._spools[name] = (tempfile.TemporaryFile(dir=directory), [0] * (index + 1), [False] * index)
            spool, offsets, present = self._spools[name]
            value = fields.get(name)
            if value is not None:
                spool.write(value)
            offsets.append(offsets[-1] + (0 if value is None else value.nbytes))
            present.append(value is not None)
        self._labels.append(label)
        self._groups.append(NO_GROUP if group is None else group)
        self._meta.write(meta)
        self._meta_offsets.append(self._meta_offsets[-1] + len(meta))

    def _finish(self) -> None:
        arrays: dict[str, Any] = {
            NPZ_META_KEY: np.frombuffer(json.dumps({"store": "picpac-npz", "version": 1,
                                                    "metadata": self.metadata}).encode(), np.uint8),
            "label": np.array(self._labels, "<f8"), "group": np.array(self._groups, "<i8"),
            "meta": np.frombuffer(self._meta.getvalue(), np.uint8), "meta_offsets": np.array(self._meta_offsets, "<i8"),
        }
        with zipfile.ZipFile(self._temp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            for key, array in arrays.items():
                with archive.open(key + ".npy", "w", force_zip64=array.nbytes > 1 << 30) as out:
                    np.lib.format.write_array(out, array, allow_pickle=False)
            for name, (spool, offsets, present) in self._spools.items():
                size = offsets[-1]
                with archive.open(f"data:{name}.npy", "w", force_zip64=size > 1 << 30) as out:
                    np.lib.format.write_array_header_2_0(out, {"descr": "|u1", "fortran_order": False,
                                                               "shape": (size,)})
                    spool.seek(0)
                    shutil.copyfileobj(spool, out, 16 << 20)
                spool.close()
                for key, array in ((f"offsets:{name}", np.array(offsets, "<i8")),
                                   (f"present:{name}", np.array(present, bool))):
                    with archive.open(key + ".npy", "w", force_zip64=array.nbytes > 1 << 30) as out:
                        np.lib.format.write_array(out, array, allow_pickle=False)
        self._spools = {}

    def _release(self) -> None:
        for spool, _, _ in getattr(self, "_spools", {}).values():
            spool.close()


class NpzReader(_MappedReader):
    """Reads an npz store through a memory map of its (uncompressed) members; a compressed member is
    loaded whole with ``np.load``."""

    kind = "npz"

    def _open(self) -> None:
        view = self._map(self.path)
        try:
            with zipfile.ZipFile(self.path) as archive:
                members = {info.filename: info for info in archive.infolist()}
        except (zipfile.BadZipFile, OSError) as exc:
            if bytes(view[:4]) == b"PK\x03\x04":
                raise CorruptError(f"{self.path}: truncated or damaged npz file ({exc})") from None
            raise FormatError(f"{self.path}: not an npz file ({exc})") from None
        self._members = members
        self._arrays: dict[str, np.ndarray] | None = {}
        raw = self._array(NPZ_META_KEY)
        if raw is None:
            raise FormatError(f"{self.path}: an npz file without {NPZ_META_KEY}; not written by picpac "
                              "(picpac export --to npz)")
        try:
            self.metadata = json.loads(raw.tobytes())["metadata"]
            self.labels, self.groups = self._need("label"), self._need("group")
            self._meta, self._meta_offsets = self._need("meta"), self._need("meta_offsets")
            self._fields = {name: (self._need(f"data:{name}"), self._need(f"offsets:{name}"),
                                   self._need(f"present:{name}")) for name in self.metadata["fields"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptError(f"{self.path}: damaged npz store ({exc})") from None
        self._count = len(self.labels)
        for name, (data, offsets, present) in self._fields.items():
            if len(offsets) != self._count + 1 or len(present) != self._count or offsets[-1] != len(data) \
                    or (len(offsets) and offsets[0] != 0) or (np.diff(offsets) < 0).any():
                raise CorruptError(f"{self.path}: the offsets of field {name!r} do not match its data")
        del view

    def _need(self, key: str) -> np.ndarray:
        array = self._array(key)
        if array is None:
            raise KeyError(f"no array {key!r}")
        return array

    def _array(self, key: str) -> np.ndarray | None:
        info = self._members.get(key + ".npy")
        if info is None:
            return None
        if info.compress_type != zipfile.ZIP_STORED:
            with np.load(self.path, allow_pickle=False) as npz:
                return npz[key]
        view = self._view
        at = info.header_offset
        if bytes(view[at:at + 4]) != b"PK\x03\x04":
            raise CorruptError(f"{self.path}: damaged zip entry {info.filename}")
        name_size, extra_size = struct.unpack_from("<HH", view, at + 26)
        start = at + 30 + name_size + extra_size
        head = io.BytesIO(view[start:start + min(info.file_size, 1 << 16)])
        version = np.lib.format.read_magic(head)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(head) if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0(head))
        if dtype.hasobject or fortran or len(shape) != 1:
            raise FormatError(f"{self.path}: {info.filename} is not a flat array of plain values")
        offset = start + head.tell()
        if offset + shape[0] * dtype.itemsize > len(view):
            raise CorruptError(f"{self.path}: {info.filename} runs past the end of the file")
        return np.frombuffer(view, dtype, shape[0], offset)

    def _read(self, i: int) -> Record:
        fields = {}
        for name, (data, offsets, present) in self._fields.items():
            if present[i]:
                fields[name] = memoryview(data[offsets[i]:offsets[i + 1]])
        group = int(self.groups[i])
        meta = memoryview(self._meta[self._meta_offsets[i]:self._meta_offsets[i + 1]])
        return self._record(i, fields, float(self.labels[i]), None if group == NO_GROUP else group, meta)

    def _close(self) -> None:
        self._fields = {}
        self.labels = self.groups = self._meta = self._meta_offsets = None
        super()._close()


# ------------------------------------------------------------------------------------------------
# SQLite
# ------------------------------------------------------------------------------------------------
_SQL_RESERVED = frozenset({"id", "label", "group", "meta"})


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteWriter(StoreWriter):
    """SQLite database: table ``records(id INTEGER PRIMARY KEY, label, "group" INTEGER, meta TEXT,
    "<field>" BLOB ...)`` (NULL: no such field / no group / no meta; ``label`` has no declared type, so a
    float is kept as stored, where a REAL column would turn -0.0 into 0), table ``picpac(key, value)``
    with the store's description and the dataset metadata."""

    kind = "sqlite"

    def _check_name(self, name: str) -> None:
        lower = {n.lower() for n in self._fields}
        if name.lower() in _SQL_RESERVED or name.lower() in lower or "\x00" in name:
            raise PicPacValueError(f"{self.path}: field name {name!r} clashes with a column of the sqlite store "
                                   "(id, label, group, meta, or another field differing only in case); "
                                   "rename the field")

    def _start(self) -> None:
        self._db = sqlite3.connect(self._temp, isolation_level=None)
        self._db.executescript("""
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            CREATE TABLE picpac (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE records (id INTEGER PRIMARY KEY, label NOT NULL, "group" INTEGER, meta TEXT);
            BEGIN;
        """)
        self._columns: list[str] = []
        self._statements: dict[tuple[str, ...], str] = {}

    def _write(self, index, fields, label, group, meta) -> None:
        for name in fields:
            if name not in self._columns:
                self._db.execute(f"ALTER TABLE records ADD COLUMN {_quote(name)} BLOB")
                self._columns.append(name)
        names = tuple(fields)
        statement = self._statements.get(names)
        if statement is None:
            columns = ", ".join(['id', 'label', '"group"', 'meta', *map(_quote, names)])
            statement = self._statements[names] = \
                f"INSERT INTO records ({columns}) VALUES ({', '.join('?' * (4 + len(names)))})"
        self._db.execute(statement, (index, label, group, meta.decode() if meta else None, *fields.values()))

    def _finish(self) -> None:
        info = {"store": "picpac-sqlite 1", "count": str(self._count), "metadata": json.dumps(self.metadata)}
        self._db.executemany("INSERT INTO picpac VALUES (?, ?)", info.items())
        self._db.execute("COMMIT")
        self._db.close()

    def _release(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()


class SqliteReader(StoreReader):
    kind = "sqlite"

    def _open(self) -> None:
        if os.path.isdir(self.path):
            raise FormatError(f"{self.path}: is a directory, not an SQLite file")
        try:
            self._db = sqlite3.connect(f"file:{_uri_path(self.path)}?mode=ro&immutable=1", uri=True,
                                       check_same_thread=False)
            info = dict(self._db.execute("SELECT key, value FROM picpac"))
        except sqlite3.DatabaseError as exc:
            if "malformed" in str(exc):
                raise CorruptError(f"{self.path}: damaged or truncated SQLite file ({exc})") from None
            raise FormatError(f"{self.path}: not a picpac SQLite store ({exc})") from None
        try:
            self.metadata = json.loads(info["metadata"])
            self._count = int(info["count"])
            last = self._db.execute("SELECT max(id) FROM records").fetchone()[0]
            columns = ", ".join(['label', '"group"', 'meta', *map(_quote, self.metadata["fields"])])
            self._select = f"SELECT {columns} FROM records WHERE id = ?"
        except (KeyError, ValueError, TypeError, sqlite3.DatabaseError) as exc:
            raise CorruptError(f"{self.path}: damaged picpac SQLite store ({exc})") from None
        if (last if last is not None else -1) != self._count - 1:
            raise CorruptError(f"{self.path}: {self._count} records recorded, the last id is {last}")

    def _read(self, i: int) -> Record:
        try:
            row = self._db.execute(self._select, (i,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, i, f"cannot be read ({exc})") from None
        if row is None:
            raise _corrupt(self.path, i, "is missing")
        label, group, meta = row[:3]
        label = float(label)
        fields = {name: memoryview(value) for name, value in zip(self.metadata["fields"], row[3:])
                  if value is not None}
        return self._record(i, fields, label, group, (meta or "").encode())

    def _after_fork(self) -> None:
        self._inherited.append(self._db)  # SQLite connections must not cross a fork: a new one
        self._open()

    def _close(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None and self._pid == os.getpid():
            db.close()


def _uri_path(path: str) -> str:
    from urllib.parse import quote
    return quote(os.path.abspath(path))


# ------------------------------------------------------------------------------------------------
# WebDataset-style tar
# ------------------------------------------------------------------------------------------------
_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET = "cls", "group", "json", "picpac.json"
_TAR_NAME = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset: key, then everything after the first dot


def _label_text(label: float) -> bytes:
    if label.is_integer() and math.copysign(1.0, label) > 0:
        return str(int(label)).encode()
    return repr(label).encode()


class TarWriter(StoreWriter):
    """Uncompressed tar, WebDataset style: record i's members ``%06d.<field>``, ``%06d.cls`` (the label as
    text), ``%06d.group`` (when it has one), ``%06d.json`` (its meta, when it has one); the last record
    also has ``%06d.picpac.json`` (the dataset metadata), a store without records a lone ``picpac.json``."""

    kind = "tar"
    reserved = frozenset({_TAR_LABEL, _TAR_GROUP, _TAR_META, _TAR_DATASET})

    def _check_name(self, name: str) -> None:
        super()._check_name(name)
        if "/" in name:
            raise PicPacValueError(f"{self.path}: field name {name!r}: a '/' would break the tar member names; "
                                   "rename the field")

    def _start(self) -> None:
        self._tar = tarfile.open(self._temp, mode="w", format=tarfile.PAX_FORMAT)

    def _add(self, name: str, data: Any) -> None:
        data = memoryview(data)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = data.nbytes, 0o444, 0
        self._tar.addfile(info, io.BytesIO(data))

    def _write(self, index, fields, label, group, meta) -> None:
        key = "%06d" % index
        for name, view in fields.items():
            self._add(f"{key}.{name}", view)
        self._add(f"{key}.{_TAR_LABEL}", _label_text(label))
        if group is not None:
            self._add(f"{key}.{_TAR_GROUP}", str(group).encode())
        if meta:
            self._add(f"{key}.{_TAR_META}", meta)

    def _finish(self) -> None:
        name = _TAR_DATASET if not self._count else "%06d.%s" % (self._count - 1, _TAR_DATASET)
        self._add(name, json.dumps(self.metadata).encode())
        self._tar.close()

    def _release(self) -> None:
        tar = getattr(self, "_tar", None)
        if tar is not None:
            tar.close()


class TarReader(_MappedReader):
    """Reads an uncompressed tar, WebDataset style: members grouped by key (the name up to the first dot
    of its last part), records in the order keys first appear. ``.cls`` is the label, ``.group`` the
    group, ``.json`` the meta (when it holds a JSON object), every other member a field."""

    kind = "tar"

    def _open(self) -> None:
        view = self._map(self.path)
        try:
            with tarfile.open(self.path, "r:") as tar:
                members = tar.getmembers()
        except tarfile.ReadError as exc:
            reason = str(exc)
            if "truncated" in reason or "unexpected end" in reason:
                raise CorruptError(f"{self.path}: truncated tar ({reason})") from None
            raise FormatError(f"{self.path}: not an uncompressed tar file ({reason})") from None
        except (EOFError, OSError) as exc:
            raise CorruptError(f"{self.path}: truncated or damaged tar ({exc})") from None
        keys: dict[str, dict[str, tuple[int, int]]] = {}
        for member in members:
            if not member.isreg():
                continue
            if member.name == _TAR_DATASET:
                self.metadata = self._json(member.offset_data, member.size, _TAR_DATASET)
                continue
            match = _TAR_NAME.match(member.name)
            if match is None:
                continue  # no extension: not part of a sample
            if member.offset_data + member.size > len(view):
                raise CorruptError(f"{self.path}: member {member.name} runs past the end of the file (truncated)")
            keys.setdefault(match.group(1), {})[match.group(2)] = (member.offset_data, member.size)
        self._samples = list(keys.items())
        if self._samples and _TAR_DATASET in self._samples[-1][1]:
            self.metadata = self._json(*self._samples[-1][1][_TAR_DATASET], _TAR_DATASET)
        self._count = len(self._samples)

    def _json(self, offset: int, size: int, what: str) -> Any:
        try:
            return json.loads(bytes(self._view[offset:offset + size]))
        except ValueError as exc:
            raise CorruptError(f"{self.path}: damaged {what} member ({exc})") from None

    def _read(self, i: int) -> Record:
        key, members = self._samples[i]
        view = self._view
        label, group, meta, fields = 0.0, None, b"", {}
        for suffix, (offset, size) in members.items():
            data = view[offset:offset + size]
            if suffix == _TAR_DATASET:
                continue
            try:
                if suffix == _TAR_LABEL:
                    label = float(bytes(data))
                    continue
                if suffix == _TAR_GROUP:
                    group = int(bytes(data))
                    continue
            except ValueError:
                raise _corrupt(self.path, i, f"({key}.{suffix}) does not hold a number") from None
            if suffix == _TAR_META and data[:1] == b"{":
                meta = data
                continue
            fields[suffix] = data
        return self._record(i, self._ordered(fields), label, group, meta)


# ------------------------------------------------------------------------------------------------
# binary + index
# ------------------------------------------------------------------------------------------------
def index_path(path: str) -> str:
    """The index file of a binary store: ``path + ".idx"``."""
    return path + ".idx"


class BinaryWriter(StoreWriter):
    """A data file (PPR1 records back to back, then the store's JSON description with the dataset
    metadata) and ``<path>.idx``, a NumPy ``.npy`` int64 array of N+1 offsets: record i is
    ``data[idx[i]:idx[i+1]]``, the description ``data[idx[N]:]``."""

    kind = "binary"

    def _start(self) -> None:
        self._file = open(self._temp, "wb")
        self._offsets = [0]

    def _temps(self) -> list[str]:
        return [self._temp, index_path(self._temp)]

    def _write(self, index, fields, label, group, meta) -> None:
        record = encode_record(fields, label, group, meta)
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))

    def _finish(self) -> None:
        self._file.write(json.dumps({"store": "picpac-binary", "version": 1, "serialisation": "PPR1",
                                     "metadata": self.metadata}).encode())
        self._file.close()
        with open(index_path(self._temp), "wb") as out:
            np.save(out, np.array(self._offsets, "<i8"))

    def _replace(self, temp: str, path: str) -> None:
        os.replace(index_path(temp), index_path(path))
        os.replace(temp, path)

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class BinaryReader(_MappedReader):
    kind = "binary"

    def _open(self) -> None:
        view = self._map(self.path)
        idx = index_path(self.path)
        if not os.path.exists(idx):
            raise MissingPathError(f"{idx}: the index of binary store {self.path} does not exist")
        try:
            offsets = np.load(idx, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise FormatError(f"{idx}: not a NumPy offsets file ({exc})") from None
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or not len(offsets):
            raise FormatError(f"{idx}: not a 1-D integer offsets array")
        if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] > len(view):
            raise CorruptError(f"{self.path}: does not match its index {idx} (the records end at {offsets[-1]}, "
                               f"the file has {len(view)} bytes: truncated or replaced)")
        try:
            head = json.loads(bytes(view[int(offsets[-1]):]))
            self.metadata = head["metadata"]
        except (ValueError, KeyError, TypeError) as exc:
            if not len(view):
                raise FormatError(f"{self.path}: empty file, not a picpac binary store") from None
            raise CorruptError(f"{self.path}: its description after the records is damaged or truncated "
                               f"({exc})") from None
        self._offsets = offsets.astype(np.int64).tolist()
        self._count = len(offsets) - 1

    def _read(self, i: int) -> Record:
        data = self._view[self._offsets[i]:self._offsets[i + 1]]
        fields, label, group, meta = decode_record(data, self.path, i, self.check)
        return self._record(i, fields, label, group, meta)


# ------------------------------------------------------------------------------------------------
# opening, sizes, converting
# ------------------------------------------------------------------------------------------------
WRITERS: dict[str, type[StoreWriter]] = {"lmdb": LmdbWriter, "tfrecord": TFRecordWriter, "hdf5": HDF5Writer,
                                         "npz": NpzWriter, "sqlite": SqliteWriter, "tar": TarWriter,
                                         "binary": BinaryWriter}
READERS: dict[str, type[StoreReader]] = {"lmdb": LmdbReader, "tfrecord": TFRecordReader, "hdf5": HDF5Reader,
                                         "npz": NpzReader, "sqlite": SqliteReader, "tar": TarReader,
                                         "binary": BinaryReader}


def _kind(kind: str) -> str:
    if kind not in WRITERS:
        raise PicPacValueError(f"unknown store format {kind!r}; one of {', '.join(KINDS)}")
    return kind


def open_writer(path: str | os.PathLike, kind: str, *, metadata: Mapping[str, Any] | None = None) -> StoreWriter:
    """A writer of store format ``kind`` (one of :data:`KINDS`) building ``path``."""
    return WRITERS[_kind(kind)](path, metadata=metadata)


def _reopen(path: str, kind: str, check: bool) -> StoreReader:
    return open_reader(path, kind, check=check)


def open_reader(path: str | os.PathLike, kind: str, *, check: bool = True) -> StoreReader:
    """A reader of the ``kind`` store at ``path``; ``check`` verifies stored checksums where the format
    has them (TFRecord's CRC32C, PPR1's CRC32 in lmdb and binary)."""
    return READERS[_kind(kind)](path, check=check)


def store_size(path: str | os.PathLike, kind: str | None = None) -> int:
    """Bytes on disk of a store: its file, the files of its directory, or a binary store's two files."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    size = os.path.getsize(path)
    if kind == "binary" and os.path.exists(index_path(path)):
        size += os.path.getsize(index_path(path))
    return size


@dataclass
class ConvertReport:
    """What :func:`export_store` or :func:`import_store` did."""

    verb: str
    count: int
    source: str
    source_bytes: int
    destination: str
    destination_bytes: int
    seconds: float

    @property
    def ratio(self) -> float:
        """Destination bytes / source bytes."""
        return self.destination_bytes / self.source_bytes if self.source_bytes else float("nan")

    def summary(self) -> str:
        return (f"{self.verb} {self.count} records from {self.source} ({self.source_bytes:,} bytes) to "
                f"{self.destination} ({self.destination_bytes:,} bytes, {self.ratio:.3f}x the source) "
                f"in {self.seconds:.1f} s")


def _check_target(path: str, overwrite: bool) -> None:
    if os.path.lexists(path) and not overwrite:
        raise PicPacValueError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it")


def _copy(reader: Any, writer: Any, progress: Callable[[int], Any] | None) -> None:
    bar = progress(len(reader)) if progress is not None else None
    try:
        for i in range(len(reader)):
            record = reader[i]
            writer.append(record.fields, label=record.label, group=record.group, meta=record.meta or None)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()


def export_store(db: str | os.PathLike, dst: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None) -> ConvertReport:
    """Copy every record of picpac database ``db`` (and its metadata) into a new ``kind`` store ``dst``.

    ``progress(total)`` may return a progress bar (``.update(1)`` per record, ``.close()``), e.g.
    ``lambda total: tqdm(total=total)``. ``dst`` appears only when the copy is complete."""
    start = time.perf_counter()
    db, dst = os.fspath(db), os.fspath(dst)
    _kind(kind)
    _check_target(dst, overwrite)
    with Reader(db) as reader:
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        with open_writer(dst, kind, metadata=metadata) as writer:
            _copy(reader, writer, progress)
        count = len(reader)
    return ConvertReport("exported", count, db, os.path.getsize(db), f"{kind} {dst}", store_size(dst, kind),
                         time.perf_counter() - start)


def import_store(src: str | os.PathLike, db: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None) -> ConvertReport:
    """Copy every record of the ``kind`` store ``src`` (and its metadata) into a new picpac database ``db``."""
    start = time.perf_counter()
    src, db = os.fspath(src), os.fspath(db)
    _kind(kind)
    _check_target(db, overwrite)
    with open_reader(src, kind) as reader:
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        with Writer(db, metadata=metadata) as writer:
            _copy(reader, writer, progress)
        count = len(reader)
    return ConvertReport("imported", count, f"{kind} {src}", store_size(src, kind), db, os.path.getsize(db),
                         time.perf_counter() - start)
