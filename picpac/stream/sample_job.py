"""The per-sample job: one sample from its record (read, decode, transform, output), on any executor."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..engine.executor import Delivery
from ..errors import PicPacError
from ..file.reader import IndexedReader
from ..image.transforms import Sample
from .config import StreamConfig
from .job import Part, Pool, capacity
from .position import Keys
from .processor import LazyRng, Processor, decode_seconds


class Profile:
    """Seconds per stage (profile=True): read, decode, transform summed over the workers, batch and
    wait on the consumer, and each worker thread's busy time and CPU time (``time.thread_time``) in samples: a
    thread busy for longer than it ran waited, for the GIL or for a core."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stages = dict.fromkeys(("read", "decode", "transform", "batch", "wait"), 0.0)
        self.workers: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.processed = 0

    def sample(self, read: float, decode: float, total: float, cpu: float) -> None:
        name = threading.current_thread().name
        with self.lock:
            self.stages["read"] += read
            self.stages["decode"] += decode
            self.stages["transform"] += total - read - decode
            self.workers[name] = self.workers.get(name, 0.0) + total
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu
            self.processed += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"stages": dict(self.stages), "workers": dict(self.workers), "cpu": dict(self.cpu),
                    "processed": self.processed}


class SampleJob:
    """The per-sample job: one unit is one key, ``(index, position, epoch, source, record, label)``, made into
    ``(image, (target, dense targets, damage))`` by the config's Processor; ``group`` units form a batch.

    Picklable (its readers reopen by path), so a worker process rebuilds it from the same state.
    """

    def __init__(self, readers: list[IndexedReader], config: StreamConfig, processor: Processor | None = None,
                 profile: Profile | None = None):
        self.readers, self.config = readers, config
        self.processor = processor or Processor.of(config)
        self.seed = config.order.seed
        self.group, self.skip_errors = config.order.batch, config.parallelism.skip_errors
        workers, self.window = capacity(config)
        # samples per hand-off to a worker: fewer hand-offs, while every thread still has work queued
        self.chunk = max(1, min(8, self.window // (4 * workers)))
        self.cache: dict[tuple[int, int], Sample] | None = {} if config.parallelism.cache else None
        self.profile = profile

    def __call__(self, unit: tuple) -> tuple[np.ndarray, tuple]:
        _, _, epoch, source, record, label = unit
        start, cpu = time.perf_counter(), time.thread_time()
        rng = LazyRng(self.seed, epoch, source, record)
        settled, _, read = self._settled(source, record, label, rng, start)
        p = self.processor
        sample = p.augment(settled, rng)
        image, target, dense = p.output(sample)
        if self.profile is not None:
            self.profile.sample(read, decode_seconds(), time.perf_counter() - start, time.thread_time() - cpu)
        return image, (target, dense, p.damage(sample))

    def _settled(self, source: int, record: int, label: float, rng: Any, start: float
                 ) -> tuple[Sample, dict[str, Any], float]:
        """``(settled, fields, read)``: the record's sample decoded and settled (its deterministic part, which
        cache=True keeps and hands out copies of), its fields ({} from the cache), and the seconds since ``start``
        that reading them took."""
        key = (source, record)
        cached = None if self.cache is None else self.cache.get(key)
        if cached is not None:
            return cached.copy(), {}, 0.0
        reader = self.readers[source]
        fields = reader[record].fields
        read = time.perf_counter() - start
        settled = self.processor.settle(self.processor.decode(fields, label, record, reader.path, reader.arrays), rng)
        if self.cache is not None:
            self.cache[key] = settled.copy()
        return settled, fields, read

    def build(self) -> SampleJob:
        """A worker process's job: itself, as it arrived pickled (``processes.pack_recipe``)."""
        return self

    def layout(self) -> None:
        """The output's shape is not known before the first sample."""

    def failed(self, unit: tuple, exc: BaseException) -> int | None:
        """The key index to count as skipped for a unit that raised ``exc``, or None when it must raise."""
        return unit[0] if self.skip_errors and isinstance(exc, PicPacError) else None

    def units(self, keys: Keys, pool: Pool) -> Iterator[tuple]:
        """The units of ``keys``, each source's records fetched ``window`` keys before they are read."""
        index = 0
        for positions, epochs in prefetched(keys, pool.fetchers, pool.sources, pool.records, self.window):
            # a chunk's columns as Python numbers at once, not three NumPy scalars per sample
            yield from zip(range(index, index + len(positions)), positions.tolist(), epochs.tolist(),
                           pool.sources[positions].tolist(), pool.records[positions].tolist(),
                           pool.labels[positions].tolist())
            index += len(positions)

    def collect(self, deliveries: Iterator[Delivery], real: int | None, skip: Callable) -> Iterator[Part]:
        """Each delivery of ``group`` samples as one batch's part."""
        for delivery in deliveries:
            items = delivery.items
            targets, dense, damage = zip(*delivery.extras)
            padding = sum(real is not None and unit[0] >= real for unit in items)
            shared = isinstance(delivery.arrays, np.ndarray)  # a view into the executor's shared memory
            yield Part(delivery.arrays if shared else self.images(delivery), targets, dense,
                       [unit[1] for unit in items], padding, delivery.taken, shared,
                       damaged=tuple(why for why in damage if why is not None))

    def images(self, delivery: Delivery) -> np.ndarray | list[np.ndarray]:
        """A thread executor's delivery's images, as the stream gets them: the list of each sample's image."""
        return delivery.arrays

    def __getstate__(self) -> dict[str, Any]:
        return {"readers": self.readers, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["readers"], state["config"])


def prefetched(keys: Keys, fetchers: list[Callable | None], sources: np.ndarray, records: np.ndarray,
               ahead: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``keys`` as (positions, epochs) chunks of ``ahead``; each source's fetcher (a reader's ``prefetch``, or None)
    is given the records of the next chunk while the current one is read."""
    def ask(positions: np.ndarray) -> None:
        for source, fetch in enumerate(fetchers):
            if fetch is not None:
                fetch(records[positions[sources[positions] == source]])

    chunks = keys.chunks(ahead)
    if not any(fetchers):
        yield from chunks
        return
    coming = next(chunks, None)
    if coming is not None:
        ask(coming[0])
    while coming is not None:
        current, coming = coming, next(chunks, None)
        if coming is not None:
            ask(coming[0])
        yield current
