"""Target ``config``: ImageStream and ImageLoader configs with random keys and values.

A case's bytes choose a valid base config (classification, detection, segmentation with a mask image,
the batch path of an array database, PicPac's legacy keys) and then 0 to 5 edits, each a key (every
config key, PicPac's legacy ones, typos, unknown names) and a value from a pool: plain and boundary
numbers, NaN and infinities, huge ints, strings, lists, dicts, bytes, NumPy scalars and arrays,
complex and Fraction numbers, callables, transform specs (every v2 type with random parameters).
Bytes decode to a config deterministically, so any bytes are a case (as atheris gives them).

The contract: ``StreamConfig.from_dict`` raises PicPacTypeError or PicPacValueError for a bad config; a parsed
one gives an ImageLoader batch and a first ImageStream batch (thread backend; a process one is left
out for speed), or a PicPacError; nothing else, no hang.
"""
from __future__ import annotations

import json
import os
import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import cv2
import numpy as np

import picpac
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.image.specs import BUILDERS
from picpac.stream.config import KEYS, LEGACY, StreamConfig

from .common import Target, attempt, check, outcome, scratch
from .mutate import mutate

_DBS: dict[str, str] = {}
_PNG: list[bytes] = []

BASES = [
    {},
    {"batch": 4, "loop": False, "resize_width": 16, "resize_height": 12, "shuffle": False},
    {"batch": 2, "annotate": "json", "task": "detect", "pert_angle": 10.0, "perturb": True},
    {"batch": 2, "annotate": "image", "task": "segment", "onehot": 3, "order": "NHWC"},
    {"batch": 3, "task": "keypoints", "max_boxes": 4, "channels": 1, "dtype": "uint8"},
    {"batch": 4, "split": 2, "split_fold": 1, "stratify": True, "mean": [1, 2, 3], "std": 2.0, "onehot": 3},
    {"batch": 2, "bgr2rgb": True, "channel_first": False, "crop_width": 8, "crop_height": 8, "perturb": True},
    {"batch": 4, "transforms": [{"type": "augment.flip", "horizontal": True}, {"type": "augment.add", "range": 10}]},
    {"batch": 2, "mixin": "@images", "mixin_max": 2, "mixin_group_reset": 5.0},
]
"""Valid configs; ``@images`` stands for the image database's path."""


