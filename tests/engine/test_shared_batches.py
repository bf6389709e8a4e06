"""picpac.engine.shared_batches.SharedBatches against a plain-Python model: random batch sizes, windows, keeps,
skips and odd shapes, on real worker processes and shared memory (``clean`` checks nothing is left)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.engine.processes import ProcessPool

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not sys.platform.startswith("linux"),
                                reason="needs Linux /proc and /dev/shm")


def _fill_recipe():
    def work(item: int):
        time.sleep((item * 7919 % 5) / 2000)  # results come in out of order
        if item % 11 == 3:
            raise picpac.SampleError("test", item, "is broken")
        return np.full((3,) if item % 13 else (4,), item, np.int32), -item
    return work


def test_shared_batches_against_a_model(clean):
    """Random batch sizes, windows, keeps, skips and odd shapes against the plain-Python expectation,
    checking that the batches still protected by ``keep`` are intact when the next one comes."""
    from picpac.engine.shared_batches import SharedBatches
    rng = np.random.default_rng(0)
    for _ in range(12):
        batch, window, keep = int(rng.integers(1, 6)), int(rng.integers(1, 10)), int(rng.integers(1, 3))
        with ProcessPool(_fill_recipe, 2, method="fork") as pool:
            batches = SharedBatches(pool, batch, window, keep)
            for _ in range(2):  # two runs on one ring
                items = [int(i) for i in rng.integers(0, 60, int(rng.integers(0, 30)))]
                good = [i for i in items if i % 11 != 3]
                skipped = []
                got, held = [], []
                for b in batches(items, lambda item, exc: skipped.append(item)):
                    arrays = b.arrays if isinstance(b.arrays, list) else list(b.arrays)
                    assert [int(a[0]) for a in arrays] == b.items and b.extras == [-i for i in b.items]
                    assert all(len(a) == (3 if i % 13 else 4) and (a == i).all() for a, i in zip(arrays, b.items))
                    for view, copy in held[-(keep - 1):] if keep > 1 else []:
                        assert all(np.array_equal(v, c) for v, c in zip(view, copy))
                    held.append((b.arrays, [np.array(a) for a in arrays]) if isinstance(b.arrays, list)
                                else (b.arrays, np.array(b.arrays)))
                    got.append((b.items, b.taken))
                assert [i for items_, _ in got for i in items_] == good
                assert all(len(items_) == batch for items_, _ in got[:-1])
                assert skipped == [i for i in items if i % 11 == 3]
                last_good = max((j for j, i in enumerate(items) if i % 11 != 3), default=-1)
                partial = len(good) % batch != 0  # a last, short batch also takes the skipped items after it
                assert sum(t for _, t in got) == (len(items) if partial else last_good + 1)
