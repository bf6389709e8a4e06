"""Image DataFlows: images from files, and augmentation of image components.

tensorpack's augmentors (``imgaug``) are an API of their own; here an augmentor is either

* a picpac transform, ``t(sample, rng) -> sample`` (:mod:`picpac.transforms`, :mod:`picpac.color`, or
  your own): geometric ones move the coordinates exactly (they act on a :class:`~picpac.transforms.Sample`
  whose ``shapes`` hold them), and they draw from a NumPy ``Generator`` made for each datapoint from
  the flow's own seeded RNG; or
* a plain function ``img -> img``, applied to the image as it stands.

Told apart by their number of required positional parameters (2 or 1); a function whose signature
cannot be read (an OpenCV function) is refused: wrap it in a lambda. Images are (H, W[, C]) arrays,
RGB for colour transforms (``ImageFromFile`` gives RGB, as tensorpack's does). Coordinates are (N, 2)
float arrays of (x, y) in continuous pixel coordinates (the image spans [0, W) x [0, H)).
"""
from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from copy import copy as shallow_copy
from typing import Any

import cv2
import numpy as np

from ...errors import ImageTooLargeError, MissingPathError, PicPacTypeError, PicPacValueError
from ...image.decoding import MAX_PIXELS, decode_channels
from ...image.shapes import Shapes
from ...image.transforms import Sample
from .base import DataFlow, RNGDataFlow, make_rng
from .common import MapData, MapDataComponent

__all__ = ["ImageFromFile", "AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates"]

log = logging.getLogger("picpac.dataflow")


class ImageFromFile(RNGDataFlow):
    """``[image]`` for each file of ``files``: RGB (H, W, 3) uint8 for ``channel=3``, (H, W, 1) for
    ``channel=1``; ``resize`` (an int, or ``(h, w)``) resizes it; ``shuffle`` reorders each pass.
    A file that is missing or does not decode, or an image over ``max_pixels`` (None or 0: no limit), is
    an error naming it."""

    def __init__(self, files: Sequence[str], channel: int = 3, resize: Any = None, shuffle: bool = False, *,
                 seed: int | None = None, max_pixels: int | None = MAX_PIXELS):
        if not len(files):
            raise PicPacValueError("ImageFromFile: no image files given")
        if channel not in (1, 3):
            raise PicPacValueError(f"ImageFromFile: channel must be 1 or 3, got {channel}")
        self.files = list(files)
        self.channel = int(channel)
        if resize is not None:
            resize = (int(resize), int(resize)) if np.isscalar(resize) else tuple(int(v) for v in resize)
        self.resize = resize
        self.shuffle, self.seed, self.max_pixels = bool(shuffle), seed, max_pixels

    def __len__(self) -> int:
        return len(self.files)

    def read(self, path: str) -> np.ndarray:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise MissingPathError(f"{path}: no such file") from None
        try:
            img = decode_channels(data, self.channel, rgb=True, max_pixels=self.max_pixels)
        except ImageTooLargeError as exc:
            raise ImageTooLargeError(exc.width, exc.height, exc.limit, path) from None
        if img is None:
            raise PicPacValueError(f"{path}: does not decode as an image")
        if self.resize is not None:
            img = cv2.resize(img, (self.resize[1], self.resize[0]))
        return img[:, :, None] if img.ndim == 2 else img

    def __iter__(self) -> Iterator:
        if self.shuffle:
            self._need_reset(self.rng is not None)
        order = self.rng.permutation(len(self.files)) if self.shuffle else range(len(self.files))
        return ([self.read(os.fspath(self.files[i]))] for i in order)


# -- augmentors ------------------------------------------------------------------------------------------
def _required_positional(fn: Callable) -> int | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds and p.default is p.empty for p in signature.parameters.values())


def _steps(augmentors: Any) -> list[tuple[bool, Callable]]:
    """``(is_transform, fn)`` for each augmentor."""
    if callable(augmentors):
        augmentors = [augmentors]
    steps = []
    for aug in augmentors:
        if not callable(aug):
            raise PicPacTypeError(f"an augmentor must be a picpac transform t(sample, rng) or a function img -> img, "
                                  f"got {type(aug).__name__}")
        n = _required_positional(aug)
        if n is None:
            raise PicPacTypeError(f"cannot tell what {aug!r} is: its signature cannot be read (e.g. an OpenCV "
                                  "function), so it cannot be told from a picpac transform t(sample, rng): wrap it, "
                                  "e.g. lambda img: f(img)")
        if n not in (1, 2):
            raise PicPacTypeError(f"cannot tell what {aug!r} is: an augmentor takes (sample, rng) (a picpac transform) "
                                  f"or (img) (a function img -> img); it takes {n} required arguments. tensorpack's "
                                  "imgaug augmentors are not supported: use picpac.transforms / picpac.color")
        steps.append((n == 2, aug))
    return steps


def _coords_shapes(coords: Any) -> Shapes:
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] != 2 or coords.dtype.kind != "f":
        raise PicPacValueError(f"coordinates must be an (N, 2) float array of (x, y), got {coords.dtype} "
                               f"{coords.shape}")
    n = len(coords)
    return Shapes(coords.astype(np.float64), np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64),
                  ["point"] * n, np.zeros(n), [(0.0,)] * n, np.full(n, np.nan))


