"""picpac.engine.executor.ThreadExecutor on its own, with plain job functions: deliveries in input order and in
groups, what skipping and raising do, the window it keeps, its chunks, and no thread left behind."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from picpac.engine.executor import Delivery, ThreadExecutor
from picpac.errors import WorkerTimeoutError


def square(i: int) -> tuple[np.ndarray, int]:
    time.sleep((i * 7919 % 5) / 1000)  # results come in out of order
    return np.full(2, i * i), -i


def reraise(unit, exc):
    raise exc


def threads_named(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(name)]


def test_deliveries_in_input_order_and_groups():
    deliveries = list(ThreadExecutor(3, "exec-order").run(square, range(10), 4, 6, reraise))
    assert all(type(d) is Delivery for d in deliveries)
    assert [d.items for d in deliveries] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # the last one short
    assert [d.taken for d in deliveries] == [4, 4, 2]
    assert [d.extras for d in deliveries] == [[0, -1, -2, -3], [-4, -5, -6, -7], [-8, -9]]
    assert all(isinstance(d.arrays, list) for d in deliveries)
    assert [a.tolist() for d in deliveries for a in d.arrays] == [[i * i, i * i] for i in range(10)]
    assert list(ThreadExecutor(2).run(square, [], 4, 6, reraise)) == []
    assert [d.items for d in ThreadExecutor(2).run(square, range(6), 3, 2, reraise)] == [[0, 1, 2], [3, 4, 5]]
    assert threads_named("exec-order") == []


def broken(i: int) -> tuple[np.ndarray, int]:
    if i % 5 == 2:
        raise KeyError(f"unit {i}")
    return square(i)


def test_on_error_that_returns_skips_the_unit_and_taken_counts_it():
    skipped = []
    deliveries = list(ThreadExecutor(2).run(broken, range(14), 4, 5,
                                            lambda unit, exc: skipped.append((unit, str(exc)))))
    assert skipped == [(2, "'unit 2'"), (7, "'unit 7'"), (12, "'unit 12'")]
    assert [d.items for d in deliveries] == [[0, 1, 3, 4], [5, 6, 8, 9], [10, 11, 13]]
    assert [d.taken for d in deliveries] == [5, 5, 4]  # the skipped units counted where they were consumed
    assert sum(d.taken for d in deliveries) == 14
    assert [d.extras for d in deliveries][0] == [0, -1, -3, -4]
    ends_skipped = list(ThreadExecutor(2).run(broken, range(8), 3, 5, lambda unit, exc: None))
    assert [(d.items, d.taken) for d in ends_skipped] == [([0, 1, 3], 4), ([4, 5, 6], 3)]  # 7 skipped: no delivery
    only_skips = list(ThreadExecutor(2).run(broken, [2, 7], 3, 5, lambda unit, exc: None))
    assert only_skips == []


def test_on_error_that_raises_stops_the_run_and_its_threads():
    delivered = []
    run = ThreadExecutor(3, "exec-raise").run(broken, range(100), 1, 8, reraise)
    with pytest.raises(KeyError, match="unit 2"):
        for d in run:
            delivered.append(d.items[0])
    assert delivered == [0, 1]
    assert threads_named("exec-raise") == []  # joined before the error reached the consumer


def test_a_run_closed_early_leaves_no_thread():
    run = ThreadExecutor(3, "exec-close").run(square, range(1000), 2, 8, reraise)
    assert next(run).items == [0, 1]
    assert len(threads_named("exec-close")) > 0
    run.close()
    assert threads_named("exec-close") == []


def test_the_window_bounds_the_units_in_flight():
    lock = threading.Lock()
    started = consumed = most = 0

    def job(i: int) -> tuple[np.ndarray, None]:
        nonlocal started, most
        with lock:
            started += 1
            most = max(most, started - consumed)
        time.sleep(0.002)
        return np.zeros(1), None
    for d in ThreadExecutor(8).run(job, range(60), 1, 3, reraise):
        time.sleep(0.004)  # a slow consumer: the workers would run ahead if nothing held them
        with lock:
            consumed += 1
    assert started == consumed == 60 and most == 3


def test_chunks_go_to_one_thread_each():
    names: dict[int, str] = {}

    def job(i: int) -> tuple[np.ndarray, None]:
        names[i] = threading.current_thread().name
        time.sleep(0.001)
        return np.zeros(1), None
    items = [i for d in ThreadExecutor(3, "exec-chunk").run(job, range(12), 5, 6, reraise, chunk=3) for i in d.items]
    assert items == list(range(12))
    for start in range(0, 12, 3):
        assert len({names[i] for i in range(start, start + 3)}) == 1
    assert all(name.startswith("exec-chunk") for name in names.values())


def test_a_stuck_job_is_a_timeout_error_naming_the_thread():
    release = threading.Event()

    def stuck(i: int) -> tuple[np.ndarray, None]:
        if i == 3:
            release.wait(20)
        return np.zeros(1), None
    start = time.monotonic()
    try:
        with pytest.raises(WorkerTimeoutError, match=r"^thread exec-stuck_\d gave no result for 0.3 s \(timeout=0.3\)"):
            for _ in ThreadExecutor(2, "exec-stuck", timeout=0.3).run(stuck, range(10), 2, 4, reraise):
                pass
        assert time.monotonic() - start < 3
    finally:
        release.set()


def test_close_is_harmless():
    executor = ThreadExecutor(2)
    executor.close()
    assert [d.items for d in executor.run(square, range(3), 2, 2, reraise)] == [[0, 1], [2]]
    executor.close()
    executor.close()
