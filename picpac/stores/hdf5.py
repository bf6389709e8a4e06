"""HDF5: one variable-length uint8 dataset per field, read lazily (needs the ``h5py`` package)."""
from __future__ import annotations

import json
import math
import os
import zlib

import numpy as np

from ..errors import CorruptError, FormatError, PicPacValueError
from ..file.layout import NO_GROUP, load_json
from ..file.reader import Record
from .base import StoreReader, StoreWriter, corrupt_error, require_package


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
        h5py = require_package("h5py", "hdf5")
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
    record i's elements of each field dataset and nothing else. Dataset types, lengths and sizes are
    checked at open, before anything is read whole (see :func:`_check_storage`), and the size of each
    variable-length element before it is read (:class:`_Lengths`); damage past libhdf5's own checks can
    crash it or make it loop:
    :func:`picpac.stores.import_store` reads HDF5 stores in a child process."""

    kind = "hdf5"

    def _open(self) -> None:
        h5py = require_package("h5py", "hdf5")
        if os.path.isdir(self.path):
            raise FormatError(f"{self.path}: is a directory, not an HDF5 file")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            if "truncated" in str(exc):
                raise CorruptError(f"{self.path}: truncated HDF5 file ({exc})") from None
            raise FormatError(f"{self.path}: not an HDF5 file ({exc})") from None
        f = self._file
        file_size = os.path.getsize(self.path)
        try:
            if "picpac_store" not in f.attrs:
                raise FormatError(f"{self.path}: an HDF5 file without the picpac_store attribute; "
                                  "not written by picpac (picpac export --to hdf5)")
            self.metadata = _json_attribute(_read_attribute(h5py, f, "picpac_metadata", file_size, self.path),
                                            self.path)
            fields = self.metadata["fields"]
            datasets = {"label": (f["label"], "fiu"), "group": (f["group"], "iu"), "meta": (f["meta"], "text")}
            datasets |= {f"fields/{name}": (f["fields"][name], "bytes") for name in fields}
            datasets |= {f"present/{name}": (f["present"][name], "b") for name in fields}
        except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
            raise CorruptError(f"{self.path}: damaged picpac HDF5 layout ({exc})") from None
        self._count = _check_datasets(h5py, datasets, file_size, self.path)
        self.labels = f["label"][:]
        self.groups = f["group"][:]
        self._meta = f["meta"]
        self.datasets = {name: f["fields"][name] for name in fields}
        self._present = {name: f["present"][name][:] for name in fields}
        self._lengths = {name: _Lengths(h5py, dataset, name, self._count, file_size, self.path)
                         for name, (dataset, kind) in datasets.items() if kind in ("bytes", "text")}

    def _read(self, i: int) -> Record:
        try:
            fields = {}
            for name, dataset in self.datasets.items():
                if self._present[name][i]:
                    self._lengths[f"fields/{name}"].check(i)
                    fields[name] = memoryview(dataset[i])
            self._lengths["meta"].check(i)
            meta = self._meta[i]
        except (OSError, ValueError) as exc:
            raise corrupt_error(self.path, i, f"cannot be read ({exc})") from None
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


def _read_attribute(h5py, f, name: str, file_size: int, path: str) -> object:
    """The root's attribute ``name``, once its declared size (elements x element size) fits in the file:
    a damaged dataspace would otherwise have h5py allocate that size before reading."""
    try:
        attribute = h5py.h5a.open(f.id, name.encode())
        nbytes = math.prod(attribute.shape) * attribute.get_type().get_size()
    except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
        raise CorruptError(f"{path}: damaged picpac HDF5 layout: its {name} attribute cannot be read ({exc})") from None
    if nbytes > file_size:
        raise CorruptError(f"{path}: its {name} attribute declares {attribute.shape} elements "
                           f"({nbytes:,} bytes) in a file of {file_size:,} bytes")
    return f.attrs[name]


def _json_attribute(value: object, path: str) -> object:
    """The picpac_metadata attribute (a JSON string) parsed."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise CorruptError(f"{path}: its picpac_metadata attribute is a {type(value).__name__}, not a JSON string")
    return load_json(value, lambda why: CorruptError(f"{path}: its picpac_metadata attribute is not JSON ({why})"))


MAX_RATIO = 1032
"""The most a filtered (compressed) dataset may expand over its stored bytes: deflate's limit (picpac
writes no filters; a store recompressed with ``h5repack -f GZIP`` stays within it). A dataset claiming
more is damaged (or a decompression bomb)."""


