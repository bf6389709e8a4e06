"""Batch arrays on 64-byte boundaries.

NumPy's large arrays start 16 bytes into a page (glibc's chunk header), and TensorFlow copies any
array it is handed that is not aligned to 64 bytes (``EIGEN_MAX_ALIGN_BYTES``): a whole batch copied
on the consumer's thread. Aligned, it shares the memory instead; torch and JAX take either."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ALIGNMENT = 64


def empty(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``ALIGNMENT``-byte boundary (unless it
    is empty: no data)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def stack(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``np.stack(arrays)`` into an aligned array (the arrays have one shape and dtype)."""
    first = arrays[0]
    out = empty((len(arrays), *first.shape), first.dtype)
    return np.stack(arrays, out=out)


def copy(array: np.ndarray) -> np.ndarray:
    """An aligned C-contiguous copy of ``array``."""
    out = empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out
