"""Properties of picpac.sampling: fold assignment, split selection and the Sampler's order."""
from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacError, PicPacValueError
from picpac.sampling import Sampler, assign_folds, select
from picpac.sampling.common import class_codes
from picpac.sampling.sampler import share, shard

SEEDS = range(5)
KS = (2, 3, 5, 7)
SIZES = (50, 23, 7)          # imbalanced classes 0, 1, 2


def make_labels(seed: int = 123) -> np.ndarray:
    """80 float64 labels, classes 0/1/2 of sizes 50/23/7, in shuffled record order."""
    labels = np.repeat(np.arange(len(SIZES), dtype=np.float64), SIZES)
    return np.random.default_rng(seed).permutation(labels)


def no_groups(n: int) -> np.ndarray:
    return np.full(n, picpac.NO_GROUP, dtype=np.int64)


def make_groups(n: int, seed: int = 7) -> np.ndarray:
    """About half the records in groups of 2..4 (scattered record indices), the rest ungrouped."""
    rng = np.random.default_rng(seed)
    groups = no_groups(n)
    members = rng.permutation(n)[: n // 2]
    gid, i = 1000, 0
    while i < len(members):
        size = int(rng.integers(2, 5))
        groups[members[i:i + size]] = gid
        gid, i = gid + 17, i + size
    return groups


def unit_ids(groups: np.ndarray) -> np.ndarray:
    """One id per unit: the group id, or a unique negative-free id for ungrouped records."""
    ids = groups.copy()
    free = groups == picpac.NO_GROUP
    ids[free] = -1 - np.flatnonzero(free)
    return ids


def reader_like(labels: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strided views into a structured array, as Reader.labels / Reader.groups are."""
    index = np.zeros(len(labels), dtype=[("offset", "<u8"), ("label", "<f8"), ("group", "<i8")])
    index["label"], index["group"] = labels, groups
    return index["label"], index["group"]


# ---------------------------------------------------------------------------------------------
# assign_folds / select

@pytest.mark.parametrize("stratify", [False, True])
@pytest.mark.parametrize("grouped", [False, True])
def test_folds_partition_the_records(stratify, grouped):
    labels = make_labels()
    groups = make_groups(len(labels)) if grouped else no_groups(len(labels))
    everything = np.arange(len(labels))
    for seed in SEEDS:
        for k in KS:
            folds = assign_folds(labels, groups, k, seed, stratify=stratify)
            assert folds.dtype == np.int32 and folds.shape == labels.shape
            assert folds.min() >= 0 and folds.max() < k
            vals = [select(folds, k, f, True) for f in range(k)]
            for v in vals:
                assert v.dtype == np.int64 and np.all(np.diff(v) > 0)
            for a in range(k):
                for b in range(a + 1, k):
                    assert not np.intersect1d(vals[a], vals[b]).size
            assert np.array_equal(np.sort(np.concatenate(vals)), everything)
            for f in range(k):
                train = select(folds, k, f, False)
                assert np.array_equal(train, np.setdiff1d(everything, vals[f]))


def test_plain_folds_round_robin_sizes():
    labels = make_labels()
    for seed in SEEDS:
        for k in KS:
            sizes = np.bincount(assign_folds(labels, no_groups(80), k, seed), minlength=k)
            assert sizes.max() - sizes.min() <= 1


def test_stratified_folds_balance_each_class_and_size():
    labels = make_labels()
    for seed in SEEDS:
        for k in KS:
            for shuffle in (True, False):
                folds = assign_folds(labels, no_groups(80), k, seed, shuffle=shuffle, stratify=True)
                sizes = np.bincount(folds, minlength=k)
                assert sizes.max() - sizes.min() <= 1
                for c in range(len(SIZES)):
                    per_fold = np.bincount(folds[labels == c], minlength=k)
                    assert per_fold.sum() == SIZES[c]
                    assert per_fold.max() - per_fold.min() <= 1, (seed, k, c, per_fold)


@pytest.mark.parametrize("stratify", [False, True])
def test_groups_never_straddle_folds(stratify):
    labels = make_labels()
    groups = make_groups(80)
    assert (groups != picpac.NO_GROUP).sum() == 40
    ids = unit_ids(groups)
    uniq, unit_of = np.unique(ids, return_inverse=True)
    unit_sizes = np.bincount(unit_of)
    n_units, max_size = len(uniq), int(unit_sizes.max())
    for seed in SEEDS:
        for k in KS:
            folds = assign_folds(labels, groups, k, seed, stratify=stratify)
            for g in np.unique(groups[groups != picpac.NO_GROUP]):
                assert len(set(folds[groups == g].tolist())) == 1
            sizes = np.bincount(folds, minlength=k)
            if not stratify:
                # Greedy "fewest records first": each placement keeps max - min <= largest unit.
                assert sizes.max() - sizes.min() <= max_size, (seed, k, sizes)
            else:
                # Units are dealt round robin, so unit counts per fold differ by at most 1 and each
                # fold holds between floor(U/k) units of 1 record and ceil(U/k) of the largest size.
                units_per_fold = np.bincount(folds[np.unique(unit_of, return_index=True)[1]], minlength=k)
                assert units_per_fold.max() - units_per_fold.min() <= 1
                assert sizes.min() >= n_units // k
                assert sizes.max() <= -(-n_units // k) * max_size


def test_greedy_grouped_example():
    # Units in record order: {0,1,2} (group 5), {3}, {4}, {5,6} (group 9), {7}.
    groups = np.array([5, 5, 5, picpac.NO_GROUP, picpac.NO_GROUP, 9, 9, picpac.NO_GROUP], dtype=np.int64)
    folds = assign_folds(np.zeros(8), groups, 2, 0, shuffle=False)
    # {0,1,2}->0 (3,0); {3}->1 (3,1); {4}->1 (3,2); {5,6}->1 (3,4); {7}->0 (4,4)
    assert folds.tolist() == [0, 0, 0, 1, 1, 1, 1, 0]


def test_stratified_unit_class_is_majority_label():
    labels = np.array([0, 0, 1, 1, 1, 0], dtype=np.float64)
    groups = np.array([picpac.NO_GROUP, picpac.NO_GROUP, 7, 7, picpac.NO_GROUP, 7], dtype=np.int64)
    # Units: {0} c0, {1} c0, {2,3,5} labels 1,1,0 -> c1, {4} c1. Deal: c0: u0->0 u1->1; c1: u2->0, u4->1.
    folds = assign_folds(labels, groups, 2, 0, shuffle=False, stratify=True)
    assert folds.tolist() == [0, 1, 0, 0, 1, 0]
    # A tie (one 0, one 1) goes to the smaller label: unit {0,1} is class 0, dealt before {2}.
    folds = assign_folds(np.array([1.0, 0.0, 0.0]), np.array([3, 3, picpac.NO_GROUP]), 2, 0,
                         shuffle=False, stratify=True)
    assert folds.tolist() == [0, 0, 1]


def test_folds_are_deterministic_per_seed():
    labels = make_labels()
    groups = make_groups(80)
    for stratify in (False, True):
        for g in (no_groups(80), groups):
            for k in KS:
                by_seed = [assign_folds(labels, g, k, s, stratify=stratify) for s in SEEDS]
                again = [assign_folds(labels.copy(), g.copy(), k, s, stratify=stratify) for s in SEEDS]
                for a, b in zip(by_seed, again):
                    assert np.array_equal(a, b)
                for i in range(len(by_seed)):
                    for j in range(i + 1, len(by_seed)):
                        assert not np.array_equal(by_seed[i], by_seed[j]), (stratify, k, i, j)


def test_unshuffled_folds_are_record_index_mod_k():
    labels = make_labels()
    for k in KS:
        for seed in SEEDS:
            folds = assign_folds(labels, no_groups(80), k, seed, shuffle=False)
            assert np.array_equal(folds, np.arange(80) % k)


def test_reader_views_and_no_global_rng():
    labels, groups = reader_like(make_labels(), make_groups(80))
    assert not labels.flags.c_contiguous
    np.random.seed(1)
    state = np.random.get_state()[1].copy()
    folds = assign_folds(labels, groups, 3, 4, stratify=True)
    assert np.array_equal(folds, assign_folds(np.ascontiguousarray(labels), np.ascontiguousarray(groups),
                                              3, 4, stratify=True))
    list(islice(Sampler(labels, 4, shuffle=True, reshuffle=True, oversample=True).at(0), 200))
    Sampler(labels, 4, shuffle=True, reshuffle=True, oversample=False).pass_order(3)
    assert np.array_equal(np.random.get_state()[1], state)


def test_single_fold_and_empty():
    labels = make_labels()
    folds = assign_folds(labels, make_groups(80), 1, 3, stratify=True)
    assert folds.dtype == np.int32 and not folds.any()
    for negate in (False, True):
        assert np.array_equal(select(folds, 1, 0, negate), np.arange(80))
    assert assign_folds(np.zeros(0), np.zeros(0, np.int64), 3, 0).shape == (0,)
    # more folds than records: some folds are simply empty
    folds = assign_folds(np.zeros(2), no_groups(2), 5, 0)
    assert sorted(np.bincount(folds, minlength=5).tolist()) == [0, 0, 0, 1, 1]


# ---------------------------------------------------------------------------------------------
# Sampler

def test_pass_order_is_permutation_and_identity_without_shuffle():
    labels = make_labels()
    for seed in SEEDS:
        for reshuffle in (False, True):
            for oversample in (False, True):
                s = Sampler(labels, seed, shuffle=True, reshuffle=reshuffle, oversample=oversample)
                assert len(s) == 80
                for epoch in range(3):
                    order = s.pass_order(epoch)
                    assert np.array_equal(np.sort(order), np.arange(80))
        plain = Sampler(labels, seed, shuffle=False, reshuffle=True, oversample=False)
        for epoch in range(3):
            assert np.array_equal(plain.pass_order(epoch), np.arange(80))


def test_reshuffle_controls_per_epoch_order():
    labels = make_labels()
    for seed in SEEDS:
        fixed = Sampler(labels, seed, shuffle=True, reshuffle=False, oversample=False)
        first = fixed.pass_order(0)
        assert not np.array_equal(first, np.arange(80))
        assert all(np.array_equal(fixed.pass_order(e), first) for e in range(1, 4))
        moving = Sampler(labels, seed, shuffle=True, reshuffle=True, oversample=False)
        orders = [moving.pass_order(e) for e in range(4)]
        assert all(not np.array_equal(orders[i], orders[j]) for i in range(4) for j in range(i + 1, 4))
        again = Sampler(labels, seed, shuffle=True, reshuffle=True, oversample=False)
        assert all(np.array_equal(again.pass_order(e), orders[e]) for e in (3, 0, 2, 1))
        # the caller cannot damage the cached order
        orders[0][:] = 0
        assert np.array_equal(np.sort(moving.pass_order(0)), np.arange(80))
    a = Sampler(labels, 0, shuffle=True, reshuffle=True, oversample=False).pass_order(0)
    b = Sampler(labels, 1, shuffle=True, reshuffle=True, oversample=False).pass_order(0)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("shuffle,reshuffle", [(False, False), (True, False), (True, True)])
def test_at_is_concatenated_passes(shuffle, reshuffle):
    labels = make_labels()
    for seed in SEEDS:
        s = Sampler(labels, seed, shuffle=shuffle, reshuffle=reshuffle, oversample=False)
        expect = [(int(p), e) for e in range(6) for p in s.pass_order(e)]
        for start in (0, 1, 37, 79, 80, 203):
            got = list(islice(s.at(start), 250))
            assert got == expect[start:start + 250]
            assert all(type(p) is int and type(e) is int for p, e in got[:3])


def test_oversample_endless_windows_and_repeats():
    labels = make_labels()
    classes, codes = class_codes(labels, "oversample")
    n_classes = len(classes)
    for seed in SEEDS:
        for reshuffle in (False, True):
            s = Sampler(labels, seed, shuffle=True, reshuffle=reshuffle, oversample=True)
            assert s.n_classes == 3
            items = list(islice(s.at(0), 3 * 50))        # 50 draws per class
            for w in range(len(items) - n_classes + 1):
                window = [codes[p] for p, _ in items[w:w + n_classes]]
                assert sorted(window) == list(range(n_classes))
            per_class: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
            for p, e in items:
                per_class[int(codes[p])].append((p, e))
            # the big class is still in cycle 0; the small ones have wrapped
            assert {e for _, e in per_class[0]} == {0}
            assert max(e for _, e in per_class[1]) == 2        # 50 draws of 23 -> cycles 0..2
            assert max(e for _, e in per_class[2]) == 7        # 50 draws of 7 -> cycles 0..7
            for c in range(n_classes):
                draws, size = per_class[c], SIZES[c]
                members = np.flatnonzero(codes == c)
                cycles = [[p for p, e in draws if e == cyc] for cyc in range(len(draws) // size)]
                for cyc in cycles:                         # each full cycle reads each member once
                    assert np.array_equal(np.sort(cyc), members)
                if c == 2:
                    assert (cycles[0] == cycles[1]) == (not reshuffle)
            # any start gives the same continuation
            longer = list(islice(s.at(0), 200))
            assert longer[:150] == items
            for start in (1, 5, 64, 149):
                assert list(islice(s.at(start), 40)) == longer[start:start + 40]


def test_oversample_unshuffled_class_order():
    labels = make_labels()
    _, codes = class_codes(labels, "oversample")
    s = Sampler(labels, 0, shuffle=False, reshuffle=True, oversample=True)
    items = list(islice(s.at(0), 30))
    for c in range(3):
        got = [p for p, _ in items[c::3]]
        members = np.flatnonzero(codes == c).tolist()
        assert got == (members * 2)[:10]


def test_oversample_one_pass():
    labels = make_labels()
    _, codes = class_codes(labels, "oversample")
    for seed in SEEDS:
        for reshuffle in (False, True):
            s = Sampler(labels, seed, shuffle=True, reshuffle=reshuffle, oversample=True)
            order = s.pass_order(0)
            assert np.array_equal(np.sort(order), np.arange(80))
            seq = codes[order].tolist()
            # round robin of all 3 classes until the 7-sample class runs out, then of 2, then 1
            assert seq[:21] == [0, 1, 2] * 7
            assert seq[21:21 + 32] == [0, 1] * 16
            assert seq[53:] == [0] * 27
            # within a pass each class is read in its cycle-`epoch` order, as the endless stream does
            endless = list(islice(s.at(0), 21))
            assert [p for p, _ in endless] == order[:21].tolist()
            assert (np.array_equal(s.pass_order(1), order)) == (not reshuffle)


# ---------------------------------------------------------------------------------------------
# errors

def test_errors():
    labels = make_labels()
    frac = labels + 0.5
    for bad_labels in (frac, np.array([0.0, np.nan]), np.array([1.0, np.inf])):
        with pytest.raises(PicPacValueError, match="stratify"):
            assign_folds(bad_labels, no_groups(len(bad_labels)), 2, 0, stratify=True)
        with pytest.raises(PicPacValueError, match="oversample"):
            Sampler(bad_labels, 0, shuffle=True, reshuffle=True, oversample=True)
    # non-integral labels are fine when classes are not needed
    assign_folds(frac, no_groups(80), 2, 0)
    Sampler(frac, 0, shuffle=True, reshuffle=True, oversample=False)
    for k in (0, -1):
        with pytest.raises(PicPacValueError, match="k"):
            assign_folds(labels, no_groups(80), k, 0)
    for k in (2.0, "2", True, None):
        with pytest.raises(PicPacError):
            assign_folds(labels, no_groups(80), k, 0)
    with pytest.raises(PicPacValueError, match="length"):
        assign_folds(labels, no_groups(79), 2, 0)
    folds = assign_folds(labels, no_groups(80), 3, 0)
    for fold in (-1, 3, 10):
        with pytest.raises(PicPacValueError, match="split_fold"):
            select(folds, 3, fold, True)
    with pytest.raises(PicPacValueError, match="split_fold"):
        select(folds, 1, 1, False)
    with pytest.raises(PicPacValueError, match="no samples"):
        Sampler(np.zeros(0), 0, shuffle=True, reshuffle=True, oversample=False)
    with pytest.raises(PicPacValueError, match="no samples"):
        Sampler(np.zeros(0), 0, shuffle=True, reshuffle=True, oversample=True)
    with pytest.raises(PicPacValueError):
        Sampler(labels, -1, shuffle=True, reshuffle=True, oversample=False)
    s = Sampler(labels, 0, shuffle=True, reshuffle=True, oversample=False)
    with pytest.raises(PicPacValueError):
        s.pass_order(-1)
    with pytest.raises(PicPacValueError):
        next(s.at(-1))
    assert issubclass(PicPacValueError, PicPacError) and issubclass(PicPacValueError, ValueError)


# ---------------------------------------------------------------------------------------------
# share: a rank's part of an epoch's order

@pytest.mark.parametrize("count", [0, 1, 5, 23, 24])
@pytest.mark.parametrize("start", [0, 3])
def test_share_is_distributed_samplers_split(count, start):
    if start > count:
        return
    left = count - start
    for world in range(1, 6):
        for pad in (True, False):
            shares = [share(count, r, world, pad=pad, start=start) for r in range(world)]
            size = -(-left // world) if pad else left // world
            assert all(len(index) == size and index.dtype == np.int64 for index, _ in shares)
            padded = np.resize(np.arange(start, count), size * world)  # torch: indices += indices[:padding]
            for rank, (index, real) in enumerate(shares):
                assert index.tolist() == padded[rank::world].tolist()
                assert real == sum(rank + i * world < left for i in range(size))  # the real ones come first
            real = sorted(i for index, n in shares for i in index[:n].tolist())
            assert real == (list(range(start, count)) if pad else list(range(start, start + size * world)))
            # after every rank took c items, the items taken are the first c * world of the split
            for c in range(size + 1):
                taken = sorted(i for index, _ in shares for i in index[:c].tolist())
                assert sorted(set(taken)) == list(range(start, start + min(c * world, left)))


def test_share_builds_nothing_of_the_world_size_and_checks_its_arguments():
    assert shard is share  # the old name
    index, real = share(10, 2**31 - 2, 2**31 - 1)
    assert index.tolist() == [(2**31 - 2) % 10] and real == 0
    with pytest.raises(PicPacValueError, match=r"rank must be in \[0, world_size=2\)"):
        share(10, 2, 2)
    with pytest.raises(PicPacValueError, match="start"):
        share(10, 0, 2, start=11)
