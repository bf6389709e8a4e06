"""batchup-compatible data sources: mini-batches from arrays, array-likes, callables and iterators.

Batch iterators with batchup's API (``picpac.data_source`` is a drop-in for
``batchup.data_source``; see docs/data_source.md):

* :class:`ArrayDataSource` draws mini-batches from a list of NumPy arrays or *array-likes*
  (anything with ``__len__`` and a ``__getitem__`` that takes an int or a 1-D integer index array,
  e.g. a class that loads images from disk on the fly, or :class:`ReaderArray` over a picpac file).
  It only ever hands an array-like index *arrays* while iterating (never slices).
* the order comes from a sampler (``batch_samplers``, offered by ``picpac.sampling`` as batchup's):
  ``shuffle=None``/``False`` in order, ``shuffle=rng`` a ``np.random.RandomState``:
  ``rng.permutation(n)`` per pass, drawn lazily, exactly as batchup does, so existing experiments give
  the same batches; ``shuffle=True`` draws from NumPy's *global* RNG (``np.random``), because batchup
  documents it so: the one place where picpac reads global RNG state.
* ``repeats=k`` walks the data k times (``-1``: endlessly), batches running on across passes;
  only the very last batch may be short.
* :class:`CompositeDataSource` (several sources side by side), :class:`ChoiceDataSource` (each
  batch from one of several sources), :class:`MapDataSource` (``ds.map(fn)``),
  :class:`CallableDataSource`, :class:`IteratorDataSource`, ``batch_map_concat`` and
  ``batch_map_mean``.

Nothing here decodes images; the worker pools that prepare batches in parallel are in
``picpac.work_pool`` (``work_pool`` here).
"""
from __future__ import annotations

import numbers
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import PicPacTypeError, PicPacValueError
from ...file.reader import Reader
from ...sampling.common import check_int
from .batch_samplers import StandardSampler, SubsetSampler, check_repeats, num_batches

__all__ = [
    "AbstractDataSource", "ArrayDataSource", "CallableDataSource", "ChoiceBatch", "ChoiceDataSource",
    "CompositeDataSource", "IteratorDataSource", "MapDataSource", "RandomAccessDataSource", "ReaderArray",
    "batch_map", "batch_map_concat", "batch_map_mean", "coerce_data_source", "mean_batch_map",
]

ChoiceBatch = namedtuple("ChoiceBatch", ["sample_indices", "ds_index"])
ChoiceBatch.__doc__ = """An index batch of a :class:`ChoiceDataSource`: ``sample_indices`` into member ``ds_index``."""

_num_batches = num_batches  # batchup's older private name


# -- batch structure -------------------------------------------------------------------------------
def _length_of_batch(batch: Any) -> int:
    """Samples in a mini-batch: ``len`` of its first leaf, descending into tuples (lists are leaves)."""
    while isinstance(batch, tuple):
        batch = batch[0]
    return len(batch)


def _trim_batch(batch: Any, length: int) -> Any:
    """The mini-batch cut to its first ``length`` samples; tuples are trimmed element-wise (the result
    is a tuple), anything else sliced (so a list, a leaf, is cut as a whole). A :class:`ChoiceBatch`
    keeps its ``ds_index``."""
    if isinstance(batch, ChoiceBatch):
        return ChoiceBatch(_trim_batch(batch.sample_indices, length), batch.ds_index)
    if isinstance(batch, tuple):
        return tuple(_trim_batch(b, length) for b in batch)
    return batch[:length]


def _is_array_like(x: Any) -> bool:
    return hasattr(x, "__getitem__") and hasattr(x, "__len__")


def _sample_count(value: Any, name: str) -> Any:
    """``None``, an int >= 0 or ``np.inf``: a number of samples as batchup accepts one."""
    if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, numbers.Real) and value == np.inf:
        return value
    raise PicPacTypeError(f"{name} must be None, an int >= 0 or np.inf, got {value!r}")


def _shuffle_rng(shuffle: Any) -> Any:
    """batchup's ``shuffle`` argument as an RNG: None/False: in order (None); True: NumPy's global RNG
    (``np.random``, batchup's documented meaning); else the RNG itself (a RandomState or Generator)."""
    if shuffle is None or shuffle is False or (isinstance(shuffle, np.bool_) and not shuffle):
        return None
    if shuffle is True or isinstance(shuffle, np.bool_):
        return np.random
    if hasattr(shuffle, "permutation"):
        return shuffle
    raise PicPacTypeError(f"shuffle must be None, False, True or a np.random.RandomState, got "
                          f"{type(shuffle).__name__}")


