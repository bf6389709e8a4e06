"""Serializers: write a DataFlow to a file and read it back as one.

Each has ``save(df, path, ...)`` (it calls ``df.reset_state()`` and writes one pass) and ``load(path, ...)``
(a DataFlow). Datapoints are stored with :mod:`.codec`, whose every value records its format; the
readers also read tensorpack's msgpack values when ``msgpack`` is installed.

* :class:`PicPacSerializer`: a picpac database (whole datapoints, or one field per component);
* :class:`LMDBSerializer`: keys ``'00000000'``... and a ``__keys__`` entry, as tensorpack writes them;
* :class:`TFRecordSerializer`: a TFRecord file, written and read by picpac itself (TensorFlow is not
  needed; the CRC32C checksums are TFRecord's own, so TensorFlow reads the file too);
* :class:`NumpySerializer`: one ``.npz`` holding the datapoints in an object array (in memory);
* :class:`HDF5Serializer`: one HDF5 dataset per component (in memory).
"""
from __future__ import annotations

import os
import struct
import sys
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import CorruptError, PicPacTypeError, PicPacValueError
from ...file.layout import ArraySpec
from ...file.writer import Writer
from ...stores import crc32c, masked_crc32c, tfrecord_frame
from . import codec
from .base import DataFlow, optional_import
from .format import DATAPOINT_FIELD, KEYS, META_KEY, SPECIAL, HDF5Data, LMDBData, LMDBDataPoint, PicPacData
from .raw import DataFromList

__all__ = ["LMDBSerializer", "NumpySerializer", "TFRecordSerializer", "HDF5Serializer", "PicPacSerializer",
           "TFRecordData", "crc32c"]


def _reset_and_size(df: Any) -> int:
    if not isinstance(df, DataFlow) and not (hasattr(df, "reset_state") and hasattr(df, "__iter__")):
        raise PicPacTypeError(f"expected a DataFlow, got {type(df).__name__}")
    df.reset_state()
    if not hasattr(df, "__len__"):  # a duck-typed flow of unknown length
        return 0
    try:
        return len(df)
    except NotImplementedError:
        return 0


def _bar(total: int, what: str) -> Any:
    from tqdm import tqdm
    return tqdm(total=total or None, desc=what, leave=False, disable=None)


# -- picpac ------------------------------------------------------------------------------------------------
class PicPacSerializer:
    """A DataFlow to a picpac database and back.

    ``fields=None`` stores each whole datapoint (serialised, its format recorded) in one record; it
    comes back as it was. ``fields=["image", "label"]`` names each component instead: ``"label"`` (a
    number) and ``"group"`` (an int) go to the index, where picpac's samplers and splits use them;
    bytes are stored as they are (an encoded ``"image"`` is decoded when read back); arrays are stored
    raw and declared in the metadata, so every datapoint's array in that component has the first one's
    shape and dtype (and ``ImageStream`` can read an ``"image"`` array field on its batch path).
    """

    @staticmethod
    def save(df: DataFlow, path: str | os.PathLike, fields: list | None = None, *, format: str | None = None,
             overwrite: bool = False) -> int:
        """Write one pass of ``df``; returns the number of records. An existing ``path`` is replaced only with
        ``overwrite=True`` (else :class:`picpac.PathExistsError`)."""
        fmt = codec.check_format(format)
        size = _reset_and_size(df)
        if fields is not None:
            fields = list(fields)
            if len(set(fields)) != len(fields) or any(not isinstance(f, str) or not f for f in fields):
                raise PicPacValueError(f"fields must be distinct non-empty names, got {fields}")
        it = iter(df)
        first = next(it, None)
        meta: dict[str, Any] = {META_KEY: {"fields": fields, "format": fmt}}
        if fields is not None and first is not None:
            if len(first) != len(fields):
                raise PicPacValueError(f"the datapoints have {len(first)} components, fields names {len(fields)}")
            arrays = {name: ArraySpec(np.shape(value), np.asarray(value).dtype).to_json()
                      for name, value in zip(fields, first)
                      if name not in SPECIAL and isinstance(value, (np.ndarray, np.generic))}
            if arrays:
                meta["arrays"] = arrays
        count = 0
        with Writer(path, overwrite=overwrite, metadata=meta) as writer, _bar(size, f"writing {os.fspath(path)}") as bar:
            for dp in ([first] if first is not None else []):
                PicPacSerializer._append(writer, dp, fields, fmt)
                count += 1
                bar.update()
            for dp in it:
                PicPacSerializer._append(writer, dp, fields, fmt)
                count += 1
                bar.update()
        return count

    @staticmethod
    def _append(writer: Writer, dp: Any, fields: list | None, fmt: str) -> None:
        if fields is None:
            writer.append({DATAPOINT_FIELD: codec.dumps(dp, fmt)})
            return
        if len(dp) != len(fields):
            raise PicPacValueError(f"a datapoint has {len(dp)} components, fields names {len(fields)}")
        stored, label, group = {}, 0.0, None
        for name, value in zip(fields, dp):
            if name == "label":
                label = float(value)
            elif name == "group":
                group = None if value is None else int(value)
            elif name in ("index", "meta"):
                raise PicPacValueError(f"{name!r} is read from the index; it cannot be written as a field")
            elif isinstance(value, (bytes, bytearray, memoryview, np.ndarray, np.generic)):
                stored[name] = np.ascontiguousarray(value) if isinstance(value, np.generic) else value
            elif isinstance(value, str):
                stored[name] = value.encode()
            else:
                raise PicPacTypeError(f"component {name!r} is a {type(value).__name__}: store bytes or arrays in "
                                      "fields (or fields=None to store whole datapoints)")
        writer.append(stored, label=label, group=group)

    @staticmethod
    def load(path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None, **kwargs: Any) -> PicPacData:
        return PicPacData(path, shuffle=shuffle, seed=seed, **kwargs)


