"""YOLO label files, one object a line: rects ``class cx cy w h`` (yolo) or polygons
``class x1 y1 x2 y2 ...`` (yolo-seg); and class-name files (a dataset YAML, or one name a line)."""
from __future__ import annotations

import math
import os
from typing import Any

import yaml

from ..errors import MissingPathError, SourceError
from .base import data_lines, is_integer, points_json, rect_json, shape_json

_YOLO_SYNTAX = {"yolo": "class cx cy w h", "yolo-seg": "class x1 y1 x2 y2 x3 y3 ..."}


def read_yolo(src: str, format: str, names: list[str] | None, classes: str | None) -> list[dict[str, Any]]:
    """The shapes of one YOLO label file: a rect (yolo) or a polygon (yolo-seg) per line."""
    shapes = []
    for number, line in data_lines(src, "YOLO label files"):
        where = f"{src}:{number}"
        values = line.split()
        label = _class_id(values[0], where, names, classes)
        coordinates = [_coordinate(text, where) for text in values[1:]]
        if format == "yolo":
            if len(coordinates) != 4:
                raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}` (5 values), got {len(values)} "
                                  f"values in {line!r}; polygon lines `class x1 y1 x2 y2 ...` are read by -f yolo-seg")
            cx, cy, w, h = coordinates
            shapes.append(shape_json("rect", rect_json(cx - w / 2, cy - h / 2, w, h), label))
            continue
        if len(coordinates) % 2:
            raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}`, got an odd number of coordinates "
                              f"({len(coordinates)}); every point is an x and a y")
        if len(coordinates) < 6:
            raise SourceError(f"{where}: expected `{_YOLO_SYNTAX[format]}`, got {len(coordinates) // 2} points; "
                              "a polygon needs at least 3 (detection lines `class cx cy w h` are read by -f yolo)")
        shapes.append(shape_json("polygon", {"points": points_json(coordinates)}, label))
    return shapes


def _class_id(text: str, where: str, names: list[str] | None, classes: str | None) -> int:
    if not is_integer(text):
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


# -- class names files -------------------------------------------------------------------------
def read_classes(src: str) -> list[str]:
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
            if isinstance(key, bool) or not (isinstance(key, int) or is_integer(str(key))) or int(key) < 0:
                raise SourceError(f"{src}: class id {key!r} is not an integer 0, 1, ...; write `names:` as "
                                  "`id: name` lines")
            ids[int(key)] = str(name)
        return [ids.get(i, "") for i in range(max(ids) + 1)]
    raise SourceError(f"{src}: no class names; a YOLO dataset YAML holds `names:` as a list of names or as "
                      "`id: name` lines")
