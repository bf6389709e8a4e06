"""The common part of every format: the writer and reader base classes, errors and shared helpers."""
from __future__ import annotations

import json
import mmap
import numbers
import os
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import CorruptError, FormatError, MissingPathError, PicPacError, PicPacTypeError, PicPacValueError
from ..file import durable
from ..file.reader import Record
from ..file.writer import Writer, _as_bytes


KINDS = ("lmdb", "tfrecord", "hdf5", "npz", "sqlite", "tar", "binary")
"""The store formats, as ``picpac import --from`` and ``picpac export --to`` name them."""


class MissingPackageError(PicPacError, ImportError):
    """A format needs an optional package (``pip install picpac[formats]``)."""


def require_package(module: str, kind: str):
    try:
        return __import__(module)
    except ImportError:
        raise MissingPackageError(f"the {kind} format needs the {module!r} package: "
                                  "pip install picpac[formats]") from None


def corrupt_error(path: str, index: int, reason: str) -> CorruptError:
    error = CorruptError(f"{path}: record {index} {reason}")
    error.path, error.index, error.reason = path, index, reason
    return error


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
    With ``sync`` (the default) the store is fsynced before the rename and its directory after it,
    so a power loss leaves the old store or the complete new one. A ``path`` that is a symbolic link
    is written through: its target is replaced and the link kept. Temporary files of ``path`` that
    dead processes left are removed when a writer starts (:func:`picpac.file.durable.remove_stale_temps`).
    """

    kind = ""
    reserved: frozenset[str] = frozenset()
    directory = False

    def __init__(self, path: str | os.PathLike, *, metadata: Mapping[str, Any] | None = None, sync: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        self._target = durable.target(self.path)
        parent = os.path.dirname(self._target)
        if not os.path.isdir(parent):
            raise MissingPathError(f"{self.path}: directory {parent} does not exist")
        self._metadata = _check_metadata(metadata)
        self._sync = sync
        self._fields: list[str] = []
        self._count = 0
        self._check_target()
        for output in self._outputs():
            durable.remove_stale_temps(output)
        self._temp = durable.temp_path(self._target)
        self._lock: int | None = None
        self._open = True
        try:
            self._start()
            self._lock = durable.lock(self._temp)
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
            self._replace(self._temp, self._target)
        except BaseException:
            self._discard()
            raise
        self._unlock()

    def abort(self) -> None:
        """Drop everything written; ``path`` is left as it was."""
        if self._open:
            self._open = False
            self._discard()

    def _outputs(self) -> list[str]:
        """The paths the store occupies (the target of ``path``, and a binary store's index)."""
        return [self._target]

    def _check_target(self) -> None:
        """Refuse early what :meth:`_replace` would refuse after all the work."""
        if not os.path.isdir(self._target) or os.path.islink(self._target):
            return
        if not self.directory:
            raise PicPacValueError(f"{self.path}: is a directory; not replacing it with a {self.kind} file")
        if not set(os.listdir(self._target)) <= _STORE_FILES.get(self.kind, set()):
            raise PicPacValueError(f"{self.path}: is a directory that is not an {self.kind} store; not replacing it")

    def _replace(self, temp: str, path: str) -> None:
        self._check_target()
        if not self.directory:
            durable.replace(temp, path, sync=self._sync)
            return
        # A directory cannot be renamed over a non-empty one: the old store is first renamed aside (never
        # removed in place, which a crash could leave half done at path), then removed.
        if self._sync:
            durable.fsync_path(temp)
        aside = None
        if os.path.isdir(path) and not os.path.islink(path):
            aside = durable.temp_path(path)
            os.replace(path, aside)
        elif os.path.lexists(path):
            os.unlink(path)
        os.replace(temp, path)
        if self._sync:
            durable.fsync_directory(os.path.dirname(path))
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _discard(self) -> None:
        try:
            self._release()
        finally:
            self._unlock()
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


_STORE_FILES = {"lmdb": {"data.mdb", "lock.mdb"}}
"""The files a directory store may hold: an existing directory is replaced only when it holds no others."""


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
        return Record(i, label, group, fields, meta if isinstance(meta, (memoryview, dict)) else memoryview(meta),
                      self.path)

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
        from .convert import _reopen  # convert imports every format, and they import this module
        return _reopen, (self.path, self.kind, self.check)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, records={self._count}, fields={self.fields})"


class MappedReader(StoreReader):
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