# -- the data sources ------------------------------------------------------------------------------
class AbstractDataSource:
    """Base of every data source: ``num_samples(**kwargs)`` and ``batch_iterator(batch_size, **kwargs)``.

    ``is_random_access`` says whether ``batch_indices_iterator`` and ``samples_by_indices(_nomapping)``
    exist (what ``work_pool`` needs to build batches in parallel).
    """

    @property
    def is_random_access(self) -> bool:
        return False

    def num_samples(self, **kwargs):
        """Samples one pass yields: an int, ``np.inf`` (endless) or None (unknown)."""
        raise NotImplementedError(f"num_samples is abstract in {type(self).__name__}")

    def batch_iterator(self, batch_size, **kwargs):
        """An iterator of mini-batches (tuples of arrays) of ``batch_size`` samples."""
        raise NotImplementedError(f"batch_iterator is abstract in {type(self).__name__}")

    def map(self, fn):
        """``MapDataSource(self, fn)``: ``fn(*batch)`` applied to every mini-batch."""
        return MapDataSource(self, fn)

    def _n_batches(self, batch_size, n_batches, kwargs) -> Any:
        if n_batches is not None:
            return n_batches
        n = self.num_samples(**kwargs)
        if n == np.inf:
            raise PicPacValueError("the data source yields samples endlessly (repeats=-1 or a weighted sampler): "
                                   "give n_batches")
        return None if n is None else num_batches(n, batch_size)

    def batch_map_concat(self, func, batch_size, progress_iter_func=None, n_batches=None, prepend_args=None,
                         **kwargs):
        """:func:`batch_map_concat` over ``self.batch_iterator(batch_size, **kwargs)``; ``n_batches``
        defaults to one pass (an endless source needs it)."""
        n_batches = self._n_batches(batch_size, n_batches, kwargs)
        return batch_map_concat(func, self.batch_iterator(batch_size, **kwargs), progress_iter_func, n_batches,
                                prepend_args)

    def batch_map_mean(self, func, batch_size, progress_iter_func=None, sum_axis=None, n_batches=None,
                       prepend_args=None, **kwargs):
        """:func:`batch_map_mean` over ``self.batch_iterator(batch_size, **kwargs)``; ``n_batches``
        defaults to one pass (an endless source needs it)."""
        n_batches = self._n_batches(batch_size, n_batches, kwargs)
        return batch_map_mean(func, self.batch_iterator(batch_size, **kwargs), progress_iter_func, sum_axis,
                              n_batches, prepend_args)

    batch_map = batch_map_concat  # batchup's older names
    mean_batch_map = batch_map_mean

    @staticmethod
    def _get_shuffle_rng(shuffle):
        return _shuffle_rng(shuffle)


