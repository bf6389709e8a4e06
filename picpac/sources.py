"""The sources layer: turn an import source (a folder layout, a list file, a CSV) into items.

This layer parses layouts only; it never opens an image, so a missing image file is not an error
here (the importer skips it). A malformed layout raises :class:`SourceError` naming the file, the
line and the fix. docs/import.md describes every format.
"""
from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import MissingPathError, SourceError
from .format import NO_GROUP

FORMATS = ("auto", "dir", "list", "classdirs", "imagefolder", "annolist", "masklist", "csv")
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
_DIRECTORY_FORMATS = ("dir", "classdirs", "imagefolder")
_FILE_FORMATS = ("list", "annolist", "masklist", "csv")
_CSV_COLUMNS = ("path", "label", "group", "annotation", "mask")


@dataclass
class SourceItem:
    """One image to import, with what the source says about it."""

    path: str
    label: float = 0.0
    group: int | None = None
    annotation: bytes | None = None
    mask_path: str | None = None
    line: str | None = None
    """Where a list or CSV names this item ("list.txt:12"); None for folder scans."""


@dataclass
class Listing:
    """Everything a source holds, in import order."""

    items: list[SourceItem]
    classes: list[str] | None
    source: str
    """The format and absolute source path, e.g. "imagefolder /data/train"."""
    root: str
    """Absolute directory that item paths are stored relative to."""


def scan(src: str | os.PathLike, format: str = "auto", root: str | os.PathLike | None = None) -> Listing:
    """List the items of ``src`` read as ``format`` (one of :data:`FORMATS`).

    Relative paths in list and CSV files are taken from ``root`` (default: the list file's
    directory); ``root`` does not apply to folders.
    """
    src = os.fspath(src)
    if format not in FORMATS:
        raise SourceError(f"unknown import format {format!r}; use one of {', '.join(FORMATS)}")
    if not os.path.exists(src):
        raise MissingPathError(f"{src}: no such file or directory; pass a folder of images, "
                               "a list file or a CSV (docs/import.md)")
    if not os.path.isdir(src):
        return _scan_file(src, format, None if root is None else os.fspath(root))
    if format in _FILE_FORMATS:
        raise SourceError(f"{src}: is a directory, but format {format!r} reads a list file; "
                          f"use -f {'/'.join(_DIRECTORY_FORMATS)} or -f auto for folders")
    if root is not None:
        raise SourceError(f"{src}: root (--root) applies to list and CSV sources, not to folders; leave it out")
    return _scan_folder(src, format)


def _scan_file(src: str, format: str, root: str | None) -> Listing:
    if format in _DIRECTORY_FORMATS:
        raise SourceError(f"{src}: is a file, but format {format!r} reads a folder; "
                          f"use -f {'/'.join(_FILE_FORMATS)} or -f auto for list files")
    if root is None:
        root = os.path.dirname(src)
    elif not os.path.isdir(root):
        raise MissingPathError(f"{root}: root directory does not exist; pass the folder that the "
                               f"relative paths in {src} start from")
    root = os.path.abspath(root)
    if format == "auto":
        format = _detect_file_format(src)
    source = f"{format} {os.path.abspath(src)}"
    if format == "csv":
        items, classes = _read_csv(src, root)
        return Listing(items, classes, source, root)
    return Listing(list(_read_list(src, root, format)), None, source, root)


# -- folders -----------------------------------------------------------------------------------
def _scan_folder(src: str, format: str) -> Listing:
    top = os.path.abspath(src)
    found = _walk_images(top)
    classes = _class_folders(found)
    if format == "auto":
        # Images lying directly in the folder mean it is no class layout (they would be left out).
        if not classes or any(len(parts) == 1 for parts in found):
            format = "dir"
        else:
            format = "classdirs" if all(map(_is_integer, classes)) else "imagefolder"
    source = f"{format} {top}"
    if format == "dir":
        return Listing([SourceItem(os.path.join(top, *parts)) for parts in found], None, source, top)
    if format == "classdirs":
        bad = [name for name in classes if not _is_integer(name)]
        if bad:
            raise SourceError(f"{src}: format classdirs needs subfolders named 0..N-1, found {bad[0]!r}; "
                              "use -f imagefolder for class names")
        labels = {name: float(int(name)) for name in classes}
        names = None
    else:
        names = classes
        labels = {name: float(i) for i, name in enumerate(names)}
    items = [SourceItem(os.path.join(top, *parts), label=labels[parts[0]]) for parts in found if len(parts) > 1]
    return Listing(items, names, source, top)


