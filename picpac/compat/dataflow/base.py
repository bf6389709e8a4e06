"""The DataFlow protocol: ``__iter__``, ``__len__``, ``reset_state``, and what guards it.

A DataFlow is an iterable of datapoints (lists, or dicts, of components). ``reset_state()`` is called
once, by the process that iterates, before the first ``__iter__``; it is where random generators are
seeded and where threads and worker processes start. Flows that need it raise :class:`DataFlowError`
(not an ``AttributeError``) when iterated before it, flows that own worker processes refuse a second
call, and non-reentrant ones refuse a second ``__iter__`` while one runs. ``close()`` (or leaving a
``with`` block) stops what a flow started, and closes the flows it wraps.

Randomness is explicit: an :class:`RNGDataFlow` draws from ``np.random.RandomState`` seeded by its
``seed`` (``None``: fresh entropy from the OS) and by the *worker path*, the indices of the runner
workers it runs in (``()`` in the main process; runners set it in each worker), so two workers never
share a random stream and a given seed reproduces the same streams.
"""
from __future__ import annotations

import importlib
import random
import threading
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...errors import PicPacError

__all__ = ["DataFlow", "ProxyDataFlow", "RNGDataFlow", "DataFlowTerminated", "DataFlowError",
           "DataFlowReentrantGuard", "MissingDependencyError", "worker_path", "make_rng"]


class DataFlowTerminated(BaseException):
    """A DataFlow cannot produce data any more: it was closed (from another thread) while being iterated.

    Like tensorpack's, it derives from ``BaseException``, so ``except Exception`` does not swallow it.
    """


class DataFlowError(PicPacError, RuntimeError):
    """A DataFlow used against its protocol: iterated before ``reset_state()``, reset twice although it
    owns workers, re-entered, used after ``close()``, or stopped by an earlier failure."""


class UnknownLength(NotImplementedError, TypeError):
    """``len()`` of a DataFlow whose size is not known.

    A ``NotImplementedError`` as tensorpack's contract says, and a ``TypeError`` so that ``list(df)``
    and ``operator.length_hint`` treat it as "no length" instead of failing.
    """


class MissingDependencyError(PicPacError, ImportError):
    """An optional package a DataFlow needs (lmdb, h5py, pyzmq) is not installed."""


