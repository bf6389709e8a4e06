"""CSV sources: a header row, then one image a row in the columns path, label (numbers or class
names), group, annotation and mask."""
from __future__ import annotations

import csv
import io

from ..errors import SourceError
from ..file.layout import NO_GROUP
from .base import SourceItem, class_labels, read_text, resolve_path

_CSV_COLUMNS = ("path", "label", "group", "annotation", "mask")


def read_csv(src: str, root: str) -> tuple[list[SourceItem], list[str] | None]:
    """Items of a CSV with a header (columns path, label, group, annotation, mask) and its classes."""
    try:
        reader = csv.DictReader(io.StringIO(read_text(src, "CSV files"), newline=""))
        if reader.fieldnames is None:
            raise SourceError(f"{src}: empty CSV; the first row must be a header with a 'path' column")
        reader.fieldnames = header = [name.strip().lower() for name in reader.fieldnames]
        if "path" not in header:
            raise SourceError(f"{src}:1: the CSV header has no 'path' column (header: "
                              f"{', '.join(header)}); name the image path column 'path'")
        rows = [(f"{src}:{reader.line_num}", {k: (row.get(k) or "").strip() for k in _CSV_COLUMNS})
                for row in reader]
    except csv.Error as exc:
        raise SourceError(f"{src}: malformed CSV ({exc})") from None
    labels, classes = _csv_labels(rows) if "label" in header else ([0.0] * len(rows), None)
    items = [_csv_item(root, where, cells, label) for (where, cells), label in zip(rows, labels)]
    return items, classes


def _csv_labels(rows: list[tuple[str, dict[str, str]]]) -> tuple[list[float], list[str] | None]:
    """Numeric labels as they are; if any label is not a number, all are class names."""
    for where, cells in rows:
        if not cells["label"]:
            raise SourceError(f"{where}: empty label; give every row a label (a number or a class name)")
    return class_labels([cells["label"] for _, cells in rows])


def _csv_item(root: str, where: str, cells: dict[str, str], label: float) -> SourceItem:
    if not cells["path"]:
        raise SourceError(f"{where}: empty path; every row needs the image path")
    return SourceItem(resolve_path(root, cells["path"]), label=label, group=_group(cells["group"], where),
                      annotation=cells["annotation"].encode() or None,
                      mask_path=resolve_path(root, cells["mask"]) if cells["mask"] else None, line=where)


def _group(text: str, where: str) -> int | None:
    if not text:
        return None
    try:
        group = int(text)
    except ValueError:
        raise SourceError(f"{where}: group {text!r} is not an integer; groups are integer ids") from None
    if not NO_GROUP < group < 2**63:
        raise SourceError(f"{where}: group {group} is outside the int64 range picpac stores")
    return group
