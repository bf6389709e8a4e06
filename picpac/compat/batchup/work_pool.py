"""batchup's worker pools on picpac's engines: mini-batches prepared in the background.

``picpac.work_pool`` is a drop-in for ``batchup.work_pool``:

* :class:`WorkerThreadPool` (``processes`` threads, one ``ThreadPoolExecutor`` kept for the pool's
  life; results travel as :class:`flow.Outcome`, so a task's exception reaches the consumer as the
  same object, with its traceback) and :class:`WorkerProcessPool` (a ``processes.ProcessPool``:
  ``processes`` worker processes started at once, ``fork`` or ``spawn``, each task and its result
  pickled; a worker's exception comes back with its own type and the worker's traceback as a note;
  a worker that dies, even by SIGKILL, is a :class:`WorkerError` at once, and the pool is stopped).
* ``pool.work_stream(tasks, task_buffer_size=20)``: tasks ``(fn,)``, ``(fn, args)`` or
  ``(fn, args, kwargs)`` run in order of submission, results retrieved in that order; the stream
  fills its buffer as soon as it is made and tops it up as results are taken.
* ``pool.parallel_data_source(ds, batch_buffer_size=20)``: a random-access data source whose
  batches are gathered by the workers. The index batches are made in the consumer, by ``ds`` itself,
  so the batches are exactly the serial ones (same RNG draws, same order).
* ``pool.shared_constant(x)``: a value sent to the workers once (a process pool pickles it into one
  POSIX shared-memory block, ``/dev/shm/picpac_<pid>_...``; each worker unpickles it on first use and
  keeps a few); a thread pool returns ``x`` itself.
* ``close()`` (or ``with``) stops the threads or processes and frees the shared memory; dropping a
  stream's iterator abandons its tasks.
"""
from __future__ import annotations

import multiprocessing as mp
import numbers
import os
import pickle
import threading
import weakref
from collections import OrderedDict, deque
from concurrent.futures import CancelledError, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from ...engine.processes import METHODS, OK, ProcessPool
from ...engine.shared_memory import SharedBlock
from ...engine.threads import Outcome
from ...errors import PicPacError, PicPacTypeError, PicPacValueError, WorkerError
from .data_source import AbstractDataSource

__all__ = ["AbstractWorkerPool", "ParallelDataSource", "SharedConstant", "WorkStream", "WorkerProcessPool",
           "WorkerThreadPool"]


