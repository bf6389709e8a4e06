"""The parallel engine: an ordered, bounded map over worker threads.

OpenCV and most NumPy work release the GIL, so threads give real parallelism for decoding and
transforms. Results come back in input order (so a stream is deterministic whatever the thread
count) and at most ``window`` items are in flight, which bounds memory. Items go to the workers in
chunks, so the cost of handing work to a thread is paid once per chunk, not once per item.
Work that holds the GIL (user Python code) needs processes instead: see ``processes``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, Generic, TypeVar

from ..errors import PicPacValueError

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


def _run_chunk(work: Callable[[T], R], chunk: list[T]) -> list[Outcome[R]]:
    outcomes = []
    for item in chunk:
        try:
            outcomes.append(Outcome(work(item)))
        except Exception as exc:  # handed to the consumer, who decides
            outcomes.append(Outcome(error=exc))
    return outcomes


def ordered_map(work: Callable[[T], R], items: Iterable[T], threads: int, window: int, chunk: int = 1,
                name: str = "picpac", ordered: bool = True) -> Iterator[tuple[T, Outcome[R]]]:
    """Yield ``(item, Outcome of work(item))`` in input order, running ``work`` on ``threads`` threads.

    At most ``window`` items (whole chunks of ``chunk`` items, at least one chunk) are submitted and
    not yet yielded. Closing the generator (or dropping it, or an exception in the consumer) cancels
    what is queued and joins the threads; a running chunk finishes first. ``ordered=False`` yields
    each chunk as soon as it is done instead (completion order, the same window). Items are taken
    from ``items`` lazily, in the consumer's thread, only when a chunk is submitted.
    """
    if threads < 1 or window < 1 or chunk < 1:
        raise PicPacValueError(f"threads, window and chunk must be >= 1, got {threads}, {window}, {chunk}")
    todo = iter(items)
    chunks = iter(lambda: list(islice(todo, chunk)), [])
    pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
    try:
        pending = deque((c, pool.submit(_run_chunk, work, c)) for c in islice(chunks, max(1, window // chunk)))
        while pending:
            if ordered:
                items_done, future = pending.popleft()
            else:
                wait([f for _, f in pending], return_when=FIRST_COMPLETED)
                k = next(k for k, (_, f) in enumerate(pending) if f.done())
                items_done, future = pending[k]
                del pending[k]
            yield from zip(items_done, future.result())
            # a new chunk starts only once this one is consumed, so the window bounds what is ahead
            for nxt in islice(chunks, 1):
                pending.append((nxt, pool.submit(_run_chunk, work, nxt)))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
