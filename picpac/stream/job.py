"""What a stream is made of: a pool of keys, a job (what one unit of work does) and an executor.

The pool is the stream's samples (records of the database and the mixin, and their labels); a key is a
position in the pool and an epoch. A job turns keys into units, runs one unit on a worker (``job(unit) ->
(array, extra)``, picklable for worker processes) and turns the executor's deliveries into the parts of
batches; the stream's one delivery loop (``image_stream``) assembles and hands out the batches.
``sample_job.SampleJob`` makes one sample per unit, ``batch_job.BatchJob`` a whole batch of array records;
a new job is a new module implementing :class:`Job`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..engine.executor import Delivery
from ..engine.threads import usable_cores
from .config import StreamConfig
from .position import Keys


def default_workers() -> int:
    """The workers a stream runs unless told: one per core but one, which the consumer (the training loop,
    which assembles the batches too) keeps; one on a single core."""
    return max(1, usable_cores() - 1)


def capacity(config: StreamConfig) -> tuple[int, int]:
    """``(workers, preload)``: the workers a stream runs (``workers``, else :func:`default_workers`; 'auto' is
    resolved before a job is made, so it counts as the default here) and the samples it makes ahead (``preload``,
    else 16 per worker and at least a batch)."""
    workers = config.parallelism.workers
    workers = workers if isinstance(workers, int) else default_workers()
    return workers, config.parallelism.preload or max(16 * workers, config.order.batch)


@dataclass(frozen=True)
class Pool:
    """The stream's samples: the record and the reader (``source``: 0 the database, 1 the mixin) of each pool
    position, its label, and each source's prefetch (or None)."""

    records: np.ndarray
    sources: np.ndarray
    labels: np.ndarray
    fetchers: list[Callable | None]


class Part(NamedTuple):
    """One batch's samples as a job delivers them, before the stream assembles the batch."""

    images: Any
    """``(n, ...)`` (a view into shared memory when ``shared``; a torch tensor from the device stage), or a list of
    the samples' images."""
    targets: tuple
    """Each sample's task target (None for classification)."""
    dense: tuple
    """Each sample's dense targets (a tuple of arrays)."""
    positions: list[int] | np.ndarray
    """Each sample's pool position."""
    padding: int
    """Samples of the part that pad a finite pass."""
    taken: int
    """Keys the part consumed, skipped ones included."""
    shared: bool = False
    """Whether ``images`` is a view into memory the executor reuses."""
    made: tuple | None = None
    """The task's batch arrays when the job made them (the device stage's masks), else None."""
    damaged: tuple[str, ...] = ()
    """Each sample of the part whose image libjpeg warned about (``Processor.damage``): what it said."""


class Job(Protocol):
    """One kind of work: its units, their work, and the parts of batches from the deliveries."""

    group: int
    """Units per delivery."""
    window: int
    """Units in flight."""
    chunk: int
    """Units per hand-off to a worker thread."""

    def __call__(self, unit: Any) -> tuple[Any, Any]:
        """A unit's work: its array (the device stage's plan, for a DeviceJob) and what goes with it."""

    def build(self) -> Job:
        """The job in a worker process (it arrives pickled)."""

    def units(self, keys: Keys, pool: Pool) -> Iterator[Any]: ...

    def layout(self) -> tuple[tuple[int, ...], np.dtype] | None:
        """The shape and dtype of one unit's array, when known before the first (an executor's shared memory)."""

    def failed(self, unit: Any, exc: BaseException) -> int | None:
        """The key index to count as skipped for a unit that raised ``exc``; None: raise it."""

    def collect(self, deliveries: Iterator[Delivery], real: int | None,
                skip: Callable[[BaseException, int], None]) -> Iterator[Part]:
        """The parts of batches from the deliveries; ``skip(exc, index)`` counts a sample that failed."""