def _spec(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(sorted(BUILDERS) + ["clip_square", "nope", ""])
    keys = sorted(BUILDERS[kind][1] - {"type"}) if kind in BUILDERS else ["x"]
    spec: dict[str, Any] = {"type": kind}
    for key in rng.sample(keys, min(len(keys), rng.randint(0, 3))):
        if key == "transforms" and depth < 2:
            spec[key] = [_spec(rng, depth + 1) for _ in range(rng.randint(0, 2))]
        else:
            spec[key] = rng.choice(NUMBERS + (None, True, "constant", "reflect", "BGR2HSV", [1, 2], [2, 1], [[4, 4]],
                                              [0, 0, 0], "x", [-1, 5]))
    return spec


NUMBERS = (0, 1, -1, 2, 3, 4, 7, 8, 16, 255, 1000, 2**31, 2**63, 2**64, -(2**63), 0.0, -0.0, 0.5, 1.5, -2.5, 1e-9,
           1e9, 1e300, float("nan"), float("inf"), float("-inf"))


def _identity(sample, rng):
    return sample


def _values(rng: random.Random) -> list:
    return [None, True, False, *NUMBERS, "", "x", "RGB", "BGR", "json", "image", "NCHW", "nhwc", "float32", "uint8",
            "thread", "process", "fork", "detect", "segment", "HSV", "Lab", [], [1], [1, 2, 3], [0.5, "a"], [[1]], {},
            {"type": "augment.flip"}, b"bytes", np.int64(3), np.float32(2.5), np.bool_(True), np.array([1, 3]),
            np.array(2), np.uint8(255), np.float64("nan"), 1 + 2j, Fraction(1, 3), Decimal("2"), Decimal("NaN"),
            object(), _identity, [_identity], "@images", "@arrays", "@missing", "@dir", "@text",
            [_spec(rng) for _ in range(rng.randint(1, 3))], _spec(rng)]


_INTS = (0, 1, 2, 3, 4, 5, 8, 16, 31, 100, 1000, 2**16, 2**20, 2**31, 2**40, 2**63 - 1, 2**63, -1, -2, np.int64(4),
         np.uint8(3), True, 2.0, 1.5)
_FLOATS = (0.0, -0.0, 0.5, 1.0, 2.0, -1.0, 90.0, 1e-300, 1e300, -1e300, float("nan"), float("inf"), float("-inf"), 7,
           np.float32(0.5), np.float64("nan"), Fraction(1, 2), Decimal("1.5"), "1.0", None)


def _typed(name: str, rng: random.Random) -> list:
    """Values of the key's own type, boundary ones first: what reaches the code past the checks."""
    kind = KEYS[name].check.__qualname__ if name in KEYS else ""
    if kind.startswith("_int"):
        return list(_INTS)
    if "float" in kind:
        return list(_FLOATS)
    if "bool" in kind:
        return [True, False, 0, 1, 2, None, np.bool_(True), "yes"]
    if kind == "_channel_values":
        return [[0.5, 0.5, 0.5], [1, 2], [0], [float("nan")] * 3, [1e300] * 3, 255, [np.float32(2)] * 3, "abc", [[1]]]
    if kind == "_transforms":
        return [[_spec(rng) for _ in range(rng.randint(1, 3))] for _ in range(6)] + [_spec(rng), [_identity]]
    if kind == "_path_or_none":
        return ["@images", "@arrays", "@missing", "@dir", "@text", "", None, 5]
    if name == "channels":
        return [1, 3, -1, 0, 2, 4, np.array([1, 3]), np.int64(3), 3.0, "3"]
    cells = getattr(getattr(KEYS.get(name), "check", None), "__closure__", None) or ()
    options = [o for cell in cells if isinstance(cell.cell_contents, tuple) for o in cell.cell_contents]
    return options + [None, "", "x", "rgb", np.array(["a", "b"]), np.array([1, 3])]


_NAMES = sorted(KEYS) + sorted(LEGACY) + ["threds", "Batch", "db", "", "resize", "annotation", "x" * 300, "pert_angle "]


class _Bytes:
    """Choices read from the case's bytes (zeros past the end): any bytes are a config."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> int:
        value = int.from_bytes(self.data[self.at:self.at + 2].ljust(2, b"\0"), "little")
        self.at += 2
        return value % n


def decode_config(data: bytes) -> tuple[str, dict[str, Any]]:
    """(database, config) chosen by ``data``."""
    b = _Bytes(data)
    config = dict(BASES[b.take(len(BASES))])
    db = "@arrays" if b.take(4) == 0 else "@images"
    for _ in range(b.take(6)):
        name = _NAMES[b.take(len(_NAMES))]
        if b.take(8) == 0:
            config.pop(name, None)
            continue
        rng = random.Random(b.take(1 << 16))
        values = _typed(name, rng) if b.take(4) else _values(rng)
        config[name] = values[b.take(len(values))]
    return _path(db), {k: _path(v) if isinstance(v, str) else v for k, v in config.items()}


def _path(value: str) -> str:
    return _DBS.get(value, value) if value.startswith("@") else value


def config_seeds() -> list[bytes]:
    _setup()
    rng = random.Random(5)
    return [bytes([2 * i, 0, 1, 0, 0, 0]) for i in range(len(BASES))] + [bytes(rng.randrange(256) for _ in range(24))
                                                                          for _ in range(8)]


def _setup() -> None:
    if _DBS:
        return
    d = scratch()
    os.chdir(d)  # PicPac's `dump` key writes picpac_dump/ into the working directory
    rng = np.random.default_rng(11)
    images = os.path.join(d, "config-images.picpac")
    with picpac.Writer(images, metadata={"classes": ["a", "b", "c"]}, sync=False) as w:
        for i in range(8):
            pixels = rng.integers(0, 256, (12, 16, 3), np.uint8)
            mask = np.zeros((12, 16), np.uint8)
            mask[2:6, 3:9] = i % 3
            anno = {"shapes": [{"type": "rect", "label": i % 3, "geometry": {"x": 0.1, "y": 0.2, "width": 0.5, "height": 0.5}},
                               {"type": "point", "label": 1, "geometry": {"x": 0.5, "y": 0.5}}]}
            w.append(image=cv2.imencode(".png" if i % 2 else ".jpg", pixels)[1].tobytes(),
                     mask=cv2.imencode(".png", mask)[1].tobytes(), annotation=json.dumps(anno).encode(),
                     label=i % 3, group=i // 2)
    arrays = os.path.join(d, "config-arrays.picpac")
    picpac.write_arrays(arrays, rng.integers(0, 256, (8, 12, 16, 3), np.uint8), labels=np.arange(8) % 3, sync=False)
    text = os.path.join(d, "config-text.txt")
    with open(text, "w") as f:
        f.write("not a database")
    _DBS.update({"@images": images, "@arrays": arrays, "@missing": os.path.join(d, "missing.picpac"), "@dir": d,
                 "@text": text})
    _PNG.append(cv2.imencode(".png", rng.integers(0, 256, (12, 16, 3), np.uint8))[1].tobytes())


_COSTLY = 2**11
"""Configs that parse have bounded outputs (config.py), but a batch or window of thousands of samples, or
outputs thousands of pixels wide, take seconds and gigabytes per case: the fuzzer leaves them out."""
_WINDOW = ("batch", "workers", "threads", "preload")
_SIDES = ("resize_width", "resize_height", "crop_width", "crop_height", "min_size", "round_div")


def _costly(parsed: dict) -> bool:
    return any((parsed[k] or 0) >= _COSTLY for k in _WINDOW + _SIDES)


def _raw(value) -> bool:
    """A batch's list of one field's bytes per sample (PicPac's ``raw`` key)."""
    return isinstance(value, list) and all(isinstance(v, bytes) for v in value)


def run_config(data: bytes) -> str:
    _setup()
    db, config = decode_config(data)
    parsed, err = attempt(StreamConfig.from_dict, config)
    if err is None and _costly(parsed):
        return "skipped costly"
    if err is not None:
        check(isinstance(err, (PicPacTypeError, PicPacValueError)), f"parse raised {err!r}", "parse-error-type")
        return outcome([err])
    errors = []
    batch, err = attempt(lambda: picpac.ImageLoader(config).load_binary(_PNG[0]))
    errors.append(err)
    if batch is not None:
        check(isinstance(batch, np.ndarray) and batch.shape[0] == 1, f"ImageLoader gave {type(batch)}", "loader-batch")
    given = dict(config, backend="thread")
    stream, err = attempt(picpac.ImageStream, db, **given)
    errors.append(err)
    if stream is not None:
        try:
            first, err = attempt(next, iter(stream))
            errors.append(err)
            if first is not None:
                check(isinstance(first, tuple) and all(isinstance(a, (np.ndarray, int)) or _raw(a) for a in first),
                      f"a batch of {[type(a) for a in first]}", "stream-batch")
        finally:
            stream.close()
    return outcome(errors)


TARGETS = [
    Target("config", "ImageStream / ImageLoader configs: bad keys and values are PicPacTypeError/ValueError",
           config_seeds, lambda seed, rng: mutate(seed, rng), run_config),
]
