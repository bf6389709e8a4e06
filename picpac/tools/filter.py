"""`picpac filter`: copy the records of a database that match conditions into a new one.

Conditions on the index (labels, groups) are evaluated on the whole index at once; conditions on a
record (its meta, its image's size) read only the records the index conditions let through. An
image's size comes from its header (:func:`picpac.image.headers.image_size`) or, for a declared array
field, from the declaration; only an image whose header picpac cannot read is decoded, within
``max_pixels``. Kept records are copied field for field, byte for byte, with the database's metadata.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ImageTooLargeError, PicPacValueError
from ..file.layout import NO_GROUP
from ..file.reader import Reader, Record
from ..image.decoding import MAX_PIXELS, decode
from ..image.headers import image_size
from ..stores.base import output_errors
from .info import what_classes_name
from .relabel import NUMBER, annotation, class_id, encoded, shape_class, with_shapes
from .split import (
    Progress,
    append_copy,
    bar_of,
    check_outputs,
    copied_metadata,
    writers,
)



@dataclass
class FilterReport:
    """What :func:`filter_db` did."""

    source: str
    output: str
    records: int
    kept: int
    conditions: str
    unsized: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        unsized = f" ({self.unsized} record(s) without a readable image size matched no size condition)" \
            if self.unsized else ""
        return (f"kept {self.kept} of {self.records} records of {self.source} ({self.conditions}) in "
                f"{self.output}{unsized} in {self.seconds:.1f} s")


# -- parsing the conditions -------------------------------------------------------------------------

def parse_labels(values: Sequence[str], reader: Reader) -> list[tuple[float, float]]:
    """``--label`` values as inclusive ranges: a number, ``A..B``, or a class name of the database."""
    classes = reader.classes if what_classes_name(reader.metadata.get("source")) == "labels" else []
    ranges = []
    for value in values:
        text = str(value).strip()
        if re.fullmatch(NUMBER, text):
            ranges.append((float(text), float(text)))
        elif (m := re.fullmatch(rf"({NUMBER})\s*\.\.\s*({NUMBER})", text)) and float(m[1]) <= float(m[2]):
            ranges.append((float(m[1]), float(m[2])))
        elif text in classes:
            ranges.append((float(classes.index(text)),) * 2)
        else:
            named = (f"its classes are {', '.join(c for c in classes if c)}" if classes else
                     "it has no class names for its records' labels")
            raise PicPacValueError(f"{reader.path}: --label {text!r} is not a number, a range A..B (A <= B) or "
                                   f"a class name of the database ({named})")
    return ranges


def parse_groups(values: Sequence[str | int], source: str) -> list[int]:
    """``--group`` values: ints, or ``none`` for records without a group."""
    out = []
    for value in values:
        text = str(value).strip()
        if text.lower() == "none":
            out.append(NO_GROUP)
        elif re.fullmatch(r"[-+]?\d+", text) and NO_GROUP < int(text) < 2**63:
            out.append(int(text))
        else:
            raise PicPacValueError(f"{source}: --group {text!r} is not a group id (a 64-bit int) or 'none'")
    return out


def parse_meta(values: Sequence[str], source: str) -> dict[str, list[Any]]:
    """``--meta KEY=VALUE`` by key; VALUE is read as JSON when it parses (``3``, ``true``), else as text."""
    out: dict[str, list[Any]] = {}
    for value in values:
        key, sep, text = str(value).partition("=")
        if not sep or not key:
            raise PicPacValueError(f"{source}: --meta {value!r} is not KEY=VALUE (e.g. --meta source=camera1)")
        try:
            wanted = json.loads(text)
        except ValueError:
            wanted = text
        out.setdefault(key, []).append(wanted)
    return out


def parse_size(value: str | Sequence[int] | None, option: str, source: str) -> tuple[int, int] | None:
    """``WxH`` (or ``N`` for NxN) as (width, height)."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = "x".join(map(str, value))
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+)\s*)?", value)
    if not m:
        raise PicPacValueError(f"{source}: {option} {value!r} is not WIDTHxHEIGHT (e.g. {option} 640x480) or N")
    return int(m[1]), int(m[2] or m[1])


# -- matching ---------------------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):  # true is not 1
        return type(a) is type(b) and a == b
    return a == b


def _meta_value(meta: dict, key: str) -> Any:
    """``meta[key]``, or for a dotted key the nested value (``a.b``: ``meta["a"]["b"]``); a missing key is
    a value nothing equals."""
    if key in meta:
        return meta[key]
    value: Any = meta
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


class _Sizer:
    """The (width, height) of a record's image, as cheaply as it can be known."""

    def __init__(self, reader: Reader, field: str, max_pixels: int):
        if field not in reader.fields:
            raise PicPacValueError(f"{reader.path}: has no field {field!r} to read image sizes from; its fields "
                                   f"are {reader.fields}: pass --field NAME")
        self.field, self.max_pixels = field, max_pixels
        spec = reader.arrays.get(field)
        self.fixed = None if spec is None or len(spec.shape) < 2 else (spec.shape[1], spec.shape[0])

    def __call__(self, record: Record) -> tuple[int, int] | None:
        if self.fixed is not None or self.field not in record:
            return self.fixed
        data = record[self.field]
        size = image_size(data)
        if size is None:  # a header picpac cannot read: decode it, within the pixel limit
            try:
                img = decode(data, max_pixels=self.max_pixels)
            except ImageTooLargeError as exc:
                return exc.width, exc.height
            size = None if img is None else (img.shape[1], img.shape[0])
        return size