# -- LMDB ----------------------------------------------------------------------------------------------
class LMDBSerializer:
    """A DataFlow to an LMDB database (``path`` a directory, or a file) and back: keys ``'{:08}'`` of the
    index, values the serialised datapoints, and ``__keys__`` listing the keys."""

    @staticmethod
    def save(df: DataFlow, path: str | os.PathLike, write_frequency: int = 5000, *, format: str | None = None) -> int:
        lmdb = optional_import("lmdb", "LMDBSerializer")
        fmt = codec.check_format(format)
        path = os.fspath(path)
        isdir = os.path.isdir(path)
        if (isdir and os.path.isfile(os.path.join(path, "data.mdb"))) or (not isdir and os.path.isfile(path)):
            raise PicPacValueError(f"{path}: an LMDB database is already there; remove it or choose another path")
        size = _reset_and_size(df)
        map_size = 1 << 40 if sys.platform.startswith("linux") else 128 << 20  # sparse on Linux
        env = lmdb.open(path, subdir=isdir, map_size=map_size, readonly=False, meminit=False, map_async=True)
        try:
            txn = env.begin(write=True)

            def put(txn: Any, key: bytes, value: bytes) -> Any:
                """Put, doubling the map when it is full (and redoing the aborted transaction's puts)."""
                while True:
                    try:
                        txn.put(key, value)
                        return txn
                    except lmdb.MapFullError:
                        txn.abort()
                        env.set_mapsize(env.info()["map_size"] * 2)
                        txn = env.begin(write=True)
                        for k, v in list(pending):
                            txn = put(txn, k, v)

            pending: list = []  # this transaction's puts, to redo after growing the map
            count = 0
            with _bar(size, f"writing {path}") as bar:
                for count, dp in enumerate(df, 1):
                    key, value = f"{count - 1:08}".encode("ascii"), codec.dumps(dp, fmt)
                    txn = put(txn, key, value)
                    pending.append((key, value))
                    bar.update()
                    if count % int(write_frequency) == 0:
                        txn.commit()
                        pending = []
                        txn = env.begin(write=True)
                keys = [f"{k:08}".encode("ascii") for k in range(count)]
                txn = put(txn, KEYS, codec.dumps([np.array(keys, bytes)], "arrays"))
                txn.commit()
            env.sync()
        finally:
            env.close()
        return count

    @staticmethod
    def load(path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None,
             unpickle: bool = False) -> LMDBDataPoint:
        """Deserialisation runs in the consumer; to run it on workers, map ``LMDBData`` with
        ``codec.loads`` in a parallel map. A file tensorpack's own ``LMDBSerializer.save`` wrote holds pickles
        (since tensorpack 0.10): read with ``unpickle=True`` only where the file is trusted (unpickling runs
        code); without it, its first datapoint is a WireFormatError that says so."""
        return LMDBDataPoint(LMDBData(path, shuffle=shuffle, seed=seed), unpickle=unpickle)


# -- NumPy ---------------------------------------------------------------------------------------------
class NumpySerializer:
    """A DataFlow to one compressed ``.npz`` (the datapoints in an object array, so loading unpickles it: ``load``
    needs ``unpickle=True``, for files you trust) and back; the whole flow is held in memory."""

    @staticmethod
    def save(df: DataFlow, path: str | os.PathLike) -> int:
        size = _reset_and_size(df)
        with _bar(size, f"writing {os.fspath(path)}") as bar:
            buffer = []
            for dp in df:
                buffer.append(dp)
                bar.update()
        array = np.empty(len(buffer), object)
        for i, dp in enumerate(buffer):
            array[i] = dp
        np.savez_compressed(path, buffer=array)
        return len(buffer)

    @staticmethod
    def load(path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None,
             unpickle: bool = False) -> DataFromList:
        if not unpickle:
            raise codec.WireFormatError(f"{os.fspath(path)}: NumpySerializer stores its datapoints pickled in an object "
                                        "array; unpickling runs code, so it is refused unless asked for: "
                                        "NumpySerializer.load(path, unpickle=True), for a file you trust")
        buffer = np.load(path, allow_pickle=unpickle)["buffer"]
        items = [list(x) if isinstance(x, np.ndarray) and x.dtype == object else x for x in buffer]
        return DataFromList(items, shuffle=shuffle, seed=seed)


