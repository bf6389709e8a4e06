"""Executors: what runs a job's units and hands their results back as groups, in input order.

A *job* is a picklable callable ``job(unit) -> (array, extra)`` (one sample, or a chunk of keys made into
a batch); an *executor* runs it on workers and delivers the results ``group`` units at a time as a
:class:`Delivery`. The stream has one delivery loop over any executor and any job, so a new executor (the
GPU) or a new job (a fused C job) is a new module, not a new branch. ``ThreadExecutor`` is here;
``process_executor.ProcessExecutor`` runs the same job in worker processes and writes the arrays into
shared memory.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np

from .threads import ordered_map

OnError = Callable[[Any, BaseException], None]
"""``on_error(unit, exception)``: raise to stop, return to skip the unit."""


class Delivery(NamedTuple):
    """One group of results, in input order."""

    arrays: np.ndarray | list[np.ndarray]
    """``(n, *shape)``, a view into shared memory (valid until ``keep`` more deliveries); or a list of arrays."""
    items: list
    """The units delivered, in input order (skipped ones left out)."""
    extras: list
    """What the job returned beside each array."""
    taken: int
    """Units consumed for this group, skipped ones included."""


class Executor(Protocol):
    """Runs a job's units: ``run(job, units, group, window, on_error)`` yields their :class:`Delivery` s, with at
    most ``window`` units in flight; ``close()`` stops the workers (a run left early needs it)."""

    def run(self, job: Callable[[Any], tuple[np.ndarray, Any]], units: Iterable[Any], group: int, window: int,
            on_error: OnError, chunk: int = 1, layout: tuple[tuple[int, ...], np.dtype] | None = None
            ) -> Iterator[Delivery]: ...

    def close(self) -> None: ...


class ThreadExecutor:
    """A job's units on ``workers`` threads of this process (``threads.ordered_map``), ``chunk`` units per
    hand-off. Results stay where the job made them: a delivery's ``arrays`` is a list."""

    def __init__(self, workers: int, name: str = "picpac", timeout: float | None = None):
        self.workers, self.name, self.timeout = workers, name, timeout

    def run(self, job: Callable[[Any], tuple[np.ndarray, Any]], units: Iterable[Any], group: int, window: int,
            on_error: OnError, chunk: int = 1, layout: tuple[tuple[int, ...], np.dtype] | None = None
            ) -> Iterator[Delivery]:
        work = ordered_map(job, units, self.workers, window, chunk=chunk, name=self.name, timeout=self.timeout)
        arrays: list[np.ndarray] = []
        items: list = []
        extras: list = []
        taken = 0
        try:
            for unit, outcome in work:
                taken += 1
                try:
                    array, extra = outcome.get()
                except BaseException as exc:
                    on_error(unit, exc)
                    continue
                arrays.append(array)
                items.append(unit)
                extras.append(extra)
                if len(items) == group:
                    done = Delivery(arrays, items, extras, taken)
                    arrays, items, extras, taken = [], [], [], 0
                    yield done
            if items:
                yield Delivery(arrays, items, extras, taken)
        finally:
            work.close()

    def close(self) -> None:
        """Nothing to stop: a run's threads end with it."""