class RandomAccessDataSource(AbstractDataSource):
    """A source whose samples are reached by index: batches are index batches from ``sampler`` gathered
    by ``samples_by_indices_nomapping`` (which subclasses implement).

    ``indices`` restricts it to a subset (a 1-D integer array), ``repeats`` walks it that many times
    (-1: endlessly); or give a ``sampler`` (``picpac.sampling``: e.g. a class-balancing
    ``WeightedSampler``) and neither of those. ``include_indices=True`` puts the batch's sample
    indices in front of every batch.
    """

    def __init__(self, length, indices=None, repeats=1, sampler=None, include_indices=False):
        length = check_int(length, "length", 0)
        if sampler is not None:
            if repeats != 1:
                raise PicPacValueError(f"repeats must be 1 when a sampler is given (the sampler decides), got {repeats!r}")
            if indices is not None:
                raise PicPacValueError("indices must be None when a sampler is given (use WeightedSubsetSampler "
                                       "for a weighted subset)")
            missing = [m for m in ("num_indices_generated", "map_indices", "in_order_indices_batch_iterator",
                                   "shuffled_indices_batch_iterator") if not hasattr(sampler, m)]
            if missing:
                raise PicPacTypeError(f"sampler must be a picpac.sampling.AbstractSampler, got "
                                      f"{type(sampler).__name__} (no {', '.join(missing)})")
        else:
            repeats = check_repeats(repeats)
            if indices is None:
                sampler = StandardSampler(length, repeats=repeats)
            else:
                sampler = SubsetSampler(indices, repeats=repeats)
                bad = (sampler.indices < -length) | (sampler.indices >= length)
                if bad.any():
                    raise PicPacValueError(f"indices must lie in 0..{length - 1}, got "
                                           f"{sampler.indices[bad][0]} ({int(bad.sum())} out of range)")
        self._length = length
        self.include_indices = bool(include_indices)
        self.sampler = sampler

    @property
    def is_random_access(self) -> bool:
        return True

    def num_samples(self, **kwargs):
        """Samples one pass of ``batch_iterator`` yields: subset size x ``repeats``, or ``np.inf``."""
        return self.sampler.num_indices_generated()

    def samples_by_indices_nomapping(self, indices):
        """The mini-batch of samples ``indices`` (an index array or a slice) of the whole data."""
        raise NotImplementedError(f"samples_by_indices_nomapping is abstract in {type(self).__name__}")

    def samples_by_indices(self, indices):
        """The mini-batch of samples ``indices`` counted within the subset (``indices`` given to the
        constructor), or of the whole data when there is no subset."""
        return self.samples_by_indices_nomapping(self.sampler.map_indices(indices))

    def batch_indices_iterator(self, batch_size, shuffle=None, **kwargs):
        """An iterator of index batches (1-D integer arrays, the subset mapping applied): in order, or
        shuffled by ``shuffle`` (a RandomState; ``True``: NumPy's global RNG)."""
        rng = _shuffle_rng(shuffle)
        if rng is None:
            return self.sampler.in_order_indices_batch_iterator(batch_size)
        return self.sampler.shuffled_indices_batch_iterator(batch_size, rng)

    def batch_iterator(self, batch_size, shuffle=None, **kwargs):
        """An iterator of mini-batches, tuples ``(batch_x, batch_y, ...)`` (the indices first with
        ``include_indices``), in the order of :meth:`batch_indices_iterator`."""
        return self._gather(self.batch_indices_iterator(batch_size, shuffle=shuffle, **kwargs))

    def _gather(self, index_batches: Iterator) -> Iterator:
        for indices in index_batches:
            yield self.samples_by_indices_nomapping(indices)


class ArrayDataSource(RandomAccessDataSource):
    """Mini-batches from a list of arrays or array-likes of one length (``data``), sample ``i`` being
    ``(data[0][i], data[1][i], ...)``.

    An array-like needs ``__len__`` and a ``__getitem__`` that takes an int or a 1-D NumPy integer
    index array (and a slice, if you call ``samples_by_indices`` with one); it may return an array or
    a list. See :class:`RandomAccessDataSource` for ``indices``, ``repeats``, ``sampler`` and
    ``include_indices``.
    """

    def __init__(self, data, indices=None, repeats=1, sampler=None, include_indices=False):
        if not isinstance(data, (list, tuple)):
            raise PicPacTypeError(f"data must be a list of arrays or array-likes, not a {type(data).__name__}")
        if not data:
            raise PicPacValueError("data must hold at least one array")
        for i, d in enumerate(data):
            if not _is_array_like(d):
                raise PicPacTypeError(f"data[{i}] is a {type(d).__name__}, not an array or array-like "
                                      "(__len__ and __getitem__)")
        length = len(data[0])
        for i, d in enumerate(data[1:], 1):
            if len(d) != length:
                raise PicPacValueError(f"the arrays have different lengths: data[0] has {length} samples, "
                                       f"data[{i}] has {len(d)}")
        self.data = list(data)
        super().__init__(length, indices=indices, repeats=repeats, sampler=sampler, include_indices=include_indices)

    def samples_by_indices_nomapping(self, indices):
        batch = tuple(d[indices] for d in self.data)
        if self.include_indices:
            if isinstance(indices, slice):
                indices = np.arange(*indices.indices(self._length))
            return (indices,) + batch
        return batch


