"""Recover every committed record a damaged picpac database still holds (`picpac repair`).

The header's two commit slots are the only way a Reader finds a commit. When the newest slot is
damaged, the commit it described is still in the file: records are written before the commit
region (metadata JSON, padding, index) that lists them, and a later append writes after it. So the
file is walked from the first record: records back to back, then a commit region whose index lists
exactly the records before it, then the records of the next append, and so on. The last commit
region found (or the one an intact slot describes, when it lies further on) is the newest commit;
its records whose bytes still match their checksums are written to a new database.
"""
from __future__ import annotations

import datetime
import json
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import __version__
from ..errors import CorruptError, FormatError, PathExistsError
from . import durable
from .layout import (FIELD_ENTRY_SIZE, HEADER_SIZE, INDEX_DTYPE, NO_GROUP, RECORD_HEAD, crc32, field_table,
                     index_offset_after, load_json, read_commit, read_header)
from .writer import Writer

_MAX_METADATA = 256 << 20  # a commit's metadata JSON larger than this is not looked for


@dataclass
class RepairReport:
    """What :func:`repair` found and wrote."""

    path: str
    output: str | None
    """Where the repaired database was written; None when nothing needed repairing."""
    records: int
    """Records in the repaired database (or in the intact one)."""
    readable: int
    """Records a Reader saw before the repair (0 when it could not open the file)."""
    damaged: list[int] = field(default_factory=list)
    """Records of the newest commit dropped because their bytes fail their checksum or layout."""
    uncommitted: int = 0
    """Complete records after the newest commit, never committed: dropped, as an append drops them."""
    tail_bytes: int = 0
    """Bytes at the end that are neither records nor a commit (an interrupted write): dropped."""

    def summary(self) -> str:
        """One line: what was recovered and what was dropped."""
        dropped = [f"{n} {what}" for n, what in ((len(self.damaged), "damaged record(s)"),
                                                   (self.uncommitted, "uncommitted record(s)"),
                                                   (self.tail_bytes, "trailing byte(s)")) if n]
        lost = f"; dropped {', '.join(dropped)}" if dropped else ""
        if self.output is None:
            return f"{self.path}: OK, nothing to repair ({self.records} records){lost}"
        return (f"{self.path}: recovered {self.records} records (a Reader saw {self.readable}){lost}; "
                f"written to {self.output}")


@dataclass
class _Commit:
    metadata: dict
    index: np.ndarray
    end: int


def repair(path: str | os.PathLike, output: str | os.PathLike | None = None, *, overwrite: bool = False,
           sync: bool = True) -> RepairReport:
    """Recover the newest commit of the database at ``path`` and write its intact records to ``output``.

    Without ``output`` the repaired database replaces ``path`` (atomically, as ``Writer(path,
    overwrite=True)`` does). An existing ``output`` (other than ``path``) is replaced only with ``overwrite``
    (``--overwrite``). A database with nothing to repair (intact header slots, every record matching
    its checksum, nothing after the newest commit) is left as it is and no output is written.
    """
    path = os.fspath(path)
    if output is not None:
        output = os.fspath(output)
        if not overwrite and os.path.exists(output) and durable.target(output) != durable.target(path):
            raise PathExistsError(f"{output}: already exists; pass --overwrite (overwrite=True) to replace it "
                                  "with the repaired database")
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size < HEADER_SIZE:
            raise CorruptError(f"{path}: {size} bytes, shorter than the {HEADER_SIZE}-byte header: nothing to repair")
        with mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ) as buf:
            return _repair(path, buf, size, output, overwrite, sync)


def _repair(path: str, buf: mmap.mmap, size: int, output: str | None, overwrite: bool, sync: bool) -> RepairReport:
    readable, slot_commit, damaged_slots = _header_commit(path, buf, size)
    walked, commits, end = _walk(buf, size)
    # the newest commit lies furthest on; on a tie, the one an intact slot describes
    newest = max(([slot_commit] if slot_commit else []) + commits, key=lambda c: c.end, default=None)
    if newest is None:
        raise CorruptError(f"{path}: no commit could be found in the file: there is nothing to recover")
    uncommitted = sum(1 for offset, _ in walked if offset >= newest.end)
    report = RepairReport(path, None, 0, readable, uncommitted=uncommitted,
                          tail_bytes=size - max(end, newest.end))
    records = list(_intact_records(buf, newest, report))
    report.records = len(records)
    if not (damaged_slots or report.damaged or uncommitted or report.tail_bytes or newest is not slot_commit):
        return report
    report.output = output or path
    replacing = output is None or durable.target(output) == durable.target(path)  # DB itself is replaced
    metadata = {k: v for k, v in newest.metadata.items() if k != "fields"}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    metadata["repaired"] = {"time": now, "by": f"picpac {__version__}", "records": len(records),
                            "dropped": len(report.damaged)}
    with Writer(report.output, overwrite=replacing or overwrite, metadata=metadata, sync=sync) as writer:
        for fields, label, group, meta in records:
            writer.append(fields, label=label, group=group, meta=meta)
    return report


