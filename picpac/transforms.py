"""Per-sample transforms (image layer): each is a function of (sample, rng) -> sample.

A transform receives the sample's own ``numpy.random.Generator``, keyed by (seed, epoch,
record) by the stream, so the same seed gives the same result on any thread. Deterministic
transforms ignore it. The stream's geometry keys (min_size, max_size, resize_*, crop_*, round_*)
are built from these classes; user transforms plug in the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import cv2
import numpy as np

from .errors import PicPacValueError


@dataclass
class Sample:
    """What flows through transforms: the image (H, W[, C]), its label, and where it came from."""

    image: np.ndarray
    label: float
    record: int
    extra: dict[str, Any] = field(default_factory=dict)


class Transform(Protocol):
    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample: ...


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Resize with INTER_AREA when shrinking (no aliasing) and INTER_LINEAR when enlarging."""
    h, w = image.shape[:2]
    if (w, h) == (width, height):
        return image
    shrinking = width * height < w * h
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


@dataclass(frozen=True)
class LimitSize:
    """Scale so the longer side is at most ``max_size`` and the shorter at least ``min_size`` (0: no limit)."""

    min_size: int = 0
    max_size: int = 0

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        h, w = sample.image.shape[:2]
        scale = 1.0
        if self.max_size and max(h, w) > self.max_size:
            scale = self.max_size / max(h, w)
        elif self.min_size and min(h, w) < self.min_size:
            scale = self.min_size / min(h, w)
        if scale != 1.0:
            sample.image = _resize(sample.image, max(1, round(w * scale)), max(1, round(h * scale)))
        return sample


@dataclass(frozen=True)
class Resize:
    """Resize to ``width`` x ``height``; with one of them 0, keep the aspect ratio."""

    width: int = 0
    height: int = 0

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        h, w = sample.image.shape[:2]
        width = self.width or max(1, round(w * self.height / h))
        height = self.height or max(1, round(h * self.width / w))
        sample.image = _resize(sample.image, width, height)
        return sample


def _offset(extra: int, random: bool, rng: np.random.Generator) -> int:
    """Where a window starts along an axis with ``extra`` spare pixels: centred, or uniform at random."""
    return int(rng.integers(0, extra + 1)) if random and extra > 0 else extra // 2


def _window(image: np.ndarray, width: int, height: int, random: bool, rng: np.random.Generator) -> np.ndarray:
    """A ``width`` x ``height`` window of ``image``, zero-padded (centred) where the image is smaller."""
    h, w = image.shape[:2]
    if h < height or w < width:
        top, left = max(0, height - h) // 2, max(0, width - w) // 2
        image = cv2.copyMakeBorder(image, top, max(0, height - h) - top, left, max(0, width - w) - left,
                                   cv2.BORDER_CONSTANT, value=0)
        h, w = image.shape[:2]
    y, x = _offset(h - height, random, rng), _offset(w - width, random, rng)
    return image[y:y + height, x:x + width]


@dataclass(frozen=True)
class Crop:
    """Crop ``width`` x ``height`` (0: keep that side): centred, or at a random place if ``random``."""

    width: int = 0
    height: int = 0
    random: bool = False

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        h, w = sample.image.shape[:2]
        sample.image = _window(sample.image, self.width or w, self.height or h, self.random, rng)
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

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        h, w = sample.image.shape[:2]
        height, width = self._round(h), self._round(w)
        if height < 1 or width < 1:
            raise PicPacValueError(f"record {sample.record}: a {w}x{h} image is too small for "
                                   f"round_div={self.div}, round_mod={self.mod}")
        sample.image = _window(sample.image, width, height, self.random, rng)
        return sample

    def _round(self, size: int) -> int:
        return size - (size - self.mod) % self.div


def convert(image: np.ndarray, channel_first: bool, dtype: np.dtype, mean: np.ndarray | None,
            std: np.ndarray | None) -> np.ndarray:
    """The image in the output layout and type: (C, H, W) or (H, W, C), normalised when mean/std are given."""
    if image.ndim == 2:
        image = image[:, :, None]
    if mean is not None or std is not None:
        image = image.astype(np.float32)
        if mean is not None:
            image -= mean
        if std is not None:
            image /= std
    if channel_first:
        image = image.transpose(2, 0, 1)
    return np.ascontiguousarray(image, dtype=dtype)
