"""PicPac's list files, one image a line: ``path<TAB>label`` (list), ``path<TAB>json-annotation``
(annolist) and ``path<TAB>mask-path`` (masklist)."""
from __future__ import annotations

from collections.abc import Iterator

from ..errors import SourceError
from .base import SourceItem, data_lines, resolve_path


def split_columns(line: str, last: bool = False) -> list[str]:
    """``path<TAB>rest``; without a tab, split at whitespace (the last run of it if ``last``)."""
    if "\t" in line:
        return line.split("\t", 1)
    return line.rsplit(None, 1) if last else line.split(None, 1)


_LIST_SYNTAX = {"list": "path<TAB>label", "annolist": "path<TAB>json-annotation", "masklist": "path<TAB>mask-path"}


def read_list(src: str, root: str, format: str) -> Iterator[SourceItem]:
    for number, line in data_lines(src):
        where = f"{src}:{number}"
        columns = split_columns(line, last=format == "list")
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            raise SourceError(f"{where}: expected `{_LIST_SYNTAX[format]}`, got {line!r}")
        path, rest = resolve_path(root, columns[0].strip()), columns[1]
        if format == "list":
            yield SourceItem(path, label=_label(rest.strip(), where), line=where)
        elif format == "annolist":
            yield SourceItem(path, annotation=rest.encode(), line=where)
        else:
            yield SourceItem(path, mask_path=resolve_path(root, rest.strip()), line=where)


def _label(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SourceError(f"{where}: label {text!r} is not a number; list labels are numbers "
                          "(use a CSV with a label column for class names)") from None
