"""Writer: create a picpac database, or append to one, with crash-safe commits."""
from __future__ import annotations

import datetime
import fcntl
import json
import numbers
import os
import platform
import sys
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from .._version import __version__
from ..errors import (CorruptError, MissingPathError, PathExistsError, PicPacError, PicPacTypeError, PicPacValueError,
                      WriterBusyError)
from . import durable
from .frames import encode_metadata, framed, metadata_frame, record_frame
from .layout import (ARRAYS_KEY, EMPTY_COMMIT, HEADER_SIZE, INDEX_DTYPE, MAX_FIELDS, MAX_META_SIZE, NO_GROUP,
                     RECORD_HEAD, SLOT_OFFSETS, ArraySpec, Commit, array_dtype, crc32, field_table,
                     index_offset_after, pack_header, parse_arrays, read_commit, read_header)

_INT64 = np.iinfo(np.int64)

# PicPac's Writer flags, as ``picpac.Writer(path, picpac.OVERWRITE)`` takes them (same values as PicPac's).
OVERWRITE = 4
"""Replace the database at the path if there is one (PicPac's flag; ``overwrite=True``)."""
COMPACT = 2
"""PicPac's flag for records without 4 KiB padding: picpac never pads, so it changes nothing."""
APPEND = 8
"""Add records to the database at the path, creating it if missing (``append=True``; PicPac has no append)."""
_INDEX_LABEL2 = 1  # PicPac's INDEX_LABEL2: refused, a picpac record has one label


class UnclosedWriterWarning(UserWarning):
    """A Writer was garbage-collected without ``close()`` (or the end of its ``with`` block): what it
    appended since its last commit was discarded. A UserWarning, so Python shows it by default."""


def _open_mode(path: str, flags: Any, append: Any, overwrite: Any) -> tuple[bool, bool]:
    """(append, overwrite) from PicPac's ``flags`` and the keywords."""
    if isinstance(flags, bool) or not isinstance(flags, numbers.Integral):
        raise PicPacTypeError(f"Writer flags must be an int made of picpac.OVERWRITE, picpac.APPEND and "
                              f"picpac.COMPACT, got {flags!r}; pass append=True or overwrite=True by keyword")
    flags = int(flags)
    if flags > 0 and flags & _INDEX_LABEL2:
        raise PicPacValueError(f"{path}: Writer flag INDEX_LABEL2 (1) of PicPac is not supported: a picpac "
                               "record has one float label; keep a second one in the record's meta")
    if flags < 0 or flags & ~(OVERWRITE | COMPACT | APPEND):
        raise PicPacValueError(f"{path}: unknown Writer flags {flags:#x}; the flags are picpac.OVERWRITE (4), "
                               "picpac.COMPACT (2) and picpac.APPEND (8)")
    append = bool(append) or bool(flags & APPEND)
    overwrite = bool(overwrite) or bool(flags & OVERWRITE)
    if append and overwrite:
        raise PicPacValueError(f"{path}: append and overwrite exclude each other: append adds records to the "
                               "database, overwrite replaces it")
    return append, overwrite


def _as_bytes(name: str, value: Any) -> memoryview:
    """A flat byte view of a field value, or PicPacTypeError naming the field."""
    if isinstance(value, str):
        raise PicPacTypeError(f"field {name!r}: got str; fields hold bytes (use .encode() for text)")
    try:
        view = memoryview(value)
    except TypeError:
        raise PicPacTypeError(f"field {name!r}: got {type(value).__name__}; fields hold bytes-like "
                              "objects (bytes, bytearray, memoryview, contiguous numpy array)") from None
    if not view.c_contiguous:
        raise PicPacValueError(f"field {name!r}: the buffer is not contiguous (use np.ascontiguousarray)")
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def _check_array(name: str, value: Any, view: memoryview, spec: ArraySpec) -> None:
    """A value for a field declared in metadata 'arrays' must be exactly one such array."""
    if isinstance(value, np.ndarray) and (value.shape != spec.shape or value.dtype != spec.dtype):
        raise PicPacValueError(f"field {name!r}: got a {value.dtype} array of shape {value.shape}; the metadata "
                               f"'{ARRAYS_KEY}' declares {spec.dtype} arrays of shape {spec.shape}")
    if view.nbytes != spec.nbytes:
        raise PicPacValueError(f"field {name!r}: got {view.nbytes} bytes; the metadata '{ARRAYS_KEY}' declares "
                               f"{spec} arrays of {spec.nbytes} bytes")