class CallableDataSource(AbstractDataSource):
    """A source that asks ``batch_iterator_fn(batch_size, **kwargs)`` for its iterator of batches.

    ``num_samples_fn`` is None (unknown), an int, ``np.inf``, or a callable given the keyword
    arguments of ``num_samples``.
    """

    def __init__(self, batch_iterator_fn, num_samples_fn=None):
        if not callable(batch_iterator_fn):
            raise PicPacTypeError(f"batch_iterator_fn must be callable, got {type(batch_iterator_fn).__name__}")
        if not callable(num_samples_fn):
            _sample_count(num_samples_fn, "num_samples_fn (when not callable)")
        self.batch_iterator_fn = batch_iterator_fn
        self.num_samples_fn = num_samples_fn

    def num_samples(self, **kwargs):
        if callable(self.num_samples_fn):
            return self.num_samples_fn(**kwargs)
        return self.num_samples_fn

    def batch_iterator(self, batch_size, **kwargs):
        return self.batch_iterator_fn(batch_size, **kwargs)


class IteratorDataSource(AbstractDataSource):
    """A source around an iterator of batches made beforehand: ``batch_iterator`` returns it as it is,
    whatever its arguments (``batch_size`` included). ``n_samples``: None, an int or ``np.inf``."""

    def __init__(self, batch_iter, n_samples=None):
        self.batch_iter = batch_iter
        self.n_samples = _sample_count(n_samples, "n_samples")

    def num_samples(self, **kwargs):
        return self.n_samples

    def batch_iterator(self, batch_size, **kwargs):
        return self.batch_iter


def _members(datasets: Any, what: str) -> list:
    datasets = list(datasets)
    for i, ds in enumerate(datasets):
        if not isinstance(ds, AbstractDataSource):
            raise PicPacTypeError(f"{what}: datasets[{i}] is a {type(ds).__name__}, not a data source")
    if not datasets:
        raise PicPacValueError(f"{what} needs at least one data source")
    return datasets


def _need_random_access(ds: AbstractDataSource, method: str) -> None:
    if not ds.is_random_access:
        raise PicPacTypeError(f"{type(ds).__name__}.{method} needs random access, and one or more of its data "
                              "sources has none (a CallableDataSource or IteratorDataSource)")


class CompositeDataSource(AbstractDataSource):
    """Several sources side by side: every mini-batch holds a batch of each, drawn together (each
    shuffled on its own), until the first one runs out (make the smaller ones ``repeats=-1``).

    ``flatten=True``: one tuple of all the arrays, ``(lab_x, lab_y, unlab_x)``; ``False``: one tuple
    per member, ``((lab_x, lab_y), (unlab_x,))``. ``trim=True`` cuts every member's batch to the
    shortest one's length (the last batch).
    """

    def __init__(self, datasets, flatten=True, trim=True):
        self.datasets = _members(datasets, "CompositeDataSource")
        self.flatten = bool(flatten)
        self.trim = bool(trim)

    @property
    def is_random_access(self) -> bool:
        return all(ds.is_random_access for ds in self.datasets)

    def _trimmed(self, batch: tuple) -> tuple:
        if self.trim:
            lengths = [_length_of_batch(b) for b in batch]
            if min(lengths) != max(lengths):
                batch = _trim_batch(batch, min(lengths))
        return batch

    def _prepare_batch(self, batch) -> tuple:
        batch = self._trimmed(tuple(batch))
        if self.flatten:
            return tuple(x for sub in batch for x in (sub if isinstance(sub, (tuple, list)) else (sub,)))
        return tuple(batch)

    def _prepare_index_batch(self, batch) -> tuple:
        return self._trimmed(tuple(batch))

    def num_samples(self, **kwargs):
        """The smallest member's count (None if any is unknown)."""
        counts = [ds.num_samples(**kwargs) for ds in self.datasets]
        return None if any(n is None for n in counts) else min(counts)

    def batch_iterator(self, batch_size, **kwargs):
        for batch in zip(*[ds.batch_iterator(batch_size, **kwargs) for ds in self.datasets]):
            yield self._prepare_batch(batch)

    def _per_member(self, indices, method: str) -> tuple:
        _need_random_access(self, method)
        if len(indices) != len(self.datasets):
            raise PicPacValueError(f"indices must hold one index batch per data source: got {len(indices)} for "
                                   f"{len(self.datasets)} data sources")
        return self._prepare_batch(tuple(getattr(ds, method)(ndx) for ds, ndx in zip(self.datasets, indices)))

    def samples_by_indices_nomapping(self, indices):
        """``indices``: one index batch per member (as :meth:`batch_indices_iterator` yields)."""
        return self._per_member(indices, "samples_by_indices_nomapping")

    def samples_by_indices(self, indices):
        return self._per_member(indices, "samples_by_indices")

    def batch_indices_iterator(self, batch_size, **kwargs):
        """Tuples of the members' index batches, trimmed like the data batches."""
        _need_random_access(self, "batch_indices_iterator")
        iterators = [ds.batch_indices_iterator(batch_size, **kwargs) for ds in self.datasets]
        return (self._prepare_index_batch(batch) for batch in zip(*iterators))


