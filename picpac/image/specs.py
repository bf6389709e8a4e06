"""PicPac v2 transform specs: ``[{"type": "augment.rotate", "range": 10}, ...]`` -> transform objects.

:func:`build` turns each dict into our transforms (a callable passes through as it is), with PicPac's
own key names and defaults (PicPac's transforms.cpp; ``sometimes`` / ``some_of`` as in its
picpac-ts.cpp). Every transform with a ``random`` field gets ``random=random``: the stream passes
False for validation, which gives each transform's deterministic centre version.

One builder per type, registered in :data:`BUILDERS` with the keys it accepts; an unknown key, an
unknown type, or a PicPac option we cannot express yet is a :class:`PicPacValueError` naming it.
Every number is read with bounds (:meth:`Spec.value`), so nan, inf and sizes OpenCV or NumPy
cannot handle fail here, naming the type, key, range and value, not later in the stream.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import cv2
import numpy as np

from ..errors import PicPacTypeError, PicPacValueError, closest
from .color import AddColor, Blur, Normalize
from .decoding import MAX_SIDE
from .dense import BasicKeypoints, BoxFeature, DenseBoxAnchors, DenseCircleAnchors, DensePointAnchors
from .transforms import (BORDERS, Affine, Crop, ErodeMask, Flip, LimitSize, OneOf, Pad, Rasterize, Resize, Rotate,
                         RoundSize, Sample, Scale, SomeOf, Sometimes, apply_all)

# PicPac types we know but cannot build yet
UNSUPPORTED = ("clip_square", "mask", "wave.augment.add", "wave.augment.mul", "wave.augment.scale")

# bounds of the numbers in specs; sizes, sides and pads in pixels are at most MAX_SIDE (OpenCV's warp limit)
PLAIN = 10**6      # plain values: fills, means, stds, multipliers, params_default
COUNT = 2**16      # counts and indices: classes, boxes, priors, facets
FACTOR = 100       # scale factors
SIGMA = 256        # blur sigma in pixels
RADIUS = 1024      # erode_mask radius: a (2r+1)-square kernel


# -- small transforms PicPac has and picpac.transforms does not ------------------------------
COLOR_CODES = ("BGR2GRAY", "GRAY2BGR", "BGR2HSV", "HSV2BGR", "BGR2Lab", "Lab2BGR", "BGR2RGB")


@dataclass(frozen=True)
class ColorSpace:
    """PicPac's colorspace: ``cv2.cvtColor`` by ``code``, the image multiplied by ``mul0`` before, ``mul1`` after.

    PicPac always decodes BGR, so "BGR" in a code stands for the sample's own channel order
    (``sample.extra["colorspace"]``, "RGB" or "BGR"). BGR2HSV / BGR2Lab mark the sample "HSV" /
    "Lab" until HSV2BGR / Lab2BGR turn it back, so colour transforms in between fail loudly instead
    of misreading the channels; BGR2RGB reverses the channels and the recorded order with them.
    A multiplier other than 1 makes the image float32. Not random.
    """

    code: str
    mul0: float = 1.0
    mul1: float = 1.0

    def __post_init__(self) -> None:
        if self.code not in COLOR_CODES:
            raise PicPacValueError(f"colorspace code {self.code!r} is not supported{_hint(self.code, COLOR_CODES)}; "
                                   f"use one of {', '.join(COLOR_CODES)}")

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        image = sample.image
        if self.mul0 != 1:
            image = image.astype(np.float32) * np.float32(self.mul0)
        elif image.dtype == np.float64:
            image = image.astype(np.float32)
        source, target = self.code.split("2")
        extra = dict(sample.extra)
        space = str(extra.get("colorspace", "RGB"))
        channels = 1 if image.ndim == 2 else image.shape[2]
        if channels != (1 if source == "GRAY" else 3):
            raise PicPacValueError(f"record {sample.record}: colorspace {self.code} needs a "
                                   f"{'1' if source == 'GRAY' else '3'}-channel image, got shape {image.shape}")
        if source in ("HSV", "Lab"):
            if space.upper() != source.upper():
                raise PicPacValueError(f"record {sample.record}: colorspace {self.code} on an image in {space}")
            order = extra.pop("colorspace_order", "BGR")
            out = cv2.cvtColor(image, getattr(cv2, f"COLOR_{source}2{order}"))
            extra["colorspace"] = order
        else:
            order = space.upper()
            if order not in ("RGB", "BGR"):
                raise PicPacValueError(f"record {sample.record}: colorspace {self.code} needs an RGB or BGR image, "
                                       f"the sample is in {space}")
            if target == "RGB":
                out = np.ascontiguousarray(image[:, :, ::-1])
                extra["colorspace"] = "BGR" if order == "RGB" else "RGB"
            else:
                out = cv2.cvtColor(image, getattr(cv2, f"COLOR_{source.replace('BGR', order)}2"
                                                       f"{target.replace('BGR', order)}"))
                if target in ("HSV", "Lab"):
                    extra["colorspace"], extra["colorspace_order"] = target, order
        if self.mul1 != 1:
            out = out.astype(np.float32) * np.float32(self.mul1)
        sample.image = out
        sample.extra = extra
        return sample


@dataclass(frozen=True)
class Drop:
    """PicPac's drop: discard the annotation (shapes and mask). Not random."""

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        sample.shapes = None
        sample.mask = None
        return sample


