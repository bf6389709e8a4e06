"""Batches assembled in shared memory: the process engine's workers write each result array into its
place in a ring of batch buffers, and the consumer gets NumPy views of whole batches, in input order."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import PicPacError, PicPacValueError
from .executor import Delivery, OnError
from .processes import OK, ProcessPool

_END = object()


class SharedBatches:
    """Batches of ``batch`` results in input order, the arrays written by ``pool``'s workers into shared memory.

    ``SharedBatches(pool, batch, window, keep)(items, on_error)`` yields :class:`~picpac.engine.executor.Delivery` s; call
    it again for the next pass (on the same ring, its buffers counted on from the last pass). The
    ring has ``keep + ceil(window / batch)`` batch buffers, made from the first array that comes
    back (until then at most one item per worker is in flight), or from ``layout`` (one array's shape and
    dtype) when it is known before. Each item goes to the place of its
    batch where it will be delivered; a yielded batch's buffer is reused only once ``keep`` more
    batches were asked for, so it stays valid until then. An array of another shape or dtype than
    the first comes back pickled, and its batch is delivered as a list. ``on_error(item, exception)``
    raises to stop or returns to skip the item (default: raise); after a skip, the items already in
    flight are moved down one place and none start until they are in, so batches stay contiguous.
    A run left early (``close()`` on its generator) leaves items in flight: close the pool then.
    """

    def __init__(self, pool: ProcessPool, batch: int, window: int, keep: int = 1,
                 layout: tuple[tuple[int, ...], Any] | None = None):
        if batch < 1 or window < 1 or keep < 1:
            raise PicPacValueError(f"batch, window and keep must be >= 1, got {batch}, {window}, {keep}")
        self.pool, self.batch, self.window, self.keep = pool, batch, window, keep
        self.ring = keep + -(-window // batch)  # the kept batches, the one being filled, the ones the window reaches
        self._arena = None if layout is None else pool.arena(layout[0], layout[1], self.ring * batch)
        self._started = 0  # batches begun so far, over every run: the next run begins with a fresh buffer
        self._yielded = 0  # batches yielded so far, over every run

    def _slot(self, place: int) -> int:
        return (place // self.batch) % self.ring * self.batch + place % self.batch

    def __call__(self, items: Iterable[Any],
                 on_error: OnError | None = None) -> Iterator[Delivery]:
        pool, batch, slot = self.pool, self.batch, self._slot
        if pool.pending:
            raise PicPacError("the process pool still has items in flight from a run left early; close it")
        todo = iter(items)
        inflight: deque[tuple[int, Any, int]] = deque()  # (seq, item, place)
        place = cursor = self._started * batch  # the next output place to hand out / to fill
        draining = exhausted = False
        got_items: list = []
        got_extras: list = []
        loose: list[np.ndarray | None] = []  # arrays that did not fit the ring, by position in the batch
        taken = 0
        try:
            while True:
                if draining and not inflight:
                    place, draining = cursor, False
                released = self._yielded - self.keep + 1  # batches whose buffers may be written again
                while (not exhausted and not draining and len(inflight) < self.window and pool.can_submit()
                       and place // batch - self.ring < released
                       and (self._arena is not None or len(inflight) < pool.workers)):
                    item = next(todo, _END)
                    if item is _END:
                        exhausted = True
                        break
                    # no ring yet: the array comes back pickled
                    seq = pool.submit(item, -1 if self._arena is None else slot(place))
                    inflight.append((seq, item, place))
                    place += 1
                if not inflight:
                    break
                seq, item, at = inflight.popleft()
                reply = pool.result(seq)
                taken += 1
                if reply[0] != OK:
                    if on_error is None:
                        raise reply[1]
                    on_error(item, reply[1])
                    draining = True
                    continue
                array, extra = reply[1], reply[2]
                arena = self._arena
                if array is not None:  # pickled: no ring yet, or it does not fit
                    if arena is None:
                        arena = self._arena = pool.arena(array.shape, array.dtype, self.ring * batch)
                    if array.shape == arena.shape[1:] and array.dtype == arena.dtype:
                        arena[slot(cursor)] = array
                        array = None
                elif at != cursor:  # moved down after a skip
                    arena[slot(cursor)] = arena[slot(at)]
                got_items.append(item)
                got_extras.append(extra)
                loose.append(array)
                cursor += 1
                if cursor % batch == 0:
                    full = got_items, got_extras, loose, taken
                    got_items, got_extras, loose, taken = [], [], [], 0
                    self._yielded += 1
                    yield _batch(self._arena, slot(cursor - batch), *full)  # no local holds it: the consumer decides
            if got_items:
                self._yielded += 1
                yield _batch(self._arena, slot(cursor - len(got_items)), got_items, got_extras, loose, taken)
        finally:
            self._started = -(-cursor // batch)


def _batch(arena: np.ndarray | None, start: int, items: list, extras: list, loose: list, taken: int) -> Delivery:
    n = len(items)
    if all(a is None for a in loose):
        arrays: Any = arena[start:start + n]
    else:
        arrays = [arena[start + i] if a is None else a for i, a in enumerate(loose)]
    return Delivery(arrays, items, extras, taken)
