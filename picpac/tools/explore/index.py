"""What the explorer's list pages select, from the index alone: label and fold selections (NumPy, cached),
and the meta filter, which reads record meta from a cursor and stops after a bounded number of records.

Nothing here scans every record per request: a label or fold selection is one vectorised pass over the
index (computed once, then cached), a page is a slice of it, and the meta filter reads at most
``MAX_SCAN`` records per page."""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CorruptRecordError, PicPacValueError
from ...file.remote import RemoteOptions
from ...file.shards import open_database
from ...sampling.folds import assign_folds

MAX_SCAN = 20_000
"""Records the meta filter reads for one page at most; the page then links on from where it stopped."""
MAX_SPLIT = 1000
DEFAULT_SEED = 2016
"""ImageStream's default ``seed``: the default fold assignment is the stream's."""
_CACHED_FOLDS = 4
_CACHED_SELECTIONS = 32


@dataclass(frozen=True)
class Filter:
    """A grid's filter: a label, a fold of a split (ImageStream's ``split``/``split_fold``/``seed``/``stratify``;
    ``negate`` keeps the fold itself as ``split_negate=True`` does, else every other fold), a meta key=value."""

    label: float | None = None
    split: int = 1
    fold: int = 0
    negate: bool = True
    seed: int = DEFAULT_SEED
    stratify: bool = False
    meta_key: str | None = None
    meta_value: str | None = None

    @property
    def base(self) -> tuple:
        return (self.label, self.split, self.fold, self.negate, self.seed, self.stratify)


def parse_filter(query: dict[str, str]) -> Filter:
    """A Filter from a page's query parameters; PicPacValueError with a message for a bad one."""
    def integer(name: str, default: int, low: int, high: int) -> int:
        text = query.get(name, "").strip()
        if not text:
            return default
        if not text.isdigit() or not low <= int(text) <= high:
            raise PicPacValueError(f"{name} must be an integer in [{low}, {high}], got {text[:40]!r}")
        return int(text)

    label = None
    text = query.get("label", "").strip()
    if text:
        try:
            label = float(text)
        except ValueError:
            raise PicPacValueError(f"label must be a number, got {text[:40]!r}") from None
    split = integer("split", 1, 1, MAX_SPLIT)
    fold = integer("fold", 0, 0, MAX_SPLIT - 1)
    if split > 1 and fold >= split:
        raise PicPacValueError(f"fold must be in [0, {split - 1}] for split={split}, got {fold}")
    key = value = None
    text = query.get("meta", "").strip()
    if text:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise PicPacValueError(f"meta filter must be key=value, got {text[:80]!r}")
        key, value = key.strip(), value.strip()
    return Filter(label, split, fold, query.get("negate", "1") != "0", integer("seed", DEFAULT_SEED, 0, 2**63 - 1),
                  query.get("stratify", "0") == "1", key, value)


def meta_matches(meta: Any, key: str, value: str) -> bool:
    """Whether a record's meta has ``key`` equal to ``value`` (as text, or as the JSON value it spells)."""
    if not isinstance(meta, dict) or key not in meta:
        return False
    have = meta[key]
    if isinstance(have, str):
        return have == value
    try:
        return json.loads(value) == have
    except ValueError:
        return False


class DbIndex:
    """The explorer's view of one database: the Reader, and cached selections of record ids."""

    def __init__(self, path: str, remote: RemoteOptions | None = None):
        self.remote = remote
        self.reader = open_database(path, check=False, remote=remote)  # a file, a URL or shards
        self.labels = self.reader.labels
        self._lock = threading.Lock()
        self._folds: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._selections: OrderedDict[tuple, np.ndarray] = OrderedDict()
        integral = np.isfinite(self.labels) & (self.labels == np.floor(self.labels))
        self.label_values, self.label_counts = (np.unique(self.labels, return_counts=True) if integral.all()
                                                else (np.zeros(0), np.zeros(0, np.int64)))
        """The labels of the records and how many have each, when every label is an integer (else empty)."""

    def __len__(self) -> int:
        return len(self.reader)

    def close(self) -> None:
        self.reader.close()

    def folds(self, split: int, seed: int = DEFAULT_SEED, stratify: bool = False) -> np.ndarray:
        """Every record's fold for ``split`` folds: ImageStream's assignment (shuffled by ``seed``)."""
        key = (split, seed, stratify)
        with self._lock:
            if key in self._folds:
                self._folds.move_to_end(key)
                return self._folds[key]
        folds = assign_folds(self.labels, self.reader.groups, split, seed, shuffle=True, stratify=stratify)
        with self._lock:
            self._folds[key] = folds
            while len(self._folds) > _CACHED_FOLDS:
                self._folds.popitem(last=False)
        return folds

    def fold_counts(self, split: int, seed: int = DEFAULT_SEED) -> list[int]:
        return np.bincount(self.folds(split, seed), minlength=split).tolist()

    def selection(self, f: Filter) -> np.ndarray | None:
        """Ascending record ids that the label and fold parts of ``f`` keep (None: every record)."""
        if f.label is None and f.split == 1:
            return None
        with self._lock:
            if f.base in self._selections:
                self._selections.move_to_end(f.base)
                return self._selections[f.base]
        mask = np.ones(len(self), bool)
        if f.label is not None:
            mask &= self.labels == f.label
        if f.split > 1:
            folds = self.folds(f.split, f.seed, f.stratify)
            mask &= (folds == f.fold) if f.negate else (folds != f.fold)
        ids = np.flatnonzero(mask)
        with self._lock:
            self._selections[f.base] = ids
            while len(self._selections) > _CACHED_SELECTIONS:
                self._selections.popitem(last=False)
        return ids

    def page(self, f: Filter, start: int, count: int) -> tuple[list[int], int | None, int | None]:
        """``count`` record ids from position ``start`` of the selection: (ids, the position after the page or
        None at the end, the selection's size or None when the meta filter leaves it unknown)."""
        ids = self.selection(f)
        total = len(self) if ids is None else len(ids)
        if f.meta_key is None:
            end = min(start + count, total)
            chosen = range(start, end) if ids is None else ids[start:end]
            return [int(i) for i in chosen], (end if end < total else None), total
        found: list[int] = []
        position = start
        stop = min(total, start + MAX_SCAN)
        while position < stop and len(found) < count:
            i = position if ids is None else int(ids[position])
            position += 1
            try:
                meta = self.reader.read(i, check=False).meta
            except (CorruptRecordError, ValueError):
                continue
            if meta_matches(meta, f.meta_key, f.meta_value):
                found.append(i)
        return found, (position if position < total else None), None
