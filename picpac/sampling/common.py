"""What the sampling modules share: argument checks, class codes, and seeded RNGs.

Every random draw in this layer comes from ``seeded_rng(seed, PURPOSE, ...)``, a generator on
``np.random.SeedSequence([seed, PURPOSE, ...])``, so fold assignment, per-epoch order and per-class
order are independent streams derived from one user seed; no global RNG state is read or changed.
"""
from __future__ import annotations

import operator

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError

# Purpose words mixed into every SeedSequence (ASCII tags, so streams never collide).
FOLDS = 0x666F6C64   # "fold": permutation of units before fold assignment
ORDER = 0x6F726472   # "ordr": per-epoch permutation of a pool
CLASS = 0x636C7373   # "clss": per-class, per-cycle permutation when oversampling


def check_int(value: object, name: str, minimum: int | None = None) -> int:
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


def seeded_rng(seed: int, *words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def as_labels(labels: np.ndarray) -> np.ndarray:
    out = np.asarray(labels, dtype=np.float64)
    if out.ndim != 1:
        raise PicPacValueError(f"labels must be one-dimensional, got shape {out.shape}")
    return out


def class_codes(labels: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct labels and each record's index into them; labels must be integral.

    ``what`` names the option that needs classes (e.g. ``"stratify"``) for the error message.
    """
    labels = as_labels(labels)
    bad = ~np.isfinite(labels) | (labels != np.round(labels))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PicPacValueError(f"{what} needs integral class labels, but record {i} has label "
                               f"{float(labels[i])!r} ({int(bad.sum())} non-integral label(s) in all)")
    classes, codes = np.unique(labels, return_inverse=True)
    return classes, codes.reshape(-1).astype(np.int64)