class ChoiceDataSource(AbstractDataSource):
    """Each mini-batch comes from one of several sources (e.g. one domain per batch).

    Not stratified: a batch of each member in turn (in order, or in a fresh
    ``rng.permutation(members)`` per round when shuffled) until one runs out. ``stratified=True``
    (finite members): every member's batches exactly once, spread evenly through the pass (in order),
    or in a shuffled order. Index batches are :class:`ChoiceBatch` ``(sample_indices, ds_index)``.
    """

    def __init__(self, datasets, stratified=False):
        self.datasets = _members(datasets, "ChoiceDataSource")
        self.stratified = bool(stratified)

    @property
    def is_random_access(self) -> bool:
        return all(ds.is_random_access for ds in self.datasets)

    def num_samples(self, **kwargs):
        """The members' counts summed (unknown ones count 0)."""
        return sum(n for n in (ds.num_samples(**kwargs) for ds in self.datasets) if n is not None)

    def batch_iterator(self, batch_size, shuffle=None, **kwargs):
        iterators = [ds.batch_iterator(batch_size, shuffle=shuffle, **kwargs) for ds in self.datasets]
        for choice in self._ds_iterator(batch_size, iterators, _shuffle_rng(shuffle), **kwargs):
            yield choice.sample_indices

    def _member(self, indices, method: str):
        _need_random_access(self, method)
        if not isinstance(indices, ChoiceBatch):
            raise PicPacTypeError(f"indices must be a data_source.ChoiceBatch(sample_indices, ds_index), got "
                                  f"{type(indices).__name__}")
        return getattr(self.datasets[indices.ds_index], method)(indices.sample_indices)

    def samples_by_indices_nomapping(self, indices):
        return self._member(indices, "samples_by_indices_nomapping")

    def samples_by_indices(self, indices):
        return self._member(indices, "samples_by_indices")

    def batch_indices_iterator(self, batch_size, shuffle=None, **kwargs):
        """An iterator of :class:`ChoiceBatch` es, in the order :meth:`batch_iterator` uses."""
        _need_random_access(self, "batch_indices_iterator")
        rng = _shuffle_rng(shuffle)
        iterators = [ds.batch_indices_iterator(batch_size, shuffle=rng, **kwargs) for ds in self.datasets]
        return self._ds_iterator(batch_size, iterators, rng, **kwargs)

    def _ds_iterator(self, batch_size, iterators, shuffle_rng, **kwargs):
        """``ChoiceBatch(batch, member)`` from the members' ``iterators`` in the chosen order."""
        counts = [ds.num_samples(shuffle=shuffle_rng, **kwargs) for ds in self.datasets]
        if self.stratified and all(n is not None and n != np.inf for n in counts):
            batches = [num_batches(n, batch_size) for n in counts]
            if shuffle_rng is not None:
                order = self._ds_indices_stratified_shuffled(batches, shuffle_rng)
            else:
                order = self._ds_indices_stratified_in_order(batches)
            for k in order.tolist():
                batch = next(iterators[k], _END)
                if batch is _END:  # a member gave fewer batches than its num_samples said
                    return
                yield ChoiceBatch(batch, k)
            return
        members = range(len(iterators))
        while True:
            for k in (members if shuffle_rng is None else shuffle_rng.permutation(len(iterators)).tolist()):
                batch = next(iterators[k], _END)
                if batch is _END:
                    return
                yield ChoiceBatch(batch, k)

    @staticmethod
    def _ds_indices_stratified_in_order(batches_per_ds):
        """Member of each batch of a stratified pass in order: member ``d``'s ``b_d`` batches spread
        evenly over ``max(b)`` steps (at step ``i`` it gives one when ``floor(i * b_d / max(b))`` grows;
        members in index order within a step)."""
        counts = np.asarray(batches_per_ds, dtype=np.int64)
        if counts.size == 0 or counts.max() <= 0:
            return np.zeros(0, np.int64)
        steps = int(counts.max())
        level = np.arange(steps, dtype=np.int64)[:, None] * counts[None, :] // steps   # (step, member)
        grows = np.vstack([np.ones((1, len(counts)), bool), level[1:] > level[:-1]]) & (counts > 0)
        return np.nonzero(grows)[1].astype(np.int64)

    @staticmethod
    def _ds_indices_stratified_shuffled(batches_per_ds, shuffle_rng):
        """Member of each batch of a stratified pass, shuffled: ``b_d`` times ``d``, ``shuffle_rng.shuffle``d."""
        counts = np.asarray(batches_per_ds, dtype=np.int64)
        order = np.repeat(np.arange(len(counts), dtype=np.int64), np.maximum(counts, 0))
        shuffle_rng.shuffle(order)
        return order


