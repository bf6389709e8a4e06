"""Opening a store by its format's name, sizes on disk, and converting to and from picpac databases."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import PicPacValueError
from ..file.reader import Reader
from ..file.writer import Writer
from .base import KINDS, StoreReader, StoreWriter
from .binary import BinaryReader, BinaryWriter, index_path
from .hdf5 import HDF5Reader, HDF5Writer
from .lmdb import LmdbReader, LmdbWriter
from .npz import NpzReader, NpzWriter
from .sqlite import SqliteReader, SqliteWriter
from .tar import TarReader, TarWriter
from .tfrecord import TFRecordReader, TFRecordWriter


WRITERS: dict[str, type[StoreWriter]] = {"lmdb": LmdbWriter, "tfrecord": TFRecordWriter, "hdf5": HDF5Writer,
                                         "npz": NpzWriter, "sqlite": SqliteWriter, "tar": TarWriter,
                                         "binary": BinaryWriter}
READERS: dict[str, type[StoreReader]] = {"lmdb": LmdbReader, "tfrecord": TFRecordReader, "hdf5": HDF5Reader,
                                         "npz": NpzReader, "sqlite": SqliteReader, "tar": TarReader,
                                         "binary": BinaryReader}


def _kind(kind: str) -> str:
    if kind not in WRITERS:
        raise PicPacValueError(f"unknown store format {kind!r}; one of {', '.join(KINDS)}")
    return kind


def open_writer(path: str | os.PathLike, kind: str, *, metadata: Mapping[str, Any] | None = None) -> StoreWriter:
    """A writer of store format ``kind`` (one of :data:`KINDS`) building ``path``."""
    return WRITERS[_kind(kind)](path, metadata=metadata)


def _reopen(path: str, kind: str, check: bool) -> StoreReader:
    return open_reader(path, kind, check=check)


def open_reader(path: str | os.PathLike, kind: str, *, check: bool = True) -> StoreReader:
    """A reader of the ``kind`` store at ``path``; ``check`` verifies stored checksums where the format
    has them (TFRecord's CRC32C, PPR1's CRC32 in lmdb and binary)."""
    return READERS[_kind(kind)](path, check=check)


def store_size(path: str | os.PathLike, kind: str | None = None) -> int:
    """Bytes on disk of a store: its file, the files of its directory, or a binary store's two files."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    size = os.path.getsize(path)
    if kind == "binary" and os.path.exists(index_path(path)):
        size += os.path.getsize(index_path(path))
    return size


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
        raise PicPacValueError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it")


def _copy(reader: Any, writer: Any, progress: Callable[[int], Any] | None) -> None:
    bar = progress(len(reader)) if progress is not None else None
    try:
        for i in range(len(reader)):
            record = reader[i]
            writer.append(record.fields, label=record.label, group=record.group, meta=record.meta or None)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()


def export_store(db: str | os.PathLike, dst: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None) -> ConvertReport:
    """Copy every record of picpac database ``db`` (and its metadata) into a new ``kind`` store ``dst``.

    ``progress(total)`` may return a progress bar (``.update(1)`` per record, ``.close()``), e.g.
    ``lambda total: tqdm(total=total)``. ``dst`` appears only when the copy is complete."""
    start = time.perf_counter()
    db, dst = os.fspath(db), os.fspath(dst)
    _kind(kind)
    _check_target(dst, overwrite)
    with Reader(db) as reader:
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        with open_writer(dst, kind, metadata=metadata) as writer:
            _copy(reader, writer, progress)
        count = len(reader)
    return ConvertReport("exported", count, db, os.path.getsize(db), f"{kind} {dst}", store_size(dst, kind),
                         time.perf_counter() - start)


def import_store(src: str | os.PathLike, db: str | os.PathLike, kind: str, *, overwrite: bool = False,
                 progress: Callable[[int], Any] | None = None) -> ConvertReport:
    """Copy every record of the ``kind`` store ``src`` (and its metadata) into a new picpac database ``db``."""
    start = time.perf_counter()
    src, db = os.fspath(src), os.fspath(db)
    _kind(kind)
    _check_target(db, overwrite)
    with open_reader(src, kind) as reader:
        metadata = {k: v for k, v in reader.metadata.items() if k != "fields"}
        with Writer(db, metadata=metadata) as writer:
            _copy(reader, writer, progress)
        count = len(reader)
    return ConvertReport("imported", count, f"{kind} {src}", store_size(src, kind), db, os.path.getsize(db),
                         time.perf_counter() - start)
