"""Photometric per-sample transforms (image layer): blur, colour jitter, colour shifts, invert, normalise.

Same protocol as :mod:`picpac.transforms`: frozen dataclasses called as ``t(sample, rng) -> sample``,
where a random transform with ``random=False`` does its deterministic centre version. They change
only ``sample.image``, always by assigning a new array (the input may be shared with a cache and is
never written into); the mask and shapes are left as they are.

Colour images are (H, W, 3) in the channel order ``sample.extra.get("colorspace", "RGB")`` ("RGB" or
"BGR"), which every colour-space conversion follows; (H, W) and (H, W, 1) are grayscale.
uint8 in gives uint8 out, rounded to nearest (ties to even) and saturated as OpenCV does;
:class:`Normalize` gives float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from .transforms import Sample

ORDERS = ("RGB", "BGR")
SPACES = ("BGR", "RGB", "HSV", "LAB")

# OpenCV conversion codes by the image's channel order: into a space, and back out of it
_INTO = {"RGB": {"GRAY": cv2.COLOR_RGB2GRAY, "HSV": cv2.COLOR_RGB2HSV, "LAB": cv2.COLOR_RGB2Lab},
         "BGR": {"GRAY": cv2.COLOR_BGR2GRAY, "HSV": cv2.COLOR_BGR2HSV, "LAB": cv2.COLOR_BGR2Lab}}
_FROM = {"RGB": {"GRAY": cv2.COLOR_GRAY2RGB, "HSV": cv2.COLOR_HSV2RGB, "LAB": cv2.COLOR_Lab2RGB},
         "BGR": {"GRAY": cv2.COLOR_GRAY2BGR, "HSV": cv2.COLOR_HSV2BGR, "LAB": cv2.COLOR_Lab2BGR}}
_HUES = 180  # OpenCV's uint8 hue: 0..179, two degrees a step


def _order(sample: Sample) -> str:
    """The sample's channel order, "RGB" or "BGR"."""
    order = str(sample.extra.get("colorspace", "RGB")).upper()
    if order not in ORDERS:
        raise PicPacValueError(f"record {sample.record}: colorspace must be 'RGB' or 'BGR', got {order!r}")
    return order


def _channels(image: np.ndarray, name: str) -> int:
    """1 for (H, W) or (H, W, 1), 3 for (H, W, 3); anything else is an error."""
    if image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 1):
        return 1
    if image.ndim == 3 and image.shape[2] == 3:
        return 3
    raise PicPacValueError(f"{name}: expected a 1- or 3-channel image, got shape {image.shape}")


def _uint8(image: np.ndarray, name: str) -> np.ndarray:
    if image.dtype != np.uint8:
        raise PicPacTypeError(f"{name} works on uint8 images (apply it before Normalize), got {image.dtype}")
    return image


def _round8(values: np.ndarray) -> np.ndarray:
    """Float values to uint8 as OpenCV's saturate_cast does: nearest (ties to even), clipped to [0, 255]."""
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def _gray(image: np.ndarray, order: str) -> np.ndarray:
    """The (H, W) grayscale of a 1- or 3-channel image (OpenCV's weights for 3 channels)."""
    if image.ndim == 2:
        return image
    if image.shape[2] == 1:
        return image[:, :, 0]
    return cv2.cvtColor(image, _INTO[order]["GRAY"])


def _blend(image: np.ndarray, other: float | np.ndarray, ratio: float) -> np.ndarray:
    """uint8 ``ratio * image + (1 - ratio) * other`` (torchvision's _blend, rounded like OpenCV)."""
    out = image.astype(np.float32)
    out *= np.float32(ratio)
    if not (np.isscalar(other) and other == 0):
        out += np.float32(1 - ratio) * np.asarray(other, np.float32)
    return _round8(out)


def _draw(rng: Any, low: float, high: float, random: bool) -> float:
    """A uniform draw from [low, high] (no draw for an empty-width range), or its centre when not random."""
    return float(rng.uniform(low, high)) if random and high > low else (low + high) / 2


