"""The process engine: worker processes for per-item work that holds the GIL.

Threads (``threads.ordered_map``) are the right engine while the work releases the GIL (OpenCV,
NumPy). User Python code does not, so ``ProcessPool`` runs it in N worker processes instead:

* every worker builds its own work function from a picklable *recipe* (``recipe() -> work``), so
  nothing but small items travels to it (under ``spawn`` the recipe is pickled once per worker;
  under ``fork`` it is inherited);
* each worker has its own duplex pipe: tasks go down, small results come back; the consumer waits
  on the pipes *and* the process sentinels, so a worker that dies (even by SIGKILL) is noticed at
  once and reported as :class:`WorkerError` naming it. A task is sent without blocking: while a
  worker's pipe is full the consumer takes in the results that wait on every pipe, for the worker may
  be blocked writing one (large items and results both ways fill the pipes, and a consumer blocked
  writing while the worker is blocked writing back would wait for ever). With ``timeout`` every wait
  is bounded: a worker with replies due that sends nothing for that long (stopped, stuck in a native
  call, waiting on a dead mount) is a :class:`WorkerTimeoutError` naming it, whatever the others send;
* ``shared_batches.SharedBatches`` has the workers write each result array straight into a ring
  of batch buffers in one POSIX shared-memory block (``shared_memory.SharedBlock``); the consumer
  gets NumPy views of whole batches, so image arrays are never pickled;
* an exception in a worker comes back with its own type (pickled; :class:`WorkerError` when that
  is impossible), its notes, and the worker's traceback text as one more note;
* a worker started by ``fork`` first runs a *probe* that touches the process-wide locks of the native
  libraries the work uses (by default the probes that the layers owning them registered with
  :func:`register_fork_probe`: the image layer's, of OpenCV), and says so; a lock another thread held at
  the moment of the fork stays locked in the child for ever, so a worker silent past ``PROBE_TIMEOUT`` is
  killed and forked again (``FORK_ATTEMPTS`` in all) instead of hanging in its first task;
* ``close()`` (also run by a ``weakref.finalize`` when the pool is dropped or the interpreter
  exits) unlinks the shared memory and stops the workers: a stop message, then SIGTERM, then
  SIGKILL. Workers ignore SIGINT (the consumer handles Ctrl-C and stops them) and exit on their
  own when the consumer dies (``child.enter_child``: PR_SET_PDEATHSIG on Linux, else the closed pipe and
  a parent-pid check).

It knows nothing of streams: ``picpac.stream`` supplies the recipe.
"""
from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import pickle
import selectors
import signal
import socket
import struct
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from ..errors import PicPacError, PicPacTypeError, PicPacValueError, WorkerError, WorkerTimeoutError
from .child import enter_child
from .shared_memory import SharedBlock, proc_stat
from .threads import Outcome, check_timeout

METHODS = ("spawn", "fork")
PER_WORKER = 64
"""Most tasks in flight on one worker."""

# messages, consumer -> worker: (TASK, seq, item, slot), (ARENA, name, shape, dtype), None = stop
TASK, ARENA = 0, 1
# worker -> consumer: (OK, seq, array | None, extra), (ERROR, seq, packed), (FATAL, None, packed), (READY,),
# (PROBED,): a forked worker got through its probe
OK, ERROR, FATAL, READY, PROBED = 0, 1, 2, 3, 4
PROBE_TIMEOUT = 5.0
"""Seconds a forked worker has to run its probe (milliseconds of work) before it is taken for deadlocked."""
FORK_ATTEMPTS = 3
START_TIMEOUT = 60.0
"""Seconds a worker that has not started yet (imports, its recipe) is given, when the pool's timeout is shorter."""
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)  # one per wait: poll's is cheapest to make


# -- errors across the process boundary -------------------------------------------------------------
def _pack(exc: BaseException) -> tuple:
    """An exception as picklable parts: itself (when it pickles), its type and text, notes, traceback."""
    text = "".join(traceback.format_exception(exc))
    try:
        data = pickle.dumps(exc)
    except Exception:
        data = None
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return data, kind, str(exc), list(getattr(exc, "__notes__", ())), text


def _unpack(packed: tuple, where: str) -> BaseException:
    data, kind, message, notes, text = packed
    exc = None
    if data is not None:
        try:
            exc = pickle.loads(data)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = WorkerError(f"{kind}: {message}")
    have = list(getattr(exc, "__notes__", ()))
    for note in notes:
        if note not in have:
            exc.add_note(note)
    exc.add_note(f"traceback in {where}:\n{text.rstrip()}")
    return exc


