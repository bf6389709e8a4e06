"""picpac.sampling.common: the int checks every sampling argument goes through, the seeded streams (one per
purpose, never the global RNG), and labels as float64 and as class codes."""
from __future__ import annotations

import numpy as np
import pytest

from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.sampling.common import CLASS, FOLDS, ORDER, as_labels, check_int, class_codes, seeded_rng


@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3), np.int32(3)])
def test_check_int_gives_a_python_int(value):
    out = check_int(value, "k")
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_check_int_refuses_bools_naming_the_argument(value):
    with pytest.raises(PicPacTypeError, match=rf"^seed must be an int, got {value!r}$"):
        check_int(value, "seed")


@pytest.mark.parametrize("value, kind", [(2.0, "float"), ("2", "str"), (None, "NoneType"), (np.float64(2), "float64")])
def test_check_int_refuses_other_types_naming_them(value, kind):
    with pytest.raises(PicPacTypeError, match=rf"^split_fold must be an int, got {kind}$"):
        check_int(value, "split_fold")


def test_check_int_minimum():
    assert check_int(0, "seed", 0) == 0 and check_int(-5, "shift") == -5
    with pytest.raises(PicPacValueError, match=r"^k \(number of folds\) must be >= 1, got 0$"):
        check_int(0, "k (number of folds)", 1)


def test_purpose_words_are_distinct_ascii_tags():
    assert [w.to_bytes(4, "big") for w in (FOLDS, ORDER, CLASS)] == [b"fold", b"ordr", b"clss"]


def test_seeded_rng_is_a_generator_on_the_seed_and_its_words():
    want = np.random.default_rng(np.random.SeedSequence([7, ORDER, 3])).permutation(50)
    assert np.array_equal(seeded_rng(7, ORDER, 3).permutation(50), want)
    draws = {(seed, words): tuple(seeded_rng(seed, *words).integers(0, 2**62, 4).tolist())
             for seed in (0, 1) for words in ((FOLDS,), (ORDER, 0), (ORDER, 1), (CLASS, 0, 1), (CLASS, 1, 1))}
    assert len(set(draws.values())) == len(draws)  # every purpose, epoch and class its own stream


def test_seeded_rng_leaves_the_global_rng_alone():
    np.random.seed(5)
    state = np.random.get_state()[1].copy()
    seeded_rng(5, CLASS).random(100)
    assert np.array_equal(np.random.get_state()[1], state)


def test_as_labels_is_float64_one_dimensional():
    out = as_labels(np.array([1, 2, 3], np.int32))
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0, 3.0]
    labels = np.zeros(3)
    assert as_labels(labels) is labels  # no copy of a reader's labels
    with pytest.raises(PicPacValueError, match=r"^labels must be one-dimensional, got shape \(2, 3\)$"):
        as_labels(np.zeros((2, 3)))


def test_class_codes_are_indices_into_the_sorted_classes():
    classes, codes = class_codes(np.array([5.0, -1.0, 5.0, 0.0, -0.0, 2.0]), "stratify")
    assert classes.tolist() == [-1.0, 0.0, 2.0, 5.0]
    assert codes.dtype == np.int64 and codes.tolist() == [3, 0, 3, 1, 1, 2]
    classes, codes = class_codes(np.zeros(0), "oversample")
    assert classes.shape == codes.shape == (0,)


@pytest.mark.parametrize("labels, first, value, count", [
    ([0.0, 1.0, 1.5, 2.5], 2, 1.5, 2),
    ([0.0, np.nan], 1, float("nan"), 1),
    ([np.inf, 1.0, -np.inf], 0, float("inf"), 2),
])
def test_class_codes_refuse_labels_that_are_not_whole_naming_the_option_and_the_first_record(labels, first, value,
                                                                                               count):
    with pytest.raises(PicPacValueError) as caught:
        class_codes(np.array(labels), "oversample")
    assert str(caught.value) == (f"oversample needs integral class labels, but record {first} has label {value!r} "
                                 f"({count} non-integral label(s) in all)")