def _header_commit(path: str, buf: mmap.mmap, size: int) -> tuple[int, _Commit | None, tuple[int, ...]]:
    """(records a Reader sees, the commit of the newest intact slot, the damaged slots); the commit is None
    when no slot leads to an intact commit."""
    try:
        state = read_header(buf, size, path)  # not a picpac file, or a newer version: raised
    except CorruptError:
        return 0, None, (0, 1)
    try:
        metadata, index = read_commit(buf, size, state.current, path)
    except FormatError:
        return 0, None, state.damaged_slots
    return len(index), _Commit(metadata, index.copy(), state.current.end), state.damaged_slots


def _walk(buf: mmap.mmap, size: int) -> tuple[list[tuple[int, int]], list[_Commit], int]:
    """Records (offset, size) and commit regions found from the first record on, and where the walk stopped."""
    records: list[tuple[int, int]] = []
    commits: list[_Commit] = []
    position = HEADER_SIZE
    while position < size:
        record = _record_size(buf, position, size)
        if record is not None:
            records.append((position, record))
            position += record
            continue
        commit = _commit_at(buf, position, size, records)
        if commit is None:
            break
        commits.append(commit)
        position = commit.end
    return records, commits, position


def _record_size(buf: mmap.mmap, position: int, size: int) -> int | None:
    """The size of the record whose head is at ``position``, None when none fits there."""
    if position + RECORD_HEAD.size > size:
        return None
    nfields, reserved, meta = RECORD_HEAD.unpack_from(buf, position)
    table = position + RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields
    if reserved or not nfields or table + meta > size:  # a commit's metadata starts '{"': reserved != 0
        return None
    entries = field_table(nfields).unpack_from(buf, position + RECORD_HEAD.size)
    end = table + meta + sum(entries[1::2])
    return end - position if end <= size else None


def _commit_at(buf: mmap.mmap, position: int, size: int, records: list[tuple[int, int]]) -> _Commit | None:
    """The commit region at ``position`` whose index lists exactly ``records``, or None."""
    if buf[position] != ord("{"):
        return None
    meta_size = _json_length(buf, position, size)
    if meta_size is None:
        return None
    try:
        metadata = load_json(buf[position:position + meta_size], ValueError)
    except ValueError:
        return None
    start = index_offset_after(position + meta_size)
    end = start + len(records) * INDEX_DTYPE.itemsize
    if not isinstance(metadata, dict) or not isinstance(metadata.get("fields"), list) or end > size \
            or any(buf[position + meta_size:start]):
        return None
    index = np.frombuffer(buf, INDEX_DTYPE, len(records), start).copy()
    walked = np.array(records, np.uint64).reshape(-1, 2)
    if not (np.array_equal(index["offset"], walked[:, 0]) and np.array_equal(index["size"], walked[:, 1])):
        return None
    return _Commit(metadata, index, end)


def _json_length(buf: mmap.mmap, position: int, size: int) -> int | None:
    """The length of the JSON object starting at ``position`` (read in growing windows), None if none does."""
    decoder = json.JSONDecoder()
    window = 1 << 16
    while True:
        stop = min(size, position + window)
        try:  # latin-1 maps each byte to one character, so lengths are byte counts
            return decoder.raw_decode(buf[position:stop].decode("latin-1"))[1]
        except (ValueError, RecursionError):
            if stop == size or window >= _MAX_METADATA:
                return None
            window *= 4


def _intact_records(buf: mmap.mmap, commit: _Commit, report: RepairReport):
    """(fields, label, group, meta) of each record of ``commit`` that matches its checksum and parses."""
    names = commit.metadata["fields"]
    for i, entry in enumerate(commit.index):
        offset, size = int(entry["offset"]), int(entry["size"])
        data = memoryview(buf)[offset:offset + size]
        parsed = _parse(data, names) if offset + size <= len(buf) and crc32(data) == entry["checksum"] else None
        if parsed is None:
            report.damaged.append(i)
            continue
        group = int(entry["group"])
        yield parsed[0], float(entry["label"]), None if group == NO_GROUP else group, parsed[1]


def _parse(data: memoryview, names: list[str]) -> tuple[dict[str, memoryview], Any] | None:
    """A record's fields by name and its meta, or None when its layout is damaged."""
    if len(data) < RECORD_HEAD.size:
        return None
    nfields, _, meta_size = RECORD_HEAD.unpack_from(data)
    position = RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields
    if position + meta_size > len(data):
        return None
    entries = field_table(nfields).unpack_from(data, RECORD_HEAD.size)
    meta = data[position:position + meta_size]
    position += meta_size
    fields = {}
    for fid, length in zip(entries[::2], entries[1::2]):
        if fid >= len(names) or position + length > len(data):
            return None
        fields[names[fid]] = data[position:position + length]
        position += length
    if position != len(data):
        return None
    try:
        return fields, load_json(meta, ValueError) if meta_size else None
    except ValueError:
        return None

