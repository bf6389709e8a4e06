"""The process executor: a job's units on worker processes, their arrays written into shared memory."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .executor import Delivery, OnError
from .processes import ProcessPool
from .shared_batches import SharedBatches


class ProcessExecutor:
    """``workers`` processes, each running the job unpickled from ``recipe`` (``processes.pack_recipe``), kept
    from one run to the next; each delivery is a view into a ring of ``SharedBatches``, valid until ``keep`` more
    deliveries were asked for. A run that ends early (break, an error, Ctrl-C) stops the workers and frees the
    memory; the next run starts new ones. ``pool`` is None while none run."""

    def __init__(self, recipe: bytes, workers: int, method: str, keep: int, name: str = "picpac",
                 timeout: float | None = None):
        self.recipe, self.workers, self.method, self.keep = recipe, workers, method, keep
        self.name, self.timeout = name, timeout
        self.pool: ProcessPool | None = None
        self._ring: SharedBatches | None = None
        self._shape: tuple | None = None  # (group, window, layout) of the ring

    def run(self, job: Callable[[Any], tuple[np.ndarray, Any]], units: Iterable[Any], group: int, window: int,
            on_error: OnError, chunk: int = 1, layout: tuple[tuple[int, ...], np.dtype] | None = None
            ) -> Iterator[Delivery]:
        """As ``Executor.run``; ``job`` runs as the workers unpickled it from the recipe, and ``chunk`` does not
        apply (each unit is one message)."""
        if self.pool is not None and self._shape != (group, window, layout):
            self.close()  # one ring per pool: another grouping starts afresh
        if self.pool is None:
            self.pool = ProcessPool(self.recipe, self.workers, self.method, name=self.name, timeout=self.timeout)
            self._ring = SharedBatches(self.pool, group, window, keep=self.keep, layout=layout)
            self._shape = group, window, layout
        deliveries = self._ring(units, on_error)
        try:
            yield from deliveries
        except BaseException:  # break, close, an error, Ctrl-C: stop the workers and free the memory
            self.close()
            raise
        finally:
            deliveries.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = self._ring = None
