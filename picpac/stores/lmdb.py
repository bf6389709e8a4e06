"""LMDB: an environment directory, keys ``%010d`` -> PPR1 records (needs the ``lmdb`` package); and, to import,
tensorpack's own LMDBs: keys ``%08d`` -> datapoints, pickled (read only when asked to unpickle) or, as tensorpack
wrote them before 0.10, msgpack."""
from __future__ import annotations

import io
import json
import numbers
import os
import pickle

import numpy as np

from ..errors import CorruptError, FormatError, PicPacValueError, SourceError
from ..file.layout import load_json
from ..file.reader import Record
from . import msgpack_values
from .base import StoreReader, StoreWriter, check_regular, corrupt_error, require_package
from .records import decode_record, encode_record


LMDB_META_KEY = b"__picpac__"
TENSORPACK_KEYS = b"__keys__"
"""The entry tensorpack's LMDBSerializer writes beside its ``%08d`` datapoints."""


def _lmdb_key(i: int) -> bytes:
    return b"%010d" % i


class LmdbWriter(StoreWriter):
    """LMDB environment (a directory with ``data.mdb``): key ``%010d`` -> PPR1 record; with ``layout='tensorpack'``
    what tensorpack's ``LMDBSerializer.load`` reads: key ``%08d`` -> the pickled datapoint ``[field values...,
    label]`` (the label an int when it is whole), and ``__keys__`` (the dataset's metadata is not kept)."""

    kind = "lmdb"
    directory = True
    _BATCH_BYTES = 64 << 20
    _MAP_SIZE = 1 << 30  # the first map size; doubled whenever the map is full
    LAYOUTS = ("picpac", "tensorpack")

    def __init__(self, path: str | os.PathLike, *, metadata: dict | None = None, sync: bool = True,
                 layout: str = "picpac"):
        if layout not in self.LAYOUTS:
            raise PicPacValueError(f"{path}: LMDB layout {layout!r}: use one of {', '.join(self.LAYOUTS)}")
        self.layout = layout
        super().__init__(path, metadata=metadata, sync=sync)

    def _start(self) -> None:
        lmdb = require_package("lmdb", "lmdb")
        self._lmdb = lmdb
        self._map_size = self._MAP_SIZE
        # meminit stays on: without it the unused ends of pages carry whatever this process's heap held
        self._env = lmdb.open(self._temp, map_size=self._map_size, subdir=True, lock=False, sync=False,
                              metasync=False)
        self._batch: list[tuple[bytes, bytes]] = []
        self._batch_bytes = 0

    def _write(self, index, fields, label, group, meta) -> None:
        if self.layout == "tensorpack":
            whole = float(label).is_integer() and abs(label) < 2**63
            key = b"%08d" % index
            value = pickle.dumps([*(bytes(v) for v in fields.values()), int(label) if whole else label], protocol=-1)
        else:
            key, value = _lmdb_key(index), encode_record(fields, label, group, meta)
        self._batch.append((key, value))
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
        if self.layout == "tensorpack":  # tensorpack's reader would yield any other entry as a datapoint
            self._batch.append((TENSORPACK_KEYS, pickle.dumps([b"%08d" % k for k in range(self._count)],
                                                              protocol=-1)))
        else:
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
    lmdb = require_package("lmdb", "lmdb")
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
        data = os.path.join(path, "data.mdb") if os.path.isdir(path) else path
        if os.path.lexists(data):  # (a FIFO would block lmdb's open; a missing data.mdb is lmdb's error)
            check_regular(data, "lmdb")
        try:
            env = lmdb.open(path, readonly=True, lock=False, subdir=os.path.isdir(path), max_readers=1024)
        except lmdb.Error as exc:
            raise FormatError(f"{path}: not an LMDB store ({exc})") from None
        # a page past the end of a truncated file would be a SIGBUS when mapped: check the size first
        try:
            needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        except lmdb.Error as exc:
            env.close()
            raise CorruptError(f"{path}: damaged LMDB store ({exc})") from None
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
    """Reads an LMDB store; a damaged page is liblmdb's error (a CorruptError here) or, past its checks,
    a crash: :func:`picpac.stores.import_store` reads LMDB stores in a child process."""

    kind = "lmdb"

    def __init__(self, path: str | os.PathLike, *, check: bool = True, unpickle: bool = False):
        self.unpickle, self._tensorpack = unpickle, False
        super().__init__(path, check=check)

    def _open(self) -> None:
        self._damage = (*StoreReader._damage, require_package("lmdb", "lmdb").Error)
        self._env = _lmdb_env(self.path)
        self._txn = self._env.begin(buffers=False)
        raw = self._txn.get(LMDB_META_KEY)
        if raw is None and (self._txn.get(TENSORPACK_KEYS) is not None or self._txn.get(b"%08d" % 0) is not None):
            self._open_tensorpack()
            return
        if raw is None:
            raise FormatError(f"{self.path}: an LMDB store without the {LMDB_META_KEY.decode()} key; "
                              "not written by picpac (picpac export --to lmdb) nor by tensorpack")
        damaged = f"{self.path}: damaged {LMDB_META_KEY.decode()} entry"
        info = load_json(raw, lambda why: CorruptError(f"{damaged} ({why})"))
        try:
            self.metadata, self._count = info["metadata"], int(info["count"])
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise CorruptError(f"{damaged} ({exc})") from None
        if info.get("serialisation") != "PPR1":
            raise FormatError(f"{self.path}: records serialised as {info.get('serialisation')!r}; "
                              "this picpac reads PPR1")

    def _open_tensorpack(self) -> None:
        """tensorpack's LMDBSerializer layout: its values are pickles, read only with ``unpickle``, or msgpack (as
        its first datapoint shows)."""
        first = self._txn.get(b"%08d" % 0)
        if first is not None and msgpack_values.is_pickle(first) and not self.unpickle:
            raise FormatError(f"{self.path}: a tensorpack LMDB (its datapoints pickled, as tensorpack's "
                              "LMDBSerializer.save writes them); unpickling runs code, so it is read only when asked "
                              "to: picpac import --from lmdb --unpickle (import_store(..., unpickle=True)), for a "
                              "file you trust")
        self._tensorpack = True
        self._count = self._env.stat()["entries"] - (self._txn.get(TENSORPACK_KEYS) is not None)
        self.metadata = {"source": f"tensorpack lmdb {self.path}"}

    def _read(self, i: int) -> Record:
        if self._tensorpack:
            return self._read_tensorpack(i)
        value = self._txn.get(_lmdb_key(i))
        if value is None:
            raise corrupt_error(self.path, i, f"is missing (no key {_lmdb_key(i).decode()})")
        fields, label, group, meta = decode_record(value, self.path, i, self.check)
        return self._record(i, fields, label, group, meta)

    def _read_tensorpack(self, i: int) -> Record:
        """A tensorpack datapoint (a list) as a record: bytes components the fields (the first ``image``, then
        ``field1``, ...), arrays fields of their ``.npy`` bytes, the first number the label, other numbers meta."""
        value = self._txn.get(b"%08d" % i)
        if value is None:
            raise corrupt_error(self.path, i, f"is missing (no key {i:08d})")
        if not msgpack_values.is_pickle(value):
            try:
                dp = msgpack_values.loads(value)
            except FormatError as exc:
                raise corrupt_error(self.path, i, f"is neither a pickle nor msgpack ({exc})") from None
        elif not self.unpickle:
            raise FormatError(f"{self.path}: record {i} is a pickle, read only with unpickle=True (picpac import "
                              "--from lmdb --unpickle, for a file you trust)")
        else:
            try:
                dp = pickle.loads(value)
            except Exception as exc:
                raise corrupt_error(self.path, i, f"is not a pickle ({type(exc).__name__}: {exc})") from None
        if not isinstance(dp, (list, tuple)):
            raise SourceError(f"{self.path}: record {i} is a {type(dp).__name__}, not a tensorpack datapoint (a list)")
        fields, label, numbers_ = {}, 0.0, []
        for k, part in enumerate(dp):
            name = "image" if not fields else f"field{k}"
            if isinstance(part, (bytes, bytearray, memoryview)):
                fields[name] = bytes(part)
            elif isinstance(part, np.ndarray) and part.ndim:
                with io.BytesIO() as out:
                    np.save(out, part, allow_pickle=False)
                    fields[f"field{k}"] = out.getvalue()
            elif isinstance(part, (numbers.Number, np.generic)) and not isinstance(part, bool):
                numbers_.append(float(part))
            else:
                raise SourceError(f"{self.path}: record {i}'s component {k} is a {type(part).__name__}: picpac takes "
                                  "bytes, arrays and numbers")
        if numbers_:
            label = numbers_.pop(0)
        if not fields:
            raise SourceError(f"{self.path}: record {i} has no bytes or array component to store")
        return self._record(i, fields, label, None, {"numbers": numbers_} if numbers_ else b"")

    def _after_fork(self) -> None:
        self._txn = self._env = None
        self._open()

    def _close(self) -> None:
        if getattr(self, "_env", None) is not None:
            self._txn = self._env = None
            _lmdb_release(self.path)