def _floats(values: Any, n: int, name: str) -> tuple[float, ...]:
    """A scalar or a sequence of ``n`` numbers as a tuple of ``n`` floats."""
    if np.isscalar(values):
        return (float(values),) * n
    out = tuple(float(v) for v in values)
    if len(out) != n:
        raise PicPacValueError(f"{name}: expected a number or {n} numbers, got {values!r}")
    return out


@dataclass(frozen=True)
class Blur:
    """Gaussian blur with sigma drawn uniformly from ``sigma`` (a number: exactly that); PicPac's augment.blur.

    Not random: the middle sigma. Sigma 0 leaves the image unchanged.
    """

    sigma: float | tuple[float, float] = (0.0, 1.5)
    random: bool = True

    def __post_init__(self) -> None:
        low, high = (float(self.sigma),) * 2 if np.isscalar(self.sigma) else _floats(self.sigma, 2, "sigma")
        if not 0 <= low <= high:
            raise PicPacValueError(f"sigma: need 0 <= low <= high, got ({low}, {high})")
        object.__setattr__(self, "sigma", (low, high))

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        sigma = _draw(rng, *self.sigma, self.random)
        if sigma > 0:
            image = sample.image
            out = cv2.GaussianBlur(image, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT_101)
            sample.image = out.reshape(image.shape)
        return sample


def _factor_range(value: float | tuple[float, float], name: str) -> tuple[float, float] | None:
    """torchvision's ColorJitter range for brightness/contrast/saturation; None when it is the identity."""
    if np.isscalar(value):
        if value < 0:
            raise PicPacValueError(f"{name}: must be non-negative, got {value}")
        low, high = max(0.0, 1.0 - float(value)), 1.0 + float(value)
    else:
        low, high = _floats(value, 2, name)
        if not 0 <= low <= high:
            raise PicPacValueError(f"{name}: need 0 <= low <= high, got ({low}, {high})")
    return None if low == high == 1.0 else (low, high)


def _hue_range(value: float | tuple[float, float]) -> tuple[float, float] | None:
    if np.isscalar(value):
        if not 0 <= value <= 0.5:
            raise PicPacValueError(f"hue: must be in [0, 0.5], got {value}")
        low, high = -float(value), float(value)
    else:
        low, high = _floats(value, 2, "hue")
        if not -0.5 <= low <= high <= 0.5:
            raise PicPacValueError(f"hue: need -0.5 <= low <= high <= 0.5, got ({low}, {high})")
    return None if low == high == 0.0 else (low, high)


def _shift_hue(image: np.ndarray, order: str, hue: float) -> np.ndarray:
    """Rotate the hue of a uint8 colour image by ``hue`` turns (OpenCV HSV: round(hue * 180) steps of 2 degrees)."""
    shift = int(np.rint(hue * _HUES)) % _HUES
    if shift == 0:
        return image
    hsv = cv2.cvtColor(image, _INTO[order]["HSV"])
    hsv[:, :, 0] = (hsv[:, :, 0].astype(np.int16) + shift) % _HUES
    return cv2.cvtColor(hsv, _FROM[order]["HSV"])


