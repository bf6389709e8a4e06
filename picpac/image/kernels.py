"""picpac's pixel kernels (the C extension ``picpac.image._kernels``, built with picpac: a C compiler is all it needs).

The arithmetic of every step picpac promises to be exact about is picpac's own, so that the same seed gives the same
bytes on any OpenCV and any CPU: resizing 8-bit images (LINEAR, AREA), warping them (bilinear, any border), and for
any dtype nearest neighbour (masks) and flips. The fused C path (``decoding.fused_sample``) runs the same kernels, so
``fused=True`` and ``fused=False`` give the same bytes by construction (docs/augment.md, "Exact bytes").

The loops come in variants (:data:`VARIANTS`: portable C, and on x86-64 AVX2 with FMA) that give the same bytes;
the widest the CPU runs is chosen at import, or the one the environment variable ``PICPAC_KERNELS`` names.
"""
from __future__ import annotations

import cv2
import numpy as np

from ..errors import PicPacValueError
from . import _kernels

VARIANTS: tuple[str, ...] = _kernels.VARIANTS
"""The variants of the loops this build has (each gives the same bytes)."""

RESIZES = {cv2.INTER_LINEAR: 0, cv2.INTER_AREA: 1}
"""The interpolations :func:`resize` takes (OpenCV's constants) and the kernels' codes."""
MAX_CHANNELS = 512
"""The most channels (elements of a pixel) an image of the kernels may have."""
BORDERS = {cv2.BORDER_CONSTANT: 0, cv2.BORDER_REPLICATE: 1, cv2.BORDER_REFLECT_101: 2, cv2.BORDER_WRAP: 3}
"""The borders :func:`warp` takes (OpenCV's constants) and the kernels' codes."""


def variant() -> str:
    """The variant of the loops that runs."""
    return _kernels.variant()


def select(name: str) -> None:
    """Run variant ``name`` (one of :data:`VARIANTS`, or ``"auto"``: the widest this CPU runs) from now on, in this
    process; for tests and benchmarks, since every variant gives the same bytes."""
    _kernels.select(name)


def _empty(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    width, height = size
    return np.empty((height, width, *array.shape[2:]), array.dtype)


def _packed(array: np.ndarray) -> np.ndarray:
    """``array`` itself when each row's pixels lie next to each other (a slice of a larger image does), else a copy."""
    s = array.strides
    packed = s[-1] == array.itemsize and (array.ndim == 2 or s[1] == array.shape[2] * array.itemsize) and s[0] > 0
    return array if packed else np.ascontiguousarray(array)


def resize(array: np.ndarray, size: tuple[int, int], interpolation: int) -> np.ndarray:
    """A uint8 image (H, W[, C]) resized to ``size`` = (width, height): ``cv2.INTER_LINEAR`` (two taps per axis at
    the pixel centres' positions) or ``cv2.INTER_AREA`` (the source cells each output cell covers)."""
    out = _empty(array, size)
    _kernels.resize(_packed(array), out, RESIZES[interpolation])
    return out


def warp(array: np.ndarray, m: np.ndarray, size: tuple[int, int], border: int, fill: int) -> np.ndarray:
    """A uint8 image mapped by the 2x3 ``m`` (pixel indices, as ``cv2.warpAffine`` takes it) onto ``size``, bilinear;
    pixels from outside come from ``border`` (an OpenCV border: constant with ``fill`` in 0..255, replicate,
    reflect 101, wrap)."""
    if border not in BORDERS:
        raise PicPacValueError(f"the kernels' warp takes the borders {sorted(BORDERS)} (OpenCV's codes), got {border}")
    out = _empty(array, size)
    _kernels.warp(_packed(array), tuple(np.asarray(m, np.float64).ravel().tolist()), BORDERS[border], fill, out)
    return out


def nearest(array: np.ndarray, matrix: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """An image of any dtype (H, W[, C]) mapped by the continuous 2x3 ``matrix`` (source -> destination, pixel centres
    at +0.5) onto ``size`` by nearest neighbour: each pixel takes the source pixel under the point its centre comes
    from, zeros from outside. Values are copied, never mixed: what masks need."""
    out = _empty(array, size)
    _kernels.nearest(_packed(array), tuple(np.asarray(matrix, np.float64).ravel().tolist()), out)
    return out


def flip(array: np.ndarray, code: int, out: np.ndarray | None = None) -> np.ndarray:
    """An image of any dtype mirrored: ``code`` 1 left-right, 0 upside down, -1 both (``cv2.flip``'s codes), into
    ``out`` (C-contiguous, the same shape and dtype) when given."""
    out = np.empty(array.shape, array.dtype) if out is None else out
    _kernels.flip(_packed(array), code, out)
    return out
