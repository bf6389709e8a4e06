"""The explorer's live augmentation: a stream config typed into a page, checked and run through ImageStream.

The text is data, never code: it is parsed with ``json.loads`` or ``yaml.safe_load`` only, every key must be
one of the augmentation, size and split keys below (no key that names a file, such as ``db`` or
``mixin``, and none that changes how the server runs: workers, backend, dump, ...), and
picpac.stream.config.parse checks every value. The explorer then bounds the work: at most MAX_SAMPLES
samples, ``max_pixels`` at most MAX_PIXELS per image, at most MAX_OUTPUT_BYTES per batch when the config
fixes the output size, and one run at a time. The output keys are fixed (uint8, NHWC, RGB), so each
served PNG holds exactly the stream's pixels for that config and seed."""
from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np
import yaml

from ...errors import PicPacError, PicPacValueError
from ...stream.config import parse
from ...stream.image_stream import ImageStream
from .thumbnails import LRUBytes

MAX_TEXT = 20_000
MAX_SAMPLES = 32
MAX_PIXELS = 2**24
MAX_OUTPUT_BYTES = 256 << 20
MAX_DEPTH = 8

DEFAULT_CONFIG = """\
seed: 2016
batch: 8
resize_width: 160
resize_height: 160
perturb: true
pert_hflip: true
pert_angle: 15
pert_min_scale: 0.8
pert_max_scale: 1.2
pert_color1: 20
"""

ALLOWED = frozenset({
    "seed", "batch", "shuffle", "reshuffle", "split", "split_fold", "split_negate", "stratify", "oversample",
    "channels", "reduced_decode", "region_decode", "max_pixels", "resize_width", "resize_height", "min_size",
    "max_size", "crop_width", "crop_height", "round_div", "round_mod", "perturb", "pert_color1", "pert_color2",
    "pert_color3", "pert_colorspace", "pert_angle", "pert_min_scale", "pert_max_scale", "pert_hflip",
    "pert_vflip", "pert_border", "transforms", "annotate", "anno_type", "anno_min_ratio", "point_radius",
    "anno_color1", "anno_color2", "anno_color3", "anno_thickness", "anno_copy", "task", "min_box_area",
    "max_boxes", "image_field", "annotation_field"})
"""The keys a page's config may hold: what a sample looks like, never where data comes from or how the server runs."""
FIXED = {"dtype": "uint8", "order": "NHWC", "colorspace": "RGB", "loop": False, "pad": False, "workers": 2,
         "backend": "thread", "mean": None, "std": None, "onehot": 0, "cache": False, "dump": 0}
"""What the explorer sets itself: the output layout of the served PNGs and a small worker pool."""
_PATH_WORDS = ("path", "file", "dir", "db", "mixin", "url")


class ConfigRefused(PicPacValueError):
    """A page's config that the explorer does not run; the message says why."""


def load_config(text: str) -> dict[str, Any]:
    """The config a page's text gives, after every check; ConfigRefused or another PicPacError otherwise."""
    if len(text) > MAX_TEXT:
        raise ConfigRefused(f"the config is {len(text):,} characters long; at most {MAX_TEXT:,} are accepted")
    try:
        value = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigRefused(f"the config is neither JSON nor YAML: {str(exc).splitlines()[0][:200]}") from None
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigRefused(f"the config must be a mapping of keys to values, got {type(value).__name__}")
    config = dict(value)
    for key in config:
        if not isinstance(key, str):
            raise ConfigRefused(f"config keys must be strings, got {key!r:.80}")
        if key not in ALLOWED:
            why = ("it names a file or a database" if any(w in key.lower() for w in _PATH_WORDS)
                   else "it is not an augmentation, size or split key")
            raise ConfigRefused(f"config key {key[:80]!r} is not allowed in the explorer ({why}); allowed: "
                                + ", ".join(sorted(ALLOWED)))
    _check_nested(config.get("transforms"), "transforms", 0)
    config.setdefault("batch", 8)
    if config["batch"] is True or not isinstance(config["batch"], int) or not 1 <= config["batch"] <= MAX_SAMPLES:
        raise ConfigRefused(f"config key 'batch' (the samples shown) must be an int in [1, {MAX_SAMPLES}], "
                            f"got {config['batch']!r:.40}")
    pixels = config.setdefault("max_pixels", MAX_PIXELS)
    if pixels is True or not isinstance(pixels, int) or not 1 <= pixels <= MAX_PIXELS:
        raise ConfigRefused(f"config key 'max_pixels' must be an int in [1, {MAX_PIXELS:,}] in the explorer, "
                            f"got {pixels!r:.40}")
    config.update(FIXED)
    checked = parse(config)
    height = checked["crop_height"] or checked["resize_height"]
    width = checked["crop_width"] or checked["resize_width"]
    if width and height and checked["batch"] * width * height * 4 > MAX_OUTPUT_BYTES:
        raise ConfigRefused(f"{checked['batch']} samples of {width} x {height} pixels are more than the explorer's "
                            f"{MAX_OUTPUT_BYTES >> 20} MiB per run; lower 'batch' or the size")
    return config


def _check_nested(value: Any, where: str, depth: int) -> None:
    """Transform dicts hold numbers, strings, lists and dicts, no key naming a file, nested at most MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise ConfigRefused(f"config key {where!r} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or any(w in key.lower() for w in _PATH_WORDS):
                raise ConfigRefused(f"config key {where!r}: key {str(key)[:80]!r} is not allowed in the explorer "
                                    "(it names a file)")
            _check_nested(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_nested(item, where, depth + 1)


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:20]


class Augmenter:
    """Runs configs on one database, one at a time, and keeps the PNGs of recent runs (bounded)."""

    def __init__(self, path: str):
        self.path = path
        self.cache = LRUBytes(MAX_OUTPUT_BYTES)
        self._runs: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def run(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """(digest, samples) for a page's config text; each sample: its index k, label, PNG size."""
        config = load_config(text)
        digest = config_digest(config)
        if digest in self._runs and all(self.cache.get((digest, s["k"])) for s in self._runs[digest]):
            return digest, self._runs[digest]
        if not self._lock.acquire(timeout=30):
            raise PicPacError("the explorer is busy with another augmentation run; try again")
        try:
            with ImageStream(self.path, **config) as stream:
                images, labels, _ = next(iter(stream))
                images = np.asarray(images)
            samples = []
            for k, image in enumerate(images):
                png = encode_png(image)
                self.cache.put((digest, k), png)
                label = np.asarray(labels[k])
                samples.append({"k": k, "label": float(label) if label.ndim == 0 else f"array {label.shape}",
                                "width": image.shape[1], "height": image.shape[0]})
            if len(self._runs) > 64:
                self._runs.clear()
            self._runs[digest] = samples
            return digest, samples
        finally:
            self._lock.release()

    def png(self, digest: str, k: int) -> bytes | None:
        return self.cache.get((digest, k))


def encode_png(image: np.ndarray) -> bytes:
    """An (H, W, C) uint8 RGB(A) or gray sample as PNG, pixel for pixel."""
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    elif image.ndim == 3 and image.shape[2] == 3:
        image = image[:, :, ::-1]
    elif image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, [2, 1, 0, 3]]
    return cv2.imencode(".png", np.ascontiguousarray(image))[1].tobytes()
