"""`picpac relabel`: map labels and annotation classes to others, by id or by name; and the class arithmetic that
`picpac filter --class` shares with it.

A class is given by its id (a number) or by its name in the database's class table (metadata ``classes``, as
``picpac import`` writes it). The class table names one thing: the records' labels, or the classes of the shapes of
their JSON annotations (``{"shapes": [{"type": ..., "label": L, ...}]}``; a list label's first value is its class)
for a COCO or YOLO import (``info.what_classes_name``). A mapping applies to what the table names, unless told
otherwise (``apply_to``); a database without a class table maps both by id. Every other byte of a record is copied as
it is. A new class name is added to the end of the class table.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import PicPacValueError, SourceError, closest
from ..file.reader import Reader, Record
from ..stores.base import output_errors
from .info import what_classes_name
from .split import Progress, append_copy, bar_of, check_outputs, copied_metadata, writers

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
"""A number as a command line's option gives it (``3``, ``-0.5``, ``1e3``)."""


def class_id(value: str | float, classes: Sequence[str], source: str, option: str) -> float:
    """The class ``value`` names: a number as it is, or a name's place in ``classes``."""
    text = str(value).strip()
    if re.fullmatch(NUMBER, text):
        number = float(text)
        if not abs(number) <= LARGEST:
            raise PicPacValueError(f"{source}: {option} {text!r} is no class id a stream can take: ids are finite and "
                                   f"at most {LARGEST:.4g} in magnitude (float32, the annotations' type)")
        return number
    if text and text in classes:
        return float(classes.index(text))
    close = closest(text, [c for c in classes if c])
    hint = f"; did you mean {close!r}?" if close else ""
    named = f"its classes are {', '.join(c for c in classes if c)}" if any(classes) else "it has no class names"
    raise PicPacValueError(f"{source}: {option} {text!r} is not a class id (a number) or a class name of the "
                           f"database{hint} ({named})")


LARGEST = float(np.finfo(np.float32).max)
"""The largest magnitude of a class id: what float32 holds (a shape's label becomes a float32 box row)."""


def annotation(record: Record, field: str, source: str) -> dict | None:
    """The record's JSON annotation in ``field``, or None when it has none (no such field, or it is empty)."""
    data = record.fields.get(field)
    if data is None or not len(data):
        return None
    try:
        doc = json.loads(bytes(data))
    except (ValueError, RecursionError):
        raise SourceError(f"{source}: record {record.index}'s {field!r} field is not JSON (an annotation of "
                          "shapes); pass --annotation-field to name the field that is") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list):
        raise SourceError(f"{source}: record {record.index}'s {field!r} field is not an annotation (a JSON object "
                          'with a "shapes" list)')
    return doc


def shape_class(shape: Any) -> float | None:
    """The class of one annotation shape: its label, or a list label's first value (1 when it has none)."""
    label = shape.get("label", 1) if isinstance(shape, dict) else None
    label = label[0] if isinstance(label, list) and label else label
    return float(label) if isinstance(label, (int, float)) and not isinstance(label, bool) else None


