"""ImageStream's configuration: PicPac's key names, types, defaults and checks (docs/stream.md)."""
from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import PicPacTypeError, PicPacValueError, closest
from ..file.layout import MAX_FIELDS
from ..file.remote import (BLOCK_SIZE, CACHE_LIMIT, MAX_BLOCK, MAX_TIMEOUT, MIN_BLOCK, REMOTE_TIMEOUT, RETRIES,
                           RemoteOptions)
from ..file.sizes import parse_size
from ..image.decoding import MAX_PIXELS, MAX_SIDE
from .legacy import LEGACY_KEYS, translate

MAX_BATCH = 2**16
"""The largest ``batch`` and ``preload`` (samples made ahead)."""
MAX_WORKERS = 1024
MAX_SCALE = 16.0
"""The largest ``pert_min_scale`` / ``pert_max_scale``."""
MAX_CLASSES = 2**16
"""The largest ``onehot`` (classes) and ``max_boxes``."""
MAX_RANKS = 2**31 - 1
"""The largest ``world_size``."""
MAX_BATCH_BYTES = 2**34
"""The most one batch's arrays may take when the config fixes their shapes (16 GiB)."""


@dataclass(frozen=True)
class Key:
    """One config key: its default and a check that returns the normalised value or raises."""

    default: Any
    check: Callable[[str, Any], Any]


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, (bool, numbers.Integral)) and value in (0, 1):
        return bool(value)
    raise PicPacTypeError(f"config key {name!r} must be True or False, got {value!r}")


def _int(low: int | None = None, high: int | None = None) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise PicPacTypeError(f"config key {name!r} must be an int, got {value!r}")
        number = int(value)
        if (low is not None and number < low) or (high is not None and number > high):
            span = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise PicPacValueError(f"config key {name!r} must be {span}, got {value}")
        return number
    return check


