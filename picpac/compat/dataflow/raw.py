"""DataFlows that produce data from Python objects: lists, generators, iterables, queues, fakes."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ...errors import PicPacValueError
from .base import DataFlow, RNGDataFlow

__all__ = ["FakeData", "DataFromQueue", "DataFromList", "DataFromGenerator", "DataFromIterable"]


class FakeData(RNGDataFlow):
    """``size`` datapoints of random arrays of the given ``shapes`` (one per component).

    ``dtype`` is one type or one per component, ``domain`` one ``(low, high)`` or one per component.
    ``random=False`` draws one datapoint and yields (shallow copies of) it ``size`` times.
    """

    def __init__(self, shapes: list, size: int = 1000, random: bool = True, dtype: Any = "float32",
                 domain: Any = (0, 1), *, seed: int | None = None):
        super().__init__()
        self.shapes = [tuple(s) for s in shapes]
        self._size = int(size)
        self.random = bool(random)
        self.dtype = [dtype] * len(self.shapes) if isinstance(dtype, (str, type, np.dtype)) else list(dtype)
        self.domain = [domain] * len(self.shapes) if isinstance(domain, tuple) else list(domain)
        if len(self.dtype) != len(self.shapes) or len(self.domain) != len(self.shapes):
            raise PicPacValueError(f"FakeData: {len(self.shapes)} shapes but {len(self.dtype)} dtypes and "
                                   f"{len(self.domain)} domains")
        self.seed = seed

    def __len__(self) -> int:
        return self._size

    def _draw(self) -> list:
        out = []
        for shape, dtype, (low, high) in zip(self.shapes, self.dtype, self.domain):
            out.append((self.rng.rand(*shape) * (high - low) + low).astype(dtype))
        return out

    def __iter__(self) -> Iterator:
        self._need_reset(self.rng is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        if self.random:
            for _ in range(self._size):
                yield self._draw()
        else:
            value = self._draw()
            for _ in range(self._size):
                yield copy.copy(value)


class DataFromQueue(DataFlow):
    """Datapoints from a queue (anything with a blocking ``get()``), forever."""

    def __init__(self, queue: Any):
        self.queue = queue

    def __iter__(self) -> Iterator:
        while True:
            yield self.queue.get()


class DataFromList(RNGDataFlow):
    """The items of ``lst`` as datapoints; ``shuffle=True`` in a new random order each pass."""

    def __init__(self, lst: list, shuffle: bool = True, *, seed: int | None = None):
        super().__init__()
        self.lst = lst
        self.shuffle = bool(shuffle)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.lst)

    def __iter__(self) -> Iterator:
        if not self.shuffle:
            return iter(self.lst)
        self._need_reset(self.rng is not None)
        return (self.lst[k] for k in self.rng.permutation(len(self.lst)))


class DataFromGenerator(DataFlow):
    """Datapoints from ``gen``: an iterable, or a callable returning one (called again each pass, so
    it can be iterated more than once). ``size`` gives ``len()``."""

    def __init__(self, gen: Iterable | Callable[[], Iterable], size: int | None = None):
        self._gen = gen
        self._size = size

    def __len__(self) -> int:
        if self._size is not None:
            return int(self._size)
        return super().__len__()

    def __iter__(self) -> Iterator:
        return iter(self._gen() if callable(self._gen) else self._gen)


class DataFromIterable(DataFlow):
    """Datapoints from an iterable; ``len()`` is its ``len()`` when it has one."""

    def __init__(self, iterable: Iterable):
        self._itr = iterable
        try:
            self._len: int | None = len(iterable)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError):
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            return super().__len__()
        return self._len

    def __iter__(self) -> Iterator:
        return iter(self._itr)