# -- HDF5 ----------------------------------------------------------------------------------------------
class HDF5Serializer:
    """A DataFlow to an HDF5 file, component k of every datapoint into dataset ``data_paths[k]``, and back
    (held in memory on both sides)."""

    @staticmethod
    def save(df: DataFlow, path: str | os.PathLike, data_paths: list) -> int:
        h5py = optional_import("h5py", "HDF5Serializer")
        size = _reset_and_size(df)
        buffer: dict[str, list] = defaultdict(list)
        count = 0
        with _bar(size, f"reading {type(df).__name__}") as bar:
            for count, dp in enumerate(df, 1):
                if len(dp) != len(data_paths):
                    raise PicPacValueError(f"a datapoint has {len(dp)} components, data_paths names {len(data_paths)}")
                for k, value in zip(data_paths, dp):
                    buffer[k].append(value)
                bar.update()
        with h5py.File(os.fspath(path), "w") as f:
            for k in data_paths:
                f.create_dataset(k, data=np.asarray(buffer[k]))
        return count

    @staticmethod
    def load(path: str | os.PathLike, data_paths: list, shuffle: bool = True, *, seed: int | None = None) -> HDF5Data:
        return HDF5Data(path, data_paths, shuffle, seed=seed)


# -- TFRecord (framing and CRC32C from picpac.stores) --------------------------------------------------
def write_tfrecord(f: Any, data: bytes) -> None:
    f.write(tfrecord_frame(data))


def _record_size(f: Any, path: str, index: int, end: int) -> int | None:
    """The data size in the head of record ``index``, read from ``f`` (a file of ``end`` bytes), its CRC checked
    and the record checked to fit in the file (None at the end)."""
    head = f.read(12)
    if not head:
        return None
    if len(head) < 12:
        raise CorruptError(f"{path}: record {index} is truncated")
    length, crc = head[:8], struct.unpack("<I", head[8:])[0]
    if masked_crc32c(length) != crc:
        raise CorruptError(f"{path}: record {index} has a damaged length (not a TFRecord file?)")
    (size,) = struct.unpack("<Q", length)
    if f.tell() + size + 4 > end:  # checked before reading or seeking: a length can be up to 2**64 - 1
        raise CorruptError(f"{path}: record {index} is truncated")
    return size


def read_tfrecords(path: str, check: bool = True) -> Iterator[bytes]:
    """The records of a TFRecord file, checking its CRCs (the data's when ``check``)."""
    with open(path, "rb") as f:
        index, end = 0, os.fstat(f.fileno()).st_size
        while (size := _record_size(f, path, index, end)) is not None:
            data = f.read(size)
            tail = f.read(4)
            if len(data) < size or len(tail) < 4:
                raise CorruptError(f"{path}: record {index} is truncated")
            if check and masked_crc32c(data) != struct.unpack("<I", tail)[0]:
                raise CorruptError(f"{path}: record {index} fails its CRC32C (damaged bytes)")
            yield data
            index += 1


class TFRecordData(DataFlow):
    """The datapoints of a TFRecord file written by :class:`TFRecordSerializer` (or tensorpack's, with
    ``msgpack`` installed). It can be iterated again; ``len()`` is ``size`` when given, else the count of
    records (found by reading their heads once)."""

    def __init__(self, path: str | os.PathLike, size: int | None = None, *, check: bool = True,
                 unpickle: bool = False):
        self.path = os.fspath(path)
        self.unpickle = bool(unpickle)
        if not os.path.isfile(self.path):
            from ...errors import MissingPathError
            raise MissingPathError(f"{self.path}: no such file")
        self._size, self.check = size, check

    def __len__(self) -> int:
        if self._size is None:
            count = 0
            with open(self.path, "rb") as f:
                end = os.fstat(f.fileno()).st_size
                while (size := _record_size(f, self.path, count, end)) is not None:
                    f.seek(size + 4, os.SEEK_CUR)
                    count += 1
            self._size = count
        return int(self._size)

    def __iter__(self) -> Iterator:
        return (codec.loads(record, unpickle=self.unpickle) for record in read_tfrecords(self.path, self.check))


class TFRecordSerializer:
    """A DataFlow to a TFRecord file (each record one serialised datapoint) and back, without TensorFlow."""

    @staticmethod
    def save(df: DataFlow, path: str | os.PathLike, *, format: str | None = None) -> int:
        fmt = codec.check_format(format)
        size = _reset_and_size(df)
        count = 0
        with open(os.fspath(path), "wb") as f, _bar(size, f"writing {os.fspath(path)}") as bar:
            for count, dp in enumerate(df, 1):
                write_tfrecord(f, codec.dumps(dp, fmt))
                bar.update()
        return count

    @staticmethod
    def load(path: str | os.PathLike, size: int | None = None, *, check: bool = True,
             unpickle: bool = False) -> TFRecordData:
        """``size``: the number of records, for ``len()`` (counted from the file when not given); ``unpickle``
        reads datapoints saved with ``format='pickle5'`` (for files you trust)."""
        return TFRecordData(path, size, check=check, unpickle=unpickle)