def _workers(name: str, value: Any) -> int | str:
    """An int in [1, MAX_WORKERS], or 'auto' (workers.choose measures the count and the backend)."""
    if isinstance(value, str) and value.lower() == "auto":
        return "auto"
    if isinstance(value, str):
        raise PicPacTypeError(f"config key {name!r} must be an int in [1, {MAX_WORKERS}] or 'auto', got {value!r}")
    return _int(1, MAX_WORKERS)(name, value)


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PicPacTypeError(f"config key {name!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise PicPacValueError(f"config key {name!r} must be a finite number, got {value!r}")
    return float(value)


def _bounded(low: float, high: float) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        value = _float(name, value)
        if not low <= value <= high:
            raise PicPacValueError(f"config key {name!r} must be in [{low:g}, {high:g}], got {value:g}")
        return value
    return check


def _optional_int(low: int, high: int) -> Callable[[str, Any], int | None]:
    check = _int(low, high)
    return lambda name, value: None if value is None else check(name, value)


def _choice(*options: Any) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if not (value is None or isinstance(value, (str, numbers.Number))):  # (an array's == is an array)
            raise PicPacTypeError(f"config key {name!r} must be one of {', '.join(map(repr, options))}, "
                                  f"got {type(value).__name__} {value!r}")
        for option in options:
            if value == option or (isinstance(value, str) and isinstance(option, str)
                                   and value.upper() == option.upper()):
                return option
        raise PicPacValueError(f"config key {name!r} must be one of {', '.join(map(repr, options))}, "
                               f"got {value!r}")
    return check


def _path_or_none(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise PicPacTypeError(f"config key {name!r} must be a path, got {value!r}")
    return os.fspath(value) or None


def _size(low: int, high: int | None = None) -> Callable[[str, Any], int]:
    """Bytes, or a size such as "4GiB", in [low, high]."""
    def check(name: str, value: Any) -> int:
        size = parse_size(value, f"config key {name!r}")
        if size < low or (high is not None and size > high):
            raise PicPacValueError(f"config key {name!r} must be {low} to {high} bytes, got {value!r}")
        return size
    return check


def _storage_options(name: str, value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise PicPacTypeError(f"config key {name!r} must be a dict of fsspec options (such as "
                              f"{{'endpoint_url': ...}}), got {type(value).__name__}")
    return value


def _channel_values(name: str, value: Any) -> tuple[float, ...] | None:
    """None, one number for every channel, or one number per channel."""
    if value is None:
        return None
    values = [value] if isinstance(value, numbers.Real) and not isinstance(value, bool) else value
    try:
        result = tuple(_float(name, v) for v in values)
    except TypeError:
        raise PicPacTypeError(f"config key {name!r} must be a number or a list of numbers, got {value!r}") from None
    if not result:
        raise PicPacValueError(f"config key {name!r} is an empty list")
    if name == "std" and 0.0 in result:
        raise PicPacValueError(f"config key 'std' must not contain 0, got {value!r}")
    return result


def _transforms(name: str, value: Any) -> tuple:
    """A list of transforms: callables ``(sample, rng) -> sample`` or PicPac v2 dicts ``{"type": ...}``."""
    if value is None:
        return ()
    if callable(value) or isinstance(value, Mapping):
        value = [value]
    try:
        result = tuple(value)
    except TypeError:
        raise PicPacTypeError(f"config key {name!r} must be a list of transforms") from None
    for t in result:
        if not (callable(t) or isinstance(t, Mapping)):
            raise PicPacTypeError(f"config key {name!r}: {t!r} is neither a function (sample, rng) -> sample "
                                  "nor a PicPac transform dict like {'type': 'augment.flip'}")
    return result


def _timeout(name: str, value: Any) -> float | None:
    """None, or seconds > 0 (at most a day)."""
    if value is None:
        return None
    value = _float(name, value)
    if not 0 < value <= MAX_TIMEOUT:
        raise PicPacValueError(f"config key {name!r} must be None or seconds in (0, {MAX_TIMEOUT:g}], got {value:g}")
    return value


def _device(name: str, value: Any) -> str | None:
    """None, or a torch device: 'cuda', 'cuda:N' or 'cpu' (a ``torch.device`` is taken by its name)."""
    if value is None:
        return None
    text = str(value) if type(value).__name__ == "device" else value
    if isinstance(text, str) and re.fullmatch(r"cuda(:\d+)?|cpu", text.strip().lower()):
        return text.strip().lower()
    raise PicPacValueError(f"config key {name!r} must be None (NumPy batches made on the CPU), 'cuda', 'cuda:N' or "
                           f"'cpu' (torch tensors made by the device stage; `picpac docs gpu`), got {value!r}")


def _optional_bool(name: str, value: Any) -> bool | None:
    return None if value is None else _bool(name, value)


def _optional_float(name: str, value: Any) -> float | None:
    return None if value is None else _float(name, value)


def _field_index(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PicPacTypeError(f"config key {name!r}: a field index must be an int, got {value!r}")
    index = int(value)
    if not 0 <= index < MAX_FIELDS:
        raise PicPacValueError(f"config key {name!r}: field index {value} is not in [0, {MAX_FIELDS})")
    return index


def _field(name: str, value: Any) -> str | int:
    """A field of the record: its name, or PicPac's field number (the record's k-th field)."""
    if isinstance(value, str):
        if not value:
            raise PicPacValueError(f"config key {name!r} must name a field, got ''")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PicPacTypeError(f"config key {name!r} must be a field name (str) or a field index (int), got {value!r}")
    return _field_index(name, value)


def _optional_field(name: str, value: Any) -> str | int | None:
    return None if value is None else _field(name, value)


ANNOTATE = ("json", "image", "auto", "any")


def _annotate(name: str, value: Any) -> str | None:
    """None, 'json', 'image', 'auto' (the image itself is the target) or 'any' (JSON or an image, told by
    the field's first byte); 'none' and '' are None. PicPac's True and [k] are translated first (legacy.py)."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        if value.lower() in ("", "none"):
            return None
        if value.lower() in ANNOTATE:
            return value.lower()
    raise PicPacValueError(f"config key 'annotate' must be one of None, 'json', 'image', 'auto', 'any', 'none', "
                           f"True/False or a list of field indices like [1], got {value!r}")


def _fields(name: str, value: Any) -> tuple:
    """PicPac v2's ``raw``: field indices (or names) returned as bytes."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return tuple(v if isinstance(v, str) and v else _field_index(name, v) for v in items)


def _anno_type(name: str, value: Any) -> int | None:
    """An OpenCV matrix type (CV_8UC1 = 0, CV_32FC1 = 5, CV_8UC3 = 16, ...): 1-4 channels, depth 8U..64F."""
    if value is None:
        return None
    value = _int(0, 8 * 4 - 1)(name, value)
    if value & 7 == 7:
        raise PicPacValueError(f"config key {name!r}: OpenCV type {value} (16-bit float) is not supported")
    return value


def _optional_radius(name: str, value: Any) -> float | None:
    return None if value is None else _bounded(0, MAX_SIDE)(name, value)


BORDER_TYPES = {0: "constant", 1: "replicate", 2: "reflect", 3: "wrap", 4: "reflect"}
"""PicPac's pert_border (OpenCV's border types) as our border names (REFLECT and REFLECT_101: 'reflect')."""


def _border(name: str, value: Any) -> str:
    if isinstance(value, str) and value.lower() in BORDER_TYPES.values():
        return value.lower()
    if not isinstance(value, bool) and isinstance(value, numbers.Real) and value in BORDER_TYPES:
        return BORDER_TYPES[int(float(value))]  # a Real equal to a key: an int of it
    raise PicPacValueError(f"config key {name!r} must be an OpenCV border type 0-4 or one of "
                           f"'constant', 'replicate', 'reflect', 'wrap', got {value!r}")


def key(default: Any, check: Callable[[str, Any], Any]) -> Any:
    """A config key's field: its default and the check that returns its normalised value or raises."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True)
class Order:
    """Which samples in what order, in what batches, on which rank (docs/stream.md)."""

    seed: int = key(2016, _int(0, 2**63 - 1))
    loop: bool = key(True, _bool)
    shuffle: bool = key(True, _bool)
    reshuffle: bool = key(True, _bool)
    shuffle_chunk: int = key(0, _int(0, 2**31 - 1))
    shuffle_window: int = key(8, _int(1, 2**31 - 1))
    batch: int = key(1, _int(1, MAX_BATCH))
    pad: bool = key(False, _bool)
    rank: int | None = key(None, _optional_int(0, MAX_RANKS - 1))
    world_size: int | None = key(None, _optional_int(1, MAX_RANKS))
    share_pad: bool = key(True, _bool)


@dataclass(frozen=True)
class Parallelism:
    """How the work runs: the executor, its workers, how far ahead, and what it does with failures."""

    workers: int | str | None = key(None, _workers)
    preload: int | None = key(None, _int(1, MAX_BATCH))
    backend: str = key("thread", _choice("thread", "process"))
    device: str | None = key(None, _device)
    start_method: str = key("spawn", _choice("spawn", "fork"))
    copy: bool = key(True, _bool)
    vectorize: bool | None = key(None, _optional_bool)
    profile: bool = key(False, _bool)
    cache: bool = key(False, _bool)
    skip_errors: bool = key(False, _bool)
    timeout: float | None = key(None, _timeout)


@dataclass(frozen=True)
class Split:
    """Which records form the pool: a fold of the database, plus the mixin's."""

    split: int = key(1, _int(1, 2**31 - 1))
    split_fold: int = key(0, _int(0, 2**31 - 2))
    split_negate: bool = key(False, _bool)
    stratify: bool = key(False, _bool)
    oversample: bool = key(False, _bool)
    mixin: str | None = key(None, _path_or_none)
    mixin_group_reset: float = key(-1.0, _float)
    mixin_group_delta: float = key(0.0, _float)
    mixin_max: int = key(0, _int(0))
    mixin_randomize: bool = key(False, _bool)


@dataclass(frozen=True)
class Remote:
    """Files on object storage (s3://, gs://, http(s)://: docs/stream.md, "Object storage")."""

    cache_dir: str | None = key(None, _path_or_none)
    cache_limit: int = key(CACHE_LIMIT, _size(1))
    storage_options: dict[str, Any] | None = key(None, _storage_options)
    remote_retries: int = key(RETRIES, _int(0, 100))
    remote_block_size: int = key(BLOCK_SIZE, _size(MIN_BLOCK, MAX_BLOCK))


@dataclass(frozen=True)
class Decode:
    """What a record's fields become: the image (and raw fields), and its annotation."""

    image_field: str | int = key("image", _field)
    raw: tuple = key((), _fields)
    channels: int = key(3, _choice(1, 3, -1))
    reduced_decode: bool = key(True, _bool)
    region_decode: bool = key(True, _bool)
    fused: bool = key(True, _bool)
    max_pixels: int = key(MAX_PIXELS, _int(0))
    annotate: str | None = key(None, _annotate)
    annotation_field: str | int | None = key(None, _optional_field)


@dataclass(frozen=True)
class Augment:
    """The geometry and the random steps: sizes, PicPac's pert_* keys, crops, ``transforms``."""

    resize_width: int = key(0, _int(0, MAX_SIDE))
    resize_height: int = key(0, _int(0, MAX_SIDE))
    resize_shorter: int = key(0, _int(0, MAX_SIDE))
    min_size: int = key(0, _int(0, MAX_SIDE))
    max_size: int = key(0, _int(0, MAX_SIDE))
    crop_width: int = key(0, _int(0, MAX_SIDE))
    crop_height: int = key(0, _int(0, MAX_SIDE))
    round_div: int = key(0, _int(0, MAX_SIDE))
    round_mod: int = key(0, _int(0, MAX_SIDE))
    anno_min_ratio: float = key(0.0, _bounded(0, 1))
    perturb: bool | None = key(None, _optional_bool)
    pert_color1: float = key(0.0, _bounded(-255, 255))
    pert_color2: float = key(0.0, _bounded(-255, 255))
    pert_color3: float = key(0.0, _bounded(-255, 255))
    pert_colorspace: str = key("BGR", _choice("BGR", "RGB", "HSV", "Lab", "SAME"))
    pert_angle: float = key(0.0, _bounded(-360, 360))
    pert_min_scale: float = key(1.0, _bounded(0, MAX_SCALE))
    pert_max_scale: float = key(1.0, _bounded(0, MAX_SCALE))
    pert_hflip: bool = key(False, _bool)
    pert_vflip: bool = key(False, _bool)
    pert_border: str = key("constant", _border)
    transforms: tuple = key((), _transforms)


@dataclass(frozen=True)
class Output:
    """The batch's arrays: the task and its targets, the images' layout, type and normalisation."""

    task: str | None = key(None, _choice(None, "classify", "segment", "detect", "keypoints"))
    order: str = key("NCHW", _choice("NCHW", "NHWC"))
    dtype: str = key("float32", _choice("float32", "uint8"))
    colorspace: str = key("RGB", _choice("RGB", "BGR"))
    mean: tuple[float, ...] | None = key(None, _channel_values)
    std: tuple[float, ...] | None = key(None, _channel_values)
    value_range: str = key("0-255", _choice("0-255", "0-1"))
    onehot: int = key(0, _int(0, MAX_CLASSES))
    label_dtype: str = key("float32", _choice("float32", "int64", "int32"))
    anno_type: int | None = key(None, _anno_type)
    anno_color1: float | None = key(None, _optional_float)
    anno_color2: float | None = key(None, _optional_float)
    anno_color3: float | None = key(None, _optional_float)
    anno_thickness: int = key(-1, _int(-1, MAX_SIDE))
    anno_copy: bool = key(False, _bool)
    point_radius: float | None = key(None, _optional_radius)
    min_box_area: float = key(1.0, _float)
    max_boxes: int = key(0, _int(0, MAX_CLASSES))
    dump: int = key(0, _int(0, MAX_BATCH))
    v2: bool | None = key(None, _optional_bool)


GROUPS = {"order": Order, "parallelism": Parallelism, "split": Split, "remote": Remote, "decode": Decode,
          "augment": Augment, "output": Output}
"""StreamConfig's groups by attribute name."""
GROUP_OF = {f.name: group for group, cls in GROUPS.items() for f in fields(cls)}
"""Every config key's group."""
KEYS: dict[str, Key] = {f.name: Key(f.default, f.metadata["check"]) for cls in GROUPS.values() for f in fields(cls)}
"""Every config key: its default and its check."""
ALIASES = {"threads": "workers"}
"""Other names of a key that ``config[name]`` reads (PicPac's ``threads``: legacy.translate)."""
LEGACY = LEGACY_KEYS
"""PicPac's keys that are turned into others (legacy.translate; `picpac docs stream`, "PicPac's configs")."""


@dataclass(frozen=True)
class StreamConfig(Mapping):
    """A stream's whole configuration, checked, in groups (``config.order.batch``, ``config.output.dtype``).

    ``StreamConfig.from_dict(keys)`` is the way in from keyword arguments (PicPac's keys included); ImageStream
    and the adapters take a StreamConfig as it is. Each component receives the groups it needs. It is also a
    read-only mapping of every key by its flat name (``config["batch"]``), as PicPac's configs name them.
    """

    order: Order = field(default_factory=Order)
    parallelism: Parallelism = field(default_factory=Parallelism)
    split: Split = field(default_factory=Split)
    remote: Remote = field(default_factory=Remote)
    decode: Decode = field(default_factory=Decode)
    augment: Augment = field(default_factory=Augment)
    output: Output = field(default_factory=Output)
    given: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The keys it was made from (translated to ours; read, do not change), to make it again with some changed."""

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> StreamConfig:
        """Every key checked (defaults filled in); unknown keys raise, naming the closest one."""
        given = translate(config)
        unknown = [name for name in given if name not in KEYS]
        if unknown:
            name = unknown[0]
            close = closest(name, [*KEYS, *LEGACY])
            hint = f"; did you mean {close!r}?" if close else "; see `picpac docs stream` for the keys"
            raise PicPacValueError(f"unknown config key {name!r}{hint}")
        values = {name: k.default for name, k in KEYS.items()}
        for name, value in given.items():  # (None is every None default's "unset")
            if not (value is None and values[name] is None):
                values[name] = KEYS[name].check(name, value)
        _check_together(values)
        return cls(**{group: kind(**{f.name: values[f.name] for f in fields(kind)}) for group, kind in GROUPS.items()},
                   given=given)

    def replace(self, **keys: Any) -> StreamConfig:
        """This config with ``keys`` set (checked again, with the keys it was made from)."""
        return StreamConfig.from_dict({**self.given, **keys})

    def __getitem__(self, name: str) -> Any:
        name = ALIASES.get(name, name)
        return getattr(getattr(self, GROUP_OF[name]), name)

    def __iter__(self) -> Iterator[str]:
        return iter(KEYS)

    def __len__(self) -> int:
        return len(KEYS)

    def remote_options(self) -> RemoteOptions:
        """How files on object storage are read: the ``remote`` keys, and ``timeout`` bounding each request."""
        r, timeout = self.remote, self.parallelism.timeout
        return RemoteOptions(cache_dir=r.cache_dir, cache_limit=r.cache_limit, block_size=r.remote_block_size,
                             retries=r.remote_retries, storage_options=r.storage_options or {},
                             timeout=timeout or REMOTE_TIMEOUT)

    def to_dict(self) -> dict[str, Any]:
        """Every key by its flat name."""
        return dict(self)


def _check_together(c: dict[str, Any]) -> None:
    _check_ranks(c)
    if c["split_fold"] >= c["split"] > 1:
        raise PicPacValueError(f"config key 'split_fold' must be < split={c['split']}, got {c['split_fold']}")
    if c["round_div"] and not 0 <= c["round_mod"] < c["round_div"]:
        raise PicPacValueError(f"config key 'round_mod' must be in [0, round_div={c['round_div']}), "
                               f"got {c['round_mod']}")
    if c["round_mod"] and not c["round_div"]:
        raise PicPacValueError("config key 'round_mod' needs 'round_div' > 0")
    if c["dtype"] == "uint8" and (c["mean"] or c["std"]):
        raise PicPacValueError("config keys 'mean'/'std' need dtype='float32' (normalised values are not uint8)")
    if c["dtype"] == "uint8" and c["value_range"] != "0-255":
        raise PicPacValueError(f"config key 'value_range' ({c['value_range']!r}) needs dtype='float32'")
    if c["annotation_field"] is not None:
        if c["annotate"] is None:
            c["annotate"] = "any"
        elif c["annotate"] == "auto":
            raise PicPacValueError(f"config key 'annotation_field' ({c['annotation_field']!r}) with annotate='auto': "
                                   "'auto' makes the image itself the target and reads no annotation field")
    if c["task"] is None:
        c["task"] = "classify" if c["annotate"] is None else "segment"
    if c["task"] in ("detect", "keypoints") and c["annotate"] in ("image", "auto"):
        raise PicPacValueError(f"task={c['task']!r} needs vector annotations (annotate='json'), "
                               f"not annotate={c['annotate']!r}")
    if c["resize_shorter"] and (c["resize_width"] or c["resize_height"]):
        raise PicPacValueError(f"config key 'resize_shorter' ({c['resize_shorter']}) with 'resize_width'/"
                               "'resize_height': give the shorter side, or the width and/or height, not both")
    for side in ("width", "height"):
        crop, resize = c[f"crop_{side}"], c[f"resize_{side}"]
        if crop > resize > 0:
            extent = "wide" if side == "width" else "high"
            raise PicPacValueError(f"config key 'crop_{side}' ({crop}) exceeds 'resize_{side}' ({resize}): every "
                                   f"image is {resize} pixels {extent} before the crop, so the crop would only add "
                                   f"padding (PicPac refuses it too); lower crop_{side} or raise resize_{side}")
    if c["task"] in ("detect", "keypoints", "segment") and c["annotate"] is None:
        c["annotate"] = "json"
    if c["pert_min_scale"] > c["pert_max_scale"] or c["pert_min_scale"] <= 0:
        raise PicPacValueError(f"config keys 'pert_min_scale' ({c['pert_min_scale']}) and 'pert_max_scale' "
                               f"({c['pert_max_scale']}) must satisfy 0 < min <= max")
    if c["max_size"] and c["min_size"] > c["max_size"]:
        raise PicPacValueError(f"config key 'min_size' ({c['min_size']}) exceeds 'max_size' ({c['max_size']})")
    for name in ("mean", "std"):
        if c[name] is not None and c["channels"] != -1 and len(c[name]) not in (1, c["channels"]):
            raise PicPacValueError(f"config key {name!r} has {len(c[name])} values for channels={c['channels']}: "
                                   f"give 1 or {c['channels']}")
    _check_output_size(c)
    _check_device(c)


RANK_VARIABLES = ("RANK", "WORLD_SIZE")
"""The environment variables that give ``rank`` and ``world_size`` when the config leaves them None (both
must be set, as torchrun and most launchers set them)."""


def _check_ranks(c: dict[str, Any]) -> None:
    """``rank`` and ``world_size``: given, else from RANK and WORLD_SIZE when both are set, else 0 and 1;
    then 0 <= rank < world_size."""
    where = {"rank": "", "world_size": ""}
    if c["rank"] is None or c["world_size"] is None:
        if all(name in os.environ for name in RANK_VARIABLES):
            for key, variable, low in zip(("rank", "world_size"), RANK_VARIABLES, (0, 1)):
                if c[key] is not None:
                    continue
                text = os.environ[variable]
                try:
                    value = int(text.strip())
                except ValueError:
                    raise PicPacValueError(f"config key {key!r} is None, so it comes from the environment variable "
                                           f"{variable}, but {variable}={text!r} is not an int") from None
                if not low <= value <= MAX_RANKS - 1 + low:
                    raise PicPacValueError(f"config key {key!r} is None, so it comes from the environment variable "
                                           f"{variable}, but {variable}={value} is not in [{low}, {MAX_RANKS - 1 + low}]")
                c[key], where[key] = value, f" (from the environment variable {variable})"
    if c["world_size"] is None:
        c["world_size"] = 1
    if c["rank"] is None:
        c["rank"] = 0
    if c["rank"] >= c["world_size"]:
        raise PicPacValueError(f"config key 'rank' must be in [0, world_size={c['world_size']}{where['world_size']}), "
                               f"got {c['rank']}{where['rank']}")


def _check_output_size(c: dict[str, Any]) -> None:
    """Outputs of a size the config fixes stay within max_pixels per image and MAX_BATCH_BYTES per batch."""
    shape = None
    for kind in ("crop", "resize"):
        width, height = c[f"{kind}_width"], c[f"{kind}_height"]
        if c["max_pixels"] and width * height > c["max_pixels"]:
            raise PicPacValueError(f"config keys '{kind}_width' x '{kind}_height' ({width} x {height}) exceed "
                                   f"max_pixels={c['max_pixels']:,}")
        if shape is None and width and height:
            shape = height, width
    itemsize = 1 if c["dtype"] == "uint8" else 4
    per_sample = 4 * (c["onehot"] + 5 * c["max_boxes"])
    if shape is not None:
        pixels = shape[0] * shape[1]
        per_sample += pixels * (4 if c["channels"] == -1 else c["channels"]) * itemsize
        if c["task"] == "segment":
            per_sample += pixels * max(c["onehot"], 1) * 4
    if c["batch"] * per_sample > MAX_BATCH_BYTES:
        raise PicPacValueError(f"config key 'batch' ({c['batch']}) with this output size makes batches of "
                               f"{c['batch'] * per_sample / 2**30:,.1f} GiB (more than {MAX_BATCH_BYTES >> 30} GiB): "
                               "lower 'batch' or the output size")


def _check_device(c: dict[str, Any]) -> None:
    """The keys the device stage cannot follow, named with what to do instead."""
    if c["device"] is None:
        return
    refused = {"backend": c["backend"] == "process" and "the device stage plans on threads of this process",
               "channels": c["channels"] == -1 and "the device stage makes 1 or 3 channels",
               "vectorize": c["vectorize"] and "the batch path makes NumPy batches",
               "annotate": c["annotate"] == "auto" and "the autoencoder target is made by the CPU path"}
    for key_name, why in refused.items():
        if why:
            raise PicPacValueError(f"config key {key_name!r} ({c[key_name]!r}) with device={c['device']!r}: {why}; "
                                   f"leave {key_name!r} at its default, or device out (NumPy batches)")
