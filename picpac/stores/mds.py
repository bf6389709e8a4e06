"""MosaicML Streaming's MDS shards, read from a local folder by their documented layout, without the
``mosaicml-streaming`` package (which pins NumPy < 2.2, transformers < 5 and a torchvision: it does not install
beside picpac's dependencies).

``index.json`` lists the shards: ``{"version": 2, "shards": [{"format": "mds", "column_names": [...],
"column_encodings": [...], "column_sizes": [...], "samples": n, "raw_data": {"basename": ..., "bytes": ...},
"compression": null or "zstd:7", "zip_data": {...} or null}, ...]}``. A shard is ``u32 n``, ``n + 1`` u32 offsets
of the samples in the shard, a JSON config, then the samples; a sample is a u32 size per column of no fixed
size, then each column's bytes, in column order (all little-endian). Image columns (``jpeg``, ``png``,
``bytes``) are taken as stored; ``MDSWriter`` stores a JPEG's own bytes for a PIL image opened from a JPEG file
and encodes other images itself, and a ``bytes`` column holds whatever it was given. Compressed shards
(``gz``, ``bz2``; ``zstd`` with ``pip install picpac[mds]``) are decompressed to a temporary file, bounded by
the size the index declares."""
from __future__ import annotations

import bisect
import bz2
import gzip
import json
import mmap
import os
import struct
import tempfile
from typing import Any

import numpy as np

from ..errors import CorruptError, FormatError, SourceError
from ..file.inputs import read_text
from ..file.layout import load_json
from ..file.reader import Record
from .base import MappedReader, TableReader, check_regular, corrupt_error, require_package

IMAGE_ENCODINGS = ("jpeg", "png", "bytes")
_SCALARS = {"int": "<i8", "uint8": "<u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "int8": "<i1",
            "int16": "<i2", "int32": "<i4", "int64": "<i8", "float16": "<f2", "float32": "<f4", "float64": "<f8"}
_TEXTS = ("str", "str_int", "str_float", "str_decimal", "json")
MAX_SHARD_BYTES = 1 << 32
"""A shard's offsets are u32: no shard holds more bytes."""
_CHUNK = 1 << 20


def _text_value(encoding: str, data: bytes) -> Any:
    text = data.decode("utf-8")
    if encoding == "str_int":
        return int(text)
    if encoding == "str_float":
        return float(text)
    return json.loads(text) if encoding == "json" else text


