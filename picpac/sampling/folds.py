"""K-fold assignment (stratified, group-aware) and the selection of a fold or its complement.

Pure functions of the index arrays (labels, groups) and the seed: splits are exact and reproducible.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..errors import PicPacValueError
from ..file.layout import NO_GROUP
from .common import FOLDS, as_labels, check_int, class_codes, seeded_rng

def assign_folds(labels: np.ndarray, groups: np.ndarray, k: int, seed: int, *,
                 shuffle: bool = True, stratify: bool = False) -> np.ndarray:
    """Fold id (int32, 0..k-1) of every record; records sharing a group never straddle folds.

    Units (a group, or one ungrouped record) are ordered by a seeded permutation if ``shuffle``,
    else by first record. Without ``stratify`` each unit goes to the fold with the fewest records
    (ties: lowest id), i.e. round robin when there are no groups. With ``stratify`` units are dealt
    round robin, class by class (a unit's class: its most common label, ties to the smallest),
    the deal continuing across classes.
    """
    k = check_int(k, "k (number of folds)", 1)
    seed = check_int(seed, "seed", 0)
    labels = as_labels(labels)
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

    order = seeded_rng(seed, FOLDS).permutation(n_units) if shuffle else np.arange(n_units)
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
        # (records so far, fold id); folds past the n_units-th would stay empty
        heap = [(0, f) for f in range(min(k, n_units))]
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
    k = check_int(k, "split (number of folds)", 1)
    fold = check_int(fold, "split_fold")
    if not 0 <= fold < k:
        raise PicPacValueError(f"split_fold must be in 0..{k - 1} for split={k}, got {fold}")
    folds = np.asarray(folds)
    if k == 1:
        return np.arange(len(folds), dtype=np.int64)
    mask = folds == fold if negate else folds != fold
    return np.flatnonzero(mask).astype(np.int64, copy=False)
