"""The pixel limit in `picpac import`: a decompression bomb is a rejected file, found from its header,
costing neither time nor memory; --strict fails on it; --max-pixels (max_pixels=) sets the limit."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac import ImportFailedError, PicPacValueError, Reader
from picpac.ingest import import_dataset

from helpers import jpeg_bomb, png_bomb

REASON = ("image of 65500x65500 = 4,290,250,000 pixels, over the limit max_pixels=268435456 (a decompression "
          "bomb?); raise --max-pixels (max_pixels=) (0: no limit) if it is genuine")


def write_png(path: Path, width: int = 8, height: int = 6) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((height, width, 3), 7, np.uint8))


def bomb_folder(tmp: Path) -> Path:
    """Two good images and three bombs: one OpenCV refuses itself, two it decodes (a grey 867 MB
    image from a few hundred bytes) without the limit."""
    src = tmp / "src"
    write_png(src / "a.png")
    write_png(src / "b.png")
    (src / "bomb.jpg").write_bytes(jpeg_bomb())
    (src / "grey.jpg").write_bytes(jpeg_bomb(17000, 17000))
    (src / "wide.png").write_bytes(png_bomb())
    return src


def paths(db: Path) -> list[str]:
    with Reader(db) as r:
        return [rec.meta["path"] for rec in r]


def test_bombs_are_rejected_files_naming_the_size_and_the_limit(tmp_path):
    src = bomb_folder(tmp_path)
    start = time.perf_counter()
    report = import_dataset(src, tmp_path / "db", threads=2)
    assert time.perf_counter() - start < 10
    assert report.count == 2 and paths(tmp_path / "db") == ["a.png", "b.png"]
    assert sorted(report.skipped) == [
        ("bomb.jpg", REASON),
        ("grey.jpg", REASON.replace("65500x65500 = 4,290,250,000", "17000x17000 = 289,000,000")),
        ("wide.png", REASON)]
    assert f"  bomb.jpg: {REASON}" in report.summary().splitlines()


def test_strict_fails_on_a_bomb_and_writes_nothing(tmp_path):
    src = tmp_path / "src"
    write_png(src / "a.png")
    (src / "bomb.jpg").write_bytes(jpeg_bomb())
    with pytest.raises(ImportFailedError, match=r"bomb.jpg: image of 65500x65500 .*; nothing was written"):
        import_dataset(src, tmp_path / "db", strict=True)
    assert not (tmp_path / "db").exists() and list(tmp_path.glob("*.picpac-tmp")) == []


def test_max_pixels_sets_the_limit(tmp_path):
    src = tmp_path / "src"
    write_png(src / "a.png")  # 8x6: 48 pixels
    with pytest.raises(ImportFailedError, match=r"none of its 1 images .*a.png: image of 8x6 = 48 pixels, over the "
                                                r"limit max_pixels=47"):
        import_dataset(src, tmp_path / "db", max_pixels=47)
    for limit in (48, 0, None):
        assert import_dataset(src, tmp_path / "db", max_pixels=limit, overwrite=True).count == 1
    with pytest.raises(PicPacValueError, match="max_pixels must be a positive int, got -1"):
        import_dataset(src, tmp_path / "db", max_pixels=-1, overwrite=True)


def test_a_mask_bomb_rejects_its_item(tmp_path):
    write_png(tmp_path / "a.png")
    write_png(tmp_path / "b.png")
    write_png(tmp_path / "b_mask.png")
    (tmp_path / "a_mask.png").write_bytes(png_bomb())
    listing = tmp_path / "list.txt"
    listing.write_text("a.png\ta_mask.png\nb.png\tb_mask.png\n")
    report = import_dataset(listing, tmp_path / "db", format="masklist")
    assert report.count == 1
    assert report.skipped == [("a.png", f"mask a_mask.png: {REASON} ({listing}:1)")]


RUSAGE = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
          "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def picpac_cli(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run the picpac command; its result and its peak memory (KiB)."""
    if shutil.which("picpac") is None:
        pytest.skip("console script picpac not on PATH; run `pip install -e .`")
    done = subprocess.run([sys.executable, "-c", RUSAGE, "picpac", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    *stderr, rss = done.stderr.splitlines()
    done.stderr = "\n".join(stderr)
    return done, int(rss)


def test_cli_rejects_bombs_fast_and_without_memory(tmp_path):
    src = bomb_folder(tmp_path)
    start = time.perf_counter()
    done, rss_kib = picpac_cli("import", str(src), "db", "--threads", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - start < 30 and rss_kib < 500 * 1024
    assert "skipped 3:" in done.stdout and f"  bomb.jpg: {REASON}" in done.stdout.splitlines()
    assert paths(tmp_path / "db") == ["a.png", "b.png"]


def test_cli_max_pixels_option(tmp_path):
    src = tmp_path / "src"
    write_png(src / "a.png")
    done, _ = picpac_cli("import", str(src), "db", "--max-pixels", "47", cwd=tmp_path)
    assert done.returncode == 2 and "a.png: image of 8x6 = 48 pixels, over the limit max_pixels=47" in done.stderr
    done, _ = picpac_cli("import", str(src), "db", "--max-pixels", "0", cwd=tmp_path)
    assert done.returncode == 0 and paths(tmp_path / "db") == ["a.png"]
    done, _ = picpac_cli("import", "--from", "lmdb", str(src), "db2", "--max-pixels", "5", cwd=tmp_path)
    assert done.returncode == 2 and "--from cannot be combined with --max-pixels" in done.stderr
    done, _ = picpac_cli("import", "--help", cwd=tmp_path)
    assert "--max-pixels" in done.stdout and "268435456" in done.stdout
