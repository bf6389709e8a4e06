"""Recover every committed record a damaged picpac database still holds (`picpac repair`).

The header's two commit slots are the only way a Reader finds a commit. When the newest slot is
damaged, the commit it described is still in the file: records are written before the commit
region (metadata JSON, padding, index) that lists them, and a later append writes after it. So the
file is walked from the first record: records (each after its recovery frame, when it has one), then
a commit region whose index lists exactly the records before it, then the records of the next
append, and so on. The last commit region found (or the one an intact slot describes, when it lies
further on) is the newest commit; its records whose bytes still match their checksums are written to
a new database.

Repair writes only what a checksum vouches for. A commit region an intact slot describes is checked by the
slot's CRC. Any other region found by the walk is checked by nothing of its own: a flipped bit in it could turn
a label 3 into 6 or rename a field. So its records' labels, groups and checksums are taken from their recovery
frames (each checked by its own CRC), and its field names from the last metadata frame before it; a record with
no frame (and not in an intact slot's commit) is dropped, as is a region whose field names nothing vouches for.
And the slots say what was published: while both are intact, a region after the newest slot's commit was written
by a commit that never reached its slot (a crash between the two), so its records are uncommitted, as a Reader and
an append see them; only where a slot is damaged may the walk's furthest region be the newest commit.

A truncated file (an interrupted copy) has lost its newest commit's region, which lies at its end;
its intact slot still says where that region began. The records before that point were all
committed by it: those of the last commit region found, and after it those whose recovery frames
(picpac/file/frames.py) give their label, group and checksum, named by the last metadata frame.
"""
from __future__ import annotations

import datetime
import json
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import CorruptError, FormatError, PathExistsError
from . import durable
from .frames import MAX_METADATA, RECORD_FRAME, RecordFrame, read_metadata_frame, read_record_frame
from .layout import (FIELD_ENTRY_SIZE, HEADER_SIZE, INDEX_DTYPE, NO_GROUP, RECORD_HEAD, SLOT, SLOT_OFFSETS, Commit,
                     crc32, field_table, index_offset_after, load_json, read_commit, read_header, unpack_slot)
from .writer import Writer



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
    cut_off: int = 0
    """Records of the newest commit that a truncated file holds no longer (or only without the recovery
    frame that would verify them): lost."""
    unvouched: int = 0
    """Records of a commit region no slot's CRC checks that have no recovery frame to vouch for their label,
    group and checksum: dropped."""
    corrected: int = 0
    """Records whose label, group or checksum in an unchecked commit region differ from their recovery frame's: the
    frame's were kept."""

    def summary(self) -> str:
        """One line: what was recovered and what was dropped."""
        dropped = [f"{n} {what}" for n, what in ((len(self.damaged), "damaged record(s)"),
                                                   (self.cut_off, "record(s) cut off by the truncation"),
                                                   (self.unvouched, "record(s) no checksum vouches for"),
                                                   (self.uncommitted, "uncommitted record(s)"),
                                                   (self.tail_bytes, "trailing byte(s)")) if n]
        lost = f"; dropped {', '.join(dropped)}" if dropped else ""
        if self.corrected:
            lost += (f"; {self.corrected} record(s) kept the label, group and checksum of their recovery frames, "
                     "where the unchecked commit region said otherwise")
        if self.output is None:
            return f"{self.path}: OK, nothing to repair ({self.records} records){lost}"
        return (f"{self.path}: recovered {self.records} records (a Reader saw {self.readable}){lost}; "
                f"written to {self.output}")


@dataclass
class _Commit:
    metadata: dict
    index: np.ndarray
    end: int
    offset: int = 0
    """Where its region begins (0: a commit put together from frames, which has none)."""


