"""The sources layer: turn an import source (a folder layout, a list file, a CSV, a COCO JSON file,
YOLO labels) into items.

This layer parses layouts only; it never opens an image, so a missing image file is not an error
here (the importer skips it). A malformed layout raises :class:`SourceError` naming the file, the
line and the fix. docs/import.md describes every format.

Annotation formats (COCO, YOLO) become PicPac JSON shapes: ``{"shapes": [{"type": "rect", "geometry":
{"x", "y", "width", "height"}, "label": id}, ...]}`` with coordinates normalised to 0..1 by the image
size, written compactly with coordinates rounded to 6 decimals.
"""
from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import MissingPathError, SourceError
from ..file.layout import NO_GROUP

FORMATS = ("auto", "dir", "list", "classdirs", "imagefolder", "annolist", "masklist", "csv",
           "coco", "yolo", "yolo-seg", "maskdir")
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
_DIRECTORY_FORMATS = ("dir", "classdirs", "imagefolder", "yolo", "yolo-seg", "maskdir")
_FILE_FORMATS = ("list", "annolist", "masklist", "csv", "coco")
_LABELLED_FORMATS = ("yolo", "yolo-seg", "maskdir")
"""Folder formats whose labels lie in a second folder (``labels``) and that take ``classes``."""
_DECIMALS = 6
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
    pixel_centres: bool = False
    """The annotation's polygon vertices are pixel centres (YOLO-seg, traced from masks); the importer,
    which knows the image size, moves them to picpac's continuous coordinates (:func:`centres_to_continuous`)."""


@dataclass
class Listing:
    """Everything a source holds, in import order."""

    items: list[SourceItem]
    classes: list[str] | None
    source: str
    """The format and absolute source path, e.g. "imagefolder /data/train"."""
    root: str
    """Absolute directory that item paths are stored relative to."""


