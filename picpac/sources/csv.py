"""CSV sources: a header row, then one image a row in the columns path, label (numbers or class
names, never both), group, annotation and mask; ``label_column`` and ``class_name_column`` may pick
the label column and a column naming the classes of integer labels."""
from __future__ import annotations

import csv
import io

from ..errors import SourceError
from ..file.inputs import read_text
from ..file.layout import NO_GROUP
from .base import SourceItem, class_labels, column_word, pick_column, resolve_path

_CSV_COLUMNS = ("path", "label", "group", "annotation", "mask")


def read_csv(src: str, root: str, label_kind: str = "auto", label_column: str | int | None = None,
             class_name_column: str | int | None = None) -> tuple[list[SourceItem], list[str] | None]:
    """Items of a CSV with a header (columns path, label, group, annotation, mask) and its classes
    (:func:`class_labels`)."""
    try:
        reader = csv.DictReader(io.StringIO(read_text(src, "CSV files"), newline=""))
        if reader.fieldnames is None:
            raise SourceError(f"{src}: empty CSV; the first row must be a header with a 'path' column")
        reader.fieldnames = header = [column_word(name) for name in reader.fieldnames]
        if "path" not in header:
            raise SourceError(f"{src}:1: the CSV header has no 'path' column (header: "
                              f"{', '.join(header)}); name the image path column 'path'")
        label = "label" if label_column is None else header[pick_column(label_column, header, len(header), src,
                                                                          "label column")]
        name = None if class_name_column is None else \
            header[pick_column(class_name_column, header, len(header), src, "class name column")]
        if "path" in (label, name):
            raise SourceError(f"{src}:1: the label and class name columns cannot be the 'path' column; pick others")
        columns = {**dict(zip(_CSV_COLUMNS, _CSV_COLUMNS)), "label": label, "name": name}  # cell: header column
        rows = [(f"{src}:{reader.line_num}", {k: (row.get(c) or "").strip() if c else "" for k, c in columns.items()})
                for row in reader]
    except csv.Error as exc:
        raise SourceError(f"{src}: malformed CSV ({exc})") from None
    if label in header:
        labels, classes = _csv_labels(rows, label_kind, name is not None)
    elif label_kind != "auto" or name is not None:
        raise SourceError(f"{src}:1: the CSV header has no 'label' column (header: {', '.join(header)}), so "
                          "--label-kind and --class-name-column have nothing to read; name the label column 'label' "
                          "or pick it with --label-column")
    else:
        labels, classes = [0.0] * len(rows), None
    items = [_csv_item(root, where, cells, label) for (where, cells), label in zip(rows, labels)]
    return items, classes


def _csv_labels(rows: list[tuple[str, dict[str, str]]], kind: str,
                named: bool) -> tuple[list[float], list[str] | None]:
    """The labels and classes (:func:`class_labels`; ``named``: the rows' "name" cells name the classes)."""
    for where, cells in rows:
        if not cells["label"]:
            raise SourceError(f"{where}: empty label; give every row a label (a number or a class name)")
    return class_labels([cells["label"] for _, cells in rows], [where for where, _ in rows], kind,
                        [cells["name"] for _, cells in rows] if named else None)


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
