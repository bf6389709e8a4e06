"""The explorer's overview: `picpac info`'s numbers (info.describe: every record of a database of up to
FULL_SCAN records, an evenly spaced sample of SIZE_SAMPLE beyond), image sizes and aspect ratios from the image headers of a sample,
and fold counts for a split. The sample's sizes also give the augmentation page its estimate of a run's cost."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import CorruptRecordError
from .. import info
from .thumbnails import probe_size

FULL_SCAN = 50_000
"""Databases of up to this many records get info.describe's full scan (every record's meta and annotation)."""
SIZE_SAMPLE = 1000
"""Records whose image headers give the size and aspect-ratio distributions (and, beyond FULL_SCAN records,
whose meta and annotations give info.describe's record part)."""
BINS = 10


def overview(index: Any, sizes: dict[str, Any]) -> dict[str, Any]:
    """What the overview page shows, computed once per server; ``sizes``: :func:`probe_sizes`'s."""
    reader = index.reader
    n = len(reader)
    d = info.describe(reader.path, sample=None if n <= FULL_SCAN else SIZE_SAMPLE, remote=index.remote)
    d["probe"] = _size_histograms(sizes)
    return d


def _sample(n: int, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, count)).astype(np.int64)) if n else np.zeros(0, np.int64)


def probe_sizes(reader: Any) -> dict[str, Any]:
    """(width, height) of the images of up to SIZE_SAMPLE evenly spaced records (every record of a smaller
    database), from their headers: ``sizes``, and how many records were ``sampled`` and of ``unknown`` size."""
    sizes = []
    sample = _sample(len(reader), SIZE_SAMPLE)
    for i in sample.tolist():
        try:
            size = probe_size(reader, i)
        except (CorruptRecordError, ValueError):
            size = None
        if size is not None:
            sizes.append(size)
    return {"sampled": len(sample), "unknown": len(sample) - len(sizes), "sizes": sizes}


def _size_histograms(probe: dict[str, Any]) -> dict[str, Any]:
    """Width, height and aspect-ratio histograms of the probed sizes."""
    result: dict[str, Any] = {"sampled": probe["sampled"], "unknown": probe["unknown"], "width": None,
                              "height": None, "aspect": None}
    if probe["sizes"]:
        w, h = np.asarray(probe["sizes"], np.float64).T
        result.update(width=_histogram(w), height=_histogram(h), aspect=_histogram(w / h, digits=2))
    return result


def _histogram(values: np.ndarray, digits: int = 0) -> dict[str, Any]:
    counts, edges = info.histogram(values, BINS)
    peak = max(int(counts.max()), 1)
    rows = [{"low": round(float(lo), digits), "high": round(float(hi), digits), "count": int(c),
             "percent": 100 * int(c) // peak} for lo, hi, c in zip(edges, edges[1:], counts)]
    return {"min": round(float(values.min()), digits), "median": round(float(np.median(values)), digits),
            "max": round(float(values.max()), digits), "rows": rows}


def bars(counts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Label counts (info's ``counts``) with a bar width in percent of the largest."""
    peak = max([c["count"] for c in counts] + [1])
    return [{**c, "percent": 100 * c["count"] // peak} for c in counts]
