"""`picpac info`: what a database holds, computed from its index and record meta."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import CorruptRecordError
from ..file.layout import NO_GROUP, VERSION
from ..file.reader import Reader

MAX_LABEL_LINES = 20
HISTOGRAM_BINS = 10


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON-serialisable description of the database at ``path``."""
    with Reader(path, check=False) as reader:
        metadata = reader.metadata
        return {
            "path": reader.path,
            "version": VERSION,  # Reader opens only files of exactly this version
            "records": len(reader),
            "file_bytes": os.path.getsize(reader.path),
            "data_bytes": int(reader.index["size"].sum()),
            "fields": reader.fields,
            "arrays": metadata.get("arrays"),
            "classes": reader.classes,
            "source": metadata.get("source"),
            "created": metadata.get("created"),
            "labels": _label_stats(reader.labels, reader.classes),
            "groups": _group_stats(reader.groups),
            "sizes": _size_stats(reader),
        }


def _label_stats(labels: np.ndarray, classes: list[str]) -> dict[str, Any]:
    """Counts per label when every label is integral, else min/max/mean and a histogram."""
    finite = np.isfinite(labels)
    if finite.all() and (labels == np.floor(labels)).all():
        values, counts = np.unique(labels, return_counts=True)
        return {"integral": True, "counts": [
            {"label": int(v), "name": classes[int(v)] if 0 <= v < len(classes) else None, "count": int(c)}
            for v, c in zip(values, counts)]}
    values = labels[finite]
    stats: dict[str, Any] = {"integral": False, "non_finite": int(len(labels) - len(values)),
                             "min": None, "max": None, "mean": None, "histogram": None}
    if len(values):
        counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
        stats.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()),
                     histogram={"edges": edges.tolist(), "counts": counts.tolist()})
    return stats


def _group_stats(groups: np.ndarray) -> dict[str, int]:
    grouped = groups[groups != NO_GROUP]
    return {"records": len(grouped), "distinct": len(np.unique(grouped))}


def _size_stats(reader: Reader) -> dict[str, Any]:
    """Width/height/channel statistics from the importer's record meta."""
    widths, heights, channels = [], [], {}
    unreadable = 0
    for i in range(len(reader)):
        try:
            meta = reader.read(i, check=False).meta
        except (CorruptRecordError, ValueError):  # a damaged record; `picpac verify` names it
            unreadable += 1
            continue
        if isinstance(meta, dict) and "width" in meta and "height" in meta:
            widths.append(meta["width"])
            heights.append(meta["height"])
            key = str(meta.get("channels", "unknown"))
            channels[key] = channels.get(key, 0) + 1
    return {
        "records": len(widths),
        "unreadable": unreadable,
        "width": _min_median_max(widths),
        "height": _min_median_max(heights),
        "channels": dict(sorted(channels.items())),
    }


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
        f"classes:  {_class_list(d['classes'])}",
    ]
    if d.get("arrays"):
        lines.append(f"arrays:   {_array_list(d['arrays'])}")
    if d["source"] is not None:
        lines.append(f"source:   {_mapping(d['source'])}")
    if d["created"] is not None:
        lines.append(f"created:  {_mapping(d['created'])}")
    lines += _label_lines(d["labels"])
    lines.append(f"groups:   {_group_line(d['groups'], d['records'])}")
    lines.append(f"images:   {_size_line(d['sizes'])}")
    return "\n".join(lines)


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


def _class_list(classes: list[str]) -> str:
    return f"{len(classes)}: {', '.join(classes)}" if classes else "(none)"


def _mapping(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _label_lines(labels: dict[str, Any]) -> list[str]:
    if labels["integral"]:
        counts = labels["counts"]
        lines = ["labels:   count per label" if counts else "labels:   (no records)"]
        for entry in counts[:MAX_LABEL_LINES]:
            name = f" {entry['name']}" if entry["name"] is not None else ""
            lines.append(f"  {entry['label']:>6}{name}: {entry['count']}")
        if len(counts) > MAX_LABEL_LINES:
            lines.append(f"  ... and {len(counts) - MAX_LABEL_LINES} more")
        return lines
    lines = [f"labels:   continuous: min {labels['min']:g}, max {labels['max']:g}, mean {labels['mean']:g}"
             if labels["histogram"] else "labels:   continuous: no finite labels"]
    if labels["non_finite"]:
        lines.append(f"  {labels['non_finite']} labels are NaN or infinite")
    if labels["histogram"]:
        edges, counts = labels["histogram"]["edges"], labels["histogram"]["counts"]
        lines += [f"  [{lo:g}, {hi:g}{']' if k == len(counts) - 1 else ')'}: {c}"
                  for k, (lo, hi, c) in enumerate(zip(edges, edges[1:], counts))]
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
