"""DataFlows that reshape another flow: batching, mapping, repeating, mixing, shuffling, caching."""
from __future__ import annotations

import itertools
import math
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from copy import copy
from typing import Any

import numpy as np

from ...errors import PicPacTypeError, PicPacValueError
from .base import DataFlow, DataFlowError, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow, make_rng

__all__ = ["TestDataSpeed", "PrintData", "BatchData", "BatchDataByShape", "FixedSizeData", "MapData",
           "MapDataComponent", "RepeatedData", "RepeatedDataPoint", "RandomChooseData", "RandomMixData",
           "JoinData", "ConcatData", "SelectComponent", "LocallyShuffleData", "CacheData"]


def _positive(value: Any, name: str) -> int:
    if int(value) != value or int(value) < 1:
        raise PicPacValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class TestDataSpeed(ProxyDataFlow):
    """Measure the speed of a DataFlow: ``start()`` takes ``size`` datapoints (after ``warmup`` ones) under
    a progress bar; iterating it runs the test first, then yields ``ds`` normally."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, ds: DataFlow, size: int = 5000, warmup: int = 0):
        super().__init__(ds)
        self.test_size = int(size)
        self.warmup = int(warmup)
        self._reset_called = False

    def reset_state(self) -> None:
        self._reset_called = True
        super().reset_state()

    def __iter__(self) -> Iterator:
        self.start()
        yield from self.ds

    def start(self) -> float:
        """Run the test; returns the datapoints per second it measured."""
        from tqdm import tqdm
        if not self._reset_called:
            self.reset_state()
        it = iter(self.ds)
        for _ in range(self.warmup):
            next(it)
        count, begin = 0, time.perf_counter()
        with tqdm(total=self.test_size, leave=True, smoothing=0.2) as bar:
            for count, _ in enumerate(itertools.islice(it, self.test_size), 1):
                bar.update()
        return count / max(time.perf_counter() - begin, 1e-9)

    start_test = start


class BatchData(ProxyDataFlow):
    """Stack ``batch_size`` datapoints into one: each component gains a leading batch dimension.

    Datapoints are lists (tuples) or dicts; with ``use_list=False`` every component is a number, a
    str/bytes or an array of one shape, and becomes an array (Python ints as int32, floats as float32,
    bools as bool); with ``use_list=True`` each component becomes a list. ``remainder=True`` also yields
    the last, smaller batch of a pass (``len(ds)`` must then be accurate for ``len()`` to be).
    """

    def __init__(self, ds: DataFlow, batch_size: int, remainder: bool = False, use_list: bool = False):
        super().__init__(ds)
        self.batch_size = _positive(batch_size, "batch_size")
        if not remainder:
            try:
                if self.batch_size > len(ds):
                    raise PicPacValueError(f"batch_size {batch_size} is larger than the DataFlow's {len(ds)} "
                                           "datapoints and remainder=False: no batch would ever come")
            except NotImplementedError:
                pass
        self.remainder = bool(remainder)
        self.use_list = bool(use_list)

    def __len__(self) -> int:
        div, rem = divmod(len(self.ds), self.batch_size)
        return div + int(self.remainder and rem > 0)

    def __iter__(self) -> Iterator:
        holder: list = []
        for dp in self.ds:
            holder.append(dp)
            if len(holder) == self.batch_size:
                yield BatchData.aggregate_batch(holder, self.use_list)
                holder = []
        if self.remainder and holder:
            yield BatchData.aggregate_batch(holder, self.use_list)

    @staticmethod
    def _batch_numpy(data_list: list) -> np.ndarray:
        first = data_list[0]
        if isinstance(first, bool):
            dtype: Any = bool
        elif isinstance(first, int):
            dtype = np.int32 if all(-2**31 <= v < 2**31 for v in data_list if isinstance(v, int)) else np.int64
        elif isinstance(first, float):
            dtype = np.float32
        elif isinstance(first, (str, bytes)):
            dtype = None
        elif hasattr(first, "dtype"):
            dtype = first.dtype
        else:
            raise PicPacTypeError(f"cannot batch a {type(first).__name__} component into an array: use "
                                  "use_list=True, or map it to a number or an array first")
        try:
            return np.asarray(data_list, dtype=dtype)
        except Exception as exc:
            shapes = sorted({np.shape(x) for x in data_list})
            raise PicPacValueError(f"cannot batch these components into one array (shapes {shapes[:6]}"
                                   f"{' ...' if len(shapes) > 6 else ''}): {exc}. Resize them to one shape, "
                                   "use BatchDataByShape, or use_list=True") from None

    @staticmethod
    def aggregate_batch(data_holder: list, use_list: bool = False) -> list | dict:
        """Datapoints (all lists/tuples, or all dicts) as one batched datapoint of the same kind."""
        first = data_holder[0]
        if isinstance(first, (list, tuple)):
            columns = [[x[k] for x in data_holder] for k in range(len(first))]
            return columns if use_list else [BatchData._batch_numpy(c) for c in columns]
        if isinstance(first, dict):
            columns = {key: [x[key] for x in data_holder] for key in first}
            return columns if use_list else {key: BatchData._batch_numpy(c) for key, c in columns.items()}
        raise PicPacTypeError(f"a datapoint must be a list, tuple or dict to be batched, got {type(first).__name__}")


class BatchDataByShape(BatchData):
    """Batch datapoints whose ``dp[idx]`` arrays share a shape: one holder per shape, a batch whenever a
    holder is full. Datapoints of rare shapes may wait long (or never) for their batch."""

    def __init__(self, ds: DataFlow, batch_size: int, idx: int):
        super().__init__(ds, batch_size, remainder=False)
        self.idx = idx
        self._guard = DataFlowReentrantGuard("BatchDataByShape")
        self.holder: dict | None = None

    def reset_state(self) -> None:
        super().reset_state()
        self.holder = defaultdict(list)

    def __iter__(self) -> Iterator:
        self._need_reset(self.holder is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            for dp in self.ds:
                holder = self.holder[np.shape(dp[self.idx])]
                holder.append(dp)
                if len(holder) == self.batch_size:
                    batch = holder[:]
                    del holder[:]  # before the yield: a consumer that stops here leaves the holder consistent
                    yield BatchData.aggregate_batch(batch)


class FixedSizeData(ProxyDataFlow):
    """Exactly ``size`` datapoints a pass, taken from ``ds`` and starting it again when it ends.

    ``keep_state=True`` continues the previous pass's iterator of ``ds`` (ds 1..5, size 3: 1 2 3; 4 5 1;
    2 3 4 ...); ``False`` starts ``ds`` afresh each pass (1 2 3; 1 2 3 ...).
    """

    def __init__(self, ds: DataFlow, size: int, keep_state: bool = True):
        super().__init__(ds)
        self._size = int(size)
        self._keep = bool(keep_state)
        self.itr: Iterator | None = None
        self._guard = DataFlowReentrantGuard("FixedSizeData")
        self._ready = False

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self.itr = None
        self._ready = True

    def __iter__(self) -> Iterator:
        self._need_reset(self._ready)
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            for _ in range(self._size):
                if self.itr is None:
                    self.itr = iter(self.ds)
                dp = next(self.itr, _END)
                if dp is _END:
                    self.itr = iter(self.ds)
                    dp = next(self.itr, _END)
                    if dp is _END:
                        raise DataFlowError("FixedSizeData: its DataFlow produced no datapoint in a whole pass")
                yield dp
            if not self._keep:
                self.itr = None


_END = object()


class MapData(ProxyDataFlow):
    """``func(dp)`` for every datapoint (a shallow copy of it); a ``None`` result drops the datapoint
    (``len()`` then overstates)."""

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any]):
        super().__init__(ds)
        self.func = func

    def __iter__(self) -> Iterator:
        func = self.func
        for dp in self.ds:
            out = func(copy(dp))
            if out is not None:
                yield out


class MapDataComponent(MapData):
    """``func`` on one component, ``dp[index]`` (an int, or a key of dict datapoints); a ``None`` result
    drops the datapoint. The input datapoint is not modified (a shallow copy gets the new component)."""

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], index: int | str = 0):
        self._index = index
        self._func = func
        super().__init__(ds, self._mapper)

    def _mapper(self, dp: Any) -> Any:
        out = self._func(dp[self._index])
        if out is None:
            return None
        dp = list(dp) if isinstance(dp, tuple) else copy(dp)
        dp[self._index] = out
        return dp


class RepeatedData(ProxyDataFlow):
    """``ds`` ``num`` times over (dp1 .. dpn, dp1 .. dpn, ...); ``num=-1`` repeats forever (no ``len()``)."""

    def __init__(self, ds: DataFlow, num: int):
        self.num = int(num)
        if self.num < -1:
            raise PicPacValueError(f"num must be >= 0, or -1 for forever, got {num}")
        super().__init__(ds)

    def __len__(self) -> int:
        if self.num == -1:
            raise _unknown("RepeatedData(num=-1) is infinite")
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator:
        passes = itertools.count() if self.num == -1 else range(self.num)
        for _ in passes:
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty and self.num == -1:
                raise DataFlowError("RepeatedData(num=-1): its DataFlow produced no datapoint in a whole pass, "
                                    "so repeating it would loop forever")


def _unknown(message: str) -> NotImplementedError:
    from .base import UnknownLength
    return UnknownLength(message)


class RepeatedDataPoint(ProxyDataFlow):
    """Each datapoint ``num`` times in a row (dp1, dp1, ..., dp2, dp2, ...)."""

    def __init__(self, ds: DataFlow, num: int):
        self.num = _positive(num, "num")
        super().__init__(ds)

    def __len__(self) -> int:
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator:
        for dp in self.ds:
            for _ in range(self.num):
                yield dp


def _reset_each(flows: list) -> None:
    """reset_state() every flow once, even one that appears several times."""
    seen: set[int] = set()
    for d in flows:
        if id(d) not in seen:
            seen.add(id(d))
            d.reset_state()


class RandomChooseData(RNGDataFlow):
    """Each datapoint from a randomly chosen flow of ``df_lists`` (a list of flows, or of ``(flow,
    probability)`` pairs whose probabilities sum to 1); stops when the chosen flow is exhausted."""

    def __init__(self, df_lists: list, *, seed: int | None = None):
        super().__init__()
        if not df_lists:
            raise PicPacValueError("RandomChooseData needs at least one DataFlow")
        if isinstance(df_lists[0], (tuple, list)):
            total = sum(float(p) for _, p in df_lists)
            if not math.isclose(total, 1.0, rel_tol=1e-6):
                raise PicPacValueError(f"RandomChooseData: the probabilities sum to {total}, not 1")
            self.df_lists = [(d, float(p)) for d, p in df_lists]
        else:
            self.df_lists = [(d, 1.0 / len(df_lists)) for d in df_lists]
        self.seed = seed

    def reset_state(self) -> None:
        super().reset_state()
        _reset_each([d for d, _ in self.df_lists])

    def __iter__(self) -> Iterator:
        self._need_reset(self.rng is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        iters = [iter(d) for d, _ in self.df_lists]
        probs = np.array([p for _, p in self.df_lists])
        probs /= probs.sum()
        while True:
            dp = next(iters[self.rng.choice(len(iters), p=probs)], _END)
            if dp is _END:
                return
            yield dp


class RandomMixData(RNGDataFlow):
    """All datapoints of every flow in ``df_lists``, randomly interleaved by their ``len()`` (each flow's
    own order is kept); a pass ends when all are exhausted. Every flow needs an accurate ``len()``."""

    def __init__(self, df_lists: list, *, seed: int | None = None):
        super().__init__()
        self.df_lists = list(df_lists)
        self.sizes = [len(d) for d in self.df_lists]
        self.seed = seed

    def reset_state(self) -> None:
        super().reset_state()
        _reset_each(self.df_lists)

    def __len__(self) -> int:
        return sum(self.sizes)

    def __iter__(self) -> Iterator:
        self._need_reset(self.rng is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        which = np.repeat(np.arange(len(self.sizes)), self.sizes)
        self.rng.shuffle(which)
        iters = [iter(d) for d in self.df_lists]
        for k in which:
            dp = next(iters[k], _END)
            if dp is _END:
                raise DataFlowError(f"RandomMixData: DataFlow {k} ({type(self.df_lists[k]).__name__}) produced fewer "
                                    f"datapoints than its len() of {self.sizes[k]}")
            yield dp


class ConcatData(DataFlow):
    """The flows of ``df_lists`` one after the other."""

    def __init__(self, df_lists: list):
        self.df_lists = list(df_lists)

    def reset_state(self) -> None:
        _reset_each(self.df_lists)

    def __len__(self) -> int:
        return sum(len(d) for d in self.df_lists)

    def __iter__(self) -> Iterator:
        for d in self.df_lists:
            yield from d


class JoinData(DataFlow):
    """The components of one datapoint of each flow, joined: ``[c1, c2] + [c3] -> [c1, c2, c3]``, or dicts
    merged; stops when any flow is exhausted. The same flow may appear twice (it is then iterated twice)."""

    def __init__(self, df_lists: list):
        self.df_lists = list(df_lists)

    def reset_state(self) -> None:
        _reset_each(self.df_lists)

    def __len__(self) -> int:
        return min(len(d) for d in self.df_lists)

    def __iter__(self) -> Iterator:
        iters = [iter(d) for d in self.df_lists]
        while True:
            dps = [next(it, _END) for it in iters]
            if any(dp is _END for dp in dps):
                return
            if isinstance(dps[0], Mapping):
                out: Any = {}
                for dp in dps:
                    out.update(dp)
            else:
                out = list(itertools.chain.from_iterable(dps))
            yield out


def SelectComponent(ds: DataFlow, idxs: list) -> MapData:  # noqa: N802 - tensorpack's name
    """Select and reorder components: ``[c1, c2, c3]`` with ``idxs=[2, 1]`` gives ``[c3, c2]``."""
    idxs = list(idxs)
    return MapData(ds, lambda dp: [dp[i] for i in idxs])


class LocallyShuffleData(ProxyDataFlow, RNGDataFlow):
    """Shuffle within a buffer: for a source too big or slow to shuffle whole.

    Datapoints of ``ds`` (repeated forever) enter a FIFO buffer of ``buffer_size``, each ``num_reuse``
    times; once it is full, each one entering pushes the oldest out to the consumer. The buffer is
    shuffled after every ``shuffle_interval`` datapoints from ``ds`` (default ``buffer_size // 3``).
    Passes of ``ds`` mix, so iteration never ends (``len()`` is ``len(ds) * num_reuse``, a guide).
    Not reentrant.
    """

    def __init__(self, ds: DataFlow, buffer_size: int, num_reuse: int = 1, shuffle_interval: int | None = None,
                 nr_reuse: int | None = None, *, seed: int | None = None):
        ProxyDataFlow.__init__(self, ds)
        self.buffer_size = _positive(buffer_size, "buffer_size")
        self.num_reuse = _positive(nr_reuse if nr_reuse is not None else num_reuse, "num_reuse")
        self.shuffle_interval = max(1, int(buffer_size // 3 if shuffle_interval is None else shuffle_interval))
        self.seed = seed
        self.q: deque = deque(maxlen=self.buffer_size)
        self._guard = DataFlowReentrantGuard("LocallyShuffleData")
        self._inf_iter: Iterator | None = None

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self.q = deque(maxlen=self.buffer_size)
        self._iter_cnt = 0
        self._inf_iter = iter(RepeatedData(self.ds, -1))

    def __len__(self) -> int:
        return len(self.ds) * self.num_reuse

    def __iter__(self) -> Iterator:
        self._need_reset(self._inf_iter is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            for dp in self._inf_iter:
                self._iter_cnt = (self._iter_cnt + 1) % self.shuffle_interval
                if self._iter_cnt == 0 and len(self.q) > 1:
                    items = list(self.q)
                    self.q = deque((items[i] for i in self.rng.permutation(len(items))), maxlen=self.buffer_size)
                for _ in range(self.num_reuse):
                    if len(self.q) == self.buffer_size:
                        yield self.q.popleft()
                    self.q.append(dp)


class CacheData(ProxyDataFlow):
    """Cache the first complete pass of ``ds`` in memory and yield from the cache afterwards
    (``shuffle=True``: in a new random order each pass). A pass left early caches nothing, so the cache
    is never incomplete."""

    def __init__(self, ds: DataFlow, shuffle: bool = False, *, seed: int | None = None):
        self.shuffle = bool(shuffle)
        self.seed = seed
        super().__init__(ds)
        self.buffer: list | None = None
        self._complete = False
        self._guard = DataFlowReentrantGuard("CacheData")

    def reset_state(self) -> None:
        super().reset_state()
        self.rng = make_rng(self.seed) if self.shuffle else None
        self.buffer = []
        self._complete = False

    def __len__(self) -> int:
        return len(self.buffer) if self.buffer is not None and self._complete else len(self.ds)

    def __iter__(self) -> Iterator:
        self._need_reset(self.buffer is not None)
        return self._iterate()

    def _iterate(self) -> Iterator:
        with self._guard:
            if self._complete:
                if self.shuffle:
                    order = self.rng.permutation(len(self.buffer))
                    yield from (self.buffer[i] for i in order)
                else:
                    yield from self.buffer
                return
            filling: list = []
            for dp in self.ds:
                filling.append(dp)
                yield dp
            self.buffer, self._complete = filling, True


class PrintData(ProxyDataFlow):
    """Pass datapoints through, printing the type, shape and range of each component of the first ``num``
    ones (to stdout; ``name`` labels them). A debugging aid."""

    def __init__(self, ds: DataFlow, num: int = 1, name: str | None = None, max_depth: int = 3, max_list: int = 3):
        super().__init__(ds)
        self.num, self.name, self.max_depth, self.max_list = int(num), name, int(max_depth), int(max_list)
        self.cnt = 0

    def reset_state(self) -> None:
        super().reset_state()
        self.cnt = 0

    def _describe(self, value: Any, key: Any, depth: int) -> list[str]:
        pad = "  " * depth
        kind = type(value).__name__
        if isinstance(value, np.ndarray):
            line = f"{pad}{key}: ndarray:{value.dtype} of shape {value.shape}"
            if value.size and value.dtype.kind in "biuf":
                line += f" in range [{value.min()}, {value.max()}]"
            return [line]
        if isinstance(value, (bool, int, float, np.generic)):
            return [f"{pad}{key}: {kind} with value {value}"]
        if isinstance(value, (str, bytes)):
            return [f"{pad}{key}: {kind} of len {len(value)}"]
        if isinstance(value, (list, tuple)):
            lines = [f"{pad}{key}: {kind} of len {len(value)}"]
            if depth < self.max_depth:
                for k, sub in enumerate(value[:self.max_list]):
                    lines += self._describe(sub, k, depth + 1)
                if len(value) > self.max_list:
                    lines.append(f"{pad}  ...")
            elif value:
                lines.append(f"{pad}   ...")
            return lines
        return [f"{pad}{key}: {kind}"]

    def _message(self, dp: Any) -> str:
        items = dp.items() if isinstance(dp, Mapping) else enumerate(dp)
        lines = [f"datapoint {self.cnt}/{self.num} with {len(dp)} components consists of"]
        for key, value in items:
            lines += self._describe(value, key, 1)
        return "\n".join(lines)

    def __iter__(self) -> Iterator:
        for dp in self.ds:
            if self.cnt == 0:
                print(f"Contents of DataFlow{f' ({self.name})' if self.name is not None else ''}:", file=sys.stdout)
            if self.cnt < self.num:
                print(self._message(dp), file=sys.stdout)
                self.cnt += 1
            yield dp
