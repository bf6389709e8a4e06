"""scan(): read a source as the format it names, or detect the format (auto), and hand it to the
module of that layout."""
from __future__ import annotations

import os
from typing import Any

from ..errors import MissingPathError, SourceError
from .base import (IMAGE_EXTENSIONS, LABEL_KINDS, Listing, SourceItem, annotation_json, data_lines, format_name,
                   is_number, resolve_path, walk_images)
from .coco import read_coco
from .csv import read_csv
from .folders import scan_folder
from .lists import read_list, split_columns
from .masks import match_masks
from .yolo import read_classes, read_yolo

_DIRECTORY_FORMATS = ("dir", "classdirs", "imagefolder", "yolo", "yolo-seg", "maskdir")
_FILE_FORMATS = ("list", "annolist", "masklist", "csv", "coco")
_LABELLED_FORMATS = ("yolo", "yolo-seg", "maskdir")
"""Folder formats whose labels lie in a second folder (``labels``) and that take ``classes``."""
_LABEL_COLUMN_FORMATS = ("list", "csv")
"""Formats with a label column, which take ``label_kind``, ``label_column`` and ``class_name_column``."""


def scan(src: str | os.PathLike, format: str = "auto", root: str | os.PathLike | None = None,
         labels: str | os.PathLike | None = None, classes: str | os.PathLike | None = None,
         label_kind: str = "auto", label_column: str | int | None = None,
         class_name_column: str | int | None = None) -> Listing:
    """List the items of ``src`` read as ``format`` (one of :data:`FORMATS`, or PicPac's number of one).

    Relative paths in list, CSV and COCO files are taken from ``root`` (default: the file's
    directory); ``root`` does not apply to folders. ``labels`` (the folder of YOLO label files or
    of masks) and ``classes`` (a YOLO dataset YAML or a text file of class names) apply to the
    formats yolo, yolo-seg and maskdir only. ``label_kind`` (:data:`LABEL_KINDS`: whether the labels are
    numbers or class names), ``label_column`` and ``class_name_column`` (a column's 1-based number or its name in
    the header) apply to the formats list and csv only.
    """
    src = os.fspath(src)
    format = format_name(format)
    for name, value in (("labels", labels), ("classes", classes)):
        if value is not None and format not in _LABELLED_FORMATS:
            raise SourceError(f"{name} (--{name}) applies to the formats {', '.join(_LABELLED_FORMATS)}, "
                              f"not to {format!r}; leave it out, or name one of those formats with -f")
    if label_kind not in LABEL_KINDS:
        raise SourceError(f"label_kind (--label-kind) must be one of {', '.join(LABEL_KINDS)}, got {label_kind!r}")
    columns = {"label_kind": label_kind, "label_column": label_column, "class_name_column": class_name_column}
    if not os.path.exists(src):
        raise MissingPathError(f"{src}: no such file or directory; pass a folder of images, "
                               "a list file, a CSV or a COCO JSON file (see `picpac docs import`)")
    if not os.path.isdir(src):
        return _scan_file(src, format, None if root is None else os.fspath(root), columns)
    if format in _FILE_FORMATS:
        raise SourceError(f"{src}: is a directory, but format {format!r} reads a list file; "
                          f"use -f {'/'.join(_DIRECTORY_FORMATS)} or -f auto for folders")
    _check_columns(format, columns)
    if root is not None:
        raise SourceError(f"{src}: root (--root) applies to list, CSV and COCO sources, not to folders; "
                          "leave it out")
    if format in _LABELLED_FORMATS:
        return _scan_labelled_folder(src, format, None if labels is None else os.fspath(labels),
                                     None if classes is None else os.fspath(classes))
    return scan_folder(src, format)


def _check_columns(format: str, columns: dict[str, Any]) -> None:
    """The label column options are given only for a format with a label column."""
    if format not in _LABEL_COLUMN_FORMATS and (columns["label_kind"] != "auto" or columns["label_column"] is not None
                                                or columns["class_name_column"] is not None):
        raise SourceError("label_kind, label_column, class_name_column (--label-kind, --label-column, "
                          f"--class-name-column) apply to the formats {', '.join(_LABEL_COLUMN_FORMATS)}, not to "
                          f"{format!r}; leave them out")


def _scan_file(src: str, format: str, root: str | None, columns: dict[str, Any]) -> Listing:
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
        format = _detect_file_format(src, root)
    source = f"{format} {os.path.abspath(src)}"
    _check_columns(format, columns)
    if format == "csv":
        items, classes = read_csv(src, root, **columns)
        return Listing(items, classes, source, root)
    if format == "coco":
        items, classes = read_coco(src, root)
        return Listing(items, classes, source, root)
    items, classes = read_list(src, root, format, **columns)
    return Listing(items, classes, source, root)


def _detect_file_format(src: str, root: str) -> str:
    if src.lower().endswith(".csv"):
        return "csv"
    if src.lower().endswith(".json"):
        return "coco"
    for _, line in data_lines(src):
        columns = split_columns(line)
        if len(columns) < 2 or is_number(columns[1]):
            return "list"
        if columns[1].lstrip().startswith("{"):
            return "annolist"
        # a mask list's second column is a path: an existing file, or one named as an image; anything
        # else (a class name such as `cat`) is a list's label
        second = columns[1].strip()
        if os.path.splitext(second)[1].lower() in IMAGE_EXTENSIONS or os.path.isfile(resolve_path(root, second)):
            return "masklist"
        return "list"
    return "list"


# -- folders with a labels folder (YOLO, masks) ------------------------------------------------
def _scan_labelled_folder(src: str, format: str, labels: str | None, classes: str | None) -> Listing:
    """An images folder whose YOLO label files (or masks) lie in the folder ``labels``."""
    top = os.path.abspath(src)
    if labels is None:
        if format == "maskdir":
            raise SourceError(f"{src}: format maskdir needs the folder of masks; pass it as labels (--labels DIR)")
        labels = os.path.join(os.path.dirname(top), "labels")
        if not os.path.isdir(labels):
            raise MissingPathError(f"{labels}: no such folder; YOLO label files are looked for in a folder "
                                   "`labels` beside the images folder, pass their folder as labels (--labels DIR)")
    elif not os.path.isdir(labels):
        what = "masks" if format == "maskdir" else "YOLO label files"
        raise MissingPathError(f"{labels}: labels folder does not exist; pass the folder of the {what}")
    labels = os.path.abspath(labels)
    names = None if classes is None else read_classes(classes)
    found = walk_images(top)
    inside = os.path.relpath(labels, top).split(os.sep)
    if inside[0] not in (os.curdir, os.pardir):  # the masks lie inside the images folder: they are no images
        found = [parts for parts in found if list(parts[:len(inside)]) != inside]
    source = f"{format} {top}"
    if format == "maskdir":
        return Listing(match_masks(top, found, labels), names, source, top)
    items = []
    for parts in found:
        label_file = os.path.join(labels, *parts[:-1], os.path.splitext(parts[-1])[0] + ".txt")
        # (a label file that is a FIFO or a directory is an error from read_yolo, not an image without objects)
        shapes = read_yolo(label_file, format, names, classes) if os.path.lexists(label_file) else []
        items.append(SourceItem(os.path.join(top, *parts), annotation=annotation_json(shapes),
                                pixel_centres=format == "yolo-seg"))
    return Listing(items, names, source, top)