@dataclass(frozen=True)
class Chain:
    """Several transforms as one (a spec that needs more than one step, inside one_of / some_of)."""

    transforms: tuple

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        return apply_all(self.transforms, sample, rng)


# -- reading one spec -----------------------------------------------------------------------------
class Spec:
    """One spec dict being built: typed access to its keys, and errors that say where it is."""

    def __init__(self, data: Mapping, kind: str, where: str):
        self.data, self.kind, self.where = data, kind, where

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None  # None (Python-built configs) counts as not given

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def number(self, key: str, default: float | None, low: float, high: float) -> float:
        return self.value(key, self.get(key, default), low, high)

    def value(self, key: str, value: Any, low: float, high: float) -> float:
        """``value`` (read from ``key``) as a float in [low, high], so finite; an error names key, range and value."""
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise PicPacTypeError(f"{self}: {key!r} must be a number, got {value!r}")
        if not low <= value <= high:  # compared before float(): a huge int does not overflow; nan fails too
            raise self.error(f"{key!r} must be in [{low}, {high}], got {value!r}")
        return float(value)

    def integer(self, key: str, default: int, low: int = 0, high: int = MAX_SIDE) -> int:
        """A whole number in [low, high]; by default a size in pixels, [0, MAX_SIDE]."""
        value = self.number(key, default, low, high)
        if value != int(value):
            raise PicPacTypeError(f"{self}: {key!r} must be a whole number, got {self.data[key]!r}")
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
            raise PicPacTypeError(f"{self}: {key!r} must be true or false, got {value!r}")
        return bool(value)

    def text(self, key: str, default: str, choices: Sequence[str]) -> str:
        value = self.get(key, default)
        if value not in choices:
            raise self.error(f"{key!r} must be one of {', '.join(map(repr, choices))}, got {value!r}"
                             f"{_hint(str(value), choices)}")
        return value

    def span(self, key: str, default: Any, low: float, high: float) -> float | tuple[float, float]:
        """A number, or a [low, high] pair, in [low, high]."""
        value = self.get(key, default)
        if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
            first, last = (self.value(key, v, low, high) for v in value)
            if first > last:
                raise self.error(f"{key!r}: range [{first}, {last}] is empty")
            return first, last
        try:
            return self.value(key, value, low, high)
        except PicPacTypeError:
            raise PicPacTypeError(f"{self}: {key!r} must be a number or a [low, high] pair, got {value!r}") from None

    def error(self, message: str) -> PicPacValueError:
        return PicPacValueError(f"{self}: {message}")

    def unsupported(self, key: str, what: str) -> PicPacValueError:
        return self.error(f"PicPac option {key!r} ({what}) is not supported yet")

    def __str__(self) -> str:
        return f"transform {self.where} ({self.kind!r})"


def _hint(name: str, names: Sequence[str]) -> str:
    close = closest(name, names)
    return f" (did you mean {close!r}?)" if close else ""


def _new(cls: type, random: bool, **kwargs: Any) -> Any:
    """``cls(**kwargs)``, with ``random=random`` when ``cls`` has a random field."""
    if "random" in {f.name for f in fields(cls)}:
        kwargs["random"] = random
    return cls(**kwargs)


