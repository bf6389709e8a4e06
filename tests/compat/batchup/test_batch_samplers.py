"""picpac/compat/batchup/batch_samplers.py on its own: batchup's samplers, their index batches, the moments they
draw from the RNG they are handed, and their refusals.

The expected batches and RNG draws are batchup 0.2.3's (``batchup.sampling`` gives the same for these cases,
and its own tests' values are used where it has them), so an experiment that hands a sampler a seeded
``np.random.RandomState`` gets batchup's batches and leaves the RNG where batchup leaves it.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from picpac import sampling
from picpac.compat.batchup.batch_samplers import (AbstractSampler, StandardSampler, SubsetSampler, WeightedSampler,
                                                  WeightedSubsetSampler, num_batches)
from picpac.data_source import ArrayDataSource
from picpac.errors import PicPacTypeError, PicPacValueError


def lists(batches) -> list[list[int]]:
    return [b.tolist() for b in batches]


def permutations_drawn(rng: np.random.RandomState, seed: int, n: int, most: int = 20) -> int:
    """How many ``permutation(n)`` a fresh ``RandomState(seed)`` draws to reach the state ``rng`` is in."""
    want = rng.get_state()
    ref = np.random.RandomState(seed)
    for drawn in range(most + 1):
        got = ref.get_state()
        if got[2] == want[2] and np.array_equal(got[1], want[1]):
            return drawn
        ref.permutation(n)
    raise AssertionError(f"the RNG is at none of the first {most} permutations of {n} from seed {seed}")


# -- num_batches -------------------------------------------------------------------------------------------
def test_num_batches_counts_the_short_last_batch():
    assert [num_batches(n, 5) for n in (0, 1, 5, 20, 21)] == [0, 1, 1, 4, 5]
    assert num_batches(np.int64(7), np.int32(3)) == 3 and type(num_batches(np.int64(7), 3)) is int
    with pytest.raises(PicPacValueError, match=r"^batch_size must be >= 1, got 0$"):
        num_batches(10, 0)
    with pytest.raises(PicPacValueError, match=r"^n must be >= 0, got -1$"):
        num_batches(-1, 5)
    with pytest.raises(PicPacTypeError, match=r"^n must be an int, got float$"):
        num_batches(2.5, 1)
    with pytest.raises(PicPacTypeError, match=r"^batch_size must be an int, got True$"):
        num_batches(10, True)


# -- in order -----------------------------------------------------------------------------------------------
def test_in_order_batches_are_batchups():
    assert lists(StandardSampler(10).in_order_indices_batch_iterator(6)) == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    # repeats: the passes run on across batch boundaries, only the very last batch is short (batchup's test)
    assert lists(StandardSampler(10, repeats=3).in_order_indices_batch_iterator(7)) == [
        [0, 1, 2, 3, 4, 5, 6], [7, 8, 9, 0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 0], [1, 2, 3, 4, 5, 6, 7], [8, 9]]
    assert lists(SubsetSampler(np.array([5, 9, 2]), repeats=2).in_order_indices_batch_iterator(4)) == [[5, 9, 2, 5],
                                                                                                        [9, 2]]
    endless = StandardSampler(3, repeats=-1).in_order_indices_batch_iterator(7)  # batches longer than the data
    assert lists(itertools.islice(endless, 3)) == [[0, 1, 2, 0, 1, 2, 0], [1, 2, 0, 1, 2, 0, 1], [2, 0, 1, 2, 0, 1, 2]]
    assert [StandardSampler(10, r).num_indices_generated() for r in (1, 3, -1)] == [10, 30, np.inf]
    assert SubsetSampler([4, 1], repeats=5).num_indices_generated() == 10


def test_in_order_batches_are_fresh_arrays():
    """Writing into a batch changes neither the sampler's indices nor a later pass (batchup's are new arrays)."""
    indices = np.array([7, 3, 5])
    sampler = SubsetSampler(indices, repeats=2)
    got = []
    for batch in sampler.in_order_indices_batch_iterator(3):
        got.append(batch.tolist())
        batch[:] = -1
    assert got == [[7, 3, 5], [7, 3, 5]] and sampler.indices.tolist() == [7, 3, 5]
    first = next(SubsetSampler(indices).in_order_indices_batch_iterator(2))
    first[0] = -1
    assert indices.tolist() == [7, 3, 5]


def test_empty_samplers_yield_nothing_and_never_spin():
    """batchup loops for ever on an endless sampler of no samples; here it ends, and draws nothing."""
    rng = np.random.RandomState(0)
    for sampler in (StandardSampler(0, repeats=-1), SubsetSampler([], repeats=-1), StandardSampler(0)):
        assert list(sampler.in_order_indices_batch_iterator(4)) == []
        assert list(sampler.shuffled_indices_batch_iterator(4, rng)) == []
    assert permutations_drawn(rng, 0, 0) == 0
    assert SubsetSampler([]).indices.dtype == np.int64 and SubsetSampler([]).length == 0


# -- shuffled -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, batch_size, repeats, drawn, at_end", [
    (10, 7, -1, [0, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8], None),
    (10, 15, 3, [0, 2, 4], 4),       # a batch ending exactly at a pass's end, inside the fill: drawn at once
    (10, 5, 2, [0, 1, 1, 2, 2], 3),  # a batch ending exactly there on its own: drawn by the next batch
    (4, 4, -1, [0, 1, 3, 3, 5], None),
    (10, 7, 3, [0, 1, 2, 3, 3, 4], 4),
])
def test_shuffled_batches_draw_from_the_rng_when_batchup_does(n, batch_size, repeats, drawn, at_end):
    """``drawn[k]``: how many permutations batchup has drawn once k batches were taken (``drawn[0]``: the
    iterator is made, nothing drawn); ``at_end``: once the iterator is exhausted."""
    rng = np.random.RandomState(3)
    it = StandardSampler(n, repeats).shuffled_indices_batch_iterator(batch_size, rng)
    got, counts = [], [permutations_drawn(rng, 3, n)]
    for batch in itertools.islice(it, len(drawn) - 1):
        got.append(batch)
        counts.append(permutations_drawn(rng, 3, n))
    assert counts == drawn
    ref = np.random.RandomState(3)
    stream = np.concatenate([ref.permutation(n) for _ in range(drawn[-1])])
    assert np.array_equal(np.concatenate(got), stream[:sum(len(b) for b in got)])
    if at_end is not None:
        assert next(it, None) is None and permutations_drawn(rng, 3, n) == at_end
        assert sum(len(b) for b in got) == n * repeats


def test_subset_sampler_maps_and_shuffles_its_indices():
    indices = np.array([29, 3, 17, 8, 11], np.int32)
    sampler = SubsetSampler(indices)
    assert sampler.map_indices(np.array([0, 4, 4])).tolist() == [29, 11, 11]
    batches = list(sampler.shuffled_indices_batch_iterator(2, np.random.RandomState(5)))
    assert lists(batches) == [[11, 29], [3, 17], [8]]  # batchup 0.2.3: RandomState(5).permutation(indices)
    assert all(b.dtype == np.int32 for b in batches)  # the indices' own dtype, as in batchup
    assert next(sampler.in_order_indices_batch_iterator(2)).dtype == np.int32
    mapping = np.arange(4)
    assert StandardSampler(4).map_indices(mapping) is mapping  # no mapping: the very array


def test_samplers_take_a_numpy_generator_too():
    got = lists(StandardSampler(6).shuffled_indices_batch_iterator(4, np.random.default_rng(1)))
    order = np.random.default_rng(1).permutation(6).tolist()
    assert got == [order[:4], order[4:]]
    weights = np.array([1.0, 0.0, 3.0])
    draws = next(WeightedSampler(weights).shuffled_indices_batch_iterator(8, np.random.default_rng(2)))
    assert draws.tolist() == np.random.default_rng(2).choice(3, size=(8,), p=weights / 4).tolist()


# -- weighted -----------------------------------------------------------------------------------------------
def test_weighted_draws_are_batchups():
    weights = np.array([0.1, 0.2, 0.3, 0.4])
    sampler = WeightedSampler(weights)
    assert sampler.num_indices_generated() == np.inf and sampler.length == 4
    rng = np.random.RandomState(12345)
    it = sampler.shuffled_indices_batch_iterator(5, rng)
    assert permutations_drawn(rng, 12345, 1) == 0  # nothing drawn until a batch is asked for
    drawn = np.concatenate(list(itertools.islice(it, 4)))
    assert drawn.tolist() == np.random.RandomState(12345).choice(4, size=(20,), p=weights).tolist()  # batchup's test
    again = WeightedSampler(weights * 7).shuffled_indices_batch_iterator(20, np.random.RandomState(12345))
    assert next(again).tolist() == drawn.tolist()  # weights are normalised
    assert np.array_equal(sampler.map_indices(np.array([3, 0])), [3, 0])
    indices = np.array([0, 2, 4])
    sub_weights = np.array([0.1, 0.3, 0.5])
    sub = WeightedSubsetSampler(sub_weights, indices)
    assert sub.num_indices_generated() == np.inf and sub.map_indices(np.array([2, 0])).tolist() == [4, 0]
    draws = list(itertools.islice(sub.shuffled_indices_batch_iterator(6, np.random.RandomState(7)), 3))
    ref = np.random.RandomState(7)
    assert lists(draws) == [ref.choice(indices, size=(6,), p=sub_weights / 0.9).tolist() for _ in range(3)]


def test_class_balancing_weights_are_batchups():
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    expected = np.array([1.0 / 6.0] * 2 + [1.0 / 9.0] * 3 + [1.0 / 15.0] * 5)
    assert (WeightedSampler.class_balancing_sample_weights(y) == expected).all()  # exactly, as batchup's test
    assert (WeightedSampler.class_balancing_sample_weights(y * 2 + 1) == expected).all()  # classes with no sample
    drawn = np.concatenate(list(itertools.islice(
        WeightedSampler.class_balancing_sampler(y).shuffled_indices_batch_iterator(10, np.random.RandomState(12345)),
        10)))
    assert drawn.tolist() == np.random.RandomState(12345).choice(10, size=(100,), p=expected).tolist()
    # n_classes (batchup's older signature): classes with no sample get no weight
    assert WeightedSampler.class_balancing_sample_weights(np.array([0, 0, 2]), n_classes=5).tolist() == [0.25, 0.25, 0.5]
    indices = np.array([1, 3, 5, 6, 9])  # classes 0, 1, 2, 2, 2
    sub = WeightedSubsetSampler.class_balancing_sampler(y, indices)
    assert sub.indices.tolist() == indices.tolist()
    assert np.allclose(sub.sub_weights, [1 / 3, 1 / 3, 1 / 9, 1 / 9, 1 / 9])
    assert np.array_equal(WeightedSubsetSampler.class_balancing_sampler(y, indices, n_classes=7).sub_weights,
                          sub.sub_weights)


# -- refusals -----------------------------------------------------------------------------------------------
def test_refusals_name_the_argument_and_are_batchups_error_types():
    for bad in (0, -2):
        with pytest.raises(PicPacValueError, match=rf"^repeats must be >= 1, or -1 to repeat endlessly, got {bad}$"):
            StandardSampler(10, repeats=bad)
        with pytest.raises(ValueError, match="repeats must be >= 1"):  # batchup raised ValueError
            SubsetSampler([1, 2], repeats=bad)
    with pytest.raises(PicPacTypeError, match=r"^repeats must be an int, got float$"):
        StandardSampler(10, repeats=1.5)
    with pytest.raises(PicPacValueError, match=r"^length must be >= 0, got -1$"):
        StandardSampler(-1)
    with pytest.raises(PicPacTypeError, match=r"^indices must be a one-dimensional array of integers, got float64 "
                                              r"of shape \(2,\)$"):
        SubsetSampler([0.0, 1.0])
    with pytest.raises(PicPacTypeError, match=r"got int64 of shape \(2, 2\)$"):
        SubsetSampler(np.zeros((2, 2), np.int64))
    with pytest.raises(PicPacTypeError, match=r"^indices must be .* got bool of shape \(2,\)$"):
        WeightedSubsetSampler([1, 1], np.array([True, False]))
    sampler = StandardSampler(10)
    with pytest.raises(PicPacValueError, match=r"^batch_size must be >= 1, got 0$"):  # when the iterator is made
        sampler.in_order_indices_batch_iterator(0)
    with pytest.raises(PicPacValueError, match=r"^batch_size must be >= 1, got 0$"):
        sampler.shuffled_indices_batch_iterator(0, np.random.RandomState(0))
    with pytest.raises(PicPacValueError, match=r"^batch_size must be >= 1, got -3$"):
        WeightedSampler([1, 2]).shuffled_indices_batch_iterator(-3, np.random.RandomState(0))
    with pytest.raises(PicPacTypeError, match=r"^shuffle_rng must be a np.random.RandomState \(or Generator\), "
                                              r"got int$"):
        SubsetSampler([1, 2]).shuffled_indices_batch_iterator(2, 42)
    with pytest.raises(PicPacValueError, match=r"^weights must be one-dimensional, got shape \(2, 2\)$"):
        WeightedSampler(np.ones((2, 2)))
    for bad in ([1.0, -0.5], [1.0, np.nan], [np.inf, 1.0]):
        with pytest.raises(PicPacValueError, match=r"^weights must be finite and >= 0$"):
            WeightedSampler(bad)
    with pytest.raises(PicPacValueError, match=r"^sub_weights must be finite and >= 0$"):
        WeightedSubsetSampler([-1.0, 2.0], [0, 1])
    for weights in (np.zeros(3), []):
        with pytest.raises(PicPacValueError, match=r"^weights must not sum to 0$"):
            WeightedSampler(weights)
    with pytest.raises(PicPacValueError, match=r"^sub_weights must not sum to 0$"):
        WeightedSubsetSampler(np.zeros(2), [0, 1])
    with pytest.raises(PicPacValueError, match=r"^sub_weights and indices must have the same length, got 4 and 3$"):
        WeightedSubsetSampler(np.ones(4), np.arange(3))
    for y in ([0, -1], [0.0, 1.0], [[0, 1]]):
        with pytest.raises(PicPacValueError, match=r"^y must be a one-dimensional array of class indices >= 0$"):
            WeightedSampler.class_balancing_sample_weights(np.array(y))
    with pytest.raises(PicPacValueError, match=r"^n_classes must be >= 0, got -1$"):
        WeightedSampler.class_balancing_sample_weights(np.array([0, 1]), n_classes=-1)


def test_random_samplers_refuse_in_order_iteration_at_once():
    with pytest.raises(NotImplementedError, match=r"^WeightedSampler draws at random: in-order iteration is not "
                                                  r"supported \(pass shuffle=True or a RandomState\)$"):
        WeightedSampler([1.0, 1.0]).in_order_indices_batch_iterator(2)
    with pytest.raises(NotImplementedError, match=r"^WeightedSubsetSampler draws at random"):
        WeightedSubsetSampler([1.0], [0]).in_order_indices_batch_iterator(2)


def test_the_abstract_sampler_names_the_class_that_lacks_a_method():
    class Mine(AbstractSampler):
        pass

    mine = Mine()
    with pytest.raises(NotImplementedError, match=r"^num_indices_generated is abstract in Mine$"):
        mine.num_indices_generated()
    with pytest.raises(NotImplementedError, match=r"^in_order_indices_batch_iterator is abstract in Mine$"):
        mine.in_order_indices_batch_iterator(5)
    with pytest.raises(NotImplementedError, match=r"^shuffled_indices_batch_iterator is abstract in Mine$"):
        mine.shuffled_indices_batch_iterator(5, np.random.RandomState(0))
    indices = np.array([2, 0])
    assert mine.map_indices(indices) is indices

# -- through a data source -------------------------------------------------------------------------------
def test_class_balancing_weights_and_draws():
    y = np.array([0] * 90 + [1] * 9 + [2] * 1)
    w = sampling.WeightedSampler.class_balancing_sample_weights(y)
    assert w[0] == 1.0 / (90 * 3) and w[95] == 1.0 / (9 * 3) and w[99] == 1.0 / 3 and np.isclose(w.sum(), 1)
    holes = sampling.WeightedSampler.class_balancing_sample_weights(y * 2 + 1)  # classes 1, 3, 5
    assert np.array_equal(holes, w)
    sampler = sampling.WeightedSampler.class_balancing_sampler(y)
    ds = ArrayDataSource([np.arange(100), y], sampler=sampler)
    assert ds.num_samples() == np.inf
    rng = np.random.RandomState(12345)
    batches = list(itertools.islice(ds.batch_iterator(300, shuffle=rng), 20))
    ref = np.random.RandomState(12345)
    assert np.array_equal(np.concatenate([b[0] for b in batches]), ref.choice(100, size=6000, p=w))
    share = np.bincount(np.concatenate([b[1] for b in batches]), minlength=3) / 6000
    assert np.allclose(share, 1 / 3, atol=0.03)  # balanced, whatever the imbalance
    with pytest.raises(NotImplementedError):
        next(ds.batch_iterator(10))
    subset = np.arange(0, 100, 2)
    sub = sampling.WeightedSubsetSampler.class_balancing_sampler(y, subset)
    draws = next(sub.shuffled_indices_batch_iterator(500, np.random.RandomState(0)))
    assert set(draws.tolist()) <= set(subset.tolist())
    with pytest.raises(ValueError, match="must not sum to 0"):
        sampling.WeightedSampler(np.zeros(3))
    with pytest.raises(ValueError, match="same length"):
        sampling.WeightedSubsetSampler(np.ones(4), np.arange(3))
    assert sampling.num_batches(20, 5) == 4 and sampling.num_batches(21, 5) == 5
