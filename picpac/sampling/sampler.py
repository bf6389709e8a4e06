"""The order in which a stream reads its pool in each pass: shuffled (fully, or in runs of the file:
``chunked``), reshuffled per epoch, or class-balanced round robin (``oversample``); and each rank's share
of an epoch's order (``share``)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..errors import PicPacValueError
from .common import CLASS, ORDER, as_labels, check_int, class_codes, seeded_rng


def share(count: int, rank: int, world_size: int, *, pad: bool = True, start: int = 0) -> tuple[np.ndarray, int]:
    """Rank ``rank``'s share of items ``start .. count - 1`` of an epoch's order of ``count`` items: indices
    into that order (int64), and how many of them are real (the rest, at the end, repeat others).

    As torch's ``DistributedSampler`` splits an epoch: the ``L = count - start`` items left are made a
    multiple of ``world_size``, with ``pad`` by repeating them from the first (the list cycled), without it
    by dropping the last ``L % world_size``; rank ``r`` takes items ``r, r + W, r + 2W, ...`` of that list.
    So every rank gets as many items (``ceil(L / W)``, or ``floor``), the ranks' real items are disjoint
    and cover the items left (all but the dropped ones), and once every rank took ``c`` items, the items
    taken are the first ``c * W`` of the list: a prefix of the epoch's order (what makes elastic resume
    exact). Nothing of size ``count`` or ``world_size`` is built: O(share).
    """
    count = check_int(count, "count", 0)
    world_size = check_int(world_size, "world_size", 1)
    rank = check_int(rank, "rank", 0)
    start = check_int(start, "start", 0)
    if rank >= world_size:
        raise PicPacValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    if start > count:
        raise PicPacValueError(f"start ({start}) is past the epoch's {count} items")
    left = count - start
    size = -(-left // world_size) if pad else left // world_size
    if not size:
        return np.empty(0, np.int64), 0
    index = rank + world_size * np.arange(size, dtype=np.int64)
    real = 0 if rank >= left else min(size, -(-(left - rank) // world_size))
    return start + index % left, real


shard = share
"""The name of ``share`` before a rank's part of an epoch was called its share (a shard is a file)."""


def chunked(positions: np.ndarray, chunk: int, window: int, rng: np.random.Generator) -> np.ndarray:
    """A quasi-random permutation of ``positions`` (int64, in file order) that reads the file in runs.

    The positions are cut into runs of ``chunk`` consecutive ones (the last may be shorter); the runs are
    permuted, and the positions of each ``window`` consecutive runs of that permutation are shuffled
    together. So the result is one window after another, each of only its runs' positions: a reader touches
    ``window`` regions of the file at a time. Every position appears once; ``rng`` makes two draws.
    """
    n = len(positions)
    chunk = max(1, min(chunk, n))
    runs = -(-n // chunk)
    window = max(1, min(window, runs))
    grid = np.full((-(-runs // window) * window, chunk), -1, np.int64)  # a run per row, -1 pads the last ones
    grid.flat[:n] = np.arange(n)
    grid[:runs] = grid[rng.permutation(runs)]
    mixed = rng.permuted(grid.reshape(-1, window * chunk), axis=1).ravel()  # each window's row shuffled
    return positions[mixed[mixed >= 0]]


class Sampler:
    """The order in which one stream reads its pool of ``n`` samples (positions ``0..n-1``).

    Plain: pass ``epoch`` is the identity, or (``shuffle``) a permutation keyed by the seed and
    the epoch (``reshuffle``) or 0. ``oversample``: class-balanced round robin; each class is read
    in its own order (members permuted per cycle when ``shuffle``), so small classes repeat.
    ``chunk`` > 0 (with ``shuffle``): every such permutation is ``chunked`` in runs of ``chunk``
    positions, ``window`` runs mixed at once (for a class: runs of its members); 0: fully random.
    """

    def __init__(self, labels: np.ndarray, seed: int, *, shuffle: bool, reshuffle: bool,
                 oversample: bool, chunk: int = 0, window: int = 8):
        labels = as_labels(labels)
        self._n = len(labels)
        if self._n == 0:
            raise PicPacValueError("the stream has no samples to read (empty pool: check the split "
                                   "settings and the database)")
        self._seed = check_int(seed, "seed", 0)
        self._shuffle, self._reshuffle, self._oversample = bool(shuffle), bool(reshuffle), bool(oversample)
        self._chunk, self._window = check_int(chunk, "chunk", 0), check_int(window, "window", 1)
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
        return self._permute(members, seeded_rng(self._seed, CLASS, c, self._key(cycle)))

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
        positions = np.arange(self._n, dtype=np.int64)
        if not self._shuffle:
            return positions
        return self._permute(positions, seeded_rng(self._seed, ORDER, key))

    def _permute(self, positions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A shuffled order of ``positions``: fully random, or ``chunked`` when ``chunk`` > 0."""
        if self._chunk:
            return chunked(positions, self._chunk, self._window, rng)
        return rng.permutation(positions)

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
            return self._take_classes(start, count)
        stream = np.arange(start, start + count, dtype=np.int64)
        epochs, items = np.divmod(stream, self._n)
        positions = np.empty(count, np.int64)
        for epoch in np.unique(epochs).tolist():
            chosen = epochs == epoch
            positions[chosen] = self._order(epoch)[items[chosen]]
        return positions, epochs

    def _take_classes(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``take`` of the class round robin, with NumPy: per class, per cycle, one slice."""
        n_classes = len(self._members)
        positions, epochs = np.empty(count, np.int64), np.empty(count, np.int64)
        for c, members in enumerate(self._members):
            first = (c - start) % n_classes  # the first index of the run read from class c
            if first >= count:
                continue
            j = (start + first) // n_classes + np.arange(len(range(first, count, n_classes)), dtype=np.int64)
            cycles, items = np.divmod(j, len(members))
            epochs[first::n_classes] = cycles
            out = positions[first::n_classes]  # a view: filled cycle by cycle
            bounds = np.flatnonzero(np.diff(cycles)) + 1
            for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(j)].tolist()):
                cycle = int(cycles[lo])
                key = self._key(cycle)
                hit = self._class_cache[c]
                if hit is None or hit[0] != key:
                    hit = self._class_cache[c] = (key, self.class_order(c, cycle).tolist())
                out[lo:hi] = np.asarray(hit[1], np.int64)[items[lo:hi]]
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
