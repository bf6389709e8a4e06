"""A full disk under `picpac export --to` and `picpac import --from` (picpac/stores/convert.py), for real: a
1 MiB tmpfs. Every format's write failure (an OSError, liblmdb's and SQLite's errors, libhdf5's SIGSEGV)
is a FileIOError naming the output, the command exits 2 with one line, and no temporary file is left."""
from __future__ import annotations

import errno
import sys

import pytest

import picpac

from helpers import on_small_disk, payload
from store_helpers import KINDS, _needs


@pytest.fixture(scope="module")
def big_db(tmp_path_factory) -> str:
    """3 MB of records: more than the disk holds."""
    path = tmp_path_factory.mktemp("src") / "big.picpac"
    with picpac.Writer(path) as w:
        for i in range(60):
            w.append(image=payload(i, 50_000), label=i % 3, meta={"i": i})
    return str(path)


def one_error_line(done, output: str) -> str:
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["rc=2", "left="], done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"picpac: error: {output}: "), line
    return line


@pytest.mark.parametrize("kind", KINDS)
def test_an_export_to_a_full_disk_is_one_error_line_and_leaves_nothing(kind, big_db, tmp_path):
    _needs(kind)
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac export --to {kind} {big_db} "$DISK/x.{kind}"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    line = one_error_line(done, f"{disk}/x.{kind}")
    if kind == "hdf5":  # libhdf5 dies of SIGSEGV when a write fails (its child process does, here)
        assert "libhdf5" in line and "bytes are free on its file system" in line
    else:
        assert "cannot write: " in line and ("no space left on device" in line or "bytes are free" in line)


@pytest.mark.parametrize("kind", ["lmdb", "tar"])
def test_an_import_from_a_store_to_a_full_disk(kind, big_db, tmp_path):
    _needs(kind)
    src = str(tmp_path / f"src.{kind}")
    picpac.stores.export_store(big_db, src, kind)
    disk = tmp_path / "disk"
    done = on_small_disk(disk, f'picpac import --from {kind} {src} "$DISK/db.picpac"; echo "rc=$?"; '
                               'echo "left=$(ls -A "$DISK")"')
    line = one_error_line(done, f"{disk}/db.picpac")
    assert line.endswith(": cannot write: no space left on device; free some space or write to another file system")


API = """
import sys
from picpac import stores
try:
    stores.export_store(sys.argv[1], sys.argv[2], sys.argv[3])
except Exception as exc:
    print(type(exc).__name__, exc.errno, isinstance(exc, OSError))
"""


@pytest.mark.parametrize("kind, code", [("tfrecord", errno.ENOSPC), ("sqlite", None), ("hdf5", None)])
def test_the_error_is_a_file_io_error(kind, code, big_db, tmp_path):
    _needs(kind)
    (tmp_path / "api.py").write_text(API)
    done = on_small_disk(tmp_path / "disk", f'{sys.executable} {tmp_path / "api.py"} {big_db} "$DISK/x.{kind}" {kind}')
    assert done.stdout.split() == ["FileIOError", str(code), "True"], done.stderr
