"""picpac.work_pool: batchup's worker pools on picpac's engines.

Parallel batches equal the serial ones; a worker's exception reaches the consumer (same type, its
traceback); a killed worker is an error at once; close() and ``with`` leave no thread, process or
/dev/shm block behind, under fork and spawn. Functions and classes the workers use are at module
level, so spawned workers import them from here.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import types
from multiprocessing import resource_tracker
from pathlib import Path

import numpy as np
import pytest

from picpac import data_source
from picpac.data_source import ArrayDataSource, ChoiceDataSource, CompositeDataSource
from picpac.errors import PicPacError, PicPacTypeError, WorkerError
from picpac.engine.shared_memory import PREFIX
from picpac.work_pool import SharedConstant, WorkerProcessPool, WorkerThreadPool

from helpers import children

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not sys.platform.startswith("linux"),
                                reason="needs Linux /proc and /dev/shm")
METHODS = ["fork", "spawn"]


# -- what the workers run (module level) --------------------------------------------------------------
def add(*args, scale=1):
    return sum(args) * scale, os.getpid()


def slow_square(x):
    time.sleep(0.02)
    return x * x


def fail_on(x, bad=3):
    if x == bad:
        raise KeyError(f"bad item {x}")
    return x


def big(x):
    return np.full(50_000, x, np.int64)  # 400 kB: more than a pipe holds


class Squares:
    """An array-like computing its samples on demand."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return np.asarray(index) ** 2


class Broken(Squares):
    def __getitem__(self, index):
        raise ZeroDivisionError("cannot load these samples")


def scale_batch(x, y):
    return x * 10, y


class Logged:
    """Appends a line to ``path`` whenever it is unpickled: counts how often a constant travels."""

    def __init__(self, path, payload):
        self.path, self.payload = path, payload

    def __setstate__(self, state):
        self.__dict__.update(state)
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


def payload_size(constant):
    return len(constant.payload)


# -- no leftovers ---------------------------------------------------------------------------------


def blocks() -> set[str]:
    mine = f"{PREFIX}{os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(mine)}


def work_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("picpac-work")]


@pytest.fixture
def clean():
    """The test leaves no worker process, work thread or shared-memory block behind."""
    resource_tracker.ensure_running()  # one process for the session, not a leak
    before = children()
    yield
    deadline = time.monotonic() + 2
    while (children() - before or work_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert children() - before == set() and work_threads() == [] and blocks() == set()


def copy_batches(batches) -> list:
    return [tuple(np.array(a) for a in b) for b in batches]


def equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
                                    for x, y in zip(a, b))


def sources():
    X, Y = np.arange(37), np.arange(74).reshape(37, 2)
    plain = ArrayDataSource([Squares(37), Y], repeats=2, include_indices=True)
    subset = ArrayDataSource([X, Y], indices=np.arange(3, 37, 2), repeats=-1).map(scale_batch)
    lab = ArrayDataSource([X[:9], Y[:9]], repeats=-1)
    composite = CompositeDataSource([lab, ArrayDataSource([X])], trim=False)
    choice = ChoiceDataSource([ArrayDataSource([X]), ArrayDataSource([Y])], stratified=True)
    return [(plain, {}), (subset, {"n": 9}), (composite, {}), (choice, {})]


def serial_and_parallel(pool):
    for ds, opts in sources():
        for shuffle in (None, 12345):
            def run(source):
                it = source.batch_iterator(6, shuffle=None if shuffle is None else np.random.RandomState(shuffle))
                return copy_batches(b if isinstance(b, tuple) else (b,) for b, _ in zip(it, range(opts.get("n", 10**6))))
            yield run(ds), run(pool.parallel_data_source(ds, batch_buffer_size=4))


# -- the same batches ---------------------------------------------------------------------------------
def test_threads_give_the_serial_batches(clean):
    with WorkerThreadPool(processes=3) as pool:
        for serial, parallel in serial_and_parallel(pool):
            assert serial and equal(serial, parallel)
        assert pool.shared_constant(pool) is pool


