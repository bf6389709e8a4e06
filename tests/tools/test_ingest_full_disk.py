"""`picpac import` of images onto a full disk (a 1 MiB tmpfs, for real) or past the process's file size limit
(RLIMIT_FSIZE): a FileIOError naming the database, exit status 2 with one line, no temporary file left."""
from __future__ import annotations

import errno
import resource
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from helpers import on_small_disk


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """4 MB of PNGs (noise does not compress)."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(20):
        assert cv2.imwrite(str(folder / f"{i:02d}.png"), rng.integers(0, 256, (256, 256, 3), np.uint8))
    return folder


def test_an_import_onto_a_full_disk_is_one_error_line_and_leaves_nothing(images, tmp_path):
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac import --threads 2 {images} "$DISK/db.picpac"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    assert done.stdout.splitlines()[-2:] == ["rc=2", "left="], done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"picpac: error: {disk}/db.picpac: cannot write: no space left on device; "
                                        "free some space or write to another file system"]


API = """
import sys
from picpac.ingest import import_dataset
try:
    import_dataset(sys.argv[1], sys.argv[2], progress=False)
except Exception as exc:
    print(type(exc).__name__, exc.errno, exc)
"""


def test_the_error_is_a_file_io_error(images, tmp_path):
    (tmp_path / "api.py").write_text(API)
    done = on_small_disk(tmp_path / "disk", f'{sys.executable} {tmp_path / "api.py"} {images} "$DISK/db.picpac"')
    name, code, path, *_ = done.stdout.split()
    assert (name, int(code), path) == ("FileIOError", errno.ENOSPC, f"{tmp_path / 'disk' / 'db.picpac'}:"), done.stderr


def test_a_file_size_limit_is_one_error_line(images, tmp_path):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (500_000, 500_000))  # Python ignores SIGXFSZ: writes get EFBIG

    done = subprocess.run(["picpac", "import", str(images), str(tmp_path / "db.picpac")], capture_output=True,
                          text=True, timeout=120, preexec_fn=limit)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"picpac: error: {tmp_path / 'db.picpac'}: cannot write: file too large; the "
                                        "file system or the process's file size limit (ulimit -f) caps the file size"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
