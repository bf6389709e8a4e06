"""The chunked (quasi-random) order: a permutation per pass, read a window of runs of the file at a time,
keyed by (seed, epoch) like the fully random one, and with chunk=0 exactly the fully random order."""
from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.sampling import Sampler
from picpac.sampling.common import CLASS, ORDER, seeded_rng
from picpac.sampling.sampler import chunked

SHAPES = [(1, 1), (1, 8), (4, 2), (5, 3), (7, 1), (16, 4), (100, 2), (150, 8)]
"""(chunk, window): runs of one, a last short run (n=150 is no multiple), one run holding every position."""


def check_windows(order: np.ndarray, chunk: int, window: int, positions: np.ndarray) -> None:
    """``order`` (of ``positions``, cut into runs of ``chunk``) reads ``window`` runs at a time: taken by first
    appearance, each ``window`` runs are read whole before any of the next ``window`` runs starts."""
    run = np.searchsorted(positions, order) // chunk
    runs = run.max() + 1
    first, last = np.full(runs, len(order)), np.full(runs, -1)
    np.minimum.at(first, run, np.arange(len(order)))
    np.maximum.at(last, run, np.arange(len(order)))
    groups = np.argsort(first)
    for g in range(window, runs, window):
        assert last[groups[g - window:g]].max() < first[groups[g:g + window]].min(), f"window {g // window - 1}"


@pytest.mark.parametrize("chunk,window", SHAPES)
def test_chunked_is_a_permutation_read_window_by_window(chunk, window):
    positions = np.sort(np.random.default_rng(5).choice(1000, 150, replace=False)).astype(np.int64)
    for seed in range(3):
        order = chunked(positions, chunk, window, np.random.default_rng(seed))
        assert order.dtype == np.int64
        assert np.array_equal(np.sort(order), positions)
        check_windows(order, chunk, window, positions)


def test_chunked_pinned_order_and_its_edges():
    order = chunked(np.arange(10, dtype=np.int64) * 10, 3, 2, np.random.default_rng(0))
    # runs [0 10 20] [30 40 50] [60 70 80] [90], permuted as 2 0 1 3: windows {runs 2, 0} then {1, 3}
    assert np.random.default_rng(0).permutation(4).tolist() == [2, 0, 1, 3]
    assert order.tolist() == [20, 0, 80, 10, 70, 60, 50, 90, 40, 30]
    # runs of one, one at a time: the runs' permutation alone, the fully random order
    assert np.array_equal(chunked(np.arange(50, dtype=np.int64), 1, 1, np.random.default_rng(3)),
                          np.random.default_rng(3).permutation(50))
    # chunk and window beyond the pool are one run (nothing huge is built)
    whole = chunked(np.arange(9, dtype=np.int64), 2**31 - 1, 2**31 - 1, np.random.default_rng(1))
    assert sorted(whole.tolist()) == list(range(9))
    assert chunked(np.empty(0, np.int64), 4, 2, np.random.default_rng(0)).tolist() == []


def sampler(labels: np.ndarray, seed: int = 3, **kw) -> Sampler:
    options = dict(shuffle=True, reshuffle=True, oversample=False) | kw
    return Sampler(labels, seed, **options)


def test_chunk_zero_is_exactly_the_fully_random_order():
    labels = np.arange(90) % 4
    for seed in (0, 7):
        for reshuffle in (False, True):
            for epoch in range(3):
                key = epoch if reshuffle else 0
                expect = seeded_rng(seed, ORDER, key).permutation(90)
                for kw in (dict(), dict(chunk=0), dict(chunk=0, window=3)):
                    s = sampler(labels, seed, reshuffle=reshuffle, **kw)
                    assert np.array_equal(s.pass_order(epoch), expect)
                over = sampler(labels, seed, reshuffle=reshuffle, oversample=True, chunk=0)
                members = np.flatnonzero(labels == 1)
                assert np.array_equal(over.class_order(1, epoch), seeded_rng(seed, CLASS, 1, key).permutation(members))


def test_pass_order_is_chunked_per_epoch_and_seed():
    labels = np.zeros(150)
    for seed in (0, 7):
        s = sampler(labels, seed, chunk=8, window=3)
        orders = [s.pass_order(e) for e in range(4)]
        for e, order in enumerate(orders):
            assert np.array_equal(order, chunked(np.arange(150, dtype=np.int64), 8, 3, seeded_rng(seed, ORDER, e)))
            check_windows(order, 8, 3, np.arange(150))
        assert all(not np.array_equal(orders[i], orders[j]) for i in range(4) for j in range(i + 1, 4))
        again = sampler(labels, seed, chunk=8, window=3)
        assert all(np.array_equal(again.pass_order(e), orders[e]) for e in (3, 1, 0, 2))
        fixed = sampler(labels, seed, reshuffle=False, chunk=8, window=3)
        assert all(np.array_equal(fixed.pass_order(e), orders[0]) for e in range(3))
    assert not np.array_equal(sampler(labels, 0, chunk=8).pass_order(0), sampler(labels, 1, chunk=8).pass_order(0))
    assert not np.array_equal(sampler(labels, 0, chunk=8).pass_order(0), sampler(labels, 0, chunk=9).pass_order(0))


def test_without_shuffle_the_chunk_is_ignored():
    s = sampler(np.arange(30) % 3, shuffle=False, chunk=4, window=2)
    assert np.array_equal(s.pass_order(2), np.arange(30))
    over = sampler(np.arange(30) % 3, shuffle=False, oversample=True, chunk=4)
    assert np.array_equal(over.class_order(2, 5), np.arange(2, 30, 3))


def test_take_at_and_cover_follow_the_chunked_passes():
    s = sampler(np.zeros(37), chunk=5, window=2)
    expect = [(int(p), e) for e in range(5) for p in s.pass_order(e)]
    for start in (0, 1, 36, 37, 100):
        assert list(islice(s.at(start), 60)) == expect[start:start + 60]
        positions, epochs = s.take(start, 60)
        assert list(zip(positions.tolist(), epochs.tolist())) == expect[start:start + 60]
    stream = [p for p, _ in expect]
    assert all(len(set(stream[i:i + s.cover])) == 37 for i in range(len(stream) - s.cover + 1))


def test_oversample_chunks_each_class_members():
    labels = np.repeat([0, 1, 2], [40, 13, 7])[np.random.default_rng(2).permutation(60)]
    s = sampler(labels, oversample=True, chunk=4, window=2)
    for c in range(3):
        members = np.flatnonzero(labels == c)
        for cycle in range(3):
            order = s.class_order(c, cycle)
            assert np.array_equal(order, chunked(members, 4, 2, seeded_rng(3, CLASS, c, cycle)))
            check_windows(order, 4, 2, members)
    # the round robin over those orders: draw j of class c is item j % n_c of its cycle j // n_c
    positions, epochs = s.take(0, 3 * 40)
    assert np.array_equal(labels[positions], np.tile([0, 1, 2], 40))
    assert positions[1::3].tolist() == [int(s.class_order(1, j // 13)[j % 13]) for j in range(40)]
    assert epochs[2::3].tolist() == [j // 7 for j in range(40)]


@pytest.mark.parametrize("kw,error,name", [(dict(chunk=-1), PicPacValueError, "chunk"),
                                           (dict(window=0), PicPacValueError, "window"),
                                           (dict(chunk=True), PicPacTypeError, "chunk"),
                                           (dict(window=2.0), PicPacTypeError, "window")])
def test_bad_chunk_or_window(kw, error, name):
    with pytest.raises(error, match=name):
        sampler(np.zeros(5), **kw)
