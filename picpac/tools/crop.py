"""`picpac crop`: one record per annotated object (PicPac's picpac-crop).

Every box, polygon or ellipse shape of a record's PicPac JSON annotation becomes a record of its own: the
image cut to the shape's bounding box (widened by a margin, kept inside the image) in the source's format,
its label the shape's label, its annotation that shape moved into the crop's coordinates, its meta the
source record and object, and its group the source's group (else the source record), so the crops of
one image stay in one fold. Masks are cut with the image; other fields are left out. Point shapes have
no extent and are left out, and so are objects smaller than ``min_size`` pixels.
"""
from __future__ import annotations

import json
import math
import os
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from .. import image
from ..engine.threads import ordered_map
from ..errors import PicPacValueError
from ..file.layout import load_json
from ..file.reader import Reader
from ..file.writer import Writer
from ..image.shapes import Shapes
from ..stores.base import output_errors
from ..stores.tar import image_extension
from .downsize import (Progress, bar_of, check_output, check_positive, decode_field, encode_like, mask_fields,
                       output_metadata, threads_of)
from .info import what_classes_name

_EPSILON = 1e-6
"""Pixel edges within this of a whole number are taken as that number (0.35 * 80 is 27.999999999999996)."""


@dataclass
class CropReport:
    """What :func:`crop` did."""

    db: str
    out: str
    records: int
    annotated: int
    """Records with a JSON annotation."""
    objects: int
    """Records written: one per object."""
    small: int
    """Objects left out because they are smaller than ``min_size`` (or lie outside the image)."""
    points: int
    """Point shapes left out."""
    seconds: float

    def summary(self) -> str:
        """One line."""
        return (f"cropped {self.objects} objects from {self.annotated} annotated of {self.records} records of "
                f"{self.db} into {self.out} ({self.small} too small and {self.points} points left out) "
                f"in {self.seconds:.1f} s")


def crop(db: str | os.PathLike, out: str | os.PathLike, *, margin: float = 0.0, min_size: int = 1,
         quality: int = 95, image_field: str = "image", annotation_field: str = "annotation",
         overwrite: bool = False, max_pixels: int | None = image.MAX_PIXELS, threads: int | None = None,
         progress: Progress | None = None) -> CropReport:
    """Write ``out``: one record per box, polygon or ellipse shape of ``db``'s annotations.

    The crop is the shape's bounding box widened by ``margin`` times its width (and height) on each side,
    rounded out to whole pixels and kept inside the image; objects whose box inside the image is narrower
    or shorter than ``min_size`` pixels are left out. Meta: ``source`` (the record), ``object`` (the
    shape's position in its annotation), ``box`` (x, y, width, height of the crop in the source image),
    ``width``, ``height``, ``channels`` and the source's ``path``.
    """
    start = time.perf_counter()
    db, out = os.fspath(db), os.fspath(out)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin <= 100:
        raise PicPacValueError(f"margin must be a number in [0, 100] (a fraction of the object's size), got {margin!r}")
    check_positive("min_size", min_size, 0)
    check_positive("quality", quality, 0, 100)
    threads = threads_of(threads)
    check_output(out, overwrite)
    annotated = small = points = 0
    with Reader(db) as reader:
        for name in (image_field, annotation_field):
            if name not in reader.fields:
                raise PicPacValueError(f"{db}: has no field {name!r} (its fields: {reader.fields}); `picpac crop` "
                                       "needs images and their PicPac JSON annotations (picpac import writes them; "
                                       "--image-field and --annotation-field name other fields)")
        metadata = output_metadata(reader, "crop", "cropped", margin=margin, min_size=min_size)
        if what_classes_name(metadata.get("source")) != "shapes":
            metadata.pop("classes", None)  # they named the source records' labels, not the shapes'
        metadata["source"] = f"crop {db}"

        def work(index: int) -> tuple[list[tuple], bool, int, int]:
            return _objects(reader, index, margin, min_size, quality, image_field, annotation_field, max_pixels)

        with (output_errors(out), Writer(out, overwrite=overwrite, metadata=metadata) as writer,
              bar_of(progress, len(reader)) as bar,
              closing(ordered_map(work, range(len(reader)), threads, 4 * threads, name="picpac-crop")) as results):
            for _, outcome in results:
                objects, has_annotation, too_small, point_shapes = outcome.get()
                for fields, label, group, meta in objects:
                    writer.append(fields, label=label, group=group, meta=meta)
                annotated += has_annotation
                small += too_small
                points += point_shapes
                if bar is not None:
                    bar.update(1)
            if not len(writer):
                raise PicPacValueError(f"{db}: none of its {len(reader)} records ({annotated} annotated) has a box, "
                                       f"polygon or ellipse of at least {min_size} px in its {annotation_field!r} "
                                       "field; nothing was written (lower --min-size?)")
            count = len(writer)
    return CropReport(db, out, len(reader), annotated, count, small, points, time.perf_counter() - start)


