"""picpac.engine.process_executor.ProcessExecutor on its own, with a plain job class: deliveries as views into
shared memory with exact values, the arena a layout makes up front, a run closed early stopping the workers and
the next one starting new ones, errors, close(). Real processes and /dev/shm; ``clean`` checks nothing is left.
The job is defined at module level: spawned workers import it from here."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from picpac.engine.executor import Delivery
from picpac.engine.process_executor import ProcessExecutor
from picpac.engine.processes import pack_recipe
from picpac.errors import SampleError

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not sys.platform.startswith("linux"),
                                reason="needs Linux /proc and /dev/shm")


class Fill:
    """A job: unit ``i`` -> (an array of ``shape`` filled with ``i``, ``-i``); the units in ``broken`` raise."""

    def __init__(self, shape: tuple[int, ...], broken: tuple[int, ...] = ()):
        self.shape, self.broken = shape, broken

    def __call__(self, unit: int) -> tuple[np.ndarray, int]:
        time.sleep((unit * 7919 % 5) / 2000)  # results come in out of order
        if unit in self.broken:
            raise SampleError("fill", unit, "is broken")
        return np.full(self.shape, unit, np.int64), -unit

    def build(self) -> Fill:
        return self


def executor(job: Fill, workers: int = 2, method: str = "fork", keep: int = 2) -> ProcessExecutor:
    return ProcessExecutor(pack_recipe(job.build, method), workers, method, keep, name="test-executor")


def reraise(unit, exc):
    raise exc


def gone(pids: list[int], within: float = 2.0) -> bool:
    """Whether the processes ``pids`` have all exited (and were reaped) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def check(delivery: Delivery, units: list[int], shape: tuple[int, ...]) -> None:
    """A delivery of ``units``: its arrays a view into shared memory, each filled with its unit."""
    assert isinstance(delivery.arrays, np.ndarray) and not delivery.arrays.flags.owndata
    assert delivery.arrays.shape == (len(units), *shape) and delivery.arrays.dtype == np.int64
    assert delivery.items == units and delivery.extras == [-u for u in units]
    assert [int(a.min()) for a in delivery.arrays] == units and [int(a.max()) for a in delivery.arrays] == units


def test_deliveries_are_shared_views_with_exact_values(clean):
    job = Fill((3, 2))
    ex = executor(job)
    try:
        run = ex.run(job, range(11), 4, 6, reraise)
        got = []
        for d in run:
            check(d, list(range(4 * len(got), min(11, 4 * len(got) + 4))), (3, 2))
            got.append((d.items, d.taken))
        assert got == [([0, 1, 2, 3], 4), ([4, 5, 6, 7], 4), ([8, 9, 10], 3)]
        pids = ex.pool.pids
        assert len(pids) == 2
        again = list(ex.run(job, [20, 21, 22, 23, 24], 4, 6, reraise))  # the same workers, the ring counts on
        check(again[0], [20, 21, 22, 23], (3, 2))
        check(again[1], [24], (3, 2))
        assert ex.pool.pids == pids
    finally:
        ex.close()
    assert ex.pool is None and gone(pids)


def test_a_view_stays_intact_until_keep_more_deliveries(clean):
    job = Fill((5,))
    ex = executor(job, keep=2)
    try:
        run = ex.run(job, range(40), 2, 4, reraise)
        held = []
        for d in run:
            held.append((d.arrays, d.items))
            for view, units in held[-2:]:  # this one and the one before: neither overwritten yet
                assert [int(a[0]) for a in view] == units
    finally:
        ex.close()


