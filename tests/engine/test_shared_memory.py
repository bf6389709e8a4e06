"""Shared-memory blocks whose creator is dead are reclaimed (engine/shared_memory.py): a real process-backend
stream in a child process group, SIGKILLed as a whole (its resource tracker too), leaves its blocks in
/dev/shm; the next stream's start removes them, and nothing else."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import picpac
from picpac.engine.shared_memory import PREFIX, _namespace, _start_time

from helpers import alive, make_db

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not sys.platform.startswith("linux"),
                                reason="needs Linux /proc and /dev/shm")

CHILD = r"""
import sys, time
import picpac

stream = picpac.ImageStream(sys.argv[1], batch=4, workers=2, backend="process")
next(stream), next(stream)
print("streaming", flush=True)
time.sleep(600)
"""


def blocks_of(pid: int) -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"{PREFIX}{pid}_")}


def group(pgid: int) -> set[int]:
    """The live processes of process group ``pgid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid and alive(int(entry)):
                    found.add(int(entry))
            except ProcessLookupError:
                pass
    return found


def test_the_blocks_of_a_killed_process_group_are_reclaimed_by_the_next_stream(tmp_path):
    db = make_db(tmp_path / "db.picpac", 30, size=(24, 18))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db)], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    made: list[Path] = []
    try:
        assert child.stdout.readline() == "streaming\n"
        left = blocks_of(child.pid)
        members = group(child.pid)
        assert left and len(members) >= 4  # the ring; the stream's process, 2 workers, the resource tracker
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while any(alive(p) for p in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in members)
        assert blocks_of(child.pid) == left  # nobody was left to unlink them

        # what must stay: other names, a live creator, another pid namespace; a reused pid's block goes
        dead, live, space = child.pid, os.getppid(), _namespace()
        keep = [f"{PREFIX}{dead}_1_{space}_nothex00", f"other_{dead}_1_{space}_0123abcd",
                f"{PREFIX}{live}_{_start_time(live)}_{space}_0123abcd", f"{PREFIX}{dead}_1_{space + 1}_0123abcd"]
        reused = f"{PREFIX}{live}_{_start_time(live) + 1}_{space}_0123abcd"
        for name in keep + [reused]:
            made.append(Path("/dev/shm") / name)
            made[-1].write_bytes(b"x")
        with picpac.ImageStream(db, batch=4, workers=1, backend="process") as stream:
            next(stream)
            assert blocks_of(child.pid) & left == set()
        assert {p.name for p in made if p.exists()} == set(keep)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        for path in made:
            path.unlink(missing_ok=True)


def test_proc_stat_reads_the_fields_after_any_command_name(tmp_path):
    """A command name may hold ') ' and spaces: the fields are those after its last ')'."""
    from picpac.engine.shared_memory import proc_stat
    odd = tmp_path / "x) S 1 ("
    odd.symlink_to(Path(sys.executable).resolve())
    child = subprocess.Popen([str(odd), "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"])
    try:
        deadline = time.monotonic() + 10
        while (proc_stat(child.pid) or [b""])[0] != b"T" and time.monotonic() < deadline:
            time.sleep(0.01)
        fields = proc_stat(child.pid)
        assert fields[0] == b"T" and int(fields[1]) == os.getpid()  # state, parent
        assert int(fields[19]) == _start_time(child.pid) > 0
    finally:
        child.kill()
        child.wait()
    assert proc_stat(child.pid) is None and _start_time(child.pid) is None
