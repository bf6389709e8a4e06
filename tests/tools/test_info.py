"""picpac.tools.info: describe() and format_description() on databases written with Writer, and `picpac info`."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np

import picpac
from picpac.tools.info import describe, format_description

from helpers import payload

CLASSES = ["cat", "dog", "bird"]
# (label, group, meta) per record; label 5 has no class name, records 5 and 6 have no size meta
RECORDS = [
    (0, None, {"path": "a.jpg", "width": 40, "height": 30, "channels": 3}),
    (1, 7, {"path": "b.jpg", "width": 64, "height": 48, "channels": 3}),
    (1, 7, {"path": "c.jpg", "width": 20, "height": 100, "channels": 1}),
    (2, 9, {"path": "d.jpg", "width": 50, "height": 50, "channels": 3}),
    (2, None, {"path": "e.jpg", "width": 30, "height": 10, "channels": 4}),
    (2, 0, {"path": "f.jpg"}),
    (5, None, None),
]


def record_bytes(i: int, meta: dict | None, nfields: int = 1) -> int:
    """The size of a record: head, field table, compact meta JSON and the payload."""
    meta_size = len(json.dumps(meta, separators=(",", ":"))) if meta is not None else 0
    return 8 + 12 * nfields + meta_size + len(payload(i))


def write_db(path) -> None:
    with picpac.Writer(path, metadata={"classes": CLASSES, "source": "csv /data/list.csv"}) as w:
        for i, (label, group, meta) in enumerate(RECORDS):
            w.append(image=payload(i), label=label, group=group, meta=meta)


def test_describe_counts_bytes_fields_labels_groups_sizes(tmp_path):
    path = str(tmp_path / "db.picpac")
    write_db(path)
    d = describe(path)
    assert d["path"] == path
    assert d["version"] == 1
    assert d["records"] == 7
    assert d["file_bytes"] == os.path.getsize(path)
    assert d["data_bytes"] == sum(record_bytes(i, meta) for i, (_, _, meta) in enumerate(RECORDS))
    assert d["fields"] == ["image"]
    assert d["classes"] == CLASSES
    assert d["source"] == "csv /data/list.csv"
    assert d["created"]["by"] == f"picpac {picpac.__version__}"
    assert d["labels"] == {"integral": True, "counts": [
        {"label": 0, "name": "cat", "count": 1},
        {"label": 1, "name": "dog", "count": 2},
        {"label": 2, "name": "bird", "count": 3},
        {"label": 5, "name": None, "count": 1},
    ]}
    assert d["groups"] == {"records": 4, "distinct": 3}
    assert d["sizes"] == {
        "records": 5,
        "unreadable": 0,
        "width": {"min": 20, "median": 40, "max": 64},
        "height": {"min": 10, "median": 48, "max": 100},
        "channels": {"1": 1, "3": 3, "4": 1},
    }


def test_format_description_lines(tmp_path):
    path = str(tmp_path / "db.picpac")
    write_db(path)
    d = describe(path)
    lines = format_description(d).splitlines()
    file_bytes, data_bytes = d["file_bytes"], d["data_bytes"]
    assert lines[:6] == [
        f"path:     {path}",
        "format:   picpac version 1",
        "records:  7",
        f"bytes:    {file_bytes:,} bytes ({file_bytes / 1024:.1f} KiB) file, "
        f"{data_bytes:,} bytes ({data_bytes / 1024:.1f} KiB) record data",
        "fields:   image",
        "classes:  3: cat, dog, bird",
    ]
    assert "source:   csv /data/list.csv" in lines
    assert lines[lines.index("labels:   count per label") + 1:][:4] == [
        "       0 cat: 1", "       1 dog: 2", "       2 bird: 3", "       5: 1"]
    assert "groups:   4 of 7 records in 3 groups" in lines
    assert lines[-2] == ("images:   5 with size meta; width 20/40/64, height 10/48/100 (min/median/max); "
                         "channels 1: 1, 3: 3, 4: 1")
    assert lines[-1] == ("decoding: region decoding built (C extension picpac.image._jpeg)" if picpac.image.REGION_DECODE
                         else "decoding: region decoding not built (no C extension picpac.image._jpeg): "
                              "JPEGs are decoded whole")


def test_many_integral_labels_are_cut_after_20_lines(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(25):
            w.append(image=b"x", label=i)
    d = describe(path)
    assert [c["label"] for c in d["labels"]["counts"]] == list(range(25))
    lines = format_description(d).splitlines()
    start = lines.index("labels:   count per label") + 1
    assert lines[start:start + 21] == [f"  {i:>6}: 1" for i in range(20)] + ["  ... and 5 more"]
    assert "groups:   none" in lines
    assert lines[-2] == "images:   no size meta"


def test_continuous_labels_get_min_max_mean_and_histogram(tmp_path):
    path = tmp_path / "db.picpac"
    labels = [0.5, 1.0, 1.5, 2.0, 10.5, float("nan")]
    with picpac.Writer(path) as w:
        for label in labels:
            w.append(image=b"x", label=label)
    stats = describe(path)["labels"]
    assert stats["integral"] is False
    assert (stats["min"], stats["max"], stats["mean"], stats["non_finite"]) == (0.5, 10.5, 3.1, 1)
    assert stats["histogram"]["edges"] == np.linspace(0.5, 10.5, 11).tolist()
    assert stats["histogram"]["counts"] == [2, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    lines = format_description(describe(path)).splitlines()
    assert "labels:   continuous: min 0.5, max 10.5, mean 3.1" in lines
    assert "  1 labels are NaN or infinite" in lines
    assert "  [0.5, 1.5): 2" in lines and "  [9.5, 10.5]: 1" in lines


def test_labels_of_any_finite_range_get_a_histogram(tmp_path):
    """[0, 5e-324] has no room for 10 float64 bins, [-1e308, 1e308] overflows NumPy's: both are labels the Writer
    takes, so `picpac info` reports them (the bins the range holds), exit 0."""
    cases = {"tiny": ([0.0, 5e-324, 5e-324], [0.0, 5e-324], [3], "  [0, 4.94066e-324]: 3"),
             "wide": ([-1e308, 1e308, 0.5], None, [1, 0, 0, 0, 0, 1, 0, 0, 0, 1], "  [0, 2e+307): 1")}
    for name, (labels, edges, counts, line) in cases.items():
        path = tmp_path / f"{name}.picpac"
        with picpac.Writer(path) as w:
            for label in labels:
                w.append(image=b"x", label=label)
        out = subprocess.run(["picpac", "info", "--json", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        stats = json.loads(out.stdout)["labels"]
        assert (stats["min"], stats["max"]) == (min(labels), max(labels))
        assert stats["histogram"]["counts"] == counts
        if edges is not None:
            assert stats["histogram"]["edges"] == edges
        text = subprocess.run(["picpac", "info", str(path)], capture_output=True, text=True, timeout=60)
        assert text.returncode == 0 and text.stderr == "", text.stderr
        assert f"labels:   continuous: min {min(labels):g}, max {max(labels):g}" in text.stdout
        assert line in text.stdout.splitlines()


def test_empty_database(tmp_path):
    path = tmp_path / "db.picpac"
    picpac.Writer(path).close()
    d = describe(path)
    assert (d["records"], d["data_bytes"], d["fields"], d["classes"]) == (0, 0, [], [])
    assert d["labels"] == {"integral": True, "counts": []}
    assert d["groups"] == {"records": 0, "distinct": 0}
    assert "labels:   (no records)" in format_description(d).splitlines()


def test_cli_info_json_and_text(tmp_path):
    path = str(tmp_path / "db.picpac")
    write_db(path)
    expected = describe(path)
    out = subprocess.run(["picpac", "info", "--json", path], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == expected
    out = subprocess.run(["picpac", "info", path], capture_output=True, text=True, check=True)
    assert out.stdout == format_description(expected) + "\n"
    assert out.stderr == ""
