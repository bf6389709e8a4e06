"""What the device's batched warp needs of one sample's pending map, planned on the CPU (NumPy only).

The map (source continuous coordinates -> output) is inverted and reduced to the part of the source it reads
(a crop, with the margin bilinear sampling reads), with the CPU path's own shrinks before the warp: a box average
of ``pool`` x ``pool`` pixels where the CPU path decodes the JPEG at 1/pool, and INTER_AREA's boxes where it
shrinks a whole image by more than 2x before a warp, so that a shrink does not alias and the pixels stay close to
the CPU path's. The warp then samples bilinearly (box means for a shrinking slice; nearest for masks).
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
    """The side of the box average taken of the crop first (1: none): a JPEG decoded at 1/pool on the CPU path."""
    inverse: tuple[float, ...]
    """The 2x3 map from the output's continuous coordinates to the pooled crop's, row-major."""
    fill: float | None
    """The constant border's value; None: the border replicates the edge pixels."""
    source: tuple[int, int]
    """The source's (width, height)."""
    area: bool = False
    """Whether the map is an axis-aligned shrink that the CPU path makes by INTER_AREA (a slice, resized): the
    warp averages each output pixel's box then, exactly, instead of sampling bilinearly."""
    shrink: tuple | None = None
    """INTER_AREA's shrink of the pooled crop before a warp, as the CPU path shrinks the whole image: ``(fx, fy,
    ox, oy, nx, ny)``, boxes of fx x fy pooled pixels, the first at (ox, oy), nx x ny of them; None: none."""


def plan(matrix: np.ndarray | None, source: tuple[int, int], size: tuple[int, int], border: tuple[int, float],
         nearest: bool = False, reduction: int = 1) -> Geometry | None:
    """The warp of a ``source`` = (width, height) array by ``matrix`` (None: none) onto ``size`` = (width, height) with
    ``border`` (kind, fill); ``nearest`` for label masks (no averaging). ``reduction``: the scale 1/r at which the
    CPU path decodes this JPEG (``Sample.reduction``), emulated by boxes of r x r pixels. Then the CPU path's own
    resampling of those pixels (``sample.resample_plan``): a slice that shrinks is averaged box by box as
    INTER_AREA, one that does not reads the slice alone (cv2.resize clamps at its edges), and a warp that shrinks by
    more than 2x first shrinks the whole image by INTER_AREA's boxes, on the same grid. None where the device cannot
    follow the map: a border other than a constant number or replication, or a map that collapses the image."""
    kind, fill = border
    if kind not in BORDERS or kind == cv2.BORDER_CONSTANT and not isinstance(fill, (int, float)):
        return None
    r = 1 if nearest else reduction
    (a, b, tx), (c, d, ty) = (_IDENTITY if matrix is None else matrix).tolist()
    a, b, c, d = a * r, b * r, c * r, d * r  # the map of the pixels decoded at 1/r
    det = a * d - b * c
    if abs(det) < 1e-12:
        return None
    w, h = source
    wr, hr = -(-w // r), -(-h // r)  # libjpeg's 1/r decode: pixel j is the block [r j, r j + r)
    boxes, area, cut = (wr, hr), False, None
    if not nearest:
        cpu = resample_plan((hr, wr), np.array([[a, b, tx], [c, d, ty]]), size)
        area = cpu[0] == "slice" and cpu[2] == cv2.INTER_AREA
        if cpu[0] == "slice" and not area:  # cv2.resize of the slice alone: it clamps at the slice's edges
            cut, kind = cpu[1], cv2.BORDER_REPLICATE
        if cpu[0] == "warp" and cpu[1] is not None:
            boxes = cpu[1]
    fx, fy = wr / boxes[0], hr / boxes[1]
    ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
    itx, ity = -(ia * tx + ib * ty), -(ic * tx + id_ * ty)
    width, height = size
    corners = [(x, y) for x in (0, width) for y in (0, height)]
    if cut is not None:
        kx0, ky0, kx1, ky1 = cut
    else:
        kx0, kx1 = _span(min(ia * x + ib * y + itx for x, y in corners) / fx,
                         max(ia * x + ib * y + itx for x, y in corners) / fx, boxes[0])
        ky0, ky1 = _span(min(ic * x + id_ * y + ity for x, y in corners) / fy,
                         max(ic * x + id_ * y + ity for x, y in corners) / fy, boxes[1])
    x0, x1 = math.floor(kx0 * fx + 1e-9) * r, min(w, math.ceil(kx1 * fx - 1e-9) * r)
    y0, y1 = math.floor(ky0 * fy + 1e-9) * r, min(h, math.ceil(ky1 * fy - 1e-9) * r)
    shrink = None if boxes == (wr, hr) else (fx, fy, kx0 * fx - x0 / r, ky0 * fy - y0 / r, kx1 - kx0, ky1 - ky0)
    # output continuous -> the 1/r pixels' -> the boxes' (p / f) -> those of the crop's first box
    inverse = (ia / fx, ib / fx, itx / fx - kx0, ic / fy, id_ / fy, ity / fy - ky0)
    return Geometry((x0, y0, x1, y1), r, inverse, None if kind == cv2.BORDER_REPLICATE else
                    float(0 if nearest else fill), (w, h), area, shrink)


_IDENTITY = np.array([[1.0, 0, 0], [0, 1.0, 0]])


def _span(low: float, high: float, extent: int) -> tuple[int, int]:
    """The pixels [start, stop) of an ``extent``-long axis that a read of [low, high] needs: one pixel of margin
    each side for bilinear sampling, clipped to the axis and never empty."""
    start = min(max(0, math.floor(low) - 1), extent - 1)
    return start, max(min(extent, math.ceil(high) + 1), start + 1)


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
    source: str = ""
    """The database the sample comes from, and its ``record``: what an error names."""
    record: int = -1
