"""Vector annotations (image layer): PicPac's JSON shapes, kept exact through affine maps.

Coordinates are continuous pixel coordinates: pixel (i, j) covers [i, i+1) x [j, j+1), so an image
of width W spans [0, W). Every shape is stored as points: a rect as its 4 corners (it stays exact,
as a parallelogram, under any affine map), a polygon as its vertices, a point as itself, and an
ellipse as 3 points, centre c and conjugate semi-axis ends c+u, c+v (the ellipse is
{c + u cos t + v sin t}, and an affine map of that is again such an ellipse). So one vectorised
``points @ A.T + b`` moves every shape exactly; boxes and rasters are computed only at the end.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ..errors import PicPacValueError

_FLOAT32_MAX = float(np.finfo(np.float32).max)

KINDS = ("rect", "ellipse", "polygon", "polygons", "point")
_SHIFT = 4  # fixed-point bits for OpenCV drawing: 1/16 px precision
_NUDGE = 1 / (1 << _SHIFT)
_ELLIPSE_SEGMENTS = 64


class Shapes:
    """The shapes of one sample, in pixel coordinates.

    ``points`` (P, 2) float64 holds every point; part k is ``points[starts[k]:starts[k+1]]`` and
    belongs to shape ``owner[k]``; shape s has ``kinds[s]``, ``labels[s]`` (float; a PicPac label
    given as a list is a colour, and its first value is the label) and ``tags[s]`` (NaN when absent).
    """

    __slots__ = ("points", "starts", "owner", "kinds", "labels", "colors", "tags")

    def __init__(self, points: np.ndarray, starts: np.ndarray, owner: np.ndarray, kinds: list[str],
                 labels: np.ndarray, colors: list[tuple[float, ...]], tags: np.ndarray):
        self.points, self.starts, self.owner = points, starts, owner
        self.kinds, self.labels, self.colors, self.tags = kinds, labels, colors, tags

    def __len__(self) -> int:
        return len(self.kinds)

    @classmethod
    def empty(cls) -> Shapes:
        return cls(np.zeros((0, 2)), np.zeros(1, np.int64), np.zeros(0, np.int64), [], np.zeros(0), [], np.zeros(0))

    @classmethod
    def from_json(cls, data: Any, width: int, height: int) -> Shapes:
        """Parse PicPac JSON (bytes, str or dict) with coordinates normalised to [0, 1]."""
        try:
            doc = json.loads(bytes(data) if isinstance(data, memoryview) else data) if not isinstance(data, dict) else data
        except RecursionError:
            raise PicPacValueError("annotation JSON is nested too deeply") from None
        specs = doc.get("shapes") if isinstance(doc, dict) else None
        if not isinstance(specs, list):
            raise PicPacValueError('annotation JSON must be an object with a "shapes" list')
        parts: list[list[tuple[float, float]]] = []
        owner, kinds, labels, colors, tags = [], [], [], [], []
        for s, spec in enumerate(specs):
            try:
                kind = spec["type"]
                shape_parts = _parts(kind, spec["geometry"])
            except (KeyError, TypeError, ValueError) as exc:
                raise PicPacValueError(f"annotation shape {s} is malformed ({exc!r}); see `picpac docs augment`") from None
            if not all(shape_parts):
                raise PicPacValueError(f"annotation shape {s} ({kind}) has no points")
            parts += shape_parts
            owner += [s] * len(shape_parts)
            kinds.append(kind)
            try:
                color = _color(spec.get("label", 1))
                tag = float(spec["tag"]) if spec.get("tag") is not None else np.nan
            except (TypeError, ValueError) as exc:
                raise PicPacValueError(f"annotation shape {s} has a bad label or tag ({exc}); labels are numbers or "
                                       "lists of numbers, tags numbers") from None
            if not (np.abs(color) <= _FLOAT32_MAX).all() or abs(tag) > _FLOAT32_MAX:  # NaN tag: none
                raise PicPacValueError(f"annotation shape {s} has a label or tag that is not a finite number "
                                       "within float32's range (targets are float32)")
            colors.append(color)
            labels.append(color[0])
            tags.append(tag)
        starts = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=starts[1:])
        points = np.array([xy for p in parts for xy in p], np.float64).reshape(-1, 2)
        points *= (width, height)
        return cls(points, starts, np.array(owner, np.int64), kinds, np.array(labels, np.float64), colors,
                   np.array(tags, np.float64))

    def copy(self) -> Shapes:
        return Shapes(self.points.copy(), self.starts, self.owner, self.kinds, self.labels, self.colors, self.tags)

    def transform(self, matrix: np.ndarray) -> None:
        """Apply the 2x3 affine ``matrix`` to every point, in place."""
        self.points = self.points @ matrix[:, :2].T + matrix[:, 2]

    def part(self, k: int) -> np.ndarray:
        return self.points[self.starts[k]:self.starts[k + 1]]

    def boxes(self) -> np.ndarray:
        """(S, 4) boxes ``x1, y1, x2, y2`` of every shape (exact for ellipses too)."""
        if not len(self):
            return np.zeros((0, 4))
        first = self.starts[:-1]
        part_box = np.hstack([np.minimum.reduceat(self.points, first), np.maximum.reduceat(self.points, first)])
        for k in np.flatnonzero(np.array([self.kinds[s] == "ellipse" for s in self.owner])):
            c, u, v = self.part(k)
            half = np.hypot(u - c, v - c)  # per axis: the largest of u cos t + v sin t
            part_box[k] = (*(c - half), *(c + half))
        if len(part_box) == len(self):  # one part per shape: the parts' boxes are the shapes'
            return part_box
        out = np.full((len(self), 4), np.inf)
        out[:, 2:] = -np.inf
        np.minimum.at(out[:, :2], self.owner, part_box[:, :2])
        np.maximum.at(out[:, 2:], self.owner, part_box[:, 2:])
        return out

    def outlines(self, s: int) -> list[np.ndarray]:
        """The polygons that draw shape ``s`` (an ellipse sampled at 64 points, a point as one point)."""
        parts = [self.part(k) for k in np.flatnonzero(self.owner == s)]
        if self.kinds[s] != "ellipse":
            return parts
        t = np.linspace(0, 2 * np.pi, _ELLIPSE_SEGMENTS, endpoint=False)[:, None]
        c, u, v = parts[0]
        return [c + (u - c) * np.cos(t) + (v - c) * np.sin(t)]

    def rasterize(self, canvas: np.ndarray, *, color_by: str = "label", thickness: int = -1,
                  point_radius: int = 2, channels: Sequence[float] | None = None) -> np.ndarray:
        """Draw every shape into ``canvas`` (H, W[, C]) in order and return it.

        The value drawn is the shape's label (a list label gives one value per channel), its tag,
        or its serial number 1, 2, ... (``color_by``); ``channels`` overrides it with fixed values.
        ``thickness`` -1 fills, > 0 draws outlines. Points are discs of ``point_radius``.
        """
        for s in range(len(self)):
            color = self._draw_color(s, color_by, channels)
            polys = [_to_drawing(p) for p in self.outlines(s)]
            if self.kinds[s] == "point":
                center = tuple(int(v) for v in polys[0][0])
                cv2.circle(canvas, center, point_radius << _SHIFT, color, thickness, cv2.LINE_8, _SHIFT)
            elif thickness < 0:
                cv2.fillPoly(canvas, polys, color, cv2.LINE_8, _SHIFT)
            else:
                cv2.polylines(canvas, polys, True, color, thickness, cv2.LINE_8, _SHIFT)
        return canvas

    def _draw_color(self, s: int, color_by: str, channels: Sequence[float] | None) -> tuple[float, ...]:
        if channels is not None:
            return tuple(channels)
        if color_by == "label":
            return self.colors[s]
        if color_by == "tag":
            return (0.0 if np.isnan(self.tags[s]) else float(self.tags[s]),) * 4
        if color_by == "serial":
            return (float(s + 1),) * 4
        raise PicPacValueError(f"color_by must be 'label', 'tag' or 'serial', got {color_by!r}")


def _to_drawing(points: np.ndarray) -> np.ndarray:
    """Continuous coordinates -> OpenCV's fixed-point pixel-centre coordinates.

    OpenCV puts pixel centres at integers and colours the pixel nearest to each edge, so a rect
    spanning [x0, x1) would also colour pixel x1. Nudging every vertex 1/16 px towards the part's
    centre (per axis) makes coverage half-open: exactly the pixels x0 .. x1-1.
    """
    nudge = _NUDGE * np.sign(points.mean(0) - points)
    return np.round((points - 0.5 + nudge) * (1 << _SHIFT)).astype(np.int32)


def _point(p: Any) -> tuple[float, float]:
    return float(p["x"]), float(p["y"])


def _parts(kind: str, geometry: Any) -> list[list[tuple[float, float]]]:
    """The point lists of one shape, in normalised coordinates."""
    if kind in ("rect", "ellipse"):
        x, y, w, h = (float(geometry[k]) for k in ("x", "y", "width", "height"))
        if kind == "rect":
            return [[(x, y), (x + w, y), (x + w, y + h), (x, y + h)]]
        cx, cy = x + w / 2, y + h / 2
        return [[(cx, cy), (cx + w / 2, cy), (cx, cy + h / 2)]]
    if kind == "polygon":
        return [[_point(p) for p in geometry["points"]]]
    if kind == "polygons":
        return [[_point(p) for p in polygon] for polygon in geometry["polygons"]]
    if kind == "point":
        return [[_point(geometry)]]
    raise ValueError(f"unknown shape type {kind!r}; use one of {', '.join(KINDS)}")


def _color(label: Any) -> tuple[float, ...]:
    """A label as a drawing colour: a number for every channel, or a list, one value per channel."""
    if isinstance(label, (list, tuple)):
        values = [float(v) for v in label] or [0.0]
        return tuple(values + [values[-1]] * (4 - len(values)))[:4]
    return (float(label),) * 4
