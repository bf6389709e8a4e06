"""The order in which a stream reads its pool in each pass: shuffled, reshuffled per epoch, or
class-balanced round robin (``oversample``)."""
from __future__ import annotations

from itertools import chain, islice
from typing import Iterator

import numpy as np

from ..errors import PicPacValueError
from .common import CLASS, ORDER, as_labels, check_int, class_codes, seeded_rng

class Sampler:
    """The order in which one stream reads its pool of ``n`` samples (positions ``0..n-1``).

    Plain: pass ``epoch`` is the identity, or (``shuffle``) a permutation keyed by the seed and
    the epoch (``reshuffle``) or 0. ``oversample``: class-balanced round robin; each class is read
    in its own order (members permuted per cycle when ``shuffle``), so small classes repeat.
    """

    def __init__(self, labels: np.ndarray, seed: int, *, shuffle: bool, reshuffle: bool,
                 oversample: bool):
        labels = as_labels(labels)
        self._n = len(labels)
        if self._n == 0:
            raise PicPacValueError("the stream has no samples to read (empty pool: check the split "
                                   "settings and the database)")
        self._seed = check_int(seed, "seed", 0)
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

    @property
    def cover(self) -> int:
        """A run length of the endless stream that holds every sample: any ``cover`` consecutive stream
        positions read each of the ``n`` samples at least once (they hold a whole pass, or a whole cycle
        of every class)."""
        if self._oversample:
            return 2 * len(self._members) * max(len(m) for m in self._members) - 1
        return 2 * self._n - 1

    def _key(self, epoch: int) -> int:
        return epoch if self._reshuffle else 0

    def class_order(self, c: int, cycle: int) -> np.ndarray:
        """Positions of class index ``c`` (in sorted label order) for its cycle ``cycle``."""
        members = self._members[c]
        if not self._shuffle:
            return members.copy()
        return seeded_rng(self._seed, CLASS, c, self._key(cycle)).permutation(members)

    def pass_order(self, epoch: int) -> np.ndarray:
        """A permutation of ``0..n-1``: the order of one pass over the pool."""
        return self._order(check_int(epoch, "epoch", 0)).copy()

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
        return seeded_rng(self._seed, ORDER, key).permutation(self._n)

    def at(self, start: int = 0) -> Iterator[tuple[int, int]]:
        """Endless ``(position, epoch)`` pairs from stream position ``start`` on.

        Plain: position ``p`` is item ``p % n`` of pass ``p // n``. Oversample: ``p`` reads class
        ``p % C``; its ``j = p // C``-th draw is item ``j % n_c`` of that class's cycle
        ``j // n_c``, and the epoch reported is that cycle.
        """
        start = check_int(start, "start", 0)
        return self._endless_classes(start) if self._oversample else self._endless(start)

    def take(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and epochs of stream positions ``start .. start + count - 1`` as two int64 arrays:
        the first ``count`` pairs ``at(start)`` yields, computed at once."""
        start, count = check_int(start, "start", 0), check_int(count, "count", 0)
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