_END = object()


class MapDataSource(AbstractDataSource):
    """``fn(*batch)`` applied to every mini-batch of ``source`` (augmentation, conversion). Random access
    when ``source`` is; index batches are ``source``'s."""

    def __init__(self, source, fn):
        if not isinstance(source, AbstractDataSource):
            raise PicPacTypeError(f"source must be a data source, got {type(source).__name__}")
        if not callable(fn):
            raise PicPacTypeError(f"fn must be callable, got {type(fn).__name__}")
        self.source = source
        self.fn = fn

    @property
    def is_random_access(self) -> bool:
        return self.source.is_random_access

    def num_samples(self, **kwargs):
        return self.source.num_samples(**kwargs)

    def batch_iterator(self, batch_size, **kwargs):
        for batch in self.source.batch_iterator(batch_size, **kwargs):
            yield self.fn(*batch)

    def samples_by_indices_nomapping(self, indices):
        _need_random_access(self, "samples_by_indices_nomapping")
        return self.fn(*self.source.samples_by_indices_nomapping(indices))

    def samples_by_indices(self, indices):
        _need_random_access(self, "samples_by_indices")
        return self.fn(*self.source.samples_by_indices(indices))

    def batch_indices_iterator(self, batch_size, **kwargs):
        _need_random_access(self, "batch_indices_iterator")
        return self.source.batch_indices_iterator(batch_size, **kwargs)


# -- whole passes ------------------------------------------------------------------------------------
def _batches(batch_iter, progress_iter_func, n_batches, prepend_args) -> Iterator[tuple[Any, Any]]:
    """``(batch, arguments for func)`` for at most ``n_batches`` batches, never pulling one more."""
    if n_batches is not None:
        n_batches = check_int(n_batches, "n_batches", 0)
    if progress_iter_func is not None:
        batch_iter = progress_iter_func(batch_iter, total=n_batches, leave=False)
    prepend = () if prepend_args is None else tuple(prepend_args)
    if n_batches == 0:
        return
    for done, batch in enumerate(batch_iter, 1):
        yield batch, prepend + tuple(batch)
        if n_batches is not None and done >= n_batches:
            return


def _results(value: Any, allowed: tuple, what: str) -> tuple | None:
    if value is None or isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, allowed) and not isinstance(value, bool):
        return (value,)
    raise PicPacTypeError(f"the batch function must return None, a tuple of results or {what}, not a "
                          f"{type(value).__name__}")


def batch_map_concat(func, batch_iter, progress_iter_func=None, n_batches=None, prepend_args=None):
    """``func(*prepend_args, *batch)`` on every batch of ``batch_iter`` (at most ``n_batches``), each
    result array concatenated along axis 0: a tuple with one array per result (None if ``func``
    returned nothing). ``func`` returns a NumPy array, a tuple of them, or None.
    ``progress_iter_func(iterator, total=n_batches, leave=False)`` wraps the iterator (``tqdm.tqdm``)."""
    collected = []
    for _, args in _batches(batch_iter, progress_iter_func, n_batches, prepend_args):
        results = _results(func(*args), (np.ndarray,), "a NumPy array")
        if results is not None:
            collected.append(results)
    if not collected:
        return None
    return tuple(np.concatenate(list(parts), axis=0) for parts in zip(*collected))