@dataclass
class _Walk:
    """What a walk through the file found, in file order."""

    records: list[tuple[int, int]] = field(default_factory=list)
    """(offset, size) of each record."""
    frames: dict[int, RecordFrame] = field(default_factory=dict)
    """The recovery frame of each record that has one, by the record's offset."""
    metadata: list[tuple[int, dict]] = field(default_factory=list)
    """(position, metadata) of each metadata frame."""
    commits: list[_Commit] = field(default_factory=list)
    end: int = HEADER_SIZE
    """Where the walk stopped: the first byte that is no record, frame or commit region."""


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
    readable, slot_commit, damaged_slots, cut, slots = _header_commit(path, buf, size)
    walk = _walk(buf, size)
    report = RepairReport(path, None, 0, readable)
    checked = _checked(walk, slot_commit, slots, buf)
    if cut is not None:
        newest = _vouched(_cut_commit(path, walk, cut, size), walk, checked, report)
    elif slot_commit is not None and not damaged_slots:  # what the slots published; later regions never reached one
        newest = slot_commit
    else:  # a slot is damaged: the newest commit lies furthest on; on a tie, the one an intact slot describes
        found = max(([slot_commit] if slot_commit else []) + walk.commits, key=lambda c: c.end, default=None)
        newest = _vouched(found, walk, checked, report) if found is not None else None
        if newest is None and found is not None:
            newest = slot_commit
    if newest is None:
        raise CorruptError(f"{path}: no commit that a checksum vouches for could be found in the file: there is "
                           "nothing to recover")
    report.uncommitted = sum(1 for offset, _ in walk.records if offset >= newest.end)
    report.tail_bytes = size - (walk.end if cut is not None else max(walk.end, newest.end))
    report.cut_off = max(0, cut.count - len(newest.index) - report.unvouched) if cut is not None else 0
    records = list(_intact_records(buf, newest, report))
    report.records = len(records)
    if not (damaged_slots or report.damaged or report.uncommitted or report.tail_bytes or newest is not slot_commit):
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


def _header_commit(path: str, buf: mmap.mmap, size: int
                   ) -> tuple[int, _Commit | None, tuple[int, ...], Commit | None, list[Commit]]:
    """(records a Reader sees, the commit of the newest intact slot, the damaged slots, the newest slot's
    commit when its region ends past the end of the file: a truncated file, and the intact slots' commits); the
    commit is None when no slot leads to an intact commit."""
    try:
        state = read_header(buf, size, path)  # not a picpac file, or a newer version: raised
    except CorruptError:
        return 0, None, (0, 1), None, []
    slots = [c for o in SLOT_OFFSETS if (c := unpack_slot(bytes(buf[o:o + SLOT.size]))) is not None and c.seq]
    current = state.current
    if size < current.end and HEADER_SIZE <= current.offset <= current.index_offset:
        return 0, None, state.damaged_slots, current, slots
    try:
        metadata, index = read_commit(buf, size, current, path)
    except FormatError:
        return 0, None, state.damaged_slots, None, slots
    return len(index), _Commit(metadata, index.copy(), current.end, current.offset), state.damaged_slots, None, slots


def _checked(walk: _Walk, slot_commit: _Commit | None, slots: list[Commit], buf: mmap.mmap) -> list[_Commit]:
    """The commits a slot's CRC checks: the newest intact slot's, and each region the walk found whose bytes match an
    intact slot's CRC (an older slot describes an older commit)."""
    checked = [slot_commit] if slot_commit is not None else []
    return checked + [c for c in walk.commits if any(s.offset == c.offset and s.end == c.end and
                                                     crc32(buf[s.offset:s.end]) == s.crc for s in slots)]


