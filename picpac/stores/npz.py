"""NumPy ``.npz``: plain arrays (each field's bytes joined, plus offsets), read through a memory map."""
from __future__ import annotations

import io
import json
import os
import shutil
import struct
import tempfile
import tokenize
import zipfile
import zlib
from typing import Any

import numpy as np

from ..errors import CorruptError, FormatError
from ..file.layout import NO_GROUP, load_json
from ..file.reader import Record
from .base import MappedReader, StoreReader, StoreWriter


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


class NpzReader(MappedReader):
    """Reads an npz store through a memory map of its (uncompressed) members; a compressed member is
    loaded whole with ``np.load`` (never a pickle: an array of Python objects is refused)."""

    kind = "npz"
    _damage = (*MappedReader._damage, zipfile.BadZipFile, zlib.error, SyntaxError, tokenize.TokenError)
    _KINDS = {"label": "fiu", "group": "iu", "meta": "u", "meta_offsets": "iu", "data": "u", "offsets": "iu",
              "present": "b"}
    """The NumPy dtype kinds each array may have (by its name before ``:``)."""

    def _open(self) -> None:
        view = self._map(self.path)
        try:
            with zipfile.ZipFile(self.path) as archive:
                members = {info.filename: info for info in archive.infolist()}
        except (zipfile.BadZipFile, *StoreReader._damage) as exc:
            if bytes(view[:4]) == b"PK\x03\x04":
                raise CorruptError(f"{self.path}: truncated or damaged npz file ({exc})") from None
            raise FormatError(f"{self.path}: not an npz file ({exc})") from None
        self._members = members
        self._arrays: dict[str, np.ndarray] | None = {}
        raw = self._array(NPZ_META_KEY)
        if raw is None:
            raise FormatError(f"{self.path}: an npz file without {NPZ_META_KEY}; not written by picpac "
                              "(picpac export --to npz)")
        head = load_json(raw.tobytes(), lambda why: CorruptError(f"{self.path}: damaged {NPZ_META_KEY} ({why})"))
        try:
            self.metadata = head["metadata"]
            self._check_metadata()
            self.labels, self.groups = self._need("label"), self._need("group")
            self._meta, self._meta_offsets = self._need("meta"), self._need("meta_offsets")
            self._fields = {name: (self._need(f"data:{name}"), self._need(f"offsets:{name}"),
                                   self._need(f"present:{name}")) for name in self.metadata["fields"]}
        except (KeyError, TypeError) as exc:
            raise CorruptError(f"{self.path}: damaged npz store ({exc})") from None
        self._count = len(self.labels)
        if len(self.groups) != self._count:
            raise CorruptError(f"{self.path}: {len(self.groups)} groups for {self._count} labels")
        for name, (data, offsets, present) in [("meta", (self._meta, self._meta_offsets, None)),
                                               *self._fields.items()]:
            if len(offsets) != self._count + 1 or (present is not None and len(present) != self._count) \
                    or offsets[0] != 0 or offsets[-1] != len(data) or (np.diff(offsets) < 0).any():
                raise CorruptError(f"{self.path}: the offsets of {name!r} do not match its data")
        del view

    def _need(self, key: str) -> np.ndarray:
        array = self._array(key)
        if array is None:
            raise KeyError(f"no array {key!r}")
        kinds = self._KINDS[key.split(":")[0]]
        if array.dtype.kind not in kinds or array.itemsize > 8 or (kinds == "u" and array.itemsize != 1):
            raise CorruptError(f"{self.path}: array {key!r} holds {array.dtype}, not what a picpac npz store "
                               "has there")
        return array

    def _array(self, key: str) -> np.ndarray | None:
        info = self._members.get(key + ".npy")
        if info is None:
            return None
        try:
            if info.compress_type != zipfile.ZIP_STORED:
                with np.load(self.path, allow_pickle=False) as npz:
                    array = npz[key]
                if array.ndim != 1:
                    raise FormatError(f"{self.path}: {info.filename} is not a flat array of plain values")
                return array
            return self._mapped(info)
        except ValueError as exc:
            if "allow_pickle" in str(exc):  # np.load refuses object arrays: they would unpickle code
                raise FormatError(f"{self.path}: {info.filename} holds Python objects (pickles), which are "
                                  "never loaded; a picpac npz store holds plain arrays") from None
            raise CorruptError(f"{self.path}: damaged array {info.filename} ({exc})") from None
        except (SyntaxError, tokenize.TokenError) as exc:  # the header's dict, parsed by numpy
            raise CorruptError(f"{self.path}: damaged header of {info.filename} ({exc})") from None

    def _mapped(self, info: zipfile.ZipInfo) -> np.ndarray:
        """An uncompressed member, viewed in place in the mapped file."""
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
        if dtype.hasobject or fortran or len(shape) != 1 or shape[0] < 0:
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
