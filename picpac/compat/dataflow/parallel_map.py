"""Parallel ``MapData``: the map function on threads or worker processes, on picpac's engines.

``MultiThreadMapData`` runs on :func:`picpac.engine.threads.ordered_map`; ``MultiProcessMapData`` and
``MultiProcessMapAndBatchData`` on a :class:`picpac.engine.processes.ProcessPool` through
:func:`picpac.engine.processes.pool_map`. At most ``buffer_size`` datapoints are in flight.

* ``strict=True``: each ``__iter__`` is one pass of ``ds``, mapped, **in the order of** ``ds``: exactly
  what ``MapData(ds, map_func)`` gives (tensorpack promises the same set in some order; the engines
  here keep the order at no cost). A ``None`` result drops the datapoint, as in ``MapData``.
* ``strict=False``: the stream is ``ds`` repeated forever, mapped, in the order the results are done;
  ``__iter__`` never ends (``len()`` is ``len(ds)``, a guide for a "pass").

An exception in ``map_func`` reaches the consumer with its type and the worker's traceback; the flow
goes on with the next datapoint (in strict mode, the next ``__iter__`` starts a new pass). A worker
process that dies is an error at once, after which the flow is stopped.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...engine.processes import ProcessPool, pack_recipe, pool_map
from ...engine.threads import check_timeout, ordered_map
from ...errors import PicPacValueError
from .base import DataFlow, DataFlowError, DataFlowReentrantGuard, ProxyDataFlow
from .common import BatchData
from .parallel import ProcessOwner, WorkerRecipe, check_method, forever

__all__ = ["MultiThreadMapData", "MultiProcessMapData", "MultiProcessMapDataZMQ", "MultiProcessMapAndBatchData",
           "MultiProcessMapAndBatchDataZMQ"]


class _PassEnd:
    """Marks the end of a pass of ``ds`` among the items (strict mode); one per process after pickling."""

    __slots__ = ()

    def __reduce__(self):
        return _pass_end, ()


PASS_END = _PassEnd()


def _pass_end() -> _PassEnd:
    return PASS_END


def _passes(ds: DataFlow) -> Iterator:
    while True:
        yield from ds
        yield PASS_END


class _Mapper:
    def __init__(self, func: Callable[[Any], Any]):
        self.func = func

    def __call__(self, dp: Any) -> Any:
        return dp if isinstance(dp, _PassEnd) else self.func(dp)


class _ParallelMapData(ProxyDataFlow):
    def __init__(self, ds: DataFlow, buffer_size: int, strict: bool, map_func: Callable[[Any], Any] | None,
                 timeout: float | None):
        super().__init__(ds)
        self._timeout = check_timeout(timeout, f"{type(self).__name__}: ")
        if map_func is None or not callable(map_func):
            raise PicPacValueError(f"{type(self).__name__} needs a callable map_func, got {map_func!r}")
        if strict:
            try:
                buffer_size = min(buffer_size, len(ds))
            except NotImplementedError:
                pass
        if int(buffer_size) < 1 and not strict:
            raise PicPacValueError(f"{type(self).__name__}: buffer_size must be >= 1, got {buffer_size}")
        self._buffer_size = max(1, int(buffer_size))
        self._strict = bool(strict)
        self.map_func = map_func
        self._engine: Iterator | None = None
        self._restart = False  # strict: the last pass was left early; the next __iter__ starts a new one
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    # subclasses: start the engine on these items
    def _start(self, items: Iterator) -> Iterator:
        raise NotImplementedError

    def _begin(self) -> None:
        items = _passes(self.ds) if self._strict else forever(self.ds, type(self).__name__)
        self._engine = self._start(items)
        self._restart = False

    def _end_engine(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def _next(self) -> tuple:
        try:
            return next(self._engine)
        except StopIteration:
            exc = DataFlowError(f"{type(self).__name__}: its engine stopped")
            self._fail(exc)
            raise exc from None
        except BaseException as exc:  # the source raised, a worker died, or Ctrl-C
            self._fail(exc)
            raise

    def _fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _iterate(self) -> Iterator:
        with self._guard:
            if not self._strict:
                while True:
                    _, outcome = self._next()
                    value = outcome.get()
                    if value is not None:
                        yield value
            if self._restart:
                try:
                    self._end_engine()
                    self._begin()
                except BaseException as exc:
                    self._fail(exc)
                    raise
            self._restart = True  # until the pass ends
            while True:
                item, outcome = self._next()
                if isinstance(item, _PassEnd):
                    self._restart = False
                    return
                value = outcome.get()
                if value is not None:
                    yield value


class MultiThreadMapData(_ParallelMapData):
    """``MapData(ds, map_func)`` with ``map_func`` on ``num_thread`` threads (see the module's notes on
    ``strict``). Threads start at the first ``__iter__`` after ``reset_state()``; ``close()`` joins them. With
    ``timeout`` (seconds) a ``map_func`` call that has run that long when the consumer waits is a
    :class:`picpac.WorkerTimeoutError` naming its thread, and the flow stops until ``reset_state()`` (the
    stuck thread ends when its call returns)."""

    def __init__(self, ds: DataFlow, num_thread: int | None = None, map_func: Callable[[Any], Any] | None = None,
                 buffer_size: int = 200, strict: bool = False, nr_thread: int | None = None, *,
                 timeout: float | None = None):
        num_thread = nr_thread if nr_thread is not None else num_thread
        if num_thread is None or int(num_thread) < 1:
            raise PicPacValueError(f"MultiThreadMapData: num_thread must be >= 1, got {num_thread}")
        super().__init__(ds, buffer_size, strict, map_func, timeout)
        self.num_thread = int(num_thread)
        self._closed = False
        self._failure: BaseException | None = None

    def reset_state(self) -> None:
        if self._closed:
            raise DataFlowError("MultiThreadMapData is closed: make a new one")
        self._end_engine()  # a second reset starts afresh, as in tensorpack
        self._failure = None
        super().reset_state()
        self._begin()

    def _start(self, items: Iterator) -> Iterator:
        return ordered_map(_Mapper(self.map_func), items, self.num_thread, self._buffer_size,
                           name="picpac-MultiThreadMapData", ordered=self._strict, timeout=self._timeout)

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._end_engine()

    def __iter__(self) -> Iterator:
        if self._closed:
            raise DataFlowError("MultiThreadMapData is closed: make a new one")
        if self._failure is not None:
            raise DataFlowError(f"MultiThreadMapData stopped after an error ({self._failure!r}); call reset_state() "
                                "again or make a new one") from self._failure
        self._need_reset(self._engine is not None)
        return self._iterate()

    def close(self) -> None:
        self._closed = True
        self._end_engine()
        super().close()


class _MapRecipe(WorkerRecipe):
    def __init__(self, func: Callable[[Any], Any]):
        super().__init__()
        self.func = func

    def __call__(self) -> Callable[[Any], Any]:
        self.enter()
        return _Mapper(self.func)


class MultiProcessMapData(ProcessOwner, _ParallelMapData):
    """``MapData(ds, map_func)`` with ``map_func`` in ``num_proc`` worker processes (see the module's notes
    on ``strict``). ``ds`` is iterated in this process; datapoints and results are pickled to and from the
    workers. The workers start in ``reset_state()`` (once only). ``start_method='fork'`` (tensorpack's,
    the default) inherits ``map_func``; ``'spawn'`` pickles it, so it must be importable. With ``timeout``
    (seconds) a worker that sends no result for that long (stopped, stuck) is a
    :class:`picpac.WorkerTimeoutError` naming it, and the flow stops."""

    def __init__(self, ds: DataFlow, num_proc: int | None = None, map_func: Callable[[Any], Any] | None = None,
                 buffer_size: int = 200, strict: bool = False, nr_proc: int | None = None, *,
                 start_method: str = "fork", timeout: float | None = None):
        num_proc = nr_proc if nr_proc is not None else num_proc
        if num_proc is None or int(num_proc) < 1:
            raise PicPacValueError(f"{type(self).__name__}: num_proc must be >= 1, got {num_proc}")
        _ParallelMapData.__init__(self, ds, buffer_size, strict, map_func, timeout)
        self.num_proc = int(num_proc)
        self._method = check_method(start_method, type(self).__name__)

    def reset_state(self) -> None:
        self._claim_reset()
        self.ds.reset_state()
        who = type(self).__name__
        self._pool = ProcessPool(pack_recipe(_MapRecipe(self.map_func), self._method, who, "map_func"), self.num_proc,
                                 self._method, shaped=False, name=f"picpac-{who}", timeout=self._timeout)
        self._begin()

    def _start(self, items: Iterator) -> Iterator:
        return pool_map(self._pool, items, self._buffer_size, ordered=self._strict)

    def _end_engine(self) -> None:
        super()._end_engine()
        if self._pool is not None and not self._pool.closed:
            self._pool.drain()  # the replies of the items left in flight

    def _fail(self, exc: BaseException) -> None:
        self._engine = None
        ProcessOwner._fail(self, exc)

    def _stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        ProcessOwner._stop(self)

    def __iter__(self) -> Iterator:
        self._check_usable()
        return self._iterate()


MultiProcessMapDataZMQ = MultiProcessMapData


class _MapBatchRecipe(WorkerRecipe):
    def __init__(self, func: Callable[[Any], Any], batch_size: int):
        super().__init__()
        self.func, self.batch_size = func, batch_size

    def __call__(self) -> Callable[[list], list]:
        self.enter()
        func, size, holder = self.func, self.batch_size, []

        def work(chunk: list) -> list:
            for dp in chunk:
                out = func(dp)
                if out is not None:
                    holder.append(out)
            batches = []
            while len(holder) >= size:
                batches.append(BatchData.aggregate_batch(holder[:size]))
                del holder[:size]
            return batches
        return work


class MultiProcessMapAndBatchData(ProcessOwner, ProxyDataFlow):
    """Map and batch in ``num_proc`` worker processes: like ``BatchData(MapData(ds, map_func), batch_size)``
    with the work (the batching too) in the workers. With one process that is exactly what it gives
    (remainders are not produced); with more, batches group datapoints in any order and across passes.
    ``ds`` is repeated forever, so ``__iter__`` never ends; ``len()`` is ``len(ds) // batch_size``. About
    ``buffer_size`` datapoints are in flight. An exception in ``map_func`` reaches the consumer (its type,
    the worker's traceback) and stops the flow: a worker's partial batch cannot be trusted after it. With
    ``timeout`` (seconds) a worker that sends nothing for that long is a :class:`picpac.WorkerTimeoutError`
    naming it, and the flow stops; the workers are then handed one datapoint at a time (a worker replies
    to each, with the batches it completed), so that the timeout bounds one ``map_func`` call."""

    def __init__(self, ds: DataFlow, num_proc: int, map_func: Callable[[Any], Any], batch_size: int,
                 buffer_size: int = 1024, *, start_method: str = "fork", timeout: float | None = None):
        super().__init__(ds)
        if int(num_proc) < 1 or int(batch_size) < 1:
            raise PicPacValueError(f"MultiProcessMapAndBatchData: num_proc and batch_size must be >= 1, got "
                                   f"{num_proc} and {batch_size}")
        if int(batch_size) >= int(buffer_size):
            raise PicPacValueError(f"MultiProcessMapAndBatchData: batch_size ({batch_size}) must be smaller than "
                                   f"buffer_size ({buffer_size})")
        self.num_proc, self.map_func = int(num_proc), map_func
        self.batch_size, self.buffer_size = int(batch_size), int(buffer_size)
        self._method = check_method(start_method, "MultiProcessMapAndBatchData")
        self._timeout = check_timeout(timeout, "MultiProcessMapAndBatchData: ")
        self._engine: Iterator | None = None
        self._guard = DataFlowReentrantGuard("MultiProcessMapAndBatchData")

    def __len__(self) -> int:
        return len(self.ds) // self.batch_size

    def reset_state(self) -> None:
        self._claim_reset()
        self.ds.reset_state()
        who = "MultiProcessMapAndBatchData"
        recipe = pack_recipe(_MapBatchRecipe(self.map_func, self.batch_size), self._method, who, "map_func")
        self._pool = ProcessPool(recipe, self.num_proc, self._method, shaped=False, name=f"picpac-{who}",
                                 timeout=self._timeout)
        source = forever(self.ds, who)
        size = 1 if self._timeout is not None else self.batch_size  # datapoints per task

        def chunks() -> Iterator[list]:
            while True:
                yield [next(source) for _ in range(size)]
        self._engine = pool_map(self._pool, chunks(), max(1, self.buffer_size // size), ordered=False)

    def __iter__(self) -> Iterator:
        self._check_usable()
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            while True:
                if self._engine is None:
                    self._check_usable()
                try:
                    _, outcome = next(self._engine)
                    batches = outcome.get()
                except BaseException as exc:
                    self._fail(exc)
                    raise
                yield from batches

    def _stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        ProcessOwner._stop(self)


MultiProcessMapAndBatchDataZMQ = MultiProcessMapAndBatchData
