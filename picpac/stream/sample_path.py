"""The per-sample path: one sample from its record (read, decode, transform, output), on either backend."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..file.reader import Reader
from ..image.transforms import Sample
from .position import Keys
from .processor import LazyRng, Processor, decode_seconds


class Profile:
    """Seconds per stage (profile=True): read, decode, transform summed over the workers, batch and
    wait on the consumer, and each worker thread's busy time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stages = dict.fromkeys(("read", "decode", "transform", "batch", "wait"), 0.0)
        self.workers: dict[str, float] = {}
        self.processed = 0

    def sample(self, read: float, decode: float, total: float) -> None:
        name = threading.current_thread().name
        with self.lock:
            self.stages["read"] += read
            self.stages["decode"] += decode
            self.stages["transform"] += total - read - decode
            self.workers[name] = self.workers.get(name, 0.0) + total
            self.processed += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"stages": dict(self.stages), "workers": dict(self.workers), "processed": self.processed}


class SampleLoader:
    """One sample from its record: the per-sample work of both backends.

    Picklable (its readers reopen by path), so a worker process builds its own from the same state.
    """

    def __init__(self, readers: list[Reader], config: dict[str, Any]):
        self.readers, self.config = readers, config
        self.processor = Processor(config)
        self.cache: dict[tuple[int, int], Sample] | None = {} if config["cache"] else None
        self.profile = Profile() if config["profile"] else None

    def __call__(self, epoch: int, source: int, record: int, label: float) -> tuple[np.ndarray, Any, tuple]:
        start = time.perf_counter()
        rng = LazyRng(self.config["seed"], epoch, source, record)
        cached = None if self.cache is None else self.cache.get((source, record))
        read = 0.0
        if cached is None:
            reader = self.readers[source]
            fields = reader[record].fields
            read = time.perf_counter() - start
            sample = self.processor.decode(fields, label, record, reader.path, reader.arrays)
            sample = self.processor.settle(sample, rng)
            if self.cache is not None:
                self.cache[source, record] = sample.copy()
        else:
            sample = cached.copy()
        out = self.processor.output(self.processor.augment(sample, rng))
        if self.profile is not None:
            self.profile.sample(read, decode_seconds(), time.perf_counter() - start)
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"readers": self.readers, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["readers"], state["config"])


class SampleProcessWork:
    """A worker process's work: ``work(task) -> (image, (target, dense))``; ``build`` is its recipe
    (the object arrives pickled, its loader rebuilt, so the recipe has nothing left to do)."""

    def __init__(self, loader: SampleLoader):
        self.loader = loader

    def build(self) -> SampleProcessWork:
        return self

    def __call__(self, task: tuple) -> tuple[np.ndarray, tuple]:
        _, _, epoch, source, record, label = task
        image, target, dense = self.loader(epoch, source, record, label)
        return image, (target, dense)


def prefetching(keys: Keys, fetchers: list[Callable | None], sources: np.ndarray, records: np.ndarray,
                ahead: int) -> Iterable[tuple[int, int]]:
    """``keys`` one at a time; each source's fetcher (a reader's ``prefetch``, or None) is given the records
    of the next ``ahead`` keys while the current ones are read. Just ``keys`` when there is none."""
    return keys if not any(fetchers) else _prefetching(keys, fetchers, sources, records, ahead)


def _prefetching(keys: Keys, fetchers: list[Callable | None], sources: np.ndarray, records: np.ndarray,
                 ahead: int) -> Iterator[tuple[int, int]]:
    def ask(positions: np.ndarray) -> None:
        for source, fetch in enumerate(fetchers):
            if fetch is not None:
                fetch(records[positions[sources[positions] == source]])

    chunks = keys.chunks(ahead)
    coming = next(chunks, None)
    if coming is not None:
        ask(coming[0])
    while coming is not None:
        current, coming = coming, next(chunks, None)
        if coming is not None:
            ask(coming[0])
        yield from zip(current[0].tolist(), current[1].tolist())
