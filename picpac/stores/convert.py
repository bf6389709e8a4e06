"""Opening a store by its format's name, sizes on disk, and converting to and from picpac databases.

LMDB and HDF5 stores are imported through a child process, and HDF5 stores exported by one: their C
libraries can die of a signal (SIGSEGV, SIGBUS) on a damaged store or a full disk, and a child's
death is a PicPacError naming the store here, not the end of this process.
"""
from __future__ import annotations

import glob
import json
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..engine.child import ForkedChild
from ..errors import FileIOError, FormatError, PathExistsError, PicPacValueError
from ..file import durable
from ..file.reader import Record, RecordReader
from ..file.remote import RemoteOptions
from ..file.shards import open_database
from ..file.writer import Writer
from .arrow import ArrowReader
from .base import (KINDS, TABLE_KINDS, StoreReader, StoreWriter, corrupt_error, free_space, output_errors,
                   require_package)
from .binary import BinaryReader, BinaryWriter, index_path
from .hdf5 import HDF5Reader, HDF5Writer
from .lmdb import LmdbReader, LmdbWriter
from .mds import MdsReader
from .npz import NpzReader, NpzWriter
from .parquet import ParquetReader, ParquetWriter, plan_table
from .records import decode_record, record_parts
from .sqlite import SqliteReader, SqliteWriter
from .tar import TarReader, TarWriter
from .tfrecord import TFRecordReader, TFRecordWriter

WRITERS: dict[str, type[StoreWriter]] = {"lmdb": LmdbWriter, "tfrecord": TFRecordWriter, "hdf5": HDF5Writer,
                                         "npz": NpzWriter, "sqlite": SqliteWriter, "tar": TarWriter,
                                         "binary": BinaryWriter, "parquet": ParquetWriter}
READERS: dict[str, type[StoreReader]] = {"lmdb": LmdbReader, "tfrecord": TFRecordReader, "hdf5": HDF5Reader,
                                         "npz": NpzReader, "sqlite": SqliteReader, "tar": TarReader,
                                         "binary": BinaryReader, "parquet": ParquetReader, "arrow": ArrowReader,
                                         "mds": MdsReader}
CHILD_READS = frozenset({"lmdb", "hdf5"})
"""Formats that :func:`import_store` reads in a child process (:class:`IsolatedReader`)."""
CHILD_WRITES = frozenset({"hdf5"})
"""Formats that :func:`export_store` writes in a child process (libhdf5 crashes on a full disk)."""
STALL_SECONDS = 300.0
"""How long a child may send nothing before it is taken for stuck (a damaged HDF5 file can make
libhdf5 loop forever) and stopped."""
_LIBRARY = {"lmdb": "liblmdb", "hdf5": "libhdf5"}
_PACKAGE = {"lmdb": "lmdb", "hdf5": "h5py"}


def _kind(kind: str, known: Mapping[str, type] = READERS) -> str:
    if kind not in known:
        names = ", ".join(k for k in (*KINDS, *TABLE_KINDS) if k in known)
        raise PicPacValueError(f"unknown store format {kind!r}; one of {names}")
    return kind


def open_writer(path: str | os.PathLike, kind: str, *, metadata: Mapping[str, Any] | None = None,
                **options: Any) -> StoreWriter:
    """A writer of store format ``kind`` (one of :data:`KINDS`) building ``path``; ``options`` go to the
    format's writer (``fields=[...]`` for ``tar``: the dataset's field names up front)."""
    return WRITERS[_kind(kind, WRITERS)](path, metadata=metadata, **options)


def open_reader(path: str | os.PathLike, kind: str, *, check: bool = True, **options: Any) -> StoreReader:
    """A reader of the ``kind`` store at ``path``; ``check`` verifies stored checksums where the format
    has them (TFRecord's CRC32C, PPR1's CRC32 in lmdb and binary); ``options`` are the reader's own
    (TFRecordReader's ``image_feature`` and ``label_feature``; the tables' ``image_column`` and ``label_column``)."""
    return READERS[_kind(kind)](path, check=check, **options)


def store_size(path: str | os.PathLike, kind: str | None = None) -> int:
    """Bytes on disk of a store: its file, the files of its directory, or a binary store's two files."""
    path = os.fspath(path)
    if not os.path.exists(path) and glob.has_magic(path):  # a table's files
        return sum(os.path.getsize(name) for name in glob.glob(path) if os.path.isfile(name))
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    size = os.path.getsize(path)
    if kind == "binary" and os.path.exists(index_path(path)):
        size += os.path.getsize(index_path(path))
    return size


