"""The child-process harness: how every process picpac starts begins, and a forked child that runs one
piece of work and reports back over a pipe.

* :func:`enter_child` is the first thing a child does (a ``ProcessPool`` worker, a :class:`ForkedChild`):
  it ignores the signals that are its parent's to handle (Ctrl-C; SIGTERM and SIGHUP sent to the whole
  process group), asks the kernel to kill it when its parent dies (``PR_SET_PDEATHSIG`` on Linux, even
  while it is stuck in a library's loop), and says whether the parent is still there (it may have died
  before the death signal was set).
* :class:`ForkedChild` runs ``work(send)`` in an ``os.fork`` child (not multiprocessing: a daemonic worker
  process, a multiprocessing pool's, may not start a multiprocessing child, and spawning a fresh
  interpreter would cost a second). The child sends typed messages back; a PicPacError raised there is
  raised here as the same class, and the child's death by a signal or its silence is a PicPacError
  naming what it worked on. The store importers run C libraries that can crash on damaged data in one.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, NoReturn

from ..errors import CorruptError, PicPacError, WorkerError

END, _ERROR = b".", b"E"
"""Message types of the harness: the work finished (``END``), or raised a PicPacError. The work's own
messages use other bytes."""
_FRAME = struct.Struct("<cQ")  # a message's type and size
PARENTS_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def set_parent_death_signal() -> None:
    """Linux: the kernel kills this process with SIGKILL when the thread that started it dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover
            pass


def enter_child(parent: int, ignore: Iterable[int] = (signal.SIGINT,), death_signal: bool = True) -> bool:
    """In a child just started by process ``parent``: ignore the ``ignore`` signals (the parent handles them
    and stops this process), unblock them (a parent blocks SIGINT while it starts a child), set the parent
    death signal (``death_signal``: only when the parent's thread that started it lives as long as the
    parent, for the kernel sends it when that thread ends); whether the parent is still this process's."""
    ignore = set(ignore)
    for signum in ignore:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ignore)
    if death_signal:
        set_parent_death_signal()
    return os.getppid() == parent


