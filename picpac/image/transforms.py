"""Per-sample transforms (image layer): each is a function of (sample, rng) -> sample.

A transform receives the sample's own ``numpy.random.Generator``, keyed by (seed, epoch,
record) by the stream, so the same seed gives the same result on any thread. Deterministic
transforms ignore it. The stream's geometry keys (min_size, max_size, resize_*, crop_*, round_*)
are built from these classes; user transforms plug in the same way.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from ..errors import PicPacValueError, SampleError
from .decoding import REDUCTIONS, Region
from .shapes import Shapes


class Sample:
    """What flows through transforms: image (H, W[, C]), optional mask and shapes, label, record.

    Geometric transforms call :meth:`warp`; warps compose into one pending affine map, applied to
    the image (bilinear) and mask (nearest) only when ``image`` or ``mask`` is read, so a chain
    of geometric steps resamples the pixels once and shapes stay exact.

    The image itself may be deferred: ``Sample(None, ..., size=(w, h), decoder=d)`` decodes only
    when the pixels are read, by ``d(reduction, region)`` at 1/1, 1/2 or 1/4 scale: the smallest
    decode that still has at least the resolution the pending map needs. With ``regions=True``,
    ``region`` is the part of that decode the map reads (else None); ``d`` returns either that
    region or the whole image.
    """

    __slots__ = ("_image", "_mask", "shapes", "label", "record", "extra", "_matrix", "_size", "_border",
                 "_decoder", "_regions", "_source_size")

    def __init__(self, image: np.ndarray | None, label: float, record: int, *, mask: np.ndarray | None = None,
                 shapes: Shapes | None = None, extra: dict[str, Any] | None = None,
                 size: tuple[int, int] | None = None, decoder: Callable[[int, Region | None], np.ndarray | None] | None = None,
                 regions: bool = False):
        self._image, self._mask, self.shapes = image, mask, shapes
        self.label, self.record, self.extra = label, record, {} if extra is None else extra
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

    @property
    def image(self) -> np.ndarray:
        if self._image is None:
            self._image, image_matrix = self._decode()
        else:
            image_matrix = self._matrix
        if self._matrix is not None:
            self._image = _resample(self._image, image_matrix, self._size, cv2.INTER_LINEAR, *self._border)
            if self._mask is not None:
                self._mask = _resample(self._mask, self._matrix, self._size, cv2.INTER_NEAREST, cv2.BORDER_CONSTANT, 0)
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
        reduction = 1
        if self._matrix is not None:
            (a, b, _), (c, d, _) = self._matrix.tolist()
            squares, det = a * a + b * b + c * c + d * d, a * d - b * c
            # the largest singular value of [[a, b], [c, d]]: output pixels per source pixel
            largest = math.sqrt((squares + math.sqrt(max(squares * squares - 4 * det * det, 0.0))) / 2)
            reduction = next(r for r in REDUCTIONS if largest * r <= 1 + 1e-9 or r == 1)
        width, height = self._source_size
        for r in (reduction, 1) if reduction > 1 else (1,):
            region = self._region(r) if self._regions else None
            pixels = self._decoder(r, region)
            if pixels is None:
                raise SampleError(self.extra.get("source", "sample"), self.record, "cannot decode its image")
            h, w = pixels.shape[:2]
            if region is not None and (w, h) == region[2:]:
                left, top = region[:2]
                break
            if abs(w - width / r) < 1 and abs(h - height / r) < 1:
                left = top = 0
                break
        else:
            raise SampleError(self.extra.get("source", "sample"), self.record,
                              f"decodes to {w}x{h}, but its header says {width}x{height}")
        if (r, left, top) == (1, 0, 0):
            return pixels, self._matrix
        # libjpeg's 1/r decode makes pixel j of block [r j, r j + r): exactly r, even where the last
        # block sticks out of the image (a width of ceil(W / r))
        to_source = np.array([[r, 0, r * left], [0, r, r * top]], np.float64)
        return pixels, _compose(self._matrix if self._matrix is not None else _IDENTITY, to_source)

    def _region(self, reduction: int) -> Region | None:
        """The part of the 1/``reduction`` decode that the pending map reads, when it is axis-aligned.

        Edges inside the image get a margin of one pixel (all that bilinear reads), edges outside
        are clipped to it, so a constant or replicated border behaves as on the whole image; with
        another border, a map that reads outside the image gets no region. A map that shrinks by
        more than 2x outside a plain slice is left alone: _resample pre-shrinks the whole array, and
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
                     shapes=None if self.shapes is None else self.shapes.copy(), extra=dict(self.extra))
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
    return np.hstack([outer[:, :2] @ inner[:, :2], (outer[:, :2] @ inner[:, 2] + outer[:, 2])[:, None]])


