"""picpac.dataflow's parallel flows (parallel.py's runners, and what they share with parallel_map.py's maps, whose
own tests are in test_parallel_map.py): exact outputs, errors forwarded, dead workers, no leftovers, seeds, fork/spawn.

Real threads and real worker processes. Functions and flows used by workers are module-level, so that
spawned workers import them from this module (or from dataflow_helpers).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

from picpac.dataflow import (DataFlow, DataFlowError, MapData, MultiProcessMapAndBatchData, MultiProcessMapData,
                             MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadRunner,
                             RepeatedData, RNGDataFlow, worker_path)
from picpac.errors import PicPacTypeError, PicPacValueError, WorkerError, WorkerTimeoutError

from dataflow_helpers import double, engine_threads, numbers, refuses_a_second_iterator, take
from helpers import alive, children

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
TESTS = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]  # this module, helpers


# -- what the workers run (module level: spawned workers import it from here) ------------------------------
def global_draws(dp):
    return [dp[0], int(np.random.randint(1 << 62)), random.getrandbits(62)]


def slow(dp):
    time.sleep(0.005)
    return dp


class Tagged(RNGDataFlow):
    """Yields where it runs and what its RNG draws: [pid, worker path, draw]."""

    def __init__(self, n: int = 8, seed: int | None = None, delay: float = 0.0):
        self.n, self.seed, self.delay = n, seed, delay

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            if self.delay:
                time.sleep(self.delay)
            yield [os.getpid(), worker_path(), int(self.rng.randint(1 << 30))]


class Failing(DataFlow):
    def __iter__(self):
        yield from ([0], [1], [2])
        raise ZeroDivisionError("boom in the source")


def make_failing() -> Failing:
    return Failing()


# -- what must not outlive a flow (the clean fixture is in conftest.py) ----------------------------------------
def gone(pids, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(alive(p) for p in pids)


# -- exact outputs ------------------------------------------------------------------------------------------
def test_runners_yield_passes(clean):
    with MultiProcessRunner(numbers(12), num_prefetch=5, num_proc=1) as r:
        r.reset_state()
        assert len(r) == 12
        assert list(r) == [[i] for i in range(12)] and list(r) == [[i] for i in range(12)]
    with MultiProcessRunnerZMQ(numbers(12), num_proc=2, hwm=6) as r:
        r.reset_state()
        out = [dp[0] for dp in r]
        assert len(out) == 12 and set(out) <= set(range(12))
        assert len(r.pids) == 2
    with MultiThreadRunner(lambda: numbers(9), num_prefetch=4, num_thread=1) as t:
        t.reset_state()
        assert list(t) == [[i] for i in range(9)] == list(t)
    with MultiThreadRunner(lambda: numbers(9), num_prefetch=4, num_thread=3) as t:
        t.reset_state()
        assert len(t) == 9 and len(list(t)) == 9
        assert engine_threads()
    assert engine_threads() == []  # close() joined them


# -- errors -------------------------------------------------------------------------------------------------
def test_runner_errors_reach_the_consumer_and_stop_the_flow(clean):
    with MultiProcessRunner(Failing(), num_prefetch=2, num_proc=2) as r:
        r.reset_state()
        with pytest.raises(ZeroDivisionError, match="boom in the source") as info:
            take(r, 50)
        assert "raise ZeroDivisionError" in "\n".join(info.value.__notes__)
        assert r.pids == []  # stopped at once
        with pytest.raises(DataFlowError, match="stopped after an error"):
            iter(r)
    with MultiThreadRunner(make_failing, num_prefetch=2, num_thread=2) as t:
        t.reset_state()
        with pytest.raises(ZeroDivisionError) as info:
            take(t, 50)
        assert "in __iter__" in "".join(traceback.format_exception(info.value))
        with pytest.raises(DataFlowError, match="stopped after an error"):
            iter(t)


@pytest.mark.parametrize("kind", ["runner", "map"])
def test_sigkill_of_a_worker_is_reported_within_5s(clean, kind):
    if kind == "runner":
        df = MultiProcessRunner(Tagged(10**6, delay=0.002), num_prefetch=4, num_proc=2)
    else:
        df = MultiProcessMapData(RepeatedData(numbers(10), -1), 2, slow, buffer_size=6)
    with df:
        df.reset_state()
        it = iter(df)
        next(it)
        victim = df.pids[1]
        os.kill(victim, signal.SIGKILL)
        t = time.monotonic()
        with pytest.raises(WorkerError, match=rf"picpac worker 1 of 2 \(pid {victim}\) was killed by SIGKILL"):
            for _ in range(10**6):
                next(it)
        assert time.monotonic() - t < 5
        assert df.pids == []
        with pytest.raises(DataFlowError, match="stopped after an error"):
            iter(df)


def paced(dp):
    time.sleep(0.2)
    return dp


@pytest.mark.parametrize("kind", ["runner", "runner-zmq", "map", "map-strict", "map-and-batch"])
def test_a_stopped_worker_is_a_timeout_error_naming_it(clean, kind):
    """A worker stopped (SIGSTOP: as one stuck in a native call or on a dead mount) while the other goes on is
    a WorkerTimeoutError naming it within the flow's timeout; the flow stops and no process is left. Items of
    0.2 s each are asked for one at a time, so a timeout of 1 s is never reached while they move."""
    df = {"runner": lambda: MultiProcessRunner(Tagged(10**6, delay=0.2), num_prefetch=16, num_proc=2, timeout=1),
          "runner-zmq": lambda: MultiProcessRunnerZMQ(Tagged(10**6, delay=0.2), num_proc=2, hwm=16, timeout=1),
          "map": lambda: MultiProcessMapData(RepeatedData(numbers(10), -1), 2, paced, buffer_size=16, timeout=1),
          "map-strict": lambda: MultiProcessMapData(numbers(1000), 2, paced, 16, strict=True, timeout=1),
          "map-and-batch": lambda: MultiProcessMapAndBatchData(numbers(10), 2, paced, 8, 32, timeout=1)}[kind]()
    with df:
        df.reset_state()
        it = iter(df)
        for _ in range(12 if kind != "map-and-batch" else 2):  # 2.4 s of items: no timeout while they move
            next(it)
        pids = df.pids
        os.kill(pids[1], signal.SIGSTOP)
        start = time.monotonic()
        try:
            with pytest.raises(WorkerTimeoutError, match=rf"^picpac worker 1 of 2 \(pid {pids[1]}\) sent nothing for "
                                                         r"1 s \(timeout=1\); it is stopped \(SIGSTOP"):
                while time.monotonic() - start < 10:
                    next(it)
            assert time.monotonic() - start < 0.2 + 1 + 1.0  # its item, then the timeout
        finally:
            if any(alive(p) for p in pids):
                os.kill(pids[1], signal.SIGCONT)
        assert df.pids == [] and gone(pids, 0)
        with pytest.raises(DataFlowError, match="stopped after an error"):
            iter(df)


def stuck_at_5(dp, release=threading.Event()):
    if dp[0] == 5:
        release.wait(30)
    time.sleep(0.2)
    return dp


@pytest.mark.parametrize("kind", ["map", "map-strict", "runner"])
def test_a_stuck_thread_is_a_timeout_error_naming_it(clean, kind):
    """A thread whose call does not return fails the thread flows within their timeout, naming the thread;
    the others go on in 0.2 s steps meanwhile, which a timeout of 1 s allows."""
    release = stuck_at_5.__defaults__[0]
    release.clear()
    df = {"map": lambda: MultiThreadMapData(RepeatedData(numbers(10), -1), 2, stuck_at_5, buffer_size=8, timeout=1),
          "map-strict": lambda: MultiThreadMapData(numbers(10), 2, stuck_at_5, 8, strict=True, timeout=1),
          "runner": lambda: MultiThreadRunner(lambda: MapData(RepeatedData(numbers(10), -1), stuck_at_5), 8, 2,
                                              timeout=1)}[kind]()
    start = time.monotonic()
    try:
        with df:
            df.reset_state()
            it = iter(df)
            got = []
            with pytest.raises(WorkerTimeoutError, match=r"^thread picpac-Multi\w+_\d gave no result for 1 s "
                                                         r"\(timeout=1\)"):
                while time.monotonic() - start < 10:
                    got.append(next(it)[0])
            assert time.monotonic() - start < 6 * 0.2 + 1 + 1.0  # items 0-4 on one thread, then the timeout
            assert 5 not in got and (got == [0, 1, 2, 3, 4] if kind == "map-strict" else len(got) >= 5)
            with pytest.raises(DataFlowError, match="stopped after an error"):
                iter(df)
    finally:
        release.set()


def test_a_timeout_is_checked_when_the_flow_is_made(clean):
    for bad in (0, -1, float("inf"), "5", True):
        for make in (lambda: MultiProcessRunner(numbers(4), 2, 1, timeout=bad),
                     lambda: MultiProcessRunnerZMQ(numbers(4), 1, timeout=bad),
                     lambda: MultiProcessMapData(numbers(4), 1, double, timeout=bad),
                     lambda: MultiProcessMapAndBatchData(numbers(8), 1, double, 2, 4, timeout=bad),
                     lambda: MultiThreadMapData(numbers(4), 1, double, timeout=bad),
                     lambda: MultiThreadRunner(lambda: numbers(3), 2, 1, timeout=bad)):
            with pytest.raises(PicPacValueError, match=r"^Multi\w+: timeout must be None or a number of seconds > 0, "
                                                       rf"got {bad!r}"):
                make()


@pytest.mark.parametrize("make", [
    lambda: MultiThreadMapData(numbers(50), 2, double, 8),
    lambda: MultiProcessMapData(numbers(50), 2, double, 8),
    lambda: MultiProcessMapAndBatchData(numbers(50), 2, double, 4, 16),
    lambda: MultiProcessRunner(Tagged(100), 4, 2),
    lambda: MultiThreadRunner(lambda: numbers(5), 4, 2),
], ids=["thread-map", "process-map", "map-and-batch", "process-runner", "thread-runner"])
def test_dropping_a_flow_stops_its_workers(clean, make):
    df = make()
    df.reset_state()
    it = iter(df)
    next(it), next(it)
    del it, df  # no close(): the clean fixture checks that nothing is left within 2 s


# -- misuse ---------------------------------------------------------------------------------------------------
def test_misuse_is_a_clear_error(clean):
    for df in (MultiProcessRunner(numbers(4), 2, 1), MultiProcessMapData(numbers(4), 1, double),
               MultiProcessMapAndBatchData(numbers(8), 1, double, 2, 4), MultiThreadRunner(lambda: numbers(3), 2, 1),
               MultiThreadMapData(numbers(4), 1, double)):
        with df:
            with pytest.raises(DataFlowError, match=r"reset_state\(\)"):
                iter(df)
            df.reset_state()
            if not isinstance(df, MultiThreadMapData):  # it restarts its threads, as tensorpack's does
                with pytest.raises(DataFlowError, match=r"reset_state\(\) was called twice"):
                    df.reset_state()
            refuses_a_second_iterator(df)
        with pytest.raises(DataFlowError, match="closed"):
            iter(df)
    shared = numbers(3)
    with pytest.raises(Exception, match="same DataFlow twice"):
        MultiThreadRunner(lambda: shared, 2, 2)
    with pytest.raises(TypeError, match="num_prefetch and num_proc"):
        MultiProcessRunner(numbers(3))


# -- randomness ----------------------------------------------------------------------------------------------
def streams(df, n: int) -> dict:
    out: dict = {}
    for pid, path, draw in take(df, n):
        out.setdefault(tuple(path), []).append(draw)
    return out


def test_workers_never_share_random_streams_and_seeds_reproduce(clean):
    def run(seed):
        with MultiProcessRunner(Tagged(1000, seed=seed, delay=0.002), num_prefetch=4, num_proc=2) as r:
            r.reset_state()
            return streams(r, 60)
    first = run(5)
    assert set(first) == {(0,), (1,)}
    a, b = first[(0,)], first[(1,)]
    k = min(len(a), len(b))
    assert k >= 5 and a[:k] != b[:k]  # two workers, two streams
    again = run(5)
    for path in again:  # the same seed: the same stream in each worker
        k = min(len(again[path]), len(first[path]))
        assert again[path][:k] == first[path][:k]
    with MultiThreadRunner(lambda: Tagged(1000, seed=5, delay=0.002), num_prefetch=4, num_thread=2) as t:
        t.reset_state()
        threads = streams(t, 40)
    assert set(threads) == {(0,), (1,)} and threads[(0,)][:3] != threads[(1,)][:3]
    with MultiProcessMapData(numbers(40), 2, global_draws, buffer_size=8, strict=True) as m:
        m.reset_state()
        draws = list(m)
    assert len({d[1] for d in draws}) == 40 and len({d[2] for d in draws}) == 40  # np.random / random: no repeats


# -- start methods ---------------------------------------------------------------------------------------------
def test_spawn(clean):
    with MultiProcessMapData(numbers(10), 2, double, buffer_size=4, strict=True, start_method="spawn") as m:
        m.reset_state()
        assert list(m) == [[2 * i] for i in range(10)]
    with MultiProcessRunner(Tagged(6, seed=3), num_prefetch=3, num_proc=1, start_method="spawn") as r:
        r.reset_state()
        out = list(r)
    assert len(out) == 6 and out[0][1] == (0,) and out[0][0] != os.getpid()
    with pytest.raises(PicPacTypeError, match="start_method='spawn' sends map_func to the workers by pickling it"):
        MultiProcessMapData(numbers(3), 1, lambda dp: dp, start_method="spawn").reset_state()
    with pytest.raises(Exception, match="start_method must be one of"):
        MultiProcessRunner(numbers(3), 2, 1, start_method="forkserver")


def test_nested_runners_leave_nothing(clean):
    inner = MultiProcessMapData(numbers(10), 1, double, buffer_size=4, strict=True)
    with MultiProcessRunnerZMQ(inner, num_proc=1, hwm=4) as r:
        r.reset_state()
        assert list(r) == [[2 * i] for i in range(10)]
        grandchildren = {g for p in r.pids for g in children(p)}
        assert grandchildren  # the inner flow's worker, started by the outer worker
    assert gone(grandchildren)


# -- whole processes ---------------------------------------------------------------------------------------------
SCRIPT = """
import sys, time
sys.path[:0] = {tests!r}
from picpac.dataflow import MultiProcessRunner, MultiProcessMapData, RepeatedData
from dataflow_helpers import numbers
from test_parallel import Tagged, slow

