"""Durable output (picpac/file/durable.py): temporary names, fsync, the atomic replace, and which
temporary files of dead processes are removed (and which are never touched)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from picpac.file import durable

OLD = time.time() - 3600


def dead_pid() -> int:
    """The pid of a child that has exited and been reaped: no process has it (until reused)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def live_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def make_temp(directory, base: str, pid: int, *, hex8: str = "0123abcd", kind: str = "file", age: float = OLD) -> str:
    """A temporary as a writer of ``directory/base`` with process ``pid`` names it, last changed at ``age``."""
    path = os.path.join(str(directory), f".{base}.{pid}-{hex8}.picpac-tmp")
    if kind == "file":
        with open(path, "wb") as f:
            f.write(b"partial")
    else:
        os.makedirs(os.path.join(path, "sub"))
        with open(os.path.join(path, "sub", "data.mdb"), "wb") as f:
            f.write(b"partial")
        for p in (os.path.join(path, "sub", "data.mdb"), os.path.join(path, "sub")):
            os.utime(p, (age, age))
    os.utime(path, (age, age))
    return path


def test_temp_path_is_beside_the_path_with_pid_and_8_hex_digits(tmp_path):
    path = str(tmp_path / "data.tar")
    temp = durable.temp_path(path)
    assert os.path.dirname(temp) == str(tmp_path)
    assert re.fullmatch(rf"\.data\.tar\.{os.getpid()}-[0-9a-f]{{8}}\.picpac-tmp", os.path.basename(temp))
    assert durable.temp_path(path) != temp
    assert os.path.dirname(durable.temp_path("relative.bin")) == os.getcwd()


def test_target_follows_symbolic_links_to_the_final_file(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "data.bin").write_bytes(b"x")
    os.symlink(tmp_path / "real" / "data.bin", tmp_path / "hop")
    os.symlink("hop", tmp_path / "link")
    os.symlink("real/missing.bin", tmp_path / "dangling")
    assert durable.target(tmp_path / "link") == str(tmp_path / "real" / "data.bin")
    assert durable.target(str(tmp_path / "dangling")) == str(tmp_path / "real" / "missing.bin")
    assert durable.target(tmp_path / "plain") == str(tmp_path / "plain")


def test_replace_moves_the_temp_over_the_path(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    for sync in (True, False):
        temp = durable.temp_path(str(path))
        with open(temp, "wb") as f:
            f.write(b"new %d" % sync)
        durable.replace(temp, str(path), sync=sync)
        assert path.read_bytes() == b"new %d" % sync and os.listdir(tmp_path) == ["out.bin"]


def test_replace_fsyncs_the_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events = []
    fsync, rename = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a), str(b))), rename(a, b)))
    temp = durable.temp_path(str(tmp_path / "out"))
    with open(temp, "wb") as f:
        f.write(b"data")
    durable.replace(temp, str(tmp_path / "out"))
    assert events == [("fsync", temp), ("replace", temp, str(tmp_path / "out")), ("fsync", str(tmp_path))]
    events.clear()
    temp = durable.temp_path(str(tmp_path / "out"))
    open(temp, "wb").close()
    durable.replace(temp, str(tmp_path / "out"), sync=False)
    assert events == [("replace", temp, str(tmp_path / "out"))]


def test_fsync_path_syncs_every_file_of_a_tree_and_its_directories_without_following_links(tmp_path, monkeypatch):
    tree = tmp_path / "store"
    (tree / "a").mkdir(parents=True)
    (tree / "data.mdb").write_bytes(b"1")
    (tree / "a" / "b").write_bytes(b"2")
    os.symlink("/dev/null", tree / "a" / "link")
    os.mkfifo(tree / "fifo")  # opening it would block: it must be skipped
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd)))
    durable.fsync_path(str(tree))
    assert sorted(synced) == sorted([str(tree / "data.mdb"), str(tree / "a" / "b"), str(tree / "a"), str(tree)])
    assert synced.index(str(tree / "a" / "b")) < synced.index(str(tree / "a")) < synced.index(str(tree))


def test_stale_temps_of_dead_processes_are_removed(tmp_path):
    pid = dead_pid()
    file = make_temp(tmp_path, "data.tar", pid)
    tree = make_temp(tmp_path, "data.tar", pid, hex8="89abcdef", kind="dir")
    (tmp_path / "data.tar").write_bytes(b"the store")
    assert sorted(durable.remove_stale_temps(str(tmp_path / "data.tar"))) == sorted([file, tree])
    assert os.listdir(tmp_path) == ["data.tar"]


