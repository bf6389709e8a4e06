"""A script writing with picpac.Writer, sent SIGTERM or SIGHUP at random moments: inside
``picpac.exit_on_signals()`` it exits with 128 + the signal's number leaving no temporary file and a complete
database or none; without it Python's default action kills it at once, and the next Writer of the path
removes the temporary file it left (its process is gone)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import picpac
from picpac.file import durable

from helpers import alive, children, payload

RECORDS = 2000

SCRIPT = textwrap.dedent(
    """
    import contextlib, sys, time
    sys.path.insert(0, {tests!r})
    import picpac
    from helpers import payload

    path, guarded, commit_every, count = sys.argv[1], sys.argv[2] == "guarded", int(sys.argv[3]), int(sys.argv[4])
    with picpac.exit_on_signals() if guarded else contextlib.nullcontext():
        with picpac.Writer(path) as w:
            print("started", flush=True)
            for i in range(count):
                w.append(image=payload(i, 500 + i % 1000), label=i)
                if commit_every and (i + 1) % commit_every == 0:
                    w.commit()
                time.sleep(0.0005)
    print("done", flush=True)
    """
).format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(path, guarded: bool, commit_every: int = 0, count: int = RECORDS) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(path), "guarded" if guarded else "plain",
                             str(commit_every), str(count)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "started\n", proc.communicate()
    return proc


def temps(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(durable.TEMP_SUFFIX))


def committed(path) -> int | None:
    """The records of the database at ``path``, each checked (None when there is no database)."""
    if not os.path.exists(path):
        return None
    with picpac.Reader(path) as r:
        for i in range(len(r)):
            assert bytes(r.read(i, check=True)["image"]) == payload(i, 500 + i % 1000)
        return len(r)


def test_inside_exit_on_signals_a_signal_leaves_no_temporary_file(tmp_path):
    rng = random.Random(5)
    outcomes = set()
    for trial in range(4):
        signum = (signal.SIGTERM, signal.SIGHUP)[trial % 2]
        commit_every = (0, 300)[trial // 2]
        path = tmp_path / f"db{trial}.picpac"
        proc = start(path, guarded=True, commit_every=commit_every)
        time.sleep(rng.uniform(0, 0.6))
        spawned = children(proc.pid)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        # -signum: Python's default action, once the block has ended (the Writer closed) and Python exits
        assert proc.returncode in (128 + signum, 0, -signum), (proc.returncode, err)
        outcomes.add(proc.returncode)
        if proc.returncode == 128 + signum:
            assert out == "" and err == "", err  # Terminated is a SystemExit: no traceback
        assert temps(tmp_path) == []
        count = committed(path)
        assert proc.returncode == 128 + signum or count == RECORDS
        if commit_every:
            assert count is None or count % commit_every == 0 or count == RECORDS, count
        else:
            assert count in (None, RECORDS), count  # one rename at close: all or nothing
        assert not any(alive(pid) for pid in spawned)
    assert outcomes & {143, 129}, outcomes


def test_without_it_the_next_writer_removes_the_killed_writer_s_temporary_file(tmp_path):
    path = tmp_path / "db.picpac"
    proc = start(path, guarded=False)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # Python's default action: killed, nothing unwound
    left = temps(tmp_path)
    assert left == [name for name in left if name.startswith(f".db.picpac.{proc.pid}-")] and len(left) == 1
    assert not path.exists()
    # a temporary file touched within the grace period may be a writer's on another host: kept for now
    with picpac.Writer(path) as w:
        w.append(image=b"x")
    assert temps(tmp_path) == left
    # once it is older, its process is gone and nothing holds its lock: the next Writer removes it
    old = time.time() - durable.STALE_GRACE - 5
    os.utime(tmp_path / left[0], (old, old))
    with picpac.Writer(path, overwrite=True) as w:
        w.append(image=b"y")
    assert temps(tmp_path) == [] and os.listdir(tmp_path) == ["db.picpac"]
