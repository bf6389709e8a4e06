"""picpac.file.shards: resolving a dataset spec to shard paths, index files, the ShardedReader."""
from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from picpac import MissingPathError, PicPacValueError, Reader
from picpac.file.shards import ShardedReader, open_database, read_index, resolve, write_index

from helpers import make_db


@pytest.fixture
def shards(tmp_path):
    for name, n in (("b-1.picpac", 4), ("b-0.picpac", 3), ("b-10.picpac", 2)):
        make_db(tmp_path / name, n)
    return tmp_path


def test_glob_is_sorted_and_lists_expand(shards):
    assert resolve(str(shards / "b-*.picpac")) == [str(shards / n) for n in ("b-0.picpac", "b-1.picpac", "b-10.picpac")]
    assert resolve([shards / "b-1.picpac", str(shards / "b-0.picpac")]) == [str(shards / "b-1.picpac"),
                                                                              str(shards / "b-0.picpac")]
    assert resolve(str(shards / "b-0.picpac")) == [str(shards / "b-0.picpac")]
    with pytest.raises(MissingPathError, match="no file matches"):
        resolve(str(shards / "c-*.picpac"))
    with pytest.raises(PicPacValueError, match="empty"):
        resolve([])


def test_index_text_and_json(shards):
    write_index(shards / "all.shards", [shards / "b-0.picpac", shards / "b-1.picpac"])
    text = (shards / "all.shards").read_text()
    assert text.splitlines()[1:] == ["b-0.picpac", "b-1.picpac"]  # relative to the index's folder
    assert read_index(shards / "all.shards") == [str(shards / "b-0.picpac"), str(shards / "b-1.picpac")]
    (shards / "sub").mkdir()
    (shards / "sub" / "j.shards").write_text('{"shards": ["../b-10.picpac", "../b-0.picpac"]}')
    assert [p.rsplit("/", 1)[1] for p in resolve(str(shards / "sub" / "j.shards"))] == ["b-10.picpac", "b-0.picpac"]
    assert not list(shards.glob(".*tmp"))  # written atomically: no temp file left


def test_index_errors(shards):
    (shards / "bad.shards").write_text("b-0.picpac\n\n# comment\nmissing.picpac\n")
    with pytest.raises(MissingPathError, match="shard 'missing.picpac' does not exist"):
        read_index(shards / "bad.shards")
    (shards / "empty.shards").write_text("# nothing\n\n")
    with pytest.raises(PicPacValueError, match="names no shards"):
        read_index(shards / "empty.shards")
    (shards / "j.shards").write_text('{"files": []}')
    with pytest.raises(PicPacValueError, match="JSON shard index"):
        read_index(shards / "j.shards")
    (shards / "deep.shards").write_text('{"shards": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(PicPacValueError, match=r"deep\.shards: the shard index is not valid JSON \(nested too deeply"):
        read_index(shards / "deep.shards")
    with pytest.raises(MissingPathError, match="no such shard index"):
        read_index(shards / "none.shards")
    with pytest.raises(PicPacValueError):
        write_index(shards / "x.shards", [])


def test_sharded_reader_is_the_pool_in_order(shards):
    paths = resolve(str(shards / "b-*.picpac"))
    with open_database(paths) as reader, open_database(paths[0]) as single:
        assert isinstance(reader, ShardedReader) and isinstance(single, Reader)
        assert len(reader) == 9 and reader.offsets.tolist() == [0, 3, 7, 9]
        assert reader.labels.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
        assert bytes(reader[4]["image"]) == bytes(Reader(paths[1])[1]["image"])
        assert reader.locate(-1) == (2, 1)
        with pytest.raises(IndexError):
            reader[9]
        assert len(list(reader)) == 9
        clone = pickle.loads(pickle.dumps(reader))
        assert np.array_equal(clone.labels, reader.labels) and bytes(clone[8]["image"]) == bytes(reader[8]["image"])
        clone.close()


def open_fds(folder) -> list[str]:
    """The files under ``folder`` this process holds descriptors of (other threads' descriptors, which come and
    go in a long test run, are not counted)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{folder}{os.sep}"):
            held.append(target)
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd (Linux)")
def test_open_readers_hold_no_file_descriptor(tmp_path):
    paths = [str(make_db(tmp_path / f"s-{k:03d}.picpac", 2)) for k in range(40)]
    readers = [Reader(p) for p in paths]
    with ShardedReader(paths) as sharded:
        assert open_fds(tmp_path) == []  # mmap.mmap kept a duplicate of each file's descriptor
        assert [bytes(sharded[2 * k + 1]["image"]) for k in range(40)] == [bytes(r[1]["image"]) for r in readers]
    wanted = bytes(readers[0][1]["image"])
    record = readers[0][1]
    for r in readers:
        r.close()
    del readers, r
    gc.collect()
    assert bytes(record["image"]) == wanted  # a record keeps the mapping after its Reader is gone
    assert open_fds(tmp_path) == []


CUT = r"""
import os, sys
import picpac
from picpac.file.shards import ShardedReader

paths = sys.argv[1:]
for k, path in enumerate(paths):
    with picpac.Writer(path) as w:
        for i in range(4):
            w.append(image=os.urandom(20_000), label=4 * k + i)
reader = ShardedReader(paths)
assert reader[1].label == 1 and reader[5].label == 5
with open(paths[1], "r+b") as f:  # shard 1, just read, overwritten in place by a shorter file
    f.truncate(0)
    f.write(b"other bytes" * 100)
assert reader[2].label == 2  # shard 0 is intact
try:
    reader[6]
except picpac.PicPacError as exc:
    print(type(exc).__name__, exc)
"""


def test_a_shard_cut_while_it_is_read_is_an_error_naming_it_not_a_sigbus(tmp_path):
    paths = [str(tmp_path / f"s-{k}.picpac") for k in range(3)]
    done = subprocess.run([sys.executable, "-c", CUT, *paths], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7: killed by SIGBUS
    assert done.stdout.startswith(f"PicPacError {paths[1]}: the file was cut to 1100 bytes while it was being read "
                                  "(it had "), done.stdout
    assert "truncated or overwritten in place" in done.stdout
