"""Durable store exports (StoreWriter in picpac/stores/base.py): fsync before and after the rename,
no temporary left behind, stale temporaries of dead processes removed, symbolic links written through."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import warnings

import pytest

import picpac
from picpac import stores
from picpac.errors import PicPacValueError
from picpac.stores.binary import index_path

from store_helpers import KINDS, _needs, store_path

OLD = time.time() - 3600


def write(path, kind: str, images: list[bytes], **options) -> None:
    with stores.WRITERS[kind](path, metadata={"classes": ["a"]}, **options) as w:
        for i, image in enumerate(images):
            w.append(image=image, label=i)


def images_of(path, kind: str) -> list[bytes]:
    with stores.open_reader(path, kind) as r:
        return [bytes(r[i]["image"]) for i in range(len(r))]


def store_files(kind: str, name: str) -> list[str]:
    return sorted([name, name + ".idx"] if kind == "binary" else [name])


def exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def stale(directory, name: str, pid: int, hex8: str) -> str:
    temp = os.path.join(str(directory), f".{name}.{pid}-{hex8}.picpac-tmp")
    with open(temp, "wb") as f:
        f.write(b"left by a crash")
    os.utime(temp, (OLD, OLD))
    return temp


@pytest.mark.parametrize("kind", KINDS)
def test_an_export_fsyncs_the_store_before_the_rename_and_the_directory_after(kind, tmp_path, monkeypatch):
    _needs(kind)
    path = store_path(tmp_path, kind)
    write(path, kind, [b"old"])
    events = []
    fsync, rename = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", os.fspath(a), os.fspath(b))),
                                                     rename(a, b)))
    write(path, kind, [b"new", b"er"])
    monkeypatch.undo()
    assert images_of(path, kind) == [b"new", b"er"]
    assert sorted(os.listdir(tmp_path)) == store_files(kind, "data." + kind)
    renames = [i for i, e in enumerate(events) if e[0] == "replace" and e[2] in (path, index_path(path))]
    assert len(renames) == (2 if kind == "binary" else 1)
    temps = {e[1] for e in events if e[0] == "replace" and e[2] in (path, index_path(path))}
    synced = [e[1] for e in events[:renames[0]] if e[0] == "fsync"]
    for temp in temps:  # every byte of the new store is durable before the first rename
        assert temp in synced or any(s.startswith(temp + os.sep) for s in synced)
    assert events[-1] == ("fsync", str(tmp_path))  # and the directory's new entries after the last


@pytest.mark.parametrize("kind", KINDS)
def test_sync_false_renames_without_any_fsync(kind, tmp_path, monkeypatch):
    _needs(kind)
    path = store_path(tmp_path, kind)
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    write(path, kind, [b"a", b"b"], sync=False)
    monkeypatch.undo()
    assert calls == [] and images_of(path, kind) == [b"a", b"b"]
    assert sorted(os.listdir(tmp_path)) == store_files(kind, "data." + kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_removes_stale_temps_of_dead_processes_only(kind, tmp_path):
    _needs(kind)
    name = "data." + kind
    path = store_path(tmp_path, kind)
    pid = exited_pid()
    removed = [stale(tmp_path, name, pid, "0000000a")]
    if kind == "binary":
        removed.append(stale(tmp_path, name + ".idx", pid, "0000000b"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        kept = [stale(tmp_path, name, child.pid, "0000000c"),  # a live writer's
                os.path.join(str(tmp_path), f".{name}.{pid}-0000000d.picpac-tmp"),  # changed just now
                stale(tmp_path, "other." + kind, pid, "0000000e")]  # another path's
        open(kept[1], "wb").close()
        write(path, kind, [b"x"])
        assert images_of(path, kind) == [b"x"]
        assert not any(os.path.exists(p) for p in removed) and all(os.path.exists(p) for p in kept)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("kind", KINDS)
def test_a_symbolic_link_is_written_through_to_its_target(kind, tmp_path):
    _needs(kind)
    (tmp_path / "real").mkdir()
    target = store_path(tmp_path / "real", kind)
    write(target, kind, [b"old"])
    link = str(tmp_path / "link")
    os.symlink(target, link)
    w = stores.WRITERS[kind](link)
    assert w.path == link
    w.append(image=b"new")
    w.close()
    assert os.path.islink(link) and os.readlink(link) == target
    assert images_of(target, kind) == [b"new"] and images_of(link, kind) == [b"new"]
    assert sorted(os.listdir(tmp_path / "real")) == store_files(kind, "data." + kind)
    dangling = str(tmp_path / "dangling")
    os.symlink("real/new." + kind, dangling)  # a link to a store not written yet: the target is created
    write(dangling, kind, [b"first"])
    assert os.path.islink(dangling) and images_of(str(tmp_path / "real" / f"new.{kind}"), kind) == [b"first"]


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "lmdb"])
def test_a_directory_at_the_path_of_a_file_store_is_refused_before_writing(kind, tmp_path):
    (tmp_path / "dir").mkdir()
    os.symlink("dir", tmp_path / "link")
    for path in (tmp_path / "dir", tmp_path / "link"):
        with pytest.raises(PicPacValueError, match=f"{path}: is a directory"):
            stores.WRITERS[kind](path)
    assert sorted(os.listdir(tmp_path)) == ["dir", "link"] and os.listdir(tmp_path / "dir") == []


def test_lmdb_replaces_an_old_store_directory_and_refuses_another_directory(tmp_path):
    _needs("lmdb")
    path = str(tmp_path / "data.lmdb")
    write(path, "lmdb", [b"old"] * 3)
    write(path, "lmdb", [b"new"])
    assert images_of(path, "lmdb") == [b"new"] and os.listdir(tmp_path) == ["data.lmdb"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_bytes(b"mine")
    with pytest.raises(PicPacValueError, match="not an lmdb store"):
        stores.WRITERS["lmdb"](tmp_path / "other")
    assert os.listdir(tmp_path / "other") == ["keep.txt"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_dropped_without_close_warns_with_the_records_lost_and_writes_nothing(kind, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    write(path, kind, [b"old"])  # an existing store: left as it was
    before = sorted(os.listdir(tmp_path))
    w = stores.WRITERS[kind](path)
    for i in range(3):
        w.append(image=b"new %d" % i, label=i)
    with pytest.warns(picpac.UnclosedWriterWarning) as caught:
        del w
        gc.collect()
    assert [str(c.message) for c in caught] == [
        f"picpac.stores.{stores.WRITERS[kind].__name__}({path!r}) was dropped without close(): 3 record(s) appended "
        f"were not written and {path} was left as it was; call close() (or use `with "
        "picpac.stores.open_writer(...) as w:`) to write them"]
    assert sorted(os.listdir(tmp_path)) == before and images_of(path, kind) == [b"old"]  # no temporary left
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # closed, aborted and with-block writers never warn
        for end in ("close", "abort"):
            w = stores.WRITERS[kind](path)
            w.append(image=b"x")
            getattr(w, end)()
            del w
            gc.collect()
        write(path, kind, [b"y"])
    assert [str(c.message) for c in caught] == []


def test_a_writer_that_failed_to_start_does_not_warn(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py raises ImportError in the writer's start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(stores.MissingPackageError):
            stores.open_writer(tmp_path / "x.hdf5", "hdf5")
        gc.collect()
    assert [str(c.message) for c in caught] == [] and os.listdir(tmp_path) == []