def _check_metadata(metadata: Any) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise PicPacTypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    if "fields" in metadata:
        raise PicPacValueError("metadata key 'fields' is managed by the Writer; do not set it")
    classes = metadata.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise PicPacTypeError("metadata['classes'] must be a list of str")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise PicPacTypeError(f"metadata must be JSON-serialisable: {exc}") from None
    parse_arrays(dict(metadata), "Writer", PicPacValueError)
    return dict(metadata)


_BUSY = "another Writer is appending to this database; try again when it has closed"


def _lock(fd: int, path: str, busy: str = _BUSY) -> None:
    """Take the exclusive lock that appending Writers hold; WriterBusyError (``busy``) when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise WriterBusyError(f"{path}: {busy}") from None


def open_locked(target: str, path: str, flags: int, *, purpose: str = "", busy: str = _BUSY) -> int | None:
    """A descriptor of the file at ``target`` (``path`` as the user named it) opened with ``flags``, holding the
    lock appending Writers take (WriterBusyError, ``busy``, while another holds it); None when there is no
    file. Once locked, the file must still be the one at ``target``: a ``Writer(path, overwrite=True)`` (or a
    compact) may have renamed a new file over it between the open and the lock, and Writers may have
    committed to that one since, so the lock on the old file guards nothing: it is opened again."""
    while True:
        try:
            fd = os.open(target, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PicPacError(f"{path}: cannot open{purpose}: {exc.strerror}") from None
        try:
            _lock(fd, path, busy)
            if durable.same_file(fd, target):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def lock_replaced(target: str, path: str) -> int | None:
    """Open and lock the file at ``target`` (``path`` as the user named it) that a new database is about to
    replace, so that a Writer appending to it is not silently discarded: WriterBusyError while one holds
    it. Returns the descriptor to close once it is replaced (None when there is no file). An appender
    that opens the old file meanwhile finds, once it has the lock, that it is no longer ``path``."""
    try:
        fd = os.open(target, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PicPacError(f"{path}: cannot open the file to be replaced: {exc.strerror}") from None
    try:
        _lock(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Writer:
    """Write records to a picpac database.

    ``Writer(path)`` builds a new database in a temporary file beside ``path`` and moves it to
    ``path`` on :meth:`close` (or the first :meth:`commit`), so ``path`` only ever holds a complete
    database. An existing ``path`` is refused (:class:`PathExistsError`) unless ``overwrite=True``
    (PicPac's ``Writer(path, picpac.OVERWRITE)``) asks to replace it. ``Writer(path, append=True)``
    (``picpac.APPEND``) adds records to an existing database in place; nothing becomes visible until a
    commit, and an interrupted append leaves the last committed state. Leaving a ``with`` block by an
    exception, or dropping the Writer without :meth:`close` (an :class:`UnclosedWriterWarning`),
    discards the uncommitted records. When ``path`` is a symbolic link, the file it points to is
    written (or created) and the link is kept.
    """

    def __init__(self, path: str | os.PathLike, flags: int = 0, *, append: bool = False, overwrite: bool = False,
                 metadata: Mapping[str, Any] | None = None, sync: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        append, self._overwrite = _open_mode(self.path, flags, append, overwrite)
        self._target = durable.target(self.path)  # a symlink's target is written; the link stays
        self._sync = sync
        extra = _check_metadata(metadata)
        directory = os.path.dirname(self._target)
        if not os.path.isdir(directory):
            raise MissingPathError(f"{self.path}: directory {directory} does not exist")
        self._count = 0
        self._index = np.zeros(1024, INDEX_DTYPE)
        self._file: BinaryIO | None = None
        self._temp_path: str | None = None
        self._created: Commit | None = None  # the empty commit of a database an append created
        if not append:
            if os.path.isdir(self._target):
                raise PicPacValueError(f"{self.path}: is a directory; name the database file to create")
            if not self._overwrite and os.path.lexists(self._target):
                raise self._exists()
            self._create()
        elif not self._open_existing():
            self._create()
            self._publish_empty()
        try:
            self._metadata.update(extra)
            self._field_ids = {name: i for i, name in enumerate(self._metadata["fields"])}
            self._arrays = parse_arrays(self._metadata, self.path, PicPacValueError)
            self._framed = framed(self._metadata)
            self._framed_fields = -1  # fields in this Writer's last metadata frame (-1: none written yet)
        except BaseException:
            self.abort()  # a Writer that failed to open is not one dropped without close()
            raise

    # -- opening ---------------------------------------------------------------------------
    def _create(self) -> None:
        durable.remove_stale_temps(self._target)
        self._temp_path = durable.temp_path(self._target)
        # os.open (unlike mkstemp's 0600) gives the database the permissions the umask allows
        fd = os.open(self._temp_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        self._file = os.fdopen(fd, "w+b")
        fcntl.flock(fd, fcntl.LOCK_EX)  # the lock stays with the file once it is renamed to path
        self._file.write(pack_header(EMPTY_COMMIT, EMPTY_COMMIT))
        self._commit = EMPTY_COMMIT
        self._slot = 1  # the next commit goes to slot 0
        self._end = HEADER_SIZE
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self._metadata: dict[str, Any] = {
            "fields": [],
            "created": {"time": now, "by": f"picpac {__version__}", "host": platform.node()},
        }

    def _exists(self) -> PathExistsError:
        return PathExistsError(f"{self.path}: already exists; to replace it pass overwrite=True "
                               "(picpac.Writer(path, picpac.OVERWRITE)), to add records to it append=True")

    def _open_existing(self) -> bool:
        """Open ``path`` to append to it, holding its lock; False when there is no file to open."""
        fd = open_locked(self._target, self.path, os.O_RDWR, purpose=" for appending")
        if fd is None:
            return False
        file = os.fdopen(fd, "r+b")
        try:
            self._load(file)
        except BaseException:
            file.close()
            raise
        return True

    def _load(self, file: BinaryIO) -> None:
        size = os.fstat(file.fileno()).st_size
        state = read_header(file.read(HEADER_SIZE), size, self.path)
        if state.damaged_slots and size > state.current.end:
            raise CorruptError(
                f"{self.path}: header commit slot {state.damaged_slots[0]} is damaged and {size - state.current.end} "
                f"bytes follow the newest intact commit: a newer commit may hold records that appending would "
                f"drop; run `picpac repair {self.path}` first")
        file.seek(0)
        buf = file.read(state.current.end)
        self._metadata, index = read_commit(buf, len(buf), state.current, self.path)
        self._file = file
        if state.damaged_slots:
            warnings.warn(f"{self.path}: header slot {state.damaged_slots} is damaged; the next commit "
                          "rewrites it", RuntimeWarning, stacklevel=4)
        self._commit, self._slot = state.current, state.slot
        self._grow(len(index))
        self._index[: len(index)] = index
        self._count = len(index)
        self._end = state.current.end
        # Bytes past the committed end were left by an interrupted append: nothing refers to them.
        file.truncate(self._end)
        file.seek(self._end)

    def _publish_empty(self) -> None:
        """Make the new file an empty database at ``path`` now, unless another process made ``path`` first.

        ``Writer(path, append=True)`` on a missing path: two such Writers must not each build a file and
        rename it over the other's. The first to publish its file at ``path`` (:func:`durable.publish`, which
        never replaces a file) appends to it; the other appends after it, or gets WriterBusyError while it
        holds the lock.
        """
        self._write_commit()
        assert self._temp_path is not None, "called after _create, which names the new file"
        if not durable.publish(self._temp_path, self._target, overwrite=False, sync=False):
            self.abort()
            if not self._open_existing():
                raise WriterBusyError(f"{self.path}: another Writer created and removed this database meanwhile; "
                                      "try again")
            return
        self._temp_path = None
        self._fsync_directory()
        self._created = self._commit

    # -- writing ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    @property
    def closed(self) -> bool:
        return self._file is None

    def append(self, fields: Mapping[str, Any] | None = None, /, *, label: float = 0.0,
               group: int | None = None, meta: Mapping[str, Any] | None = None, **named_fields: Any) -> int:
        """Add one record and return its index.

        Fields are passed by keyword (``image=jpeg_bytes``) or as a mapping; each value is stored
        verbatim. ``label`` is a float, ``group`` an optional int64 (records of one group stay in
        one fold when splitting), ``meta`` a small JSON-serialisable dict.
        """
        file = self._check_open()
        items = dict(fields or {}, **named_fields)
        if not items:
            raise PicPacValueError("a record needs at least one field, e.g. append(image=jpeg_bytes)")
        if len(items) > MAX_FIELDS:
            raise PicPacValueError(f"a record holds at most {MAX_FIELDS} fields, got {len(items)}")
        if not isinstance(label, numbers.Real):
            raise PicPacTypeError(f"label must be a number, got {type(label).__name__}")
        group_value = self._check_group(group)
        meta_bytes = self._encode_meta(meta)
        table = []
        views = []
        for name, value in items.items():
            if not isinstance(name, str) or not name:
                raise PicPacTypeError(f"field names must be non-empty str, got {name!r}")
            view = _as_bytes(name, value)
            if name in self._arrays:
                _check_array(name, value, view, self._arrays[name])
            table += (self._field_id(name), view.nbytes)
            views.append(view)
        head = RECORD_HEAD.pack(len(views), 0, len(meta_bytes)) + field_table(len(views)).pack(*table)
        crc = crc32(meta_bytes, crc32(head))
        for view in views:
            crc = crc32(view, crc)
        size = len(head) + len(meta_bytes) + sum(v.nbytes for v in views)
        label = float(label)
        frames = self._frames(size, label, group_value, crc) if self._framed else b""
        write = file.write
        try:
            write(frames)
            write(head)
            write(meta_bytes)
            for view in views:
                write(view)
        except BaseException:
            self._rewind()
            raise
        self._framed_fields = len(self._metadata["fields"])
        offset = self._end + len(frames)
        self._grow(self._count + 1)
        self._index[self._count] = (offset, size, label, group_value, crc, 0)
        self._end = offset + size
        self._count += 1
        return self._count - 1

    def _frames(self, size: int, label: float, group: int, crc: int) -> bytes:
        """The record's frame, after a metadata frame when this Writer has not framed its field list yet
        (picpac/file/frames.py: what `picpac repair` reads in a truncated file)."""
        frame = record_frame(size, label, group, crc)
        if len(self._metadata["fields"]) == self._framed_fields:
            return frame
        return metadata_frame(encode_metadata(self._metadata)) + frame

    @staticmethod
    def _check_group(group: Any) -> int:
        if group is None:
            return NO_GROUP
        if isinstance(group, bool) or not isinstance(group, numbers.Integral):
            raise PicPacTypeError(f"group must be an int or None, got {type(group).__name__}")
        if not NO_GROUP < int(group) <= _INT64.max:
            raise PicPacValueError(f"group must be an int64 above {NO_GROUP}, got {group}")
        return int(group)

    @staticmethod
    def _encode_meta(meta: Any) -> bytes:
        if meta is None:
            return b""
        if not isinstance(meta, Mapping):
            raise PicPacTypeError(f"meta must be a dict or None, got {type(meta).__name__}")
        try:
            data = json.dumps(meta, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise PicPacTypeError(f"meta must be JSON-serialisable: {exc}") from None
        if len(data) > MAX_META_SIZE:
            raise PicPacValueError(f"meta is {len(data)} bytes; keep it small and store data as a field")
        return data

    def _field_id(self, name: str) -> int:
        fid = self._field_ids.get(name)
        if fid is None:
            fid = self._field_ids[name] = len(self._metadata["fields"])
            self._metadata["fields"].append(name)
        return fid

    def _grow(self, needed: int) -> None:
        if needed > len(self._index):
            bigger = np.zeros(max(needed, 2 * len(self._index)), INDEX_DTYPE)
            bigger[: self._count] = self._index[: self._count]
            self._index = bigger

    def _rewind(self) -> None:
        """Drop bytes written past the last complete record, so later offsets stay right."""
        file = self._check_open()
        file.seek(self._end)
        file.truncate()

    def _check_open(self) -> BinaryIO:
        """The open file; PicPacError when the Writer is closed."""
        if self._file is None:
            raise PicPacError(f"{self.path}: the Writer is closed")
        return self._file

    # -- committing ------------------------------------------------------------------------
    def commit(self) -> None:
        """Make every record appended so far durable and visible to new Readers."""
        self._check_open()
        if self._temp_path is None:
            self._write_commit()
            return
        if not self._overwrite and os.path.lexists(self._target):
            raise self._exists()  # before the commit region is written: the Writer stays as it was
        replaced = lock_replaced(self._target, self.path) if self._overwrite else None
        try:
            self._write_commit()
            # without overwrite nothing is replaced, not even a file made after the Writer started
            if not durable.publish(self._temp_path, self._target, overwrite=self._overwrite, sync=False):
                raise self._exists()
        finally:
            if replaced is not None:
                os.close(replaced)
        self._temp_path = None
        self._fsync_directory()

    def _write_commit(self) -> None:
        meta = encode_metadata(self._metadata)
        index_offset = index_offset_after(self._end + len(meta))
        region = meta + bytes(index_offset - self._end - len(meta)) + self._index[: self._count].tobytes()
        file = self._check_open()
        try:
            file.write(region)
            file.flush()
            self._fsync()
        except BaseException:
            self._rewind()
            raise
        commit = Commit(self._commit.seq + 1, self._end, len(meta), index_offset, self._count, crc32(region))
        # The slot is written only after the region it points to is on disk; the other slot keeps
        # describing the previous state until this one is complete.
        os.pwrite(file.fileno(), commit.pack(), SLOT_OFFSETS[self._slot ^ 1])
        self._commit, self._slot = commit, self._slot ^ 1
        self._end += len(region)
        self._fsync()

    def close(self) -> None:
        """Commit and close. Closing twice is harmless."""
        if self._file is None:
            return
        try:
            self.commit()
        except BaseException:
            self.abort()
            raise
        self._file.close()
        self._file = None

    def abort(self) -> None:
        """Close without committing: a new database is not created, an append adds nothing."""
        if self._file is None:
            return
        try:
            if self._temp_path is None:
                self._file.truncate(self._commit.end)
            if self._created == self._commit:  # the empty database an append made: nothing was added
                os.unlink(self._target)
        finally:
            try:
                self._file.close()
            except OSError:  # close retries the buffered write that failed (a full disk): drop it
                pass
            self._file = None
            if self._temp_path is not None:
                temp, self._temp_path = self._temp_path, None
                try:
                    os.unlink(temp)
                except FileNotFoundError:  # renamed to path by a commit that a signal cut short
                    pass

    def _fsync(self) -> None:
        if self._sync:
            os.fsync(self._check_open().fileno())

    def _fsync_directory(self) -> None:
        if self._sync:
            durable.fsync_directory(os.path.dirname(self._target))

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_file", None) is None:
            return
        lost = self._count - self._commit.count
        if self._temp_path is not None:
            state = f"{self.path} was not written"
        elif self._created == self._commit:
            state = f"the empty database it created at {self.path} was removed"
        else:
            state = f"{self.path} keeps its last commit"
        message = (f"picpac.Writer({self.path!r}) was dropped without close(): {lost} record(s) appended since the "
                   f"last commit were not committed and {state}; call close() (or use `with picpac.Writer(...) "
                   "as w:`) to commit them")
        try:
            self.abort()
        finally:
            warn_unclosed(message)


def warn_unclosed(message: str) -> None:
    """Say, with an :class:`UnclosedWriterWarning`, what a writer dropped without ``close()`` lost."""
    try:
        warnings.warn(message, UnclosedWriterWarning, stacklevel=3)
    except Exception:  # at interpreter exit the warnings machinery may be gone: say it anyway
        print(f"UnclosedWriterWarning: {message}", file=sys.stderr)


def write_arrays(path: str | os.PathLike, images: Any, labels: Any = None, *, groups: Any = None,
                 metadata: Mapping[str, Any] | None = None, field: str = "image", overwrite: bool = False,
                 sync: bool = True) -> int:
    """Write ``images`` (N, H, W[, C]) of a numeric dtype as a new database of N array records.

    Each record's ``field`` holds one array's raw bytes (C order, little-endian) and the dataset
    metadata declares the field: ``{"arrays": {field: {"shape": [H, W, C], "dtype": "uint8"}}}``, so
    ImageStream reads the arrays without decoding and batches them on its vectorised path
    (docs/arrays.md). ``labels`` (N numbers, default 0) and ``groups`` (N ints or None) go to the
    index. An existing ``path`` is replaced only with ``overwrite=True``. Returns N.
    """
    images = np.asarray(images)
    if images.ndim < 2 or not len(images):
        raise PicPacValueError(f"images must be an array (N, H, W[, C]) with N >= 1, got shape {images.shape}")
    try:
        dtype = array_dtype(images.dtype)
    except (TypeError, ValueError) as exc:
        raise PicPacTypeError(f"images: {exc}") from None
    images = np.ascontiguousarray(images, dtype=dtype)
    n = len(images)
    labels = np.zeros(n) if labels is None else np.asarray(labels, np.float64).reshape(-1)
    if groups is not None:
        groups = np.asarray(groups).reshape(-1)
    for name, values in (("labels", labels), ("groups", groups)):
        if values is not None and len(values) != n:
            raise PicPacValueError(f"{name} has {len(values)} entries for {n} images")
    meta = dict(metadata or {})
    declared = meta.get(ARRAYS_KEY)
    meta[ARRAYS_KEY] = {**(declared if isinstance(declared, Mapping) else {}),
                        field: ArraySpec(images.shape[1:], dtype).to_json()}
    with Writer(path, overwrite=overwrite, metadata=meta, sync=sync) as writer:
        for i in range(n):
            writer.append({field: images[i]}, label=labels.item(i), group=None if groups is None else groups[i].item())
    return n