# -- the child process ------------------------------------------------------------------------------
_HEAD, _RECORDS, _PROGRESS = b"H", b"R", b"P"  # the child's messages (engine/child.py frames them)
_SIZE = struct.Struct("<Q")
_BATCH_BYTES = 8 << 20
_BATCH_RECORDS = 256
_STUCK = " (stuck on a damaged store, or storage that slow?)"


def _preload(kind: str) -> None:
    """Import the format's package before a fork, so that the child imports nothing (an import takes a lock
    that another thread of this process may have held at the fork)."""
    if kind in _PACKAGE:
        require_package(_PACKAGE[kind], kind)


class IsolatedReader(RecordReader):
    """The records of a store, read once and in order by a child process: whatever its format's library
    does on a damaged store (a crash, an endless loop), this process gets a PicPacError naming the
    store. ``len(r)``, ``r.metadata``, ``fields``, ``classes`` and iteration (a :class:`RecordReader`, not
    indexed); records come in batches of up to 8 MiB, ``stall`` is how long the child may take for one."""

    def __init__(self, path: str | os.PathLike, kind: str, *, check: bool = True, stall: float = STALL_SECONDS,
                 **options: Any):
        self.path, self.kind = os.fspath(path), _kind(kind)
        _preload(kind)
        self._child = ForkedChild(partial(_send_records, self.path, kind, check, options), self.path,
                                  f"reading this {kind} store", _LIBRARY.get(kind, kind), stall,
                                  hint=lambda: ": the store is damaged or truncated", suspect=_STUCK)
        try:
            head = json.loads(bytes(self._child.receive()[1]))
        except BaseException:
            self._child.close()
            raise
        self.metadata: dict[str, Any] = head["metadata"]
        self._count: int = head["count"]

    @property
    def fields(self) -> list[str]:
        return list(self.metadata.get("fields") or [])

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Record]:
        index = 0
        for _, body in self._child.messages():
            pos = 0
            while pos < len(body):
                (size,) = _SIZE.unpack_from(body, pos)
                fields, label, group, meta = decode_record(body[pos + 8:pos + 8 + size], self.path, index, False)
                yield Record(index, label, group, fields, meta, self.path)
                pos += 8 + size
                index += 1

    def close(self) -> None:
        self._child.close()


def _send_records(path: str, kind: str, check: bool, options: dict[str, Any], send: Callable[..., None]) -> None:
    """In the child: the store's head, then its records as PPR1 in batches."""
    with open_reader(path, kind, check=check, **options) as reader:
        send(_HEAD, json.dumps({"count": len(reader), "metadata": reader.metadata}).encode())
        batch, size = [], 0
        for record in reader:
            meta = _meta(record, path)
            parts = record_parts(record.fields, record.label, record.group,
                                 json.dumps(meta, separators=(",", ":")).encode() if meta else b"", checksum=False)
            record_size = sum(len(part) for part in parts)  # (the views are of bytes: len is nbytes)
            batch += (_SIZE.pack(record_size), *parts)
            size += record_size
            if size >= _BATCH_BYTES or len(batch) >= 2 * _BATCH_RECORDS:
                send(_RECORDS, *batch)
                batch, size = [], 0
        if batch:
            send(_RECORDS, *batch)


class _SentProgress:
    """In the child: a progress bar whose counts go to the parent, a few times a second."""

    def __init__(self, send: Callable[..., None], total: int):
        self._send, self._count, self._last = send, 0, time.monotonic()
        send(_PROGRESS, json.dumps({"total": total}).encode())

    def update(self, n: int = 1) -> None:
        self._count += n
        if time.monotonic() - self._last > 0.2:
            self.close()

    def close(self) -> None:
        if self._count:
            self._send(_PROGRESS, json.dumps({"done": self._count}).encode())
            self._count, self._last = 0, time.monotonic()


