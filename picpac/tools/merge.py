"""`picpac merge`: concatenate the records of several picpac databases into a new one.

Records keep their fields (bytes as stored), group and meta, source after source, in each source's
order. Labels stay as they are, except that class names are reconciled: when the sources name their
classes (metadata ``classes``), the output's table is their union in first-seen order and each label
becomes its class's id in that table. With ``relabel_by_source`` a record's label is the index of
its source (0, 1, ...) and the output's class names are the sources' file names.
"""
from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import __version__
from ..errors import CorruptRecordError, PathExistsError, PicPacValueError
from ..file import durable
from ..file.reader import Reader
from ..file.shards import is_index, read_index
from ..file.writer import Writer
from ..stores.base import output_errors

_OWN_KEYS = ("fields", "created", "classes")  # written by the Writer or by merge itself


@dataclass
class MergeReport:
    """What :func:`merge` wrote: ``counts[k]`` records from ``sources[k]``."""

    output: str
    sources: list[str]
    counts: list[int]
    classes: list[str] = field(default_factory=list)
    """The output's class names ([] when it has none)."""
    remapped: list[str] = field(default_factory=list)
    """Sources whose labels were changed to the ids of the union class table."""
    relabeled: bool = False

    @property
    def records(self) -> int:
        return sum(self.counts)

    def summary(self) -> str:
        """One line: records per source, then the classes."""
        parts = ", ".join(f"{n} from {path}" for path, n in zip(self.sources, self.counts))
        if self.relabeled:
            classes = f"; labels are source indices 0..{len(self.sources) - 1} (classes {', '.join(self.classes)})"
        elif self.classes:
            remapped = f", labels of {len(self.remapped)} source(s) remapped" if self.remapped else ""
            classes = f"; {len(self.classes)} classes{remapped}"
        else:
            classes = "; labels kept, no class names"
        return f"merged {self.records} records into {self.output} ({parts}){classes}"


def _array_layout(reader: Reader) -> dict[str, tuple[tuple[int, ...], str]]:
    return {name: (spec.shape, spec.dtype.str) for name, spec in reader.arrays.items()}


def _check_arrays(readers: Sequence[Reader]) -> None:
    """Every source must declare the same fixed-shape array fields (metadata 'arrays')."""
    first = readers[0]
    expected = _array_layout(first)
    for reader in readers[1:]:
        found = _array_layout(reader)
        if found != expected:
            def describe(layout: dict) -> str:
                return ", ".join(f"{k} {list(s)} {d}" for k, (s, d) in layout.items()) or "no array fields"
            raise PicPacValueError(
                f"{reader.path}: declares {describe(found)} (metadata 'arrays'), but {first.path} declares "
                f"{describe(expected)}; merge only databases whose array fields have the same shape and dtype")