def _border(s: Spec) -> dict[str, Any]:
    """PicPac's border_type ("constant", "replicate"; ours adds "reflect", "wrap") and the fill value."""
    return {"border": s.text("border_type", "constant", tuple(BORDERS)),
            "fill": s.number("border_value", 0, -PLAIN, PLAIN)}


# -- one builder per type -------------------------------------------------------------------------
Builder = Callable[[Spec, bool], Any]  # returns a transform or a list of them
BUILDERS: dict[str, tuple[Builder, frozenset[str]]] = {}


def _builder(kind: str, *keys: str) -> Callable[[Builder], Builder]:
    def register(function: Builder) -> Builder:
        BUILDERS[kind] = (function, frozenset(("type",) + keys))
        return function
    return register


@_builder("resize", "size", "width", "height", "min_size", "max_size")
def _resize(s: Spec, random: bool) -> Any:
    size = s.integer("size", 0)
    width, height = s.integer("width", size), s.integer("height", size)
    low, high = s.integer("min_size", 0), s.integer("max_size", 0)
    if high and low > high:
        raise s.error(f"min_size {low} is above max_size {high}")
    if width or height:  # a fixed size wins over min/max, which must then allow it (as in PicPac)
        for side in (width, height):
            if side and (side < low or (high and side > high)):
                raise s.error(f"size {side} is outside [min_size, max_size] = [{low}, {high or 'inf'}]")
        return Resize(width, height)
    if low or high:
        return LimitSize(low, high)
    raise s.error("needs size, width/height, min_size or max_size")


_CLIP_KEYS = ("size", "width", "height", "min", "max", "min_width", "max_width", "min_height", "max_height", "round",
              "round_width", "round_height", "shift", "shift_x", "shift_y", "max_crop", "max_crop_width",
              "max_crop_height", "border_type", "border_value")


@_builder("clip", *_CLIP_KEYS)
def _clip(s: Spec, random: bool) -> list:
    """Each side padded up to min, cropped down to max, then cropped to a multiple of round; shifted by up to shift.

    We express a side with min == max (size, or PicPac's newer width / height): crop or pad to it,
    a side with only min: pad up to it, and round the same on both sides. shift needs a fixed side.
    """
    for key in ("max_crop", "max_crop_width", "max_crop_height"):
        if s.integer(key, 0):
            raise s.unsupported(key, "random extra cropping of each border")
    size = s.integer("size", 0)
    low, high = s.integer("min", size), s.integer("max", size)  # high 0: no limit
    shift = s.integer("shift", 0)
    fixed, pad, shifts = [0, 0], [0, 0], [0, 0]
    for i, (side, axis) in enumerate((("width", "x"), ("height", "y"))):
        exact = s.integer(side, 0)
        side_low = s.integer(f"min_{side}", exact or low)
        side_high = s.integer(f"max_{side}", exact or high)
        if side_high and side_low > side_high:
            raise s.error(f"min_{side} {side_low} is above max_{side} {side_high}")
        if side_high and side_high != side_low:
            key = f"max_{side}" if s.given(f"max_{side}") else "max"
            raise s.unsupported(key, "crop down to at most this without a matching min")
        fixed[i], pad[i] = side_high, 0 if side_high else side_low
        shifts[i] = s.integer(f"shift_{axis}", shift)
        if shifts[i] and not fixed[i]:
            key = f"shift_{axis}" if s.given(f"shift_{axis}") else "shift"
            raise s.unsupported(key, f"a shift needs a fixed {side}: size, {side}, or min_{side} == max_{side}")
    border = _border(s)
    steps: list = []
    if any(pad) or any(shifts) or (border["border"] != "constant" and any(fixed)):
        steps.append(Pad(width=fixed[0] or pad[0], height=fixed[1] or pad[1],
                         sides=(shifts[0], shifts[1], shifts[0], shifts[1]), **border))
    if any(fixed):
        steps.append(_new(Crop, random, width=fixed[0], height=fixed[1], fill=border["fill"]))
    round_ = s.integer("round", 0)
    rounds = s.integer("round_width", round_), s.integer("round_height", round_)
    if rounds[0] != rounds[1]:
        raise s.unsupported("round_width" if s.given("round_width") else "round_height",
                            "a different rounding for each side")
    if rounds[0]:
        steps.append(_new(RoundSize, random, div=rounds[0]))
    return steps