@dataclass(frozen=True)
class ColorJitter:
    """torchvision's ColorJitter: brightness, contrast, saturation and hue in a random order.

    Each of brightness/contrast/saturation is v (factor from [max(0, 1-v), 1+v]) or a (low, high)
    factor range; hue is h (from [-h, h], h <= 0.5) or a range, in turns of the colour wheel.
    Brightness scales, contrast blends with the mean of the grayscale image, saturation blends with
    the grayscale image, hue rotates H in HSV. Grayscale images take brightness and contrast only.
    Not random: unchanged.
    """

    brightness: float | tuple[float, float] = 0
    contrast: float | tuple[float, float] = 0
    saturation: float | tuple[float, float] = 0
    hue: float | tuple[float, float] = 0
    random: bool = True

    def __post_init__(self) -> None:
        self.ranges()  # validate now

    def ranges(self) -> tuple[tuple[float, float] | None, ...]:
        """The (low, high) ranges of brightness, contrast, saturation and hue (None: not applied)."""
        return (_factor_range(self.brightness, "brightness"), _factor_range(self.contrast, "contrast"),
                _factor_range(self.saturation, "saturation"), _hue_range(self.hue))

    def draw(self, rng: Any) -> tuple[list[int], list[float | None]] | None:
        """What one call draws: the order of the four steps and each one's factor (None: not applied); None
        when the call changes nothing (a batched version applies the same draws: the device stage)."""
        ranges = self.ranges()
        if not self.random or all(r is None for r in ranges):
            return None
        # torchvision's draw order: the permutation, then each factor in the fixed order b, c, s, h
        steps = [int(i) for i in rng.permutation(4)]
        return steps, [None if r is None else float(rng.uniform(*r)) for r in ranges]

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        drawn = self.draw(rng)
        if drawn is None:
            return sample
        steps, factors = drawn
        image = _uint8(sample.image, "ColorJitter")
        gray = _channels(image, "ColorJitter") == 1
        order = "RGB" if gray else _order(sample)
        out = image
        for step in steps:
            f = factors[step]
            if f is None:
                continue
            if step == 0:
                out = _blend(out, 0, f)
            elif step == 1:
                out = _blend(out, float(_gray(out, order).mean()), f)
            elif step == 2 and not gray:
                out = _blend(out, _gray(out, order)[:, :, None], f)
            elif step == 3 and not gray:
                out = _shift_hue(out, order, f)
        if out is not image:
            sample.image = out
        return sample


@dataclass(frozen=True)
class AddColor:
    """Add to each channel a value drawn from [-v, v] in ``colorspace``; PicPac's pert_color1..3 (augment.add).

    ``values`` are per channel of ``colorspace`` ("BGR", "RGB", "HSV" or "Lab", OpenCV's uint8
    ranges: H 0..179, wrapping around; S, V, L, a, b 0..255). The image is converted there, shifted
    (saturating) and converted back. A grayscale image is shifted as its 3-channel twin and converted
    back to gray. A float image (after a ``colorspace`` step with ``mul0``, as in PicPac v2) gets the values
    added to its channels as they stand, unrounded and unclipped. Not random: unchanged.
    """

    values: float | tuple[float, float, float] = (0, 0, 0)
    colorspace: str = "BGR"
    random: bool = True

    def __post_init__(self) -> None:
        values = _floats(self.values, 3, "values")
        if min(values) < 0:
            raise PicPacValueError(f"values: must be non-negative, got {values}")
        if str(self.colorspace).upper() not in SPACES:
            raise PicPacValueError(f"colorspace: must be one of BGR, RGB, HSV, Lab, got {self.colorspace!r}")
        object.__setattr__(self, "values", values)

    def draw(self, rng: Any) -> list[float] | None:
        """What one call draws: each channel's value, in ``colorspace``'s order; None when it changes nothing."""
        if not self.random:
            return None
        deltas = [_draw(rng, -v, v, True) for v in self.values]
        return deltas if any(deltas) else None

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        deltas = self.draw(rng)
        if deltas is None:
            return sample
        image = sample.image
        if image.dtype.kind == "f":  # PicPac v2's float arithmetic: added to the channels as they stand, unrounded
            values = np.float32(deltas if _channels(image, "AddColor") == 3 else deltas[:1])
            sample.image = (image + values.reshape((1,) * (image.ndim - 1) + (-1,))).astype(image.dtype, copy=False)
            return sample
        image = _uint8(image, "AddColor")
        gray = _channels(image, "AddColor") == 1
        order = _order(sample)
        colour = cv2.cvtColor(_gray(image, order), _FROM[order]["GRAY"]) if gray else image
        space = self.colorspace.upper()
        if space in ORDERS:
            out = _round8(colour.astype(np.float32) + np.float32(deltas if space == order else deltas[::-1]))
        else:
            shifted = cv2.cvtColor(colour, _INTO[order][space]).astype(np.float32) + np.float32(deltas)
            if space == "HSV":
                shifted[:, :, 0] = np.mod(np.rint(shifted[:, :, 0]), _HUES)
            out = cv2.cvtColor(_round8(shifted), _FROM[order][space])
        if gray:
            out = cv2.cvtColor(out, _INTO[order]["GRAY"]).reshape(image.shape)
        sample.image = out
        return sample