def _class_names(paths: Sequence[str]) -> list[str]:
    """The sources' file names, or their paths as given when two share a file name."""
    names = [os.path.basename(p) for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def _reconcile(readers: Sequence[Reader]) -> tuple[list[str], list[np.ndarray | None]]:
    """The union class table and, per source, the lookup table from its labels to union ids (None: unchanged)."""
    tables = [reader.classes for reader in readers]
    named = [r for r, t in zip(readers, tables) if t]
    if not named:
        return [], [None] * len(readers)
    for reader, table in zip(readers, tables):
        if not table:
            raise PicPacValueError(
                f"{reader.path}: has no class names (metadata 'classes') while {named[0].path} has "
                f"{len(named[0].classes)}, so its labels cannot be matched to classes; re-import it with its class "
                f"names, or pass --relabel-by-source (relabel_by_source=True) to label records by their source")
    union: dict[str, int] = {}
    for table in tables:
        for name in table:
            union.setdefault(name, len(union))
    lookups: list[np.ndarray | None] = []
    for reader, table in zip(readers, tables):
        lookup = np.array([union[name] for name in table], np.float64)
        labels = reader.labels
        valid = (labels >= 0) & (labels < len(table)) & (labels == np.floor(labels))
        if not valid.all():
            bad = int(np.flatnonzero(~valid)[0])
            raise PicPacValueError(f"{reader.path}: record {bad} has label {labels.item(bad)!r}, which is not the id "
                                   f"of one of its {len(table)} class names, so it cannot be matched to a class; pass "
                                   "--relabel-by-source (relabel_by_source=True) to label records by their source")
        lookups.append(None if np.array_equal(lookup, np.arange(len(table))) else lookup)
    return list(union), lookups


def _metadata(readers: Sequence[Reader], classes: list[str], counts: list[int]) -> dict[str, Any]:
    """The output's metadata: the sources' other keys (the first source's value wins), the classes, and
    a ``merged`` entry naming the sources."""
    metadata: dict[str, Any] = {}
    for reader in readers:
        for key, value in reader.metadata.items():
            if key not in _OWN_KEYS:
                metadata.setdefault(key, value)
    if classes:
        metadata["classes"] = classes
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    metadata["merged"] = {"time": now, "by": f"picpac {__version__}",
                          "sources": [r.path for r in readers], "records": counts}
    return metadata


def merge(sources: Sequence[str | os.PathLike], output: str | os.PathLike, *, relabel_by_source: bool = False,
          overwrite: bool = False, progress: Callable[[int], Any] | None = None, sync: bool = True) -> MergeReport:
    """Write the records of ``sources``, one source after another, to the new database ``output``.

    Fields, groups and meta are copied as stored; labels are kept, remapped to the union of the
    sources' class tables, or (``relabel_by_source``) set to the source's index. Every source is
    checked before anything is written; ``output`` (replaced only with ``overwrite``) appears only when
    complete; a write that fails (a full disk) is a FileIOError naming it. ``progress(total)`` may return a
    bar (``update(1)`` per record, ``close()``).
    """
    paths = [q for p in sources for q in (read_index(p) if is_index(p) else [os.fspath(p)])]  # an index: its shards
    output = os.fspath(output)
    if not paths:
        raise PicPacValueError("merge needs at least one source database")
    for path in paths:
        if durable.target(path) == durable.target(output):
            raise PicPacValueError(f"{output}: is also a source; write the merged database to a new path")
    if not overwrite and os.path.lexists(output):
        raise PathExistsError(f"{output}: already exists; pass --overwrite (overwrite=True) to replace it")
    readers: list[Reader] = []
    try:
        for path in paths:
            readers.append(Reader(path))
        _check_arrays(readers)
        counts = [len(r) for r in readers]
        if relabel_by_source:
            classes, lookups = _class_names(paths), [None] * len(readers)
        else:
            classes, lookups = _reconcile(readers)
        report = MergeReport(output, paths, counts, classes, relabeled=relabel_by_source,
                             remapped=[p for p, lookup in zip(paths, lookups) if lookup is not None])
        metadata = _metadata(readers, classes, counts)
        bar = progress(sum(counts)) if progress is not None else None
        try:
            with output_errors(output), Writer(output, overwrite=overwrite, metadata=metadata, sync=sync) as writer:
                for k, (reader, lookup) in enumerate(zip(readers, lookups)):
                    _copy(reader, writer, k if relabel_by_source else None, lookup, bar)
        finally:
            if bar is not None and hasattr(bar, "close"):
                bar.close()
    finally:
        for reader in readers:
            reader.close()
    return report


def _copy(reader: Reader, writer: Writer, label: int | None, lookup: np.ndarray | None, bar: Any) -> None:
    """Append every record of ``reader`` (its checksum checked) with its new label."""
    labels = reader.labels if lookup is None else lookup[reader.labels.astype(np.int64)]
    for i in range(len(reader)):
        record = reader[i]
        meta = record.meta
        if not isinstance(meta, dict):
            raise CorruptRecordError(reader.path, i, f"has meta that is a JSON {type(meta).__name__}, not an object")
        writer.append(record.fields, label=float(labels[i]) if label is None else label, group=record.group,
                      meta=meta or None)
        if bar is not None:
            bar.update(1)