@_builder("pad", "size", "width", "height", "left", "top", "right", "bottom", "border_type", "border_value")
def _pad(s: Spec, random: bool) -> Any:
    size = s.integer("size", 0)
    sides = tuple(s.integer(key, 0) for key in ("left", "top", "right", "bottom"))
    for axis, pair in (("left + right", sides[0::2]), ("top + bottom", sides[1::2])):
        if sum(pair) > MAX_SIDE:
            raise s.error(f"{axis} must be in [0, {MAX_SIDE}], got {sum(pair)}")
    return Pad(width=s.integer("width", size), height=s.integer("height", size), sides=sides, **_border(s))


@_builder("colorspace", "code", "mul0", "mul1")
def _colorspace(s: Spec, random: bool) -> Any:
    return ColorSpace(s.text("code", "", COLOR_CODES), s.number("mul0", 1.0, -PLAIN, PLAIN),
                      s.number("mul1", 1.0, -PLAIN, PLAIN))


@_builder("normalize", "mean", "std")
def _normalize(s: Spec, random: bool) -> Any:
    values = {}
    for key, default in (("mean", 0.0), ("std", 1.0)):
        value = s.get(key, default)
        many = isinstance(value, Sequence) and not isinstance(value, str)
        checked = tuple(s.value(key, v, -PLAIN, PLAIN) for v in (value if many else [value]))
        values[key] = checked if many else checked[0]
        if many and not 1 <= len(value) <= 4:
            raise s.error(f"{key!r} must be a number or 1 to 4 numbers, got {value!r}")
    return Normalize(**values)


@_builder("augment.flip", "horizontal", "vertical", "transpose")
def _flip(s: Spec, random: bool) -> Any:
    """PicPac flips each enabled way with probability 1/2."""
    chances = {key: 0.5 * s.flag(key, key != "transpose") for key in ("horizontal", "vertical", "transpose")}
    return _new(Flip, random, **chances)


@_builder("augment.scale", "range", "min", "max")
def _scale(s: Spec, random: bool) -> Any:
    spread = s.number("range", 0, 0, 1)
    low, high = s.number("min", 1 - spread, 0, FACTOR), s.number("max", 1 + spread, 0, FACTOR)
    if not 0 < low <= high:
        raise s.error(f"needs 0 < min <= max, got min={low}, max={high}")
    return _new(Scale, random, low=low, high=high)


@_builder("augment.rotate", "range", "min", "max", "border_type", "border_value")
def _rotate(s: Spec, random: bool) -> Any:
    spread = s.number("range", 0, 0, 360)
    low, high = s.number("min", -spread, -360, 360), s.number("max", spread, -360, 360)
    if low > high:
        raise s.error(f"min {low} is above max {high}")
    angle = high if low == -high else (low, high)  # PicPac's range r is Rotate's angle r: [-r, r]
    return _new(Rotate, random, angle=angle, **_border(s))


@_builder("augment.add", "range", "range1", "range2", "range3", "min1", "min2", "min3", "max1", "max2", "max3",
          "colorspace")
def _add(s: Spec, random: bool) -> Any:
    """Channel i gets a value from [min_i, max_i] (default [-range_i, range_i], range_i defaults to range).

    Channels are PicPac's BGR unless ``colorspace`` (ours) says "RGB", "HSV" or "Lab".
    """
    spread = s.number("range", 0, 0, 255)
    values = []
    for i in (1, 2, 3):
        v = s.number(f"range{i}", spread, 0, 255)
        low, high = s.number(f"min{i}", -v, -255, 255), s.number(f"max{i}", v, -255, 255)
        if low != -high or high < 0:
            raise s.unsupported(f"min{i}" if s.given(f"min{i}") else f"max{i}",
                                f"an asymmetric range [{low}, {high}]; AddColor draws from [-v, v]")
        values.append(high)
    return _new(AddColor, random, values=tuple(values), colorspace=s.text("colorspace", "BGR", ("BGR", "RGB", "HSV",
                                                                                                  "Lab")))


