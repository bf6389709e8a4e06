"""The colour steps on the device: the draws of ``ColorJitter`` (brightness, contrast, saturation), ``AddColor`` in
RGB/BGR, PicPac's ``SameColor`` and ``Invert``, applied to a batch in torch with the CPU path's float32 arithmetic
and rounding, so that the same pixels give the same bytes.

A planning thread draws each sample's parameters with the step's own ``draw(rng)`` (the draws its call makes) and
``plan`` turns them into a :data:`Colour` entry; ``apply`` runs a batch's entries, step by step, on the warped
values (whole numbers in 0..255, the CPU path's uint8 pixels). Hue, and shifts in HSV or Lab, are not here: a
sample with one takes the CPU path.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ..image.color import ORDERS, AddColor, ColorJitter, Invert, SameColor
from .warp import _to, torch

Colour = tuple
"""One step's draws for one sample: ``("jitter", order, factors)``, ``("add", deltas)`` (per channel, in the
image's order), ``("shift", value)`` or ``("invert",)``."""

GRAY_WEIGHTS = ((9798, 19235, 3735, 15), (4899, 9617, 1868, 14))
"""Fixed-point weights of R, G and B and their shift that OpenCV's uint8 RGB2GRAY has used (5.x, 4.x)."""


@functools.cache
def gray_weights() -> tuple[int, int, int, int]:
    """The weights of :data:`GRAY_WEIGHTS` that this OpenCV's RGB2GRAY rounds as, measured on 65,536 pixels (they
    differ on about 1 in 400); the first where neither matches exactly."""
    pixels = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    gray = cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY).astype(np.int64)
    wide = pixels.astype(np.int64)
    for r, g, b, shift in GRAY_WEIGHTS:
        if np.array_equal(gray, (wide[..., 0] * r + wide[..., 1] * g + wide[..., 2] * b + (1 << shift - 1)) >> shift):
            return r, g, b, shift
    return GRAY_WEIGHTS[0]


def steps(random: Sequence) -> int:
    """How many of the last ``random`` steps the device can make: the trailing colour steps it follows (a geometric
    step after a colour step would move coloured pixels: then none)."""
    count = 0
    for step in reversed(random):
        if not _follows(step):
            break
        count += 1
    return count


def _follows(step: Any) -> bool:
    if isinstance(step, ColorJitter):
        return step.ranges()[3] is None  # no hue
    if isinstance(step, AddColor):
        return step.colorspace.upper() in ORDERS
    return isinstance(step, (Invert, SameColor))


def plan(step: Any, rng: Any, order: str) -> Colour | None:
    """The draws of one colour step for one sample (as its call draws them), or None when it changes nothing."""
    drawn = step.draw(rng)
    if isinstance(step, ColorJitter):
        return None if drawn is None else ("jitter", drawn[0], tuple(drawn[1]))
    if isinstance(step, AddColor):
        return None if drawn is None else ("add", tuple(drawn if step.colorspace.upper() == order else drawn[::-1]))
    if isinstance(step, Invert):
        return ("invert",) if drawn else None
    return ("shift", drawn) if drawn else None  # SameColor


def apply(values: Any, colours: Sequence[Sequence[Colour]], order: str):
    """``values`` (n, C, H, W) float32 whole numbers, each sample's colour steps applied in its order."""
    depth = max((len(c) for c in colours), default=0)
    for k in range(depth):
        rows = [i for i, c in enumerate(colours) if len(c) > k]
        kinds = {colours[i][k][0] for i in rows}
        for kind in sorted(kinds):
            mine = [i for i in rows if colours[i][k][0] == kind]
            index = _to(np.array(mine, np.int64), values.device)
            values[index] = _STEPS[kind](values[index], [colours[i][k] for i in mine], order)
    return values


def _round8(values: Any):
    """As the CPU path's uint8: nearest, ties to even, saturated."""
    return values.round().clamp_(0, 255)


def _gray(values: Any, order: str):
    """(n, 1, H, W): OpenCV's uint8 grayscale of whole-number values (1 channel: itself)."""
    if values.shape[1] == 1:
        return values
    r, g, b, shift = gray_weights()
    if order == "BGR":
        r, b = b, r
    # whole numbers below 2**24 (255 * 2**15 < 2**23): exact in float32, and so is the division by a power of two
    weighted = values[:, 0:1] * r + values[:, 1:2] * g + values[:, 2:3] * b + (1 << shift - 1)
    return torch.floor(weighted / (1 << shift))


def _column(numbers: Sequence[float], values: Any):
    return _to(np.array(numbers, np.float32).reshape(-1, 1, 1, 1), values.device)


def _blend(values: Any, ratios: Sequence[float], other: Any):
    """``round8(values * ratio + (1 - ratio) * other)`` in float32, as image.color's _blend."""
    out = values * _column(ratios, values)
    return _round8(out + _column([1 - r for r in ratios], values) * other)


def _jitter(values: Any, colours: Sequence[Colour], order: str):
    """ColorJitter: its four steps in each sample's drawn order (factor 1 leaves a sample as it is)."""
    gray = values.shape[1] == 1
    for position in range(4):
        for step in range(3):
            ratios = [c[2][step] if c[1][position] == step and c[2][step] is not None else 1.0 for c in colours]
            if all(r == 1.0 for r in ratios) or step == 2 and gray:
                continue
            if step == 0:
                values = _blend(values, ratios, 0.0)
            elif step == 1:  # the mean of the grayscale image, in float64 then float32, as NumPy's mean
                means = _gray(values, order).double().mean((1, 2, 3)).float().reshape(-1, 1, 1, 1)
                values = _blend(values, ratios, means)
            else:
                values = _blend(values, ratios, _gray(values, order))
    return values


def _add(values: Any, colours: Sequence[Colour], order: str):
    """AddColor in the image's own channel order; a grayscale image as its 3-channel twin, then gray again."""
    deltas = _to(np.array([c[1] for c in colours], np.float32).reshape(-1, 3, 1, 1), values.device)
    if values.shape[1] == 1:
        return _gray(_round8(values.expand(-1, 3, -1, -1) + deltas), order)
    return _round8(values + deltas)


def _shift(values: Any, colours: Sequence[Colour], order: str):
    return _round8(values + _column([c[1] for c in colours], values))


def _invert(values: Any, colours: Sequence[Colour], order: str):
    return 255 - values


_STEPS = {"jitter": _jitter, "add": _add, "shift": _shift, "invert": _invert}
