"""YOLO label files, one object a line: rects ``class cx cy w h`` (yolo) or polygons
``class x1 y1 x2 y2 ...`` (yolo-seg); and class-name files (a dataset YAML, or one name a line)."""
from __future__ import annotations

import math
import os
from typing import Any

import yaml

from ..errors import MissingPathError, SourceError
from ..file.inputs import read_text
from .base import MAX_CLASS_ID, data_lines, is_integer, points_json, rect_json, shape_json

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
    if not is_integer(text) or len(text) > 7 or int(text) > MAX_CLASS_ID:
        raise SourceError(f"{where}: class {text!r:.40} is not an integer 0, 1, ..., {MAX_CLASS_ID}; a YOLO line "
                          "starts with the class id")
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
    if not os.path.lexists(src):  # (a FIFO or a directory is read_text's error)
        raise MissingPathError(f"{src}: classes file does not exist; pass a YOLO dataset YAML or a text file "
                               "with one class name per line")
    if os.path.splitext(src)[1].lower() in (".yaml", ".yml"):
        return _yaml_classes(src)
    names = [line.strip() for line in read_text(src, "class name files").rstrip().splitlines()]
    for number, name in enumerate(names, 1):
        if not name:
            raise SourceError(f"{src}:{number}: empty class name; write one name per line (line N is class "
                              "N-1), without blank lines")
    if not names:
        raise SourceError(f"{src}: no class names; write one name per line (line N is class N-1)")
    return names


def _yaml_classes(src: str) -> list[str]:
    try:
        data = yaml.safe_load(read_text(src, "YAML files"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{src}:{mark.line + 1}" if mark is not None else src
        raise SourceError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or 'syntax error'})") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a value YAML's constructors refuse (a date, an int)
        raise SourceError(f"{src}: not valid YAML ({exc})") from None
    except RecursionError:
        raise SourceError(f"{src}: YAML nested too deeply; a dataset YAML holds `names:` as a list or as "
                          "`id: name` lines") from None
    names = None
    if isinstance(data, dict):
        names = data.get("names", data.get("classes"))
    if isinstance(names, list) and names:
        return [_class_name(name, src) for name in names]
    if isinstance(names, dict) and names:
        ids = {}
        for key, name in names.items():
            if isinstance(key, str) and is_integer(key) and len(key) <= 7:
                key = int(key)
            if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= MAX_CLASS_ID:
                raise SourceError(f"{src}: class id {key!r:.40} is not an integer 0, 1, ..., {MAX_CLASS_ID}; write "
                                  "`names:` as `id: name` lines")
            ids[key] = _class_name(name, src)
        return [ids.get(i, "") for i in range(max(ids) + 1)]
    raise SourceError(f"{src}: no class names; a YOLO dataset YAML holds `names:` as a list of names or as "
                      "`id: name` lines")


def _class_name(name: Any, src: str) -> str:
    """A class name from YAML: a string, or a number or boolean written as one (never a list or a mapping,
    whose text YAML aliases could make exponentially long)."""
    if isinstance(name, (list, dict)):
        raise SourceError(f"{src}: a class name is a YAML {type(name).__name__}; class names are strings")
    return str(name)
