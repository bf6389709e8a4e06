"""The probes a forked worker runs first (picpac/engine/processes.py): registered by the layer that uses a
native library (the image layer, OpenCV's), run by every forked pool by default, named nowhere in the engine."""
from __future__ import annotations

import os
import threading
import warnings

import pytest

from picpac.engine import processes
from picpac.engine.processes import OK, ProcessPool, register_fork_probe


def _double():
    return lambda x: 2 * x


@pytest.fixture
def probes(monkeypatch):
    """The registry, emptied for the test (the image layer's probe is put back after)."""
    registered: list = []
    monkeypatch.setattr(processes, "_FORK_PROBES", registered)
    return registered


def test_the_image_layer_registers_opencv_s_probe():
    from picpac.image.decoding import opencv_probe
    assert opencv_probe in processes._FORK_PROBES
    opencv_probe()  # runs here too: the calls exist in this OpenCV


def _pipe_probe(fd: int):
    def probe():
        os.write(fd, f"{os.getpid()}\n".encode())
    return probe


def _pids(read_fd: int) -> list[int]:
    os.set_blocking(read_fd, False)
    try:
        data = os.read(read_fd, 4096)
    except BlockingIOError:
        data = b""
    return sorted(int(line) for line in data.split())


@pytest.mark.parametrize("method, probe, runs", [("fork", processes.fork_probes, True), ("fork", None, False),
                                                  ("spawn", processes.fork_probes, False)])
def test_every_forked_worker_runs_the_registered_probes_by_default(probes, method, probe, runs):
    read_fd, write_fd = os.pipe()
    try:
        register_fork_probe(_pipe_probe(write_fd))
        register_fork_probe(probes[0])  # once, however often it is registered
        assert len(probes) == 1
        kw = {} if probe is processes.fork_probes else {"probe": probe}
        with ProcessPool(_double, 2, method, shaped=False, **kw) as pool:
            assert [pool.result(pool.submit(i)) for i in (3, 4)] == [(OK, None, 6), (OK, None, 8)]
            assert _pids(read_fd) == (sorted(pool.pids) if runs else [])
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_registered_probe_that_hangs_on_a_lock_held_at_the_fork_has_the_worker_forked_again(probes, monkeypatch):
    """The default probe finds a forked worker that a lock copied locked would hang, as an explicit one does."""
    monkeypatch.setattr(processes, "PROBE_TIMEOUT", 1.0)
    lock, taken = threading.Lock(), threading.Event()

    def hold():
        with lock:
            taken.set()
            threading.Event().wait(1.3)  # let go after the second fork (at 1 s), well before the third (at 2 s)
    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    taken.wait()

    def probe():
        with lock:
            pass
    register_fork_probe(probe)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = ProcessPool(_double, 1, "fork", shaped=False)
    with pool:
        assert pool.result(pool.submit(5)) == (OK, None, 10)
    assert [str(w.message) for w in caught if "hung right after fork" in str(w.message)] != []
    holder.join()
