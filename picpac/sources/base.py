"""What every import layout shares: the items a source lists (:class:`SourceItem`, :class:`Listing`),
the formats, the image walk, reading data lines (the files themselves are read by ``file/inputs.py``),
and the PicPac JSON shapes annotations become.

Annotation formats (COCO, YOLO) become PicPac JSON shapes: ``{"shapes": [{"type": "rect", "geometry":
{"x", "y", "width", "height"}, "label": id}, ...]}`` with coordinates normalised to 0..1 by the image
size, written compactly with coordinates rounded to 6 decimals.
"""
from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SourceError
from ..file.inputs import read_text

FORMATS = ("auto", "dir", "list", "classdirs", "imagefolder", "annolist", "masklist", "csv",
           "coco", "yolo", "yolo-seg", "maskdir")
PICPAC_NUMBERS = {"0": "dir", "1": "list", "2": "classdirs", "3": "annolist", "4": "masklist"}
"""PicPac's ``picpac-import -f N`` numbers and the formats they name: the one table that both
``picpac import -f`` and ``picpac-import -f`` (and :func:`format_name`) read."""
_UNSUPPORTED_NUMBERS = {
    "5": "5 (re-encoding a PicPac database) is not supported: import the images themselves, with --max-size "
         "to shrink them; `picpac import --from FORMAT` converts a dataset in another storage format",
    "6": "6 (ImageNet tar files) is not supported: unpack the tar files into one folder per class and "
         "import that folder with -f imagefolder",
}


def format_name(format: str | int) -> str:
    """The format that ``format`` names: one of :data:`FORMATS`, or PicPac's number (0-4, as int or
    str) of one; anything else raises :class:`SourceError` listing what is accepted."""
    text = str(format).strip().lower() if isinstance(format, (str, int)) and not isinstance(format, bool) else None
    if text in FORMATS:
        return text
    if text in PICPAC_NUMBERS:
        return PICPAC_NUMBERS[text]
    if text in _UNSUPPORTED_NUMBERS:
        raise SourceError(f"format {_UNSUPPORTED_NUMBERS[text]}")
    raise SourceError(f"unknown import format {format!r}; use one of {', '.join(FORMATS)}, or PicPac's numbers "
                      + ", ".join(f"{n} ({name})" for n, name in PICPAC_NUMBERS.items()))
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
MAX_CLASS_ID = (1 << 20) - 1
"""The largest class id a source may name: names are kept in a list indexed by id."""
_DECIMALS = 6


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


# -- image files -------------------------------------------------------------------------------
def walk_images(top: str) -> list[tuple[str, ...]]:
    """Relative path parts of every image under ``top``, sorted; hidden files and folders skipped."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, top)
        parts = () if rel == os.curdir else tuple(rel.split(os.sep))
        found += [parts + (name,) for name in filenames if not name.startswith(".") and _is_image_name(name)]
    return sorted(found)


def _is_image_name(name: str) -> bool:
    """Whether a file name has an image extension (case-insensitive)."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def is_integer(name: str) -> bool:
    return name.isascii() and name.isdigit()


# -- text lines --------------------------------------------------------------------------------
def data_lines(src: str, what: str = "list files") -> Iterator[tuple[int, str]]:
    """(line number, line) for every line that is neither blank nor a # comment."""
    for number, line in enumerate(io.StringIO(read_text(src, what), newline=None), 1):
        line = line.rstrip("\r\n")
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


LABEL_KINDS = ("auto", "numbers", "names")
"""What a list's or CSV's label column holds (``--label-kind``): numbers, class names, or (auto) whichever
every label is; auto refuses a column that mixes the two."""
_SHOWN = 3
"""How many offending lines an error about a column names."""


def column_word(text: str) -> str:
    """A header cell as picpac matches it: stripped, lower case, spaces and hyphens as underscores."""
    return text.strip().lower().replace(" ", "_").replace("-", "_")


def pick_column(value: str | int, header: list[str] | None, width: int, src: str, what: str) -> int:
    """The 0-based index of the column ``value`` names (``--label-column``, ``--class-name-column``): its
    1-based number, or its name in ``header`` (matched as :func:`column_word`)."""
    option = "--" + what.replace(" ", "-")
    text = str(value).strip()
    if is_integer(text):
        if not 1 <= int(text) <= width:
            raise SourceError(f"{src}: {what} {text} ({option}) is not one of the columns 1-{width}")
        return int(text) - 1
    words = [column_word(cell) for cell in header or ()]
    if column_word(text) not in words:
        known = f"the header ({', '.join(header)})" if header else "a header line (the source has none)"
        raise SourceError(f"{src}: {what} {text!r} ({option}) is not in {known}; give the column's name "
                          "or its number (1 is the first)")
    return words.index(column_word(text))


