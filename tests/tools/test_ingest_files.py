"""Files that are not image files in `picpac import` (picpac/tools/ingest.py): a FIFO named x.jpg, a link to
/dev/zero, a socket, a directory, a file over the read limit are skipped with their reason (or fail --strict)
without blocking or reading them; a deeply nested annotation is a skipped record."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac import ImportFailedError, Reader
from picpac.ingest import import_dataset


def hostile_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(folder / "a.png"), np.full((6, 8, 3), 7, np.uint8))
    os.mkfifo(folder / "fifo.jpg")  # no writer: a plain open for reading waits forever
    os.symlink("/dev/zero", folder / "zero.jpg")  # read whole: all the memory there is
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.png"))
    server.close()
    with open(folder / "huge.png", "wb") as f:
        f.truncate((1 << 30) + 1)  # sparse
    return folder


SKIPPED = [("fifo.jpg", "a FIFO, not a regular file"),
           ("huge.png", "1,073,741,825 bytes, over the 1,073,741,824-byte limit of a file an import reads"),
           ("sock.png", "a socket, not a regular file"),
           ("zero.jpg", "a character device, not a regular file")]


@pytest.mark.timeout(60)
def test_files_that_are_no_images_are_skipped_unread(tmp_path):
    src = hostile_folder(tmp_path / "src")
    start = time.monotonic()
    report = import_dataset(src, tmp_path / "db", threads=2)
    assert time.monotonic() - start < 10
    assert report.count == 1 and sorted(report.skipped) == SKIPPED
    with Reader(tmp_path / "db") as r:
        assert [rec.meta["path"] for rec in r] == ["a.png"]


@pytest.mark.timeout(60)
def test_a_list_naming_a_directory_or_a_fifo(tmp_path):
    hostile_folder(tmp_path)
    (tmp_path / "dir.jpg").mkdir()
    listing = tmp_path / "list.txt"
    listing.write_text("a.png\t1\ndir.jpg\t2\nfifo.jpg\t3\n")
    report = import_dataset(listing, tmp_path / "db")
    assert report.count == 1 and report.skipped == [("dir.jpg", f"a directory, not a regular file ({listing}:2)"),
                                                    ("fifo.jpg", f"a FIFO, not a regular file ({listing}:3)")]
    with pytest.raises(ImportFailedError, match=f"dir.jpg: a directory, not a regular file \\({listing}:2\\); "
                                                "nothing was written"):
        import_dataset(listing, tmp_path / "db2", strict=True)
    assert not (tmp_path / "db2").exists()


@pytest.mark.timeout(60)
def test_a_fifo_as_the_mask(tmp_path):
    hostile_folder(tmp_path)
    listing = tmp_path / "masks.txt"
    listing.write_text("a.png\tfifo.jpg\n")
    with pytest.raises(ImportFailedError, match=f"a.png: mask fifo.jpg: a FIFO, not a regular file \\({listing}:1\\)"):
        import_dataset(listing, tmp_path / "db", format="masklist")


def test_a_deeply_nested_annotation_skips_its_record(tmp_path):
    assert cv2.imwrite(str(tmp_path / "a.png"), np.zeros((4, 4, 3), np.uint8))
    assert cv2.imwrite(str(tmp_path / "b.png"), np.zeros((4, 4, 3), np.uint8))
    listing = tmp_path / "anno.txt"
    listing.write_text('a.png\t{"shapes":[]}\nb.png\t' + "[" * 100_000 + "]" * 100_000 + "\n")
    report = import_dataset(listing, tmp_path / "db", format="annolist")
    assert report.count == 1
    assert report.skipped == [("b.png", f"annotation is not valid JSON (nested too deeply) ({listing}:2)")]


@pytest.mark.timeout(60)
def test_cli_a_fifo_as_the_source_is_one_error_line(tmp_path):
    os.mkfifo(tmp_path / "list.txt")
    done = subprocess.run(["picpac", "import", "list.txt", "db"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=50)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["picpac: error: list.txt: a FIFO, not a regular file"]
