"""Dense training targets (image layer): PicPac's anchors.dense.*, keypoints.basic and box_feature.

Each transform reads the sample's vector shapes (already in output pixel coordinates: it runs
after the geometric transforms) and its size, and adds float32 arrays to
``sample.extra["dense"]``, which the stream stacks over the batch and appends to the batch tuple
after the task's arrays (see docs/augment.md). None of them reads, resamples or changes the image.

The grid has ``(height // downsize, width // downsize)`` cells; the sample's sides must be
multiples of ``downsize`` (a ``clip`` with ``round`` before makes them so). As in PicPac, the
anchor point of cell (row i, column j) is the pixel position ``(j * downsize, i * downsize)``
(the cell's top-left corner), and offsets are measured from it.

Anchor maps (``anchors.dense.box`` / ``.circle`` / ``.point``) follow PicPac's DenseAnchors:
every (cell, prior) gets the shape with the highest score there (the first one on ties; a score
must be above 0 to count). With that best score ``d``:

* ``d >= upper_th``: positive (anchor 1, weight 1), parameters regressed (params weight 1);
* ``lower_th <= d < upper_th``: ignored by the classifier (anchor 0, weight 0), parameters still
  regressed (params weight 1);
* otherwise (or no shape): negative (anchor 0, weight 1), params ``params_default``, weight 0.

Then every shape's own best (cell, prior), the first in row, column, prior order, is made
positive with that shape's parameters if its score is at least ``lower_th`` (later shapes win a
shared cell), so a small shape between anchors still gets one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import PicPacValueError
from .shapes import Shapes
from .transforms import Sample


def _shapes_of(sample: Sample, kind: str) -> Shapes | None:
    """The sample's vector shapes; None (no targets) for a sample without any annotation."""
    if sample.shapes is not None:
        return sample.shapes
    if sample._mask is not None:  # read without settling pending warps: this step must not resample
        raise PicPacValueError(f"record {sample.record}: {kind} needs vector shapes (annotate='json'), before any "
                               "rasterize step; this sample has a mask image instead")
    return None  # no annotation at all (ImageLoader, or after drop): nothing to make targets from


