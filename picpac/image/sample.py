"""The sample that transforms act on (image layer): pixels, annotations and a pending affine map.

Geometric transforms only compose the map (:meth:`Sample.warp`); the pixels are resampled once, when they are
read. :func:`resample_plan` says how (a slice, a resize and a flip, or one warp), and picpac's kernels carry it out
here and on the stream's fused C path (``picpac.image.decoding.fused_sample``): the same bytes from one plan.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from ..errors import SampleError
from . import kernels
from .decoding import MAX_PIXELS, MAX_SIDE, REDUCTIONS, Region
from .shapes import Shapes


class Sample:
    """What flows through transforms: image (H, W[, C]), optional mask and shapes, label, record.

    Geometric transforms call :meth:`warp`; warps compose into one pending affine map, applied to
    the image (bilinear, :func:`resample`) and mask (nearest, ``kernels.nearest``) only when ``image`` or
    ``mask`` is read, so a chain of geometric steps resamples the pixels once and shapes stay exact.

    The image itself may be deferred: ``Sample(None, ..., size=(w, h), decoder=d)`` decodes only
    when the pixels are read, by ``d(reduction, region)`` at 1/1, 1/2 or 1/4 scale: the smallest
    decode that still has at least the resolution the pending map needs. With ``regions=True``,
    ``region`` is the part of that decode the map reads (else None); ``d`` returns either that
    region or the whole image.

    The size the pending map makes is bounded before any pixel is allocated (when the pixels are read, or the
    map is handed to the fused path or the device stage): sides of at most ``decoding.MAX_SIDE`` and at most
    ``max_pixels`` pixels (None or 0: sides only), else a SampleError naming the record. Sizes of the chain's
    steps that are never made are not bounded.
    """

    __slots__ = ("_image", "_mask", "shapes", "label", "record", "extra", "_matrix", "_size", "_border",
                 "_decoder", "_regions", "_source_size", "max_pixels")

    def __init__(self, image: np.ndarray | None, label: float, record: int, *, mask: np.ndarray | None = None,
                 shapes: Shapes | None = None, extra: dict[str, Any] | None = None,
                 size: tuple[int, int] | None = None, decoder: Callable[[int, Region | None], np.ndarray | None] | None = None,
                 regions: bool = False, max_pixels: int | None = MAX_PIXELS):
        self._image, self._mask, self.shapes = image, mask, shapes
        self.label, self.record, self.extra = label, record, {} if extra is None else extra
        self.max_pixels = max_pixels
        self._matrix: np.ndarray | None = None
        self._size = (image.shape[1], image.shape[0]) if image is not None else size
        self._source_size, self._decoder, self._regions = self._size, decoder, regions
        self._border = (cv2.BORDER_CONSTANT, 0)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the sample as it stands (pending warps included)."""
        return self._size

    def warp(self, matrix: np.ndarray, size: tuple[int, int], border: int = cv2.BORDER_CONSTANT,
             fill: float = 0) -> None:
        """Map the sample by the 2x3 affine ``matrix`` (continuous pixel coordinates) onto ``size``.

        ``border`` / ``fill`` say what fills pixels that come from outside the source (for the
        whole pending chain: one border for all of it). A warp that reads only inside the sample as
        it stands (a crop within a padded canvas, a flip) keeps the border of the pending chain, so
        ``Pad(fill=...)`` or a reflecting pad followed by a crop or flip keeps its border; any other
        warp's border replaces it.
        """
        matrix = np.asarray(matrix, np.float64)
        if self.shapes is not None:
            self.shapes.transform(matrix)
        if self._matrix is None or not _reads_inside(matrix, size, self._size):
            self._border = (border, fill)
        self._matrix = matrix if self._matrix is None else _compose(matrix, self._matrix)
        self._size = (int(size[0]), int(size[1]))

    def _bounded(self) -> None:
        """SampleError when the size the pending map makes is past the bounds (the class docstring)."""
        width, height = self._size
        if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE) or \
                (self.max_pixels and width * height > self.max_pixels):
            raise SampleError(self.extra.get("source", "sample"), self.record,
                              f"would become {width}x{height} ({width * height:,} pixels) by its geometry: an image "
                              f"may have sides of 1 to {MAX_SIDE} pixels and at most max_pixels={self.max_pixels or 0:,} "
                              "pixels (an extreme aspect ratio? skip_errors=True skips such records)")

    @property
    def image(self) -> np.ndarray:
        if self._matrix is not None:
            self._bounded()
        if self._image is None:
            self._image, image_matrix = self._decode()
        else:
            image_matrix = self._matrix
        if self._matrix is not None:
            self._image = resample(self._image, image_matrix, self._size, *self._border)
            if self._mask is not None:
                self._mask = kernels.nearest(self._mask, self._matrix, self._size)
            self._matrix = None
        return self._image

    @image.setter
    def image(self, value: np.ndarray) -> None:
        self.image  # settle pending warps first: the mask must follow them
        self._image = value
        self._size = (value.shape[1], value.shape[0])

    @property
    def mask(self) -> np.ndarray | None:
        self.image
        return self._mask

    @mask.setter
    def mask(self, value: np.ndarray | None) -> None:
        self.image
        self._mask = value

    def _decode(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Decode the deferred image at the largest reduction the pending map allows, and only the
        region the map reads; the map for the pixels decoded."""
        reduction = self._reduction()
        width, height = self._source_size
        for r in (reduction, 1) if reduction > 1 else (1,):
            region = self._region(r) if self._regions else None
            try:
                pixels = self._decoder(r, region)
            except MemoryError:
                raise SampleError(self.extra.get("source", "sample"), self.record,
                                  "cannot be decoded: not enough memory for its image") from None
            if pixels is None:
                raise SampleError(self.extra.get("source", "sample"), self.record, "cannot decode its image")
            h, w = pixels.shape[:2]
            if region is not None and (w, h) == region[2:]:
                return pixels, self._source_map(r, *region[:2])
            if abs(w - width / r) < 1 and abs(h - height / r) < 1:
                return pixels, self._source_map(r, 0, 0)
        raise SampleError(self.extra.get("source", "sample"), self.record,
                          f"decodes to {w}x{h}, but its header says {width}x{height}")

    @property
    def deferred(self) -> bool:
        """Whether the image is a JPEG not decoded yet: no step has read its pixels."""
        return self._image is None

    @property
    def source_size(self) -> tuple[int, int]:
        """(width, height) of the pixels the pending map starts from (a deferred JPEG's, from its header)."""
        return self._source_size if self._image is None else (self._image.shape[1], self._image.shape[0])

    @property
    def reduction(self) -> int:
        """The scale 1/r at which :attr:`image` would decode a deferred JPEG (1 once the pixels are read)."""
        return self._reduction() if self._image is None else 1

    def pending(self) -> tuple[np.ndarray | None, tuple[int, int], tuple[int, float]]:
        """``(matrix, size, border)``: the map not applied yet (None: none) from the source's continuous coordinates
        onto ``size`` = (width, height), and its border (kind, fill); for a resampler elsewhere (the device stage)."""
        if self._matrix is not None:
            self._bounded()
        return self._matrix, self._size, self._border

    def source(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(pixels, matrix)``: the pixels the pending map starts from, a deferred JPEG decoded as :attr:`image`
        decodes it (its region, at a reduced scale), and the map for those pixels; nothing is resampled and the
        sample is left as it was (the mask's map is :meth:`pending`'s)."""
        return self._decode() if self._image is None else (self._image, self._matrix)

    @property
    def raw_mask(self) -> np.ndarray | None:
        """The mask as it stands, before the pending map (the mask at :attr:`mask` is resampled)."""
        return self._mask

    def fused_plan(self) -> tuple[int, Region, tuple] | None:
        """``(reduction, region, geometry)`` for ``decoding.fused_sample`` while the image is a deferred, upright
        JPEG without a mask: the decode :attr:`image` would try first (the region the pending map reads, else
        the whole image at the same scale) and its map as :func:`fused_geometry`. None where the fused C path
        does not follow the Python path (the pixels were read already, or a border other than a constant)."""
        if self._image is not None or self._mask is not None or not self._regions:
            return None
        if self._matrix is not None:
            self._bounded()
        reduction = self._reduction()
        region = None if self._matrix is None else self._region(reduction)
        if region is None:
            width, height = self._source_size
            region = (0, 0, -(-width // reduction), -(-height // reduction))
        if self._matrix is None:
            return reduction, region, (0,) * 12
        plan = resample_plan((region[3], region[2]), self._source_map(reduction, *region[:2]), self._size)
        geometry = fused_geometry(plan, self._size, self._border)
        return None if geometry is None else (reduction, region, geometry)

    def _reduction(self) -> int:
        """The largest of REDUCTIONS that keeps at least the resolution the pending map needs."""
        if self._matrix is None:
            return 1
        (a, b, _), (c, d, _) = self._matrix.tolist()
        squares, det = a * a + b * b + c * c + d * d, a * d - b * c
        # the largest singular value of [[a, b], [c, d]]: output pixels per source pixel
        largest = math.sqrt((squares + math.sqrt(max(squares * squares - 4 * det * det, 0.0))) / 2)
        return next(r for r in REDUCTIONS if largest * r <= 1 + 1e-9 or r == 1)

    def _source_map(self, r: int, left: int, top: int) -> np.ndarray | None:
        """The pending map of pixels decoded at 1/``r`` from (left, top) of that scale."""
        if (r, left, top) == (1, 0, 0):
            return self._matrix
        # libjpeg's 1/r decode makes pixel j of block [r j, r j + r): exactly r, even where the last
        # block sticks out of the image (a width of ceil(W / r))
        to_source = np.array([[r, 0, r * left], [0, r, r * top]], np.float64)
        return _compose(self._matrix if self._matrix is not None else _IDENTITY, to_source)

    def _region(self, reduction: int) -> Region | None:
        """The part of the 1/``reduction`` decode that the pending map reads, when it is axis-aligned.

        Edges inside the image get a margin of one pixel (all that bilinear reads), edges outside
        are clipped to it, so a constant or replicated border behaves as on the whole image; with
        another border, a map that reads outside the image gets no region. A map that shrinks by
        more than 2x outside a plain slice is left alone: resample pre-shrinks the whole array, and
        its grid would move with the region.
        """
        if self._matrix is None:
            return None
        (a, b, _), (c, d, _) = self._matrix.tolist()
        if b or c or not a or not d:
            return None
        width, height = self._source_size
        full = (-(-width // reduction), -(-height // reduction))
        u0, v0, u1, v1 = window = tuple(v / reduction for v in _axis_window(self._matrix, self._size))
        inside = u0 >= -1e-6 and v0 >= -1e-6 and u1 <= full[0] + 1e-6 and v1 <= full[1] + 1e-6
        if not inside and self._border[0] not in (cv2.BORDER_CONSTANT, cv2.BORDER_REPLICATE):
            return None  # a reflecting or wrapping border reads pixels far from the window
        sliced = _slice_window(window, full) is not None
        if not sliced and min(abs(a), abs(d)) * reduction < 0.5:
            return None
        margin = 0 if sliced else 1
        x0, y0 = max(0, math.floor(u0 + 1e-6) - margin), max(0, math.floor(v0 + 1e-6) - margin)
        x1, y1 = min(full[0], math.ceil(u1 - 1e-6) + margin), min(full[1], math.ceil(v1 - 1e-6) + margin)
        if x1 <= x0 or y1 <= y0:
            return None
        return x0, y0, x1 - x0, y1 - y0

    def copy(self) -> Sample:
        """An independent sample (arrays are shared: transforms replace arrays, never write into them)."""
        out = Sample(self.image, self.label, self.record, mask=self._mask,
                     shapes=None if self.shapes is None else self.shapes.copy(), extra=dict(self.extra),
                     max_pixels=self.max_pixels)
        return out


_IDENTITY = np.array([[1.0, 0, 0], [0, 1.0, 0]])


def _reads_inside(matrix: np.ndarray, out: tuple[int, int], source: tuple[int, int]) -> bool:
    """Whether the affine ``matrix`` onto an ``out``-sized canvas reads only from ``[0, w] x [0, h]`` of ``source``."""
    (a, b, tx), (c, d, ty) = matrix.tolist()
    det = a * d - b * c
    if abs(det) < 1e-12:
        return False
    w, h, eps = source[0], source[1], 1e-6
    for x, y in ((0, 0), (out[0], 0), (0, out[1]), (out[0], out[1])):
        x, y = x - tx, y - ty
        u, v = (d * x - b * y) / det, (a * y - c * x) / det
        if not (-eps <= u <= w + eps and -eps <= v <= h + eps):
            return False
    return True


def _compose(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """The 2x3 affine map ``outer(inner(x))``."""
    out = np.empty((2, 3))
    np.matmul(outer[:, :2], inner[:, :2], out=out[:, :2])  # (into place: the same products as a new array's)
    out[:, 2] = outer[:, :2] @ inner[:, 2] + outer[:, 2]
    return out


def _axis_window(matrix: np.ndarray, size: tuple[int, int]) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the source window an axis-aligned ``matrix`` maps onto a ``size`` canvas."""
    (a, _, tx), (_, d, ty) = matrix.tolist()
    xs, ys = sorted((-tx / a, (size[0] - tx) / a)), sorted((-ty / d, (size[1] - ty) / d))
    return xs[0], ys[0], xs[1], ys[1]


def _slice_window(window: tuple[float, float, float, float], size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """``window`` as integers when it is integer-aligned and inside a ``size`` = (w, h) array (a plain slice)."""
    u0, v0, u1, v1 = window  # (spelt out: this runs twice per sample on the fused path's planning)
    x0, y0, x1, y1 = round(u0), round(v0), round(u1), round(v1)
    if abs(u0 - x0) < 1e-6 and abs(v0 - y0) < 1e-6 and abs(u1 - x1) < 1e-6 and abs(v1 - y1) < 1e-6 and \
            x0 >= 0 and y0 >= 0 and x1 <= size[0] and y1 <= size[1]:
        return x0, y0, x1, y1
    return None


Plan = tuple
"""How :func:`resample` maps an image: ``("slice", (x0, y0, x1, y1), resize, flip)`` (a slice, then a resize with
``resize`` (cv2.INTER_LINEAR or INTER_AREA) when not None and a flip with code ``flip`` when not None) or
``("warp", shrink, m)`` (an INTER_AREA resize to ``shrink`` = (w, h) when not None, then a bilinear warp by ``m``, in
pixel indices as cv2.warpAffine takes it)."""


def resample_plan(shape: tuple[int, ...], matrix: np.ndarray, size: tuple[int, int]) -> Plan:
    """How an image of ``shape`` is mapped by ``matrix`` (continuous coordinates) onto ``size`` = (width, height).

    An axis-aligned map of an integer-aligned window inside the image (crops, scales, flips) is a
    slice, a resize (INTER_AREA when shrinking: no aliasing) and a flip; anything else is one
    bilinear warp, after an INTER_AREA pre-shrink when the map shrinks by more than 2x.
    """
    (a, b, _), (c, d, _) = matrix.tolist()
    width, height = size
    h, w = shape[:2]
    if b == 0 and c == 0 and a and d:  # axis-aligned, maybe mirrored
        cut = _slice_window(_axis_window(matrix, size), (w, h))
        if cut is not None:
            x0, y0, x1, y1 = cut
            resize = None
            if (x1 - x0, y1 - y0) != size:
                resize = cv2.INTER_AREA if width * height < (x1 - x0) * (y1 - y0) else cv2.INTER_LINEAR
            flip = None if a > 0 and d > 0 else -1 if a < 0 and d < 0 else 1 if a < 0 else 0
            return "slice", cut, resize, flip
    scale = np.sqrt(abs(a * d - b * c))
    shrink = None
    if scale < 0.5:
        r = 2 * scale
        shrink = (max(1, round(w * r)), max(1, round(h * r)))
        matrix = matrix @ np.diag([1 / (shrink[0] / w), 1 / (shrink[1] / h), 1.0])
    m = matrix.copy()
    m[:, 2] = matrix[:, :2] @ (0.5, 0.5) + matrix[:, 2] - 0.5  # continuous -> pixel-centre indices
    return "warp", shrink, m


def resample(array: np.ndarray, matrix: np.ndarray, size: tuple[int, int], border: int = cv2.BORDER_CONSTANT,
             fill: Any = 0) -> np.ndarray:
    """An image mapped by ``matrix`` (continuous coordinates) onto ``size`` = (width, height), as :func:`resample_plan`
    says; pixels from outside come from ``border`` (an OpenCV border code) and ``fill``.

    uint8 images take picpac's kernels (:mod:`.kernels`), which the fused path runs too: the same bytes on every
    OpenCV and CPU. Crops and flips of any dtype are NumPy views, and a shift by whole pixels (a pad) is copied into
    its border by NumPy, exactly. Resizes and warps of other dtypes (16-bit, float images) are OpenCV's, within its
    rounding (docs/augment.md, "Exact bytes")."""
    plan = resample_plan(array.shape, matrix, size)
    if plan[0] == "slice":
        _, (x0, y0, x1, y1), interpolation, flip = plan
        out = array[y0:y1, x0:x1]
        if interpolation is not None:
            out = kernels.resize(out, size, interpolation) if out.dtype == np.uint8 else \
                cv2.resize(out, size, interpolation=interpolation)
        return out if flip is None else out[::-1 if flip <= 0 else 1, ::-1 if flip != 0 else 1]
    _, shrink, m = plan
    shifted = _shifted(array, m, size, border, fill) if shrink is None else None
    if shifted is not None:
        return shifted
    if shrink is not None:
        array = kernels.resize(array, shrink, cv2.INTER_AREA) if array.dtype == np.uint8 else \
            cv2.resize(array, shrink, interpolation=cv2.INTER_AREA)
    if array.dtype == np.uint8 and isinstance(fill, (int, float)) and border in kernels.BORDERS:
        return kernels.warp(array, m, size, border, _fill_u8(fill))
    value = (fill,) * 4 if isinstance(fill, (int, float)) else fill  # a number fills every channel
    return cv2.warpAffine(array, m, size, flags=cv2.INTER_LINEAR, borderMode=border, borderValue=value)


_PADS = {cv2.BORDER_REPLICATE: "edge", cv2.BORDER_REFLECT_101: "reflect", cv2.BORDER_WRAP: "wrap"}
"""OpenCV's borders as np.pad's modes."""


def _shifted(array: np.ndarray, m: np.ndarray, size: tuple[int, int], border: int, fill: Any) -> np.ndarray | None:
    """``array`` moved by whole pixels (and maybe mirrored) onto ``size``, the rest from the border, when the pixel
    map ``m`` does no more; None otherwise. Exact for any dtype: what a pad is."""
    (a, b, tx), (c, d, ty) = m.tolist()
    if b or c or abs(a) != 1 or abs(d) != 1 or tx != round(tx) or ty != round(ty) or \
            (border == cv2.BORDER_CONSTANT and not isinstance(fill, (int, float))) or \
            (border != cv2.BORDER_CONSTANT and border not in _PADS):
        return None
    h, w = array.shape[:2]
    if a < 0:  # destination x takes source tx - x: the mirrored source moved by tx - w + 1
        array, tx = array[:, ::-1], tx - w + 1
    if d < 0:
        array, ty = array[::-1], ty - h + 1
    tx, ty = int(tx), int(ty)
    width, height = size
    left, top = max(0, tx), max(0, ty)  # the source sits at (tx, ty) of the output: pad it to cover the output
    right, bottom = max(0, width - tx - w), max(0, height - ty - h)
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (array.ndim - 2)
    if border == cv2.BORDER_CONSTANT:
        padded = np.pad(array, widths, constant_values=fill_value(fill, array.dtype))
    else:
        padded = np.pad(array, widths, mode=_PADS[border])
    return padded[top - ty:top - ty + height, left - tx:left - tx + width]


def fill_value(fill: float, dtype: np.dtype) -> Any:
    """``fill`` as a border stores it in ``dtype``: rounded to nearest and saturated for integers (as OpenCV does)."""
    if dtype.kind in "iub":
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        value = float(np.rint(fill))
        return dtype.type(min(max(value, info.min), info.max)) if info else dtype.type(value)
    return dtype.type(fill)


def _fill_u8(fill: float) -> int:
    return int(fill_value(fill, np.dtype(np.uint8)))


_FUSED_RESIZE = {None: -1, cv2.INTER_LINEAR: 0, cv2.INTER_AREA: 1}


def fused_geometry(plan: Plan, size: tuple[int, int], border: tuple[int, Any]) -> tuple | None:
    """A :func:`resample_plan` as the 12 numbers of ``decoding.fused_sample``, or None where the fused path does
    not follow it (a warp with a border other than a constant number)."""
    if plan[0] == "slice":
        _, cut, resize, flip = plan
        return (1, *cut, _FUSED_RESIZE[resize], 2 if flip is None else flip, *size, 0, 0, 0)
    kind, fill = border
    if kind != cv2.BORDER_CONSTANT or not isinstance(fill, (int, float)):
        return None
    _, shrink, m = plan
    return (2, *(shrink or (0, 0)), *m.ravel().tolist(), _fill_u8(fill), *size)