@pytest.mark.parametrize("method", METHODS)
def test_processes_give_the_serial_batches(clean, method):
    with WorkerProcessPool(processes=2, start_method=method) as pool:
        assert pool.start_method == method and len(pool.pids) == 2
        for serial, parallel in serial_and_parallel(pool):
            assert serial and equal(serial, parallel)
        stream = pool.work_stream(((add, (i, i), {"scale": 2}) for i in range(30)), task_buffer_size=5)
        got = [stream.retrieve() for _ in range(30)]
        assert [v for v, _ in got] == [4 * i for i in range(30)] and {p for _, p in got} == set(pool.pids)
        assert stream.retrieve() is None


def test_work_stream_order_buffer_and_task_forms(clean):
    started = []

    def record(i):
        started.append(i)
        time.sleep(0.002)
        return i
    with WorkerThreadPool(processes=4) as pool:
        stream = pool.work_stream(((record, (i,)) for i in range(40)), task_buffer_size=6)
        time.sleep(0.1)
        assert len(started) == 6  # the buffer filled as the stream was made, and no further
        assert [stream.retrieve() for _ in range(40)] == list(range(40))
        assert stream.retrieve() is None
        assert list(pool.work_stream([(time.time,), (max, (3, 9)), (sorted, ([3, 1],), {"reverse": True})])
                    .retrieve_iter())[1:] == [9, [3, 1]]
        with pytest.raises(PicPacTypeError, match=r"\(fn, args\)"):
            pool.work_stream([("not callable",)])
        # a parallel iterator starts gathering as soon as it is made (batchup's documented behaviour)
        seen = []
        ds = ArrayDataSource([np.arange(50)]).map(lambda x: seen.append(1) or (x,))
        it = pool.parallel_data_source(ds, batch_buffer_size=3).batch_iterator(5)
        time.sleep(0.1)
        assert len(seen) == 3
        assert len(list(it)) == 10


# -- errors ---------------------------------------------------------------------------------------------
def test_a_thread_task_error_reaches_the_consumer(clean):
    with WorkerThreadPool(processes=2) as pool:
        stream = pool.work_stream((fail_on, (i,)) for i in range(6))
        assert [stream.retrieve() for _ in range(3)] == [0, 1, 2]
        with pytest.raises(KeyError, match="bad item 3") as info:
            stream.retrieve()
        assert "in fail_on" in "".join(traceback.format_exception(info.value))  # the worker's frames
        assert [stream.retrieve() for _ in range(2)] == [4, 5]  # the stream goes on, as batchup's does
        it = pool.parallel_data_source(ArrayDataSource([Broken(20)])).batch_iterator(5)
        with pytest.raises(ZeroDivisionError, match="cannot load"):
            next(it)


@pytest.mark.parametrize("method", METHODS)
def test_a_process_task_error_reaches_the_consumer(clean, method):
    with WorkerProcessPool(processes=2, start_method=method) as pool:
        it = pool.parallel_data_source(ArrayDataSource([Broken(20)])).batch_iterator(5, shuffle=True)
        with pytest.raises(ZeroDivisionError, match="cannot load") as info:
            next(it)
        notes = "\n".join(info.value.__notes__)
        assert "traceback in picpac worker" in notes and "in __getitem__" in notes
        stream = pool.work_stream([(fail_on, (1,)), (lambda: 1,), (fail_on, (2,))])
        assert stream.retrieve() == 1
        with pytest.raises(PicPacTypeError, match="by pickling it"):  # a local function cannot travel
            stream.retrieve()
        assert stream.retrieve() == 2  # the pool is still fine