# -- the worker process -----------------------------------------------------------------------------
_WORKER_INDEX: int | None = None


def worker_index() -> int | None:
    """In a pool's worker process: its index (0 .. workers - 1), set before the recipe runs; else None."""
    return _WORKER_INDEX


_FORK_PROBES: list[Callable[[], None]] = []


def register_fork_probe(probe: Callable[[], None]) -> None:
    """Have every forked worker run ``probe`` first (unless its pool is given a probe of its own), as
    ``os.register_at_fork`` has a library say what a child needs: the layer that uses a native library
    registers the calls that take that library's process-wide locks (the image layer, OpenCV's)."""
    if probe not in _FORK_PROBES:
        _FORK_PROBES.append(probe)


def fork_probes() -> None:
    """The default probe of a forked worker: every probe registered with :func:`register_fork_probe`."""
    for probe in list(_FORK_PROBES):
        probe()


def _worker(index: int, conn: connection.Connection, recipe: Any, parent: int, death_signal: bool,
            close_fds: list[int], shaped: bool, probe: Callable[[], None] | None) -> None:
    """A worker's life: build the work from the recipe, then run tasks until told to stop."""
    global _WORKER_INDEX
    _WORKER_INDEX = index
    for fd in close_fds:  # fork: the consumer's ends of the pipes, so its death closes ours
        try:
            os.close(fd)
        except OSError:
            pass
    if not enter_child(parent, (signal.SIGINT,), death_signal):  # Ctrl-C is the consumer's to handle
        return
    try:
        try:
            if probe is not None:
                probe()
                conn.send((PROBED,))
            work = (pickle.loads(recipe) if isinstance(recipe, bytes) else recipe)()
        except Exception as exc:
            conn.send((FATAL, None, _pack(exc)))
            return
        conn.send((READY,))
        _serve(conn, work, parent, shaped)
    except (EOFError, OSError):
        pass  # the consumer closed the pipe or is gone: nothing to report to


def _serve(conn: connection.Connection, work: Callable[[Any], Any], parent: int, shaped: bool) -> None:
    arena: np.ndarray | None = None  # the pool's shared array, once announced (one per pool)
    while True:
        while not conn.poll(1.0):
            if os.getppid() != parent:  # the consumer died (no death signal on this platform)
                return
        message = conn.recv()
        if message is None:
            return
        if message[0] == ARENA:
            _, name, shape, dtype = message
            dtype = np.dtype(dtype)
            arena = SharedBlock(name, max(1, math.prod(shape) * dtype.itemsize), create=False).array(shape, dtype)
            continue
        _, seq, item, slot = message
        try:
            if shaped:
                array, extra = work(item)
                array = np.asarray(array)
                if arena is not None and slot >= 0 and array.shape == arena.shape[1:] and array.dtype == arena.dtype:
                    arena[slot] = array
                    array = None
            else:
                array, extra = None, work(item)
            reply = _dumps((OK, seq, array, extra))
        except Exception as exc:
            reply = _dumps((ERROR, seq, _pack(exc)))
        conn.send_bytes(reply)


def _dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        if obj[0] != OK:
            raise
        exc.add_note("the worker's result cannot be pickled to send it back")
        return pickle.dumps((ERROR, obj[1], _pack(exc)), protocol=pickle.HIGHEST_PROTOCOL)