class MdsReader(TableReader, MappedReader):
    """Reads the MDS shards of a local folder (its ``index.json``); ``image_column`` and ``label_column`` name
    the columns [default: the first ``jpeg``/``png`` column, else ``image``, else the first ``bytes`` column;
    the column ``label`` when it holds numbers]. Other ``bytes`` columns become fields, numbers and text the
    meta; ``pkl`` columns are never unpickled, arrays and PIL pixels left out."""

    kind = "mds"

    def _open(self) -> None:
        index = os.path.join(self.path, "index.json") if os.path.isdir(self.path) else self.path
        self.folder = os.path.dirname(index)
        info = load_json(read_text(index, "MDS index files").encode(),
                         lambda why: FormatError(f"{index}: not JSON ({why})"))
        shards = info.get("shards") if isinstance(info, dict) else None
        if not isinstance(shards, list) or not shards:
            raise FormatError(f"{index}: no `shards` list; not an MDS index (MDSWriter's index.json)")
        self._shards = [self._shard(s, f"{index}: shards[{k}]") for k, s in enumerate(shards)]
        first = self._shards[0]
        for k, shard in enumerate(self._shards[1:], 1):
            if shard["columns"] != first["columns"]:
                raise FormatError(f"{index}: shards[{k}] has other columns than shards[0]")
        self._pick(first["columns"], index)
        self._starts = [0]
        for shard in self._shards:
            self._starts.append(self._starts[-1] + shard["samples"])
        self._count = self._starts[-1]
        self.metadata = {"fields": [name for name, _, _ in first["columns"] if name in self._fields]}
        self._current: tuple[int, memoryview] | None = None
        self._temp: Any = None

    def _shard(self, shard: Any, where: str) -> dict[str, Any]:
        try:
            if shard["format"] != "mds":
                raise FormatError(f"{where}: format {shard['format']!r}; picpac reads MDS shards")
            names, encodings, sizes = shard["column_names"], shard["column_encodings"], shard["column_sizes"]
            columns = list(zip(names, encodings, sizes, strict=True))
            samples, raw = int(shard["samples"]), shard["raw_data"]
            basename, declared = str(raw["basename"]), int(raw["bytes"])
            zipped = shard.get("zip_data")
            compression = shard.get("compression")
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{where}: not an MDS shard entry ({type(exc).__name__}: {exc})") from None
        if not all(isinstance(n, str) and isinstance(e, str) and (s is None or isinstance(s, int) and s >= 0)
                   for n, e, s in columns) or len(set(names)) != len(names):
            raise FormatError(f"{where}: column names, encodings and sizes are malformed")
        if not 0 <= samples < 2**32 or not 0 <= declared <= MAX_SHARD_BYTES:
            raise FormatError(f"{where}: {samples} samples in {declared} bytes; an MDS shard holds fewer than 2**32")
        for name in (basename, zipped.get("basename") if isinstance(zipped, dict) else None):
            if name is not None and (os.path.isabs(str(name)) or ".." in str(name).split("/")):
                raise FormatError(f"{where}: shard file {name!r} lies outside the folder")
        return {"columns": columns, "samples": samples, "basename": basename, "bytes": declared,
                "zip": zipped.get("basename") if isinstance(zipped, dict) else None, "compression": compression}

    def _pick(self, columns: list[tuple[str, str, int | None]], index: str) -> None:
        encodings = {name: encoding for name, encoding, _ in columns}
        for option, column in (("--image-column", self.image_column), ("--label-column", self.label_column)):
            if column is not None and column not in encodings:
                raise SourceError(f"{index}: no column {column!r} ({option}); its columns are "
                                  f"{', '.join(encodings)}")
        image = self.image_column or next((n for n, e in encodings.items() if e in ("jpeg", "png")), "image" if
                                          "image" in encodings else next((n for n, e in encodings.items()
                                                                          if e == "bytes"), None))
        if image is None or encodings[image] not in IMAGE_ENCODINGS:
            what = f"column {image!r} is encoded {encodings[image]!r}" if image else "no column holds images"
            raise SourceError(f"{index}: {what}; picpac imports encoded images from a jpeg, png or bytes column "
                              "(--image-column)")
        label = self.label_column or ("label" if encodings.get("label") in _SCALARS else None)
        if label is not None and encodings[label] not in _SCALARS and encodings[label] not in ("str_int",
                                                                                                "str_float"):
            raise SourceError(f"{index}: column {label!r} is encoded {encodings[label]!r}, not as a number "
                              "(--label-column)")
        self._image, self._label = image, label
        self._fields = [image] + [n for n, e in encodings.items() if e == "bytes" and n not in (image, label)]
        self._meta = [n for n, e in encodings.items()
                      if (e in _SCALARS or e in _TEXTS) and n not in (image, label)]

    def where(self, i: int) -> str:
        """``shard file: sample s`` of record ``i``."""
        k = bisect.bisect_right(self._starts, i) - 1
        return f"{os.path.join(self.folder, self._shards[k]['basename'])}: sample {i - self._starts[k]}"

    def _shard_bytes(self, k: int) -> memoryview:
        """Shard ``k``'s bytes (its file mapped, or its compressed file decompressed to a temporary one)."""
        if self._current is not None and self._current[0] == k:
            return self._current[1]
        self._close()
        shard = self._shards[k]
        raw = os.path.join(self.folder, shard["basename"])
        if os.path.exists(raw) or shard["zip"] is None:
            view = self._map(raw)
        else:
            view = self._decompressed(shard)
        self._check(view, shard, raw)
        self._current = (k, view)
        return view

    def _decompressed(self, shard: dict[str, Any]) -> memoryview:
        name = os.path.join(self.folder, shard["zip"])
        check_regular(name, self.kind)
        algorithm = str(shard["compression"] or "").split(":")[0]
        if algorithm == "zstd":
            opener = require_package("zstandard", "mds (zstd shards)", extra="mds").ZstdDecompressor().stream_reader
        elif algorithm in ("gz", "bz2"):
            opener = (lambda f: gzip.GzipFile(fileobj=f)) if algorithm == "gz" else bz2.BZ2File
        else:
            raise FormatError(f"{name}: compressed as {shard['compression']!r}; picpac reads gz, bz2 and zstd MDS "
                              "shards: write them with one of those, or none")
        self._temp = tempfile.TemporaryFile(prefix="picpac-mds-")
        total = 0
        with open(name, "rb") as packed, opener(packed) as stream:
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > shard["bytes"]:
                    raise corrupt_error(name, 0, f"decompresses to more than the {shard['bytes']:,} bytes its index "
                                                 "declares")
                self._temp.write(chunk)
        self._temp.flush()
        if total == 0:
            return memoryview(b"")
        self._mmap = mmap.mmap(self._temp.fileno(), 0, access=mmap.ACCESS_READ)
        self._view = memoryview(self._mmap)
        return self._view

    def _check(self, view: memoryview, shard: dict[str, Any], name: str) -> None:
        n = shard["samples"]
        if len(view) < 4 * (n + 2) or struct.unpack_from("<I", view)[0] != n:
            raise CorruptError(f"{name}: {len(view):,} bytes, not an MDS shard of the {n} samples its index declares")
        offsets = np.frombuffer(view, "<u4", n + 1, 4)
        if n and (offsets[0] < 4 * (n + 2) or np.any(np.diff(offsets.astype(np.int64)) < 0)
                  or offsets[-1] > len(view)):
            raise CorruptError(f"{name}: its sample offsets are out of order or beyond its {len(view):,} bytes")
        self._offsets = offsets

    def _read(self, i: int) -> Record:
        k = bisect.bisect_right(self._starts, i) - 1
        view, j = self._shard_bytes(k), i - self._starts[k]
        sample = view[int(self._offsets[j]):int(self._offsets[j + 1])]
        columns = self._shards[k]["columns"]
        variable = sum(size is None for _, _, size in columns)
        if len(sample) < 4 * variable:
            raise corrupt_error(self.path, i, f"({self.where(i)}) is shorter than its column sizes")
        sizes = iter(np.frombuffer(sample, "<u4", variable).tolist())
        pos, values = 4 * variable, {}
        for name, encoding, size in columns:
            size = next(sizes) if size is None else size
            if pos + size > len(sample):
                raise corrupt_error(self.path, i, f"({self.where(i)}): column {name!r} runs past the sample's end")
            values[name] = (encoding, sample[pos:pos + size])
            pos += size
        fields = {name: values[name][1] for name in self._fields}
        meta = {name: self._value(*values[name]) for name in self._meta}
        label = self._value(*values[self._label]) if self._label else 0.0
        return self._record(i, fields, float(label), None, meta)

    @staticmethod
    def _value(encoding: str, data: memoryview) -> Any:
        if encoding in _SCALARS:
            return np.frombuffer(data, _SCALARS[encoding], 1)[0].item()
        return _text_value(encoding, bytes(data))

    def _close(self) -> None:
        super()._close()
        self._mmap = self._view = None
        self._current = None
        if getattr(self, "_temp", None) is not None:
            self._temp.close()
            self._temp = None