def _walk_images(top: str) -> list[tuple[str, ...]]:
    """Relative path parts of every image under ``top``, sorted; hidden files and folders skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, top)
        parts = () if rel == os.curdir else tuple(rel.split(os.sep))
        found += [parts + (name,) for name in filenames if not name.startswith(".") and _is_image_name(name)]
    return sorted(found)


def _class_folders(found: list[tuple[str, ...]]) -> list[str]:
    """Top-level subfolders holding images, sorted (images directly in the source folder are no class)."""
    return sorted({parts[0] for parts in found if len(parts) > 1})


def _is_image_name(name: str) -> bool:
    """Whether a file name has an image extension (case-insensitive)."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _is_integer(name: str) -> bool:
    return name.isascii() and name.isdigit()


# -- list files --------------------------------------------------------------------------------
def _data_lines(src: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for every line that is neither blank nor a # comment."""
    try:
        with open(src, encoding="utf-8-sig") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if line.strip() and not line.lstrip().startswith("#"):
                    yield number, line
    except UnicodeDecodeError as exc:
        raise SourceError(f"{src}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "list files must be UTF-8") from None


def _split(line: str, last: bool = False) -> list[str]:
    """``path<TAB>rest``; without a tab, split at whitespace (the last run of it if ``last``)."""
    if "\t" in line:
        return line.split("\t", 1)
    return line.rsplit(None, 1) if last else line.split(None, 1)


def _detect_file_format(src: str) -> str:
    if src.lower().endswith(".csv"):
        return "csv"
    for _, line in _data_lines(src):
        columns = _split(line)
        if len(columns) < 2 or _is_number(columns[1]):
            return "list"
        return "annolist" if columns[1].lstrip().startswith("{") else "masklist"
    return "list"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_LIST_SYNTAX = {"list": "path<TAB>label", "annolist": "path<TAB>json-annotation", "masklist": "path<TAB>mask-path"}


def _read_list(src: str, root: str, format: str) -> Iterator[SourceItem]:
    for number, line in _data_lines(src):
        where = f"{src}:{number}"
        columns = _split(line, last=format == "list")
        if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
            raise SourceError(f"{where}: expected `{_LIST_SYNTAX[format]}`, got {line!r}")
        path, rest = _resolve(root, columns[0].strip()), columns[1]
        if format == "list":
            yield SourceItem(path, label=_label(rest.strip(), where), line=where)
        elif format == "annolist":
            yield SourceItem(path, annotation=rest.encode(), line=where)
        else:
            yield SourceItem(path, mask_path=_resolve(root, rest.strip()), line=where)


def _label(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SourceError(f"{where}: label {text!r} is not a number; list labels are numbers "
                          "(use a CSV with a label column for class names)") from None


def _resolve(root: str, path: str) -> str:
    return os.path.normpath(os.path.join(root, path))


# -- CSV ---------------------------------------------------------------------------------------
def _read_csv(src: str, root: str) -> tuple[list[SourceItem], list[str] | None]:
    """Items of a CSV with a header (columns path, label, group, annotation, mask) and its classes."""
    try:
        with open(src, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise SourceError(f"{src}: empty CSV; the first row must be a header with a 'path' column")
            reader.fieldnames = header = [name.strip().lower() for name in reader.fieldnames]
            if "path" not in header:
                raise SourceError(f"{src}:1: the CSV header has no 'path' column (header: "
                                  f"{', '.join(header)}); name the image path column 'path'")
            rows = [(f"{src}:{reader.line_num}", {k: (row.get(k) or "").strip() for k in _CSV_COLUMNS})
                    for row in reader]
    except UnicodeDecodeError as exc:
        raise SourceError(f"{src}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "CSV files must be UTF-8") from None
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
    texts = [cells["label"] for _, cells in rows]
    if all(map(_is_number, texts)):
        return [float(t) for t in texts], None
    classes = sorted(set(texts))
    position = {name: float(i) for i, name in enumerate(classes)}
    return [position[t] for t in texts], classes


def _csv_item(root: str, where: str, cells: dict[str, str], label: float) -> SourceItem:
    if not cells["path"]:
        raise SourceError(f"{where}: empty path; every row needs the image path")
    return SourceItem(_resolve(root, cells["path"]), label=label, group=_group(cells["group"], where),
                      annotation=cells["annotation"].encode() or None,
                      mask_path=_resolve(root, cells["mask"]) if cells["mask"] else None, line=where)


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