# -- the consumer's side ----------------------------------------------------------------------------
class _State:
    """What ``close()`` releases; shared with the pool's finalizer, which must not reference the pool."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.conns: list[connection.Connection] = []
        self.socks: list[socket.socket] = []  # the conns' sockets (duplicated), for sends that must not block
        self.blocks: list[SharedBlock] = []


def _teardown(state: _State, grace: float = 0.2) -> None:
    """Unlink the shared memory, then stop the workers: stop message, SIGTERM, SIGKILL; join them all."""
    blocks, state.blocks = state.blocks, []
    for block in blocks:  # first: it cannot block, and the name is what could leak
        block.unlink()
    socks, state.socks = state.socks, []
    for sock in socks:
        try:  # not blocking: a worker that does not read (stopped, its pipe full) gets SIGTERM below
            _send_now(sock, _frame(None))
        except OSError:
            pass
        sock.close()
    conns, state.conns = state.conns, []
    for conn in conns:
        conn.close()
    procs = state.procs
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.exitcode is None:
            p.terminate()
            try:  # a stopped worker (SIGSTOP) takes the SIGTERM only once it runs again
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
    for p in procs:
        p.join(1.0)
        if p.exitcode is None:
            p.kill()
            p.join()
    state.procs = []
    for p in procs:
        p.close()


def _frame(message: Any) -> list[memoryview]:
    """``message`` as ``Connection.send`` puts it on the wire (a length, then the pickle), for ``recv()``:
    the two parts apart, so that a large pickle is not copied to join them."""
    data = ForkingPickler.dumps(message)
    n = len(data)
    return [memoryview(struct.pack("!i", n) if n <= 0x7fffffff else struct.pack("!iQ", -1, n)), memoryview(data)]


def _send_now(sock: socket.socket, parts: list[memoryview]) -> list[memoryview]:
    """Write what of ``parts`` fits in ``sock``'s buffer now, never waiting; what is left to send."""
    try:
        sent = sock.sendmsg(parts, (), socket.MSG_DONTWAIT)
    except BlockingIOError:
        return parts
    return _skip(parts, sent)


def _skip(parts: list[memoryview], n: int) -> list[memoryview]:
    """``parts`` less their first ``n`` bytes."""
    k = 0
    while k < len(parts) and n >= len(parts[k]):
        n -= len(parts[k])
        k += 1
    return [parts[k][n:], *parts[k + 1:]] if k < len(parts) else []


def _process_state(pid: int) -> str:
    """What /proc says the process is doing when that explains a silence ('' elsewhere)."""
    fields = proc_stat(pid)
    state = fields[0] if fields else b""
    return {b"T": "; it is stopped (SIGSTOP, a debugger)", b"t": "; it is stopped by a debugger",
            b"D": "; it is in an uninterruptible wait (a dead mount or device)"}.get(state, "")


