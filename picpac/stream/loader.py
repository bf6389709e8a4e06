"""ImageLoader: a stream config's deterministic steps applied to one image, for inference."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import (
    ImageTooLargeError,
    MissingPathError,
    PicPacError,
    PicPacValueError,
    SampleError,
)
from .config import StreamConfig
from .legacy import with_v2_defaults
from .processor import LazyRng, Processor


class ImageLoader:
    """``ImageLoader(config)`` -> ``load_path(path)`` / ``load_binary(bytes)``: a (1, ...) image batch.

    Takes the same keys as ImageStream (keys about order, splits, annotations and fields, such as
    ``image_field``, are accepted and ignored) and applies its decoding, geometry, transforms and
    output layout with every random step in its deterministic centre version (``perturb=False``), so a
    model sees at inference what it saw in validation. A dict config in PicPac v2's vocabulary (or any with
    ``v2=True``) gets v2's layout, (1, H, W, C) uint8 unless it says otherwise, as ``ImageStream({...})`` does.
    """

    def __init__(self, config: Mapping[str, Any] | StreamConfig | None = None, **more: Any):
        given = {**(config.given if isinstance(config, StreamConfig) else config or {}), **more}
        if isinstance(config, Mapping) or given.get("v2"):  # a dict config, as ImageStream's (keywords: v2=True)
            given = with_v2_defaults(given)
        for key in ("db", "images", "annotation_field"):  # the image is the bytes given: no fields to name
            given.pop(key, None)
        given.update(perturb=False, annotate=None, task="classify", image_field="image", raw=(), dump=0)
        self.config = StreamConfig.from_dict(given)
        self.processor = Processor.of(self.config)

    def load_binary(self, data: bytes | memoryview, where: str = "image bytes") -> np.ndarray:
        """The image batch of one encoded image."""
        rng = LazyRng(self.config.order.seed, 0, 0, 0)
        try:
            image = self.processor.sample({"image": data}, 0.0, 0, where, None, rng)[0]
        except SampleError as exc:
            large = exc.__cause__
            if isinstance(large, ImageTooLargeError):
                raise ImageTooLargeError(large.width, large.height, large.limit, where) from None
            raise PicPacValueError(f"{where}: cannot decode the image (corrupt, truncated or not an image)") from None
        return image[None]

    def load_path(self, path: str | os.PathLike) -> np.ndarray:
        """The image batch of the image file at ``path``."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise MissingPathError(f"{path}: no such file") from None
        except OSError as exc:
            raise PicPacError(f"{path}: cannot read: {exc.strerror}") from None
        return self.load_binary(data, os.fspath(path))
