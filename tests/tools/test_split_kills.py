"""Seeded SIGKILL trials of the real `picpac split --overwrite`: whenever it is killed, the parts present are of one
split (one run's id, no record in two parts), each opens, and a complete set holds every record once."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import picpac
from picpac.tools.split import split_db

from helpers import payload

TRIALS = 50
FOLDS = 3


def parts(folder: Path) -> list[Path]:
    return [folder / f"db-fold{f}.picpac" for f in range(FOLDS)]


def state(folder: Path) -> list[tuple[int, int] | None]:
    """(inode, mtime) of each part, None for a missing one."""
    found = []
    for path in parts(folder):
        try:
            st = path.stat()
        except FileNotFoundError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_mtime_ns))
    return found


def check(folder: Path, records: int) -> int:
    """The invariants; returns how many parts are present."""
    runs, seen = set(), []
    for path in parts(folder):
        if path.exists():
            with picpac.Reader(path) as reader:
                split = reader.metadata["split"]
                runs.add((split["seed"], split.get("id")))
                seen += [int(bytes(r["image"][:8])) for r in reader]
    assert len(runs) <= 1, f"parts of {len(runs)} splits: {runs}"
    assert len(seen) == len(set(seen)), "a record in two parts"
    present = sum(path.exists() for path in parts(folder))
    assert present < FOLDS or sorted(seen) == list(range(records))
    return present


def test_a_killed_split_never_leaves_parts_of_two_splits(tmp_path):
    """Each run splits with another seed, so parts of two runs hold different records. Half the kills come at a
    seeded random moment, half just after the first part on disk changed (the publishing, where an old and a new
    part could sit side by side)."""
    db = tmp_path / "db.picpac"
    with picpac.Writer(db, sync=False) as w:
        for i in range(90):
            w.append(image=b"%08d" % i + payload(i, 3000), label=i % 3)
    done = subprocess.run(["picpac", "split", str(db), "--folds", str(FOLDS)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    rng = random.Random(2025)
    kills = trials = 0
    partial = []
    while kills < TRIALS:
        trials += 1
        assert trials < 4 * TRIALS, f"only {kills} of {trials} kills landed"
        before = state(tmp_path)
        proc = subprocess.Popen(["picpac", "split", str(db), "--folds", str(FOLDS), "--overwrite", "--seed",
                                 str(trials)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if trials % 2:
            time.sleep(rng.uniform(0.05, 0.6))
        else:
            deadline = time.monotonic() + 30
            while state(tmp_path) == before and proc.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.0002)
            time.sleep(rng.uniform(0, 0.002))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), err
        kills += proc.returncode == -signal.SIGKILL
        if check(tmp_path, 90) < FOLDS:
            partial.append(trials)  # (the next run completes the set)
    leftovers = [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")]
    assert len(leftovers) <= 1  # the last killed run's, at most: each run finishes (or removes) what the last left
    done = subprocess.run(["picpac", "split", str(db), "--folds", str(FOLDS), "--overwrite"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert check(tmp_path, 90) == FOLDS and not [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")]
    print(f"{kills} kills in {trials} trials, {len(partial)} left a partial set")


KILLED_WHILE_REPLACING = """
import os, signal, sys
from picpac.file import durable
from picpac.tools.split import split_db
publish = durable.publish
def first_then_die(temp, target, **kwargs):  # the first new part moves into place, then the process dies
    done = publish(temp, target, **kwargs)
    if not os.path.dirname(target).endswith(".picpac-tmp"):  # (not a part's Writer committing in the folder)
        os.kill(os.getpid(), signal.SIGKILL)
    return done
durable.publish = first_then_die
split_db(sys.argv[1], folds=3, seed=7, overwrite=True)
"""


def test_the_next_split_finishes_a_replacement_a_kill_interrupted_and_leaves_nothing_behind(tmp_path):
    """Killed after its first new part moved in: the other old parts are gone (an error to open, as intended) and
    its new parts wait in a hidden folder; the next split moves them in first, so the set is the killed run's,
    whole, then writes its own, and no copy of a split is left on disk."""
    db = tmp_path / "db.picpac"
    with picpac.Writer(db, sync=False) as w:
        for i in range(90):
            w.append(image=b"%08d" % i + payload(i, 300), label=i % 3)
    assert subprocess.run(["picpac", "split", str(db), "--folds", str(FOLDS)], capture_output=True).returncode == 0
    proc = subprocess.run([sys.executable, "-c", KILLED_WHILE_REPLACING, str(db)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert check(tmp_path, 90) == 1 and [p.exists() for p in parts(tmp_path)] == [True, False, False]
    (hidden,) = [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")]
    assert sorted(os.listdir(tmp_path / hidden)) == ["1.db-fold1.picpac", "2.db-fold2.picpac", "replacing.json"]
    report = split_db(db, folds=FOLDS, seed=8, overwrite=True)
    assert [os.path.basename(p) for p in report.finished] == ["db-fold1.picpac", "db-fold2.picpac"]
    assert "first finished what a split killed while replacing its parts had left: db-fold1.picpac" in report.summary()
    assert check(tmp_path, 90) == FOLDS and not [p for p in os.listdir(tmp_path) if p.endswith(".picpac-tmp")]
    with picpac.Reader(parts(tmp_path)[0]) as reader:
        assert reader.metadata["split"]["seed"] == 8
