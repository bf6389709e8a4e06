"""`picpac compact` in place beside other compacts and an appending Writer, and seeded SIGKILL trials of the real
command line: whenever it is killed, and whatever runs beside it, no committed record is lost or doubled."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import picpac
from picpac.tools.compact import compact
from picpac.tools.verify import verify

from helpers import children, payload

TRIALS = 50


def ids(path: Path) -> list[int]:
    """The record ids (the first 8 bytes of each image) of a database, checking every checksum."""
    with picpac.Reader(path) as reader:
        return [int(bytes(record["image"][:8])) for record in reader]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["picpac", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


APPENDER = textwrap.dedent("""
    import os, sys, time
    import picpac
    from picpac.errors import WriterBusyError
    path, first, stop, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    n = first
    while True:
        try:
            with picpac.Writer(path, append=True, sync=False) as w:
                for i in range(n, n + 3):
                    w.append(image=b"%08d" % i + bytes(2000), label=i % 3)
        except WriterBusyError:
            time.sleep(0.005)
            continue
        print(n, n + 1, n + 2, flush=True)  # committed
        n += 3
        if os.path.exists(stop):
            break
        time.sleep(pause)
""")


def test_compacts_beside_an_appender_never_lose_a_committed_record(tmp_path):
    """Two in-place compacts at once, one of them killed at a seeded random moment, while a Writer appends and
    commits in a loop: every record whose commit returned is in the database exactly once."""
    db = tmp_path / "db.picpac"
    with picpac.Writer(db, sync=False) as w:
        for i in range(200):
            w.append(image=b"%08d" % i + payload(i, 2000), label=i % 3)
    stop = tmp_path / "stop"
    appender = subprocess.Popen([sys.executable, "-c", APPENDER, str(db), "1000", str(stop), "0.01"],
                                stdout=subprocess.PIPE, text=True)  # (the compacts take the lock in its pauses)
    rng = random.Random(25)
    outcomes: list[int] = []
    try:
        while outcomes.count(-signal.SIGKILL) < TRIALS and len(outcomes) < 4 * TRIALS:
            pair = [start("compact", str(db)), start("compact", str(db))]
            time.sleep(rng.uniform(0.05, 0.6))  # from the interpreter's start-up to past the rename
            pair[rng.randrange(2)].send_signal(signal.SIGKILL)
            for proc in pair:
                _, err = proc.communicate(timeout=60)
                assert proc.returncode in (0, 2, -signal.SIGKILL), err
                busy = "a Writer (or another picpac compact) holds this database's lock"
                assert proc.returncode != 2 or busy in err, err
                outcomes.append(proc.returncode)
    finally:
        stop.touch()
        committed, _ = appender.communicate(timeout=60)
    assert appender.returncode == 0
    assert outcomes.count(-signal.SIGKILL) == TRIALS and outcomes.count(0) >= TRIALS // 4, outcomes
    appended = [int(i) for line in committed.splitlines() for i in line.split()]
    assert len(appended) >= 3 * TRIALS
    found = ids(db)
    assert sorted(found) == list(range(200)) + appended  # each committed record, once
    assert verify(db).ok
    os.remove(stop)



def opened(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to hold a flock back")
def test_a_compact_that_locks_a_file_replaced_since_it_opened_it_compacts_the_new_one(tmp_path):
    """The race, made certain: strace holds back the flock of a `picpac compact` for a second after it opened the
    database, and meanwhile another compact renames a new file over it and a Writer commits a record to that one.
    Compacting the file it opened (the old one) over the new one would drop that record."""
    db = tmp_path / "db.picpac"
    for r in range(3):
        with picpac.Writer(db, append=r > 0, sync=False) as w:
            w.append(image=b"%08d" % r + payload(r, 2000), label=r)
    held = subprocess.Popen(["strace", "-qq", "-o", os.devnull, "-e", "trace=flock", "-e",
                             "inject=flock:delay_enter=1000000:when=1", "picpac", "compact", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not any(opened(pid, db) for pid in children(held.pid)):
        assert time.monotonic() < deadline and held.poll() is None, held.communicate()
        time.sleep(0.005)
    old = db.stat().st_ino
    compact(db)  # renames a new file over the one the held compact opened
    with picpac.Writer(db, append=True, sync=False) as w:
        w.append(image=b"%08d" % 3 + payload(3, 2000), label=3)
    assert db.stat().st_ino != old and ids(db) == [0, 1, 2, 3]
    out, err = held.communicate(timeout=60)
    assert held.returncode == 0, err
    assert ids(db) == [0, 1, 2, 3], out
