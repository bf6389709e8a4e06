"""`picpac compact`: rewrite a database keeping only what its newest commit references.

Every append writes a new commit region (metadata and the whole index) after its records and leaves
the older regions in the file, unreferenced (docs/format.md). Compacting copies the committed records
byte for byte, back to back in index order (each after its recovery frame where it had one), followed
by the commit's metadata (its exact bytes) and the index with the new offsets: records, order, labels,
groups, metadata and checksums stay the same.
The new file is built beside the destination and renamed over it, so the destination only ever holds
the old database or the complete new one.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import (CorruptError, CorruptRecordError, FormatError, MissingPathError, PathExistsError,
                      PicPacError)
from ..file import durable
from ..file.frames import (RECORD_FRAME, RECORD_FRAME_DTYPE, RECORD_MAGIC, metadata_frame, read_metadata_frame,
                           record_frame)
from ..file.layout import (EMPTY_COMMIT, HEADER_SIZE, INDEX_DTYPE, SLOT_OFFSETS, Commit, HeaderState, crc32,
                           index_offset_after, pack_header, read_commit, read_header)
from ..file.reader import gather_rows
from ..file.writer import lock_replaced, open_locked
from ..stores.base import output_errors


@dataclass
class CompactReport:
    """What :func:`compact` did: the sizes before and after, and where it wrote (None: left as it was)."""

    path: str
    output: str | None
    records: int
    bytes_before: int
    bytes_after: int

    @property
    def freed(self) -> int:
        return self.bytes_before - self.bytes_after

    def summary(self) -> str:
        """One line: the records and the bytes before and after."""
        if self.output is None:
            return f"{self.path}: already compact ({self.records} records, {self.bytes_before:,} bytes)"
        where = "" if self.output == self.path else f"; written to {self.output}"
        return (f"{self.path}: {self.records} records, {self.bytes_before:,} -> {self.bytes_after:,} bytes "
                f"({self.freed:,} bytes freed){where}")


def _open(path: str, in_place: bool) -> int:
    """``path`` opened to read; ``in_place`` holding the lock appending Writers take (:func:`open_locked`), so
    that none commits to the file while it is being replaced (the lock goes when the descriptor closes)."""
    if in_place:
        fd = open_locked(path, path, os.O_RDONLY, busy="a Writer (or another picpac compact) holds this "
                                                       "database's lock; try again when it has finished")
    else:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        except OSError as exc:
            raise PicPacError(f"{path}: cannot open: {exc.strerror}") from None
    if fd is None:
        raise MissingPathError(f"{path}: no such file")
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise FormatError(f"{path}: is a directory, not a picpac database")
    return fd


def compact(path: str | os.PathLike, output: str | os.PathLike | None = None, *, overwrite: bool = False,
            progress: Callable[[int], Any] | None = None, sync: bool = True) -> CompactReport:
    """Rewrite the database at ``path`` with only its newest commit's records and region.

    Without ``output`` the compact database replaces ``path`` (atomically; a database that is already
    compact is left as it is). An existing ``output`` is replaced only with ``overwrite``. Every record
    is checked against its checksum while it is copied: a damaged one stops the compaction
    (``picpac repair`` drops it); a write that fails (a full disk) is a FileIOError naming the destination,
    which keeps what it held. ``progress(total)`` may return a bar (``update(n)``, ``close()``).
    """
    path = os.fspath(path)
    destination = path if output is None else os.fspath(output)
    in_place = durable.target(destination) == durable.target(path)
    if not in_place and not overwrite and os.path.lexists(destination):
        raise PathExistsError(f"{destination}: already exists; pass --overwrite (overwrite=True) to replace it")
    fd = _open(path, in_place)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise FormatError(f"{path}: empty file, not a picpac database")
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as buf:
            state = read_header(buf, size, path)
            if state.damaged_slots and size > state.current.end:
                raise CorruptError(f"{path}: header commit slot {state.damaged_slots[0]} is damaged and bytes follow "
                                   f"the newest intact commit (a newer commit?); run `picpac repair {path}` first")
            _, index = read_commit(buf, size, state.current, path)
            index = index.copy()
            meta = buf[state.current.offset:state.current.offset + state.current.meta_size]  # its exact bytes
            layout = _Layout(buf, index, meta, size)
            after = index_offset_after(layout.records_end + len(meta)) + INDEX_DTYPE.itemsize * len(index)
            report = CompactReport(path, destination, len(index), size, after)
            if in_place and not state.damaged_slots and layout.is_compact(buf, state.current, size):
                report.output, report.bytes_after = None, size
                return report
            with output_errors(destination):
                _write(buf, path, destination, state, index, meta, layout, overwrite or in_place, in_place,
                       os.fstat(fd).st_mode, progress, sync)
    finally:
        os.close(fd)
    return report


class _Layout:
    """Where the records go in the compact file: back to back in index order after the header, each after
    its recovery frame when it has one in the source (picpac/file/frames.py), and then a metadata frame
    before them all (the commit's metadata), so that the compact file keeps what `picpac repair` needs."""

    def __init__(self, buf: mmap.mmap, index: np.ndarray, meta: bytes, size: int):
        self.offsets = index["offset"].astype(np.int64)  # (an offset past 2**63 is negative: no frame read)
        self.sizes = index["size"].astype(np.int64)
        self.framed = _framed(buf, index, self.offsets, size)
        self.metadata_frame = metadata_frame(meta) if self.framed.any() else b""
        ends = HEADER_SIZE + len(self.metadata_frame) + np.cumsum(self.sizes + RECORD_FRAME.size * self.framed)
        self.new_offsets = ends - self.sizes
        self.records_end = int(ends[-1]) if len(ends) else HEADER_SIZE

    def is_compact(self, buf: mmap.mmap, commit: Commit, size: int) -> bool:
        """Whether the file holds nothing but the records, their frames, metadata frames (where a Writer began
        or met a new field) and the commit region: no older commit region, no bytes of an interrupted append."""
        ends = self.offsets + self.sizes
        before = np.concatenate(([HEADER_SIZE], ends[:-1])).astype(np.int64)
        gaps = self.offsets - before - RECORD_FRAME.size * self.framed
        last = int(ends[-1]) if len(ends) else HEADER_SIZE
        if (gaps < 0).any() or commit.offset != last or commit.end != size:
            return False
        return all(_metadata_frames(buf, int(before[i]), int(before[i] + gaps[i]), size)
                   for i in np.flatnonzero(gaps))


def _framed(buf: mmap.mmap, index: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """Which records have their recovery frame right before them: its magic, and their size and checksum."""
    starts = offsets - RECORD_FRAME.size
    inside = (starts >= HEADER_SIZE) & (offsets <= size)
    heads = np.zeros(len(index), RECORD_FRAME_DTYPE)
    heads[inside] = gather_rows(np.frombuffer(buf, np.uint8), starts[inside], RECORD_FRAME.size) \
        .view(RECORD_FRAME_DTYPE)[:, 0]
    return (inside & (heads["magic"] == RECORD_MAGIC) & (heads["size"] == index["size"])
            & (heads["checksum"] == index["checksum"]))


def _metadata_frames(buf: mmap.mmap, start: int, stop: int, size: int) -> bool:
    """Whether the bytes ``start``..``stop`` are metadata frames and nothing else."""
    while start < stop:
        found = read_metadata_frame(buf, start, size)
        if found is None:
            return False
        start += found[1]
    return start == stop


def _write(buf: mmap.mmap, path: str, destination: str, state: HeaderState, index: np.ndarray, meta: bytes,
           layout: _Layout, replace: bool, in_place: bool, mode: int, progress: Callable[[int], Any] | None,
           sync: bool) -> None:
    """Build the compact database in a temporary file beside ``destination`` (``path`` itself when ``in_place``)
    and move it there."""
    target = durable.target(destination)
    durable.remove_stale_temps(target)
    temp = durable.temp_path(target)
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    published = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a lock marks a live temporary (durable.remove_stale_temps)
        if in_place:
            os.fchmod(fd, stat.S_IMODE(mode))  # in place: the database keeps its permissions
        with os.fdopen(os.dup(fd), "wb") as file:
            file.write(pack_header(EMPTY_COMMIT, EMPTY_COMMIT))
            file.write(layout.metadata_frame)
            _copy_records(buf, path, index, layout.framed, file, progress)
            index["offset"] = layout.new_offsets
            records_end = layout.records_end
            padding = bytes(index_offset_after(records_end + len(meta)) - records_end - len(meta))
            region = meta + padding + index.tobytes()
            file.write(region)
        commit = Commit(state.current.seq + 1, records_end, len(meta), records_end + len(meta) + len(padding),
                        len(index), crc32(region))
        os.pwrite(fd, commit.pack(), SLOT_OFFSETS[0])
        _publish(temp, target, destination, replace, in_place, sync)
        published = True
    finally:
        os.close(fd)
        if not published:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass


def _copy_records(buf: mmap.mmap, path: str, index: np.ndarray, framed: np.ndarray, file: Any,
                  progress: Callable[[int], Any] | None) -> None:
    """Write every record's bytes, each checked against its checksum, after a frame from its index entry
    where it had one."""
    bar = progress(len(index)) if progress is not None else None
    try:
        size = len(buf)
        for i, (offset, length, label, group, checksum, frame) in enumerate(zip(
                index["offset"].tolist(), index["size"].tolist(), index["label"].tolist(), index["group"].tolist(),
                index["checksum"].tolist(), framed.tolist())):
            if offset + length > size:
                raise CorruptRecordError(path, i, "lies past the end of the file")
            data = buf[offset:offset + length]
            if crc32(data) != checksum:
                raise CorruptRecordError(path, i, "fails its checksum (damaged bytes); `picpac repair` drops it")
            if frame:
                file.write(record_frame(length, label, group, checksum))
            file.write(data)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()


def _publish(temp: str, target: str, destination: str, replace: bool, in_place: bool, sync: bool) -> None:
    """Give the finished ``temp`` the name ``target``: over it when ``replace``, else only if it is still free.
    Another file replaced is locked first, as ``Writer(path, overwrite=True)`` does (WriterBusyError while a
    Writer appends to it); in place, the caller holds the lock."""
    held = lock_replaced(target, destination) if replace and not in_place else None
    try:
        if not durable.publish(temp, target, overwrite=replace, sync=sync):
            raise PathExistsError(f"{destination}: already exists; pass --overwrite (overwrite=True) to replace it")
    finally:
        if held is not None:
            os.close(held)