def scan(src: str | os.PathLike, format: str = "auto", root: str | os.PathLike | None = None,
         labels: str | os.PathLike | None = None, classes: str | os.PathLike | None = None) -> Listing:
    """List the items of ``src`` read as ``format`` (one of :data:`FORMATS`).

    Relative paths in list, CSV and COCO files are taken from ``root`` (default: the file's
    directory); ``root`` does not apply to folders. ``labels`` (the folder of YOLO label files or
    of masks) and ``classes`` (a YOLO dataset YAML or a text file of class names) apply to the
    formats yolo, yolo-seg and maskdir only.
    """
    src = os.fspath(src)
    if format not in FORMATS:
        raise SourceError(f"unknown import format {format!r}; use one of {', '.join(FORMATS)}")
    for name, value in (("labels", labels), ("classes", classes)):
        if value is not None and format not in _LABELLED_FORMATS:
            raise SourceError(f"{name} (--{name}) applies to the formats {', '.join(_LABELLED_FORMATS)}, "
                              f"not to {format!r}; leave it out, or name one of those formats with -f")
    if not os.path.exists(src):
        raise MissingPathError(f"{src}: no such file or directory; pass a folder of images, "
                               "a list file, a CSV or a COCO JSON file (docs/import.md)")
    if not os.path.isdir(src):
        return _scan_file(src, format, None if root is None else os.fspath(root))
    if format in _FILE_FORMATS:
        raise SourceError(f"{src}: is a directory, but format {format!r} reads a list file; "
                          f"use -f {'/'.join(_DIRECTORY_FORMATS)} or -f auto for folders")
    if root is not None:
        raise SourceError(f"{src}: root (--root) applies to list, CSV and COCO sources, not to folders; "
                          "leave it out")
    if format in _LABELLED_FORMATS:
        return _scan_labelled_folder(src, format, None if labels is None else os.fspath(labels),
                                     None if classes is None else os.fspath(classes))
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
    if format == "coco":
        items, classes = _read_coco(src, root)
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
def _data_lines(src: str, what: str = "list files") -> Iterator[tuple[int, str]]:
    """(line number, line) for every line that is neither blank nor a # comment."""
    try:
        with open(src, encoding="utf-8-sig") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if line.strip() and not line.lstrip().startswith("#"):
                    yield number, line
    except UnicodeDecodeError as exc:
        raise SourceError(f"{src}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          f"{what} must be UTF-8") from None


def _split(line: str, last: bool = False) -> list[str]:
    """``path<TAB>rest``; without a tab, split at whitespace (the last run of it if ``last``)."""
    if "\t" in line:
        return line.split("\t", 1)
    return line.rsplit(None, 1) if last else line.split(None, 1)


def _detect_file_format(src: str) -> str:
    if src.lower().endswith(".csv"):
        return "csv"
    if src.lower().endswith(".json"):
        return "coco"
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


# -- PicPac shapes -----------------------------------------------------------------------------
def _shape(kind: str, geometry: dict[str, Any], label: int, tag: int | None = None) -> dict[str, Any]:
    shape = {"type": kind, "geometry": geometry, "label": label}
    if tag is not None:
        shape["tag"] = tag
    return shape


def _rect(x: float, y: float, width: float, height: float) -> dict[str, float]:
    return {"x": _rounded(x), "y": _rounded(y), "width": _rounded(width), "height": _rounded(height)}


def _points(coordinates: list[float], width: float = 1.0, height: float = 1.0) -> list[dict[str, float]]:
    """``[x1, y1, x2, y2, ...]`` divided by ``width``/``height`` as PicPac points."""
    return [{"x": _rounded(x / width), "y": _rounded(y / height)}
            for x, y in zip(coordinates[::2], coordinates[1::2])]


def centres_to_continuous(annotation: bytes, width: int, height: int) -> bytes:
    """Shift polygon vertices given as pixel centres by half a pixel into continuous coordinates.

    YOLO-seg polygons are traced along mask pixels (vertex x = index of a boundary pixel), while
    picpac's shapes put pixel i at [i, i+1): without the shift a rasterized polygon lies half a
    pixel up and left of the mask it came from.
    """
    doc = json.loads(annotation)
    for shape in doc["shapes"]:
        for point in shape["geometry"].get("points", ()):
            point["x"] = _rounded(point["x"] + 0.5 / width)
            point["y"] = _rounded(point["y"] + 0.5 / height)
    return json.dumps(doc, separators=(",", ":")).encode()


def _rounded(value: float) -> float:
    return round(value, _DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0


def _annotation(shapes: list[dict[str, Any]]) -> bytes:
    return json.dumps({"shapes": shapes}, separators=(",", ":")).encode()


# -- YOLO and mask folders ---------------------------------------------------------------------
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
    names = None if classes is None else _read_classes(classes)
    found = _walk_images(top)
    inside = os.path.relpath(labels, top).split(os.sep)
    if inside[0] not in (os.curdir, os.pardir):  # the masks lie inside the images folder: they are no images
        found = [parts for parts in found if list(parts[:len(inside)]) != inside]
    source = f"{format} {top}"
    if format == "maskdir":
        return Listing(_match_masks(top, found, labels), names, source, top)
    items = []
    for parts in found:
        label_file = os.path.join(labels, *parts[:-1], os.path.splitext(parts[-1])[0] + ".txt")
        shapes = _read_yolo(label_file, format, names, classes) if os.path.isfile(label_file) else []
        items.append(SourceItem(os.path.join(top, *parts), annotation=_annotation(shapes),
                                pixel_centres=format == "yolo-seg"))
    return Listing(items, names, source, top)


_YOLO_SYNTAX = {"yolo": "class cx cy w h", "yolo-seg": "class x1 y1 x2 y2 x3 y3 ..."}


def _read_yolo(src: str, format: str, names: list[str] | None, classes: str | None) -> list[dict[str, Any]]:
    """The shapes of one YOLO label file: a rect (yolo) or a polygon (yolo-seg) per line."""
    shapes = []
    for number, line in _data_lines(src, "YOLO label files"):
        where = f"{src}:{number}"
        values = line.split()
        label = _class_id(values[0], where, names, classes)
        coordinates = [_coordinate(text, where) for text in values[1:]]
        if format == "yolo":
            if len(coordinates) != 4:
                raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}` (5 values), got {len(values)} "
                                  f"values in {line!r}; polygon lines `class x1 y1 x2 y2 ...` are read by -f yolo-seg")
            cx, cy, w, h = coordinates
            shapes.append(_shape("rect", _rect(cx - w / 2, cy - h / 2, w, h), label))
            continue
        if len(coordinates) % 2:
            raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}`, got an odd number of coordinates "
                              f"({len(coordinates)}); every point is an x and a y")
        if len(coordinates) < 6:
            raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}`, got {len(coordinates) // 2} points; "
                              "a polygon needs at least 3 (detection lines `class cx cy w h` are read by -f yolo)")
        shapes.append(_shape("polygon", {"points": _points(coordinates)}, label))
    return shapes


def _class_id(text: str, where: str, names: list[str] | None, classes: str | None) -> int:
    if not _is_integer(text):
        raise SourceError(f"{where}: class {text!r} is not an integer; a YOLO line starts with the class id "
                          "(0, 1, ...)")
    label = int(text)
    if names is not None and not (label < len(names) and names[label]):
        raise SourceError(f"{where}: class {label} has no name in {classes}; add it there, or fix the class id")
    return label


def _coordinate(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise SourceError(f"{where}: {text!r} is not a number; YOLO coordinates are numbers normalised to 0..1")
    return value


def _match_masks(top: str, found: list[tuple[str, ...]], masks: str) -> list[SourceItem]:
    """Each image with the mask of the same stem (any image extension) at the same place under ``masks``.

    An image without a mask gets the path ``<stem>.png`` that does not exist: the importer skips it
    and lists it as missing its mask.
    """
    by_stem: dict[tuple[str, ...], tuple[str, ...]] = {}
    for parts in _walk_images(masks):
        key = parts[:-1] + (os.path.splitext(parts[-1])[0],)
        if key in by_stem:
            raise SourceError(f"{masks}: masks {os.path.join(*by_stem[key])} and {os.path.join(*parts)} have "
                              "the same name stem; keep one mask per image")
        by_stem[key] = parts
    items = []
    for parts in found:
        key = parts[:-1] + (os.path.splitext(parts[-1])[0],)
        mask = by_stem.get(key, key[:-1] + (key[-1] + ".png",))
        items.append(SourceItem(os.path.join(top, *parts), mask_path=os.path.join(masks, *mask)))
    return items


# -- class names files -------------------------------------------------------------------------
def _read_classes(src: str) -> list[str]:
    """Class names from a YAML file (``names:`` or ``classes:``, a list or an ``id: name`` mapping)
    or a text file with one name per line; a mapping becomes a list indexed by id ("" for gaps)."""
    if not os.path.isfile(src):
        raise MissingPathError(f"{src}: classes file does not exist; pass a YOLO dataset YAML or a text file "
                               "with one class name per line")
    if os.path.splitext(src)[1].lower() in (".yaml", ".yml"):
        return _yaml_classes(src)
    try:
        with open(src, encoding="utf-8-sig") as f:
            names = [line.strip() for line in f.read().rstrip().splitlines()]
    except UnicodeDecodeError as exc:
        raise SourceError(f"{src}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "class name files must be UTF-8") from None
    for number, name in enumerate(names, 1):
        if not name:
            raise SourceError(f"{src}:{number}: empty class name; write one name per line (line N is class "
                              "N-1), without blank lines")
    if not names:
        raise SourceError(f"{src}: no class names; write one name per line (line N is class N-1)")
    return names


def _yaml_classes(src: str) -> list[str]:
    try:
        with open(src, encoding="utf-8-sig") as f:
            data = yaml.safe_load(f)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{src}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          "YAML files must be UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{src}:{mark.line + 1}" if mark is not None else src
        raise SourceError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or 'syntax error'})") from None
    names = None
    if isinstance(data, dict):
        names = data.get("names", data.get("classes"))
    if isinstance(names, list) and names:
        return [str(name) for name in names]
    if isinstance(names, dict) and names:
        ids = {}
        for key, name in names.items():
            if isinstance(key, bool) or not (isinstance(key, int) or _is_integer(str(key))) or int(key) < 0:
                raise SourceError(f"{src}: class id {key!r} is not an integer 0, 1, ...; write `names:` as "
                                  "`id: name` lines")
            ids[int(key)] = str(name)
        return [ids.get(i, "") for i in range(max(ids) + 1)]
    raise SourceError(f"{src}: no class names; a YOLO dataset YAML holds `names:` as a list of names or as "
                      "`id: name` lines")


# -- COCO --------------------------------------------------------------------------------------
def _read_coco(src: str, root: str) -> tuple[list[SourceItem], list[str] | None]:
    """Items of a COCO instances or panoptic JSON file, one per image, and the category names by id."""
    try:
        with open(src, "rb") as f:
            data = json.load(f)
    except ValueError as exc:
        raise SourceError(f"{src}: not valid JSON ({exc}); a COCO file is one JSON object with images, "
                          "annotations and categories") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SourceError(f"{src}: not a COCO file: no `images` list; pass a COCO instances or panoptic JSON file")
    annotations = _coco_list(data, "annotations", src)
    panoptic = bool(annotations) and isinstance(annotations[0], dict) and "segments_info" in annotations[0]
    images: dict[Any, tuple[str, float, float, list[dict[str, Any]]]] = {}
    for i, entry in enumerate(data["images"]):
        where = f"{src}: images[{i}]"
        entry = _coco_object(entry, where, "image")
        key = _coco_key(entry.get("id"), where, "id")
        if key in images:
            raise SourceError(f"{where}: image id {key!r} appears twice; image ids must be unique")
        name = entry.get("file_name")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{where}: no `file_name`; every image needs the path of its file")
        width, height = (_coco_size(entry.get(k), where, k) for k in ("width", "height"))
        images[key] = (_resolve(root, name), width, height, [])
    for i, annotation in enumerate(annotations):
        where = f"{src}: annotations[{i}]"
        annotation = _coco_object(annotation, where, "annotation")
        key = _coco_key(annotation.get("image_id"), where, "image_id")
        if key not in images:
            raise SourceError(f"{where}: image_id {key!r} is not the id of an entry in `images`")
        _, width, height, shapes = images[key]
        if panoptic:
            segments = annotation.get("segments_info")
            if not isinstance(segments, list):
                raise SourceError(f"{where}: no `segments_info` list, but the first annotation has one; a COCO "
                                  "file is either panoptic (every annotation has segments_info) or instances")
            for j, segment in enumerate(segments):
                shapes.append(_coco_box(_coco_object(segment, f"{where}.segments_info[{j}]", "segment"),
                                        f"{where}.segments_info[{j}]", width, height))
        else:
            shapes.append(_coco_instance(annotation, where, width, height))
    items = [SourceItem(path, annotation=_annotation(shapes)) for path, _, _, shapes in images.values()]
    return items, _coco_classes(_coco_list(data, "categories", src), src)


def _coco_instance(annotation: dict[str, Any], where: str, width: float, height: float) -> dict[str, Any]:
    """A polygon, polygons (several parts) or, for a crowd (RLE) or unsegmented object, its bbox rect."""
    segmentation = annotation.get("segmentation")
    if annotation.get("iscrowd") or not isinstance(segmentation, list) or not any(segmentation):
        return _coco_box(annotation, where, width, height)
    parts = []
    for part in filter(None, segmentation):
        if not isinstance(part, list) or not all(_is_json_number(v) for v in part):
            raise SourceError(f"{where}: segmentation must be a list of polygons [[x1, y1, x2, y2, ...], ...] "
                              "(pixel coordinates) or an RLE dict")
        if len(part) % 2:
            raise SourceError(f"{where}: a segmentation polygon has an odd number of coordinates ({len(part)}); "
                              "every point is an x and a y")
        parts.append(_points(part, width, height))
    label = _coco_category(annotation, where)
    if len(parts) == 1:
        return _shape("polygon", {"points": parts[0]}, label)
    return _shape("polygons", {"polygons": parts}, label)


def _coco_box(annotation: dict[str, Any], where: str, width: float, height: float) -> dict[str, Any]:
    """The ``bbox`` ``[x, y, w, h]`` (pixels) as a rect; ``tag`` 1 marks a crowd."""
    box = annotation.get("bbox")
    if not (isinstance(box, list) and len(box) == 4 and all(_is_json_number(v) for v in box)):
        raise SourceError(f"{where}: expected `bbox` [x, y, width, height] in pixels, got {box!r}; an object "
                          "without a polygon segmentation needs its bbox")
    x, y, w, h = box
    return _shape("rect", _rect(x / width, y / height, w / width, h / height), _coco_category(annotation, where),
                  1 if annotation.get("iscrowd") else None)


def _coco_category(annotation: dict[str, Any], where: str) -> int:
    return _coco_id(annotation.get("category_id"), where, "category_id")


def _coco_classes(categories: list[Any], src: str) -> list[str] | None:
    """Category names indexed by id (COCO ids have gaps: "" for an unused id)."""
    names = {}
    for i, category in enumerate(categories):
        where = f"{src}: categories[{i}]"
        category = _coco_object(category, where, "category")
        names[_coco_id(category.get("id"), where, "id")] = str(category.get("name", ""))
    return [names.get(i, "") for i in range(max(names) + 1)] if names else None


def _coco_list(data: dict[str, Any], key: str, src: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SourceError(f"{src}: `{key}` is not a list; pass a COCO instances or panoptic JSON file")
    return value


def _coco_object(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SourceError(f"{where}: expected a JSON object (an {what}), got {type(value).__name__}")
    return value


def _coco_key(value: Any, where: str, key: str) -> Any:
    if isinstance(value, str) or (_is_json_number(value) and not isinstance(value, float)):
        return value
    raise SourceError(f"{where}: `{key}` must be an integer or a string, got {value!r}")


def _coco_id(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SourceError(f"{where}: `{key}` must be an integer 0, 1, ..., got {value!r}")
    return value


def _coco_size(value: Any, where: str, key: str) -> float:
    if not _is_json_number(value) or value <= 0:
        raise SourceError(f"{where}: `{key}` must be a positive number (pixels), got {value!r}; shapes are "
                          "normalised by the image width and height, so every image entry needs both")
    return value


def _is_json_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