def with_shapes(doc: dict, keep: Callable[[float | None], bool] = lambda c: True,
                change: Callable[[float], float] = lambda c: c) -> tuple[dict, int]:
    """``doc`` with the shapes ``keep`` takes, their classes mapped by ``change``; and how many shapes changed."""
    shapes, changed = [], 0
    for shape in doc["shapes"]:
        c = shape_class(shape)
        if not keep(c):
            changed += 1
            continue
        if c is not None and change(c) != c:
            label = shape.get("label")
            new = _number(change(c))
            shape = {**shape, "label": [new, *label[1:]] if isinstance(label, list) else new}
            changed += 1
        shapes.append(shape)
    return {**doc, "shapes": shapes}, changed


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def encoded(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class RelabelReport:
    """What :func:`relabel_db` did."""

    source: str
    output: str
    records: int
    labels: int
    """Records whose label changed."""
    shapes: int
    """Annotation shapes whose class changed."""
    mapping: str
    seconds: float = 0.0
    applied: str = "both"
    """What the mapping applied to: "labels", "shapes" or "both"."""
    why: str = ""
    """Why (what the class table names, or the option)."""

    def summary(self) -> str:
        return (f"relabeled {self.source} ({self.mapping}, applied to {APPLIED[self.applied]}{self.why}) into "
                f"{self.output}: record labels {self.labels} of {self.records} changed, annotation shapes {self.shapes} "
                f"changed, in {self.seconds:.1f} s")


APPLIED = {"labels": "the record labels", "shapes": "the annotation shapes' classes",
           "both": "the record labels and the annotation shapes' classes"}


def parse_mapping(pairs: Sequence[str], classes: list[str], source: str) -> tuple[dict[float, float], list[str]]:
    """``OLD=NEW`` pairs as ``{old id: new id}``, and the class table with the new names added at its end."""
    classes, mapping = list(classes), {}
    for pair in pairs:
        old, sep, new = str(pair).partition("=")
        if not sep or not old.strip() or not new.strip():
            raise PicPacValueError(f"{source}: --map {pair!r} is not OLD=NEW (a class id or name each, e.g. "
                                   "--map cat=animal or --map 3=1)")
        try:
            pair.encode("utf-8")
        except UnicodeEncodeError:
            raise PicPacValueError(f"{source}: --map {pair.encode('utf-8', 'backslashreplace').decode()!r}: class names "
                                   "are text (valid UTF-8)") from None
        before = class_id(old, classes, source, "--map")
        if not re.fullmatch(NUMBER, new.strip()) and new.strip() not in classes:
            classes.append(new.strip())  # a new class name: the next id
        after = class_id(new, classes, source, "--map")
        if mapping.get(before, after) != after:
            raise PicPacValueError(f"{source}: --map gives {old.strip()!r} two new classes")
        mapping[before] = after
    if not mapping:
        raise PicPacValueError(f"{source}: no --map OLD=NEW given")
    return mapping, classes


def relabel_db(db: str | os.PathLike, out: str | os.PathLike, mapping: Sequence[str], *,
               annotation_field: str = "annotation", apply_to: str | None = None, overwrite: bool = False,
               progress: Progress | None = None) -> RelabelReport:
    """Copy DB into OUT with each ``OLD=NEW`` of ``mapping`` applied to what the class table names (the records'
    labels, or the classes of their annotation shapes in ``annotation_field``, JSON), or to ``apply_to`` ("labels",
    "shapes" or "both"); a database without a class table maps both. OUT is written to a temp file and renamed when
    complete; nothing is written when a pair names no class of DB."""
    start = time.perf_counter()
    db, out = os.fspath(db), os.fspath(out)
    if apply_to not in (None, "labels", "shapes", "both"):
        raise PicPacValueError(f"apply_to must be 'labels', 'shapes' or 'both', got {apply_to!r}")
    with Reader(db) as reader:
        table = [str(c) for c in reader.metadata.get("classes") or []]
        names = what_classes_name(reader.metadata.get("source"))
        if apply_to is not None:
            applied, why = apply_to, ""
        elif not table:
            applied, why = "both", ": the database names no classes"
        elif names == "masks":
            raise PicPacValueError(f"{db}: its class table names the values of its masks, which relabel does not "
                                   "change; pass --apply-to labels or shapes to map the record labels or the shapes")
        else:
            applied, why = names, ": the class table names them"
        ids, classes = parse_mapping(mapping, table, db)
        check_outputs([out], db, overwrite)
        change = lambda c: ids.get(c, c)  # noqa: E731
        label_change = change if applied in ("labels", "both") else (lambda c: c)
        shapes_mapped = applied in ("shapes", "both")
        described = ", ".join(f"{_number(a)}->{_number(b)}" for a, b in ids.items())
        metadata = copied_metadata(reader, "relabeled", {"from": db, "map": {str(_number(a)): _number(b)
                                                                              for a, b in ids.items()}})
        if classes != table:
            metadata["classes"] = classes
        labels = shapes = 0
        bar = bar_of(progress, len(reader))
        try:
            with output_errors(out), writers([out], [metadata], overwrite) as (writer,):
                for i in range(len(reader)):
                    record = reader[i]
                    doc = annotation(record, annotation_field, db) if shapes_mapped else None
                    fields: Mapping[str, Any] | None = None
                    if doc is not None:
                        doc, changed = with_shapes(doc, change=change)
                        if changed:
                            fields = {**record.fields, annotation_field: encoded(doc)}
                            shapes += changed
                    label = label_change(record.label)
                    labels += label != record.label
                    append_copy(writer, record, db, fields=fields, label=label)
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return RelabelReport(db, out, len(reader), labels, shapes, described, time.perf_counter() - start, applied,
                             why)