def test_a_live_process_s_temp_is_kept_even_when_old(tmp_path, live_pid):
    kept = [make_temp(tmp_path, "x", live_pid), make_temp(tmp_path, "x", os.getpid(), kind="dir"),
            make_temp(tmp_path, "x", 1, hex8="ffffffff")]  # pid 1: alive (or another user's: PermissionError)
    assert durable.remove_stale_temps(str(tmp_path / "x"), grace=0) == []
    assert all(os.path.exists(p) for p in kept)


def test_a_recently_changed_temp_of_a_dead_pid_is_kept_for_the_grace_period(tmp_path):
    """A writer on another host of a shared file system has a pid that means nothing here."""
    pid = dead_pid()
    fresh = make_temp(tmp_path, "x", pid, age=time.time())
    tree = make_temp(tmp_path, "x", pid, hex8="11111111", kind="dir")
    os.utime(os.path.join(tree, "sub", "data.mdb"))  # a file deep inside was just written
    assert durable.remove_stale_temps(str(tmp_path / "x")) == []
    assert sorted(durable.remove_stale_temps(str(tmp_path / "x"), grace=0)) == sorted([fresh, tree])
    assert os.listdir(tmp_path) == []


def test_a_locked_temp_is_kept_whatever_its_name_says(tmp_path):
    """The lock of a writer on another host (here: a child holding an inherited flock) keeps its temp."""
    temp = make_temp(tmp_path, "x", dead_pid())
    fd = durable.lock(temp)
    assert fd is not None
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              pass_fds=(fd,))
    os.close(fd)  # the child's copy of the descriptor keeps the lock
    try:
        assert durable.remove_stale_temps(str(tmp_path / "x"), grace=0) == []
    finally:
        holder.communicate(b"")
    assert durable.remove_stale_temps(str(tmp_path / "x"), grace=0) == [temp]


def test_lock_is_exclusive_and_works_on_directories(tmp_path):
    (tmp_path / "d").mkdir()
    for path in (tmp_path / "f", tmp_path / "d"):
        if not path.exists():
            path.write_bytes(b"")
        fd = durable.lock(str(path))
        assert fd is not None and durable.lock(str(path)) is None
        os.close(fd)
        fd = durable.lock(str(path))
        assert fd is not None
        os.close(fd)
    assert durable.lock(str(tmp_path / "missing")) is None


def test_only_exact_temp_names_are_ever_removed(tmp_path):
    pid = dead_pid()
    names = [f".x.{pid}-0123abcd.picpac-tmp.idx", f".x.{pid}-0123ABCD.picpac-tmp", f".x.{pid}-0123abc.picpac-tmp",
             f".x.{pid}-0123abcde.picpac-tmp", f"x.{pid}-0123abcd.picpac-tmp", f".xy.{pid}-0123abcd.picpac-tmp",
             f".x.0{pid}-0123abcd.picpac-tmp", ".x.0-0123abcd.picpac-tmp", f".x.{pid}-0123abcd.picpac-tm",
             f".x.{pid}0123abcd.picpac-tmp", ".x.99999999999-0123abcd.picpac-tmp", f"..x.{pid}-0123abcd.picpac-tmp",
             "x", ".x.idx.%d-0123abcd.picpac-tmp" % pid]
    for name in names:
        (tmp_path / name).write_bytes(b"not ours")
        os.utime(tmp_path / name, (OLD, OLD))
    os.symlink(tmp_path / "x", tmp_path / f".x.{pid}-00000000.picpac-tmp")  # a link with our name: never
    os.mkfifo(tmp_path / f".x.{pid}-00000001.picpac-tmp")
    os.utime(tmp_path / f".x.{pid}-00000001.picpac-tmp", (OLD, OLD))
    assert durable.remove_stale_temps(str(tmp_path / "x"), grace=0) == []
    assert len(os.listdir(tmp_path)) == len(names) + 2 and (tmp_path / "x").read_bytes() == b"not ours"
    # the index temporaries of a binary store "x" are those of the path "x.idx"
    assert durable.remove_stale_temps(str(tmp_path / "x.idx"), grace=0) == [str(tmp_path / names[-1])]


def test_a_missing_or_unreadable_directory_removes_nothing(tmp_path):
    assert durable.remove_stale_temps(str(tmp_path / "missing" / "x"), grace=0) == []