def test_a_layout_makes_the_arena_up_front(clean):
    """With a layout, the workers write into the ring from the first unit: arrays of that layout arrive as views;
    arrays of another shape do not fit the ring the layout made, and come back pickled, as a list."""
    job = Fill((4,))
    ex = executor(job)
    try:
        deliveries = list(ex.run(job, range(6), 3, 6, reraise, layout=((4,), np.dtype(np.int64))))
        for d, units in zip(deliveries, ([0, 1, 2], [3, 4, 5]), strict=True):
            check(d, units, (4,))
    finally:
        ex.close()
    ex = executor(job)
    try:
        deliveries = list(ex.run(job, range(6), 3, 6, reraise, layout=((5,), np.dtype(np.int64))))
        assert [d.items for d in deliveries] == [[0, 1, 2], [3, 4, 5]]
        for d in deliveries:
            assert isinstance(d.arrays, list) and [a.tolist() for a in d.arrays] == [[u] * 4 for u in d.items]
    finally:
        ex.close()


def test_a_run_closed_early_stops_the_workers(clean):
    job = Fill((2,))
    ex = executor(job)
    run = ex.run(job, range(1000), 2, 8, reraise)
    check(next(run), [0, 1], (2,))
    pids = ex.pool.pids
    assert not gone(pids, 0)
    run.close()
    assert ex.pool is None and gone(pids)  # clean checks the shared memory went with them
    ex.close()


def test_the_run_after_one_closed_early_starts_new_workers(clean):
    job = Fill((2,))
    ex = executor(job)
    try:
        first = ex.run(job, range(1000), 2, 8, reraise)
        next(first)
        old = ex.pool.pids
        first.close()
        assert ex.pool is None
        deliveries = list(ex.run(job, range(5), 2, 8, reraise))
        for d, units in zip(deliveries, ([0, 1], [2, 3], [4]), strict=True):
            check(d, units, (2,))
        assert len(ex.pool.pids) == 2 and not set(ex.pool.pids) & set(old) and gone(old, 0)
    finally:
        ex.close()


def test_on_error_skips_or_stops(clean):
    job = Fill((2,), broken=(3, 7))
    ex = executor(job)
    try:
        skipped = []
        deliveries = list(ex.run(job, range(10), 3, 6, lambda unit, exc: skipped.append((unit, str(exc)))))
        assert skipped == [(3, "fill: record 3 is broken"), (7, "fill: record 7 is broken")]
        assert [(d.items, d.taken) for d in deliveries] == [([0, 1, 2], 3), ([4, 5, 6], 4), ([8, 9], 3)]
        for d in deliveries:
            check(d, d.items, (2,))
        pids = ex.pool.pids
        with pytest.raises(SampleError, match=r"^fill: record 3 is broken\n"):
            for _ in ex.run(job, range(10), 3, 6, reraise):
                pass
        assert ex.pool is None and gone(pids)  # an error stops the workers at once
    finally:
        ex.close()


def test_a_later_run_groups_by_its_own_group(clean):
    job = Fill((2,))
    ex = executor(job)
    try:
        assert [d.items for d in ex.run(job, range(4), 4, 4, reraise)] == [[0, 1, 2, 3]]
        assert [d.items for d in ex.run(job, range(4), 2, 4, reraise)] == [[0, 1], [2, 3]]
    finally:
        ex.close()


def test_close_twice_is_harmless(clean):
    job = Fill((2,))
    ex = executor(job)
    ex.close()  # before any run: nothing to stop
    assert [d.items for d in ex.run(job, range(3), 2, 4, reraise)] == [[0, 1], [2]]
    pids = ex.pool.pids
    ex.close()
    ex.close()
    assert ex.pool is None and gone(pids)


def test_spawned_workers_unpickle_the_job(clean):
    job = Fill((2, 2))
    recipe = pack_recipe(job.build, "spawn")
    assert isinstance(recipe, bytes)
    ex = ProcessExecutor(recipe, 1, "spawn", 2, name="test-spawn")
    try:
        deliveries = list(ex.run(job, range(5), 4, 4, reraise))
        check(deliveries[0], [0, 1, 2, 3], (2, 2))
        check(deliveries[1], [4], (2, 2))
    finally:
        ex.close()
