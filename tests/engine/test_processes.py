"""backend='process': the same batches as threads, and no process or /dev/shm block outlives the stream.

Real worker processes and real POSIX shared memory: nothing is mocked. Transforms used by workers
are module-level, so spawned workers import them from this module.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.engine.processes import ProcessPool, WorkerError, process_map
from picpac.transforms import Sample

from helpers import alive, blocks

from helpers import make_db, run

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not sys.platform.startswith("linux"),
                                reason="needs Linux /proc and /dev/shm")
TESTS = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # this module, helpers


# -- transforms run in the workers (module level: spawned workers import them from here) -------------
def jitter(sample: Sample, rng) -> Sample:
    """Python work that uses the sample's RNG: brightness noise on the image."""
    noise = rng.integers(0, 20, sample.image.shape, dtype=np.uint8)
    sample.image = np.minimum(sample.image.astype(np.int16) + noise, 255).astype(np.uint8)
    return sample


def boom(sample: Sample, rng) -> Sample:
    if sample.record == 7:
        raise ZeroDivisionError("bad transform")
    return sample


class Unpicklable(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled


def raise_unpicklable(sample: Sample, rng) -> Sample:
    if sample.record == 3:
        raise Unpicklable("holds a lock")
    return sample


def slow(sample: Sample, rng) -> Sample:
    time.sleep(0.005)
    return sample


class Count:
    """Appends the record to a file: counts the samples started across processes."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, sample: Sample, rng) -> Sample:
        with open(self.path, "a") as f:
            f.write(f"{sample.record}\n")
        return sample


def square(i: int) -> int:
    if i == 13:
        raise KeyError("thirteen")
    return i * i


def square_recipe():
    return square


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "db.picpac", 30, size=(24, 18))


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
                                    for x, y in zip(a, b))


def take(stream, batches: int | None = None) -> list:
    """Like test_stream.run, but each batch copied as it comes: a process batch's images are a view into
    shared memory that is reused once two more batches were asked for."""
    out = []
    for i, batch in enumerate(stream):
        out.append(tuple(np.array(part) if isinstance(part, np.ndarray) else part for part in batch))
        if batches is not None and i + 1 == batches:
            break
    return out


# -- the same batches ------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("loop", [True, False])
def test_same_batches_as_threads(db, clean, workers, loop):
    config = dict(batch=7, perturb=True, crop_width=16, crop_height=12, seed=5, transforms=[jitter],
                  loop=loop, pad=True, workers=workers, preload=6)
    def batches(**backend):
        with picpac.ImageStream(db, **config, **backend) as s:
            if loop:
                got = take(s, 12)
            else:  # two passes: reshuffled, the workers kept from one pass to the next
                got = take(s) + take(s)
            return got, s.stats()
    threads, thread_stats = batches()
    processes, process_stats = batches(backend="process")
    assert same(threads, processes) and thread_stats == process_stats
    if not loop:
        assert [b[2] for b in processes] == [0, 0, 0, 0, 5] * 2


def test_skipped_samples_and_odd_shapes_match_threads(tmp_path, clean):
    path = make_db(tmp_path / "db.picpac", 40, size=(10, 8), broken={0, 1, 5, 6, 7, 20, 39})
    config = dict(batch=4, skip_errors=True, loop=False, workers=2, preload=5, transforms=[jitter])
    with picpac.ImageStream(path, **config) as s:
        want, want_stats = take(s), s.stats()
    with picpac.ImageStream(path, backend="process", **config) as s:
        got, got_stats = take(s), s.stats()
    assert same(want, got) and want_stats == got_stats and got_stats["skipped"] == 7
    # batch=1 without resizing: every image its own size; the ones that do not fit the ring come back pickled
    sizes = tmp_path / "sizes.picpac"
    with picpac.Writer(sizes) as w:
        for i in range(9):
            w.append(image=make_png(6 + i % 3, 5 + i % 2, i), label=i)
    config = dict(batch=1, loop=False, shuffle=False, workers=2)
    with picpac.ImageStream(sizes, **config) as s:
        want = take(s)
    with picpac.ImageStream(sizes, backend="process", **config) as s:
        assert same(want, take(s))
    with picpac.ImageStream(sizes, batch=3, loop=False, backend="process", workers=2) as s:
        with pytest.raises(picpac.PicPacValueError, match="different sizes.*resize_width/resize_height"):
            take(s)


def make_png(w: int, h: int, value: int) -> bytes:
    import cv2
    return cv2.imencode(".png", np.full((h, w, 3), value, np.uint8))[1].tobytes()


def test_views_into_shared_memory_stay_valid(db, clean):
    with picpac.ImageStream(db, batch=5, backend="process", workers=2, dtype="uint8", copy=False) as s:
        first = next(s)[0]
        kept = first.copy()
        assert not first.flags.owndata and first.base is not None  # a view: no copy was made
        second = next(s)[0]
        assert np.array_equal(first, kept)  # still intact while the next batch is in use (KEEP=2)
        assert second.shape == first.shape
        del first, second  # kept longer, they would change (and a RuntimeWarning would say so)
        for _ in range(10):
            next(s)
        last = next(s)[0]
        held = last.copy()
    assert np.array_equal(last, held)  # the stream is closed and unlinked: the mapping lives on with the view
    with picpac.ImageStream(db, batch=8, loop=False, backend="process", workers=2, preload=8, copy=False) as s:
        for last in s:  # a pass: 4 batches on a ring of 3 buffers, the last in buffer 0
            pass
        held, pids = last[0].copy(), s._pipeline.executor.pool.pids
        first = next(s)[0]  # the next pass: same workers, and the ring counts on (last stays intact)
        assert np.array_equal(last[0], held) and s._pipeline.executor.pool.pids == pids
        del last, first
    with picpac.ImageStream(db, batch=5, backend="process", workers=1) as s:  # copy=True, the default
        images = next(s)[0]  # a copy in memory of its own (an aligned slice of a NumPy buffer), not a view
        assert isinstance(images.base, np.ndarray) and images.base.flags.owndata
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kept = run(s, 5)  # copies: keeping them is fine
    with picpac.ImageStream(db, batch=5, workers=1) as s:
        next(s)
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(kept, run(s, 5), strict=True))  # as threads make them
    with picpac.ImageStream(db, batch=5, backend="process", workers=1, copy=False) as s:
        with pytest.warns(RuntimeWarning, match="still referenced while its shared memory is reused.*copy=True"):
            run(s, 5)  # keeps every batch: the first ones are overwritten, and that is said


def test_preload_bounds_the_samples_in_flight(db, clean, tmp_path):
    log = tmp_path / "calls.txt"
    log.touch()
    with picpac.ImageStream(db, batch=4, workers=2, preload=5, backend="process", transforms=[Count(str(log))]) as s:
        next(s)
        time.sleep(0.3)
        assert len(log.read_text().split()) <= 4 + 5
        next(s)
        time.sleep(0.3)
        assert len(log.read_text().split()) <= 8 + 5


# -- keys ------------------------------------------------------------------------------------------
def test_keys(db, clean):
    with pytest.raises(picpac.PicPacValueError, match="'threads' .* and 'workers' .* give one"):
        picpac.ImageStream(db, threads=2, workers=3)
    with pytest.raises(picpac.PicPacValueError, match="'backend' must be one of 'thread', 'process'"):
        picpac.ImageStream(db, backend="gpu")
    with pytest.raises(picpac.PicPacValueError, match="'start_method' must be one of 'spawn', 'fork'"):
        picpac.ImageStream(db, start_method="forkserver")
    with picpac.ImageStream(db, threads=3) as s:
        assert s.config["workers"] == s.config["threads"] == 3
    # spawn pickles the work: a lambda is refused at once, naming the way out; fork inherits it
    flip = lambda sample, rng: sample  # noqa: E731
    with pytest.raises(picpac.PicPacTypeError, match="start_method='fork'"):
        picpac.ImageStream(db, backend="process", transforms=[flip])
    config = dict(batch=6, seed=1, perturb=True, crop_width=10, crop_height=10, workers=2)
    with picpac.ImageStream(db, **config, transforms=[flip, jitter]) as s:
        want = take(s, 4)
    with picpac.ImageStream(db, **config, transforms=[flip, jitter], backend="process", start_method="fork") as s:
        assert same(want, take(s, 4))


# -- errors ------------------------------------------------------------------------------------------
def test_worker_exception_reaches_the_consumer(db, clean):
    with picpac.ImageStream(db, shuffle=False, batch=4, workers=2, backend="process", transforms=[boom]) as s:
        with pytest.raises(ZeroDivisionError, match="bad transform") as info:
            take(s)
        notes = "\n".join(info.value.__notes__)
        assert "record 7" in notes  # the processor's note survived the trip
        assert "traceback in picpac worker" in notes and 'in boom\n    raise ZeroDivisionError' in notes
        assert s._pipeline.executor.pool is None  # stopped at once, not at close()
    with picpac.ImageStream(db, shuffle=False, batch=4, workers=2, backend="process",
                            transforms=[raise_unpicklable]) as s:
        with pytest.raises(WorkerError, match=r"test_processes.Unpicklable: holds a lock") as info:
            take(s)
        assert isinstance(info.value, picpac.PicPacError)
        assert "raise Unpicklable" in "\n".join(info.value.__notes__)


def test_worker_that_cannot_start(db, clean):
    s = picpac.ImageStream(db, backend="process", workers=2)
    with picpac.Writer(db, append=True) as w:  # the workers reopen the file and find it changed
        w.append(image=make_png(4, 4, 1))
    with pytest.raises(picpac.PicPacError, match="the database changed") as info:
        next(s)
    assert "failed to start" in "\n".join(info.value.__notes__)
    s.close()


def test_sigkill_of_a_worker_is_reported_within_5s(db, clean):
    with picpac.ImageStream(db, batch=4, workers=2, backend="process", transforms=[slow]) as s:
        next(s)
        victim = s._pipeline.executor.pool.pids[1]
        os.kill(victim, signal.SIGKILL)
        t = time.monotonic()
        with pytest.raises(WorkerError, match=rf"picpac worker 1 of 2 \(pid {victim}\) was killed by SIGKILL"):
            for _ in range(10_000):
                next(s)
        assert time.monotonic() - t < 5


@pytest.mark.parametrize("vectorized", [False, True])
def test_a_stopped_worker_is_a_timeout_error_naming_it(tmp_path, clean, vectorized):
    """A worker stopped mid-epoch (SIGSTOP: as one stuck in a native call or on a dead mount) fails next()
    within the stream's timeout, naming the worker and the setting; the workers are all gone after."""
    if vectorized:  # fixed-shape arrays: the batch path's jobs
        path = tmp_path / "arrays.picpac"
        picpac.write_arrays(path, np.arange(40 * 12 * 10 * 3).astype(np.uint8).reshape(40, 12, 10, 3),
                            labels=np.arange(40) % 3)
        config = dict(batch=2, vectorize=True)
    else:
        path, config = make_db(tmp_path / "db.picpac", 30, size=(24, 18)), dict(batch=4, transforms=[slow])
    with picpac.ImageStream(path, workers=2, backend="process", timeout=1.5, **config) as s:
        next(s), next(s)  # both workers started (each sent a result)
        victim = s._pipeline.executor.pool.pids[1]
        os.kill(victim, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(picpac.WorkerTimeoutError) as info:
            for _ in range(10_000):
                next(s)
        assert time.monotonic() - start < 1.5 + 3
        assert str(info.value).startswith(f"picpac worker 1 of 2 (pid {victim}) sent nothing for 1.5 s "
                                          "(timeout=1.5); it is stopped (SIGSTOP, a debugger)")
        assert isinstance(info.value, TimeoutError) and s._pipeline.executor.pool is None
    assert not alive(victim)


def test_a_stuck_thread_fails_the_stream_within_its_timeout(db):
    release = threading.Event()

    def stuck(sample: Sample, rng) -> Sample:
        if sample.record == 9:
            release.wait(30)
        return sample
    try:
        with picpac.ImageStream(db, batch=4, workers=2, shuffle=False, timeout=1, transforms=[stuck]) as s:
            start = time.monotonic()
            with pytest.raises(picpac.WorkerTimeoutError, match=r"^thread picpac-stream_\d gave no result for 1 s "
                                                                 r"\(timeout=1\)"):
                for _ in range(10_000):
                    next(s)
            assert time.monotonic() - start < 1 + 3
    finally:
        release.set()


def test_break_close_and_del_stop_the_workers_within_1s(db, clean):
    def stopped(pids: list[int]) -> bool:
        deadline = time.monotonic() + 1
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        return not any(alive(p) for p in pids) and blocks() == set()
    s = picpac.ImageStream(db, batch=2, workers=2, backend="process", transforms=[slow])
    for _ in s:
        pids = s._pipeline.executor.pool.pids
        assert all(alive(p) for p in pids) and len(blocks()) == 1
        break
    assert stopped(pids)
    next(s)
    pids = s._pipeline.executor.pool.pids
    s.close()
    assert stopped(pids)
    s = picpac.ImageStream(db, batch=2, workers=2, backend="process")
    next(s)
    pids = s._pipeline.executor.pool.pids
    del s
    assert stopped(pids)


# -- whole processes: Ctrl-C, and an exit without close() ----------------------------------------------
SCRIPT = """
import sys, time
sys.path[:0] = {tests!r}
import picpac
from test_processes import slow

if __name__ == "__main__":
    stream = picpac.ImageStream({db!r}, batch=4, workers=2, backend="process", transforms=[slow])
    {body}
"""


def script(tmp_path: Path, db: Path, body: str) -> list[str]:
    path = tmp_path / "script.py"
    path.write_text(SCRIPT.format(tests=TESTS, db=str(db), body=textwrap.indent(textwrap.dedent(body), "    ").strip()))
    return [sys.executable, str(path)]


def test_ctrl_c_stops_everything(db, tmp_path, clean):
    body = """
    try:
        for i, batch in enumerate(stream):
            if i == 0:
                print(*stream._pipeline.executor.pool.pids, flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
    proc = subprocess.Popen(script(tmp_path, db, body), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and blocks(proc.pid)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in out, err
    assert "Traceback" not in err and "resource_tracker" not in err, err
    assert blocks(proc.pid) == set() and not any(alive(p) for p in pids)


def test_exit_without_close_leaves_nothing(db, tmp_path, clean):
    body = """
    for _ in range(3):
        next(stream)
    import os
    print(os.getpid(), *stream._pipeline.executor.pool.pids, flush=True)
    """
    proc = subprocess.run(script(tmp_path, db, body), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    pid, *workers = [int(p) for p in proc.stdout.split()]
    assert len(workers) == 2 and blocks(pid) == set() and not any(alive(p) for p in workers)


# -- the engine on its own -----------------------------------------------------------------------------
def test_process_map_is_ordered_and_delivers_errors(clean):
    outcomes = list(process_map(square_recipe, range(40), workers=2, window=7))
    assert [i for i, _ in outcomes] == list(range(40))
    assert [o.get() for i, o in outcomes if i != 13] == [i * i for i in range(40) if i != 13]
    with pytest.raises(KeyError, match="thirteen") as info:
        outcomes[13][1].get()
    assert "in square" in info.value.__notes__[-1]
    with pytest.raises(picpac.PicPacValueError):
        ProcessPool(square_recipe, 0)


def test_a_full_dev_shm_is_an_error_not_a_bus_error(clean):
    from picpac.engine.shared_memory import SharedBlock
    fs = os.statvfs("/dev/shm")
    with pytest.raises(picpac.PicPacError, match=r"cannot reserve .* MiB of shared memory.*--shm-size"):
        SharedBlock.create(2 * fs.f_blocks * fs.f_frsize)  # tmpfs refuses more than its size at once


# -- fork with other threads running ---------------------------------------------------------------------
def _held_lock(seconds: float | None) -> tuple[threading.Lock, threading.Thread]:
    """A lock another thread holds (for ``seconds``, or until told): what a fork copies locked."""
    lock, taken, release = threading.Lock(), threading.Event(), threading.Event()

    def hold():
        with lock:
            taken.set()
            release.wait(seconds)
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    taken.wait()
    thread.release = release
    return lock, thread


def test_a_worker_forked_while_a_lock_was_held_is_forked_again(clean, monkeypatch):
    from picpac.engine import processes
    monkeypatch.setattr(processes, "PROBE_TIMEOUT", 1.0)
    lock, holder = _held_lock(1.3)  # let go after the second fork (at 1 s), well before the third (at 2 s)

    def probe():
        with lock:
            pass
    with pytest.warns(RuntimeWarning, match=r"worker \d of 2 \(pid \d+\) hung right after fork .* forked again"):
        pool = ProcessPool(square_recipe, 2, "fork", shaped=False, probe=probe)
    with pool:
        assert [pool.result(pool.submit(i)) for i in (2, 3)] == [(processes.OK, None, 4), (processes.OK, None, 9)]
    holder.join()


def test_a_worker_that_hangs_after_every_fork_is_an_error(clean, monkeypatch):
    from picpac.engine import processes
    monkeypatch.setattr(processes, "PROBE_TIMEOUT", 0.3)
    lock, holder = _held_lock(None)

    def probe():
        with lock:
            pass
    started = time.monotonic()
    with pytest.warns(RuntimeWarning), pytest.raises(WorkerError, match=r"hung right after fork 3 times .* "
                                                     r"start_method='spawn'"):
        ProcessPool(square_recipe, 2, "fork", shaped=False, probe=probe)
    assert time.monotonic() - started < 5
    holder.release.set()
    holder.join()


def test_a_forked_worker_whose_probe_fails_says_why(clean):
    def probe():
        raise OSError("no such library")
    with pytest.raises(OSError, match="no such library") as info:
        ProcessPool(square_recipe, 1, "fork", shaped=False, probe=probe)
    assert any(note.endswith("failed to start") for note in info.value.__notes__)


def test_frames_sent_in_pieces_arrive_whole():
    """A task goes out as its length header and its pickle, apart (no copy to join them), in as many
    non-blocking writes as the socket takes; the worker's Connection.recv() reads each message whole."""
    import selectors
    import socket
    from multiprocessing.connection import Connection
    from picpac.engine.processes import _frame, _send_now, _skip

    parts = [memoryview(b"abcd"), memoryview(b"efgh")]
    assert [bytes(p) for p in _skip(parts, 0)] == [b"abcd", b"efgh"]
    assert [bytes(p) for p in _skip(parts, 3)] == [b"d", b"efgh"]
    assert [bytes(p) for p in _skip(parts, 4)] == [b"efgh"]
    assert [bytes(p) for p in _skip(parts, 7)] == [b"h"]
    assert _skip(parts, 8) == []
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    receiver = Connection(theirs.detach())
    messages = [("task", i, np.arange(i * 7919 % 300_000, dtype=np.uint8)) for i in range(40)]
    got = []
    reader = threading.Thread(target=lambda: got.extend(receiver.recv() for _ in messages))
    reader.start()
    writes = 0
    with selectors.DefaultSelector() as selector:
        selector.register(ours, selectors.EVENT_WRITE)
        for message in messages:
            left = _frame(message)
            while left:
                left = _send_now(ours, left)
                writes += 1
                if left:
                    selector.select(5)
    reader.join(10)
    ours.close()
    receiver.close()
    assert writes > 2 * len(messages)  # messages larger than the buffer went in pieces
    assert [(m[0], m[1], m[2].tolist()) for m in got] == [(m[0], m[1], m[2].tolist()) for m in messages]