class _Augmenter:
    """Runs the steps on one image (with coordinates), drawing from a generator seeded per datapoint."""

    def __init__(self, augmentors: Any):
        self.steps = _steps(augmentors)

    def run(self, image: np.ndarray, seed: int, coords: list | None = None) -> tuple[np.ndarray, list]:
        shapes = [_coords_shapes(c) for c in coords or ()]
        merged = None
        if shapes:
            sizes = [len(s) for s in shapes]
            points = np.concatenate([s.points for s in shapes])
            merged = _coords_shapes(points)
        sample = Sample(np.asarray(image), 0.0, 0, shapes=merged)
        rng = np.random.Generator(np.random.PCG64(seed))
        for is_transform, fn in self.steps:
            if is_transform:
                sample = fn(sample, rng)
            else:
                sample.image = np.asarray(fn(sample.image))
        out = sample.image
        moved = []
        if merged is not None:
            at = 0
            for dtype, n in zip((np.asarray(c).dtype for c in coords), sizes):
                moved.append(sample.shapes.points[at:at + n].astype(dtype))
                at += n
        return out, moved


class _AugmentBase:
    """The RNG and error handling the three augmenting flows share."""

    def _setup(self, augmentors: Any, copy: bool, catch_exceptions: bool, seed: int | None) -> None:
        self.augs = _Augmenter(augmentors)
        self._copy = bool(copy)
        self._catch = bool(catch_exceptions)
        self.seed = seed
        self.rng: np.random.RandomState | None = None
        self._errors = 0

    def _reset_rng(self) -> None:
        self.rng = make_rng(self.seed)

    def reset_state(self) -> None:
        self.ds.reset_state()  # type: ignore[attr-defined]
        self._reset_rng()

    def __iter__(self) -> Iterator:
        self._need_reset(self.rng is not None)  # type: ignore[attr-defined]
        return super().__iter__()  # the map flow's, next in the MRO

    def _draw(self) -> int:
        if self.rng is None:
            self._need_reset(False)  # type: ignore[attr-defined]
        return int(self.rng.randint(0, 2**63 - 1, dtype=np.int64))

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        if not self._catch:
            return fn()
        try:
            return fn()
        except Exception:
            self._errors += 1
            if self._errors < 10 or self._errors % 1000 == 0:
                log.exception("%s: %d augmentation errors so far (the datapoints are dropped)",
                              type(self).__name__, self._errors)
            return None


class AugmentImageComponent(_AugmentBase, MapDataComponent):
    """Augment the image ``dp[index]`` with ``augmentors`` (a list, applied in order; see the module notes).

    ``copy=True`` copies the image first, for functions that write into their input (picpac transforms
    never do). ``catch_exceptions=True`` logs an augmentation error and drops the datapoint; by default it
    propagates. ``seed`` makes the augmentation reproducible (``None``: fresh entropy at reset)."""

    def __init__(self, ds: DataFlow, augmentors: Any, index: int | str = 0, copy: bool = True,
                 catch_exceptions: bool = False, *, seed: int | None = None):
        self._setup(augmentors, copy, catch_exceptions, seed)
        MapDataComponent.__init__(self, ds, self._augment, index)

    def _augment(self, image: Any) -> Any:
        seed = self._draw()

        def run() -> np.ndarray:
            img = np.array(image) if self._copy else image
            return self.augs.run(img, seed)[0]
        return self._guarded(run)


class AugmentImageCoordinates(_AugmentBase, MapData):
    """Augment the image ``dp[img_index]`` and move the (N, 2) coordinates ``dp[coords_index]`` with it."""

    def __init__(self, ds: DataFlow, augmentors: Any, img_index: int | str = 0, coords_index: int | str = 1,
                 copy: bool = True, catch_exceptions: bool = False, *, seed: int | None = None):
        self._setup(augmentors, copy, catch_exceptions, seed)
        self._img_index, self._coords_index = img_index, coords_index
        MapData.__init__(self, ds, self._augment)

    def _augment(self, dp: Any) -> Any:
        seed = self._draw()

        def run() -> Any:
            out = list(dp) if isinstance(dp, tuple) else shallow_copy(dp)
            img = dp[self._img_index]
            img = np.array(img) if self._copy else img
            image, (coords,) = self.augs.run(img, seed, [dp[self._coords_index]])
            out[self._img_index], out[self._coords_index] = image, coords
            return out
        return self._guarded(run)


class AugmentImageComponents(_AugmentBase, MapData):
    """Augment several image components ``index`` with the same random draws (so a segmentation mask or a
    second view stays aligned with the first image), moving the coordinate components ``coords_index``
    as the first image moves. The images must have one size; each is augmented with a generator seeded
    alike, so every step makes the same choices on each. Photometric steps apply to every image too, as
    in tensorpack: keep them out of the list when one component is a label mask."""

    def __init__(self, ds: DataFlow, augmentors: Any, index: Sequence = (0, 1), coords_index: Sequence = (),
                 copy: bool = True, catch_exceptions: bool = False, *, seed: int | None = None):
        self._setup(augmentors, copy, catch_exceptions, seed)
        self._index, self._coords = tuple(index), tuple(coords_index)
        if not self._index:
            raise PicPacValueError("AugmentImageComponents needs at least one image index")
        MapData.__init__(self, ds, self._augment)

    def _augment(self, dp: Any) -> Any:
        seed = self._draw()

        def run() -> Any:
            out = list(dp) if isinstance(dp, tuple) else shallow_copy(dp)
            take = (lambda x: np.array(x)) if self._copy else (lambda x: x)
            first, *rest = self._index
            image, moved = self.augs.run(take(dp[first]), seed, [dp[k] for k in self._coords])
            out[first] = image
            for k, coords in zip(self._coords, moved):
                out[k] = coords
            for k in rest:
                out[k] = self.augs.run(take(dp[k]), seed)[0]
            return out
        return self._guarded(run)
