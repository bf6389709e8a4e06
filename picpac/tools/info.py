"""`picpac info`: what a database holds, computed from its index, record meta and annotations (never
the images).

Record labels and the classes of annotation shapes are reported apart: a detection or segmentation
database (COCO, YOLO) has record labels 0 and its class names name the shapes' labels, so ``classes``
says what it names (``classes_of``: labels, shapes or mask values, from the import source) and the
``shapes`` section counts the shapes per label."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .. import image
from ..errors import CorruptRecordError
from ..file.layout import NO_GROUP, VERSION
from ..file.reader import IndexedReader
from ..file.remote import RemoteOptions
from ..file.shards import open_file

MAX_LABEL_LINES = 20
HISTOGRAM_BINS = 10
_SHAPE_SOURCES = ("coco", "yolo", "yolo-seg")
"""Import formats whose class names name the annotation shapes' labels, not the records' labels."""
_CLASSES_OF = {"labels": "", "shapes": "the annotation shapes' labels", "masks": "the mask pixel values"}


def describe(path: str | os.PathLike, *, sample: int | None = None, remote: RemoteOptions | None = None
             ) -> dict[str, Any]:
    """A JSON-serialisable description of the database at ``path`` (a file, or a URL read with ``remote``'s
    options). The record part (image sizes, annotation shapes, unreadable records) reads every record, or
    ``sample`` evenly spaced ones when the database has more (``scanned`` says how many)."""
    with open_file(os.fspath(path), check=False, remote=remote) as reader:
        metadata = reader.metadata
        classes_of = what_classes_name(metadata.get("source"))
        n = len(reader)
        scanned = np.arange(n) if sample is None or n <= sample else \
            np.unique(np.linspace(0, n - 1, sample).astype(np.int64))
        sizes, shapes = _record_stats(reader, scanned, reader.classes if classes_of == "shapes" else [])
        return {
            "path": reader.path,
            "version": VERSION,  # Reader opens only files of exactly this version
            "records": len(reader),
            "file_bytes": reader.file_size,
            "data_bytes": int(reader.index["size"].sum()),
            "fields": reader.fields,
            "arrays": metadata.get("arrays"),
            "classes": reader.classes,
            "classes_of": classes_of,
            "source": metadata.get("source"),
            "created": metadata.get("created"),
            "labels": _label_stats(reader.labels, reader.classes if classes_of == "labels" else []),
            "shapes": shapes,
            "groups": _group_stats(reader.groups),
            "sizes": sizes,
            "region_decode": image.REGION_DECODE,
            "scanned": len(scanned),
        }


def what_classes_name(source: Any) -> str:
    """What the class names name, from the import source ("coco /data/x.json"): the records' labels (the
    default), the annotation shapes' labels (coco, yolo, yolo-seg) or the mask pixel values (maskdir)."""
    kind = source.split(" ", 1)[0] if isinstance(source, str) else ""
    return "shapes" if kind in _SHAPE_SOURCES else "masks" if kind == "maskdir" else "labels"


def _name(classes: list[str], value: float) -> str | None:
    return (classes[int(value)] or None) if 0 <= value < len(classes) else None


def _label_stats(labels: np.ndarray, classes: list[str]) -> dict[str, Any]:
    """Counts per label when every label is integral, else min/max/mean and a histogram."""
    finite = np.isfinite(labels)
    if finite.all() and (labels == np.floor(labels)).all():
        values, counts = np.unique(labels, return_counts=True)
        return {"integral": True, "counts": [
            {"label": int(v), "name": _name(classes, v), "count": int(c)} for v, c in zip(values, counts)]}
    values = labels[finite]
    stats: dict[str, Any] = {"integral": False, "non_finite": int(len(labels) - len(values)),
                             "min": None, "max": None, "mean": None, "histogram": None}
    if len(values):
        counts, edges = histogram(values, HISTOGRAM_BINS)
        stats.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()),
                     histogram={"edges": edges.tolist(), "counts": counts.tolist()})
    return stats