@dataclass(frozen=True)
class SameColor:
    """PicPac's pert_colorspace='SAME': one value drawn from [-v, v], rounded, added to every channel (saturating on
    uint8 images)."""

    value: float

    def draw(self, rng: Any) -> int:
        """What one call draws: the value added (0: the image is left as it is)."""
        return round(float(rng.uniform(-self.value, self.value)))

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        delta = self.draw(rng)
        if delta:
            image = sample.image
            shifted = image.astype(np.float32) + delta
            sample.image = np.clip(shifted, 0, 255).astype(np.uint8) if image.dtype == np.uint8 else shifted
        return sample


@dataclass(frozen=True)
class Invert:
    """255 - image with probability ``p``. Not random: inverted when p >= 0.5."""

    random: bool = True
    p: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise PicPacValueError(f"p: must be in [0, 1], got {self.p}")

    def draw(self, rng: Any) -> bool:
        """What one call draws: whether it inverts."""
        if self.random:
            return self.p >= 1 or (self.p > 0 and float(rng.random()) < self.p)
        return self.p >= 0.5

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        if self.draw(rng):
            sample.image = 255 - _uint8(sample.image, "Invert")
        return sample


@dataclass(frozen=True)
class Normalize:
    """float32 ``(x - mean) / std`` per channel (numbers or one value per channel). Not random."""

    mean: float | tuple[float, ...] = (0.0, 0.0, 0.0)
    std: float | tuple[float, ...] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            value = getattr(self, name)
            object.__setattr__(self, name, float(value) if np.isscalar(value) else tuple(float(v) for v in value))
        if np.any(np.asarray(self.std) == 0):
            raise PicPacValueError(f"std: must be non-zero, got {self.std}")

    @staticmethod
    def _per_channel(value: float | tuple[float, ...], channels: int, name: str) -> np.ndarray:
        """``value`` shaped to broadcast over an image with ``channels`` (0: an (H, W) image)."""
        if np.isscalar(value) or len(set(value)) == 1:
            return np.float32(value if np.isscalar(value) else value[0])
        if len(value) != channels:
            raise PicPacValueError(f"Normalize: {name} has {len(value)} values for an image with "
                                   f"{channels or 1} channel(s)")
        return np.asarray(value, np.float32)

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        image = sample.image
        channels = image.shape[2] if image.ndim == 3 else 0
        out = image.astype(np.float32)  # always a copy: safe to work in place
        out -= self._per_channel(self.mean, channels, "mean")
        out /= self._per_channel(self.std, channels, "std")
        sample.image = out
        return sample


@dataclass(frozen=True)
class Grayscale:
    """To grayscale with OpenCV's weights (following the sample's RGB/BGR order): (H, W) for
    ``channels=1``, or (H, W, 3) with three identical channels for ``channels=3``. Not random."""

    channels: int = 1

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise PicPacValueError(f"channels: must be 1 or 3, got {self.channels}")

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        image = sample.image
        gray = _gray(image, "RGB" if _channels(image, "Grayscale") == 1 else _order(sample))
        if self.channels == 3:
            gray = np.repeat(gray[:, :, None], 3, axis=2)
        if gray is not image:
            sample.image = gray
        return sample


@dataclass(frozen=True)
class Color:
    """Grayscale to 3 identical channels (H, W, 3); colour images are left as they are. Not random."""

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        image = sample.image
        if _channels(image, "Color") == 1:
            sample.image = np.repeat(_gray(image, "RGB")[:, :, None], 3, axis=2)
        return sample
