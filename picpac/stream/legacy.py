"""PicPac's own config keys, from its legacy (2016-2018) and v2 (2018-2022) APIs, turned into ours.

``translate(config)`` returns the config with every PicPac key that has a key of its own here
replaced by it (``bgr2rgb`` -> ``colorspace``, ``mean_color1..3`` -> ``mean``, ...), PicPac's
"unset" values (``-1`` sizes, ``channels=0``, ``threads=0``) turned into ours, and the keys that
cannot apply here (C++-only or drawing-only settings) dropped with a warning, once per key per
process. docs/stream.md ("PicPac's configs") lists each key and what it becomes.
"""
from __future__ import annotations

import numbers
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any


from ..errors import PicPacTypeError, PicPacValueError
from ..image.color import AddColor, SameColor
from ..image.transforms import Affine, Crop, Flip, RoundSize

if TYPE_CHECKING:
    from .config import Augment


class PicPacConfigWarning(UserWarning):
    """A PicPac config key that is accepted but has no effect here (or means something slightly else)."""


NO_OPS = {
    "anno_palette": "PicPac's palette only coloured mask indices for looking at them",
    "anno_number": "PicPac printed each shape's index on the rasterized annotation, for looking at it",
    "split_keys": "PicPac's C++-only list of folds; use split, split_fold and split_negate",
}
"""Keys accepted and ignored, each with why (warned about once per process)."""

_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """One visible warning per key per process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"picpac: config key {key!r}: {message}", PicPacConfigWarning, stacklevel=4)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


UNSET_BELOW_ONE = ("resize_width", "resize_height", "crop_width", "crop_height", "min_size", "max_size")
"""PicPac's sizes, where any value <= 0 (its default -1) means "not set" (our 0)."""


def _decode_mode(flag: Any) -> int:
    """cv2.imread's flag as channels: -1 (IMREAD_UNCHANGED) or ANYCOLOR: as stored; a COLOR bit: 3; else 1."""
    if not _is_int(flag):
        raise PicPacTypeError(f"config key 'decode_mode' must be an OpenCV imread flag (an int), got {flag!r}")
    if flag < 0 or flag & 4:
        return -1
    return 3 if flag & 1 else 1


def _mean_colors(given: dict[str, Any]) -> tuple[float, ...]:
    """PicPac's mean_color1..3, subtracted from the decoded channels in OpenCV's order (B, G, R;
    before its bgr2rgb swap), as our ``mean`` in output channel order."""
    values = [given.pop(f"mean_color{i}", 0.0) for i in (1, 2, 3)]
    for i, v in enumerate(values, 1):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise PicPacTypeError(f"config key 'mean_color{i}' must be a number, got {v!r}")
    if _is_int(given.get("channels")) and given["channels"] == 1:
        return (float(values[0]),)
    colorspace = given.get("colorspace", "RGB")
    rgb = isinstance(colorspace, str) and colorspace.upper() == "RGB"
    return tuple(float(v) for v in (values[::-1] if rgb else values))


def _negate(value: Any) -> dict[str, Any]:
    warn_once("negate", "read as split_negate (PicPac's README writes negate=, which PicPac itself ignored)")
    return {"split_negate": value}


def _multi_images(value: Any) -> dict[str, Any]:
    if value is None or (isinstance(value, numbers.Real) and value in (0, 1)):
        return {}
    raise PicPacValueError(f"config key 'multi_images' ({value!r}): PicPac's MultiImageStream (several images "
                           "per record) is not supported; ImageStream streams one image per record")


def _one_field(key: str, value: Any) -> Any:
    """PicPac v2's list of field indices (or one index), of which one is supported; None for []."""
    if isinstance(value, (list, tuple)):
        if len(value) > 1:
            raise PicPacValueError(f"config key {key!r}: {list(value)} names several fields; one is supported")
        value = value[0] if value else None
    if value is not None and not _is_int(value):
        raise PicPacTypeError(f"config key {key!r}: a field index must be an int, got {value!r}")
    return value


def _images(value: Any) -> dict[str, Any]:
    """PicPac v2's ``images=[k]``: ``image_field=k``; ``[0]``, ``0`` and ``[]``: the default, the 'image' field."""
    field = _one_field("images", value)
    return {} if field is None or field == 0 else {"image_field": field}


def _annotate(value: Any) -> dict[str, Any]:
    """PicPac v2's ``annotate=[k]``: ``annotate='any', annotation_field=k`` (JSON or an image, told by its
    first byte); True is [1] (2018), [0] 'auto' (the image itself is the target), [] None. Other values
    ('json', 'image', ...) stay as they are."""
    if value is True:
        value = [1]
    if not (isinstance(value, (list, tuple)) or _is_int(value)):
        return {"annotate": value}
    field = _one_field("annotate", value)
    if field is None:
        return {"annotate": None}
    if field == 0:
        return {"annotate": "auto"}
    return {"annotate": "any", "annotation_field": field}


RENAMED: dict[str, Callable[[Any], dict[str, Any]]] = {
    "shard_pad": lambda value: {"share_pad": value},  # its name before a rank's part of an epoch was its share
    "negate": _negate,
    "multi_images": _multi_images,
    "images": _images,
    "annotate": _annotate,
}


