"""COCO JSON sources (instances and panoptic): one item per image, its objects as PicPac JSON shapes
(polygons, or bbox rects for crowds, unsegmented objects and panoptic segments)."""
from __future__ import annotations

import math
from typing import Any

from ..errors import SourceError
from ..file.inputs import read_file
from ..file.layout import load_json
from .base import MAX_CLASS_ID, SourceItem, annotation_json, points_json, rect_json, resolve_path, shape_json


def read_coco(src: str, root: str) -> tuple[list[SourceItem], list[str] | None]:
    """Items of a COCO instances or panoptic JSON file, one per image, and the category names by id."""
    data = load_json(read_file(src), lambda why: SourceError(
        f"{src}: not valid JSON ({why}); a COCO file is one JSON object with images, annotations and categories"))
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
        if not isinstance(name, str) or not name or "\0" in name:
            raise SourceError(f"{where}: `file_name` {name!r:.80} is not a path; every image needs the path of "
                              "its file")
        width, height = (_coco_size(entry.get(k), where, k) for k in ("width", "height"))
        images[key] = (resolve_path(root, name), width, height, [])
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
    items = [SourceItem(path, annotation=annotation_json(shapes)) for path, _, _, shapes in images.values()]
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
        parts.append(points_json(part, width, height))
    label = _coco_category(annotation, where)
    if len(parts) == 1:
        return shape_json("polygon", {"points": parts[0]}, label)
    return shape_json("polygons", {"polygons": parts}, label)


def _coco_box(annotation: dict[str, Any], where: str, width: float, height: float) -> dict[str, Any]:
    """The ``bbox`` ``[x, y, w, h]`` (pixels) as a rect; ``tag`` 1 marks a crowd."""
    box = annotation.get("bbox")
    if not (isinstance(box, list) and len(box) == 4 and all(_is_json_number(v) for v in box)):
        raise SourceError(f"{where}: expected `bbox` [x, y, width, height] in pixels, got {box!r:.80}; an object "
                          "without a polygon segmentation needs its bbox")
    x, y, w, h = box
    return shape_json("rect", rect_json(x / width, y / height, w / width, h / height),
                      _coco_category(annotation, where), 1 if annotation.get("iscrowd") else None)


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
    raise SourceError(f"{where}: `{key}` must be an integer or a string, got {value!r:.60}")


def _coco_id(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CLASS_ID:
        raise SourceError(f"{where}: `{key}` must be an integer 0, 1, ..., {MAX_CLASS_ID}, got {value!r:.40}")
    return value


def _coco_size(value: Any, where: str, key: str) -> float:
    if not _is_json_number(value) or value <= 0:
        raise SourceError(f"{where}: `{key}` must be a positive number (pixels), got {value!r:.60}; shapes are "
                          "normalised by the image width and height, so every image entry needs both")
    return value


def _is_json_number(value: Any) -> bool:
    """A finite number that a float holds (an integer of 400 digits is none)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