def test_a_task_a_spawned_worker_cannot_import_fails_alone(clean):
    module = types.ModuleType("only_in_the_consumer")
    exec("def triple(x):\n    return 3 * x\n", module.__dict__)
    sys.modules[module.__name__] = module  # importable here, not in a spawned worker
    try:
        with WorkerProcessPool(processes=1, start_method="spawn") as pool:
            stream = pool.work_stream([(module.triple, (2,)), (slow_square, (3,))])
            with pytest.raises(ModuleNotFoundError, match="only_in_the_consumer") as info:
                stream.retrieve()
            assert "traceback in picpac worker" in info.value.__notes__[-1]
            assert stream.retrieve() == 9  # the worker lives on
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("method", METHODS)
def test_a_killed_worker_is_an_error_within_5s(clean, method):
    pool = WorkerProcessPool(processes=2, start_method=method)
    stream = pool.work_stream(((slow_square, (i,)) for i in range(1000)), task_buffer_size=8)
    assert stream.retrieve() == 0
    victim = pool.pids[1]
    os.kill(victim, signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(WorkerError, match=rf"picpac worker 1 of 2 \(pid {victim}\) was killed by SIGKILL"):
        for _ in range(1000):
            stream.retrieve()
    assert time.monotonic() - t < 5
    assert pool.closed  # the other worker is stopped too
    with pytest.raises(WorkerError, match="stopped by WorkerError"):
        pool.work_stream([(slow_square, (1,))])


# -- cleanup, back-pressure, shared constants -----------------------------------------------------
@pytest.mark.parametrize("kind", ["thread", "fork"])
def test_close_and_with_stop_everything(clean, kind):
    def make():
        return WorkerThreadPool(processes=3) if kind == "thread" else WorkerProcessPool(processes=3, start_method="fork")
    pool = make()
    stream = pool.work_stream((slow_square, (i,)) for i in range(100))
    stream.retrieve()
    if kind == "thread":
        assert len(work_threads()) == 3
    else:
        assert set(pool.pids) <= children()
    pool.close()
    pool.close()
    assert pool.closed
    with pytest.raises(PicPacError):
        pool.work_stream([(slow_square, (1,))])
    with make() as pool:
        it = pool.parallel_data_source(ArrayDataSource([np.arange(100)])).batch_iterator(3)
        next(it)
    # dropping an iterator half way abandons its tasks; the pool goes on
    with make() as pool:
        pds = pool.parallel_data_source(ArrayDataSource([np.arange(300)]), batch_buffer_size=10)
        for _ in range(3):
            it = pds.batch_iterator(7, shuffle=np.random.RandomState(0))
            next(it)
            del it
        assert [b[0].tolist() for b in pds.batch_iterator(100)][-1] == list(range(200, 300))


def test_results_larger_than_a_pipe_and_a_long_buffer(clean):
    with WorkerProcessPool(processes=1, start_method="fork") as pool:
        stream = pool.work_stream(((big, (i,)) for i in range(150)), task_buffer_size=150)  # > 64 per worker
        assert [int(stream.retrieve()[0]) for _ in range(150)] == list(range(150))


@pytest.mark.parametrize("method", METHODS)
def test_a_shared_constant_travels_once_per_worker(clean, method, tmp_path):
    log = tmp_path / "unpickled.txt"
    with WorkerProcessPool(processes=2, start_method=method) as pool:
        constant = pool.shared_constant(Logged(str(log), b"x" * 100_000))
        assert isinstance(constant, SharedConstant) and len(blocks()) == 1
        log.write_text("")  # the pickling in this process does not count
        stream = pool.work_stream(((payload_size, (constant,)) for _ in range(40)), task_buffer_size=8)
        assert list(stream.retrieve_iter()) == [100_000] * 40
        assert len(log.read_text().split()) <= 2  # once per worker, not once per task
        del constant, stream
        assert blocks() == set()  # freed with the constant
        pool.shared_constant(np.arange(10))
    assert blocks() == set()  # and by close()


def test_a_parallel_source_checks_its_arguments(clean):
    with WorkerThreadPool() as pool:
        with pytest.raises(TypeError, match="must be a data source"):
            pool.parallel_data_source(Squares(4))
        with pytest.raises(TypeError, match="random access"):
            pool.parallel_data_source(data_source.CallableDataSource(lambda bs, **kw: iter(())))
        pds = pool.parallel_data_source(ArrayDataSource([np.arange(10)], repeats=3))
        assert pds.num_samples() == 30 and not pds.is_random_access
        (total,) = pds.batch_map_concat(lambda x: x, 4)
        assert total.tolist() == list(range(10)) * 3
