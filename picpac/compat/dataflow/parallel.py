"""Runners: a DataFlow run in N worker processes or threads, on picpac's engines.

``MultiProcessRunner`` and ``MultiProcessRunnerZMQ`` run copies of a flow in the worker processes of a
:class:`picpac.engine.processes.ProcessPool` (one duplex pipe per worker: a dead worker is an error at once, a
worker's exception comes back with its type and traceback, closing stops every worker, and workers die
with their parent). The consumer asks the workers for datapoints, at most ``num_prefetch`` (``hwm``)
ahead, and takes whichever reply comes first. ``MultiThreadRunner`` does the same on
:func:`picpac.engine.threads.ordered_map`'s threads. Each worker resets its own copy of the flow under its own
worker path (see :mod:`.base`), so random flows in different workers draw different streams.
"""
from __future__ import annotations

import multiprocessing as mp
from collections import deque
from collections.abc import Callable, Iterator

from ...engine.processes import METHODS, OK, ProcessPool, pack_recipe, worker_index
from ...engine.threads import check_timeout, ordered_map
from ...errors import PicPacValueError
from .base import (DataFlow, DataFlowError, DataFlowReentrantGuard, ProxyDataFlow, enter_worker_process,
                   new_entropy, worker_path, worker_scope)

__all__ = ["MultiProcessRunner", "MultiProcessRunnerZMQ", "MultiThreadRunner",
           "PrefetchData", "MultiProcessPrefetchData", "PrefetchDataZMQ", "MultiThreadPrefetchData"]


def forever(ds: DataFlow, who: str) -> Iterator:
    """``ds``'s passes one after another; an empty pass is an error, not an endless loop."""
    while True:
        empty = True
        for dp in ds:
            empty = False
            yield dp
        if empty:
            raise DataFlowError(f"{who}: its DataFlow ({type(ds).__name__}) produced no datapoint in a whole pass")


