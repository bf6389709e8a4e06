"""The child-process harness (picpac/engine/child.py): how every child begins (signals, the parent's death)
and the forked child that runs one piece of work and reports back; the process pool's workers and the store
importers' children both run on it."""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import time

import pytest

from picpac.compat.dataflow.base import DataFlowError
from picpac.engine.child import ForkedChild, enter_child
from picpac.errors import CorruptError, FileIOError, MissingPathError, WorkerError
from picpac.stores.base import MissingPackageError

PR_GET_PDEATHSIG = 2


def _report_entry(parent: int, ignore: tuple, death_signal: bool, conn) -> None:
    """In a child: enter it, then send back what the harness set up."""
    alive = enter_child(parent, ignore, death_signal)
    deathsig = ctypes.c_int(-1)
    ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(deathsig), 0, 0, 0)
    conn.send((alive, [signal.getsignal(s) == signal.SIG_IGN for s in ignore], deathsig.value,
               sorted(signal.pthread_sigmask(signal.SIG_BLOCK, set()) & set(ignore))))
    conn.close()


def _entered(parent: int, ignore: tuple, death_signal: bool) -> tuple:
    ours, theirs = mp.get_context("fork").Pipe()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(ignore))  # what a pool does around a start
    try:
        p = mp.get_context("fork").Process(target=_report_entry, args=(parent, ignore, death_signal, theirs))
        p.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    try:
        assert ours.poll(30)
        return ours.recv()
    finally:
        p.join(10)


@pytest.mark.skipif(not os.uname().sysname == "Linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_ignores_its_parents_signals_unblocked_and_dies_with_its_parent():
    alive, ignored, deathsig, blocked = _entered(os.getpid(), (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), True)
    assert (alive, ignored, deathsig, blocked) == (True, [True, True, True], signal.SIGKILL, [])


@pytest.mark.skipif(not os.uname().sysname == "Linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_started_off_the_main_thread_sets_no_death_signal():
    assert _entered(os.getpid(), (signal.SIGINT,), False) == (True, [True], 0, [])


def test_a_child_whose_parent_is_gone_is_told_so():
    """The parent may die before the death signal is set: the child's parent is then another process."""
    assert _entered(os.getpid() + 10**6, (signal.SIGINT,), False)[0] is False


# -- ForkedChild ------------------------------------------------------------------------------------------
def _talk(send) -> None:
    send(b"A", b"one")
    send(b"B", b"tw", memoryview(b"o"), bytearray(b"!") * 3)
    send(b"C", *[b"x"] * 3000)  # more pieces than one writev takes
    send(b"D", b"y" * (3 << 20))  # more than the pipe holds


def _child(work, **kw) -> ForkedChild:
    return ForkedChild(work, "/data/some.store", "reading this store", "libsome", kw.pop("stall", 30), **kw)


def test_the_work_s_messages_arrive_in_order_then_the_end():
    child = _child(_talk)
    try:
        got = [(kind, bytes(body)) for kind, body in child.messages()]
    finally:
        child.close()
    assert got == [(b"A", b"one"), (b"B", b"two!!!"), (b"C", b"x" * 3000), (b"D", b"y" * (3 << 20))]
    with pytest.raises(ProcessLookupError):  # reaped
        os.kill(child.pid, 0)


def _raises(error):
    def work(send):
        send(b"A", b"before")
        raise error
    return work


@pytest.mark.parametrize("error", [
    MissingPathError("/data/x.jpg", "is not there"),
    FileIOError("cannot write /out/x: disk full"),
    MissingPackageError("h5py", "hdf5"),  # stores/base.py's: any PicPacError class, found by its module and name
    DataFlowError("MapData: called twice"),
], ids=lambda e: type(e).__name__)
def test_a_picpac_error_in_the_child_is_raised_here_as_the_same_class(error):
    child = _child(_raises(error))
    try:
        assert [bytes(b) for _, b in [child.receive()]] == [b"before"]
        with pytest.raises(type(error)) as info:
            child.receive()
    finally:
        child.close()
    assert type(info.value) is type(error) and str(info.value) == str(error)


def _dies(send) -> None:
    os.write(2, b"libsome: assertion failed in page 7\n")  # as a C library writes to stderr
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_child_killed_by_a_signal_is_the_fault_naming_the_path_the_library_and_its_last_words():
    child = _child(_dies, hint=lambda: ": the store is damaged")
    with pytest.raises(CorruptError, match=r"^/data/some\.store: the process reading this store died of SIGSEGV in "
                                           r'libsome \("libsome: assertion failed in page 7"\): the store is damaged$'):
        list(child.messages())


def test_a_child_that_exits_before_it_finished_is_a_worker_error():
    child = _child(lambda send: os._exit(3), fault=FileIOError)
    with pytest.raises(WorkerError, match=r"^/data/some\.store: the process reading this store exited with status 3 "
                                          "before it finished$"):
        child.receive()


def test_a_silent_child_is_stopped_after_stall_seconds():
    child = _child(lambda send: time.sleep(60), stall=0.5, fault=FileIOError, suspect=" (stuck?)")
    started = time.monotonic()
    with pytest.raises(FileIOError, match=r"^/data/some\.store: the process reading this store sent nothing for "
                                          r"0\.5 s \(stuck\?\) and was stopped$"):
        child.receive()
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)


def test_close_stops_a_child_still_working_and_twice_is_harmless():
    child = _child(lambda send: (send(b"A", b"x"), time.sleep(60)))
    assert child.receive()[0] == b"A"
    started = time.monotonic()
    child.close()
    child.close()
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)


def test_the_child_ignores_ctrl_c_sent_to_the_process_group():
    """SIGINT, SIGTERM and SIGHUP reach the whole group; they are the parent's to handle (it stops the child)."""
    def work(send):
        send(b"A", b"ready")
        time.sleep(0.5)
        send(b"B", b"still here")
    child = _child(work)
    try:
        assert child.receive()[0] == b"A"
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(child.pid, signum)
        assert [(k, bytes(b)) for k, b in child.messages()] == [(b"B", b"still here")]
    finally:
        child.close()
