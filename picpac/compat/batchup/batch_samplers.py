"""batchup's samplers: mini-batches of sample indices, used by ``data_source``.

``StandardSampler``, ``SubsetSampler``, ``WeightedSampler``, ``WeightedSubsetSampler`` and
``num_batches`` draw only from the RNG handed to ``shuffled_indices_batch_iterator`` (a
``np.random.RandomState`` gives batchup's exact order).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ...errors import PicPacTypeError, PicPacValueError
from ...sampling.common import check_int

__all__ = ["AbstractSampler", "StandardSampler", "SubsetSampler", "WeightedSampler", "WeightedSubsetSampler",
           "num_batches"]

def num_batches(n: int, batch_size: int) -> int:
    """How many mini-batches of ``batch_size`` cover ``n`` samples (the last one may be short)."""
    batch_size = check_int(batch_size, "batch_size", 1)
    return -(-check_int(n, "n", 0) // batch_size)


def check_repeats(repeats: object) -> int:
    out = check_int(repeats, "repeats")
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
        batch_size = check_int(batch_size, "batch_size", 1)
        order = self._in_order()
        return _epoch_batches(lambda: order, self.length, batch_size, self.repeats, fresh=True)

    def shuffled_indices_batch_iterator(self, batch_size, shuffle_rng):
        """Batches of a new ``shuffle_rng.permutation`` per pass (drawn lazily, as batchup does)."""
        batch_size = check_int(batch_size, "batch_size", 1)
        if not hasattr(shuffle_rng, "permutation"):
            raise PicPacTypeError(f"shuffle_rng must be a np.random.RandomState (or Generator), got "
                                  f"{type(shuffle_rng).__name__}")
        return _epoch_batches(lambda: self._permuted(shuffle_rng), self.length, batch_size, self.repeats,
                              fresh=False)


class StandardSampler(_PassSampler):
    """Every sample ``0 .. length - 1``, in order or shuffled, ``repeats`` times (-1: endlessly)."""

    def __init__(self, length, repeats=1):
        self.length = check_int(length, "length", 0)
        self.repeats = check_repeats(repeats)

    def _in_order(self) -> np.ndarray:
        return np.arange(self.length)

    def _permuted(self, rng) -> np.ndarray:
        return rng.permutation(self.length)


class SubsetSampler(_PassSampler):
    """The samples ``indices`` names, in that order or shuffled, ``repeats`` times (-1: endlessly)."""

    def __init__(self, indices, repeats=1):
        self.indices = _index_array(indices, "indices")
        self.length = len(self.indices)
        self.repeats = check_repeats(repeats)

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
        batch_size = check_int(batch_size, "batch_size", 1)
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
        counts = np.bincount(y, minlength=0 if n_classes is None else check_int(n_classes, "n_classes", 0))
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
        batch_size = check_int(batch_size, "batch_size", 1)
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
