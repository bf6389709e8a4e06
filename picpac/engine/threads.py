"""The parallel engine: an ordered, bounded map over worker threads.

OpenCV and most NumPy work release the GIL, so threads give real parallelism for decoding and
transforms. Results come back in input order (so a stream is deterministic whatever the thread
count) and at most ``window`` items are in flight, which bounds memory. Items go to the workers in
chunks, so the cost of handing work to a thread is paid once per chunk, not once per item.
Work that holds the GIL (user Python code) needs processes instead: see ``processes``.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, Generic, TypeVar

from ..errors import PicPacValueError, WorkerTimeoutError

T = TypeVar("T")
R = TypeVar("R")


class Outcome(Generic[R]):
    """The result of one item: ``get()`` returns it or raises the worker's exception (with its traceback)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def get(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value


def _run_chunk(work: Callable[[T], R], chunk: list[T], where: list[str]) -> list[Outcome[R]]:
    where.append(threading.current_thread().name)  # named if it is late
    outcomes = []
    for item in chunk:
        try:
            outcomes.append(Outcome(work(item)))
        except Exception as exc:  # handed to the consumer, who decides
            outcomes.append(Outcome(error=exc))
    return outcomes


def ordered_map(work: Callable[[T], R], items: Iterable[T], threads: int, window: int, chunk: int = 1,
                name: str = "picpac", ordered: bool = True,
                timeout: float | None = None) -> Iterator[tuple[T, Outcome[R]]]:
    """Yield ``(item, Outcome of work(item))`` in input order, running ``work`` on ``threads`` threads.

    At most ``window`` items (whole chunks of ``chunk`` items, at least one chunk) are submitted and
    not yet yielded. Closing the generator (or dropping it, or an exception in the consumer) cancels
    what is queued and joins the threads; a running chunk finishes first. ``ordered=False`` yields
    each chunk as soon as it is done instead (completion order, the same window). Items are taken
    from ``items`` lazily, in the consumer's thread, only when a chunk is submitted. With ``timeout``
    (seconds) a wait for the next chunk that lasts longer is a :class:`WorkerTimeoutError` naming the
    thread; a thread cannot be stopped, so the pool is shut down without waiting for it (the other
    threads end with the chunks they run, the stuck one when its call returns).
    """
    if threads < 1 or window < 1 or chunk < 1:
        raise PicPacValueError(f"threads, window and chunk must be >= 1, got {threads}, {window}, {chunk}")
    todo = iter(items)
    chunks = iter(lambda: list(islice(todo, chunk)), [])
    pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
    stuck = False

    def submit(c: list[T]) -> tuple[list[T], Future, list[str]]:
        where: list[str] = []
        return c, pool.submit(_run_chunk, work, c, where), where

    try:
        pending = deque(submit(c) for c in islice(chunks, max(1, window // chunk)))
        while pending:
            if ordered:
                k, late = 0, timeout is not None and not wait([pending[0][1]], timeout).done
            else:
                wait([f for _, f, _ in pending], timeout, return_when=FIRST_COMPLETED)
                first = next((k for k, (_, f, _) in enumerate(pending) if f.done()), None)
                k, late = first or 0, first is None
            items_done, future, where = pending[k]
            if late:
                stuck = True
                who = f"thread {where[0]}" if where else f"the {name} threads (each one busy)"
                raise WorkerTimeoutError(f"{who} gave no result for {timeout:g} s (timeout={timeout:g}): its work is "
                                         "stuck (a native call, a dead mount); raise timeout if it is this slow")
            del pending[k]
            yield from zip(items_done, future.result())
            # a new chunk starts only once this one is consumed, so the window bounds what is ahead
            for nxt in islice(chunks, 1):
                pending.append(submit(nxt))
    finally:
        pool.shutdown(wait=not stuck, cancel_futures=True)
