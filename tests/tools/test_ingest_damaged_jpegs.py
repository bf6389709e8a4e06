"""A damaged JPEG is named everywhere (issue 37, item 7): `picpac import` skips it (or keeps it with
--keep-damaged, listed), `picpac verify --decode` fails naming the record, a stream serves it and counts it in
``stats()``; libjpeg's warning is picpac's, and nothing reaches stderr unnamed."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import picpac
from picpac.image import decoding
from picpac.tools.ingest import import_dataset
from picpac.tools.verify import verify

from helpers import smooth_jpeg

pytestmark = pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built")

GOOD = [smooth_jpeg(64, 48, seed) for seed in range(4)]
BAD = GOOD[0][:-2] + b"\0" * 100 + GOOD[0][-2:]  # stray bytes before the end-of-image marker
WARNED: list[str] = []
decoding.decode(BAD, on_damage=WARNED.append)
WARNING = WARNED[0] if WARNED else None
"""libjpeg's: "Corrupt JPEG data: 93 extraneous bytes before marker 0xd9" (tests/image/test_decoding_damage.py)."""


@pytest.fixture
def folder(tmp_path):
    for i, data in enumerate(GOOD):
        (tmp_path / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / "ab"[i % 2] / f"{i}.jpg").write_bytes(data)
    (tmp_path / "src" / "b" / "bad.jpg").write_bytes(BAD)
    return tmp_path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *args], capture_output=True, text=True)


def test_import_skips_a_damaged_jpeg_naming_it_and_libjpegs_warning(folder):
    result = run_cli("import", str(folder / "src"), str(folder / "db.picpac"))
    assert result.returncode == 0 and result.stderr == ""
    assert (f"skipped 1:\n  b/bad.jpg: damaged JPEG (libjpeg: {WARNING}); --keep-damaged (keep_damaged=True) "
            "imports it as libjpeg fills it in\n") in result.stdout
    with picpac.Reader(folder / "db.picpac") as r:
        assert sorted(r[i].meta["path"] for i in range(len(r))) == ["a/0.jpg", "a/2.jpg", "b/1.jpg", "b/3.jpg"]
    strict = run_cli("import", "--strict", str(folder / "src"), str(folder / "strict.picpac"))
    assert strict.returncode != 0 and "b/bad.jpg: damaged JPEG (libjpeg: " in strict.stderr
    assert not (folder / "strict.picpac").exists()


def test_keep_damaged_imports_it_listed_and_verify_decode_fails_naming_the_record(folder):
    report = import_dataset(folder / "src", folder / "db.picpac", keep_damaged=True, progress=False)
    assert (report.count, report.skipped, report.damaged) == (5, [], [("b/bad.jpg", WARNING)])
    assert report.summary().endswith(f"imported 1 damaged (--keep-damaged), served as libjpeg fills them in:\n"
                                     f"  b/bad.jpg: {WARNING}")
    with picpac.Reader(folder / "db.picpac") as r:
        bad = next(i for i in range(len(r)) if r[i].meta["path"] == "b/bad.jpg")
    assert verify(folder / "db.picpac", progress=False).ok  # the checksums hold: the bytes are the file's
    found = verify(folder / "db.picpac", decode=True, progress=False)
    assert (found.ok, found.undecodable) == (False, [bad])
    assert found.problems == [f"record {bad} (b/bad.jpg): field 'image' is a damaged JPEG (libjpeg: {WARNING})"]
    result = run_cli("verify", "--decode", str(folder / "db.picpac"))
    assert result.returncode == 1
    assert result.stderr == f"record {bad} (b/bad.jpg): field 'image' is a damaged JPEG (libjpeg: {WARNING})\n"


@pytest.mark.parametrize("config", [{}, {"fused": False}, {"cache": True}, {"backend": "process", "workers": 2}],
                         ids=["fused", "python", "cache", "processes"])
def test_a_stream_serves_damaged_samples_and_counts_them(tmp_path, capfd, config):
    db = tmp_path / "db.picpac"
    with picpac.Writer(db) as w:
        for i in range(8):
            w.append(image=BAD if i in (2, 5) else GOOD[i % 4], label=i)  # BAD's scan is GOOD[0]'s
    with picpac.ImageStream(db, batch=4, loop=False, shuffle=False, resize_width=32, resize_height=24,
                            order="NHWC", **config) as stream:
        images = np.concatenate([batch[0] for batch in stream])
        stats = stream.stats()
    assert images.shape == (8, 24, 32, 3)
    assert np.array_equal(images[2], images[0]) and np.array_equal(images[5], images[0])  # served, exact
    assert stats["damaged"] == 2
    assert stats["damaged_records"] == [f"{db}: record {i} has a damaged image (libjpeg: {WARNING})" for i in (2, 5)]
    if "fused" not in config and "cache" not in config:
        assert (stats["fused_samples"], stats["python_samples"]) == (6, 2)  # damaged ones take the Python path
    assert capfd.readouterr().err == ""