@_builder("augment.blur", "sigma", "min", "max")
def _blur(s: Spec, random: bool) -> Any:
    """Not in PicPac: sigma (a number or [low, high]) or, in PicPac's style, min / max."""
    if s.given("sigma") and (s.given("min") or s.given("max")):
        raise s.error("give sigma, or min / max, not both")
    default = next(f.default for f in fields(Blur) if f.name == "sigma")
    sigma = (s.span("sigma", None, 0, SIGMA) if s.given("sigma")
             else (s.number("min", default[0], 0, SIGMA), s.number("max", default[1], 0, SIGMA)))
    return _new(Blur, random, sigma=sigma)


@_builder("augment.affine", "rotate", "scale", "shear", "translate", "border_type", "border_value")
def _affine(s: Spec, random: bool) -> Any:
    """PicPac declares augment.affine but never implemented it; these are our Affine's fields.

    rotate, shear (degrees) and translate (a fraction of the size): v for [-v, v] or [low, high];
    scale: [low, high], or v for [1 - v, 1 + v] like augment.scale's range.
    """
    scale = s.span("scale", (1.0, 1.0), 0, FACTOR)
    if not isinstance(scale, tuple):
        scale = (1 - scale, 1 + scale)
    if scale[0] <= 0:
        raise s.error(f"'scale' must stay above 0, got {scale}")
    spans = {key: s.span(key, 0.0, -high, high) for key, high in (("rotate", 360), ("shear", 89), ("translate", 1))}
    for key, value in spans.items():
        if not isinstance(value, tuple) and value < 0:
            raise s.error(f"{key!r} must be >= 0 (or a [low, high] pair), got {value}")
    return _new(Affine, random, scale=scale, **spans, **_border(s))


def _nested(s: Spec, random: bool, *, units: bool = True) -> list:
    """The spec's "transforms": with ``units``, one transform per entry (an entry of several steps as a Chain)."""
    specs = s.get("transforms")
    if specs is None:
        raise s.error("needs 'transforms', a list of transform specs")
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise PicPacTypeError(f"{s}: 'transforms' must be a list of transform specs, got {specs!r}")
    out = []
    for i, spec in enumerate(_fold_colorspace(list(specs))):
        steps = _build_one(spec, random, f"{s.where}.transforms[{i}]")
        out += [Chain(tuple(steps))] if units and len(steps) > 1 else steps
    return out


@_builder("sometimes", "chance", "transforms")
def _sometimes(s: Spec, random: bool) -> Any:
    chance = s.number("chance", 0.5, 0, 1)
    return _new(Sometimes, random, p=chance, transforms=tuple(_nested(s, random, units=False)))


@_builder("some_of", "count", "transforms")
def _some_of(s: Spec, random: bool) -> Any:
    units = _nested(s, random)
    return _new(SomeOf, random, k=s.integer("count", 1, 0, len(units)), transforms=tuple(units))


@_builder("one_of", "transforms")
def _one_of(s: Spec, random: bool) -> Any:
    units = _nested(s, random)
    if not units:
        raise s.error("needs at least one transform")
    return _new(OneOf, random, transforms=tuple(units))


@_builder("rasterize", "copy", "index", "channels", "dtype", "use_palette", "use_tag", "thickness")
def _rasterize(s: Spec, random: bool) -> Any:
    """Draw the shapes into the mask: the shape's label (or tag with use_tag); thickness -1 fills.

    copy 0 starts from a copy of the image (PicPac's facet 0) instead of zeros.
    """
    if s.integer("index", 1, 0, COUNT) != 1:
        raise s.unsupported("index", "rasterizing a facet other than the annotation, 1")
    copy = s.integer("copy", -1, -1, COUNT)
    if copy not in (-1, 0):
        raise s.unsupported("copy", "copying a facet other than the image, 0")
    use_tag, use_palette = s.flag("use_tag", False), s.flag("use_palette", False)
    if use_palette:
        raise s.unsupported("use_palette", "drawing each label in a palette colour")
    return Rasterize(color_by="tag" if use_tag else "label", thickness=s.integer("thickness", -1, -1),
                     channels=s.integer("channels", 1, 1, 4), copy=copy == 0,
                     dtype=s.text("dtype", "uint8", ("uint8", "int32", "float32")))