def describe_conditions(labels: Sequence[str], groups: Sequence[Any], meta: Sequence[str],
                        min_size: Any, max_size: Any, invert: bool, classes: Sequence[str] = ()) -> str:
    parts = [f"{name} {' or '.join(map(str, values))}" for name, values in
             (("label", labels), ("group", groups), ("an annotation of class", classes)) if values]
    parts += [f"meta {m}" for m in meta]
    parts += [f"{name} {'x'.join(map(str, s)) if not isinstance(s, str) else s}" for name, s in
              (("min size", min_size), ("max size", max_size)) if s is not None]
    text = " and ".join(parts)
    return f"not ({text})" if invert else text


def filter_db(db: str | os.PathLike, out: str | os.PathLike, *, labels: Sequence[str | float] = (),
              groups: Sequence[str | int] = (), meta: Sequence[str] = (), min_size: Any = None,
              max_size: Any = None, classes: Sequence[str | float] = (), drop_other_classes: bool = False,
              annotation_field: str = "annotation", field: str = "image", max_pixels: int = MAX_PIXELS,
              invert: bool = False, overwrite: bool = False, progress: Progress | None = None) -> FilterReport:
    """Copy the records of DB that match every condition given (``invert``: that do not) into OUT.

    Values of one condition are alternatives (``labels=["3", "5"]``: label 3 or 5); ``meta`` values of the
    same key too, of different keys all must hold. ``min_size``/``max_size`` bound the image's width and
    height (inclusive). ``classes`` (ids or names) keeps records with an annotation shape of one of them (in
    ``annotation_field``, JSON); ``drop_other_classes`` then removes the other shapes from the kept records.
    OUT is written to a temp file and renamed when complete; a write that fails (a full disk) is a FileIOError
    naming it.
    """
    start = time.perf_counter()
    db, out = os.fspath(db), os.fspath(out)
    labels, groups, meta, classes = [str(v) for v in labels], list(groups), list(meta), [str(v) for v in classes]
    if not (labels or groups or meta or classes or min_size is not None or max_size is not None):
        raise PicPacValueError(f"{db}: no condition given; pass --label, --group, --meta, --class, --min-size or "
                               "--max-size (each record matching them all is kept)")
    if drop_other_classes and (not classes or invert):
        raise PicPacValueError(f"{db}: --drop-other-classes keeps the shapes of the --class given in the records "
                               "kept: give --class, without --invert")
    conditions = describe_conditions(labels, groups, meta, min_size, max_size, invert, classes)
    with Reader(db) as reader:
        table = [str(c) for c in reader.metadata.get("classes") or []]
        class_ids = {class_id(c, table, db, "--class") for c in classes}
        ranges = parse_labels(labels, reader)
        group_ids = parse_groups(groups, db)
        wanted_meta = parse_meta(meta, db)
        low, high = parse_size(min_size, "--min-size", db), parse_size(max_size, "--max-size", db)
        if low and high and (low[0] > high[0] or low[1] > high[1]):
            raise PicPacValueError(f"{db}: --min-size {low[0]}x{low[1]} exceeds --max-size {high[0]}x{high[1]}: "
                                   "no image can match")
        sizer = _Sizer(reader, field, max_pixels) if low or high else None
        check_outputs([out], db, overwrite)

        match = np.ones(len(reader), bool)
        if ranges:
            match &= np.logical_or.reduce([(reader.labels >= lo) & (reader.labels <= hi) for lo, hi in ranges])
        if group_ids:
            match &= np.isin(reader.groups, group_ids)
        unsized = kept = 0
        bar = bar_of(progress, len(reader))
        try:
            metadata = copied_metadata(reader, "filtered", {"from": db, "conditions": conditions})
            with output_errors(out), writers([out], [metadata], overwrite) as (writer,):
                for i in range(len(reader)):
                    ok, doc = bool(match[i]), None
                    if ok and (wanted_meta or sizer or class_ids):
                        record = reader.read(i, check=False)  # kept ones are checked as they are copied
                        fields = record.meta if wanted_meta and isinstance(record.meta, dict) else {}
                        ok = all(any(_same(_meta_value(fields, k), v) for v in values)
                                 for k, values in wanted_meta.items())
                        if ok and sizer:
                            size = sizer(record)
                            unsized += size is None
                            ok = size is not None and (not low or (size[0] >= low[0] and size[1] >= low[1])) \
                                and (not high or (size[0] <= high[0] and size[1] <= high[1]))
                        if ok and class_ids:
                            doc = annotation(record, annotation_field, db)
                            ok = doc is not None and any(shape_class(s) in class_ids for s in doc["shapes"])
                    if ok != invert:
                        record = reader[i]
                        if drop_other_classes:
                            only = with_shapes(annotation(record, annotation_field, db), keep=class_ids.__contains__)[0]
                            append_copy(writer, record, db, fields={**record.fields, annotation_field: encoded(only)})
                        else:
                            append_copy(writer, record, db)
                        kept += 1
                    if bar is not None:
                        bar.update(1)
                if not kept:
                    raise PicPacValueError(f"{db}: no record matches {conditions}; nothing was written to {out}")
        finally:
            if bar is not None:
                bar.close()
        return FilterReport(db, out, len(reader), kept, conditions, unsized, time.perf_counter() - start)
