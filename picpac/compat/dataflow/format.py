"""DataFlows that read stored formats: picpac files, LMDB, HDF5, Caffe LMDB, svmlight.

``lmdb`` and ``h5py`` are imported when a flow needs them; without them the error names
``pip install 'picpac[formats]'``.
"""
from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ...errors import ImageTooLargeError, MissingPathError, PicPacValueError, SampleError
from ...file.reader import Reader
from ...image.decoding import MAX_PIXELS, decode_channels
from ...stores import read_varint
from . import codec
from .base import DataFlowReentrantGuard, RNGDataFlow, optional_import
from .common import MapData

__all__ = ["HDF5Data", "LMDBData", "LMDBDataDecoder", "LMDBDataPoint", "CaffeLMDB", "SVMLightData", "PicPacData"]

KEYS = b"__keys__"
DATAPOINT_FIELD = "datapoint"
META_KEY = "dataflow"
SPECIAL = ("label", "group", "index", "meta")


def _exists(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise MissingPathError(f"{path}: no such file or directory")
    return path


# -- picpac ------------------------------------------------------------------------------------------------
class PicPacData(RNGDataFlow):
    """The records of a picpac database as datapoints.

    ``fields`` names the components: ``"label"``, ``"group"``, ``"index"`` and ``"meta"`` come from the
    index and the record's meta; any other name is a stored field: a declared array field (docs/arrays.md)
    as a read-only NumPy view, ``"image"`` decoded to an ``(H, W, channels)`` uint8 RGB array when
    ``decode`` is true, any other field as ``bytes``. The default is what the file was written with by
    :class:`~picpac.dataflow.PicPacSerializer` (a database it wrote with ``fields=None`` holds whole
    datapoints, which come back as they were), else ``("image", "label")``. ``shuffle=True`` gives a new
    random order each pass. An image over ``max_pixels`` (None or 0: no limit) is a SampleError, found
    from its header before decoding. Whole datapoints stored as pickles (``format='pickle5'``) are read only with
    ``unpickle=True`` (unpickling runs code: for files you trust).
    """

    def __init__(self, path: str | os.PathLike, fields: Any = None, shuffle: bool = True, *, decode: bool = True,
                 channels: int = 3, check: bool = True, seed: int | None = None,
                 max_pixels: int | None = MAX_PIXELS, unpickle: bool = False):
        super().__init__()
        self.path = os.fspath(path)
        self.unpickle = bool(unpickle)
        self.reader = Reader(self.path, check=check)
        recorded = self.reader.metadata.get(META_KEY) or {}
        empty = len(self.reader) == 0  # a database's fields are those its records hold: an empty one has none
        self.generic = (fields is None and recorded.get("fields", ()) is None
                        and (DATAPOINT_FIELD in self.reader.fields or empty))
        if fields is None:
            fields = recorded.get("fields") or ("image", "label")
        self.fields = None if self.generic else list(fields)
        for name in self.fields or ():
            if name not in SPECIAL and name not in self.reader.fields and not empty:
                raise PicPacValueError(f"{self.path}: has no field {name!r}; its fields are {self.reader.fields} "
                                       f"(and {', '.join(SPECIAL)} from the index)")
        if channels not in (1, 3):
            raise PicPacValueError(f"channels must be 1 or 3, got {channels}")
        self.shuffle, self.decode, self.channels, self.seed = bool(shuffle), bool(decode), channels, seed
        self.max_pixels = max_pixels

    def __len__(self) -> int:
        return len(self.reader)

    def _component(self, record: Any, name: str) -> Any:
        if name == "label":
            return record.label
        if name == "group":
            return record.group
        if name == "index":
            return record.index
        if name == "meta":
            return record.meta
        if name in self.reader.arrays:
            return self.reader.array(record.index, name)
        data = record[name]
        if name == "image" and self.decode:
            try:
                img = decode_channels(data, self.channels, rgb=True, max_pixels=self.max_pixels)
            except ImageTooLargeError as exc:
                raise SampleError(self.path, record.index, f"has an image of {exc.advice()}") from None
            if img is None:
                raise SampleError(self.path, record.index, "does not decode as an image")
            return img if img.ndim == 3 else img[:, :, None]
        return data.tobytes()

    def __iter__(self) -> Iterator:
        if self.shuffle:
            self._need_reset(self.rng is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        n = len(self.reader)
        order = self.rng.permutation(n) if self.shuffle else range(n)
        for i in order:
            record = self.reader[int(i)]
            if self.generic:
                yield codec.loads(record[DATAPOINT_FIELD], unpickle=self.unpickle)
            else:
                yield [self._component(record, name) for name in self.fields]

    def close(self) -> None:
        self.reader.close()


# -- HDF5 ----------------------------------------------------------------------------------------------
class HDF5Data(RNGDataFlow):
    """The datasets ``data_paths`` of an HDF5 file, zipped: datapoint k is ``[d[k] for d in datasets]``.
    Every dataset is read into memory when the flow is made (as tensorpack does), and the file closed."""

    def __init__(self, filename: str | os.PathLike, data_paths: list, shuffle: bool = True, *, seed: int | None = None):
        super().__init__()
        h5py = optional_import("h5py", "HDF5Data")
        self.filename = _exists(filename)
        with h5py.File(self.filename, "r") as f:
            missing = [p for p in data_paths if p not in f]
            if missing:
                raise PicPacValueError(f"{self.filename}: has no dataset {missing[0]!r}")
            self.dps = [f[p][()] for p in data_paths]
        lengths = {len(d) for d in self.dps}
        if len(lengths) != 1:
            raise PicPacValueError(f"{self.filename}: the datasets {list(data_paths)} have different lengths "
                                   f"{[len(d) for d in self.dps]}")
        self._size = lengths.pop()
        self.shuffle, self.seed = bool(shuffle), seed

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator:
        if self.shuffle:
            self._need_reset(self.rng is not None)
        order = self.rng.permutation(self._size) if self.shuffle else range(self._size)
        return ([d[k] for d in self.dps] for k in order)


# -- LMDB ----------------------------------------------------------------------------------------------
def open_lmdb(path: str, readonly: bool = True) -> Any:
    lmdb = optional_import("lmdb", "LMDBData / LMDBSerializer")
    return lmdb.open(path, subdir=os.path.isdir(path), readonly=readonly, lock=False, readahead=True,
                     map_size=1 << 40, max_readers=126, meminit=False)


# LMDB refuses to open one environment twice in a process, and a forked child must not use its parent's:
# the flows of one process share one read-only environment per path, and a child forgets the parent's.
_ENVS: dict[str, list] = {}  # real path -> [environment, users]
_ENVS_LOCK = threading.Lock()


def acquire_env(path: str) -> Any:
    key = os.path.realpath(path)
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            entry = _ENVS[key] = [open_lmdb(path), 0]
        entry[1] += 1
        return entry[0]


def release_env(path: str) -> None:
    key = os.path.realpath(path)
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _ENVS[key]
                entry[0].close()


def _forget_parent_envs() -> None:
    global _ENVS_LOCK
    _ENVS_LOCK = threading.Lock()
    for env, _ in _ENVS.values():
        try:
            env.close()  # in the child only: the parent's mapping is its own
        except Exception:  # pragma: no cover
            pass
    _ENVS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_envs)


class LMDBData(RNGDataFlow):
    """The ``[key, value]`` pairs (bytes) of an LMDB database (a directory, or a file).

    With ``shuffle=False`` they come in the database's key order; with ``shuffle=True`` in a new random
    order each pass, which needs the list of keys: ``keys`` (a list, or a format string such as
    ``'{:08}'`` formatted with 0 .. n-1), else the ``__keys__`` entry :class:`LMDBSerializer` writes, else
    a scan of the database. The ``__keys__`` entry itself is never yielded. The database is opened
    again in ``reset_state()``, so each worker process has its own handle.
    """

    def __init__(self, lmdb_path: str | os.PathLike, shuffle: bool = True, keys: Any = None, *,
                 seed: int | None = None):
        super().__init__()
        self._lmdb_path = _exists(lmdb_path)
        self._shuffle, self.seed = bool(shuffle), seed
        env = acquire_env(self._lmdb_path)
        try:
            with env.begin() as txn:
                self._size = txn.stat()["entries"]
                stored = txn.get(KEYS)
                self.keys: list | None = None
                if stored is not None:
                    self._size -= 1
                    self.keys = stored_keys(stored)
                if self._shuffle:
                    if keys is not None:
                        self.keys = ([keys.format(i).encode() for i in range(self._size)] if isinstance(keys, str)
                                     else [k.encode() if isinstance(k, str) else bytes(k) for k in keys])
                    elif self.keys is None:
                        self.keys = [bytes(k) for k, _ in txn.cursor() if k != KEYS]
        finally:
            release_env(self._lmdb_path)
        self._env = self._txn = None
        self._guard = DataFlowReentrantGuard("LMDBData")

    def reset_state(self) -> None:
        super().reset_state()
        self.close()
        self._env = acquire_env(self._lmdb_path)
        self._txn = self._env.begin()

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator:
        self._need_reset(self._txn is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            if not self._shuffle:
                for k, v in self._txn.cursor():
                    if k != KEYS:
                        yield [k, v]
            else:
                for i in self.rng.permutation(len(self.keys)):
                    k = self.keys[i]
                    yield [k, self._txn.get(k)]

    def close(self) -> None:
        env, txn, self._env, self._txn = self._env, self._txn, None, None
        if env is not None:
            try:
                txn.abort()
            except Exception:  # pragma: no cover - the environment went with a fork
                pass
            release_env(self._lmdb_path)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_env"] = state["_txn"] = None  # reopened by reset_state() in the worker
        return state


def stored_keys(value: Any) -> list[bytes] | None:
    """The keys a ``__keys__`` value lists: one bytes array (``LMDBSerializer``), or a list of bytes (tensorpack's,
    as msgpack); None for a value not read without unpickling (tensorpack's pickles), when the keys are scanned."""
    try:
        keys = codec.loads(value)
    except codec.WireFormatError:
        return None
    if len(keys) == 1 and isinstance(keys[0], np.ndarray):
        keys = keys[0]
    return [bytes(k) for k in keys]


class LMDBDataDecoder(MapData):
    """``decoder(key, value)`` on every pair of an :class:`LMDBData`; a ``None`` result drops it."""

    def __init__(self, lmdb_data: LMDBData, decoder: Callable[[bytes, bytes], Any]):
        self._decoder = decoder
        super().__init__(lmdb_data, self._decode)

    def _decode(self, dp: list) -> Any:
        return self._decoder(dp[0], dp[1])


class LMDBDataPoint(MapData):
    """The datapoints an :class:`LMDBSerializer` stored (values deserialised by their recorded format);
    ``unpickle=True`` reads tensorpack's pickled values too (for a file you trust)."""

    def __init__(self, *args: Any, unpickle: bool = False, **kwargs: Any):
        ds = args[0] if args and isinstance(args[0], LMDBData) else LMDBData(*args, **kwargs)
        super().__init__(ds, partial(_value, unpickle=unpickle))


def _value(dp: list, unpickle: bool = False) -> Any:
    return codec.loads(dp[1], unpickle=unpickle)


# -- Caffe LMDB ----------------------------------------------------------------------------------------
def parse_datum(data: Any) -> dict:
    """The fields of a serialised ``caffe.Datum`` protobuf (channels, height, width, data, label,
    float_data, encoded), parsed without protobuf."""
    b = memoryview(data).cast("B")
    out: dict = {"channels": 0, "height": 0, "width": 0, "data": b"", "label": 0, "float_data": [], "encoded": False}
    names = {1: "channels", 2: "height", 3: "width", 5: "label", 7: "encoded"}
    at = 0
    while at < len(b):
        key, at = read_varint(b, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = read_varint(b, at)
            if number in names:
                out[names[number]] = bool(value) if number == 7 else (value - (1 << 64) if value >= 1 << 63 else value)
        elif wire == 2:
            size, at = read_varint(b, at)
            chunk = b[at:at + size]
            at += size
            if number == 4:
                out["data"] = bytes(chunk)
            elif number == 6:
                out["float_data"] += list(struct.unpack(f"<{size // 4}f", chunk))
        elif wire == 5:
            if number == 6:
                out["float_data"].append(struct.unpack_from("<f", b, at)[0])
            at += 4
        elif wire == 1:
            at += 8
        else:
            raise PicPacValueError(f"not a caffe Datum (protobuf wire type {wire})")
    return out


def _caffe_decode(key: bytes, value: bytes, where: str, max_pixels: int | None) -> list | None:
    try:
        datum = parse_datum(value)
        if datum["encoded"]:
            img = decode_channels(datum["data"], -1, rgb=False, max_pixels=max_pixels)
            if img is None:
                return None
            return [img if img.ndim == 3 else img[:, :, None], datum["label"]]
        c, h, w = datum["channels"], datum["height"], datum["width"]
        if datum["data"]:
            img = np.frombuffer(datum["data"], np.uint8).reshape(c, h, w)
        else:
            img = np.asarray(datum["float_data"], np.float32).reshape(c, h, w)
    except ImageTooLargeError as exc:  # an image, not a value that does not parse: not dropped silently
        raise ImageTooLargeError(exc.width, exc.height, exc.limit, f"{where}: key {key!r}") from None
    except (PicPacValueError, ValueError, IndexError, struct.error):
        return None
    return [img.transpose(1, 2, 0), datum["label"]]


def CaffeLMDB(lmdb_path: str | os.PathLike, shuffle: bool = True, keys: Any = None, *,  # noqa: N802
              seed: int | None = None, max_pixels: int | None = MAX_PIXELS) -> LMDBDataDecoder:
    """A Caffe LMDB (each value a ``caffe.Datum``) as ``[HWC image, label]`` datapoints; values that do not
    parse are dropped. Images come as stored (Caffe's BGR); encoded ones are decoded as stored too, and
    one over ``max_pixels`` (None or 0: no limit) raises ImageTooLargeError naming its key."""
    decoder = partial(_caffe_decode, where=os.fspath(lmdb_path), max_pixels=max_pixels)
    return LMDBDataDecoder(LMDBData(lmdb_path, shuffle, keys, seed=seed), decoder)


# -- svmlight ------------------------------------------------------------------------------------------
def load_svmlight(filename: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of an svmlight / libsvm file: ``label index:value ...`` per line, indices from 1 as
    scikit-learn reads them when they start at 1 (from 0 when some index is 0); ``qid:`` is skipped."""
    labels, rows, top, zero = [], [], 0, False
    with open(filename) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                labels.append(float(parts[0]))
                row = {}
                for item in parts[1:]:
                    key, value = item.split(":", 1)
                    if key == "qid":
                        continue
                    row[int(key)] = float(value)
            except ValueError:
                raise PicPacValueError(f"{filename}:{n}: not an svmlight line: {line[:60]!r}") from None
            if row:
                top = max(top, max(row))
                zero = zero or min(row) == 0
            rows.append(row)
    offset = 0 if zero else 1
    X = np.zeros((len(rows), top + 1 - offset), np.float64)
    for i, row in enumerate(rows):
        for k, v in row.items():
            X[i, k - offset] = v
    return X, np.asarray(labels)


class SVMLightData(RNGDataFlow):
    """``[X_i, y_i]`` datapoints of an svmlight file (dense rows), ``shuffle=True`` in a new order each pass.
    Read by picpac's own parser: scikit-learn is not needed."""

    def __init__(self, filename: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None):
        super().__init__()
        self.X, self.y = load_svmlight(_exists(filename))
        self.shuffle, self.seed = bool(shuffle), seed

    def __len__(self) -> int:
        return len(self.y)

    def __iter__(self) -> Iterator:
        if self.shuffle:
            self._need_reset(self.rng is not None)
        order = self.rng.permutation(len(self.y)) if self.shuffle else range(len(self.y))
        return ([self.X[i, :], self.y[i]] for i in order)
