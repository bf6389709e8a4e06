"""HDF5: one variable-length uint8 dataset per field, read lazily (needs the ``h5py`` package)."""
from __future__ import annotations

import json
import os

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
    record i's elements of each field dataset and nothing else. Dataset types and lengths are checked
    at open; damage past libhdf5's own checks can crash it or make it loop:
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
        try:
            if "picpac_store" not in f.attrs:
                raise FormatError(f"{self.path}: an HDF5 file without the picpac_store attribute; "
                                  "not written by picpac (picpac export --to hdf5)")
            self.metadata = _json_attribute(f.attrs["picpac_metadata"], self.path)
            fields = self.metadata["fields"]
            datasets = {"label": (f["label"], "fiu"), "group": (f["group"], "iu"), "meta": (f["meta"], "text")}
            datasets |= {f"fields/{name}": (f["fields"][name], "bytes") for name in fields}
            datasets |= {f"present/{name}": (f["present"][name], "b") for name in fields}
        except (KeyError, ValueError, TypeError, OSError, RuntimeError) as exc:
            raise CorruptError(f"{self.path}: damaged picpac HDF5 layout ({exc})") from None
        self._count = _check_datasets(h5py, datasets, os.path.getsize(self.path), self.path)
        self.labels = f["label"][:]
        self.groups = f["group"][:]
        self._meta = f["meta"]
        self.datasets = {name: f["fields"][name] for name in fields}
        self._present = {name: f["present"][name][:] for name in fields}

    def _read(self, i: int) -> Record:
        try:
            fields = {name: memoryview(dataset[i]) for name, dataset in self.datasets.items()
                      if self._present[name][i]}
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


def _json_attribute(value: object, path: str) -> object:
    """The picpac_metadata attribute (a JSON string) parsed."""
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise CorruptError(f"{path}: its picpac_metadata attribute is a {type(value).__name__}, not a JSON string")
    return load_json(value, lambda why: CorruptError(f"{path}: its picpac_metadata attribute is not JSON ({why})"))


def _check_datasets(h5py, datasets: dict, file_size: int, path: str) -> int:
    """The record count, once every dataset is 1-D of that length with elements of its kind (NumPy dtype
    kinds, "bytes": variable-length uint8, "text": strings). A count beyond the file's size (a damaged
    shape) is refused before an array of that length is read."""
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
    return count
