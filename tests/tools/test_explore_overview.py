"""picpac.tools.explore.overview: the evenly spaced sample of records, sizes probed from image headers (and
what is counted unknown), the size and aspect-ratio histograms, the label bars, and the overview's full scan
or sample by the database's size."""
from __future__ import annotations

import numpy as np
import pytest

import picpac
from picpac.tools import info
from picpac.tools.explore import overview as overview_module
from picpac.tools.explore.index import DbIndex
from picpac.tools.explore.overview import _histogram, _sample, _size_histograms, bars, overview, probe_sizes

from helpers import damage_record, png


def test_the_sample_is_evenly_spaced_and_ends_at_the_last_record():
    assert _sample(10, 4).tolist() == [0, 3, 6, 9]
    assert _sample(3, 10).tolist() == [0, 1, 2]
    assert _sample(1, 5).tolist() == [0]
    got = _sample(1_000_003, 1000)
    assert len(got) == 1000 and got[0] == 0 and got[-1] == 1_000_002 and np.all(np.diff(got) > 0)
    assert _sample(0, 5).dtype == np.int64 and len(_sample(0, 5)) == 0


@pytest.fixture
def db(tmp_path):
    """Images of (width, height) (30, 20), (40, 20), (10, 40), then a record of junk bytes, then one damaged."""
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for width, height in ((30, 20), (40, 20), (10, 40)):
            w.append(image=png(np.zeros((height, width, 3), np.uint8)))
        w.append(image=b"not an image")
        w.append(image=png(np.zeros((5, 5, 3), np.uint8)), label=1)
    damage_record(path, 4, at=12)  # its field table
    return path


def test_probe_sizes_counts_what_has_no_readable_size(db):
    with picpac.Reader(db, check=False) as r:
        assert probe_sizes(r) == {"sampled": 5, "unknown": 2, "sizes": [(30, 20), (40, 20), (10, 40)]}


def test_probe_sizes_reads_a_sample_of_a_larger_database(tmp_path, monkeypatch):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(10):
            w.append(image=png(np.zeros((1 + i, 2, 1), np.uint8)))
    monkeypatch.setattr(overview_module, "SIZE_SAMPLE", 4)
    with picpac.Reader(path) as r:
        assert probe_sizes(r) == {"sampled": 4, "unknown": 0, "sizes": [(2, 1), (2, 4), (2, 7), (2, 10)]}


def test_histogram_rows_with_percent_of_the_peak():
    h = _histogram(np.array([10.0, 10, 10, 20, 30, 110]))
    assert (h["min"], h["median"], h["max"]) == (10.0, 15.0, 110.0)
    assert [(r["low"], r["high"], r["count"]) for r in h["rows"][:3]] == [(10.0, 20.0, 3), (20.0, 30.0, 1),
                                                                       (30.0, 40.0, 1)]
    assert [r["percent"] for r in h["rows"]] == [100, 33, 33, 0, 0, 0, 0, 0, 0, 33]
    assert sum(r["count"] for r in h["rows"]) == 6 and len(h["rows"]) == overview_module.BINS


def test_histogram_of_one_value_and_its_rounding():
    h = _histogram(np.array([1.234, 1.234]), digits=2)
    assert (h["min"], h["median"], h["max"]) == (1.23, 1.23, 1.23)
    assert h["rows"] == [{"low": 1.23, "high": 1.23, "count": 2, "percent": 100}]


def test_size_histograms_of_width_height_and_aspect():
    got = _size_histograms({"sampled": 5, "unknown": 2, "sizes": [(30, 20), (40, 20), (10, 40)]})
    assert (got["sampled"], got["unknown"]) == (5, 2)
    assert (got["width"]["min"], got["width"]["max"], got["height"]["median"]) == (10.0, 40.0, 20.0)
    assert (got["aspect"]["min"], got["aspect"]["median"], got["aspect"]["max"]) == (0.25, 1.5, 2.0)
    counts, _ = info.histogram(np.array([1.5, 2.0, 0.25]), overview_module.BINS)
    assert [r["count"] for r in got["aspect"]["rows"]] == counts.tolist()
    assert _size_histograms({"sampled": 2, "unknown": 2, "sizes": []}) == {
        "sampled": 2, "unknown": 2, "width": None, "height": None, "aspect": None}


def test_bars_are_percent_of_the_largest_count():
    counts = [{"label": 0, "count": 50}, {"label": 1, "count": 25}, {"label": 2, "count": 1}]
    assert [b["percent"] for b in bars(counts)] == [100, 50, 2]
    assert bars(counts)[1] == {"label": 1, "count": 25, "percent": 50}
    assert bars([{"label": 0, "count": 0}]) == [{"label": 0, "count": 0, "percent": 0}] and bars([]) == []


def test_overview_is_infos_description_with_the_probe(db):
    x = DbIndex(str(db))
    try:
        sizes = probe_sizes(x.reader)
        d = overview(x, sizes)
    finally:
        x.close()
    want = info.describe(db)
    assert {k: v for k, v in d.items() if k != "probe"} == want and d["scanned"] == d["records"] == 5
    assert d["probe"] == _size_histograms(sizes)


def test_beyond_full_scan_the_overview_describes_a_sample(db, monkeypatch):
    monkeypatch.setattr(overview_module, "FULL_SCAN", 4)
    monkeypatch.setattr(overview_module, "SIZE_SAMPLE", 3)
    x = DbIndex(str(db))
    try:
        d = overview(x, probe_sizes(x.reader))
    finally:
        x.close()
    assert d["records"] == 5 and d["scanned"] == 3
    assert d["probe"]["sampled"] == 3