if __name__ == "__main__":
    runner = MultiProcessRunner(Tagged(10**6, delay=0.01), num_prefetch=4, num_proc=2)
    runner.reset_state()
    mapper = MultiProcessMapData(RepeatedData(numbers(5), -1), 2, slow, buffer_size=4)
    mapper.reset_state()
    next(iter(runner)), next(iter(mapper))
    print(*runner.pids, *mapper.pids, flush=True)
    {tail}
"""


def test_workers_die_with_their_parent(tmp_path, clean):
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT.format(tests=TESTS, tail="time.sleep(60)"))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 4 and all(alive(p) for p in pids), proc.stderr.read()
        proc.kill()  # SIGKILL: no finalizer runs in the parent
        proc.wait(10)
        assert gone(pids)
    finally:
        proc.kill()
        proc.wait()


def test_exit_without_close_leaves_nothing(tmp_path, clean):
    script = tmp_path / "exits.py"
    script.write_text(SCRIPT.format(tests=TESTS, tail="pass"))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 4 and gone(pids)


# -- the engine extensions the flows use ------------------------------------------------------------------------
def index_recipe():
    from picpac.engine.processes import worker_index
    index = worker_index()

    def work(item):
        time.sleep(0.05 if index == 0 else 0)  # worker 0 is slow: its replies come last
        return index, item
    return work


def test_engines_unordered_ready_and_drain(clean):
    from picpac.engine.threads import ordered_map
    from picpac.engine.processes import ProcessPool, pool_map, process_map, worker_index
    started = []

    def work(i):
        started.append(i)
        time.sleep(0.01 if i % 4 == 0 else 0)
        return i
    got = [(i, o.get()) for i, o in ordered_map(work, range(40), 3, 6, name="picpac-test", ordered=False)]
    assert sorted(got) == [(i, i) for i in range(40)] and [i for i, _ in got] != list(range(40))
    assert worker_index() is None
    out = [o.get() for _, o in process_map(index_recipe, range(8), 2, 8, method="fork", ordered=False)]
    assert sorted(item for _, item in out) == list(range(8)) and {w for w, _ in out} == {0, 1}
    assert [w for w, _ in out][-1] == 0  # completion order: the slow worker's replies last
    with ProcessPool(index_recipe, 2, method="fork", shaped=False) as pool:
        seqs = [pool.submit(i) for i in range(4)]
        first = pool.ready()
        assert first in seqs and pool.result(first)[0] == 0  # OK
        it = pool_map(pool, range(10), 4)
        next(it)
        it.close()  # left early: replies still due
        pool.drain()
        assert pool.pending == 0
        assert [o.get()[1] for _, o in pool_map(pool, range(5), 3)] == list(range(5))