class ForkedChild:
    """``work(send)`` run in a forked child process that sends messages back to this one by
    ``send(type, *pieces)`` (a type byte and bytes-like pieces, written with one ``writev``).

    :meth:`receive` gives them in order; an exception in the child is raised here (a PicPacError as the
    same class), and the child's death by a signal (``died in library``, with ``hint()`` added), or its
    silence for ``stall`` seconds (``suspect`` says why it could be silent), is a ``fault`` naming ``path``
    and what the child was ``doing``. The child's stdout and stderr go to a log whose last line the message
    quotes. :meth:`close` stops the child if it still runs: nothing outlives an error or a Ctrl-C."""

    def __init__(self, work: Callable[[Callable[..., None]], None], path: str, doing: str, library: str,
                 stall: float, fault: type[PicPacError] = CorruptError, hint: Callable[[], str] = str,
                 suspect: str = ""):
        self.path, self._doing, self._library, self._stall = path, doing, library, stall
        self._fault, self._hint, self._suspect = fault, hint, suspect
        self._done = self._closed = False
        self._log = tempfile.TemporaryFile()  # the child's stdout and stderr, for the message if it dies
        self._fd, theirs = os.pipe()
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # fewer, larger reads (Linux)
        except (AttributeError, OSError):
            pass
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._status: int | None = None  # the exit code once reaped (negative: the signal that killed it)
        parent = os.getpid()
        try:
            self.pid = os.fork()
        except BaseException:
            os.close(self._fd)
            os.close(theirs)
            self._log.close()
            raise
        if self.pid == 0:
            _child_main(work, theirs, self._fd, self._log.fileno(), parent)
        os.close(theirs)  # the child's end: its death alone then ends the pipe

    def receive(self) -> tuple[bytes, memoryview]:
        """The next message's type and body; raises what the child raised, or why it stopped."""
        if not self._poll.poll(self._stall * 1000):
            raise self._stopped(self._fault, f"sent nothing for {self._stall:g} s{self._suspect} and was stopped")
        kind, size = _FRAME.unpack(self._read(_FRAME.size))
        body = memoryview(self._read(size))
        if kind == _ERROR:
            self._done = True
            raise _rebuilt(json.loads(bytes(body)))
        if kind == END:
            self._done = True
        return kind, body

    def messages(self) -> Iterator[tuple[bytes, memoryview]]:
        """The messages up to the child's ``END`` (which is not given)."""
        while True:
            kind, body = self.receive()
            if kind == END:
                return
            yield kind, body

    def _read(self, size: int) -> bytearray:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = os.readv(self._fd, [view[got:]])
            if not n:
                raise self._died()
            got += n
        return buf

    def _reap(self, wait: float) -> int | None:
        """The child's exit code (negative: killed by that signal) once it has exited, waiting up to ``wait`` s."""
        deadline = time.monotonic() + wait
        while self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = os.waitstatus_to_exitcode(status)
            elif time.monotonic() >= deadline:
                break
            else:
                time.sleep(0.001)
        return self._status

    def _died(self) -> PicPacError:
        code = self._reap(5.0)  # its pipe ended: it is exiting
        said = self._said()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return self._stopped(self._fault, f"died of {name} in {self._library}{said}{self._hint()}")
        return self._stopped(WorkerError, f"exited with status {code} before it finished{said}")

    def _stopped(self, cls: type[PicPacError], what: str) -> PicPacError:
        self.close()
        return cls(f"{self.path}: the process {self._doing} {what}")

    def _said(self) -> str:
        """The last line the child printed (a library's message before it died), as `` ("...")``."""
        try:
            self._log.seek(max(0, os.fstat(self._log.fileno()).st_size - 2000))
            lines = self._log.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return f' ("{lines[-1].strip()[:300]}")' if lines else ""

    def close(self) -> None:
        """Stop the child unless it finished, and wait for it. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        if self._reap(5.0 if self._done else 0.0) is None:
            os.kill(self.pid, signal.SIGKILL)
            self._reap(float("inf"))
        os.close(self._fd)
        self._log.close()


def _child_main(work: Callable[[Callable[..., None]], None], fd: int, parents_end: int, log: int,
                parent: int) -> NoReturn:
    """The forked child's life: ``work``, then out with ``os._exit`` (no atexit handler of the parent's,
    no flush of its buffers)."""
    code = 0
    try:
        os.close(parents_end)
        os.dup2(log, 1)  # a library printing to stdout or stderr must not reach the parent's terminal or pipes
        os.dup2(log, 2)
        # Ctrl-C, and SIGTERM or SIGHUP sent to the whole process group (a batch scheduler, a closed
        # terminal), are the parent's: it stops this process and removes what it left
        if enter_child(parent, PARENTS_SIGNALS):
            send = partial(_send, fd)
            try:
                work(send)
                send(END)
            except PicPacError as exc:
                send(_ERROR, _described(exc))
    except BrokenPipeError:
        pass  # the parent is gone or stopped listening: nothing to tell
    except BaseException:
        traceback.print_exc()  # to the log, which the parent quotes
        code = 1
    finally:
        os._exit(code)


def _send(fd: int, kind: bytes, *pieces: Any) -> None:
    """One message: its frame, then the pieces, with as few ``writev`` calls as the pipe takes."""
    buffers = [_FRAME.pack(kind, sum(len(p) for p in pieces)), *pieces]
    first = 0
    while first < len(buffers):
        n = os.writev(fd, buffers[first:first + 1024])  # at most IOV_MAX buffers a call
        while n:
            if n >= len(buffers[first]):
                n -= len(buffers[first])
                first += 1
            else:
                buffers[first] = memoryview(buffers[first])[n:]
                n = 0


def _described(exc: PicPacError) -> bytes:
    """A PicPacError as JSON: its class, constructor arguments, message and attributes."""
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, type(None)))}
    return json.dumps({"type": _qualified(type(exc)), "args": list(exc.__reduce__()[1]), "message": str(exc),
                       "attrs": attrs, "errno": getattr(exc, "errno", None)}, default=str).encode()


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _error_classes(cls: type[PicPacError] = PicPacError) -> Iterator[type[PicPacError]]:
    """``cls`` and its subclasses: every PicPacError class the child can raise, for it is a fork of this process."""
    yield cls
    for sub in cls.__subclasses__():
        yield from _error_classes(sub)


def _rebuilt(info: dict) -> PicPacError:
    """The PicPacError that :func:`_described` described (CorruptError with its message if it cannot be)."""
    cls = next((c for c in _error_classes() if _qualified(c) == info.get("type")), CorruptError)
    try:
        exc = cls(*info["args"])
    except Exception:
        exc = None
    if exc is None or str(exc) != info["message"]:
        exc = CorruptError(info["message"])
    exc.__dict__.update(info["attrs"])
    if isinstance(exc, OSError) and info.get("errno") is not None:
        exc.errno = info["errno"]
    return exc