def _vouched(commit: _Commit, walk: _Walk, checked: list[_Commit], report: RepairReport) -> _Commit | None:
    """``commit`` with only what a checksum vouches for: as it is when a slot's CRC checks it (``checked``); else its
    field names from the last metadata frame before it ends (or from the last checked commit before it ends), and
    each record's label, group and checksum from its recovery frame (or from a checked commit that lists the same
    record); records with neither are dropped (``report.unvouched``). None when nothing vouches for its field
    names."""
    if any(commit is c or (commit.offset and (c.offset, c.end) == (commit.offset, commit.end)) for c in checked):
        return commit
    named = [metadata for position, metadata in walk.metadata if position < commit.end]
    earlier = [c for c in checked if c.end <= commit.end]
    if named:
        metadata = named[-1]
    elif earlier:
        metadata = max(earlier, key=lambda c: c.end).metadata
    else:
        return None
    known = {int(row["offset"]): row for c in checked for row in c.index}
    rows = []
    for row in commit.index.copy():
        offset = int(row["offset"])
        frame = walk.frames.get(offset)
        if frame is not None and frame.size == int(row["size"]):
            if (float(row["label"]), int(row["group"]), int(row["checksum"])) != \
                    (frame.label, frame.group, frame.checksum) and not np.isnan(frame.label):
                report.corrected += 1
            row["label"], row["group"], row["checksum"] = frame.label, frame.group, frame.checksum
        elif offset in known and int(known[offset]["size"]) == int(row["size"]):
            row = known[offset]
        else:
            report.unvouched += 1
            continue
        rows.append(row)
    return _Commit(metadata, np.array(rows, INDEX_DTYPE), commit.end, commit.offset)


def _cut_commit(path: str, walk: _Walk, cut: Commit, size: int) -> _Commit:
    """The records of the commit ``cut`` whose region a truncation removed: the last commit region found
    before it, then the framed records after that one, named by the last metadata frame."""
    base = max((c for c in walk.commits if c.end <= cut.offset), key=lambda c: c.end, default=None)
    start = base.end if base is not None else HEADER_SIZE
    framed = [(offset, length) for offset, length in walk.records
              if start <= offset and offset + length <= cut.offset and offset in walk.frames]
    named = [metadata for position, metadata in walk.metadata if start <= position < cut.offset]
    metadata = named[-1] if named else base.metadata if base is not None else None
    if metadata is None:
        raise CorruptError(
            f"{path}: truncated: the file ends at byte {size}, within or before its newest commit (bytes "
            f"{cut.offset}-{cut.end}), and what is left holds no older commit and no recovery frames (records "
            "written by a picpac without them, or of array fields): there is nothing to recover")
    rows = np.zeros(len(framed), INDEX_DTYPE)
    for row, (offset, length) in zip(rows, framed):
        frame = walk.frames[offset]
        row["offset"], row["size"], row["label"], row["group"], row["checksum"] = (
            offset, length, frame.label, frame.group, frame.checksum)
    index = rows if base is None else np.concatenate([base.index, rows])
    return _Commit(metadata, index, cut.offset)


def _walk(buf: mmap.mmap, size: int) -> _Walk:
    """Records, frames and commit regions found from the first record on, and where the walk stopped."""
    walk = _Walk()
    position = HEADER_SIZE
    while position < size:
        frame = read_record_frame(buf, position, size)
        if frame is not None:  # its record's size, even when the record's bytes are damaged
            start = position + RECORD_FRAME.size
            if frame.size > size - start:
                break  # a torn record
            walk.records.append((start, frame.size))
            walk.frames[start] = frame
            position = start + frame.size
            continue
        if (found := read_metadata_frame(buf, position, size)) is not None:
            walk.metadata.append((position, found[0]))
            position += found[1]
            continue
        record = _record_size(buf, position, size)
        if record is not None:
            walk.records.append((position, record))
            position += record
            continue
        commit = _commit_at(buf, position, size, walk.records)
        if commit is None:
            break
        walk.commits.append(commit)
        position = commit.end
    walk.end = position
    return walk


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
    return _Commit(metadata, index, end, position)


def _json_length(buf: mmap.mmap, position: int, size: int) -> int | None:
    """The length of the JSON object starting at ``position`` (read in growing windows), None if none does."""
    decoder = json.JSONDecoder()
    window = 1 << 16
    while True:
        stop = min(size, position + window)
        try:  # latin-1 maps each byte to one character, so lengths are byte counts
            return decoder.raw_decode(buf[position:stop].decode("latin-1"))[1]
        except (ValueError, RecursionError):
            if stop == size or window >= MAX_METADATA:
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