def _export_in_child(db: str, dst: str, kind: str, progress: Callable[[int], Any] | None,
                     remote: RemoteOptions | None = None) -> int:
    """:func:`_export` in a child process. Its death is a FileIOError naming ``dst`` (libhdf5 dies of
    SIGSEGV when a write fails on a full disk), and the temporary files it left are removed."""
    _preload(kind)
    child = ForkedChild(lambda send: _export(db, dst, kind, send=send, remote=remote), dst,
                        f"writing this {kind} store",
                        _LIBRARY.get(kind, kind), STALL_SECONDS, fault=FileIOError, hint=partial(free_space, dst),
                        suspect=_STUCK)
    bar, count = None, 0
    try:
        for what, body in child.messages():
            message = json.loads(bytes(body))
            if what == _HEAD:
                count = message["count"]
            elif "total" in message:
                bar = progress(message["total"]) if progress is not None else None
            elif bar is not None:
                bar.update(message["done"])
    except BaseException:
        child.close()  # first: a child still running could make a temporary file after the removal
        durable.remove_temps_of(durable.target(dst), child.pid)
        raise
    finally:
        child.close()
        if bar is not None and hasattr(bar, "close"):
            bar.close()
    return count


# -- converting -------------------------------------------------------------------------------------
@dataclass
class ConvertReport:
    """What :func:`export_store` or :func:`import_store` did."""

    verb: str
    count: int
    source: str
    source_bytes: int
    destination: str
    destination_bytes: int
    seconds: float

    @property
    def ratio(self) -> float:
        """Destination bytes / source bytes."""
        return self.destination_bytes / self.source_bytes if self.source_bytes else float("nan")

    def summary(self) -> str:
        return (f"{self.verb} {self.count} records from {self.source} ({self.source_bytes:,} bytes) to "
                f"{self.destination} ({self.destination_bytes:,} bytes, {self.ratio:.3f}x the source) "
                f"in {self.seconds:.1f} s")


def _check_target(path: str, overwrite: bool) -> None:
    if os.path.lexists(path) and not overwrite:
        raise PathExistsError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it")


def _meta(record: Record, source: str) -> dict:
    """The record's meta, once it is a JSON object and the record has a field (as picpac records must)."""
    if not record.fields:
        raise FormatError(f"{source}: record {record.index} has no fields (no bytes values); a picpac record "
                          "holds at least one")
    meta = record.meta
    if not isinstance(meta, dict):
        raise corrupt_error(source, record.index, f"has meta that is a JSON {type(meta).__name__}, not an object")
    return meta


def _copy(reader: RecordReader, writer: Any, source: str, progress: Callable[[int], Any] | None) -> None:
    bar = progress(len(reader)) if progress is not None else None
    try:
        for record in reader:
            writer.append(record.fields, label=record.label, group=record.group, meta=_meta(record, source) or None)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()


def _write_errors(kind: str) -> tuple[type[BaseException], ...]:
    """The errors besides OSError that a format's library raises when a write fails (a full disk)."""
    if kind == "sqlite":
        import sqlite3
        return (sqlite3.Error,)
    if kind == "lmdb":
        return (require_package("lmdb", "lmdb").Error,)
    return ()


def _export(db: str, dst: str, kind: str, progress: Callable[[int], Any] | None = None, *,
            send: Callable[..., None] | None = None, remote: RemoteOptions | None = None,
            layout: str | None = None, shard_size: int | str | None = None) -> int:
    """Copy database ``db`` (a file, a URL, or shards) into the new store ``dst``; the number of records. With
    ``send`` (in the child of :func:`_export_in_child`) the count and the progress go to the parent."""
    with open_database(db, remote=remote) as reader:
        if send is not None:
            send(_HEAD, json.dumps({"count": len(reader)}).encode())
            progress = partial(_SentProgress, send)
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        # tar names the image member by its type unless a field has that name: it needs every name first
        options: dict[str, Any] = {"fields": reader.fields} if kind == "tar" else {"layout": layout} if layout else {}
        if kind == "parquet":  # a table's columns are set before its first row: read the records once first
            options = {"plan": plan_table(reader, reader.fields, reader.classes), "shard_size": shard_size}
        with output_errors(dst, _write_errors(kind)), open_writer(dst, kind, metadata=metadata, **options) as writer:
            _copy(reader, writer, db, progress)
        return len(reader)


