"""Sampling for streams: K-fold assignment, fold selection, and the order in which a pool is read.

Everything here is a pure, deterministic function of its inputs: no global RNG state is read or
changed. Every random draw comes from ``np.random.default_rng(np.random.SeedSequence([seed,
PURPOSE, ...]))`` so fold assignment, per-epoch order and per-class order are independent streams
derived from one user seed.

The second half holds batchup's samplers (``StandardSampler``, ``SubsetSampler``,
``WeightedSampler``, ``WeightedSubsetSampler``, ``num_batches``), used by ``data_source.py``: they
yield mini-batches of sample indices and draw only from the RNG handed to
``shuffled_indices_batch_iterator`` (a ``np.random.RandomState`` gives batchup's exact order).
"""
from __future__ import annotations

import heapq
import operator
from itertools import chain, islice
from typing import Iterator

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from ..file.layout import NO_GROUP

__all__ = ["AbstractSampler", "Sampler", "StandardSampler", "SubsetSampler", "WeightedSampler",
           "WeightedSubsetSampler", "assign_folds", "num_batches", "select"]

# Purpose words mixed into every SeedSequence (ASCII tags, so streams never collide).
_FOLDS = 0x666F6C64   # "fold": permutation of units before fold assignment
_ORDER = 0x6F726472   # "ordr": per-epoch permutation of a pool
_CLASS = 0x636C7373   # "clss": per-class, per-cycle permutation when oversampling