def optional_import(module: str, what: str, package: str | None = None, extra: str = "formats") -> Any:
    """``import module``, or a :class:`MissingDependencyError` naming ``extra``, the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{what} needs the {package or module!r} package: pip install 'picpac[{extra}]' "
            f"(or pip install {package or module})") from None


class DataFlowReentrantGuard:
    """Enforces non-reentrancy: ``with guard:`` inside ``__iter__`` refuses a second, overlapping iteration.

    Pickles as a fresh guard, so a flow holding one can be sent to a spawned worker.
    """

    def __init__(self, name: str = "This DataFlow"):
        self._name = name
        self._lock = threading.Lock()

    def __enter__(self) -> DataFlowReentrantGuard:
        if not self._lock.acquire(False):
            raise DataFlowError(
                f"{self._name} is not reentrant: __iter__ was called while an earlier iteration of it is still "
                "running. Exhaust or close() the first iterator, or use two DataFlow instances")
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._lock.release()
        return False

    def __reduce__(self):
        return DataFlowReentrantGuard, (self._name,)


class DataFlowMeta(ABCMeta):
    """Old-style DataFlows (``get_data()`` and ``size()``) get ``__iter__`` and ``__len__`` from them."""

    def __new__(mcls, name, bases, namespace, **kwargs):
        if "__iter__" not in namespace and "get_data" in namespace:
            namespace["__iter__"] = namespace["get_data"]
        if "__len__" not in namespace and "size" in namespace:
            namespace["__len__"] = namespace["size"]
        return super().__new__(mcls, name, bases, namespace, **kwargs)


class DataFlow(metaclass=DataFlowMeta):
    """Base class of every DataFlow."""

    @abstractmethod
    def __iter__(self) -> Iterator:
        """Yield datapoints: lists (or dicts) of components. A finite flow can be iterated again once a
        pass ended; many flows are not reentrant and say so with :class:`DataFlowError`."""

    def __len__(self) -> int:
        """The number of datapoints one pass yields, when known (it may be a rough guide: see the docs);
        raises ``NotImplementedError`` (:class:`UnknownLength`) otherwise."""
        raise UnknownLength(f"{type(self).__name__} has no known length")

    def get_data(self) -> Iterator:
        return self.__iter__()

    def size(self) -> int:
        return self.__len__()

    def reset_state(self) -> None:
        """Prepare to produce data: called once, by the process that iterates, before ``__iter__``."""

    def close(self) -> None:
        """Stop the threads and processes this flow and the flows it wraps started (idempotent)."""
        for child in _children(self):
            close = getattr(child, "close", None)
            if callable(close):
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers for the flows here ------------------------------------------------------------------
    def _need_reset(self, ready: bool) -> None:
        if not ready:
            raise DataFlowError(f"{type(self).__name__}: call reset_state() once before iterating it "
                                "(the DataFlow protocol: reset_state() seeds its RNG and starts its workers)")


def _children(df: Any) -> list:
    """The flows ``df`` wraps (``ds``, ``df_lists``), each once."""
    found = []
    ds = getattr(df, "ds", None)
    if ds is not None:
        found.append(ds)
    for entry in getattr(df, "df_lists", None) or ():
        found.append(entry[0] if isinstance(entry, tuple) else entry)
    seen: set[int] = set()
    return [c for c in found if not (id(c) in seen or seen.add(id(c)))]


class ProxyDataFlow(DataFlow):
    """A DataFlow that wraps another, ``self.ds``; every method goes to it unless overridden."""

    def __init__(self, ds: DataFlow):
        self.ds = ds

    def reset_state(self) -> None:
        self.ds.reset_state()

    def __len__(self) -> int:
        return self.ds.__len__()

    def __iter__(self) -> Iterator:
        return self.ds.__iter__()


# -- explicit randomness ---------------------------------------------------------------------------------
_local = threading.local()
_PROCESS_PATH: tuple[int, ...] = ()  # this process's place among the runners' workers


def worker_path() -> tuple[int, ...]:
    """The indices of the runner workers (processes, then threads) the caller runs in; () in the main process."""
    return getattr(_local, "path", _PROCESS_PATH)


@contextmanager
def worker_scope(index: int) -> Iterator[None]:
    """In this thread, ``worker_path()`` gains ``index`` while the block runs (a thread runner's reset_state)."""
    old = worker_path()
    _local.path = old + (int(index),)
    try:
        yield
    finally:
        _local.path = old


def enter_worker_process(path: tuple[int, ...], entropy: int) -> None:
    """In a runner's worker process: record its path and give the global ``random`` and ``np.random`` a
    stream of their own (code that uses them would otherwise repeat its siblings' numbers after fork)."""
    global _PROCESS_PATH
    _PROCESS_PATH = tuple(path)
    if hasattr(_local, "path"):
        del _local.path
    seq = np.random.SeedSequence(entropy, spawn_key=_PROCESS_PATH)
    state = seq.generate_state(4)
    random.seed(int.from_bytes(state.tobytes(), "little"))
    np.random.seed(seq.generate_state(1)[0])


def make_rng(seed: int | None) -> np.random.RandomState:
    """A ``RandomState`` for ``seed`` at this worker path: fresh OS entropy when ``seed`` is None."""
    seq = np.random.SeedSequence(seed, spawn_key=worker_path())
    return np.random.RandomState(np.random.MT19937(seq))


def new_entropy() -> int:
    """128 bits from the OS, to seed what a flow starts."""
    return int(np.random.SeedSequence().entropy)


class RNGDataFlow(DataFlow):
    """A DataFlow with a random generator, ``self.rng``, made by :meth:`reset_state`.

    ``self.rng`` is a ``np.random.RandomState`` (tensorpack's type, so ``rng.shuffle``, ``rng.rand`` and
    ``rng.randint`` work) seeded from ``self.seed`` and the worker path: set ``seed`` (the flows here take
    a ``seed=`` keyword) for reproducible streams; ``None`` draws fresh entropy at each reset.
    """

    rng: np.random.RandomState | None = None
    seed: int | None = None

    def reset_state(self) -> None:
        self.rng = make_rng(self.seed)