def _axis_window(matrix: np.ndarray, size: tuple[int, int]) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the source window an axis-aligned ``matrix`` maps onto a ``size`` canvas."""
    (a, _, tx), (_, d, ty) = matrix.tolist()
    xs, ys = sorted((-tx / a, (size[0] - tx) / a)), sorted((-ty / d, (size[1] - ty) / d))
    return xs[0], ys[0], xs[1], ys[1]


def _slice_window(window: tuple[float, float, float, float], size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """``window`` as integers when it is integer-aligned and inside a ``size`` = (w, h) array (a plain slice)."""
    x0, y0, x1, y1 = cut = tuple(round(v) for v in window)
    if all(abs(v - r) < 1e-6 for v, r in zip(window, cut)) and x0 >= 0 and y0 >= 0 and x1 <= size[0] and y1 <= size[1]:
        return cut
    return None


def _resample(array: np.ndarray, matrix: np.ndarray, size: tuple[int, int], interpolation: int, border: int,
              fill: float) -> np.ndarray:
    """``array`` mapped by ``matrix`` (continuous coordinates) onto ``size`` = (width, height).

    An axis-aligned map of an integer-aligned window inside the image (crops, scales, flips) is a
    slice, cv2.resize (INTER_AREA when shrinking: no aliasing) and cv2.flip; anything else is one
    warpAffine, after an INTER_AREA pre-shrink when the map shrinks by more than 2x.
    """
    (a, b, _), (c, d, _) = matrix.tolist()
    width, height = size
    h, w = array.shape[:2]
    if b == 0 and c == 0 and a and d:  # axis-aligned, maybe mirrored
        cut = _slice_window(_axis_window(matrix, size), (w, h))
        if cut is not None:
            x0, y0, x1, y1 = cut
            out = array[y0:y1, x0:x1]
            if (x1 - x0, y1 - y0) != size:
                shrink = interpolation == cv2.INTER_LINEAR and width * height < out.shape[0] * out.shape[1]
                out = cv2.resize(out, size, interpolation=cv2.INTER_AREA if shrink else interpolation)
            if a < 0 or d < 0:
                out = cv2.flip(out, -1 if a < 0 and d < 0 else 1 if a < 0 else 0)
            return out
    scale = np.sqrt(abs(a * d - b * c))
    if interpolation == cv2.INTER_LINEAR and scale < 0.5:
        r = 2 * scale
        small = cv2.resize(array, (max(1, round(w * r)), max(1, round(h * r))), interpolation=cv2.INTER_AREA)
        rx, ry = small.shape[1] / w, small.shape[0] / h
        matrix = matrix @ np.diag([1 / rx, 1 / ry, 1.0])
        array = small
    m = matrix.copy()
    m[:, 2] = matrix[:, :2] @ (0.5, 0.5) + matrix[:, 2] - 0.5  # continuous -> OpenCV's pixel-centre indices
    # a number fills every channel (OpenCV alone would read it as (fill, 0, 0, 0))
    value = (fill,) * 4 if isinstance(fill, (int, float)) else fill
    return cv2.warpAffine(array, m, size, flags=interpolation, borderMode=border, borderValue=value)


class Transform(Protocol):
    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample: ...


def _scale_to(sample: Sample, width: int, height: int) -> None:
    w, h = sample.size
    if (w, h) != (width, height):
        sample.warp([[width / w, 0, 0], [0, height / h, 0]], (width, height))


def _uniform(rng: Any, low: float, high: float, random: bool) -> float:
    """A uniform draw from [low, high], or its centre when the transform is not random."""
    return float(rng.uniform(low, high)) if random and high > low else (low + high) / 2


def _range(value: float | tuple[float, float], name: str) -> tuple[float, float]:
    """``v`` -> (-v, v); a pair stays as it is."""
    low, high = (-value, value) if isinstance(value, (int, float)) else value
    if low > high:
        raise PicPacValueError(f"{name}: range ({low}, {high}) is empty")
    return float(low), float(high)


def _about_centre(linear: np.ndarray, size: tuple[int, int], out: tuple[int, int],
                  shift: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """The affine map applying ``linear`` (2x2) about the centre of ``size`` onto the centre of ``out``."""
    centre = np.array(size, np.float64) / 2
    target = np.array(out, np.float64) / 2 + shift
    return np.hstack([linear, (target - linear @ centre)[:, None]])


@dataclass(frozen=True)
class LimitSize:
    """Scale so the longer side is at most ``max_size`` and the shorter at least ``min_size`` (0: no limit)."""

    min_size: int = 0
    max_size: int = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        scale = 1.0
        if self.max_size and max(h, w) > self.max_size:
            scale = self.max_size / max(h, w)
        elif self.min_size and min(h, w) < self.min_size:
            scale = self.min_size / min(h, w)
        if scale != 1.0:
            _scale_to(sample, max(1, round(w * scale)), max(1, round(h * scale)))
        return sample


@dataclass(frozen=True)
class Resize:
    """Resize to ``width`` x ``height``; with one of them 0, keep the aspect ratio.

    ``shorter=S`` instead scales so the shorter side is S (torchvision's ``Resize(S)``).
    """

    width: int = 0
    height: int = 0
    shorter: int = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        if self.shorter:
            f = self.shorter / min(w, h)
            _scale_to(sample, max(1, round(w * f)), max(1, round(h * f)))
        else:
            _scale_to(sample, self.width or max(1, round(w * self.height / h)),
                      self.height or max(1, round(h * self.width / w)))
        return sample


@dataclass(frozen=True)
class Scale:
    """Scale by a factor drawn from [low, high] (``high`` None: exactly ``low``); PicPac's augment.scale."""

    low: float
    high: float | None = None
    random: bool = True

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        f = _uniform(rng, self.low, self.low if self.high is None else self.high, self.random)
        w, h = sample.size
        _scale_to(sample, max(1, round(w * f)), max(1, round(h * f)))
        return sample


def _offset(extra: int, random: bool, rng: Any) -> int:
    """Where a window starts along an axis with ``extra`` spare pixels: centred, or uniform at random.

    With negative ``extra`` (a window larger than the image) the image is centred in the window.
    """
    if extra < 0:
        return -((-extra) // 2)
    return int(rng.integers(0, extra + 1)) if random and extra > 0 else extra // 2


def _crop(sample: Sample, width: int, height: int, random: bool, rng: Any, border: int = cv2.BORDER_CONSTANT,
          fill: float = 0) -> None:
    w, h = sample.size
    x, y = _offset(w - width, random, rng), _offset(h - height, random, rng)
    if (x, y, width, height) != (0, 0, w, h):
        sample.warp([[1, 0, -x], [0, 1, -y]], (width, height), border, fill)


@dataclass(frozen=True)
class Crop:
    """Crop ``width`` x ``height`` (0: keep that side): centred, or at a random place if ``random``.

    A side longer than the image is padded (centred) with ``fill``.
    """

    width: int = 0
    height: int = 0
    random: bool = False
    fill: float = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        _crop(sample, self.width or w, self.height or h, self.random, rng, fill=self.fill)
        return sample


@dataclass(frozen=True)
class RoundSize:
    """Crop each side to the largest size ``s`` with ``s % div == mod`` (centred, or random)."""

    div: int
    mod: int = 0
    random: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.mod < self.div:
            raise PicPacValueError(f"round_mod must be in [0, round_div), got round_mod={self.mod}, "
                                   f"round_div={self.div}")

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        width, height = self._round(w), self._round(h)
        if height < 1 or width < 1:
            raise PicPacValueError(f"record {sample.record}: a {w}x{h} image is too small for "
                                   f"round_div={self.div}, round_mod={self.mod}")
        _crop(sample, width, height, self.random, rng)
        return sample

    def _round(self, size: int) -> int:
        return size - (size - self.mod) % self.div


BORDERS = {"constant": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE, "reflect": cv2.BORDER_REFLECT_101,
           "wrap": cv2.BORDER_WRAP}


@dataclass(frozen=True)
class Pad:
    """Pad to at least ``width`` x ``height`` (centred), or by ``left, top, right, bottom`` pixels."""

    width: int = 0
    height: int = 0
    sides: tuple[int, int, int, int] = (0, 0, 0, 0)
    border: str = "constant"
    fill: float = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        left, top, right, bottom = self.sides
        width, height = max(self.width, w + left + right), max(self.height, h + top + bottom)
        x = left + (width - w - left - right) // 2
        y = top + (height - h - top - bottom) // 2
        if (width, height) != (w, h):
            sample.warp([[1, 0, x], [0, 1, y]], (width, height), BORDERS[self.border], self.fill)
        return sample


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre ``width`` x ``height`` (torchvision's CenterCrop; smaller images are padded)."""

    width: int
    height: int

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        _crop(sample, self.width, self.height, False, rng)
        return sample


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's RandomResizedCrop: a crop of random area and aspect ratio, resized to the output.

    Not random: the largest centred crop whose aspect ratio is within ``ratio``.
    """

    width: int
    height: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    random: bool = True

    def window(self, w: int, h: int, rng: Any) -> tuple[int, int, int, int]:
        """(x, y, width, height) of the crop, drawn as torchvision does."""
        if self.random:
            area = w * h  # plain floats and math: this runs once or more per training sample
            log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
            for _ in range(10):
                target = area * float(rng.uniform(*self.scale))
                aspect = math.exp(float(rng.uniform(*log_ratio)))
                cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
                if 0 < cw <= w and 0 < ch <= h:
                    return int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch
        aspect = w / h
        if aspect < min(self.ratio):
            cw, ch = w, round(w / min(self.ratio))
        elif aspect > max(self.ratio):
            cw, ch = round(h * max(self.ratio)), h
        else:
            cw, ch = w, h
        return (w - cw) // 2, (h - ch) // 2, cw, ch

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        x, y, cw, ch = self.window(*sample.size, rng)
        sx, sy = self.width / cw, self.height / ch
        sample.warp([[sx, 0, -x * sx], [0, sy, -y * sy]], (self.width, self.height))
        return sample


@dataclass(frozen=True)
class Flip:
    """Flip horizontally, vertically, or transpose (swap x and y), each with its own probability."""

    horizontal: float = 0.5
    vertical: float = 0.0
    transpose: float = 0.0
    random: bool = True

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        if not self.random:
            return sample
        w, h = sample.size
        draws = rng.random(3)
        if draws[0] < self.horizontal:
            sample.warp([[-1, 0, w], [0, 1, 0]], (w, h))
        if draws[1] < self.vertical:
            sample.warp([[1, 0, 0], [0, -1, h]], (w, h))
        if draws[2] < self.transpose:
            sample.warp([[0, 1, 0], [1, 0, 0]], (h, w))
        return sample


@dataclass(frozen=True)
class Rotate90:
    """Rotate by ``k`` quarter turns counter-clockwise (exact: no resampling of the pixel grid)."""

    k: int = 1

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        for _ in range(self.k % 4):
            w, h = sample.size
            sample.warp([[0, 1, 0], [-1, 0, w]], (h, w))  # (x, y) -> (y, w - x)
        return sample


@dataclass(frozen=True)
class Affine:
    """A random affine map about the image centre, keeping the output size.

    ``rotate`` in degrees (counter-clockwise), ``scale`` factors, ``shear`` in degrees (along x),
    ``translate`` as a fraction of the size; each a range (low, high) or v for (-v, v).
    Not random: the centres of the ranges.
    """

    rotate: float | tuple[float, float] = 0.0
    scale: tuple[float, float] = (1.0, 1.0)
    shear: float | tuple[float, float] = 0.0
    translate: float | tuple[float, float] = 0.0
    random: bool = True
    border: str = "constant"
    fill: float = 0

    def matrix(self, size: tuple[int, int], rng: Any) -> np.ndarray:
        angle = np.radians(_uniform(rng, *_range(self.rotate, "rotate"), self.random))
        f = _uniform(rng, *self.scale, self.random)
        shear = np.tan(np.radians(_uniform(rng, *_range(self.shear, "shear"), self.random)))
        low, high = _range(self.translate, "translate")
        shift = (_uniform(rng, low, high, self.random) * size[0], _uniform(rng, low, high, self.random) * size[1])
        cos, sin = np.cos(angle), np.sin(angle)
        # y points down, so a counter-clockwise turn on screen is this matrix
        linear = f * np.array([[cos, sin], [-sin, cos]]) @ np.array([[1, shear], [0, 1]])
        return _about_centre(linear, size, size, shift)

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        sample.warp(self.matrix(sample.size, rng), sample.size, BORDERS[self.border], self.fill)
        return sample


@dataclass(frozen=True)
class Rotate:
    """Rotate by an angle drawn from ``angle`` (v: [-v, v] degrees), about the centre; PicPac's augment.rotate."""

    angle: float | tuple[float, float] = 10.0
    random: bool = True
    border: str = "constant"
    fill: float = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        return Affine(rotate=self.angle, random=self.random, border=self.border, fill=self.fill)(sample, rng)


@dataclass(frozen=True)
class Sometimes:
    """Apply ``transforms`` with probability ``p`` (not random: when ``p >= 0.5``)."""

    p: float
    transforms: tuple
    random: bool = True

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        if (rng.random() < self.p) if self.random else self.p >= 0.5:
            sample = apply_all(self.transforms, sample, rng)
        return sample


@dataclass(frozen=True)
class OneOf:
    """Apply one of ``transforms``, chosen uniformly (not random: the first)."""

    transforms: tuple
    random: bool = True

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        i = int(rng.integers(len(self.transforms))) if self.random else 0
        return self.transforms[i](sample, rng)


@dataclass(frozen=True)
class SomeOf:
    """Apply ``k`` of ``transforms``, chosen without replacement, in random order (not random: the first k)."""

    k: int
    transforms: tuple
    random: bool = True

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        chosen = rng.permutation(len(self.transforms))[:self.k] if self.random else range(self.k)
        return apply_all([self.transforms[i] for i in chosen], sample, rng)


def apply_all(transforms: Any, sample: Sample, rng: Any) -> Sample:
    for transform in transforms:
        sample = transform(sample, rng)
    return sample


@dataclass(frozen=True)
class Rasterize:
    """Draw the sample's shapes into its mask (a new (H, W[, C]) array of ``dtype``), then drop them.

    The value drawn is the shape's label, tag or serial number (``color_by``) or the fixed
    ``values`` (PicPac's anno_color1..3); ``thickness`` -1 fills, > 0 outlines; points are discs of
    ``point_radius``; ``copy`` starts from a copy of the image instead of zeros (PicPac's anno_copy,
    for looking at annotations).
    """

    color_by: str = "label"
    thickness: int = -1
    channels: int = 1
    values: tuple[float, ...] | None = None
    dtype: str = "uint8"
    copy: bool = False
    point_radius: int = 2

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        if sample.shapes is None and sample.mask is not None and not self.copy:
            return sample  # a mask image already: nothing to draw (PicPac: a no-op on mask images)
        w, h = sample.size
        if self.copy:
            canvas = sample.image.copy()
        else:
            canvas = np.zeros((h, w) if self.channels == 1 else (h, w, self.channels), self.dtype)
        if sample.shapes is not None:
            sample.shapes.rasterize(canvas, color_by=self.color_by, thickness=self.thickness, channels=self.values,
                                    point_radius=self.point_radius)
        sample.mask = canvas
        sample.shapes = None
        return sample


@dataclass(frozen=True)
class ErodeMask:
    """Erode the mask with a (2r+1)-square kernel ``iterations`` times (thins label regions)."""

    radius: int = 1
    iterations: int = 1

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        if sample.mask is not None:
            kernel = np.ones((2 * self.radius + 1,) * 2, np.uint8)
            sample.mask = cv2.erode(sample.mask, kernel, iterations=self.iterations)
        return sample


def convert(image: np.ndarray, channel_first: bool, dtype: np.dtype, mean: np.ndarray | None,
            std: np.ndarray | None) -> np.ndarray:
    """The image in the output layout and type: (C, H, W) or (H, W, C), normalised when mean/std are given."""
    if image.ndim == 2:
        image = image[:, :, None]
    if mean is not None or std is not None:
        for name, values in (("mean", mean), ("std", std)):
            if values is not None and values.size not in (1, image.shape[2]):
                raise PicPacValueError(f"{name} has {values.size} values for an image of {image.shape[2]} channels")
        image = image.astype(np.float32)
        if mean is not None:
            image -= mean
        if std is not None:
            image /= std
    if channel_first:
        image = image.transpose(2, 0, 1)
    return np.ascontiguousarray(image, dtype=dtype)
