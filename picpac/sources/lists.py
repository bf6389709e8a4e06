"""PicPac's list files, one image a line: ``path<TAB>label`` (list; labels are numbers, or class
names), ``path<TAB>json-annotation`` (annolist) and ``path<TAB>mask-path`` (masklist).

A ``list`` may have more columns (``file<TAB>class_index<TAB>class_name``): a header line names them
with known words (:data:`HEADER_WORDS`), or ``label_column``/``class_name_column`` pick them. Columns
are never joined: a line with another number of columns than the first is an error.
"""
from __future__ import annotations

from ..errors import SourceError
from .base import SourceItem, class_labels, column_word, data_lines, is_integer, is_number, pick_column, resolve_path

HEADER_WORDS = {
    "path": ("file", "filename", "file_name", "filepath", "file_path", "path", "image", "image_path"),
    "label": ("label", "class", "class_index", "class_id", "label_index", "label_id", "category", "category_id",
              "target"),
    "class name": ("class_name", "classname", "name", "label_name", "category_name"),
}
"""The header words of each column a ``list`` reads (matched as :func:`column_word`: case and the
spelling of spaces aside)."""
_ROLE = {word: role for role, words in HEADER_WORDS.items() for word in words}
_FIX = ("name the columns file (the image path), label (a number or a class name) and class_name (optional), "
        "or pick them with --label-column N and --class-name-column N (label_column=, class_name_column=)")


def split_columns(line: str, last: bool = False) -> list[str]:
    """``path<TAB>rest``; without a tab, split at whitespace (the last run of it if ``last``)."""
    if "\t" in line:
        return line.split("\t", 1)
    return line.rsplit(None, 1) if last else line.split(None, 1)


_LIST_SYNTAX = {"list": "path<TAB>label", "annolist": "path<TAB>json-annotation", "masklist": "path<TAB>mask-path"}


def read_list(src: str, root: str, format: str, label_kind: str = "auto", label_column: str | int | None = None,
              class_name_column: str | int | None = None) -> tuple[list[SourceItem], list[str] | None]:
    """The items of a list file and, for a ``list`` with class names, the classes (:func:`class_labels`:
    ``label_kind`` says whether labels are numbers or names)."""
    lines = list(data_lines(src))
    if format == "list":
        return _read_labelled(src, root, lines, label_kind, label_column, class_name_column)
    items = []
    for number, line in lines:
        where = f"{src}:{number}"
        columns = split_columns(line)
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            raise SourceError(f"{where}: expected `{_LIST_SYNTAX[format]}`, got {line!r}")
        path, rest = resolve_path(root, columns[0].strip()), columns[1]
        if format == "annolist":
            items.append(SourceItem(path, annotation=rest.encode(), line=where))
        else:
            items.append(SourceItem(path, mask_path=resolve_path(root, rest.strip()), line=where))
    return items, None


def _read_labelled(src: str, root: str, lines: list[tuple[int, str]], kind: str, label_column: str | int | None,
                   class_name_column: str | int | None) -> tuple[list[SourceItem], list[str] | None]:
    if not lines:
        return [], None
    first = lines[0][0]
    width = _width(lines[0][1], label_column, class_name_column)
    header = _header(src, lines, width, kind, label_column, class_name_column)
    if header is not None:
        width, lines = len(header), lines[1:]
    path_at, label_at, name_at = _columns(src, first, header, width, label_column, class_name_column)
    items, texts, names, where = [], [], [], []
    for number, line in lines:
        at = f"{src}:{number}"
        cells = _cells(line, width)
        if len(cells) != width and len(cells) >= 2:
            raise SourceError(f"{at}: {len(cells)} columns, but the list has {width} (line {first}); give every "
                              "line the same columns")
        if len(cells) < 2 or not cells[path_at] or not cells[label_at]:
            raise SourceError(f"{at}: expected `{_LIST_SYNTAX['list']}`, got {line!r}")
        items.append(SourceItem(resolve_path(root, cells[path_at]), line=at))
        texts.append(cells[label_at])
        names.append(cells[name_at] if name_at is not None else "")
        where.append(at)
    labels, classes = class_labels(texts, where, kind, names if name_at is not None else None)
    for item, label in zip(items, labels):
        item.label = label
    return items, classes


