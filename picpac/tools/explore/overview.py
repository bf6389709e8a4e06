"""The explorer's overview: `picpac info`'s numbers (info.describe: every record of a database of up to
FULL_SCAN records, an evenly spaced sample of SIZE_SAMPLE beyond), image sizes and aspect ratios from the image headers of a sample,
and fold counts for a split."""
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


def overview(index: Any) -> dict[str, Any]:
    """What the overview page shows, computed once per server."""
    reader = index.reader
    n = len(reader)
    d = info.describe(reader.path, sample=None if n <= FULL_SCAN else SIZE_SAMPLE)
    d["probe"] = _probe(reader)
    return d


def _sample(n: int, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, count)).astype(np.int64)) if n else np.zeros(0, np.int64)


def _probe(reader: Any) -> dict[str, Any]:
    """Width, height and aspect-ratio histograms from the image headers of up to SIZE_SAMPLE records."""
    widths, heights = [], []
    sample = _sample(len(reader), SIZE_SAMPLE)
    unknown = 0
    for i in sample.tolist():
        try:
            size = probe_size(reader, i)
        except (CorruptRecordError, ValueError):
            size = None
        if size is None:
            unknown += 1
            continue
        widths.append(size[0])
        heights.append(size[1])
    result: dict[str, Any] = {"sampled": len(sample), "unknown": unknown, "width": None, "height": None,
                              "aspect": None}
    if widths:
        w, h = np.asarray(widths, np.float64), np.asarray(heights, np.float64)
        result.update(width=_histogram(w), height=_histogram(h), aspect=_histogram(w / h, digits=2))
    return result


def _histogram(values: np.ndarray, digits: int = 0) -> dict[str, Any]:
    counts, edges = np.histogram(values, bins=BINS if values.min() < values.max() else 1)
    peak = max(int(counts.max()), 1)
    rows = [{"low": round(float(lo), digits), "high": round(float(hi), digits), "count": int(c),
             "percent": 100 * int(c) // peak} for lo, hi, c in zip(edges, edges[1:], counts)]
    return {"min": round(float(values.min()), digits), "median": round(float(np.median(values)), digits),
            "max": round(float(values.max()), digits), "rows": rows}


def bars(counts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Label counts (info's ``counts``) with a bar width in percent of the largest."""
    peak = max([c["count"] for c in counts] + [1])
    return [{**c, "percent": 100 * c["count"] // peak} for c in counts]