def export_store(db: str | os.PathLike, dst: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None, remote: RemoteOptions | None = None,
                 layout: str | None = None, shard_size: int | str | None = None) -> ConvertReport:
    """Copy every record of picpac database ``db`` (and its metadata) into a new ``kind`` store ``dst``; ``db``
    may be a URL (read with ``remote``'s options) or a dataset of shards, as ImageStream takes. ``layout``
    ``'tensorpack'`` (``kind='lmdb'``) writes what tensorpack's own LMDBSerializer.load reads; ``shard_size``
    (``kind='parquet'``: bytes, or "500MB", "1GB") makes ``dst`` a folder of Parquet files of about that size.

    ``progress(total)`` may return a progress bar (``.update(1)`` per record, ``.close()``), e.g.
    ``lambda total: tqdm(total=total)``. ``dst`` appears only when the copy is complete. A write that
    fails (a full disk, a quota) is a FileIOError naming ``dst``; HDF5 stores are written by a child
    process (:data:`CHILD_WRITES`)."""
    start = time.perf_counter()
    db, dst = os.fspath(db), os.fspath(dst)
    _kind(kind, WRITERS)
    if layout is not None and kind != "lmdb":
        raise PicPacValueError(f"{dst}: layout {layout!r} is an LMDB layout; export --to lmdb with it")
    if shard_size is not None and kind != "parquet":
        raise PicPacValueError(f"{dst}: shard_size (--shard-size) splits Parquet exports; export --to parquet with it")
    _check_target(dst, overwrite)
    with open_database(db, remote=remote) as reader:  # a missing or damaged database is named before a child
        size = sum(shard.file_size for shard in getattr(reader, "shards", [reader]))
    if kind in CHILD_WRITES:
        count = _export_in_child(db, dst, kind, progress, remote)
    else:
        count = _export(db, dst, kind, progress, remote=remote, layout=layout, shard_size=shard_size)
    return ConvertReport("exported", count, db, size, f"{kind} {dst}", store_size(dst, kind),
                         time.perf_counter() - start)


def import_store(src: str | os.PathLike, db: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None, image_feature: str | None = None,
                 label_feature: str | None = None, unpickle: bool = False, image_column: str | None = None,
                 label_column: str | None = None) -> ConvertReport:
    """Copy every record of the ``kind`` store ``src`` (and its metadata) into a new picpac database ``db``;
    for a TFRecord file written elsewhere, ``image_feature`` and ``label_feature`` name the features that hold
    the images and the labels (:class:`~.tfrecord.TFRecordReader`), for a table (:data:`TABLE_KINDS`)
    ``image_column`` and ``label_column`` its columns; ``unpickle`` reads the pickled datapoints of
    an LMDB that tensorpack's LMDBSerializer wrote (:class:`~.lmdb.LmdbReader`: only for a file you trust).
    Records are copied as they are; ``picpac import --from parquet|arrow|mds``
    (:func:`picpac.tools.tables.import_table`) also checks every image and turns detection columns into shapes.

    LMDB and HDF5 stores are read by a child process (:class:`IsolatedReader`), so that their libraries'
    crashes on a damaged store are errors; a write that fails (a full disk) is a FileIOError naming ``db``."""
    start = time.perf_counter()
    src, db = os.fspath(src), os.fspath(db)
    _kind(kind)
    features = {k: v for k, v in (("image_feature", image_feature), ("label_feature", label_feature)) if v}
    if features and kind != "tfrecord":
        raise PicPacValueError(f"{src}: {' and '.join(features)} name features of a TFRecord file, not of a "
                               f"{kind} store")
    if unpickle and kind != "lmdb":
        raise PicPacValueError(f"{src}: unpickle reads tensorpack's LMDBs, not a {kind} store")
    columns = {k: v for k, v in (("image_column", image_column), ("label_column", label_column)) if v}
    if columns and kind not in TABLE_KINDS:
        raise PicPacValueError(f"{src}: {' and '.join(columns)} name columns of a table ({', '.join(TABLE_KINDS)}), "
                               f"not of a {kind} store")
    _check_target(db, overwrite)
    options = {"unpickle": True} if unpickle else {**features, **columns}
    with (IsolatedReader(src, kind, **options) if kind in CHILD_READS else open_reader(src, kind, **options)) \
            as reader:
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        with output_errors(db), Writer(db, overwrite=overwrite, metadata=metadata) as writer:
            _copy(reader, writer, src, progress)
        count = len(writer)
    return ConvertReport("imported", count, f"{kind} {src}", store_size(src, kind), db, os.path.getsize(db),
                         time.perf_counter() - start)