def class_labels(texts: list[str], where: list[str], kind: str = "auto",
                 names: list[str] | None = None) -> tuple[list[float], list[str] | None]:
    """The labels of a list or CSV (``texts``, read at ``where``: "list.txt:3") and the classes.

    Numbers stay numbers; with ``names`` (a class-name column) they are class ids and the classes map each
    id to its name ("" for ids no line names). Class names become their positions in the sorted names, which
    are the classes. ``kind`` (:data:`LABEL_KINDS`) says which; auto takes the one every label is, and a
    column that mixes them is a SourceError naming the first lines of the rarer kind.
    """
    numeric = [is_number(t) for t in texts]
    if kind == "auto":
        if any(numeric) and not all(numeric):
            raise _mixed_labels(texts, numeric, where)
        kind = "numbers" if all(numeric) else "names"
    if kind == "numbers":
        bad = [i for i, ok in enumerate(numeric) if not ok]
        if bad:
            raise SourceError(f"{where[bad[0]]}: label {texts[bad[0]]!r} is not a number (--label-kind numbers)"
                              f"{_more(texts, where, bad)}; fix the line(s), or pass --label-kind names "
                              "(label_kind=\"names\") if the labels are class names")
        labels = [float(t) for t in texts]
        return labels, None if names is None else _named_classes(texts, labels, names, where)
    if names is not None:
        raise SourceError(f"{where[0]}: the labels are class names ({texts[0]!r}), so a class-name column cannot "
                          "name them; give class indices in the label column, or no class-name column")
    classes = sorted(set(texts))
    position = {name: float(i) for i, name in enumerate(classes)}
    return [position[t] for t in texts], classes


def _mixed_labels(texts: list[str], numeric: list[bool], where: list[str]) -> SourceError:
    """The error for a label column of numbers and class names: the lines of the rarer kind (a typo)."""
    words = [i for i, ok in enumerate(numeric) if not ok]
    numbers = [i for i, ok in enumerate(numeric) if ok]
    odd, rest = (words, numbers) if len(words) <= len(numbers) else (numbers, words)
    what, others = ("a class name", "numbers") if odd is words else ("a number", "class names")
    first = odd[0]
    return SourceError(f"{where[first]}: label {texts[first]!r} is {what}{_more(texts, where, odd)}, but the other "
                       f"{len(rest)} labels are {others}; a label column holds numbers or class names, never both: "
                       "fix the line(s), or pass --label-kind names (label_kind=\"names\") to read every label as a "
                       "class name")


def _more(texts: list[str], where: list[str], lines: list[int]) -> str:
    """", as are list.txt:7 ('x'), ... (N in all)" for the lines after the first one named."""
    if len(lines) < 2:
        return ""
    shown = ", ".join(f"{where[i]} ({texts[i]!r})" for i in lines[1:_SHOWN])
    return f", as are {shown}" + (f", ... ({len(lines)} lines in all)" if len(lines) > _SHOWN else "")


def _named_classes(texts: list[str], labels: list[float], names: list[str], where: list[str]) -> list[str] | None:
    """The class table a class-name column gives: each integer id its one name, "" for ids no line names."""
    table: dict[int, tuple[str, str]] = {}
    for text, label, name, at in zip(texts, labels, names, where):
        if not (0 <= label <= MAX_CLASS_ID and label.is_integer()):
            raise SourceError(f"{at}: label {text!r} is not a class id (an integer 0..{MAX_CLASS_ID}); "
                              "a class-name column names integer class ids")
        if not name:
            raise SourceError(f"{at}: empty class name; give every line of the class-name column a name")
        first = table.setdefault(int(label), (name, at))
        if first[0] != name:
            raise SourceError(f"{at}: class {int(label)} is named {name!r}, but {first[1]} names it {first[0]!r}; "
                              "give each class index one name")
    if not table:
        return None
    classes = [""] * (max(table) + 1)
    for label, (name, _) in table.items():
        classes[label] = name
    return classes


def resolve_path(root: str, path: str) -> str:
    return os.path.normpath(os.path.join(root, path))


# -- PicPac shapes -----------------------------------------------------------------------------
def shape_json(kind: str, geometry: dict[str, Any], label: int, tag: int | None = None) -> dict[str, Any]:
    shape = {"type": kind, "geometry": geometry, "label": label}
    if tag is not None:
        shape["tag"] = tag
    return shape


def rect_json(x: float, y: float, width: float, height: float) -> dict[str, float]:
    return {"x": _rounded(x), "y": _rounded(y), "width": _rounded(width), "height": _rounded(height)}


def points_json(coordinates: list[float], width: float = 1.0, height: float = 1.0) -> list[dict[str, float]]:
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


def annotation_json(shapes: list[dict[str, Any]]) -> bytes:
    return json.dumps({"shapes": shapes}, separators=(",", ":")).encode()
