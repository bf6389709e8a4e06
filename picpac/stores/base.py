"""The common part of every format: the writer and reader base classes, errors and shared helpers."""
from __future__ import annotations

import errno
import json
import mmap
import numbers
import os
import shutil
import stat
import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..errors import (CorruptError, FileIOError, FormatError, MissingPathError, PicPacError, PicPacTypeError,
                      PicPacValueError)
from ..file import durable
from ..file.kinds import file_kind
from ..file.layout import NO_GROUP
from ..file.reader import Record, RecordReader
from ..file.writer import Writer, _as_bytes, warn_unclosed


KINDS = ("lmdb", "tfrecord", "hdf5", "npz", "sqlite", "tar", "binary")
"""The store formats, as ``picpac import --from`` and ``picpac export --to`` name them."""
TABLE_KINDS = ("parquet", "arrow", "mds")
"""Tables of other libraries' datasets (Hugging Face's Parquet and Arrow, MosaicML's MDS): ``picpac import --from``
reads them by column (an image column, a label column, meta columns); ``parquet`` is also written
(``picpac export --to parquet``) as Hugging Face's ``datasets`` reads it."""


class MissingPackageError(PicPacError, ImportError):
    """A format needs an optional package (``pip install picpac[formats]``, ``picpac[parquet]``, ...)."""


def require_package(module: str, kind: str, extra: str = "formats"):
    """``import module`` for the ``kind`` format, or a MissingPackageError naming ``pip install picpac[extra]``."""
    try:
        return __import__(module)
    except ImportError:
        raise MissingPackageError(f"the {kind} format needs the {module!r} package: "
                                  f"pip install picpac[{extra}]") from None


def corrupt_error(path: str, index: int, reason: str) -> CorruptError:
    error = CorruptError(f"{path}: record {index} {reason}")
    error.path, error.index, error.reason = path, index, reason
    return error


_IO_ADVICE = {
    errno.ENOSPC: "free some space or write to another file system",
    errno.EDQUOT: "free some space within the disk quota or write elsewhere",
    errno.EFBIG: "the file system or the process's file size limit (ulimit -f) caps the file size",
}


