"""Annotations drawn over a picture (OpenCV's BGR), one way for every tool that shows them (`picpac dump`, the
explorer's record page and augmentation preview): a colour per label, masks blended in at half strength, shapes
outlined with their class as a caption, points as dots, detection boxes as rectangles."""
from __future__ import annotations

import math

import cv2
import numpy as np

from ..image.shapes import Shapes

PALETTE = [(0, 0, 255), (0, 200, 0), (255, 0, 0), (0, 200, 255), (255, 0, 255), (255, 255, 0), (0, 128, 255),
           (128, 0, 255), (255, 128, 0), (0, 255, 128)]
"""BGR colours by label (modulo their number)."""
WHITE = (255, 255, 255)
"""The colour of a label that is no number (NaN, infinite)."""


def colour(label: float) -> tuple[int, int, int]:
    """The BGR colour of a label."""
    return PALETTE[int(abs(label)) % len(PALETTE)] if math.isfinite(label) else WHITE


def class_name(value: float, classes: list[str]) -> str:
    """``value`` as text, with its name in ``classes`` where it has one ("3 dog")."""
    named = classes[int(value)] if math.isfinite(value) and value == int(value) and 0 <= value < len(classes) else ""
    return f"{value:g} {named}" if named else f"{value:g}"


def caption(canvas: np.ndarray, text: str, at: tuple[int, int], bgr: tuple[float, ...], scale: int = 1) -> None:
    """``text`` with its baseline at ``at`` (kept inside the top left), in ``bgr`` on a black outline; ``scale``
    1 suits pictures of a few hundred pixels."""
    x, y = max(0, at[0]), max(10 * scale, at[1])
    size = 0.35 * scale
    text = text.encode("ascii", "backslashreplace").decode()  # OpenCV's fonts are ASCII: others escaped, never an error
    cv2.putText(canvas, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, size, (0, 0, 0), 2 * scale, cv2.LINE_AA)
    cv2.putText(canvas, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, size, bgr[:3], scale, cv2.LINE_AA)


def blend_mask(canvas: np.ndarray, ids: np.ndarray) -> None:
    """Blend the class ids ``ids`` (H, W; 0: none) into ``canvas`` (H, W, 3), half and half with their colours."""
    ids = np.rint(ids).astype(np.int64)
    colours = np.array(PALETTE, np.float64)[ids % len(PALETTE)]
    on = ids != 0
    canvas[on] = np.rint((canvas[on] + colours[on]) / 2).astype(np.uint8)


def draw_shapes(canvas: np.ndarray, shapes: Shapes, classes: list[str], thickness: int = 1) -> None:
    """Outline each shape (points: dots) in its label's colour, captioned with its class (named by ``classes``)."""
    colours = [colour(label) + (0,) for label in shapes.labels.tolist()]
    Shapes(shapes.points, shapes.starts, shapes.owner, shapes.kinds, shapes.labels, colours, shapes.tags).rasterize(
        canvas, thickness=thickness, point_radius=2 * thickness)
    for s, (x1, y1, _, _) in enumerate(shapes.boxes()):
        caption(canvas, class_name(float(shapes.labels[s]), classes), (int(x1), int(y1) - 2 * thickness), colours[s],
                thickness)


def draw_boxes(canvas: np.ndarray, rows: np.ndarray) -> None:
    """Outline each box ``[label, x1, y1, x2, y2]`` (pixels, x2 and y2 past the box) in its label's colour."""
    for label, x1, y1, x2, y2 in rows.tolist():
        cv2.rectangle(canvas, (round(x1), round(y1)), (round(x2) - 1, round(y2) - 1), colour(label), 1)