def _int(value: object, name: str, minimum: int | None = None) -> int:
    """``value`` as a Python int (bools refused), at least ``minimum`` when given."""
    if isinstance(value, (bool, np.bool_)):
        raise PicPacTypeError(f"{name} must be an int, got {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise PicPacTypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if minimum is not None and out < minimum:
        raise PicPacValueError(f"{name} must be >= {minimum}, got {out}")
    return out


def _rng(seed: int, *words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def _labels(labels: np.ndarray) -> np.ndarray:
    out = np.asarray(labels, dtype=np.float64)
    if out.ndim != 1:
        raise PicPacValueError(f"labels must be one-dimensional, got shape {out.shape}")
    return out


def class_codes(labels: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct labels and each record's index into them; labels must be integral.

    ``what`` names the option that needs classes (e.g. ``"stratify"``) for the error message.
    """
    labels = _labels(labels)
    bad = ~np.isfinite(labels) | (labels != np.round(labels))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PicPacValueError(f"{what} needs integral class labels, but record {i} has label "
                               f"{labels[i]!r} ({int(bad.sum())} non-integral label(s) in all)")
    classes, codes = np.unique(labels, return_inverse=True)
    return classes, codes.reshape(-1).astype(np.int64)


def assign_folds(labels: np.ndarray, groups: np.ndarray, k: int, seed: int, *,
                 shuffle: bool = True, stratify: bool = False) -> np.ndarray:
    """Fold id (int32, 0..k-1) of every record; records sharing a group never straddle folds.

    Units (a group, or one ungrouped record) are ordered by a seeded permutation if ``shuffle``,
    else by first record. Without ``stratify`` each unit goes to the fold with the fewest records
    (ties: lowest id), i.e. round robin when there are no groups. With ``stratify`` units are dealt
    round robin, class by class (a unit's class: its most common label, ties to the smallest),
    the deal continuing across classes.
    """
    k = _int(k, "k (number of folds)", 1)
    seed = _int(seed, "seed", 0)
    labels = _labels(labels)
    groups = np.asarray(groups)
    if groups.ndim != 1 or len(groups) != len(labels):
        raise PicPacValueError(f"labels and groups must be one-dimensional and of equal length, got "
                               f"shapes {labels.shape} and {groups.shape}")
    if stratify:
        _, codes = class_codes(labels, "stratify")
    n = len(labels)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int32)

    # Units, numbered in ascending order of their first record.
    idx = np.arange(n, dtype=np.int64)
    key = idx.copy()
    grouped = groups != NO_GROUP
    if grouped.any():
        _, first, inverse = np.unique(groups[grouped], return_index=True, return_inverse=True)
        key[grouped] = idx[grouped][first][inverse.reshape(-1)]
    firsts, unit_of = np.unique(key, return_inverse=True)
    unit_of = unit_of.reshape(-1)
    n_units = len(firsts)
    sizes = np.bincount(unit_of, minlength=n_units)

    order = _rng(seed, _FOLDS).permutation(n_units) if shuffle else np.arange(n_units)
    unit_fold = np.empty(n_units, dtype=np.int32)
    if stratify:
        if n_units == n:
            unit_class = codes[firsts]
        else:
            n_classes = int(codes.max()) + 1
            pairs, counts = np.unique(unit_of * n_classes + codes, return_counts=True)
            u, c = pairs // n_classes, pairs % n_classes
            rank = np.lexsort((c, -counts, u))      # by unit, then most common, then smallest
            u, c = u[rank], c[rank]
            head = np.r_[True, u[1:] != u[:-1]]
            unit_class = np.empty(n_units, dtype=np.int64)
            unit_class[u[head]] = c[head]
        dealt = order[np.argsort(unit_class[order], kind="stable")]
        unit_fold[dealt] = np.arange(n_units) % k
    elif (sizes == 1).all():
        unit_fold[order] = np.arange(n_units) % k
    else:
        heap = [(0, f) for f in range(k)]           # (records so far, fold id)
        for u, size in zip(order.tolist(), sizes[order].tolist()):
            total, f = heap[0]
            unit_fold[u] = f
            heapq.heapreplace(heap, (total + size, f))
    return unit_fold[unit_of]


def select(folds: np.ndarray, k: int, fold: int, negate: bool) -> np.ndarray:
    """Ascending record indices of one split (PicPac semantics).

    ``negate=False`` (training) keeps every record not in ``fold``; ``negate=True`` (validation)
    keeps only ``fold``. With ``k == 1`` every record is kept.
    """
    k = _int(k, "split (number of folds)", 1)
    fold = _int(fold, "split_fold")
    if not 0 <= fold < k:
        raise PicPacValueError(f"split_fold must be in 0..{k - 1} for split={k}, got {fold}")
    folds = np.asarray(folds)
    if k == 1:
        return np.arange(len(folds), dtype=np.int64)
    mask = folds == fold if negate else folds != fold
    return np.flatnonzero(mask).astype(np.int64, copy=False)


class Sampler:
    """The order in which one stream reads its pool of ``n`` samples (positions ``0..n-1``).

    Plain: pass ``epoch`` is the identity, or (``shuffle``) a permutation keyed by the seed and
    the epoch (``reshuffle``) or 0. ``oversample``: class-balanced round robin; each class is read
    in its own order (members permuted per cycle when ``shuffle``), so small classes repeat.
    """

    def __init__(self, labels: np.ndarray, seed: int, *, shuffle: bool, reshuffle: bool,
                 oversample: bool):
        labels = _labels(labels)
        self._n = len(labels)
        if self._n == 0:
            raise PicPacValueError("the stream has no samples to read (empty pool: check the split "
                                   "settings and the database)")
        self._seed = _int(seed, "seed", 0)
        self._shuffle, self._reshuffle, self._oversample = bool(shuffle), bool(reshuffle), bool(oversample)
        self._pass: tuple[int, np.ndarray] | None = None     # (key, order) of the last pass
        if self._oversample:
            _, codes = class_codes(labels, "oversample")
            self._members = [np.flatnonzero(codes == c) for c in range(int(codes.max()) + 1)]
            self._class_cache: list[tuple[int, list[int]] | None] = [None] * len(self._members)

    def __len__(self) -> int:
        return self._n

    @property
    def n_classes(self) -> int:
        """Number of classes in the oversampling rotation (1 when not oversampling)."""
        return len(self._members) if self._oversample else 1

    def _key(self, epoch: int) -> int:
        return epoch if self._reshuffle else 0

    def class_order(self, c: int, cycle: int) -> np.ndarray:
        """Positions of class index ``c`` (in sorted label order) for its cycle ``cycle``."""
        members = self._members[c]
        if not self._shuffle:
            return members.copy()
        return _rng(self._seed, _CLASS, c, self._key(cycle)).permutation(members)

    def pass_order(self, epoch: int) -> np.ndarray:
        """A permutation of ``0..n-1``: the order of one pass over the pool."""
        return self._order(_int(epoch, "epoch", 0)).copy()

    def _order(self, epoch: int) -> np.ndarray:
        """The order of pass ``epoch``, cached (the last pass's order is kept): not to be written to."""
        key = self._key(epoch)
        if self._pass is None or self._pass[0] != key:
            self._pass = (key, self._compute_pass(key))
        return self._pass[1]

    def _compute_pass(self, key: int) -> np.ndarray:
        if self._oversample:
            # Round robin: the i-th member of class c sorts by (i, c); exhausted classes drop out.
            orders = [self.class_order(c, key) for c in range(len(self._members))]
            rank = np.concatenate([np.arange(len(o), dtype=np.int64) * len(orders) + c
                                   for c, o in enumerate(orders)])
            return np.concatenate(orders)[np.argsort(rank, kind="stable")]
        if not self._shuffle:
            return np.arange(self._n, dtype=np.int64)
        return _rng(self._seed, _ORDER, key).permutation(self._n)

    def at(self, start: int = 0) -> Iterator[tuple[int, int]]:
        """Endless ``(position, epoch)`` pairs from stream position ``start`` on.

        Plain: position ``p`` is item ``p % n`` of pass ``p // n``. Oversample: ``p`` reads class
        ``p % C``; its ``j = p // C``-th draw is item ``j % n_c`` of that class's cycle
        ``j // n_c``, and the epoch reported is that cycle.
        """
        start = _int(start, "start", 0)
        return self._endless_classes(start) if self._oversample else self._endless(start)

    def take(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and epochs of stream positions ``start .. start + count - 1`` as two int64 arrays:
        the first ``count`` pairs ``at(start)`` yields, computed at once."""
        start, count = _int(start, "start", 0), _int(count, "count", 0)
        if self._oversample:
            pairs = np.fromiter(chain.from_iterable(islice(self._endless_classes(start), count)), np.int64, 2 * count)
            return pairs[0::2].copy(), pairs[1::2].copy()
        stream = np.arange(start, start + count, dtype=np.int64)
        epochs, items = np.divmod(stream, self._n)
        positions = np.empty(count, np.int64)
        for epoch in np.unique(epochs).tolist():
            chosen = epochs == epoch
            positions[chosen] = self._order(epoch)[items[chosen]]
        return positions, epochs

    def _endless(self, p: int) -> Iterator[tuple[int, int]]:
        n = self._n
        epoch, i = divmod(p, n)
        while True:
            order = self.pass_order(epoch).tolist()
            for i in range(i, n):
                yield order[i], epoch
            epoch, i = epoch + 1, 0

    def _endless_classes(self, p: int) -> Iterator[tuple[int, int]]:
        n_classes = len(self._members)
        sizes = [len(m) for m in self._members]
        cache = self._class_cache
        while True:
            j, c = divmod(p, n_classes)
            cycle, i = divmod(j, sizes[c])
            key = self._key(cycle)
            hit = cache[c]
            if hit is None or hit[0] != key:
                hit = cache[c] = (key, self.class_order(c, cycle).tolist())
            yield hit[1][i], cycle
            p += 1


# -- batchup's samplers: mini-batches of sample indices (used by data_source.py) --------------------
def num_batches(n: int, batch_size: int) -> int:
    """How many mini-batches of ``batch_size`` cover ``n`` samples (the last one may be short)."""
    batch_size = _int(batch_size, "batch_size", 1)
    return -(-_int(n, "n", 0) // batch_size)


def _repeats(repeats: object) -> int:
    out = _int(repeats, "repeats")
    if out == 0 or out < -1:
        raise PicPacValueError(f"repeats must be >= 1, or -1 to repeat endlessly, got {out}")
    return out


def _index_array(indices: object, name: str) -> np.ndarray:
    """``indices`` as a one-dimensional integer array (its own dtype kept)."""
    out = np.asarray(indices)
    if out.ndim == 1 and out.size == 0:
        return out.astype(np.int64)
    if out.ndim != 1 or not np.issubdtype(out.dtype, np.integer):
        raise PicPacTypeError(f"{name} must be a one-dimensional array of integers, got "
                              f"{out.dtype} of shape {out.shape}")
    return out


def _epoch_batches(epoch_order, length: int, batch_size: int, repeats: int, fresh: bool) -> Iterator[np.ndarray]:
    """Mini-batches over passes laid end to end: ``epoch_order()`` gives each pass's order.

    ``repeats`` passes (-1: endless). One pass: its order is cut into batches, the last one short.
    Several: a batch that reaches the end of a pass is completed from the next pass, and the next
    pass's order is asked for as soon as a batch needs it, or at the start of the batch after one
    that ended exactly at the end of a pass (batchup's schedule, so a shared RNG is drawn from at
    the same moments); only the very last batch may be short. ``fresh``: the order is reused, so
    batches are copied out of it.
    """
    if length == 0:
        return
    order = epoch_order()
    if repeats == 1:
        for start in range(0, length, batch_size):
            piece = order[start:start + batch_size]
            yield piece.copy() if fresh else piece
        return
    left, i = repeats, 0
    while True:
        if i + batch_size <= length:
            piece = order[i:i + batch_size]
            i += batch_size
            yield piece.copy() if fresh else piece
            continue
        pieces, need = [], batch_size
        while need:
            take = min(need, length - i)
            pieces.append(order[i:i + take])
            i += take
            need -= take
            if i == length:  # this pass is used up: the next one's order
                order, i = epoch_order(), 0
                if left > 0:
                    left -= 1
                if left == 0:
                    break
        batch = np.concatenate(pieces)
        if len(batch):
            yield batch
        if left == 0:
            return


class AbstractSampler:
    """batchup's sampler interface: where a data source's mini-batches of sample indices come from.

    ``in_order_indices_batch_iterator(batch_size)`` and
    ``shuffled_indices_batch_iterator(batch_size, shuffle_rng)`` return iterators of 1-D integer
    arrays (indices into the data, the subset mapping already applied); ``num_indices_generated()``
    is an int, ``np.inf`` or None; ``map_indices`` maps positions in the subset to data indices.
    """

    def num_indices_generated(self):
        raise NotImplementedError(f"num_indices_generated is abstract in {type(self).__name__}")

    def map_indices(self, indices):
        return indices

    def in_order_indices_batch_iterator(self, batch_size):
        raise NotImplementedError(f"in_order_indices_batch_iterator is abstract in {type(self).__name__}")

    def shuffled_indices_batch_iterator(self, batch_size, shuffle_rng):
        raise NotImplementedError(f"shuffled_indices_batch_iterator is abstract in {type(self).__name__}")


class _PassSampler(AbstractSampler):
    """Passes over ``self._order0`` (a fixed order of the indices to draw), ``repeats`` times."""

    length: int
    repeats: int

    def num_indices_generated(self):
        return np.inf if self.repeats == -1 else self.length * self.repeats

    def _permuted(self, rng) -> np.ndarray:
        raise NotImplementedError

    def _in_order(self) -> np.ndarray:
        raise NotImplementedError

    def in_order_indices_batch_iterator(self, batch_size):
        """Batches in index order; with ``repeats`` the passes run on across batch boundaries."""
        batch_size = _int(batch_size, "batch_size", 1)
        order = self._in_order()
        return _epoch_batches(lambda: order, self.length, batch_size, self.repeats, fresh=True)

    def shuffled_indices_batch_iterator(self, batch_size, shuffle_rng):
        """Batches of a new ``shuffle_rng.permutation`` per pass (drawn lazily, as batchup does)."""
        batch_size = _int(batch_size, "batch_size", 1)
        if not hasattr(shuffle_rng, "permutation"):
            raise PicPacTypeError(f"shuffle_rng must be a np.random.RandomState (or Generator), got "
                                  f"{type(shuffle_rng).__name__}")
        return _epoch_batches(lambda: self._permuted(shuffle_rng), self.length, batch_size, self.repeats,
                              fresh=False)


class StandardSampler(_PassSampler):
    """Every sample ``0 .. length - 1``, in order or shuffled, ``repeats`` times (-1: endlessly)."""

    def __init__(self, length, repeats=1):
        self.length = _int(length, "length", 0)
        self.repeats = _repeats(repeats)

    def _in_order(self) -> np.ndarray:
        return np.arange(self.length)

    def _permuted(self, rng) -> np.ndarray:
        return rng.permutation(self.length)


class SubsetSampler(_PassSampler):
    """The samples ``indices`` names, in that order or shuffled, ``repeats`` times (-1: endlessly)."""

    def __init__(self, indices, repeats=1):
        self.indices = _index_array(indices, "indices")
        self.length = len(self.indices)
        self.repeats = _repeats(repeats)

    def map_indices(self, indices):
        return self.indices[indices]

    def _in_order(self) -> np.ndarray:
        return self.indices

    def _permuted(self, rng) -> np.ndarray:
        return rng.permutation(self.indices)


def _weights(weights: object, name: str) -> np.ndarray:
    out = np.asarray(weights, dtype=np.float64)
    if out.ndim != 1:
        raise PicPacValueError(f"{name} must be one-dimensional, got shape {out.shape}")
    if not np.isfinite(out).all() or (out < 0).any():
        raise PicPacValueError(f"{name} must be finite and >= 0")
    return out


class WeightedSampler(AbstractSampler):
    """Endless batches drawn with replacement, sample ``i`` with probability ``weights[i] / weights.sum()``.

    Only shuffled iteration exists (``shuffle_rng.choice`` per batch); in-order iteration raises
    ``NotImplementedError``, as in batchup.
    """

    def __init__(self, weights):
        weights = _weights(weights, "weights")
        total = weights.sum()
        if total == 0.0:
            raise PicPacValueError("weights must not sum to 0")
        self.weights = weights / total
        self.length = len(self.weights)

    def num_indices_generated(self):
        return np.inf

    def in_order_indices_batch_iterator(self, batch_size):
        raise NotImplementedError("WeightedSampler draws at random: in-order iteration is not supported "
                                  "(pass shuffle=True or a RandomState)")

    def shuffled_indices_batch_iterator(self, batch_size, shuffle_rng):
        batch_size = _int(batch_size, "batch_size", 1)
        return self._draws(batch_size, shuffle_rng)

    def _draws(self, batch_size: int, rng) -> Iterator[np.ndarray]:
        while True:
            yield rng.choice(self.length, size=(batch_size,), p=self.weights)

    @staticmethod
    def class_balancing_sample_weights(y, n_classes=None):
        """Per-sample weights giving every class present in ``y`` (ints >= 0) the same total weight.

        A sample of class ``c`` weighs ``1 / (count(c) * classes present)``, so the weights sum to
        1. ``n_classes`` (batchup's older signature) is accepted; classes with no sample get no weight.
        """
        y = np.asarray(y)
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
            raise PicPacValueError("y must be a one-dimensional array of class indices >= 0")
        counts = np.bincount(y, minlength=0 if n_classes is None else _int(n_classes, "n_classes", 0))
        present = np.count_nonzero(counts)
        with np.errstate(divide="ignore"):
            class_weight = 1.0 / (counts.astype(np.float64) * present)
        class_weight[counts == 0] = 0.0
        return class_weight[y]

    @staticmethod
    def class_balancing_sampler(y, n_classes=None):
        """A ``WeightedSampler`` that draws every class of ``y`` equally often."""
        return WeightedSampler(WeightedSampler.class_balancing_sample_weights(y, n_classes))


class WeightedSubsetSampler(AbstractSampler):
    """``WeightedSampler`` over the samples ``indices`` names, ``sub_weights[j]`` for ``indices[j]``."""

    def __init__(self, sub_weights, indices):
        indices = _index_array(indices, "indices")
        sub_weights = _weights(sub_weights, "sub_weights")
        if len(sub_weights) != len(indices):
            raise PicPacValueError(f"sub_weights and indices must have the same length, got "
                                   f"{len(sub_weights)} and {len(indices)}")
        total = sub_weights.sum()
        if total == 0.0:
            raise PicPacValueError("sub_weights must not sum to 0")
        self.sub_weights = sub_weights / total
        self.indices = indices
        self.length = len(indices)

    def num_indices_generated(self):
        return np.inf

    def map_indices(self, indices):
        return self.indices[indices]

    def in_order_indices_batch_iterator(self, batch_size):
        raise NotImplementedError("WeightedSubsetSampler draws at random: in-order iteration is not "
                                  "supported (pass shuffle=True or a RandomState)")

    def shuffled_indices_batch_iterator(self, batch_size, shuffle_rng):
        batch_size = _int(batch_size, "batch_size", 1)
        return self._draws(batch_size, shuffle_rng)

    def _draws(self, batch_size: int, rng) -> Iterator[np.ndarray]:
        while True:
            yield rng.choice(self.indices, size=(batch_size,), p=self.sub_weights)

    @staticmethod
    def class_balancing_sampler(y, indices, n_classes=None):
        """A ``WeightedSubsetSampler`` over ``indices`` that draws every class of ``y[indices]`` equally often."""
        indices = _index_array(indices, "indices")
        weights = WeightedSampler.class_balancing_sample_weights(np.asarray(y)[indices], n_classes)
        return WeightedSubsetSampler(weights, indices=indices)