_SYSTEM_ERRNOS = frozenset({errno.EIO, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENXIO, errno.ENODEV,
                            errno.ESTALE, errno.ETIMEDOUT, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
"""Errors of reading that are the system's (permissions, a failing disk, a vanished file), not damage."""


def io_error(path: str, exc: OSError, verb: str = "write") -> FileIOError:
    """``exc`` (an OSError from reading or writing ``path``) as a FileIOError naming ``path`` and the fix."""
    reason = (exc.strerror or str(exc)).lower()
    advice = _IO_ADVICE.get(exc.errno) if verb == "write" else None
    error = FileIOError(f"{path}: cannot {verb}: {reason}" + (f"; {advice}" if advice else ""))
    error.errno = exc.errno  # (setting strerror as well would make str() OSError's "[Errno n] ...")
    return error


@contextmanager
def output_errors(path: str | Callable[[], str], library: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Turn an OSError (or one of the ``library``'s errors) raised while writing ``path`` into a
    FileIOError naming it: a full disk, a quota, a file size limit, an I/O error. ``path`` may be a
    function that names the file when the error comes (the block writes several, one after another)."""
    try:
        yield
    except PicPacError:
        raise
    except OSError as exc:
        raise io_error(path() if callable(path) else path, exc) from exc
    except library as exc:
        name = path() if callable(path) else path
        raise FileIOError(f"{name}: cannot write: {exc}{free_space(name)}") from exc


def free_space(path: str) -> str:
    """``; N bytes are free on its file system`` for the file system ``path`` is (to be) written on."""
    try:
        info = os.statvfs(os.path.dirname(durable.target(path)))
    except OSError:
        return ""
    return f"; {info.f_bavail * info.f_frsize:,} bytes are free on its file system"


def check_regular(path: str, kind: str, mode: int | None = None) -> None:
    """FormatError unless ``path`` (of ``st_mode`` ``mode``, when known) is a regular file after symbolic
    links: a FIFO would block the format's library forever and a device (``/dev/zero``) never ends."""
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise MissingPathError(f"{path}: no such {kind} store") from None
        except OSError as exc:
            raise io_error(path, exc, "read") from None
    if not stat.S_ISREG(mode):
        raise FormatError(f"{path}: is {file_kind(mode)}, not a regular file; {kind} stores are files")


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
    there); leaving a ``with`` block by an exception, or :meth:`abort`, leaves ``path`` untouched, and so
    does dropping the writer without :meth:`close`, with an :class:`~picpac.UnclosedWriterWarning`.
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
            self._open = False  # a writer that failed to start is not one dropped without close()
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
        """Dropped without :meth:`close`: nothing is written (as a ``with`` block left by an exception), and an
        :class:`~picpac.UnclosedWriterWarning` says so, as :class:`picpac.Writer` does."""
        if not getattr(self, "_open", False):
            return
        message = (f"picpac.stores.{type(self).__name__}({self.path!r}) was dropped without close(): {self._count} "
                   f"record(s) appended were not written and {self.path} was left as it was; call close() (or use "
                   f"`with picpac.stores.open_writer(...) as w:`) to write them")
        try:
            self.abort()
        finally:
            warn_unclosed(message)


_STORE_FILES = {"lmdb": {"data.mdb", "lock.mdb"}}
"""The files a directory store may hold: an existing directory is replaced only when it holds no others."""


class StoreReader(RecordReader):
    """Reads one store: ``len(r)``, ``r[i]`` (a :class:`picpac.Record`), iteration, ``r.metadata``.

    Records are read one at a time on demand. A reader may be used in forked worker processes (a
    child reopens the file handles the format's library cannot share) and is pickled by its path.
    """

    kind = ""
    _damage: tuple[type[BaseException], ...] = (ValueError, TypeError, LookupError, ArithmeticError, RuntimeError,
                                                EOFError, OSError, struct.error)
    """What the format's parsing code (or its library) raises on damaged bytes; a reader turns these into
    PicPacErrors naming the store (see :meth:`_error`)."""

    def __init__(self, path: str | os.PathLike, *, check: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        self.check = check
        if not os.path.exists(self.path):
            raise MissingPathError(f"{self.path}: no such {self.kind} store")
        if not os.path.isdir(self.path):
            check_regular(self.path, self.kind)
        self.metadata: dict[str, Any] = {}
        self._count = 0
        self._pid = os.getpid()
        self._closed = False
        self._inherited: list[Any] = []  # handles from the parent of a fork: kept, never closed here
        try:
            try:
                self._open()
                self._check_metadata()
            except PicPacError:
                raise
            except self._damage as exc:
                raise self._error(exc) from None
        except BaseException:
            self._close()
            raise

    def _check_metadata(self) -> None:
        """The dataset metadata is a JSON object whose ``fields`` and ``classes`` are lists of strings."""
        if not isinstance(self.metadata, dict):
            raise CorruptError(f"{self.path}: its dataset metadata is a JSON {type(self.metadata).__name__}, "
                               "not an object")
        for key in ("fields", "classes"):
            value = self.metadata.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise CorruptError(f"{self.path}: the dataset metadata's {key!r} is not a list of strings")
        fields = self.metadata.get("fields") or []
        if "" in fields or len(set(fields)) != len(fields):
            raise CorruptError(f"{self.path}: the dataset metadata's 'fields' has an empty or repeated name")
        if isinstance(self._count, bool) or not isinstance(self._count, int) or self._count < 0:
            raise CorruptError(f"{self.path}: a record count of {self._count!r}")

    def _error(self, exc: BaseException, index: int | None = None) -> PicPacError:
        """A raw exception of the format's code on this store as a PicPacError naming it (and the record)."""
        if isinstance(exc, OSError) and exc.errno in _SYSTEM_ERRNOS:  # (EINVAL: a damaged offset was sought)
            if isinstance(exc, FileNotFoundError):
                return MissingPathError(f"{self.path}: {exc.filename or 'a file of the store'} disappeared")
            return io_error(self.path, exc, "read")
        reason = "nested too deeply" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
        if index is None:
            return CorruptError(f"{self.path}: damaged {self.kind} store ({reason})")
        return corrupt_error(self.path, index, f"cannot be read ({reason})")

    @property
    def fields(self) -> list[str]:
        return list(self.metadata.get("fields") or [])

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
        try:
            return self._read(i)
        except PicPacError:
            raise
        except self._damage as exc:
            raise self._error(exc, i) from None

    def __iter__(self) -> Iterator[Record]:
        for i in range(self._count):
            yield self[i]

    def _record(self, i: int, fields: dict, label: Any, group: Any, meta: Any) -> Record:
        """Record ``i`` once its values are of the record model's types (CorruptError naming it if not)."""
        if isinstance(label, bool) or not isinstance(label, numbers.Real):
            raise corrupt_error(self.path, i, f"has a label of type {type(label).__name__}, not a number")
        if group is not None and (isinstance(group, bool) or not isinstance(group, numbers.Integral)
                                  or not NO_GROUP < group < 2**63):
            raise corrupt_error(self.path, i, f"has group {group!r:.40}, not an int64 above {NO_GROUP}")
        for name, value in fields.items():
            if not isinstance(name, str) or not name:
                raise corrupt_error(self.path, i, f"has a field named {name!r:.40}")
            if not isinstance(value, memoryview):
                try:
                    fields[name] = memoryview(value)
                except TypeError:
                    raise corrupt_error(self.path, i, f"field {name!r} holds a {type(value).__name__}, "
                                                      "not bytes") from None
        if not isinstance(meta, (memoryview, dict)):
            try:
                meta = memoryview(meta)
            except TypeError:
                raise corrupt_error(self.path, i, f"has meta of type {type(meta).__name__}") from None
        return Record(i, float(label), None if group is None else int(group), fields, meta, self.path)

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

    def __reduce__(self):
        return _reopen, (type(self), self.path, self.check)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, records={self._count}, fields={self.fields})"


def _reopen(cls: type[StoreReader], path: str, check: bool) -> StoreReader:
    """A pickled reader, opened again by its path (its format's class comes pickled by name)."""
    return cls(path, check=check)


class TableReader(StoreReader):
    """A reader of a table (:data:`TABLE_KINDS`) by column: ``image_column`` and ``label_column`` name the
    columns of the images and the labels (None: what the table says, or the format's defaults)."""

    def __init__(self, path: str | os.PathLike, *, check: bool = True, image_column: str | None = None,
                 label_column: str | None = None):
        self.image_column, self.label_column = image_column, label_column
        super().__init__(path, check=check)

    def where(self, i: int) -> str:
        """Where record ``i`` is: its file and row."""
        raise NotImplementedError

    def __reduce__(self):
        return _reopen_table, (type(self), self.path, self.check, self.image_column, self.label_column)


def _reopen_table(cls: type[TableReader], path: str, check: bool, image_column: str | None,
                  label_column: str | None) -> TableReader:
    return cls(path, check=check, image_column=image_column, label_column=label_column)


class MappedReader(StoreReader):
    """A reader over one memory-mapped file (inherited as is by forked children)."""

    def _map(self, path: str) -> memoryview:
        # O_NONBLOCK: a FIFO put in place after the check in __init__ must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
        try:
            info = os.fstat(fd)
            check_regular(path, self.kind, info.st_mode)
            self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if info.st_size else None
        finally:
            os.close(fd)
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