def check_method(method: str, who: str) -> str:
    if method not in METHODS:
        raise PicPacValueError(f"{who}: start_method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method


class WorkerRecipe:
    """Run in a new worker process before its work: its worker path, its own global RNG streams, and the
    right to start workers of its own (nested runners)."""

    def __init__(self) -> None:
        self.path = worker_path()
        self.entropy = new_entropy()

    def enter(self) -> None:
        enter_worker_process(self.path + (worker_index() or 0,), self.entropy)
        try:  # a pool's workers are daemonic; a flow in one may start a pool of its own
            mp.current_process().daemon = False
        except (AssertionError, ValueError):  # pragma: no cover
            pass


class ProcessOwner:
    """What the flows that own a ProcessPool share: reset once, close, fail for good."""

    _pool: ProcessPool | None = None
    _reset_done = False
    _closed = False
    _failure: BaseException | None = None

    def _claim_reset(self) -> None:
        if self._reset_done:
            raise DataFlowError(f"reset_state() was called twice on {type(self).__name__}: it starts worker "
                                "processes, so it is reset once and only once (the DataFlow protocol); make a "
                                "new one for a fresh start")
        if self._closed:
            raise DataFlowError(f"{type(self).__name__} is closed")
        self._reset_done = True

    def _check_usable(self) -> None:
        if self._closed:
            raise DataFlowError(f"{type(self).__name__} is closed: make a new one")
        if self._failure is not None:
            raise DataFlowError(f"{type(self).__name__} stopped after an error in its workers "
                                f"({type(self._failure).__name__}: {self._failure}); make a new one") from self._failure
        if not self._reset_done:
            raise DataFlowError(f"{type(self).__name__}: call reset_state() once before iterating it (it starts "
                                "the worker processes there)")

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._stop()

    def _stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (empty before ``reset_state()`` and after ``close()``)."""
        return list(self._pool.pids) if self._pool is not None else []

    def close(self) -> None:
        self._closed = True
        self._stop()
        DataFlow.close(self)  # type: ignore[arg-type]


# -- process runners -----------------------------------------------------------------------------------------
class _RunnerRecipe(WorkerRecipe):
    def __init__(self, ds: DataFlow, who: str):
        super().__init__()
        self.ds, self.who = ds, who

    def __call__(self) -> Callable[[int], list]:
        self.enter()
        self.ds.reset_state()
        source = forever(self.ds, self.who)

        def work(n: int) -> list:
            return [next(source) for _ in range(n)]
        return work


class _ProcessRunner(ProcessOwner, ProxyDataFlow):
    def __init__(self, ds: DataFlow, num_proc: int, prefetch: int, start_method: str, timeout: float | None):
        super().__init__(ds)
        if int(num_proc) < 1 or int(prefetch) < 1:
            raise PicPacValueError(f"{type(self).__name__}: num_proc and the prefetch size must be >= 1, "
                                   f"got {num_proc} and {prefetch}")
        self.num_proc, self._prefetch = int(num_proc), int(prefetch)
        self._method = check_method(start_method, type(self).__name__)
        self._timeout = check_timeout(timeout, f"{type(self).__name__}: ")
        # datapoints asked for at once; one with a timeout, which then bounds one datapoint's work
        self._per = 1 if timeout is not None else max(1, self._prefetch // (4 * self.num_proc))
        try:
            self._size = len(ds)
        except NotImplementedError:
            self._size = -1
        self._fetched: deque = deque()
        self._asked = 0  # datapoints asked for and not yet in
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    def __len__(self) -> int:
        return len(self.ds)

    def reset_state(self) -> None:
        self._claim_reset()
        who = type(self).__name__
        recipe = pack_recipe(_RunnerRecipe(self.ds, who), self._method, who, "the DataFlow")
        self._pool = ProcessPool(recipe, self.num_proc, self._method, shaped=False, name=f"picpac-{who}",
                                 timeout=self._timeout)

    def _top_up(self) -> None:
        pool = self._pool
        while self._asked + len(self._fetched) < self._prefetch and pool.can_submit():
            pool.submit(self._per)
            self._asked += self._per

    def __iter__(self) -> Iterator:
        self._check_usable()
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            k = 0
            while self._size <= 0 or k < self._size:
                if self._pool is None:
                    self._check_usable()
                reply = None
                try:
                    self._top_up()  # a send to a dead worker fails here
                    if not self._fetched:
                        reply = self._pool.result(self._pool.ready())
                except BaseException as exc:  # a dead worker, or Ctrl-C
                    self._fail(exc)
                    raise
                if reply is not None:
                    self._asked -= self._per
                    if reply[0] != OK:
                        self._fail(reply[1])
                        raise reply[1]
                    self._fetched.extend(reply[2])
                yield self._fetched.popleft()
                k += 1


class MultiProcessRunner(_ProcessRunner):
    """Run ``ds`` in ``num_proc`` worker processes; datapoints come from whichever worker has one.

    Each worker resets and iterates its own copy of ``ds``, forever, so with ``num_proc > 1`` the output
    has the *distribution* of ``ds`` (datapoints repeat and reorder; with ``num_proc=1`` it is ``ds``
    itself, in order). A pass is ``len(ds)`` datapoints (endless when ``ds`` has no length). At most
    ``num_prefetch`` datapoints are fetched ahead.

    Differences from tensorpack: the workers start in ``reset_state()`` (tensorpack forks in
    ``__init__``), which may be called only once; ``start_method`` is ``'fork'`` (tensorpack's) or
    ``'spawn'`` (``ds`` is then pickled); an error in a worker reaches the consumer, a dead worker is an
    error at once, and ``close()`` stops them all. With ``timeout`` (seconds) a worker that sends no
    datapoint for that long (stopped, stuck) is a :class:`picpac.WorkerTimeoutError` naming it, and the
    flow stops; the workers are then asked for one datapoint at a time.
    """

    def __init__(self, ds: DataFlow, num_prefetch: int | None = None, num_proc: int | None = None,
                 nr_prefetch: int | None = None, nr_proc: int | None = None, *, start_method: str = "fork",
                 timeout: float | None = None):
        num_prefetch = nr_prefetch if nr_prefetch is not None else num_prefetch
        num_proc = nr_proc if nr_proc is not None else num_proc
        if num_prefetch is None or num_proc is None:
            raise TypeError("MultiProcessRunner needs num_prefetch and num_proc")
        super().__init__(ds, num_proc, num_prefetch, start_method, timeout)


class MultiProcessRunnerZMQ(_ProcessRunner):
    """:class:`MultiProcessRunner` with tensorpack's ZMQ signature: ``hwm`` bounds the datapoints fetched
    ahead. The transport is picpac's process engine (pipes), not ZMQ; the workers start in
    ``reset_state()``, as in tensorpack. ``timeout``: as for :class:`MultiProcessRunner`."""

    def __init__(self, ds: DataFlow, num_proc: int = 1, hwm: int = 50, nr_proc: int | None = None, *,
                 start_method: str = "fork", timeout: float | None = None):
        super().__init__(ds, nr_proc if nr_proc is not None else num_proc, hwm, start_method, timeout)


PrefetchData = MultiProcessPrefetchData = MultiProcessRunner
PrefetchDataZMQ = MultiProcessRunnerZMQ


# -- the thread runner -----------------------------------------------------------------------------------
class MultiThreadRunner(DataFlow):
    """``num_thread`` flows made by ``get_df()``, each run on a thread, their datapoints collected as
    they come (the distribution of one flow's data, as with :class:`MultiProcessRunner`; with one thread
    the flow itself, in order). A pass is ``len()`` of the first flow; at most about ``num_prefetch``
    datapoints are fetched ahead. ``get_df`` must return a new flow at each call. A flow's error reaches
    the consumer with its traceback; ``close()`` stops and joins the threads. With ``timeout`` (seconds) a
    thread that gives no datapoint for that long is a :class:`picpac.WorkerTimeoutError` naming it, and the
    flow stops (the stuck thread ends when its call returns); the threads then make one datapoint at a time.
    """

    def __init__(self, get_df: Callable[[], DataFlow], num_prefetch: int | None = None, num_thread: int | None = None,
                 nr_prefetch: int | None = None, nr_thread: int | None = None, *, timeout: float | None = None):
        num_prefetch = nr_prefetch if nr_prefetch is not None else num_prefetch
        num_thread = nr_thread if nr_thread is not None else num_thread
        if num_prefetch is None or num_thread is None:
            raise TypeError("MultiThreadRunner needs num_prefetch and num_thread")
        if int(num_thread) < 1 or int(num_prefetch) < 1:
            raise PicPacValueError(f"MultiThreadRunner: num_prefetch and num_thread must be >= 1, got "
                                   f"{num_prefetch} and {num_thread}")
        self.num_thread = int(num_thread)
        self._timeout = check_timeout(timeout, "MultiThreadRunner: ")
        self._per = 1 if timeout is not None else max(1, int(num_prefetch) // self.num_thread)
        self.df_lists = [get_df() for _ in range(self.num_thread)]
        if len({id(d) for d in self.df_lists}) != len(self.df_lists):
            raise PicPacValueError("MultiThreadRunner: get_df() returned the same DataFlow twice; it must make a "
                                   "new one at each call")
        try:
            self._size = len(self.df_lists[0])
        except NotImplementedError:
            self._size = -1
        self._engine: Iterator | None = None
        self._fetched: deque = deque()
        self._free: deque = deque()
        self._guard = DataFlowReentrantGuard("MultiThreadRunner")
        self._closed = self._reset_done = False
        self._failure: BaseException | None = None

    def __len__(self) -> int:
        return len(self.df_lists[0])

    def reset_state(self) -> None:
        if self._reset_done:
            raise DataFlowError("reset_state() was called twice on MultiThreadRunner: it starts its threads, so it "
                                "is reset once and only once; make a new one for a fresh start")
        if self._closed:
            raise DataFlowError("MultiThreadRunner is closed")
        self._reset_done = True
        sources = []
        for k, df in enumerate(self.df_lists):
            with worker_scope(k):
                df.reset_state()
            sources.append(forever(df, "MultiThreadRunner"))
        per = self._per

        def work(k: int) -> tuple[int, list]:
            source = sources[k]
            with worker_scope(k):  # on whichever pool thread runs it, the flow sees its own worker path
                return k, [next(source) for _ in range(per)]
        free = self._free = deque(range(self.num_thread))  # the flows not in use: each on one thread at most

        def feed() -> Iterator[int]:
            while free:
                yield free.popleft()
        self._engine = ordered_map(work, feed(), self.num_thread, self.num_thread, name="picpac-MultiThreadRunner",
                                   ordered=False, timeout=self._timeout)

    def __iter__(self) -> Iterator:
        if self._closed:
            raise DataFlowError("MultiThreadRunner is closed: make a new one")
        if self._failure is not None:
            raise DataFlowError(f"MultiThreadRunner stopped after an error in a thread ({self._failure!r}); make a "
                                "new one") from self._failure
        if not self._reset_done:
            raise DataFlowError("MultiThreadRunner: call reset_state() once before iterating it")
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            k = 0
            while self._size <= 0 or k < self._size:
                if not self._fetched:
                    if self._engine is None:
                        raise DataFlowError("MultiThreadRunner was closed while it was iterated")
                    try:
                        _, outcome = next(self._engine)  # a stuck thread raises here
                        index, dps = outcome.get()
                    except BaseException as exc:
                        self._failure = exc
                        self._stop()
                        raise
                    self._free.append(index)
                    self._fetched.extend(dps)
                yield self._fetched.popleft()
                k += 1

    def _stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def close(self) -> None:
        self._closed = True
        self._stop()
        super().close()


MultiThreadPrefetchData = MultiThreadRunner
