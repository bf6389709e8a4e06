"""`picpac merge`, `split`, `filter` and `compact` onto a full disk (a 1 MiB tmpfs, for real): a FileIOError naming
the output, exit status 2 with one line, no temporary file left and the data as it was."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import picpac

from helpers import on_small_disk, payload

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


def test_filter(big_db, tmp_path):
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac filter --label 0..2 {big_db} "$DISK/out.picpac"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    assert error_line(done) == f"picpac: error: {disk}/out.picpac: {FULL}"


def test_split(big_db, tmp_path):
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac split --folds 2 {big_db} -o "$DISK"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    assert re.fullmatch(rf"picpac: error: {disk}/big-fold[01]\.picpac: {FULL}", error_line(done)), done.stderr


def test_compact_to_another_file(big_db, tmp_path):
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac compact {big_db} -o "$DISK/out.picpac"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    assert error_line(done) == f"picpac: error: {disk}/out.picpac: {FULL}"


def test_compact_in_place_keeps_the_database(tmp_path):
    """A 600 KB database fits on the disk, its compact copy beside it does not."""
    db = tmp_path / "db.picpac"
    for r in range(3):
        with picpac.Writer(db, append=r > 0, sync=False) as w:
            for i in range(4):
                w.append(image=payload(10 * r + i, 50_000), label=r)
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'cp {db} "$DISK/db.picpac" && picpac compact "$DISK/db.picpac"; echo "rc=$?"; '
                               f'echo "left=$(ls -A "$DISK")"; cmp {db} "$DISK/db.picpac" && echo same')
    assert done.stdout.splitlines()[-3:] == ["rc=2", "left=db.picpac", "same"], done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"picpac: error: {disk}/db.picpac: {FULL}"]
    shutil.rmtree(disk, ignore_errors=True)
