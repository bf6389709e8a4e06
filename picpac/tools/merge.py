"""`picpac merge`: concatenate the records of several picpac databases into a new one.

Records keep their fields (bytes as stored), group and meta, source after source, in each source's
order, except that class ids are reconciled: when the sources name their classes (metadata
``classes``), the output's table is the first source's followed by each new name in the order met,
and every class id becomes its class's id in that table: the records' labels, or (when the classes
name annotations, as a COCO, YOLO or mask import's do) the annotation shapes' labels and the mask
pixel values. With ``relabel_by_source`` a record's label is the index of its source (0, 1, ...)
and the output's class names are the sources' file names.
"""
from __future__ import annotations

import datetime
import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from .. import image
from .._version import __version__
from ..errors import CorruptRecordError, PathExistsError, PicPacValueError
from ..file import durable
from ..file.layout import load_json
from ..file.reader import Reader
from ..file.shards import is_index, read_index
from ..file.writer import Writer
from ..stores.base import output_errors
from .downsize import decode_field, mask_fields
from .info import what_classes_name

_OWN_KEYS = ("fields", "created", "classes")  # written by the Writer or by merge itself
_NAMES_WHAT = {"labels": "the records' labels", "annotations": "the annotation shapes' labels and mask values"}


@dataclass
class MergeReport:
    """What :func:`merge` wrote: ``counts[k]`` records from ``sources[k]``."""

    output: str
    sources: list[str]
    counts: list[int]
    classes: list[str] = field(default_factory=list)
    """The output's class names ([] when it has none)."""
    remapped: list[str] = field(default_factory=list)
    """Sources some of whose class ids were changed to others of the union class table."""
    relabeled: bool = False
    annotations: bool = False
    """The class names name the annotation shapes' labels and mask values (those were remapped), not the labels."""
    shapes: int = 0
    """Annotation shapes whose label was changed."""
    masks: int = 0
    """Masks whose values were changed (re-encoded as PNG)."""
    used: int | None = None
    """The classes of the table the merged records' labels are (None when the classes name annotations)."""

    @property
    def records(self) -> int:
        return sum(self.counts)

    def summary(self) -> str:
        """One line: records per source, then the classes."""
        parts = ", ".join(f"{n} from {path}" for path, n in zip(self.sources, self.counts))
        if self.relabeled:
            classes = f"; labels are source indices 0..{len(self.sources) - 1} (classes {', '.join(self.classes)})"
        elif self.classes:
            what = "annotation classes" if self.annotations else "labels"
            moved = f" ({self.shapes} shapes, {self.masks} masks)" if self.annotations else ""
            remapped = f", {what} of {len(self.remapped)} source(s) remapped{moved}" if self.remapped else ""
            counted = f"{len(self.classes)} classes" if self.used in (None, len(self.classes)) else \
                f"{self.used} classes in the records (the class table names {len(self.classes)})"
            classes = f"; {counted}{remapped}"
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


def _what(reader: Reader) -> str:
    """What ``reader``'s class names name: "labels" (the records' labels) or "annotations" (the annotation shapes'
    labels and mask values), from its import source as `picpac info` reads it."""
    return "labels" if what_classes_name(reader.metadata.get("source")) == "labels" else "annotations"