def histogram(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.histogram(values, bins)`` of finite float64 ``values`` over [min, max], for any of them: NumPy refuses
    a range too narrow for ``bins`` distinct edges ([0, 5e-324]) and overflows on one wider than the largest
    float (-1e308 to 1e308); here such a range gets the distinct edges it has (one bin at least)."""
    low, high = float(values.min()), float(values.max())
    # halves: their difference never overflows, and doubling back is exact for normal numbers
    edges = np.clip(np.linspace(low / 2, high / 2, bins + 1) * 2, low, high)
    edges[0], edges[-1] = low, high
    edges = np.unique(edges) if low < high else np.array([low, high])
    return np.histogram(values, bins=edges)[0], edges


def _group_stats(groups: np.ndarray) -> dict[str, int]:
    grouped = groups[groups != NO_GROUP]
    return {"records": len(grouped), "distinct": len(np.unique(grouped))}


def _record_stats(reader: IndexedReader, records: np.ndarray, shape_classes: list[str]
                  ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Width/height/channel statistics from the importer's record meta of ``records``, and the annotation
    shapes' counts (None when none of them has an ``annotation`` field)."""
    widths, heights, channels = [], [], {}
    unreadable = 0
    annotated = with_shapes = total = bad_annotations = 0
    per_label: dict[Any, int] = {}
    types: dict[str, int] = {}
    for i in records.tolist():
        try:
            record = reader.read(i, check=False)
            meta = record.meta
        except (CorruptRecordError, ValueError):  # a damaged record; `picpac verify` names it
            unreadable += 1
            continue
        if isinstance(meta, dict) and "width" in meta and "height" in meta:
            widths.append(meta["width"])
            heights.append(meta["height"])
            key = str(meta.get("channels", "unknown"))
            channels[key] = channels.get(key, 0) + 1
        if "annotation" not in record:
            continue
        annotated += 1
        shapes = _shapes(record["annotation"])
        if shapes is None:
            bad_annotations += 1
            continue
        with_shapes += bool(shapes)
        total += len(shapes)
        for shape in shapes:
            label = shape.get("label") if isinstance(shape, dict) else None
            label = int(label) if isinstance(label, (int, float)) and float(label).is_integer() else label
            per_label[label] = per_label.get(label, 0) + 1
            kind = shape.get("type") if isinstance(shape, dict) else None
            types[str(kind)] = types.get(str(kind), 0) + 1
    sizes = {
        "records": len(widths),
        "unreadable": unreadable,
        "width": _min_median_max(widths),
        "height": _min_median_max(heights),
        "channels": dict(sorted(channels.items())),
    }
    if not annotated:
        return sizes, None
    order = sorted(per_label, key=lambda v: (not isinstance(v, int), v if isinstance(v, int) else str(v)))
    counts = [{"label": v, "name": _name(shape_classes, v) if isinstance(v, int) else None, "count": per_label[v]}
              for v in order]
    return sizes, {"records": annotated, "with_shapes": with_shapes, "shapes": total,
                   "unreadable": bad_annotations, "types": dict(sorted(types.items())), "counts": counts}


def _shapes(annotation: memoryview) -> list | None:
    """The ``shapes`` of a PicPac JSON annotation ([] for none), or None when it is not one."""
    try:
        value = json.loads(bytes(annotation))
    except (ValueError, RecursionError):
        return None
    shapes = value.get("shapes", []) if isinstance(value, dict) else None
    return shapes if isinstance(shapes, list) else None


def _min_median_max(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    array = np.asarray(values, dtype=np.float64)
    return {"min": _number(array.min()), "median": _number(np.median(array)), "max": _number(array.max())}


def _number(value: np.floating) -> int | float:
    return int(value) if value == int(value) else float(value)


# -- text ------------------------------------------------------------------------------------
def format_description(d: dict[str, Any]) -> str:
    """The human-readable form of :func:`describe`'s result."""
    lines = [
        f"path:     {d['path']}",
        f"format:   picpac version {d['version']}",
        f"records:  {d['records']}",
        f"bytes:    {_bytes(d['file_bytes'])} file, {_bytes(d['data_bytes'])} record data",
        f"fields:   {', '.join(d['fields']) or '(none)'}",
        f"classes:  {_class_list(d['classes'], d.get('classes_of', 'labels'))}",
    ]
    if d.get("arrays"):
        lines.append(f"arrays:   {_array_list(d['arrays'])}")
    if d["source"] is not None:
        lines.append(f"source:   {_mapping(d['source'])}")
    if d["created"] is not None:
        lines.append(f"created:  {_mapping(d['created'])}")
    lines += _label_lines(d["labels"])
    if d.get("shapes") is not None:
        lines += _shape_lines(d["shapes"])
    lines.append(f"groups:   {_group_line(d['groups'], d['records'])}")
    lines.append(f"images:   {_size_line(d['sizes'])}")
    if "region_decode" in d:
        lines.append(f"decoding: {_region_line(d['region_decode'])}")
    return "\n".join(lines)


def _region_line(built: bool) -> str:
    return ("region decoding built (C extension picpac.image._jpeg)" if built else
            "region decoding not built (no C extension picpac.image._jpeg): JPEGs are decoded whole")


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n:,} bytes ({n / scale:.1f} {unit})"
    return f"{n:,} bytes"


def _array_list(arrays: Any) -> str:
    """``image 32x32x3 uint8, ...`` from the metadata's array declarations (as stored, even if malformed)."""
    if not isinstance(arrays, dict):
        return str(arrays)
    parts = []
    for name, spec in arrays.items():
        shape = spec.get("shape") if isinstance(spec, dict) else None
        dims = "x".join(map(str, shape)) if isinstance(shape, list) else "?"
        parts.append(f"{name} {dims} {spec.get('dtype', '?') if isinstance(spec, dict) else '?'}")
    return ", ".join(parts)


def _class_list(classes: list[str], classes_of: str = "labels") -> str:
    """``3: cat, dog, bird`` for names of ids 0..N-1; with unnamed ids (COCO's gaps) only the named ones,
    each with its id; and what the names name when it is not the records' labels."""
    named = [(i, name) for i, name in enumerate(classes) if name]
    if not named:
        return "(none)"
    of = f" of {_CLASSES_OF[classes_of]}" if _CLASSES_OF.get(classes_of) else ""
    if len(named) == len(classes):
        return f"{len(classes)}{of}: {', '.join(classes)}"
    return (f"{len(named)} named ids in 0-{len(classes) - 1}{of}: "
            + ", ".join(f"{i} {name}" for i, name in named))


def _mapping(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _label_lines(labels: dict[str, Any]) -> list[str]:
    if labels["integral"]:
        counts = labels["counts"]
        return ["labels:   count per label" if counts else "labels:   (no records)", *_count_lines(counts)]
    lines = [f"labels:   continuous: min {labels['min']:g}, max {labels['max']:g}, mean {labels['mean']:g}"
             if labels["histogram"] else "labels:   continuous: no finite labels"]
    if labels["non_finite"]:
        lines.append(f"  {labels['non_finite']} labels are NaN or infinite")
    if labels["histogram"]:
        edges, counts = labels["histogram"]["edges"], labels["histogram"]["counts"]
        lines += [f"  [{lo:g}, {hi:g}{']' if k == len(counts) - 1 else ')'}: {c}"
                  for k, (lo, hi, c) in enumerate(zip(edges, edges[1:], counts))]
    return lines


def _shape_lines(shapes: dict[str, Any]) -> list[str]:
    """``shapes:`` and a count per shape label (the shapes' class ids, named from ``classes``)."""
    types = ", ".join(f"{kind} {n}" for kind, n in shapes["types"].items())
    head = (f"shapes:   {shapes['shapes']} in {shapes['with_shapes']} of {shapes['records']} annotated records"
            + (f" ({types})" if types else ""))
    if shapes["unreadable"]:
        head += f"; {shapes['unreadable']} annotations are not PicPac JSON shapes"
    counts = shapes["counts"]
    return [head + ("; count per shape label" if counts else ""), *_count_lines(counts)]


def _count_lines(counts: list[dict[str, Any]]) -> list[str]:
    """One line per label (its name when it has one), the first MAX_LABEL_LINES of them."""
    lines = []
    for entry in counts[:MAX_LABEL_LINES]:
        name = f" {entry['name']}" if entry["name"] is not None else ""
        lines.append(f"  {entry['label']!s:>6}{name}: {entry['count']}")
    if len(counts) > MAX_LABEL_LINES:
        lines.append(f"  ... and {len(counts) - MAX_LABEL_LINES} more")
    return lines


def _group_line(groups: dict[str, int], records: int) -> str:
    if not groups["records"]:
        return "none"
    return f"{groups['records']} of {records} records in {groups['distinct']} groups"


def _size_line(sizes: dict[str, Any]) -> str:
    if not sizes["records"]:
        line = "no size meta"
    else:
        line = (f"{sizes['records']} with size meta; width {_mmm(sizes['width'])}, "
                f"height {_mmm(sizes['height'])} (min/median/max); channels "
                + ", ".join(f"{c}: {n}" for c, n in sizes["channels"].items()))
    if sizes["unreadable"]:
        line += f"; {sizes['unreadable']} records unreadable (run `picpac verify`)"
    return line


def _mmm(stats: dict[str, float]) -> str:
    return f"{stats['min']:g}/{stats['median']:g}/{stats['max']:g}"