@_builder("erode_mask", "index", "radius", "iterations", "border_type")
def _erode_mask(s: Spec, random: bool) -> Any:
    if s.integer("index", -1, -1, COUNT) not in (-1, 1):
        raise s.unsupported("index", "eroding a facet other than the mask")
    if s.text("border_type", "constant", ("constant", "replicate")) != "constant":
        raise s.unsupported("border_type", "a border other than constant")
    return ErodeMask(radius=s.integer("radius", 0, 0, RADIUS), iterations=s.integer("iterations", 1, 0, 100))


@_builder("drop", "index")
def _drop(s: Spec, random: bool) -> Any:
    if s.integer("index", 1, 0, COUNT) != 1:
        raise s.unsupported("index", "dropping a facet other than the annotation, 1")
    return Drop()


# -- dense targets (picpac.dense) -------------------------------------------------------------------
def _annotation_index(s: Spec) -> None:
    """PicPac's index: the facet holding the annotation; ours is always the sample's shapes (1)."""
    if s.integer("index", 1, 0, COUNT) != 1:
        raise s.unsupported("index", "reading an annotation facet other than 1")


def _anchor_keys(s: Spec) -> dict[str, Any]:
    """The keys every anchors.dense.* type shares (PicPac's DenseAnchors), and the prefix of ours."""
    _annotation_index(s)
    if s.flag("weighted", False):
        raise s.unsupported("weighted", "weighted anchor targets")
    lower, upper = s.number("lower_th", 0.4, 0, 1), s.number("upper_th", 0.8, 0, 1)
    if lower > upper:
        raise s.error(f"lower_th {lower} is above upper_th {upper}")
    return {"downsize": s.integer("downsize", 1, 1), "lower_th": lower, "upper_th": upper,
            "params_default": s.number("params_default", 0.0, -PLAIN, PLAIN), "prefix": _prefix(s)}


def _prefix(s: Spec) -> str:
    value = s.get("prefix", "")
    if not isinstance(value, str):
        raise PicPacTypeError(f"{s}: 'prefix' must be a string, got {value!r}")
    return value


def _priors(s: Spec) -> tuple[tuple[float, float], ...]:
    """PicPac's priors: a list of [width, height] pairs in pixels (aardvark's format)."""
    value = s.get("priors", [])
    if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence):
        raise PicPacTypeError(f"{s}: 'priors' must be a list of [width, height] pairs, got {value!r}")
    if len(value) > COUNT:
        raise s.error(f"'priors' must have at most {COUNT} pairs, got {len(value)}")
    out = []
    for prior in value:
        if isinstance(prior, (str, Mapping)) or not isinstance(prior, Sequence) or len(prior) != 2:
            raise PicPacTypeError(f"{s}: each prior must be a [width, height] pair, got {prior!r}")
        w, h = (s.value("priors", v, 0, MAX_SIDE) for v in prior)
        if w <= 0 or h <= 0:
            raise s.error(f"each prior must have width and height above 0, got {list(prior)!r}")
        out.append((w, h))
    return tuple(out)


_ANCHOR_KEYS = ("index", "downsize", "lower_th", "upper_th", "params_default", "weighted", "priors", "prefix")


@_builder("anchors.dense.box", *_ANCHOR_KEYS)
def _anchors_box(s: Spec, random: bool) -> Any:
    return DenseBoxAnchors(priors=_priors(s), **_anchor_keys(s))


def _no_priors(s: Spec) -> None:
    if _priors(s):
        raise s.unsupported("priors", f"several priors for {s.kind}; only anchors.dense.box has them")


@_builder("anchors.dense.circle", *_ANCHOR_KEYS)
def _anchors_circle(s: Spec, random: bool) -> Any:
    _no_priors(s)
    return DenseCircleAnchors(**_anchor_keys(s))


@_builder("anchors.dense.point", *_ANCHOR_KEYS)
def _anchors_point(s: Spec, random: bool) -> Any:
    _no_priors(s)
    return DensePointAnchors(**_anchor_keys(s))


@_builder("keypoints.basic", "index", "downsize", "classes", "radius", "prefix")
def _keypoints_basic(s: Spec, random: bool) -> Any:
    _annotation_index(s)
    return BasicKeypoints(downsize=s.integer("downsize", 1, 1), classes=s.integer("classes", 1, 1, COUNT),
                          radius=s.number("radius", 0.0, 0, MAX_SIDE), prefix=_prefix(s))