@dataclass
class _Remap:
    """How one source's class ids become the output's."""

    reader: Reader
    lookup: np.ndarray
    """int64: the output id of each of the source's ids; -1 for an id the source leaves unnamed that the output
    names. Ids past its end are kept."""
    union: list[str]
    tables: dict[str, np.ndarray] = field(default_factory=dict)
    """:meth:`table` per mask dtype, built once."""

    @property
    def moves(self) -> bool:
        """Whether an id of the source becomes another id (not only unnamed ones refused)."""
        return bool(((self.lookup >= 0) & (self.lookup != np.arange(len(self.lookup)))).any())

    def ids(self, values: np.ndarray) -> np.ndarray:
        """The output ids of the non-negative int64 ``values``."""
        return np.where(values < len(self.lookup), self.lookup[np.minimum(values, len(self.lookup) - 1)], values)

    def table(self, dtype: np.dtype) -> np.ndarray:
        """The output id of every value of the unsigned integer ``dtype`` (a mask's), indexed by the value."""
        key = np.dtype(dtype).str
        if key not in self.tables:
            self.tables[key] = self.ids(np.arange(np.iinfo(dtype).max + 1, dtype=np.int64))
        return self.tables[key]

    def id(self, value: int) -> int:
        """The output id of the non-negative id ``value`` (of any size)."""
        return int(self.lookup[value]) if value < len(self.lookup) else value

    def unnamed(self, what: str, value: int) -> PicPacValueError:
        return PicPacValueError(
            f"{self.reader.path}: {what} {value}, which its classes leave unnamed while the merged table names it "
            f"{self.union[value]!r}, so it cannot be matched to a class; re-import the source with a name for it")


def _reconcile(readers: Sequence[Reader]) -> tuple[list[str], list[_Remap | None], str | None]:
    """The union class table, per source how its ids become the union's (None: unchanged), and what the class
    names name ("labels", "annotations"; None without class names)."""
    tables = [reader.classes for reader in readers]
    named = [r for r, t in zip(readers, tables) if t]
    if not named:
        return [], [None] * len(readers), None
    for reader, table in zip(readers, tables):
        if not table:
            raise PicPacValueError(
                f"{reader.path}: has no class names (metadata 'classes') while {named[0].path} has "
                f"{len(named[0].classes)}, so its labels cannot be matched to classes; re-import it with its class "
                f"names, or pass --relabel-by-source (relabel_by_source=True) to label records by their source")
    what = _what(readers[0])
    for reader in readers[1:]:
        if _what(reader) != what:
            raise PicPacValueError(
                f"{reader.path}: its class names name {_NAMES_WHAT[_what(reader)]}, but {readers[0].path}'s name "
                f"{_NAMES_WHAT[what]}, so one table cannot name both; merge sources whose classes name the same thing "
                "(`picpac info` says which), or pass --relabel-by-source (relabel_by_source=True)")
    union = list(tables[0])  # the first source's ids (its gaps too) stay; each new name is appended
    known = set(union)
    for table in tables[1:]:
        for name in table:
            if name and name not in known:
                known.add(name)
                union.append(name)
    remaps = [_remap(reader, table, union, what) for reader, table in zip(readers, tables)]
    return union, remaps, what


def _check_unambiguous(reader: Reader, table: list[str], union: list[str]) -> None:
    """Each name of ``table`` names one id of it and of ``union``, so that a name tells one id."""
    for names, where in ((table, " at ids"), (union, ", which the merged table names at ids")):
        counts = Counter(name for name in names if name)
        name = next((name for name in table if name and counts[name] > 1), None)
        if name is not None:
            at = ", ".join(str(i) for i, n in enumerate(names) if n == name)
            raise PicPacValueError(f"{reader.path}: names class {name!r}{where} {at}, so its ids cannot be matched to "
                                   "the merged table's by name; give the classes distinct names (re-import it), or "
                                   "pass --relabel-by-source (relabel_by_source=True)")


def _remap(reader: Reader, table: list[str], union: list[str], what: str) -> _Remap | None:
    """How ``reader``'s ids become ids of ``union``, matched by name; None when every id stays and none that it
    leaves unnamed is named in ``union`` (else each record must be checked). Labels that are class ids are
    checked here, before anything is written; annotations as they are copied."""
    if what == "labels":
        labels = reader.labels
        valid = (labels >= 0) & (labels < len(table)) & (labels == np.floor(labels))
        if not valid.all():
            bad = int(np.flatnonzero(~valid)[0])
            raise PicPacValueError(f"{reader.path}: record {bad} has label {labels.item(bad)!r}, which is not the id "
                                   f"of one of its {len(table)} class names, so it cannot be matched to a class; pass "
                                   "--relabel-by-source (relabel_by_source=True) to label records by their source")
    first: dict[str, int] = {}
    for i, name in enumerate(union):
        if name:
            first.setdefault(name, i)
    lookup = np.arange(max(len(table), len(union)), dtype=np.int64)
    for i in range(len(lookup)):
        name = table[i] if i < len(table) else ""
        if name:
            if not (i < len(union) and union[i] == name):  # an id named as the union names it stays
                lookup[i] = first[name]
        elif i < len(union) and union[i]:
            lookup[i] = -1
    remap = _Remap(reader, lookup, union)
    if remap.moves:
        _check_unambiguous(reader, table, union)  # ids matched by name: a name must tell one id
    elif not (lookup < 0).any():
        return None
    if what == "labels":
        mapped = remap.ids(reader.labels.astype(np.int64))
        if (mapped < 0).any():
            bad = int(np.flatnonzero(mapped < 0)[0])
            raise remap.unnamed(f"record {bad} has label", int(reader.labels[bad]))
    return remap


