"""The parallel engine: an ordered, bounded map over worker threads.

OpenCV and most NumPy work release the GIL, so threads give real parallelism for decoding and
transforms. Results come back in input order (so a stream is deterministic whatever the thread
count) and at most ``window`` items are in flight, which bounds memory. Items go to the workers in
chunks, so the cost of handing work to a thread is paid once per chunk, not once per item.
Work that holds the GIL (user Python code) needs processes instead: see ``processes``.
"""
from __future__ import annotations

import math
import numbers
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, Generic, TypeVar

from ..errors import PicPacValueError, WorkerTimeoutError

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Outcome(Generic[R]):
    """The result of one item: ``get()`` returns it or raises the worker's exception (with its traceback)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def get(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value


def check_timeout(timeout: Any, who: str = "") -> float | None:
    """``timeout`` when it is None or a number of seconds > 0, else a PicPacValueError (prefixed by ``who``)."""
    if timeout is not None and (not isinstance(timeout, numbers.Real) or isinstance(timeout, bool)
                                or not 0 < timeout < math.inf):
        raise PicPacValueError(f"{who}timeout must be None or a number of seconds > 0, got {timeout!r}")
    return timeout


class _Chunk:
    """Items handed to a thread at once, their future, and the chunk's progress: the thread that runs it
    and when it began its current item (``time.monotonic()``), so that a slow chunk is told from a stuck item."""

    __slots__ = ("items", "future", "thread", "moved")

    def __init__(self, items: list) -> None:
        self.items, self.future, self.thread, self.moved = items, None, None, 0.0


def _run_chunk(work: Callable[[T], R], chunk: _Chunk) -> list[Outcome[R]]:
    chunk.moved = time.monotonic()
    chunk.thread = threading.current_thread().name  # named if it is late; after moved, which it dates
    outcomes = []
    for item in chunk.items:
        chunk.moved = time.monotonic()
        try:
            outcomes.append(Outcome(work(item)))
        except Exception as exc:  # handed to the consumer, who decides
            outcomes.append(Outcome(error=exc))
    return outcomes


def _next_done(pending: deque[_Chunk], ordered: bool, timeout: float | None, name: str) -> int:
    """The index in ``pending`` of the chunk to yield next (the first; unordered, the first done), waiting
    for it; a WorkerTimeoutError naming the thread when an item of any pending chunk has run for
    ``timeout`` seconds meanwhile (a thread never waits on the consumer, so its item's age is its own),
    or when no chunk has started in ``timeout`` seconds of this wait."""
    watched = [pending[0]] if ordered else pending
    since = time.monotonic()
    while True:
        done = next((k for k, c in enumerate(watched) if c.future.done()), None)
        if done is not None:
            return done
        wait_for = None
        if timeout is not None:
            running = [c for c in pending if c.thread is not None and not c.future.done()]
            oldest = min(running, key=lambda c: c.moved, default=None)
            wait_for = (oldest.moved if oldest else since) + timeout - time.monotonic()
            if wait_for <= 0:
                who = f"thread {oldest.thread}" if oldest else f"the {name} threads (each one busy)"
                raise WorkerTimeoutError(f"{who} gave no result for {timeout:g} s (timeout={timeout:g}): its work is "
                                         "stuck (a native call, a dead mount); raise timeout if it is this slow")
        wait([c.future for c in watched], wait_for, return_when=FIRST_COMPLETED)


def ordered_map(work: Callable[[T], R], items: Iterable[T], threads: int, window: int, chunk: int = 1,
                name: str = "picpac", ordered: bool = True,
                timeout: float | None = None) -> Iterator[tuple[T, Outcome[R]]]:
    """Yield ``(item, Outcome of work(item))`` in input order, running ``work`` on ``threads`` threads.

    At most ``window`` items (whole chunks of ``chunk`` items, at least one chunk) are submitted and
    not yet yielded. Closing the generator (or dropping it, or an exception in the consumer) cancels
    what is queued and joins the threads; a running chunk finishes first. ``ordered=False`` yields
    each chunk as soon as it is done instead (completion order, the same window). Items are taken
    from ``items`` lazily, in the consumer's thread, only when a chunk is submitted. With ``timeout``
    (seconds) a wait of the consumer is a :class:`WorkerTimeoutError` naming the thread once an item in
    flight has run that long (however the other threads fare): the bound is per item, so a chunk of
    items that each take less is not late. A thread cannot be stopped, so the pool is shut down without waiting for it (the other
    threads end with the chunks they run, the stuck one when its call returns).
    """
    if threads < 1 or window < 1 or chunk < 1:
        raise PicPacValueError(f"threads, window and chunk must be >= 1, got {threads}, {window}, {chunk}")
    check_timeout(timeout)
    todo = iter(items)
    chunks = iter(lambda: list(islice(todo, chunk)), [])
    pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
    stuck = False

    def submit(part: list[T]) -> _Chunk:
        c = _Chunk(part)
        c.future = pool.submit(_run_chunk, work, c)
        return c

    try:
        pending = deque(submit(c) for c in islice(chunks, max(1, window // chunk)))
        while pending:
            try:
                k = _next_done(pending, ordered, timeout, name)
            except WorkerTimeoutError:
                stuck = True
                raise
            done = pending[k]
            del pending[k]
            yield from zip(done.items, done.future.result())
            # a new chunk starts only once this one is consumed, so the window bounds what is ahead
            for nxt in islice(chunks, 1):
                pending.append(submit(nxt))
    finally:
        pool.shutdown(wait=not stuck, cancel_futures=True)