def _count(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise PicPacTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise PicPacValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _workers(processes: Any) -> int:
    """``processes`` as batchup (multiprocessing) takes it: None is one per CPU."""
    return (os.cpu_count() or 1) if processes is None else _count(processes, "processes")


def _split_task(task: Any) -> tuple[Any, tuple, dict]:
    """A work-stream task, ``(fn,)``, ``(fn, args)`` or ``(fn, args, kwargs)``, as its three parts."""
    if isinstance(task, (tuple, list)) and 1 <= len(task) <= 3 and callable(task[0]):
        args = task[1] if len(task) > 1 and task[1] is not None else ()
        kwargs = task[2] if len(task) > 2 and task[2] is not None else {}
        if isinstance(args, (tuple, list)) and isinstance(kwargs, dict):
            return task[0], tuple(args), kwargs
    raise PicPacTypeError(f"a work-stream task must be (fn,), (fn, args) or (fn, args, kwargs), got {task!r:.200}")


def _call(fn: Any, args: tuple, kwargs: dict) -> Outcome:
    try:
        return Outcome(fn(*args, **kwargs))
    except Exception as exc:  # handed to the consumer
        return Outcome(error=exc)


class AbstractWorkerPool:
    """A pool of workers running tasks for :class:`WorkStream` s and :class:`ParallelDataSource` s."""

    def shared_constant(self, x):
        """``x`` wrapped to be sent to the workers once rather than with every task."""
        raise NotImplementedError(f"shared_constant is abstract in {type(self).__name__}")

    # what a subclass provides: a handle per task, its Outcome, and giving up on handles
    def _submit(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def _result(self, handle: Any) -> Outcome:
        raise NotImplementedError

    def _abandon(self, handles: deque) -> None:
        raise NotImplementedError

    def work_stream(self, task_generator, task_buffer_size=20):
        """A :class:`WorkStream` running the tasks of ``task_generator`` (an iterator of ``(fn, args)``
        tuples) on this pool, keeping ``task_buffer_size`` of them submitted or waiting to be taken."""
        return WorkStream(self, task_generator, task_buffer_size=task_buffer_size)

    def parallel_data_source(self, ds, batch_buffer_size=20):
        """A :class:`ParallelDataSource`: ``ds``'s batches gathered on this pool, ``batch_buffer_size``
        of them prepared ahead. ``ds`` must be random access; a process pool pickles it once (keep it
        light: paths rather than big arrays, e.g. array-likes that load on the fly)."""
        return ParallelDataSource(ds, batch_buffer_size, self)

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WorkerThreadPool(AbstractWorkerPool):
    """``processes`` worker threads (None: one per CPU), for work that releases the GIL: NumPy, OpenCV, file reads."""

    def __init__(self, processes=1):
        self.processes = _workers(processes)
        self._executor = ThreadPoolExecutor(self.processes, thread_name_prefix="picpac-work")
        self._finalizer = weakref.finalize(self, self._executor.shutdown, wait=False, cancel_futures=True)

    def shared_constant(self, x):
        """Threads share memory: ``x`` itself."""
        return x

    def _submit(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        if self.closed:
            raise PicPacError("the WorkerThreadPool is closed")
        return self._executor.submit(_call, fn, args, kwargs)

    def _result(self, handle: Any) -> Outcome:
        try:
            return handle.result()
        except CancelledError:
            raise PicPacError("the WorkerThreadPool was closed before this task ran") from None

    def _abandon(self, handles: deque) -> None:
        while handles:
            handles.popleft().cancel()  # a task already running finishes; its result is dropped

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Cancel the tasks not started, wait for the running ones and join the threads (idempotent)."""
        if self._finalizer.detach() is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


# -- processes -------------------------------------------------------------------------------------
class _SharedRef(NamedTuple):
    """What a :class:`SharedConstant` pickles to: the name and size of its shared-memory block."""

    name: str
    size: int


class SharedConstant:
    """A value a :class:`WorkerProcessPool` sends to its workers once, through shared memory.

    ``value`` is the object itself (in this process). Put it in a task's ``args`` (or ``kwargs``
    values): the worker gets the value. The block is freed when this object is dropped or the pool
    closes.
    """

    __slots__ = ("value", "_ref", "__weakref__")

    def __init__(self, value: Any, ref: _SharedRef):
        self.value, self._ref = value, ref

    def __reduce__(self):
        return _SharedRef, tuple(self._ref)

    def __repr__(self) -> str:
        return f"SharedConstant({type(self.value).__name__}, {self._ref.size} bytes)"


_SHARED: OrderedDict[str, Any] = OrderedDict()  # in a worker: the constants unpickled, most recent last
_SHARED_KEEP = 8


def _resolve(x: Any) -> Any:
    if type(x) is not _SharedRef:
        return x
    value = _SHARED.get(x.name, _SHARED)
    if value is _SHARED:
        block = SharedBlock(x.name, x.size, create=False)
        try:
            value = pickle.loads(block.mmap)
        finally:
            block.mmap.close()
        _SHARED[x.name] = value
        while len(_SHARED) > _SHARED_KEEP:
            _SHARED.popitem(last=False)
    else:
        _SHARED.move_to_end(x.name)
    return value


def _run_item(item: bytes) -> Any:
    """In a worker: one task (pickled by the consumer, so a function this process cannot import is the
    task's error, not the worker's death), its shared constants looked up."""
    fn, args, kwargs = pickle.loads(item)
    return fn(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()})


def _task_runner() -> Any:
    """The recipe of a WorkerProcessPool's workers: every worker runs ``_run_item`` on its items."""
    return _run_item


def _start_method(method: Any) -> str:
    if method is None:  # multiprocessing's default where picpac's engine has it (fork on Linux), else spawn
        method = mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]
        return method if method in METHODS else "spawn"
    if method not in METHODS:
        raise PicPacValueError(f"start_method must be None or one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method


class _Task(NamedTuple):
    seq: int
    task: tuple  # (fn, args, kwargs), kept until the result is taken: its shared constants must outlive it


class _Failed(NamedTuple):
    outcome: Outcome


def _release(pool: ProcessPool, blocks: dict) -> None:
    for name in list(blocks):
        _unlink(blocks, name)
    pool.close()


def _unlink(blocks: dict, name: str) -> None:
    block = blocks.pop(name, None)
    if block is not None:
        block.unlink()


class WorkerProcessPool(AbstractWorkerPool):
    """``processes`` worker processes (None: one per CPU), started at once, for Python work that holds the GIL.

    ``start_method``: ``'fork'`` or ``'spawn'`` (default: multiprocessing's default when it is one
    of those, i.e. ``fork`` on Linux, else ``spawn``). Tasks and results are pickled: functions and
    classes must be importable (defined at module level), and with ``spawn`` the main script needs
    an ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, processes=1, start_method=None):
        self.processes = _workers(processes)
        self.start_method = _start_method(start_method)
        self._pool = ProcessPool(_task_runner, self.processes, self.start_method, shaped=False, name="picpac-work")
        self._lock = threading.RLock()
        self._blocks: dict[str, SharedBlock] = {}
        self._pending: set[int] = set()       # submitted, reply not taken from the ProcessPool
        self._early: dict[int, tuple] = {}    # replies taken before their stream asked (to make room)
        self._orphans: set[int] = set()       # abandoned: their replies are dropped
        self._dropped: deque[int] = deque()   # abandoned, not yet moved to _orphans (no lock needed)
        self._broken: BaseException | None = None  # what stopped the pool: a worker died or could not start
        self._finalizer = weakref.finalize(self, _release, self._pool, self._blocks)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return self._pool.pids

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Free the shared constants' memory and stop the workers (idempotent)."""
        self._finalizer()

    def _check(self) -> None:
        if self._broken is not None:
            raise WorkerError(f"this WorkerProcessPool was stopped by {type(self._broken).__name__}: {self._broken}")
        if self.closed:
            raise PicPacError("the WorkerProcessPool is closed")

    def _break(self, exc: BaseException) -> None:
        self._broken = exc
        self._finalizer()  # no worker is left behind

    def shared_constant(self, x):
        """``x`` pickled once into shared memory, as a :class:`SharedConstant` to put in task arguments."""
        with self._lock:
            self._check()
            try:
                data = pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise PicPacTypeError(f"a WorkerProcessPool sends {type(x).__name__} to its workers by pickling it, "
                                      f"which fails: {exc}. Define its classes at module level, or use "
                                      "WorkerThreadPool") from None
            block = SharedBlock.create(len(data))
            try:
                block.mmap[:len(data)] = data
            finally:
                block.mmap.close()
            self._blocks[block.name] = block
            constant = SharedConstant(x, _SharedRef(block.name, len(data)))
            weakref.finalize(constant, _unlink, self._blocks, block.name)
            return constant

    def _submit(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        with self._lock:
            self._check()
            try:
                self._reap()
                while not self._pool.can_submit():  # a full pipe: take the oldest reply first
                    self._take(min(self._pending), early=True)
            except BaseException as exc:  # a worker died or could not start (its own error), or Ctrl-C
                self._break(exc)
                raise
            task = (fn, args, kwargs)
            try:
                item = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # the task cannot be pickled: its own failure, delivered in order
                error = PicPacTypeError(f"a WorkerProcessPool sends each task to a worker by pickling it, which "
                                        f"fails for {getattr(fn, '__qualname__', fn)!r}: {exc}. Define functions "
                                        "and classes at module level (no lambdas or local functions), or use "
                                        "WorkerThreadPool")
                error.__cause__ = exc
                return _Failed(Outcome(error=error))
            try:
                seq = self._pool.submit(item)
            except BaseException as exc:  # a worker died: its pipe is closed
                self._break(exc)
                raise
            self._pending.add(seq)
            return _Task(seq, task)

    def _take(self, seq: int, early: bool = False) -> tuple:
        reply = self._early.pop(seq, None)
        if reply is None:
            reply = self._pool.result(seq)
            self._pending.discard(seq)
        if seq in self._orphans:
            self._orphans.discard(seq)
        elif early:
            self._early[seq] = reply
        return reply

    def _result(self, handle: Any) -> Outcome:
        if isinstance(handle, _Failed):
            return handle.outcome
        with self._lock:
            self._check()
            try:
                reply = self._take(handle.seq)
                self._reap()
            except BaseException as exc:  # a worker died or could not start (its own error), or Ctrl-C
                self._break(exc)
                raise
        return Outcome(reply[2]) if reply[0] == OK else Outcome(error=reply[1])

    def _abandon(self, handles: deque) -> None:
        # may run from a finalizer in any thread: only note the numbers, the next call reaps them
        while handles:
            handle = handles.popleft()
            if isinstance(handle, _Task):
                self._dropped.append(handle.seq)

    def _reap(self) -> None:
        """Drop the replies of abandoned tasks that are in (never waiting for one)."""
        while self._dropped:
            self._orphans.add(self._dropped.popleft())
        for seq in list(self._orphans):
            if seq in self._early:
                del self._early[seq]
                self._orphans.discard(seq)
            elif seq in self._pool._done:  # in already: taking it does not block
                self._take(seq)


# -- streams and parallel data sources -------------------------------------------------------------
class WorkStream:
    """Tasks from ``task_generator`` run on ``worker_pool``, results taken in order of submission.

    ``task_buffer_size`` tasks are kept submitted or waiting to be taken: the buffer fills when the
    stream is made and is topped up whenever a result is taken. ``retrieve()`` returns the next
    result (None when every task is done) or raises the task's exception; ``retrieve_iter()``
    yields them all. ``close()`` (also when the iterator is dropped) abandons the tasks left.
    """

    def __init__(self, worker_pool, task_generator, task_buffer_size=20):
        if not isinstance(worker_pool, AbstractWorkerPool):
            raise PicPacTypeError(f"worker_pool must be a WorkerThreadPool or WorkerProcessPool, got "
                                  f"{type(worker_pool).__name__}")
        self._pool = worker_pool
        self._tasks = iter(task_generator)
        self._size = _count(task_buffer_size, "task_buffer_size")
        self._buffer: deque = deque()
        self._finalizer = weakref.finalize(self, worker_pool._abandon, self._buffer)
        self._fill()

    def _fill(self) -> None:
        while len(self._buffer) < self._size and self._tasks is not None:
            task = next(self._tasks, _END)
            if task is _END:
                self._tasks = None
                break
            self._buffer.append(self._pool._submit(*_split_task(task)))

    def retrieve(self):
        """The next task's result (waiting for it), None once every task is done; a task's exception is raised."""
        if not self._buffer:
            return None
        outcome = self._pool._result(self._buffer.popleft())
        self._fill()
        return outcome.get()

    def retrieve_iter(self):
        """Every result in order (a generator: dropping it abandons the tasks left)."""
        try:
            while self._buffer:
                yield self.retrieve()
        finally:
            self.close()

    __iter__ = retrieve_iter

    def close(self) -> None:
        """Abandon the tasks not yet retrieved (their results are dropped)."""
        self._tasks = None
        self._finalizer()

    def __enter__(self) -> WorkStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_END = object()


def _extract(ds: Any, indices: Any) -> Any:
    """A task of a parallel data source: one batch gathered by the worker."""
    return ds.samples_by_indices_nomapping(indices)


class ParallelDataSource(AbstractDataSource):
    """``ds``'s mini-batches gathered on ``pool``'s workers, ``batch_buffer_size`` ahead.

    ``batch_iterator(batch_size, **kwargs)`` takes the index batches from
    ``ds.batch_indices_iterator(batch_size, **kwargs)`` (in this process: the same order and RNG
    draws as ``ds.batch_iterator``) and starts gathering at once; the batches come in order.
    """

    def __init__(self, ds, batch_buffer_size, pool):
        if not isinstance(ds, AbstractDataSource):
            raise PicPacTypeError(f"ds must be a data source (picpac.data_source), got {type(ds).__name__}")
        if not ds.is_random_access:
            raise PicPacTypeError(f"ds must be random access to gather its batches in parallel; a "
                                  f"{type(ds).__name__} is not")
        if not isinstance(pool, AbstractWorkerPool):
            raise PicPacTypeError(f"pool must be a WorkerThreadPool or WorkerProcessPool, got {type(pool).__name__}")
        self._ds = ds
        self._buffer_size = _count(batch_buffer_size, "batch_buffer_size")
        self._pool = pool
        self._shared = pool.shared_constant(ds)

    @property
    def ds(self) -> AbstractDataSource:
        return self._ds

    def num_samples(self, **kwargs):
        return self._ds.num_samples(**kwargs)

    def batch_iterator(self, batch_size, **kwargs):
        shared = self._shared
        tasks = ((_extract, (shared, indices)) for indices in self._ds.batch_indices_iterator(batch_size, **kwargs))
        return WorkStream(self._pool, tasks, task_buffer_size=self._buffer_size).retrieve_iter()