def _check_datasets(h5py, datasets: dict, file_size: int, path: str) -> int:
    """The record count, once every dataset is 1-D of that length with elements of its kind (NumPy dtype
    kinds, "bytes": variable-length uint8, "text": strings), and holds its elements in the file
    (:func:`_check_storage`). A count beyond the file's size (a damaged shape) is refused before an
    array of that length is read."""
    count = None
    for name, (dataset, kind) in datasets.items():
        if not isinstance(dataset, h5py.Dataset):
            raise CorruptError(f"{path}: {name} is a {type(dataset).__name__}, not a dataset")
        dtype = dataset.dtype
        if kind == "bytes":
            ok = h5py.check_vlen_dtype(dtype) == np.uint8
        elif kind == "text":
            ok = h5py.check_string_dtype(dtype) is not None
        else:
            ok = dtype.kind in kind
        if not ok or len(dataset.shape) != 1:
            raise CorruptError(f"{path}: dataset {name} holds {dtype} of shape {dataset.shape}, not what the "
                               "picpac HDF5 layout has there")
        if count is None:
            count = dataset.shape[0]
        elif dataset.shape[0] != count:
            raise CorruptError(f"{path}: datasets of different lengths ({name}: {dataset.shape[0]}, label: {count})")
    if count > file_size:
        raise CorruptError(f"{path}: datasets of {count:,} records in a file of {file_size:,} bytes")
    for name, (dataset, _) in datasets.items():
        _check_storage(h5py, dataset, name, count, file_size, path)
    return count


def _check_storage(h5py, dataset, name: str, count: int, file_size: int, path: str) -> None:
    """Dataset ``name`` of ``count`` elements holds them in this file, so reading it whole (the labels,
    groups and presence flags are) allocates no more than the file can hold:

    - its data lies in the file: no external files, not a virtual dataset (a picpac store has neither,
      and they would read other files);
    - the bytes libhdf5 says it stores (its allocated chunks) fit in the file;
    - unfiltered (as picpac writes it), it stores at least count x element size bytes: every chunk was
      written, while a damaged or crafted shape with unwritten chunks would read as fill values;
    - filtered (compressed), its elements and its chunk expand at most :data:`MAX_RATIO` times over
      the stored bytes.
    """
    try:
        plist = dataset.id.get_create_plist()
        layout = plist.get_layout()
        outside = layout not in (h5py.h5d.COMPACT, h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED) or plist.get_external_count()
        filtered = layout == h5py.h5d.CHUNKED and plist.get_nfilters() > 0
        element = dataset.id.get_type().get_size()
        stored = dataset.id.get_storage_size()
    except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
        raise CorruptError(f"{path}: dataset {name}'s storage cannot be read ({exc})") from None
    if outside:
        raise CorruptError(f"{path}: dataset {name} keeps its data outside the file (external or virtual "
                           "storage), not what the picpac HDF5 layout has there")
    if stored > file_size:
        raise CorruptError(f"{path}: dataset {name} claims {stored:,} bytes of storage in a file of "
                           f"{file_size:,} bytes")
    if count == 0:
        return
    declared = count * element
    chunk = math.prod(dataset.chunks) * element if dataset.chunks else 0
    most = stored * MAX_RATIO if filtered else stored
    if declared > most or chunk > most:
        what = (f"{count:,} elements of {element} bytes ({declared:,} bytes)" if declared > most
                else f"chunks of {chunk:,} bytes")
        raise CorruptError(f"{path}: dataset {name} declares {what} but stores {stored:,} bytes"
                           + (f" (compressed: more than {MAX_RATIO}:1)" if filtered else "")
                           + "; a damaged shape or chunk layout")


_VLEN_FILTERS = {1: "deflate", 2: "shuffle"}
"""Filters whose output :class:`_Lengths` undoes (what ``h5repack -f GZIP / SHUF`` adds; libhdf5 puts no
fletcher32 on a variable-length dataset)."""
_MOST_ELEMENT = 4 + 32 + 4
"""The most bytes a stored variable-length element takes: a u32 length, a global heap ID (an address
of up to 32 bytes, a u32 index)."""
_MOST_CHUNK = 64 << 20
"""The most bytes of stored elements a chunk of a variable-length dataset may take (picpac writes 64 or
256 elements a chunk, 1 or 4 KiB): each read of a record reads its chunk's elements to check a length."""