def _grid(sample: Sample, downsize: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The anchor x positions (columns) and y positions (rows) of the sample's grid, in pixels."""
    w, h = sample.size
    if w % downsize or h % downsize:
        raise PicPacValueError(f"record {sample.record}: {kind} needs sides that are multiples of downsize={downsize}, "
                               f"got {w}x{h}; add {{'type': 'clip', 'round': {downsize}}} before it")
    return np.arange(w // downsize) * float(downsize), np.arange(h // downsize) * float(downsize)


def _store(sample: Sample, kind: str, arrays: dict[str, np.ndarray]) -> Sample:
    """Add ``arrays`` to sample.extra["dense"] (a new dict: extras may be shared between copies)."""
    dense = dict(sample.extra.get("dense", {}))
    for name in arrays:
        if name in dense:
            raise PicPacValueError(f"record {sample.record}: {kind} would replace the dense target {name!r} of an "
                                   "earlier step; give one of them a 'prefix'")
    dense.update((name, np.ascontiguousarray(a, np.float32)) for name, a in arrays.items())
    sample.extra = {**sample.extra, "dense": dense}
    return sample


def _boxes(shapes: Shapes, points: bool) -> tuple[np.ndarray, np.ndarray]:
    """(S, 4) boxes x1, y1, x2, y2 and the shape indices of the point shapes (``points``) or the others."""
    keep = np.array([(kind == "point") == points for kind in shapes.kinds], bool)
    return shapes.boxes()[keep].reshape(-1, 4), np.flatnonzero(keep)


def _check_thresholds(lower_th: float, upper_th: float) -> None:
    if lower_th > upper_th:
        raise PicPacValueError(f"lower_th {lower_th} is above upper_th {upper_th}")


@dataclass(frozen=True)
class _DenseAnchors:
    """What anchors.dense.box / .circle / .point share; subclasses say what a shape is and how it scores."""

    downsize: int = 1
    upper_th: float = 0.8
    lower_th: float = 0.4
    params_default: float = 0.0
    prefix: str = ""

    kind: ClassVar[str] = ""
    params_count: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if self.downsize < 1:
            raise PicPacValueError(f"{self.kind}: downsize must be at least 1, got {self.downsize}")
        _check_thresholds(self.lower_th, self.upper_th)

    @property
    def priors_count(self) -> int:
        return 1

    def objects(self, shapes: Shapes) -> np.ndarray:
        """(n, D) the shapes this anchor type matches, each as a row of numbers (centre first)."""
        raise NotImplementedError

    def score(self, obj: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """(rows, columns, priors) how well each anchor matches ``obj``: 1 at best, <= 0 no match."""
        raise NotImplementedError

    def encode(self, objs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(m, K) the regression parameters of ``objs`` (m, D) seen from anchor points (x, y)."""
        raise NotImplementedError

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        shapes = _shapes_of(sample, self.kind)
        if shapes is None:
            return sample
        xs, ys = _grid(sample, self.downsize, self.kind)
        shape = (len(ys), len(xs), self.priors_count)
        objs = self.objects(shapes)
        best = np.zeros(shape)                 # best score so far; only scores above 0 count
        owner = np.full(shape, -1, np.int64)   # the shape it belongs to
        forced: list[tuple[int, int]] = []     # (flat cell, shape): each shape's own best anchor
        for i, obj in enumerate(objs):
            s = self.score(obj, xs, ys)
            better = s > best
            best[better], owner[better] = s[better], i
            top = int(np.argmax(s))
            if s.flat[top] > 0 and s.flat[top] >= self.lower_th:
                forced.append((top, i))
        anchors = np.zeros(shape)
        weights = np.ones(shape)
        params = np.full(shape + (self.params_count,), float(self.params_default))
        params_weights = np.zeros(shape)
        matched = (owner >= 0) & (best >= self.lower_th)
        positive = matched & (best >= self.upper_th)
        anchors[positive] = 1
        weights[matched & ~positive] = 0
        px = np.broadcast_to(xs[None, :, None], shape)
        py = np.broadcast_to(ys[:, None, None], shape)
        params[matched] = self.encode(objs[owner[matched]], px[matched], py[matched])
        params_weights[matched] = 1
        for top, i in forced:
            cell = np.unravel_index(top, shape)
            anchors[cell] = weights[cell] = params_weights[cell] = 1
            params[cell] = self.encode(objs[i:i + 1], px[cell][None], py[cell][None])[0]
        p = self.prefix
        return _store(sample, self.kind, {f"{p}anchors": anchors, f"{p}anchor_weights": weights,
                                          f"{p}params": params, f"{p}params_weights": params_weights})


@dataclass(frozen=True)
class DenseBoxAnchors(_DenseAnchors):
    """PicPac's anchors.dense.box: every non-point shape as its bounding box (centre cx, cy, size w, h).

    Without ``priors`` (one anchor per cell) the score at anchor point p is PicPac's
    ``min(1 - 2|px - cx| / w, 1 - 2|py - cy| / h)``: 1 at the centre, 0 on the box's edge. With
    ``priors`` ((w, h) pairs, one anchor each) it is the IoU of the prior's box centred at p with
    the shape's box. Parameters (K = 4): ``cx - px, cy - py, w, h`` in pixels (not divided by the
    prior, as in PicPac). Shapes with no width or height are skipped.
    """

    priors: tuple[tuple[float, float], ...] = ()

    kind: ClassVar[str] = "anchors.dense.box"
    params_count: ClassVar[int] = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        for prior in self.priors:
            if len(prior) != 2 or min(prior) <= 0:
                raise PicPacValueError(f"{self.kind}: each prior must be a (width, height) pair above 0, got {prior!r}")

    @property
    def priors_count(self) -> int:
        return max(1, len(self.priors))

    def objects(self, shapes: Shapes) -> np.ndarray:
        boxes, _ = _boxes(shapes, points=False)
        out = np.hstack([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]])
        return out[(out[:, 2] > 0) & (out[:, 3] > 0)]

    def score(self, obj: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        cx, cy, w, h = obj
        if not self.priors:
            across = 1 - 2 * np.abs(xs - cx) / w
            down = 1 - 2 * np.abs(ys - cy) / h
            return np.minimum(across[None, :], down[:, None])[:, :, None]
        pw, ph = np.array(self.priors, np.float64).T
        # overlap of [p - prior/2, p + prior/2] with [c - size/2, c + size/2] along each axis: (cells, priors)
        def overlap(anchors: np.ndarray, prior: np.ndarray, centre: float, size: float) -> np.ndarray:
            high = np.minimum(anchors[:, None] + prior / 2, centre + size / 2)
            return np.clip(high - np.maximum(anchors[:, None] - prior / 2, centre - size / 2), 0, None)
        inter = overlap(ys, ph, cy, h)[:, None, :] * overlap(xs, pw, cx, w)[None, :, :]
        return inter / (pw * ph + w * h - inter)

    def encode(self, objs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.stack([objs[:, 0] - x, objs[:, 1] - y, objs[:, 2], objs[:, 3]], axis=-1)


@dataclass(frozen=True)
class DenseCircleAnchors(_DenseAnchors):
    """PicPac's anchors.dense.circle: every non-point shape as a circle around its bounding box's centre.

    Radius ``r = sqrt(w * h) / 2`` (w, h: the box's size); score ``(r - |p - c|) / r``: 1 at the
    centre, 0 on the circle. Parameters (K = 3): ``cx - px, cy - py, r``. One anchor per cell.
    """

    kind: ClassVar[str] = "anchors.dense.circle"
    params_count: ClassVar[int] = 3

    def objects(self, shapes: Shapes) -> np.ndarray:
        boxes, _ = _boxes(shapes, points=False)
        size = boxes[:, 2:] - boxes[:, :2]
        out = np.hstack([(boxes[:, :2] + boxes[:, 2:]) / 2, np.sqrt(np.clip(size[:, :1] * size[:, 1:], 0, None)) / 2])
        return out[out[:, 2] > 0]

    def score(self, obj: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        cx, cy, r = obj
        return ((r - np.hypot(xs[None, :] - cx, ys[:, None] - cy)) / r)[:, :, None]

    def encode(self, objs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.stack([objs[:, 0] - x, objs[:, 1] - y, objs[:, 2]], axis=-1)


@dataclass(frozen=True)
class DensePointAnchors(_DenseAnchors):
    """PicPac's anchors.dense.point: every point shape; score ``exp(-|p - q|)`` (distance in pixels).

    A cell within r pixels of the point scores at least ``exp(-r)``: ``lower_th = upper_th =
    exp(-r)`` makes every anchor within r positive. Parameters (K = 2): ``qx - px, qy - py``. One
    anchor per cell.
    """

    kind: ClassVar[str] = "anchors.dense.point"
    params_count: ClassVar[int] = 2

    def objects(self, shapes: Shapes) -> np.ndarray:
        boxes, _ = _boxes(shapes, points=True)
        return boxes[:, :2]

    def score(self, obj: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        x, y = obj
        return np.exp(-np.hypot(xs[None, :] - x, ys[:, None] - y))[:, :, None]

    def encode(self, objs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.stack([objs[:, 0] - x, objs[:, 1] - y], axis=-1)


@dataclass(frozen=True)
class BasicKeypoints:
    """PicPac's keypoints.basic: per class, the cells near a keypoint and their offsets to it.

    Adds ``keypoints`` (rows, columns, classes): 1 where the nearest point shape of that class
    (label 1 .. classes goes to channel label - 1) is at most ``radius`` pixels from the cell's
    anchor point, else 0; and ``offsets`` (rows, columns, classes, 2): ``qx - px, qy - py`` to that
    point there, 0 elsewhere. ``radius`` 0 means one grid step (``downsize``). Other shapes are
    ignored; a point whose label is not a class is an error.
    """

    downsize: int = 1
    classes: int = 1
    radius: float = 0.0
    prefix: str = ""

    kind: ClassVar[str] = "keypoints.basic"

    def __post_init__(self) -> None:
        if self.downsize < 1 or self.classes < 1 or self.radius < 0:
            raise PicPacValueError(f"{self.kind}: downsize and classes must be at least 1 and radius at least 0, got "
                                   f"downsize={self.downsize}, classes={self.classes}, radius={self.radius}")

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        shapes = _shapes_of(sample, self.kind)
        if shapes is None:
            return sample
        xs, ys = _grid(sample, self.downsize, self.kind)
        radius = self.radius or float(self.downsize)
        boxes, index = _boxes(shapes, points=True)
        channels = shapes.labels[index] - 1
        bad = (channels != np.round(channels)) | (channels < 0) | (channels >= self.classes)
        if bad.any():
            raise PicPacValueError(f"record {sample.record}: {self.kind} with classes={self.classes} needs point "
                                   f"labels 1 .. {self.classes}, got {shapes.labels[index][bad][0]:g}")
        shape = (len(ys), len(xs), self.classes)
        mask = np.zeros(shape)
        offsets = np.zeros(shape + (2,))
        nearest = np.full(shape, np.inf)
        for (x, y), c in zip(boxes[:, :2], channels.astype(np.int64)):
            dx, dy = x - xs[None, :], y - ys[:, None]
            d = np.hypot(dx, dy)
            closer = d < nearest[:, :, c]   # the first of equally near points wins
            nearest[:, :, c][closer] = d[closer]
            offsets[:, :, c, 0][closer] = np.broadcast_to(dx, d.shape)[closer]
            offsets[:, :, c, 1][closer] = np.broadcast_to(dy, d.shape)[closer]
        mask[nearest <= radius] = 1
        offsets[nearest > radius] = 0
        return _store(sample, self.kind, {f"{self.prefix}keypoints": mask, f"{self.prefix}offsets": offsets})


@dataclass(frozen=True)
class BoxFeature:
    """PicPac's box_feature: one row ``label, tag, x1, y1, x2, y2`` per non-point shape.

    Boxes are clipped to the image [0, width] x [0, height] (continuous coordinates) and kept when
    their clipped area is at least ``min_area``; a missing tag is 0. ``max_boxes`` 0 gives exactly
    the kept rows, (n, 6) (the stream pads a batch's tables to the longest); ``max_boxes`` N gives
    (N, 6): the first N rows, then padding rows with label -1 (and zeros).
    """

    min_area: float = 1.0
    max_boxes: int = 0
    prefix: str = ""

    kind: ClassVar[str] = "box_feature"

    def __post_init__(self) -> None:
        if self.max_boxes < 0:
            raise PicPacValueError(f"{self.kind}: max_boxes must be at least 0, got {self.max_boxes}")

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        shapes = _shapes_of(sample, self.kind)
        if shapes is None:
            return sample
        w, h = sample.size
        boxes, index = _boxes(shapes, points=False)
        boxes = np.clip(boxes, 0, (w, h, w, h))
        keep = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) >= self.min_area
        tags = np.nan_to_num(shapes.tags[index], nan=0.0)
        rows = np.hstack([shapes.labels[index, None], tags[:, None], boxes])[keep]
        if self.max_boxes:
            table = np.zeros((self.max_boxes, 6))
            table[:, 0] = -1
            table[:min(len(rows), self.max_boxes)] = rows[:self.max_boxes]
            rows = table
        return _store(sample, self.kind, {f"{self.prefix}box_feature": rows.reshape(-1, 6)})