def batch_map_mean(func, batch_iter, progress_iter_func=None, sum_axis=None, n_batches=None, prepend_args=None):
    """The per-sample mean of ``func``'s results over the batches of ``batch_iter`` (at most ``n_batches``).

    With ``sum_axis=None`` ``func`` returns each result summed over the batch's samples (a number or
    an array, or a tuple of them); else its per-sample results are summed over ``sum_axis`` here. The
    sums are added up and divided by the number of samples seen: a tuple of float arrays (None if
    ``func`` returned nothing).
    """
    totals: list | None = None
    samples = 0
    for batch, args in _batches(batch_iter, progress_iter_func, n_batches, prepend_args):
        n = _length_of_batch(batch)
        results = _results(func(*args), (np.ndarray, numbers.Number), "a number or NumPy array")
        if results is not None:
            sums = [np.array(r, copy=True) if sum_axis is None else np.sum(r, axis=sum_axis) for r in results]
            if totals is None:
                totals = sums
            else:
                for i, s in enumerate(sums[:len(totals)]):
                    totals[i] = totals[i] + s
        samples += n
    if totals is None:
        return None
    return tuple(np.asarray(t).astype(float) / samples for t in totals)


batch_map = batch_map_concat      # batchup's older names
mean_batch_map = batch_map_mean


def coerce_data_source(x):
    """``x`` as a data source: a data source as is, a list or tuple of array-likes as an
    :class:`ArrayDataSource`, an iterator as an :class:`IteratorDataSource`, a callable as a
    :class:`CallableDataSource`; anything else is a ``TypeError``."""
    if isinstance(x, AbstractDataSource):
        return x
    if isinstance(x, (list, tuple)):
        if not x:
            raise PicPacValueError("cannot make a data source of an empty sequence")
        for item in x:
            if not _is_array_like(item):
                raise PicPacTypeError(f"cannot make a data source of a sequence holding a {type(item).__name__} "
                                      "(not an array-like: __len__ and __getitem__)")
        return ArrayDataSource(list(x))
    if isinstance(x, Iterator):
        return IteratorDataSource(x)
    if callable(x):
        return CallableDataSource(x)
    raise PicPacTypeError(f"cannot make a data source of a {type(x).__name__}: give a data source, a list of "
                          "array-likes, an iterator of batches or a callable making one")


# -- picpac files as array-likes ---------------------------------------------------------------------
class ReaderArray:
    """One field of a picpac database as an array-like for :class:`ArrayDataSource`.

    ``ReaderArray(reader_or_path, field="image")``: ``len`` is the record count; ``[i]`` is record
    ``i``'s field, as a NumPy array when the metadata declares the field an array
    (``write_arrays``), else as ``bytes``; ``[index_array]`` (or a slice) stacks the arrays, or gives a
    list of ``bytes``. Records are read (and checked against their CRC) on the fly; nothing is
    decoded. It pickles by path, so process workers reopen the file. Labels: ``reader.labels``.
    """

    def __init__(self, reader, field="image"):
        self.reader = reader if isinstance(reader, Reader) else Reader(reader)
        if field not in self.reader.fields:
            raise PicPacValueError(f"{self.reader.path}: no field {field!r} (fields: {self.reader.fields})")
        self.field = field
        self._array = field in self.reader.arrays

    def __len__(self) -> int:
        return len(self.reader)

    def _one(self, i: int):
        if self._array:
            return self.reader.array(i, self.field).copy()
        return bytes(self.reader[i][self.field])

    def __getitem__(self, index):
        if isinstance(index, (numbers.Integral, np.integer)) and not isinstance(index, (bool, np.bool_)):
            return self._one(int(index))
        if isinstance(index, slice):
            index = np.arange(len(self))[index]
        index = np.asarray(index)
        if index.ndim != 1 or not (np.issubdtype(index.dtype, np.integer) or index.size == 0):
            raise PicPacTypeError(f"index must be an int, a slice or a 1-D integer array, got {index.dtype} "
                                  f"of shape {index.shape}")
        items = [self._one(i) for i in index.tolist()]
        if not self._array:
            return items
        spec = self.reader.arrays[self.field]
        return np.stack(items) if items else np.zeros((0, *spec.shape), spec.dtype)

    def __repr__(self) -> str:
        return f"ReaderArray({self.reader.path!r}, field={self.field!r}, records={len(self)})"
