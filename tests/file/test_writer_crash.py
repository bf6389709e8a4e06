"""SIGKILL a writing process at random moments: the file on disk is always a committed state."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import picpac

from helpers import payload

TRIALS = 24
BASE_RECORDS = 40
COMMIT_EVERY = 50
NEW_RECORDS = 600

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import picpac
    from helpers import payload

    path, mode, start, count, commit_every = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
    with picpac.Writer(path, append=(mode == "append"), overwrite=(mode == "create")) as w:
        print("started", flush=True)
        for i in range(start, start + count):
            w.append(image=payload(i, 200 + (i * 7919) % 4000), label=i, meta={{"i": i}})
            print(i - start, flush=True)
            if commit_every and (i - start + 1) % commit_every == 0:
                w.commit()
    """
).format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_child(path, mode: str, start: int, count: int, commit_every: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(path), mode, str(start), str(count), str(commit_every)],
                            stdout=subprocess.PIPE)


def make_base(path) -> None:
    with picpac.Writer(path) as w:
        for i in range(BASE_RECORDS):
            w.append(image=payload(i, 200 + (i * 7919) % 4000), label=i, meta={"i": i})


def committed_records(path) -> int:
    """Open the DB, check every record against what the writer wrote, and return the count."""
    with picpac.Reader(path) as r:
        for i in range(len(r)):
            rec = r.read(i, check=True)
            assert bytes(rec["image"]) == payload(i, 200 + (i * 7919) % 4000)
            assert rec.label == i and rec.meta == {"i": i}
        return len(r)


def kill_at_random(proc: subprocess.Popen, rng: random.Random) -> None:
    """SIGKILL the writer after a random number of appended records plus a random few ms."""
    proc.stdout.readline()  # "started": the Writer is open
    for _ in range(rng.randrange(NEW_RECORDS)):
        if not proc.stdout.readline():
            break
    time.sleep(rng.uniform(0, 0.005))
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()


@pytest.mark.parametrize("mode", ["create", "append"])
def test_sigkill_leaves_a_committed_state(tmp_path, mode):
    rng = random.Random(1234)
    seen = set()
    for trial in range(TRIALS):
        path = tmp_path / f"{mode}-{trial}.picpac"
        start = 0
        if mode == "append":
            make_base(path)
            start = BASE_RECORDS
        proc = run_child(path, mode, start, NEW_RECORDS, COMMIT_EVERY)
        kill_at_random(proc, rng)
        if mode == "create":
            # the temp file is renamed over path at the first commit; before it, no DB exists
            if not path.exists():
                seen.add(0)
                continue
            committed = committed_records(path)
        else:
            committed = committed_records(path) - BASE_RECORDS
        assert committed % COMMIT_EVERY == 0 or committed == NEW_RECORDS
        seen.add(committed)
        # the killed writer's leftovers never block the next append
        with picpac.Writer(path, append=True) as w:
            w.append(image=b"after", label=-1)
        with picpac.Reader(path) as r:
            assert bytes(r[-1]["image"]) == b"after"
            assert len(r) == start + committed + 1
    # the kills landed at many different moments of the writing
    assert len(seen) >= 6, seen


def test_sigkill_while_replacing_keeps_the_old_database(tmp_path):
    rng = random.Random(99)
    for trial in range(8):
        path = tmp_path / f"replace-{trial}.picpac"
        make_base(path)
        proc = run_child(path, "create", 0, NEW_RECORDS, 0)  # no intermediate commit: one rename at close
        kill_at_random(proc, rng)
        assert committed_records(path) in (BASE_RECORDS, NEW_RECORDS)


FULL_DISK_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    sys.path.insert(0, {tests!r})
    import picpac
    from helpers import payload

    path, mode = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))
    try:
        with picpac.Writer(path, append=(mode == "append")) as w:
            for i in range(1000):
                w.append(image=payload(i, 3000), label=i)
                if i % 4 == 3:
                    w.commit()
    except OSError as exc:
        print("failed", exc.errno, flush=True)
    """
).format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("mode", ["create", "append"])
def test_disk_full_leaves_a_committed_state(tmp_path, mode):
    path = tmp_path / "db.picpac"
    if mode == "append":
        with picpac.Writer(path) as w:
            w.append(image=b"old", label=-1)
    out = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, str(path), mode], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("failed 27"), out.stderr  # EFBIG
    with picpac.Reader(path) as r:
        first = 1 if mode == "append" else 0
        assert len(r) > first and (len(r) - first) % 4 == 0  # exactly the records of the last commit
        for i in range(first, len(r)):
            assert bytes(r.read(i, check=True)["image"]) == payload(i - first, 3000)
    assert sorted(os.listdir(tmp_path)) == ["db.picpac"]  # no temp file left behind
