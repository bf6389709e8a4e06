"""`picpac import` and `picpac export` sent SIGTERM or SIGHUP at random moments (batch schedulers, `timeout`,
`docker stop`, a closed terminal): exit status 128 + the signal's number and one line on stderr, no
temporary file left, the destination absent or complete (never half written), and no child process left."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac import stores

from helpers import SHARED_DATA, alive, children, payload

TEMP = ".picpac-tmp"
EXPORT_RECORDS = 1500


@pytest.fixture(autouse=True)
def console_script():
    if shutil.which("picpac") is None:
        pytest.skip("console script picpac not on PATH; run `pip install -e .`")


@pytest.fixture(scope="module")
def image_list(tmp_path_factory) -> tuple[Path, int]:
    """A list file of real images (../shared/data, each named 8 times) or of generated PNGs: an import long
    enough (seconds) for a signal to land while the Writer writes. Returns (list, number of lines)."""
    folder = tmp_path_factory.mktemp("images")
    real = SHARED_DATA / "imagenet-250"
    if real.is_dir():
        paths = sorted(p for p in real.iterdir() if p.suffix.lower() in (".jpeg", ".jpg", ".png"))
    else:
        rng = np.random.default_rng(0)
        paths = []
        for i in range(200):
            paths.append(folder / f"{i}.png")
            cv2.imwrite(str(paths[-1]), rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
    lines = [f"{p}\t{i % 5}\n" for i, p in enumerate(paths)] * 8
    listing = folder / "list.txt"
    listing.write_text("".join(lines))
    return listing, len(lines)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "db.picpac"
    with picpac.Writer(path, sync=False) as w:
        for i in range(EXPORT_RECORDS):
            w.append(image=payload(i, 40_000), label=i % 7)
    return path


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TEMP))


def signal_at(proc: subprocess.Popen, directory: Path, signum: int, delay: float, wait_for_temp: bool) -> set[int]:
    """Send ``signum`` ``delay`` s after the first temporary file appears (or after the start); the child
    processes it had then."""
    if wait_for_temp:
        deadline = time.monotonic() + 60
        while not temps(directory) and proc.poll() is None:
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.005)
    time.sleep(delay)
    spawned = children(proc.pid)
    proc.send_signal(signum)
    return spawned


def check_exit(proc: subprocess.Popen, signum: int) -> int:
    """The exit status: 128 + signum with one line on stderr; 0 when it finished first; or -signum (Python's
    default action) when the signal came before the command started or after it finished, while Python
    was starting or exiting: the callers check the output is then absent or complete."""
    _, err = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode in (0, 128 + signum, -signum), (proc.returncode, err)
    if proc.returncode == 128 + signum:
        assert err == f"picpac: terminated by {name} (temporary files removed)\n"
    return proc.returncode


def test_import_stopped_by_a_signal_leaves_nothing_behind(image_list, tmp_path):
    listing, lines = image_list
    rng = random.Random(2024)
    statuses = []
    trials = [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGTERM, False), (signal.SIGHUP, False),
              (signal.SIGTERM, True)]  # the last one lands anywhere from Python's start on
    for trial, (signum, early) in enumerate(trials):
        out = tmp_path / f"run{trial}"
        out.mkdir()
        proc = subprocess.Popen(["picpac", "import", str(listing), "db", "--threads", "1", "--max-size", "48"],
                                cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        spawned = signal_at(proc, out, signum, rng.uniform(0, 1.5 if early else 0.8), wait_for_temp=not early)
        statuses.append(check_exit(proc, signum))
        assert temps(out) == []
        if (out / "db").exists():  # it finished before the signal: complete
            with picpac.Reader(out / "db") as r:
                assert len(r) == lines and r.read(len(r) - 1, check=True).label == (lines - 1) % 5
        else:
            assert os.listdir(out) == []
            assert statuses[-1] != -signum or early  # killed unwinding nothing only before the import began
        assert not any(alive(pid) for pid in spawned)
    assert statuses.count(143) + statuses.count(129) >= 3, statuses


@pytest.mark.parametrize("kind", ["tar", "hdf5"])
def test_export_stopped_by_a_signal_leaves_nothing_behind(kind, big_db, tmp_path):
    if kind == "hdf5":
        pytest.importorskip("h5py")  # written by a child process: it must not outlive the export
    rng = random.Random(7 if kind == "tar" else 8)
    statuses = []
    for trial, signum in enumerate([signal.SIGTERM, signal.SIGHUP, signal.SIGTERM]):
        out = tmp_path / f"run{trial}"
        out.mkdir()
        dst = out / f"out.{kind}"
        proc = subprocess.Popen(["picpac", "export", "--to", kind, str(big_db), str(dst)], cwd=out,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        spawned = signal_at(proc, out, signum, rng.uniform(0, 0.4), wait_for_temp=True)
        statuses.append(check_exit(proc, signum))
        assert temps(out) == []
        if dst.exists():
            with stores.open_reader(dst, kind) as r:
                assert len(r) == EXPORT_RECORDS
                assert bytes(r[EXPORT_RECORDS - 1]["image"]) == payload(EXPORT_RECORDS - 1, 40_000)
        else:
            assert os.listdir(out) == [] and statuses[-1] != -signum
        deadline = time.monotonic() + 10  # (a child is killed by its parent before the parent exits)
        while any(alive(pid) for pid in spawned) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(alive(pid) for pid in spawned)
    assert 143 in statuses or 129 in statuses, statuses


def test_the_existing_output_is_refused_without_overwrite_and_kept_on_a_signal(image_list, tmp_path):
    """An import replacing DB (--overwrite) and stopped midway leaves the old DB as it was."""
    listing, _ = image_list
    (tmp_path / "db").write_bytes(b"old database")
    refused = subprocess.run(["picpac", "import", str(listing), "db"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2
    assert refused.stderr == "picpac: error: db: already exists; pass --overwrite (overwrite=True) to replace it\n"
    proc = subprocess.Popen(["picpac", "import", str(listing), "db", "--overwrite", "--threads", "1"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    signal_at(proc, tmp_path, signal.SIGTERM, 0.2, wait_for_temp=True)
    assert check_exit(proc, signal.SIGTERM) == 143
    assert sorted(os.listdir(tmp_path)) == ["db"] and (tmp_path / "db").read_bytes() == b"old database"
