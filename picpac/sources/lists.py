"""PicPac's list files, one image a line: ``path<TAB>label`` (list; labels are numbers, or class
names), ``path<TAB>json-annotation`` (annolist) and ``path<TAB>mask-path`` (masklist)."""
from __future__ import annotations

from ..errors import SourceError
from .base import SourceItem, class_labels, data_lines, resolve_path


def split_columns(line: str, last: bool = False) -> list[str]:
    """``path<TAB>rest``; without a tab, split at whitespace (the last run of it if ``last``)."""
    if "\t" in line:
        return line.split("\t", 1)
    return line.rsplit(None, 1) if last else line.split(None, 1)


_LIST_SYNTAX = {"list": "path<TAB>label", "annolist": "path<TAB>json-annotation", "masklist": "path<TAB>mask-path"}


def read_list(src: str, root: str, format: str) -> tuple[list[SourceItem], list[str] | None]:
    """The items of a list file and, for a ``list`` whose labels are class names, the classes (the sorted
    names; each label is its name's position, as in a CSV)."""
    items, texts = [], []
    for number, line in data_lines(src):
        where = f"{src}:{number}"
        columns = split_columns(line, last=format == "list")
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            raise SourceError(f"{where}: expected `{_LIST_SYNTAX[format]}`, got {line!r}")
        path, rest = resolve_path(root, columns[0].strip()), columns[1]
        if format == "list":
            items.append(SourceItem(path, line=where))
            texts.append(rest.strip())
        elif format == "annolist":
            items.append(SourceItem(path, annotation=rest.encode(), line=where))
        else:
            items.append(SourceItem(path, mask_path=resolve_path(root, rest.strip()), line=where))
    if format != "list":
        return items, None
    labels, classes = class_labels(texts)
    for item, label in zip(items, labels):
        item.label = label
    return items, classes