def _cells(line: str, width: int) -> list[str]:
    """A line's columns: split at every tab (empty columns past ``width`` dropped); without a tab, at
    whitespace into at most ``width`` columns from the right, so that a path may hold spaces."""
    if "\t" not in line:
        return [cell.strip() for cell in line.rsplit(None, width - 1)]
    cells = [cell.strip() for cell in line.split("\t")]
    while len(cells) > width and not cells[-1]:
        cells.pop()
    return cells


def _width(first: str, label_column: str | int | None, class_name_column: str | int | None) -> int:
    """The columns of a list without a header: as many as its first line has tab-separated ones, else 2 or
    the highest column an option names by number."""
    if "\t" in first:
        return len(_cells(first, 2))
    return max([2] + [int(str(c).strip()) for c in (label_column, class_name_column)
                      if c is not None and is_integer(str(c).strip())])


def _header(src: str, lines: list[tuple[int, str]], width: int, kind: str, label_column: str | int | None,
            class_name_column: str | int | None) -> list[str] | None:
    """The cells of the first line when it is a header: it names a path column, an option names a column by
    name, or its label is not a number while every other line's is. A header whose words picpac does not know
    is refused (naming line 1) unless the options pick the columns."""
    number, first = lines[0]
    cells = [cell.strip() for cell in first.split("\t")] if "\t" in first else first.split()
    roles = [_ROLE.get(column_word(cell)) for cell in cells]
    options = [c for c in (label_column, class_name_column) if c is not None]
    by_name = any(not is_integer(str(c).strip()) for c in options)
    suspect = False
    if "path" not in roles and not by_name:
        at = int(str(label_column).strip()) - 1 if label_column is not None else 1
        label = [row[at] if len(row) > at else "" for row in (_cells(line, width) for _, line in lines)]
        suspect = (kind != "names" and len(lines) > 1 and not is_number(label[0])
                   and all(map(is_number, label[1:])))
        if not suspect:
            return None
    unknown = [cell for cell, role in zip(cells, roles) if role is None]
    if unknown and not options:
        why = ": its label column is not a number while every other line's is" if suspect else ""
        raise SourceError(f"{src}:{number}: looks like a header ({', '.join(map(repr, cells))}){why}, but picpac does "
                          f"not know the column name(s) {', '.join(map(repr, unknown))}; {_FIX}, or remove the line")
    return cells


def _columns(src: str, first: int, header: list[str] | None, width: int, label_column: str | int | None,
             class_name_column: str | int | None) -> tuple[int, int, int | None]:
    """The 0-based columns of the path, the label and the class name (None: none); ``first`` is the
    number of the list's first line."""
    found = {role: [] for role in HEADER_WORDS}
    for i, cell in enumerate(header or ()):
        if column_word(cell) in _ROLE:
            found[_ROLE[column_word(cell)]].append(i)
    for role, at in found.items():
        if len(at) > 1 and not (role == "label" and label_column is not None or
                                role == "class name" and class_name_column is not None):
            pick = "" if role == "path" else f", or pick one with --{role.replace(' ', '-')}-column"
            raise SourceError(f"{src}:{first}: the header names two {role} columns "
                              f"({', '.join(repr(header[i]) for i in at)}); rename one{pick}")
    path_at = found["path"][0] if found["path"] else 0
    name_at = pick_column(class_name_column, header, width, src, "class name column") \
        if class_name_column is not None else (found["class name"] or [None])[0]
    if label_column is not None:
        label_at = pick_column(label_column, header, width, src, "label column")
    elif found["label"]:
        label_at = found["label"][0]
    elif header is not None and name_at is not None and class_name_column is None:
        label_at, name_at = name_at, None  # a header of path and class name: the names are the labels
    elif header is not None:
        raise SourceError(f"{src}:{first}: the header names no label column; {_FIX}")
    elif width == 2:
        label_at = 1
    else:
        raise SourceError(f"{src}:{first}: {width} columns, but no header line names them; add a header line "
                          f"(file<TAB>label<TAB>class_name), or pick the columns with --label-column N "
                          "(label_column=) and --class-name-column N (class_name_column=)")
    if label_at == name_at:
        if class_name_column is not None:
            raise SourceError(f"{src}: the label and class-name columns are the same column ({label_at + 1}); pick "
                              "two columns, or leave out --class-name-column to read the names as the labels")
        name_at = None  # the header's class-name column picked as the label: the names are the labels
    for what, at in (("label", label_at), ("class name", name_at)):
        if at == path_at:
            raise SourceError(f"{src}: the {what} column ({at + 1}) is the image path column; pick another with "
                              f"--{what.replace(' ', '-')}-column")
    return path_at, label_at, name_at