def pack_recipe(recipe: Callable[[], Callable[[Any], Any]], method: str, who: str = "backend='process'",
                what: str = "the work") -> Any:
    """The recipe as a worker gets it: pickled bytes for ``spawn`` (a clear error, naming ``who`` and
    ``what`` is pickled, if it cannot be), the object itself for ``fork``."""
    if method not in METHODS:
        raise PicPacValueError(f"start method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    if method == "fork":
        return recipe
    try:
        return pickle.dumps(recipe, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise PicPacTypeError(f"{who} with start_method='spawn' sends {what} to the workers by pickling it, "
                              f"which fails: {exc}. Define functions and classes at module level in an importable "
                              "module (no lambdas, local functions, generators or open files), or use "
                              "start_method='fork'") from None


class ProcessPool:
    """``workers`` processes, each running ``work = recipe()`` on the items submitted to it.

    ``seq = submit(item, slot)`` hands an item to the least loaded worker; ``result(seq)`` blocks
    until that item's reply is in (``(OK, array | None, extra)`` or ``(ERROR, exception)``), raising
    :class:`WorkerError` as soon as any worker dies. With ``shaped=True`` the work returns
    ``(array, extra)`` and the array is written into ``arena()[slot]`` when it fits (else it comes
    back pickled); otherwise the work's whole result is ``extra``. Close it (or drop it) to stop the
    workers and free the shared memory. ``probe`` (``fork`` only; by default the registered probes,
    :func:`fork_probes`; None: none) runs first in every worker: one still in it after ``PROBE_TIMEOUT`` seconds is taken for deadlocked by a lock copied
    locked at the fork, and forked again. ``timeout`` (seconds, None: no limit) bounds every wait (for a
    reply, for room in a pipe): a worker with replies due that has sent nothing for that long, since it was
    given work while idle, is a :class:`WorkerTimeoutError` naming it, and the pool must be closed.
    """

    def __init__(self, recipe: Any, workers: int, method: str = "spawn", shaped: bool = True,
                 name: str = "picpac", probe: Callable[[], None] | None = fork_probes,
                 timeout: float | None = None):
        if workers < 1:
            raise PicPacValueError(f"workers must be >= 1, got {workers}")
        check_timeout(timeout)
        payload = recipe if isinstance(recipe, bytes) and method == "spawn" else pack_recipe(recipe, method)
        self.workers, self.method, self.name, self.timeout = workers, method, name, timeout
        self._state = _State()
        self._finalizer = weakref.finalize(self, _teardown, self._state)
        self._load = [0] * workers
        self._ready = [False] * workers
        self._heard = [0.0] * workers  # when each worker last sent anything (or was started, or given work idle)
        self._due = [0] * workers  # tasks sent to each worker whose reply is not in
        self._probed = [False] * workers
        self._owner: dict[int, int] = {}  # seq -> worker, for the tasks not collected yet
        self._done: dict[int, tuple] = {}
        self._seq = itertools.count()
        self._arena: np.ndarray | None = None
        self._context = mp.get_context(method)
        self._args = (payload, os.getpid(), threading.current_thread() is threading.main_thread(), shaped,
                      probe if method == "fork" else None)
        self._conns = self._state.conns  # a copy once they are all started
        try:
            for i in range(workers):
                self._launch(i)
            if method == "fork" and probe is not None:
                self._await_probes()
        except BaseException:
            self.close()
            raise
        self._conns = list(self._state.conns)
        self._socks = list(self._state.socks)
        self._sentinels = {p.sentinel: i for i, p in enumerate(self._state.procs)}
        self._index = {id(c): i for i, c in enumerate(self._conns)}

    def _launch(self, i: int) -> None:
        """Start worker ``i`` with a new pipe (again, in place of one a fork left deadlocked)."""
        payload, parent, main, shaped, probe = self._args
        state, again = self._state, i < len(self._state.procs)
        ours, theirs = self._context.Pipe(duplex=True)
        inherited = [c.fileno() for c in state.conns] + [ours.fileno()] if self.method == "fork" else []
        p = self._context.Process(target=_worker, name=f"{self.name}-{i}", daemon=True,
                                  args=(i, theirs, payload, parent, main, inherited, shaped, probe))
        self._start(p, main)
        self._heard[i] = time.monotonic()
        theirs.close()
        sock = socket.socket(fileno=os.dup(ours.fileno()))
        sock.setblocking(True)  # the fd's flags are ours' too: only a send's MSG_DONTWAIT may skip the wait
        if again:
            state.procs[i].close()
            state.socks[i].close()
            state.procs[i], state.conns[i], state.socks[i] = p, ours, sock
        else:
            state.procs.append(p)
            state.conns.append(ours)
            state.socks.append(sock)

    def _await_probes(self) -> None:
        """Wait until every forked worker has got through its probe; fork again those that hang in it."""
        waiting = {i: 1 for i in range(self.workers)}  # worker -> attempt
        deadline = time.monotonic() + PROBE_TIMEOUT
        while waiting:
            conns = {id(self._state.conns[i]): i for i in waiting}
            sentinels = {self._state.procs[i].sentinel: i for i in waiting}
            for ready in connection.wait(list(sentinels) + [self._state.conns[i] for i in waiting],
                                         max(0.0, deadline - time.monotonic())):
                if isinstance(ready, int):  # the worker died before its probe finished: raises
                    self._died(sentinels[ready])
                i = conns[id(ready)]
                self._drain(i)  # a start-up failure raises here
                if self._probed[i]:
                    del waiting[i]
            if waiting and time.monotonic() >= deadline:
                for i, attempt in list(waiting.items()):
                    self._state.procs[i].kill()
                    self._state.procs[i].join()
                    if attempt == FORK_ATTEMPTS:
                        raise WorkerError(
                            f"{self._who(i)} hung right after fork {attempt} times in a row: "
                            "another thread of this process held a lock (OpenCV's, say) at the moment of the fork, "
                            "and a forked child inherits it locked for ever; use start_method='spawn', or start "
                            "this pool before other threads run")
                    warnings.warn(f"{self._who(i)} hung right after fork (another thread held "
                                  "a lock at that moment); it was killed and forked again", RuntimeWarning,
                                  stacklevel=3)
                    waiting[i] = attempt + 1
                    dead = self._state.conns[i]
                    self._launch(i)
                    dead.close()
                deadline = time.monotonic() + PROBE_TIMEOUT

    @staticmethod
    def _start(p: Any, main: bool) -> None:
        """Start with SIGINT blocked, so a Ctrl-C during the worker's start-up does not reach it."""
        if not (main and hasattr(signal, "pthread_sigmask")):
            p.start()
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    # -- state -------------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._state.procs]

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def pending(self) -> int:
        """Tasks submitted and not yet collected with ``result()``."""
        return len(self._owner)

    def can_submit(self) -> bool:
        return min(self._load) < PER_WORKER

    def arena(self, shape: tuple[int, ...], dtype: Any, slots: int) -> np.ndarray:
        """The shared ``(slots, *shape)`` array the workers write into (``submit(item, slot)``), made
        and announced to the workers on the first call; one layout per pool."""
        dtype = np.dtype(dtype)
        full = (slots, *shape)
        if self._arena is not None:
            if self._arena.shape != full or self._arena.dtype != dtype:
                raise PicPacError(f"this pool's shared array is {self._arena.shape} {self._arena.dtype}, "
                                  f"not {full} {dtype}: one layout per pool")
            return self._arena
        block = SharedBlock.create(max(1, math.prod(full) * dtype.itemsize))
        self._state.blocks.append(block)
        self._arena = block.array(full, dtype)
        for i in range(self.workers):
            self._send(i, (ARENA, block.name, full, dtype.str))
        return self._arena

    # -- work --------------------------------------------------------------------------------------
    def submit(self, item: Any, slot: int = -1) -> int:
        """Hand ``item`` to the least loaded worker; returns its number for ``result()``."""
        seq = next(self._seq)
        i = min(range(self.workers), key=self._load.__getitem__)
        if not self._due[i]:  # an idle worker's silence counts from now
            self._heard[i] = time.monotonic()
        self._due[i] += 1
        self._send(i, (TASK, seq, item, slot))
        self._load[i] += 1
        self._owner[seq] = i
        return seq

    def result(self, seq: int) -> tuple:
        while seq not in self._done:
            self._poll()
        self._load[self._owner.pop(seq)] -= 1
        return self._done.pop(seq)

    def ready(self) -> int:
        """The number of a submitted task whose reply is in, the first to arrive (waiting for one);
        collect it with ``result()``."""
        if not self._owner:
            raise PicPacError("no task in flight to wait for")
        while not self._done:
            self._poll()
        return next(iter(self._done))

    def drain(self) -> None:
        """Wait for every reply still due and drop it (after a run left early), so the pool can run more."""
        for seq in list(self._owner):
            self.result(seq)

    def _send(self, i: int, message: Any) -> None:
        """Send ``message`` to worker ``i``, taking in replies while its pipe is full (see the module's notes)."""
        parts, sock = _frame(message), self._socks[i]
        while parts:
            try:
                parts = _send_now(sock, parts)
            except OSError:
                self._died(i)
            if parts:
                self._poll(sock)

    def _poll(self, writing: socket.socket | None = None) -> None:
        """Wait until a reply is in (handled), a worker died (raised), or ``writing`` has room; a
        WorkerTimeoutError when a worker with replies due has sent nothing for ``timeout`` seconds (its
        pipe is read first, so one blocked writing to this process is never taken for silent)."""
        who = self._latest()
        wait = None if who is None else max(0.0, self._late(who))
        with _Selector() as selector:
            for conn in self._conns:
                selector.register(conn, selectors.EVENT_READ)
            for sentinel in self._sentinels:
                selector.register(sentinel, selectors.EVENT_READ)
            if writing is not None:
                selector.register(writing, selectors.EVENT_WRITE)
            ready = [key.fileobj for key, _ in selector.select(wait)]
        for conn in ready:  # messages first: a worker's last words come before its death
            if isinstance(conn, connection.Connection):
                self._drain(self._index[id(conn)])
        for sentinel in ready:
            if isinstance(sentinel, int):
                self._died(self._sentinels[sentinel])
        who = self._latest()
        if who is not None and self._late(who) <= 0:
            limit, state = self._limit(who), _process_state(self._state.procs[who].pid)
            if not self._ready[who]:
                raise WorkerTimeoutError(f"{self._who(who)} did not start within {limit:g} s (timeout={self.timeout:g}, "
                                         f"at least {START_TIMEOUT:g} s to start){state}: it is stuck importing or "
                                         "building its work (a dead mount?)")
            raise WorkerTimeoutError(
                f"{self._who(who)} sent nothing for {limit:g} s (timeout={self.timeout:g}){state}: it is stopped, stuck "
                "in a native call or waiting on a dead mount; raise timeout if its work is this slow")

    def _latest(self) -> int | None:
        """With a timeout, the worker with replies due that is nearest to being late (None: none)."""
        busy = [i for i in range(self.workers) if self._due[i]] if self.timeout is not None else []
        return min(busy, key=self._late, default=None)

    def _limit(self, who: int) -> float:
        return self.timeout if self._ready[who] else max(self.timeout, START_TIMEOUT)

    def _late(self, who: int) -> float:
        """Seconds left before worker ``who``, silent since its last message (or being given work), is late."""
        return self._heard[who] + self._limit(who) - time.monotonic()

    def _drain(self, i: int) -> None:
        """Handle every message waiting on worker ``i``'s pipe."""
        conn = self._conns[i]
        while True:
            try:
                if not conn.poll():
                    return
                message = conn.recv()
            except (EOFError, OSError):
                self._died(i, drained=True)
            self._handle(i, message)  # outside the try: a worker's OSError is its own, not a broken pipe

    def _handle(self, i: int, message: tuple) -> None:
        self._heard[i] = time.monotonic()
        kind = message[0]
        if kind in (OK, ERROR):
            self._due[i] -= 1
        if kind == OK:
            self._done[message[1]] = (OK, message[2], message[3])
        elif kind == ERROR:
            self._done[message[1]] = (ERROR, _unpack(message[2], self._who(i)))
        elif kind == READY:
            self._ready[i] = True
        elif kind == PROBED:
            self._probed[i] = True
        else:  # FATAL: the worker could not build its work
            exc = _unpack(message[2], self._who(i))
            exc.add_note(f"{self._who(i)} failed to start")
            raise exc

    def _who(self, i: int) -> str:
        return f"picpac worker {i} of {self.workers} (pid {self._state.procs[i].pid})"

    def _died(self, i: int, drained: bool = False) -> None:
        if not drained:
            self._drain(i)  # raises what the worker sent before it went (a start-up failure)
        p = self._state.procs[i]
        p.join(1.0)
        code = p.exitcode
        if code is None:
            how = "closed its pipe"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        hint = ""
        if not self._ready[i]:
            hint = (" before it started; its stderr says why (with start_method='spawn' the main script must "
                    "be guarded by `if __name__ == '__main__':` and transforms must be importable)")
        raise WorkerError(f"{self._who(i)} {how}{hint}")

    def close(self) -> None:
        """Free the shared memory and stop the workers (idempotent)."""
        self._arena = None
        self._finalizer()

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_END = object()


# -- ordered maps on the pool -----------------------------------------------------------------------
def process_map(recipe: Callable[[], Callable[[Any], Any]], items: Iterable[Any], workers: int, window: int,
                method: str = "spawn", name: str = "picpac", ordered: bool = True) -> Iterator[tuple[Any, Outcome]]:
    """``ordered_map`` on processes: ``(item, Outcome of work(item))`` in input order, ``work = recipe()``
    built once in each worker, at most ``window`` items in flight. Items and results are pickled, so
    keep them small. Closing the generator stops the workers. ``ordered=False``: see ``pool_map``."""
    if window < 1:
        raise PicPacValueError(f"window must be >= 1, got {window}")
    pool = ProcessPool(recipe, workers, method, shaped=False, name=name)
    try:
        yield from pool_map(pool, items, window, ordered)
    finally:
        pool.close()


def pool_map(pool: ProcessPool, items: Iterable[Any], window: int,
             ordered: bool = True) -> Iterator[tuple[Any, Outcome]]:
    """``process_map`` on a pool the caller made (``shaped=False``) and closes: ``(item, Outcome)`` in input
    order, or with ``ordered=False`` in the order the replies arrive (the same window; the pool runs
    nothing else meanwhile). Items are taken from ``items`` lazily. A run left early leaves items in
    flight: ``pool.drain()`` or close the pool then."""
    if window < 1:
        raise PicPacValueError(f"window must be >= 1, got {window}")
    todo = iter(items)
    inflight: dict[int, Any] = {}  # seq -> item, in submission order
    while True:
        while len(inflight) < window and pool.can_submit():
            item = next(todo, _END)
            if item is _END:
                break
            inflight[pool.submit(item)] = item
        if not inflight:
            return
        n = next(iter(inflight)) if ordered else pool.ready()
        item = inflight.pop(n)
        reply = pool.result(n)
        yield item, (Outcome(reply[2]) if reply[0] == OK else Outcome(error=reply[1]))
