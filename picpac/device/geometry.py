"""What the device's batched warp needs of one sample's pending map, planned on the CPU (NumPy only).

The map (source continuous coordinates -> output) is inverted and reduced to the part of the source it reads
(a crop, with the margin bilinear sampling reads) and a box average of ``pool`` x ``pool`` pixels before the
warp where the map shrinks by 2x or more: the GPU's counterpart of decoding a JPEG at a reduced scale, so that
a shrink does not alias. The warp then samples the pooled crop bilinearly (or by nearest, for masks).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import cv2
import numpy as np

from ..image.sample import resample_plan

BORDERS = (cv2.BORDER_CONSTANT, cv2.BORDER_REPLICATE)
"""The borders the device warp follows; a sample with another border takes the CPU path."""


class Geometry(NamedTuple):
    """One sample's warp: what of the source it reads and how."""

    crop: tuple[int, int, int, int]
    """(x0, y0, x1, y1): the source pixels the map reads (with bilinear sampling's margin)."""
    pool: int
    """The side of the box average taken of the crop before the warp (1: none)."""
    inverse: tuple[float, ...]
    """The 2x3 map from the output's continuous coordinates to the pooled crop's, row-major."""
    fill: float | None
    """The constant border's value; None: the border replicates the edge pixels."""
    source: tuple[int, int]
    """The source's (width, height)."""
    area: bool = False
    """Whether the map is an axis-aligned shrink that the CPU path makes by INTER_AREA (a slice, resized): the
    warp averages each output pixel's box then, exactly, instead of sampling bilinearly."""


def plan(matrix: np.ndarray | None, source: tuple[int, int], size: tuple[int, int], border: tuple[int, float],
         nearest: bool = False) -> Geometry | None:
    """The warp of a ``source`` = (width, height) array by ``matrix`` (None: none) onto ``size`` = (width, height)
    with ``border`` (kind, fill); ``nearest`` for label masks (no box average). None where the device cannot
    follow it: a border other than a constant number or replication, or a map that collapses the image."""
    kind, fill = border
    if kind not in BORDERS or kind == cv2.BORDER_CONSTANT and not isinstance(fill, (int, float)):
        return None
    if matrix is None:
        matrix = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    (a, b, tx), (c, d, ty) = matrix.tolist()
    det = a * d - b * c
    if abs(det) < 1e-12:
        return None
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    itx, ity = -(ia * tx + ib * ty), -(ic * tx + id_ * ty)
    width, height = size
    corners = [(x, y) for x in (0, width) for y in (0, height)]
    us = [ia * x + ib * y + itx for x, y in corners]
    vs = [ic * x + id_ * y + ity for x, y in corners]
    squares = a * a + b * b + c * c + d * d
    largest = math.sqrt((squares + math.sqrt(max(squares * squares - 4 * det * det, 0.0))) / 2)
    pool = 1 if nearest or largest > 0.5 + 1e-9 else int((1 + 1e-9) / largest)
    plain = resample_plan((source[1], source[0]), matrix, size, cv2.INTER_LINEAR)
    area = not nearest and plain[0] == "slice" and plain[2] == cv2.INTER_AREA
    w, h = source
    x0, x1 = _span(min(us), max(us), w, pool)
    y0, y1 = _span(min(vs), max(vs), h, pool)
    # output continuous -> source continuous -> the pooled crop's: (s - x0) / pool
    inverse = (ia / pool, ib / pool, (itx - x0) / pool, ic / pool, id_ / pool, (ity - y0) / pool)
    return Geometry((x0, y0, x1, y1), pool, inverse,
                    None if kind == cv2.BORDER_REPLICATE else float(0 if nearest else fill), (w, h), area)


def _span(low: float, high: float, extent: int, pool: int) -> tuple[int, int]:
    """The pixels [start, stop) of an ``extent``-long axis that a read of [low, high] needs: one pooled pixel of
    margin each side for bilinear sampling, the start on the pooling grid (as a reduced JPEG decode's blocks),
    clipped to the axis and never empty."""
    start = max(0, math.floor(low) - pool)
    start = min(start - start % pool, extent - 1)
    stop = min(extent, math.ceil(high) + pool)
    return start, max(stop, start + 1)


def thetas(geometries: list[Geometry], crops: list[tuple[int, int]], size: tuple[int, int],
           canvas: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(theta, bounds)`` for ``torch.nn.functional.affine_grid`` (align_corners=False) over a ``canvas`` = (width,
    height) holding each sample's pooled crop (of (width, height) ``crops``) at its top left: theta (n, 2, 3) maps
    the output's normalised coordinates to the canvas's; bounds (n, 4) are the normalised x and y ranges of each
    crop's pixel centres, where replication clamps the grid (NaN: no clamp)."""
    width, height = size
    cw, ch = canvas
    m = np.array([g.inverse for g in geometries], np.float64).reshape(-1, 2, 3)
    theta = np.empty_like(m)
    # o = (n + 1) * size / 2 in output pixels; canvas normalised = 2 p / canvas - 1
    for row, extent in ((0, cw), (1, ch)):
        theta[:, row, 0] = m[:, row, 0] * width / extent
        theta[:, row, 1] = m[:, row, 1] * height / extent
        theta[:, row, 2] = (m[:, row, 0] * width + m[:, row, 1] * height + 2 * m[:, row, 2]) / extent - 1
    pw, ph = np.array(crops, np.float64).reshape(-1, 2).T
    bounds = np.stack([np.full_like(pw, 1 / cw - 1), (2 * pw - 1) / cw - 1, np.full_like(ph, 1 / ch - 1),
                       (2 * ph - 1) / ch - 1], 1)
    bounds[[g.fill is not None for g in geometries]] = np.nan
    return theta.astype(np.float32), bounds.astype(np.float32)


class Planned(NamedTuple):
    """One sample as a planning thread leaves it for the device stage."""

    jpeg: object | None
    """An upright JPEG's bytes for the device's decoder; None: ``pixels`` or ``done`` hold the image."""
    pixels: np.ndarray | None
    """(H, W[, C]) uint8 pixels decoded on the CPU, mapped by ``geometry``."""
    geometry: Geometry | None
    """The image's warp (of the JPEG's whole image, or of ``pixels``)."""
    done: np.ndarray | None
    """The sample's output made on the CPU (a step read its pixels): copied as it is."""
    mask: np.ndarray | None
    """(H, W[, C]) label mask (segmentation), mapped by ``mask_geometry`` (nearest)."""
    mask_geometry: Geometry | None
    size: tuple[int, int]
    """The output's (width, height)."""
    colour: tuple = ()
    """The colour steps' draws, applied after the warp (``photometric.Colour`` entries)."""
