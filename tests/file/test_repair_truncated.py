"""`picpac repair` of a truncated database (an interrupted copy or download): the recovery frames before the records
(picpac/file/frames.py) keep every record that lies wholly in what is left, with its bytes, label, group and meta."""
from __future__ import annotations

import math
import random
import shutil
import subprocess

import numpy as np
import pytest

import picpac
from picpac.errors import CorruptError
from picpac.file.frames import METADATA_FRAME
from picpac.file.layout import HEADER_SIZE
from picpac.file.repair import repair

from helpers import payload


def content(path) -> list[tuple]:
    """Every record as (fields' bytes, label, group, meta), NaN labels made comparable."""
    with picpac.Reader(path) as reader:
        return [({k: bytes(v) for k, v in r.fields.items()}, "nan" if math.isnan(r.label) else r.label, r.group,
                 r.meta) for r in reader]


def whole_before(path, cut: int) -> list[int]:
    """The records of the database at ``path`` whose bytes lie wholly before byte ``cut``."""
    with picpac.Reader(path) as reader:
        return np.flatnonzero(reader.index["offset"] + reader.index["size"] <= cut).tolist()


def cut_copy(path, out, cut: int):
    shutil.copyfile(path, out)
    with open(out, "r+b") as f:
        f.truncate(cut)
    return out


def test_half_of_a_real_import_keeps_every_whole_record(shared_data, tmp_path):
    """The new user's case: the first half of an imported ImageNet sample, 27 MB."""
    rows = (shared_data / "imagenet-250" / "labels.tsv").read_text().splitlines()[1:]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{shared_data / 'imagenet-250' / name}\t{label}\n"
                               for name, label, _ in (row.split("\t") for row in rows)))
    db = tmp_path / "db.picpac"
    done = subprocess.run(["picpac", "import", "-f", "list", str(listing), str(db)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    half = cut_copy(db, tmp_path / "half.picpac", db.stat().st_size // 2)
    for command in ("info", "verify"):  # what the user runs first names the way out
        seen = subprocess.run(["picpac", command, str(half)], capture_output=True, text=True, timeout=60)
        assert seen.returncode == 2
        assert seen.stderr.startswith(f"picpac: error: {half}: truncated or damaged: ")
        assert seen.stderr.endswith("; `picpac repair` recovers the records it still holds\n")
    kept = whole_before(db, half.stat().st_size)
    assert 120 <= len(kept) < 130 and kept == list(range(len(kept)))
    fixed = tmp_path / "fixed.picpac"
    done = subprocess.run(["picpac", "repair", str(half), "-o", str(fixed)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{half}: recovered {len(kept)} records (a Reader saw 0); dropped "
                                  f"{250 - len(kept)} record(s) cut off by the truncation, ")
    assert done.stdout.endswith(f" trailing byte(s); written to {fixed}\n")
    assert content(fixed) == content(db)[:len(kept)]  # bytes, labels (the class indices), meta
    with picpac.Reader(db) as whole, picpac.Reader(fixed) as repaired:
        assert repaired.labels.tolist() == whole.labels[:len(kept)].tolist()
        assert {k: v for k, v in repaired.metadata.items() if k != "repaired"} == whole.metadata
    assert subprocess.run(["picpac", "verify", str(fixed)], capture_output=True, timeout=60).returncode == 0


def appended(path) -> None:
    """Three commits: 0-9, then 10-19 bringing a new field, then 20-29; odd labels, groups, meta."""
    labels = [0, 1, 2.5, -0.0, float("inf"), float("nan"), -7, 1e300]
    for r in range(3):
        with picpac.Writer(path, append=r > 0, metadata={"classes": ["a", "b", "c"]} if r == 0 else None,
                           sync=False) as w:
            for i in range(10 * r, 10 * r + 10):
                fields = {"image": payload(i, 300 + 37 * i)}
                if r == 1 and i % 2:
                    fields["annotation"] = b'{"shapes": []}' + bytes([i])
                w.append(fields, label=labels[i % len(labels)], group=i // 3 if i % 4 else None,
                         meta={"i": i} if i % 5 else None)


def test_every_cut_keeps_the_whole_records_before_it(tmp_path):
    """Seeded cuts anywhere after the header, each through records, frames, older commit regions or the last one."""
    db = tmp_path / "db.picpac"
    appended(db)
    whole = content(db)
    size = db.stat().st_size
    with picpac.Reader(db) as reader:
        first = int(reader.index["offset"][0])
        metadata = reader.metadata
    rng = random.Random(8)
    cuts = sorted(rng.sample(range(HEADER_SIZE, size), 60)) + [first - 1, first, size - 1]
    out = tmp_path / "out.picpac"
    for cut in cuts:
        cut_copy(db, tmp_path / "cut.picpac", cut)
        if cut < first - 40:  # the metadata frame is cut: no field names, nothing to recover
            with pytest.raises(CorruptError, match=r"truncated: .* there is nothing to recover"):
                repair(tmp_path / "cut.picpac", out, overwrite=True)
            continue
        report = repair(tmp_path / "cut.picpac", out, overwrite=True, sync=False)
        kept = whole_before(db, cut)
        assert kept == list(range(len(kept))), cut
        assert (report.records, report.cut_off, report.damaged, report.uncommitted) == (len(kept), 30 - len(kept),
                                                                                        [], 0), cut
        assert content(out) == whole[:len(kept)], cut
        with picpac.Reader(out) as reader:
            assert reader.classes == ["a", "b", "c"]
            assert reader.fields == metadata["fields"][:len(reader.fields)]


def test_a_file_without_frames_says_why_nothing_is_recovered(tmp_path):
    """Records of array fields have no frames (they lie back to back for the batch path): a truncated prefix keeps
    the records of the commit regions it holds, and says what it lost."""
    db = tmp_path / "arrays.picpac"
    images = (np.arange(10 * 48) % 251).astype(np.uint8).reshape(10, 4, 4, 3)
    picpac.write_arrays(db, images, labels=range(10), sync=False)
    first_commit = db.stat().st_size
    with pytest.raises(CorruptError, match=r"truncated: the file ends at byte 400, .*no recovery frames"):
        repair(cut_copy(db, tmp_path / "cut.picpac", 400), tmp_path / "out.picpac")
    with picpac.Writer(db, append=True, sync=False) as w:
        for i in range(10, 15):
            w.append(image=np.full((4, 4, 3), i, np.uint8), label=i)
    report = repair(cut_copy(db, tmp_path / "cut.picpac", first_commit + 100), tmp_path / "out.picpac", sync=False)
    assert (report.records, report.cut_off) == (10, 5)
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.labels.tolist() == list(range(10))
        assert all(np.array_equal(reader.array(i), images[i]) for i in range(10))


def test_the_metadata_frame_precedes_the_first_record(tmp_path):
    db = tmp_path / "db.picpac"
    appended(db)
    data = db.read_bytes()
    assert data[HEADER_SIZE:HEADER_SIZE + 8] == b"\x89PICMET\n"
    length = int.from_bytes(data[HEADER_SIZE + 8:HEADER_SIZE + 16], "little")
    assert data[HEADER_SIZE + METADATA_FRAME.size:][:length].startswith(b'{"fields":["image"]')
