"""picpac.engine.aligned: batch arrays on 64-byte boundaries (TensorFlow shares them instead of copying)."""
from __future__ import annotations

import numpy as np
import pytest

from picpac.engine import aligned


@pytest.mark.parametrize("shape, dtype", [((64, 224, 224, 3), np.uint8), ((3, 5), np.float32),
                                          ((7,), np.float64)])
def test_empty_is_aligned_and_contiguous(shape, dtype):
    for _ in range(5):  # whatever malloc hands out
        array = aligned.empty(shape, dtype)
        assert array.shape == shape and array.dtype == dtype and array.flags.c_contiguous and array.flags.writeable
        assert array.ctypes.data % aligned.ALIGNMENT == 0


def test_stack_and_copy_keep_the_values():
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (6, 8, 3), np.uint8) for _ in range(4)]
    stacked = aligned.stack(images)
    assert stacked.ctypes.data % 64 == 0 and np.array_equal(stacked, np.stack(images))
    view = np.stack(images)[:, 1:, ::2]  # not contiguous
    copied = aligned.copy(view)
    assert copied.ctypes.data % 64 == 0 and copied.flags.c_contiguous and np.array_equal(copied, view)
    copied[0] = 0
    assert view[0].any()  # a copy, not a view