@_builder("box_feature", "index", "min_area", "max_boxes", "prefix")
def _box_feature(s: Spec, random: bool) -> Any:
    _annotation_index(s)
    return BoxFeature(min_area=s.number("min_area", 1.0, 0, MAX_SIDE**2),
                      max_boxes=s.integer("max_boxes", 0, 0, COUNT), prefix=_prefix(s))


# -- building -------------------------------------------------------------------------------------
_HSV_LIKE = {"BGR2HSV": ("HSV2BGR", "HSV"), "BGR2Lab": ("Lab2BGR", "Lab")}


def _plain_colorspace(spec: Any, code: str | None = None) -> bool:
    """Whether ``spec`` is a colorspace spec (with ``code``) and nothing else: no mul0/mul1 scaling."""
    return (isinstance(spec, Mapping) and spec.get("type") == "colorspace" and set(spec) <= {"type", "code", "mul0",
                                                                                            "mul1"}
            and spec.get("mul0", 1) == 1 and spec.get("mul1", 1) == 1 and (code is None or spec.get("code") == code))


def _fold_colorspace(specs: list) -> list:
    """PicPac's idiom colorspace BGR2HSV, augment.add..., colorspace HSV2BGR -> augment.add in HSV (same for Lab).

    Our AddColor converts by itself; left as three steps, the add would see an HSV image.
    """
    out, i = [], 0
    while i < len(specs):
        spec = specs[i]
        back = _HSV_LIKE.get(spec.get("code")) if _plain_colorspace(spec) else None
        j = i + 1
        while back and j < len(specs) and isinstance(specs[j], Mapping) and specs[j].get("type") == "augment.add" \
                and specs[j].get("colorspace") is None:
            j += 1
        if back and j > i + 1 and j < len(specs) and _plain_colorspace(specs[j], back[0]):
            out += [{**add, "colorspace": back[1]} for add in specs[i + 1:j]]
            i = j + 1
        else:
            out.append(spec)
            i += 1
    return out


def _build_one(spec: Any, random: bool, where: str) -> list:
    """The transforms of one spec: a callable as it is, a dict by its builder."""
    if not isinstance(spec, Mapping):
        if callable(spec):
            return [spec]
        raise PicPacTypeError(f"transform {where}: {spec!r} is neither a dict like {{'type': 'augment.flip'}} "
                              "nor a function (sample, rng) -> sample")
    kind = spec.get("type")
    if not isinstance(kind, str):
        raise PicPacValueError(f"transform {where}: a spec needs a 'type' string, got {dict(spec)!r}")
    supported = ", ".join(sorted(BUILDERS))
    if kind in UNSUPPORTED:
        raise PicPacValueError(f"transform {where}: PicPac type {kind!r} is not supported yet; "
                               f"supported types: {supported}")
    if kind not in BUILDERS:
        raise PicPacValueError(f"transform {where}: unknown type {kind!r}{_hint(kind, list(BUILDERS))}; "
                               f"supported types: {supported}")
    builder, keys = BUILDERS[kind]
    for key in spec:
        if key not in keys:
            raise PicPacValueError(f"transform {where}: unknown key {key!r} for type {kind!r}"
                                   f"{_hint(str(key), sorted(keys - {'type'}))}; its keys: "
                                   f"{', '.join(sorted(keys - {'type'}))}")
    built = builder(Spec(spec, kind, where), random)
    return list(built) if isinstance(built, list) else [built]


def build(specs: Sequence[Mapping | Callable] | Mapping | Callable | None, *, random: bool) -> list:
    """Transform objects for PicPac v2 transform specs (dicts) and callables, in order.

    ``random`` goes to every built transform that has a ``random`` field, nested ones included
    (False: each does its deterministic centre version). A spec may expand to several transforms
    (clip: pad, crop and round) or to none (a clip with nothing to do).
    """
    if specs is None:
        return []
    if isinstance(specs, Mapping) or callable(specs):
        specs = [specs]
    if isinstance(specs, str) or not isinstance(specs, Sequence):
        raise PicPacTypeError(f"transforms must be a list of specs or functions, got {specs!r}")
    out: list = []
    for i, spec in enumerate(_fold_colorspace(list(specs))):
        out += _build_one(spec, random, f"[{i}]")
    return out
