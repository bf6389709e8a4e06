"""`picpac merge`, `split`, `filter` and `compact` onto a full disk (a 1 MiB tmpfs, for real): a FileIOError naming
the output, exit status 2 with one line, no temporary file left and the data as it was."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import picpac

from conftest import payload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stores"))  # the small-disk helper
from store_helpers import on_small_disk  # noqa: E402

FULL = "cannot write: no space left on device; free some space or write to another file system"


@pytest.fixture(scope="module")
def big_db(tmp_path_factory) -> Path:
    """1.5 MB of records, more than the disk holds."""
    path = tmp_path_factory.mktemp("src") / "big.picpac"
    with picpac.Writer(path, metadata={"classes": ["a", "b", "c"]}, sync=False) as w:
        for i in range(30):
            w.append(image=payload(i, 50_000), label=i % 3, meta={"i": i})
    return path


def error_line(done) -> str:
    """The one line on stderr, after checking the exit status and that the disk was left empty."""
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["rc=2", "left="], done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    return line


def test_merge(big_db, tmp_path):
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac merge {big_db} {big_db} "$DISK/out.picpac"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    assert error_line(done) == f"picpac: error: {disk}/out.picpac: {FULL}"
