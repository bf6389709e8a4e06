"""`picpac verify`: check the header, the index and every record's checksum; optionally decode images.

A database that cannot be opened at all (not a picpac file, a damaged file head, both commit slots
damaged, a damaged metadata/index region, a truncated tail) raises the Reader's PicPacError: there
is no index to check records against. Everything found once the database opens is collected as a
problem in the :class:`VerifyReport`.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from .. import image
from ..errors import CorruptRecordError, FormatError, ImageTooLargeError, PicPacValueError
from ..file.layout import HEADER_SIZE
from ..file.reader import IndexedReader
from ..file.remote import RemoteOptions
from ..file.shards import open_file

DECODED_FIELDS = ("image", "mask")


@dataclass
class VerifyReport:
    """What :func:`verify` found: ``problems`` (one line each) and the indices of bad records."""

    path: str
    records: int
    decoded: bool
    problems: list[str] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    """Records that fail their checksum or whose layout is damaged."""
    undecodable: list[int] = field(default_factory=list)
    """Records with an image (or mask) field that does not decode, or decodes only with libjpeg's warnings (a damaged
    JPEG: the problem gives the warning) (only with ``decode=True``)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: OK, or how many problems and bad records."""
        checked = f"{self.records} records" + (", images decoded" if self.decoded else "")
        if self.ok:
            return f"{self.path}: OK ({checked})"
        repair = "; `picpac repair` drops the damaged records" if self.damaged else ""
        return (f"{self.path}: {len(self.problems)} problem(s) in {checked} ({len(self.damaged)} damaged, "
                f"{len(self.undecodable)} undecodable){repair}")


def verify(path: str | os.PathLike, *, decode: bool = False, fields: Sequence[str] | None = None,
           progress: bool | None = None, max_pixels: int | None = image.MAX_PIXELS,
           remote: RemoteOptions | None = None) -> VerifyReport:
    """Check the database at ``path`` (a file, or a URL read with ``remote``'s options) and report every problem
    found.

    With ``decode=True`` every ``image`` and ``mask`` field (or the fields named in ``fields``) is
    decoded with OpenCV (a field declared as an array, metadata ``arrays``, is checked for its size
    instead); an image over ``max_pixels`` (None or 0: no limit) is a problem, found from its header
    without decoding it. ``progress`` shows a tqdm bar (None: only on a terminal). Raises
    PicPacError when the database cannot be opened at all.
    """
    with _open(path, remote) as reader:
        state = reader.header
        names = _decoded_fields(reader, fields) if decode else []
        report = VerifyReport(reader.path, len(reader), decode)
        beyond = reader.file_size - state.current.end
        after = (f"{beyond} bytes follow that commit, which a newer commit may list: `picpac repair` "
                 "recovers its records" if beyond else "the next append rewrites the damaged slot")
        report.problems += [f"header: commit slot {s} is damaged (fails its checksum); the database reads "
                            f"from slot {state.slot}, and {after}" for s in state.damaged_slots]
        report.problems += _index_problems(reader.index, state.current.offset)
        bar = tqdm(range(len(reader)), desc="verify", unit="rec",
                   disable=None if progress is None else not progress)
        for i in bar:
            _check_record(reader, i, names, report, max_pixels)
    return report


def _open(path: str | os.PathLike, remote: RemoteOptions | None) -> IndexedReader:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the damaged-slot warning: reported as a problem
        return open_file(os.fspath(path), check=True, remote=remote)


def _decoded_fields(reader: IndexedReader, fields: Sequence[str] | None) -> list[str]:
    if fields is None:
        return [name for name in DECODED_FIELDS if name in reader.fields]
    missing = [name for name in fields if name not in reader.fields]
    if missing:
        raise PicPacValueError(f"{reader.path}: no field {', '.join(map(repr, missing))} to decode; "
                               f"its fields are {reader.fields}")
    return list(fields)


def _index_problems(index: np.ndarray, data_end: int) -> list[str]:
    """Index entries pointing outside the data area, overlapping records, a nonzero reserved column."""
    offsets = index["offset"]
    ends = offsets + index["size"]  # wraps on overflow, caught by ends < offsets
    problems = [f"index entry {i}: record bytes {offsets[i]}-{ends[i]} lie outside the data area "
                f"(bytes {HEADER_SIZE}-{data_end})"
                for i in np.flatnonzero((offsets < HEADER_SIZE) | (ends > data_end) | (ends < offsets))]
    order = np.argsort(offsets, kind="stable")
    overlapping = ends[order[:-1]] > offsets[order[1:]]
    problems += [f"index entries {a} and {b}: their records overlap"
                 for a, b in zip(order[:-1][overlapping], order[1:][overlapping])]
    problems += [f"index entry {i}: reserved column is {index['reserved'][i]}, not 0"
                 for i in np.flatnonzero(index["reserved"])]
    return problems


def _check_record(reader: IndexedReader, i: int, names: list[str], report: VerifyReport,
                  max_pixels: int | None) -> None:
    try:
        record = reader.read(i, check=True)
    except CorruptRecordError as exc:
        report.damaged.append(i)
        report.problems.append(f"record {i}{_meta_path(reader, i)}: {exc.reason}")
        return
    arrays = _arrays(reader)
    decoded = {name: _decode_problem(record.fields[name], max_pixels) for name in names
               if name in record.fields and name not in arrays}
    bad = [name for name, why in decoded.items() if why == _UNDECODABLE]
    wrong = [f"field {name!r} has {record.fields[name].nbytes} bytes, not the {arrays[name].nbytes} of a "
             f"{arrays[name]} array" for name in names
             if name in record.fields and name in arrays and record.fields[name].nbytes != arrays[name].nbytes]
    wrong += [f"field {name!r} {why}" for name, why in decoded.items() if why not in (None, _UNDECODABLE)]
    if bad or wrong:
        report.undecodable.append(i)
    if bad:
        report.problems.append(f"record {i}{_meta_path(reader, i)}: field {', '.join(map(repr, bad))} {_UNDECODABLE}")
    report.problems += [f"record {i}{_meta_path(reader, i)}: {why}" for why in wrong]


def _arrays(reader: IndexedReader) -> dict:
    """The declared array fields (checked for their size instead of decoded); {} when the declaration is bad."""
    try:
        return reader.arrays
    except FormatError:
        return {}


def _meta_path(reader: IndexedReader, i: int) -> str:
    """' (PATH)' from record i's meta "path" when the record parses that far, else ''."""
    try:
        meta = reader.read(i, check=False).meta
    except (CorruptRecordError, ValueError):
        return ""
    path = meta.get("path") if isinstance(meta, dict) else None
    return f" ({path})" if isinstance(path, str) else ""


_UNDECODABLE = "does not decode as an image"


def _decode_problem(data: memoryview, max_pixels: int | None) -> str | None:
    """Why ``data`` does not decode (or decodes damaged), None when it decodes."""
    warned: list[str] = []
    try:
        if image.decode(data, max_pixels=max_pixels, on_damage=warned.append) is None:
            return _UNDECODABLE
        return f"is a damaged JPEG (libjpeg: {warned[0]})" if warned else None
    except ImageTooLargeError as exc:
        return f"is an image of {exc.advice()}"
