"""Per-sample transforms (image layer): each is a function of (sample, rng) -> sample.

A transform receives a :class:`~.sample.Sample` and the sample's own ``numpy.random.Generator``, keyed by (seed, epoch,
record) by the stream, so the same seed gives the same result on any thread. Deterministic
transforms ignore it. The stream's geometry keys (min_size, max_size, resize_*, crop_*, round_*)
are built from these classes; user transforms plug in the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from ..errors import PicPacValueError
from .sample import Sample
from .shapes import Shapes

__all__ = ["Sample"]  # transforms act on it, and user code takes it from here (picpac.transforms.Sample)


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

    ``shorter=S`` instead scales so the shorter side is S and the longer ``int(S * longer / shorter)``, as
    torchvision's ``Resize(S)`` sizes it (the config key ``resize_shorter``).
    """

    width: int = 0
    height: int = 0
    shorter: int = 0

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        if self.shorter:
            longer = max(1, int(self.shorter * max(w, h) / min(w, h)))  # torchvision's rounding: down
            _scale_to(sample, *((self.shorter, longer) if w <= h else (longer, self.shorter)))
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


def torchvision_centre(extra: int) -> int:
    """Where torchvision's CenterCrop starts a window along an axis with ``extra`` >= 0 spare pixels:
    ``int(round(extra / 2))``, halves rounded to even (PicPac's centred crop rounds them down)."""
    return int(round(extra / 2))


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre ``width`` x ``height`` as torchvision's CenterCrop does (its offsets round halves to even);
    smaller images are padded, centred."""

    width: int
    height: int

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        w, h = sample.size
        x, y = (_offset(e, False, rng) if e < 0 else torchvision_centre(e) for e in (w - self.width, h - self.height))
        if (x, y, self.width, self.height) != (0, 0, w, h):
            sample.warp([[1, 0, -x], [0, 1, -y]], (self.width, self.height))
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
        sample.mask = self.draw(sample.shapes, sample.size, sample.image.copy() if self.copy else None)
        sample.shapes = None
        return sample

    def draw(self, shapes: Shapes | None, size: tuple[int, int], canvas: np.ndarray | None = None) -> np.ndarray:
        """``shapes`` drawn into ``canvas`` (None: zeros of ``size`` = (width, height), ``channels`` and ``dtype``)."""
        w, h = size
        if canvas is None:
            canvas = np.zeros((h, w) if self.channels == 1 else (h, w, self.channels), self.dtype)
        if shapes is not None:
            shapes.rasterize(canvas, color_by=self.color_by, thickness=self.thickness, channels=self.values,
                             point_radius=self.point_radius)
        return canvas


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
    if dtype == np.uint8 and image.dtype.kind == "f":  # OpenCV's saturate_cast: nearest, clipped (no wrap-around)
        image = np.clip(np.rint(image), 0, 255)
    if channel_first:
        image = image.transpose(2, 0, 1)
    return np.ascontiguousarray(image, dtype=dtype)
