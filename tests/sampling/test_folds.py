"""picpac.sampling.folds, rule by rule: the documented fold assignment written out with NumPy for plain,
stratified and grouped units, and select's records and refusals."""
from __future__ import annotations

import numpy as np
import pytest

from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.file.layout import NO_GROUP
from picpac.sampling.common import FOLDS
from picpac.sampling.folds import assign_folds, select


def free(n: int) -> np.ndarray:
    return np.full(n, NO_GROUP, np.int64)


@pytest.mark.parametrize("seed, k", [(0, 2), (3, 5), (2**40, 7)])
def test_shuffled_folds_deal_a_seeded_permutation_round_robin(seed, k):
    """Units ordered by the permutation of SeedSequence([seed, FOLDS]), fold i % k for the i-th: what the
    stream and `picpac split` both rely on."""
    order = np.random.default_rng(np.random.SeedSequence([seed, FOLDS])).permutation(30)
    want = np.empty(30, np.int32)
    want[order] = np.arange(30) % k
    got = assign_folds(np.zeros(30), free(30), k, seed)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_stratified_deal_goes_class_by_class_and_continues_across_classes():
    labels = np.array([1, 0, 1, 0, 2, 0], np.float64)
    # classes in order: 0 -> records 1, 3, 5; 1 -> 0, 2; 2 -> 4; dealt 0, 1, 0 | 1, 0 | 1
    assert assign_folds(labels, free(6), 2, 0, shuffle=False, stratify=True).tolist() == [1, 0, 0, 1, 1, 0]
    classes = np.random.default_rng(0).integers(0, 3, 200)
    order = np.random.default_rng(np.random.SeedSequence([9, FOLDS])).permutation(200)
    dealt = order[np.argsort(classes[order], kind="stable")]  # each class in the permutation's order
    want = np.empty(200, np.int32)
    want[dealt] = np.arange(200) % 4
    assert np.array_equal(assign_folds(classes.astype(np.float64), free(200), 4, 9, stratify=True), want)


def test_grouped_units_go_to_the_fold_with_fewest_records_ties_to_the_lowest():
    groups = np.array([8, 8, 8, 8, NO_GROUP, 3, 3, NO_GROUP, NO_GROUP], np.int64)
    # units by first record: {0-3} 4 -> f0; {4} -> f1; {5,6} -> f2; {7} -> f1 (1 < 2); {8} -> f2 (2 = 2 < 4: lower)
    got = assign_folds(np.zeros(9), groups, 3, 0, shuffle=False)
    assert got.tolist() == [0, 0, 0, 0, 1, 2, 2, 1, 1]


def test_more_folds_than_grouped_units_leaves_folds_empty():
    groups = np.array([1, 1, 2, 2, 2], np.int64)
    assert assign_folds(np.zeros(5), groups, 4, 0, shuffle=False).tolist() == [0, 0, 1, 1, 1]


def test_labels_of_any_numeric_type_give_the_same_folds():
    labels = np.array([3, 1, 3, 2, 1, 1, 2, 3])
    want = assign_folds(labels.astype(np.float64), free(8), 3, 1, stratify=True)
    for dtype in (np.int64, np.uint8, np.float32):
        assert np.array_equal(assign_folds(labels.astype(dtype), free(8), 3, 1, stratify=True), want)
    assert np.array_equal(assign_folds(labels.tolist(), free(8).tolist(), 3, 1, stratify=True), want)


def test_assign_folds_refusals_name_the_argument():
    with pytest.raises(PicPacValueError, match=r"^k \(number of folds\) must be >= 1, got 0$"):
        assign_folds(np.zeros(3), free(3), 0, 0)
    with pytest.raises(PicPacValueError, match=r"^seed must be >= 0, got -1$"):
        assign_folds(np.zeros(3), free(3), 2, -1)
    with pytest.raises(PicPacTypeError, match=r"^seed must be an int, got float$"):
        assign_folds(np.zeros(3), free(3), 2, 1.0)
    with pytest.raises(PicPacValueError, match=r"^labels and groups must be one-dimensional and of equal length, "
                                               r"got shapes \(3,\) and \(1, 3\)$"):
        assign_folds(np.zeros(3), free(3)[None], 2, 0)
    with pytest.raises(PicPacValueError, match="^stratify needs integral class labels, but record 1 has label 0.5"):
        assign_folds(np.array([0.0, 0.5]), free(2), 2, 0, stratify=True)
    with pytest.raises(PicPacValueError, match="^stratify needs integral class labels"):
        assign_folds(np.array([0.0, 0.5]), free(2), 1, 0, stratify=True)  # checked even for one fold


def test_select_keeps_the_fold_or_the_others_ascending():
    folds = np.array([2, 0, 1, 2, 0, 1, 2], np.int32)
    assert select(folds, 3, 2, True).tolist() == [0, 3, 6]
    assert select(folds, 3, 2, False).tolist() == [1, 2, 4, 5]
    assert select(folds, 3, 1, True).dtype == np.int64
    assert select(folds[:0], 3, 0, False).tolist() == []


def test_select_with_one_fold_keeps_everything():
    for negate in (False, True):
        got = select(np.zeros(4, np.int32), 1, 0, negate)
        assert got.dtype == np.int64 and got.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("k, fold, message", [
    (3, 3, r"^split_fold must be in 0\.\.2 for split=3, got 3$"),
    (3, -1, r"^split_fold must be in 0\.\.2 for split=3, got -1$"),
    (0, 0, r"^split \(number of folds\) must be >= 1, got 0$"),
])
def test_select_refusals_name_the_stream_keys(k, fold, message):
    with pytest.raises(PicPacValueError, match=message):
        select(np.zeros(3, np.int32), k, fold, False)


def test_select_refuses_a_fold_that_is_no_int():
    with pytest.raises(PicPacTypeError, match=r"^split_fold must be an int, got True$"):
        select(np.zeros(3, np.int32), 3, True, False)