def translate(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with PicPac's keys and values as ours (see the module's docstring)."""
    given = dict(config)
    for key, why in NO_OPS.items():
        if key in given:
            given.pop(key)
            warn_once(key, f"accepted and ignored: {why}")
    for old, rename in RENAMED.items():
        if old in given:
            new = rename(given.pop(old))
            for key in new:
                if key in given:
                    raise PicPacValueError(f"config keys {old!r} ({config[old]!r}) and {key!r} both given; use only "
                                           f"{key!r}" + (" (with annotate='any')" if key == "annotation_field" else ""))
            given.update(new)
    for key in UNSET_BELOW_ONE:
        if _is_int(given.get(key)) and given[key] < 0:
            given[key] = 0
    for key in ("threads", "preload"):  # PicPac's 0: its default
        if _is_int(given.get(key)) and given[key] == 0:
            del given[key]
    if "threads" in given:  # PicPac's name of ``workers``
        threads = given.pop("threads")
        if given.get("workers") is not None and threads is not None and threads != given["workers"]:
            raise PicPacValueError(f"config keys 'threads' ({threads}) and 'workers' ({given['workers']}) are two "
                                   "names of one count (PicPac's and the backend-neutral one); give one")
        if given.get("workers") is None:
            given["workers"] = threads
    if _is_int(given.get("channels")) and given["channels"] == 0:  # legacy: 0 = as stored
        given["channels"] = -1
    if "decode_mode" in given:  # PicPac decodes with it, then converts to `channels` when that is set
        mode = _decode_mode(given.pop("decode_mode"))
        if given.get("channels", -1) is not None and _is_int(given.get("channels", -1)) \
                and given.get("channels", -1) == -1:
            given["channels"] = mode
    if isinstance(given.get("pert_colorspace"), str) and given["pert_colorspace"] == "":
        given["pert_colorspace"] = "BGR"
    for old, key, yes, no in (("bgr2rgb", "colorspace", "RGB", "BGR"), ("channel_first", "order", "NCHW", "NHWC")):
        if old in given:
            value = given.pop(old)
            if not (isinstance(value, (bool, numbers.Integral)) and value in (0, 1)):
                raise PicPacTypeError(f"config key {old!r} must be True or False, got {value!r}")
            if key in given:
                raise PicPacValueError(f"config keys {old!r} and {key!r} both given; use only the latter")
            given[key] = yes if value else no
    if any(f"mean_color{i}" in given for i in (1, 2, 3)):
        if "mean" in given:
            raise PicPacValueError("config keys 'mean_color1..3' and 'mean' both given; use only 'mean'")
        means = _mean_colors(given)
        if any(means):
            given["mean"] = means
    return given


def is_v2(given: Mapping[str, Any]) -> bool:
    """Whether a PicPac dict config (``ImageStream({"db": ...})``) is written in PicPac v2's vocabulary, whose
    batches are ``[meta, images, ...]``: ``images``, ``annotate`` as v2 writes it (a list of field numbers, or
    True), or ``transforms`` as v2's dicts (``{"type": "resize", ...}``). The key ``v2`` says it outright."""
    if given.get("v2") is not None:
        return bool(given["v2"])
    annotate = given.get("annotate")
    transforms = given.get("transforms")
    return "images" in given or annotate is True or isinstance(annotate, (list, tuple)) or \
        isinstance(transforms, (list, tuple)) and any(isinstance(t, Mapping) for t in transforms)


def with_v2_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with PicPac v2's defaults (NHWC; uint8, unless a ``mean`` or ``std`` asks for normalised values) and
    ``v2=True`` where it is written in v2's vocabulary (:func:`is_v2`), else as it is."""
    if not is_v2(given):
        return dict(given)
    dtype = {} if given.get("mean") is not None or given.get("std") is not None else {"dtype": "uint8"}
    return {"order": "NHWC", **dtype, **given, "v2": True}


LEGACY_KEYS = ("threads", "bgr2rgb", "channel_first", "decode_mode", "mean_color1", "mean_color2", "mean_color3",
               *NO_OPS, *RENAMED)
"""Every PicPac key that translate() turns into another (for typo suggestions)."""


def perturbation(a: Augment) -> list:
    """PicPac's perturb/pert_* keys and the crop/round keys as steps, in PicPac's order."""
    steps: list = []
    if a.perturb:
        if a.pert_angle or (a.pert_min_scale, a.pert_max_scale) != (1.0, 1.0):
            steps.append(Affine(rotate=a.pert_angle, scale=(a.pert_min_scale, a.pert_max_scale), border=a.pert_border))
        if a.pert_hflip or a.pert_vflip:
            steps.append(Flip(horizontal=0.5 * a.pert_hflip, vertical=0.5 * a.pert_vflip))
        colors = (abs(a.pert_color1), abs(a.pert_color2), abs(a.pert_color3))
        if a.pert_colorspace == "SAME":
            if colors[0]:
                steps.append(SameColor(colors[0]))
        elif any(colors):
            steps.append(AddColor(colors, colorspace=a.pert_colorspace))
    if a.crop_width or a.crop_height:
        steps.append(Crop(a.crop_width, a.crop_height, random=bool(a.perturb)))
    if a.round_div:
        steps.append(RoundSize(a.round_div, a.round_mod, random=bool(a.perturb)))
    return steps
