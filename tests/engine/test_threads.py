"""The parallel engine: input order, the bound on items in flight, errors, shutdown."""
from __future__ import annotations

import random
import threading
import time

import pytest

from picpac.errors import PicPacValueError
from picpac.engine.threads import ordered_map


def engine_threads() -> int:
    return sum(t.name.startswith("flowtest") for t in threading.enumerate())


def engine_threads_within(seconds: float, at_most: int = 0) -> int:
    """The engine's threads once no more than ``at_most`` are left, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while engine_threads() > at_most and time.monotonic() < deadline:
        time.sleep(0.01)
    return engine_threads()


@pytest.mark.parametrize("threads, chunk", [(1, 1), (3, 1), (4, 5)])
def test_results_come_in_input_order(threads, chunk):
    rng = random.Random(threads)
    delays = [rng.uniform(0, 0.003) for _ in range(100)]

    def work(i: int) -> int:
        time.sleep(delays[i])
        return i * i
    got = [(item, outcome.get()) for item, outcome in ordered_map(work, range(100), threads, 10, chunk, "flowtest")]
    assert got == [(i, i * i) for i in range(100)]
    assert engine_threads() == 0


def test_window_bounds_the_items_started():
    started = []
    items = ordered_map(started.append, range(1000), 2, 12, 4, "flowtest")
    consumed = 0
    for _ in items:
        consumed += 1
        time.sleep(0.002)
        assert len(started) <= consumed + 12
        if consumed == 50:
            break
    items.close()
    assert engine_threads() == 0 and len(started) <= 50 + 12


def test_a_worker_exception_is_delivered_at_its_item():
    def work(i: int) -> int:
        if i == 7:
            raise KeyError("seven")
        return i
    outcomes = list(ordered_map(work, range(10), 3, 4, 2, "flowtest"))
    assert [o.get() for i, o in outcomes if i != 7] == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    with pytest.raises(KeyError, match="seven") as info:
        outcomes[7][1].get()
    assert any(frame.name == "work" for frame in __import__("traceback").extract_tb(info.value.__traceback__))


def test_bad_arguments():
    with pytest.raises(PicPacValueError):
        next(ordered_map(abs, [1], 0, 1))


@pytest.mark.parametrize("ordered", [True, False])
def test_a_stuck_thread_is_a_timeout_error_naming_it(ordered):
    from picpac.errors import WorkerTimeoutError
    release = threading.Event()

    def work(i: int) -> int:
        if i == 5:
            release.wait(30)  # a call that does not return (a dead mount, a stuck native call)
        return i
    items = ordered_map(work, range(40), 2, 8, 1, "flowtest", ordered=ordered, timeout=0.5)
    got = []
    start = time.monotonic()
    try:
        with pytest.raises(WorkerTimeoutError, match=r"^thread flowtest_\d gave no result for 0\.5 s \(timeout=0\.5\)"):
            for item, outcome in items:
                got.append(outcome.get())
        assert time.monotonic() - start < 0.5 + 1.5
        assert 5 not in got and (got == [0, 1, 2, 3, 4] if ordered else len(got) >= 5)
        assert engine_threads_within(2, at_most=1) == 1  # the stuck one: the others ended
    finally:
        release.set()
    assert engine_threads_within(5) == 0


@pytest.mark.parametrize("ordered", [True, False])
def test_the_timeout_bounds_one_item_not_a_chunk(ordered):
    """A chunk of 8 items of 0.2 s each takes 1.6 s: with timeout=1 every item moves in time, so nothing
    is late; an item stuck in the middle of a chunk is still named within the timeout of the last item
    done."""
    from picpac.errors import WorkerTimeoutError

    def paced(i: int) -> int:
        time.sleep(0.2)
        return i
    got = [(i, o.get()) for i, o in ordered_map(paced, range(16), 2, 16, 8, "flowtest", ordered=ordered, timeout=1)]
    assert sorted(got) == [(i, i) for i in range(16)] and (got == sorted(got) if ordered else True)
    assert engine_threads() == 0
    release = threading.Event()

    def stuck_at_3(i: int) -> int:
        if i == 3:
            release.wait(30)
        time.sleep(0.2)
        return i
    start = time.monotonic()
    try:
        with pytest.raises(WorkerTimeoutError, match=r"^thread flowtest_0 gave no result for 1 s \(timeout=1\)"):
            list(ordered_map(stuck_at_3, range(8), 2, 8, 8, "flowtest", ordered=ordered, timeout=1))
        assert time.monotonic() - start < 3 * 0.2 + 1 + 1.0  # items 0-2, then the timeout
    finally:
        release.set()
    assert engine_threads_within(5) == 0