def _metadata(readers: Sequence[Reader], classes: list[str], counts: list[int],
              relabeled: bool) -> dict[str, Any]:
    """The output's metadata: the sources' other keys (the first source's value wins; with ``relabeled`` not
    their import source, which would say their classes name annotations), the classes, and a ``merged`` entry
    naming the sources."""
    metadata: dict[str, Any] = {}
    for reader in readers:
        for key, value in reader.metadata.items():
            if key not in _OWN_KEYS and not (relabeled and key == "source"):
                metadata.setdefault(key, value)
    if classes:
        metadata["classes"] = classes
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    metadata["merged"] = {"time": now, "by": f"picpac {__version__}",
                          "sources": [r.path for r in readers], "records": counts}
    return metadata


def merge(sources: Sequence[str | os.PathLike], output: str | os.PathLike, *, relabel_by_source: bool = False,
          overwrite: bool = False, progress: Callable[[int], Any] | None = None, sync: bool = True,
          max_pixels: int | None = image.MAX_PIXELS) -> MergeReport:
    """Write the records of ``sources``, one source after another, to the new database ``output``.

    Fields, groups and meta are copied as stored; class ids (labels, or annotation shapes' labels and mask
    values) are kept, remapped to the union of the sources' class tables, or (``relabel_by_source``) the label
    is set to the source's index. Class tables and labels are checked before anything is written, annotations
    and masks (decoded under ``max_pixels``) as they are copied; ``output`` (replaced only with ``overwrite``)
    appears only when complete, so a refused source leaves none; a write that fails (a full disk) is a
    FileIOError naming it. ``progress(total)`` may return a bar (``update(1)`` per record, ``close()``).
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
            classes, remaps, what = _class_names(paths), [None] * len(readers), None
        else:
            classes, remaps, what = _reconcile(readers)
        report = MergeReport(output, paths, counts, classes, relabeled=relabel_by_source,
                             remapped=[p for p, remap in zip(paths, remaps) if remap is not None and remap.moves],
                             annotations=what == "annotations")
        metadata = _metadata(readers, classes, counts, relabel_by_source)
        bar = progress(sum(counts)) if progress is not None else None
        try:
            with output_errors(output), Writer(output, overwrite=overwrite, metadata=metadata, sync=sync) as writer:
                for k, (reader, remap) in enumerate(zip(readers, remaps)):
                    _copy(reader, writer, k if relabel_by_source else None, remap, report, max_pixels, bar)
        finally:
            if bar is not None and hasattr(bar, "close"):
                bar.close()
        if classes and not relabel_by_source and not report.annotations:
            with Reader(output) as merged:
                values = np.unique(merged.labels)
            report.used = int(((values >= 0) & (values < len(classes)) & (values == np.floor(values))).sum())
    finally:
        for reader in readers:
            reader.close()
    return report


def _copy(reader: Reader, writer: Writer, label: int | None, remap: _Remap | None, report: MergeReport,
          max_pixels: int | None, bar: Any) -> None:
    """Append every record of ``reader`` (its checksum checked) with its new label, or its annotation shapes'
    labels and mask values remapped (counted in ``report``)."""
    remap_labels = remap is not None and not report.annotations
    labels = remap.ids(reader.labels.astype(np.int64)) if remap_labels else reader.labels
    for i in range(len(reader)):
        record = reader[i]
        meta = record.meta
        if not isinstance(meta, dict):
            raise CorruptRecordError(reader.path, i, f"has meta that is a JSON {type(meta).__name__}, not an object")
        fields = record.fields
        if remap is not None and report.annotations:
            fields = dict(fields)
            masks = mask_fields(record, "image")
            for name in masks:
                fields[name] = _remap_mask(remap, i, name, fields[name], max_pixels, report)
            if "annotation" in fields and "annotation" not in masks:
                fields["annotation"] = _remap_shapes(remap, i, fields["annotation"], report)
        writer.append(fields, label=float(labels[i]) if label is None else label, group=record.group,
                      meta=meta or None)
        if bar is not None:
            bar.update(1)


def _remap_shapes(remap: _Remap, i: int, data: Any, report: MergeReport) -> Any:
    """Record ``i``'s PicPac JSON annotation with every shape's label the output's id (the bytes as they are when
    none changes; else written compactly)."""
    path = remap.reader.path

    def not_shapes(why: str) -> PicPacValueError:
        return PicPacValueError(f"{path}: record {i} has an 'annotation' that is not PicPac JSON ({why}), so its "
                                "shapes' classes cannot be remapped; fix or drop the record")

    doc = load_json(data, not_shapes)
    specs = doc.get("shapes") if isinstance(doc, dict) else None
    if not isinstance(specs, list):
        raise not_shapes('no "shapes" list')
    changed = 0
    for s, spec in enumerate(specs):
        if not isinstance(spec, dict):
            raise not_shapes(f"shape {s} is a JSON {type(spec).__name__}, not an object")
        label, what = spec.get("label"), f"record {i} has annotation shape {s} ({spec.get('type')}) label"
        if isinstance(label, bool) or not isinstance(label, (int, float)) or not float(label).is_integer() \
                or label < 0:
            raise PicPacValueError(f"{path}: {what} {label!r}, which is not a class id (an integer 0, 1, ...), so it "
                                   "cannot be matched to a class; fix the annotation, or pass --relabel-by-source")
        new = remap.id(int(label))
        if new < 0:
            raise remap.unnamed(what, int(label))
        if new != label:
            spec["label"] = new
            changed += 1
    report.shapes += changed
    return json.dumps(doc, separators=(",", ":")).encode() if changed else data


def _remap_mask(remap: _Remap, i: int, name: str, data: Any, max_pixels: int | None, report: MergeReport) -> Any:
    """Record ``i``'s mask ``name`` with every pixel the output's id of its class, re-encoded losslessly as PNG
    (8-bit unless an id needs 16); the bytes as they are when no value changes."""
    path = remap.reader.path
    mask = decode_field(remap.reader, i, name, data, max_pixels, cv2.IMREAD_UNCHANGED)
    if mask.ndim != 2 or mask.dtype not in (np.uint8, np.uint16):
        what = f"{mask.shape[2]} channels" if mask.ndim == 3 else f"{mask.dtype} pixels"
        raise PicPacValueError(f"{path}: record {i} has a {name!r} of {what}; class masks have one channel of 8- or "
                               "16-bit class ids, so its values cannot be remapped; re-import it with such masks")
    new = remap.table(mask.dtype)[mask]
    unnamed = new < 0
    if unnamed.any():
        raise remap.unnamed(f"record {i} has {name!r} value", int(mask[unnamed].min()))
    if np.array_equal(new, mask):
        return data
    top = int(new.max())
    if top > np.iinfo(np.uint16).max:
        raise PicPacValueError(f"{path}: record {i} has {name!r} values whose merged ids pass {np.iinfo(np.uint16).max}"
                               ", more than a 16-bit mask holds; merge fewer classes")
    dtype = mask.dtype if top <= np.iinfo(mask.dtype).max else np.uint16
    report.masks += 1
    return image.encode(new.astype(dtype), ".png", lossless=True)