def _objects(reader: Reader, index: int, margin: float, min_size: int, quality: int, image_field: str,
             annotation_field: str, max_pixels: int | None) -> tuple[list[tuple], bool, int, int]:
    """([(fields, label, group, meta) per object], whether the record is annotated, objects too small, points)."""
    record = reader[index]
    annotation = record.fields.get(annotation_field)
    data = record.fields.get(image_field)
    if annotation is None or data is None or image_extension(annotation) is not None \
            or not bytes(annotation[:64]).strip():
        return [], False, 0, 0
    doc = load_json(annotation, lambda why: PicPacValueError(
        f"{reader.path}: record {index} has an {annotation_field!r} field that is not valid JSON ({why}); fix or "
        "drop the record"))
    pixels = decode_field(reader, index, image_field, data, max_pixels)
    height, width = pixels.shape[:2]
    try:
        shapes = Shapes.from_json(doc, width, height)
    except PicPacValueError as exc:
        raise PicPacValueError(f"{reader.path}: record {index} has a bad annotation: {exc}") from None
    masks = {name: decode_field(reader, index, name, record.fields[name], max_pixels, cv2.IMREAD_UNCHANGED)
             for name in mask_fields(record, image_field)}
    objects, small, points = [], 0, 0
    for s, box in enumerate(shapes.boxes()):
        if shapes.kinds[s] == "point":
            points += 1
            continue
        x1, y1, x2, y2 = box.tolist()
        inside = min(x2, width) - max(x1, 0), min(y2, height) - max(y1, 0)
        if min(inside) < max(min_size, _EPSILON):
            small += 1
            continue
        mx, my = margin * (x2 - x1), margin * (y2 - y1)
        left, top = max(0, math.floor(x1 - mx + _EPSILON)), max(0, math.floor(y1 - my + _EPSILON))
        right, bottom = min(width, math.ceil(x2 + mx - _EPSILON)), min(height, math.ceil(y2 + my - _EPSILON))
        cut = np.ascontiguousarray(pixels[top:bottom, left:right])
        w, h = right - left, bottom - top
        fields = {image_field: encode_like(cut, data, quality=quality),
                  annotation_field: json.dumps({"shapes": [_moved(doc["shapes"][s], width, height, left, top, w, h)]},
                                               separators=(",", ":")).encode()}
        for name, mask in masks.items():
            if mask.shape[:2] == pixels.shape[:2]:
                fields[name] = encode_like(np.ascontiguousarray(mask[top:bottom, left:right]), record.fields[name],
                                           lossless=True)
        meta = {"source": index, "object": s, "box": [left, top, w, h], "width": w, "height": h,
                "channels": image.shape_of(cut)[2]}
        if isinstance(record.meta, dict) and "path" in record.meta:
            meta["path"] = record.meta["path"]
        objects.append((fields, float(shapes.labels[s]), index if record.group is None else record.group, meta))
    return objects, True, small, points


def _moved(spec: dict[str, Any], width: int, height: int, left: int, top: int, w: int, h: int) -> dict[str, Any]:
    """A PicPac JSON shape of a ``width`` x ``height`` image in the coordinates of its crop ``(left, top, w, h)``."""
    def point(p: dict[str, Any]) -> dict[str, Any]:
        return {**p, "x": (float(p["x"]) * width - left) / w, "y": (float(p["y"]) * height - top) / h}

    geometry = spec["geometry"]
    if spec["type"] in ("rect", "ellipse"):
        moved = {**point(geometry), "width": float(geometry["width"]) * width / w,
                 "height": float(geometry["height"]) * height / h}
    elif spec["type"] == "polygon":
        moved = {**geometry, "points": [point(p) for p in geometry["points"]]}
    else:  # polygons
        moved = {**geometry, "polygons": [[point(p) for p in polygon] for polygon in geometry["polygons"]]}
    return {**spec, "geometry": moved}
