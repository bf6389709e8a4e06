"""A Reader's file changed in place while it is mapped (file/reader.py). Cut shorter: every read of it is a
PicPacError naming the file, not the SIGBUS that touching its lost pages kills the process with. Overwritten at
its size or grown: not detected, the reads follow the file's new bytes (index included), and check=True's checksums
catch a record whose bytes changed alone. Replaced by a rename: the mapping keeps the old file. Each case runs in
a child process (a SIGBUS would kill it)."""
from __future__ import annotations

import subprocess
import sys

import pytest

CHANGE = r"""
import os, sys
import numpy as np
import picpac

path, how = sys.argv[1], sys.argv[2]
old, new = (np.random.default_rng(seed).integers(0, 256, (16, 64, 64, 3), np.uint8) for seed in (0, 1))
picpac.write_arrays(path, old, np.arange(16))  # 12 KB a record: many pages
r = picpac.Reader(path)
starts, lengths, problems = r.spans(np.array([1, 14]), "image")
assert r[1].label == 1 and r.stride and not problems
rows = np.empty((1, r.stride), np.uint8)
if how == "cut":  # overwritten in place by a shorter file, as cp does
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(b"other bytes" * 100)
elif how == "other":  # overwritten in place by a file of the same layout and size: other images and labels
    picpac.write_arrays(path + ".new", new, np.arange(16)[::-1])
    with open(path + ".new", "rb") as src, open(path, "r+b") as f:
        f.write(src.read())
elif how == "damaged":  # the bytes of record 14's image changed in place
    with open(path, "r+b") as f:
        f.seek(int(starts[1]))
        f.write(new[14].tobytes())
elif how == "grown":
    with open(path, "ab") as f:
        f.write(b"more" * 5000)
else:  # replaced by a rename
    picpac.write_arrays(path + ".new", new, np.arange(16)[::-1])
    os.replace(path + ".new", path)
r.prefetch(np.arange(16))  # a hint: never an error


def which(data):
    data = bytes(data)
    return {old[14].tobytes(): "old", new[14].tobytes(): "new"}.get(data, "other")


calls = {"r[i]": lambda: (r[14].label, which(r[14]["image"])), "array": lambda: which(r.array(14)),
         "spans": lambda: r.spans(np.array([14]), "image")[2], "take": lambda: which(r.take(np.array([14]), rows)[0, -12288:]),
         "gather": lambda: which(r.gather(starts[1:], 12288)[0])}
for name, call in calls.items():
    try:
        print(name, "reads", call())
    except picpac.PicPacError as exc:
        print(name, type(exc).__name__, exc)
"""


def run(tmp_path, how: str) -> tuple[str, list[str]]:
    path = str(tmp_path / "a.picpac")
    done = subprocess.run([sys.executable, "-c", CHANGE, path, how], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # -7: killed by SIGBUS
    return path, done.stdout.splitlines()


def test_every_read_of_a_file_cut_in_place_is_an_error_naming_it_not_a_sigbus(tmp_path):
    path, lines = run(tmp_path, "cut")
    assert [line.split(" ", 1)[0] for line in lines] == ["r[i]", "array", "spans", "take", "gather"]
    for line in lines:
        assert line.split(" ", 1)[1].startswith(f"PicPacError {path}: the file was cut to 1100 bytes while it was "
                                                "being read (it had "), line
        assert "truncated or overwritten in place" in line and "renaming it over the old" in line


@pytest.mark.parametrize("how, wanted", [
    ("rename", ["r[i] reads (14.0, 'old')", "array reads old", "spans reads {}", "take reads old", "gather reads old"]),
    ("grown", ["r[i] reads (14.0, 'old')", "array reads old", "spans reads {}", "take reads old", "gather reads old"]),
    ("other", ["r[i] reads (1.0, 'new')", "array reads new", "spans reads {}", "take reads new", "gather reads new"]),
    ("damaged", ["r[i] CorruptRecordError {path}: record 14 fails its checksum (damaged bytes); run `picpac verify "
                 "{path}` to list every damaged record",
                 "array CorruptRecordError {path}: record 14 fails its checksum (damaged bytes); run `picpac verify "
                 "{path}` to list every damaged record",
                 "spans reads {0: 'fails its checksum (damaged bytes)'}", "take reads new", "gather reads new"]),
])
def test_a_file_changed_at_its_size_or_grown_or_replaced_reads_on(tmp_path, how, wanted):
    path, lines = run(tmp_path, how)
    assert lines == [line.replace("{path}", path) for line in wanted]