class _Lengths:
    """The stored length of each element of a variable-length dataset (``fields/<name>``, ``meta``),
    checked before the element is read: libhdf5 allocates (and zeroes) an element's declared length,
    up to 4 GiB, before it finds that the global heap holds less. A stored element is a u32 length
    (little-endian) and a global heap ID, read here from the raw chunk (filters undone) or the
    contiguous data; the length must fit in the file."""

    def __init__(self, h5py, dataset, name: str, count: int, file_size: int, path: str):
        self.dataset, self.name, self.file_size, self.path = dataset, name, file_size, path
        self.offset = self.chunk = self._buffer = None
        self._cached: tuple[int | None, bytes | None, int] = (None, None, 0)
        if count == 0:
            return
        try:
            plist = dataset.id.get_create_plist()
            layout = plist.get_layout()
            self.filters = [plist.get_filter(k)[:3] for k in range(plist.get_nfilters())]
            if layout == h5py.h5d.CONTIGUOUS:
                self.offset, stored = dataset.id.get_offset(), dataset.id.get_storage_size()
        except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
            raise CorruptError(f"{path}: dataset {name}'s storage cannot be read ({exc})") from None
        unknown = [code for code, _, _ in self.filters if code not in _VLEN_FILTERS]
        if layout == h5py.h5d.CHUNKED and not unknown and dataset.chunks[0] * _MOST_ELEMENT <= _MOST_CHUNK:
            self.chunk = dataset.chunks[0]
        elif layout == h5py.h5d.CONTIGUOUS and self.offset is not None and stored % count == 0 \
                and 4 + 2 + 4 <= stored // count <= _MOST_ELEMENT:
            self.element = stored // count
        else:
            how = (f"filter {unknown[0]}" if unknown else f"chunks of {dataset.chunks[0]:,} elements"
                   if layout == h5py.h5d.CHUNKED else {h5py.h5d.COMPACT: "compact layout"}.get(layout, "its layout"))
            raise CorruptError(f"{path}: dataset {name} is stored with {how}; picpac reads variable-length "
                               "datasets chunked (unfiltered, or with deflate and shuffle; up to "
                               f"{_MOST_CHUNK // _MOST_ELEMENT:,} elements a chunk) or contiguous, where each "
                               "element's size is checked before it is read")

    def check(self, i: int) -> None:
        """A CorruptError naming record i unless its element's stored length fits in the file."""
        if self.offset is not None:
            with open(self.path, "rb") as f:
                f.seek(self.offset + i * self.element)
                raw, at = f.read(4), 0
        elif self.chunk is not None:
            k = i // self.chunk
            if self._cached[0] != k:
                self._cached = (k, *self._read_chunk(k))
            _, raw, element = self._cached
            if raw is None:  # never written: fill values (empty elements)
                return
            at = i % self.chunk * element
        else:
            return
        if len(raw) < at + 4:
            raise corrupt_error(self.path, i, f"cannot be read (dataset {self.name} ends before its element)")
        length = int.from_bytes(raw[at:at + 4], "little")
        if length > self.file_size:
            raise corrupt_error(self.path, i, f"has an element of dataset {self.name} of {length:,} bytes in a "
                                              f"file of {self.file_size:,} bytes")

    def _read_chunk(self, k: int) -> tuple[bytes | None, int]:
        """Chunk k's stored elements, filters undone, and the size of one (None: never written, so fill
        values). Read into a buffer of the most a chunk of stored elements takes: a damaged chunk size is
        refused, not allocated."""
        most = self.chunk * _MOST_ELEMENT
        if self._buffer is None:
            self._buffer = bytearray(2 * most + 64 if self.filters else most)
        try:
            mask, data = self.dataset.id.read_direct_chunk((k * self.chunk,), out=self._buffer)
        except RuntimeError as exc:
            if "not allocated" in str(exc):
                return None, 0
            raise CorruptError(f"{self.path}: chunk {k} of dataset {self.name} cannot be read ({exc})") from None
        except ValueError as exc:  # more bytes than the buffer holds
            raise CorruptError(f"{self.path}: chunk {k} of dataset {self.name} is too large ({exc})") from None
        data = bytes(data)
        for index in reversed(range(len(self.filters))):
            code, _, values = self.filters[index]
            if mask & (1 << index):
                continue
            if code == 1:
                try:
                    data = zlib.decompressobj().decompress(data, most + 1)
                except zlib.error as exc:
                    raise CorruptError(f"{self.path}: chunk {k} of dataset {self.name} does not inflate "
                                       f"({exc})") from None
            elif code == 2 and values and values[0] > 1:
                size, n = values[0], len(data) // values[0]
                data = np.frombuffer(data, np.uint8, size * n).reshape(size, n).T.tobytes() + data[size * n:]
        element, extra = divmod(len(data), self.chunk)
        if extra or not 4 + 2 + 4 <= element <= _MOST_ELEMENT:
            raise CorruptError(f"{self.path}: chunk {k} of dataset {self.name} holds {len(data):,} bytes, not "
                               f"{self.chunk} stored elements")
        return data, element
