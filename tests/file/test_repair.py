"""`picpac repair`: a damaged header slot, damaged records or an interrupted write lose no committed record."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import picpac
from picpac.file.layout import HEADER_SIZE, INDEX_DTYPE, SLOT_OFFSETS
from picpac.file.repair import repair

from helpers import payload


def records(path) -> list[tuple[bytes, float, int, dict]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with picpac.Reader(path) as r:
            return [(bytes(x["image"]), x.label, x.group, x.meta) for x in r]


def expected(indices) -> list[tuple[bytes, float, int, dict]]:
    return [(payload(i), float(i % 3), i if i < 5 else None, {"i": i}) for i in indices]


def two_commits(path) -> None:
    """Records 0-4 in the first commit (slot 0), 5-9 appended in a second one (slot 1)."""
    with picpac.Writer(path, metadata={"classes": ["a", "b", "c"]}) as w:
        for i in range(5):
            w.append(image=payload(i), label=i % 3, group=i, meta={"i": i})
    with picpac.Writer(path, append=True) as w:
        for i in range(5, 10):
            w.append(image=payload(i), label=i % 3, meta={"i": i})


def append_one(path) -> int:
    """Append record 10 and return how many records the database then holds."""
    with picpac.Writer(path, append=True) as w:
        w.append(image=payload(10), label=1)
    return len(records(path))


def damage(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_damaged_newest_slot_refuses_append_and_repair_recovers_every_record(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    damage(path, SLOT_OFFSETS[1] + 9)
    assert len(records(path)) == 5  # a Reader falls back to the older commit, with a warning
    with pytest.raises(picpac.CorruptError, match=r"slot 1 is damaged .* run `picpac repair .*db.picpac` first"):
        picpac.Writer(path, append=True)
    report = repair(path)
    assert (report.readable, report.records, report.damaged, report.uncommitted) == (5, 10, [], 0)
    assert report.output == str(path)
    assert records(path) == expected(range(10))
    with picpac.Reader(path) as r:
        assert r.classes == ["a", "b", "c"] and r.header.damaged_slots == ()
    assert append_one(path) == 11


def test_damaged_older_slot_with_nothing_after_it_still_appends(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    damage(path, SLOT_OFFSETS[0] + 9)
    with pytest.warns(RuntimeWarning, match="slot"):
        assert append_one(path) == 11


def test_both_slots_damaged(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    damage(path, SLOT_OFFSETS[0] + 9)
    damage(path, SLOT_OFFSETS[1] + 9)
    with pytest.raises(picpac.CorruptError, match="both commit slots .* `picpac repair`"):
        picpac.Reader(path)
    out = tmp_path / "repaired.picpac"
    report = repair(path, out)
    assert (report.readable, report.records, report.output) == (0, 10, str(out))
    assert records(out) == expected(range(10))


def test_damaged_records_are_dropped_and_named(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    with picpac.Reader(path) as r:
        offset = int(r.index["offset"][7] + r.index["size"][7] - 1)  # the last byte of record 7's image
    damage(path, offset)
    report = repair(path)
    assert report.damaged == [7] and report.records == 9
    assert records(path) == expected([0, 1, 2, 3, 4, 5, 6, 8, 9])
    with picpac.Reader(path) as r:
        assert r.metadata["repaired"]["dropped"] == 1


INTERRUPTED = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{tests!r}]
    import picpac
    from helpers import payload
    w = picpac.Writer(sys.argv[1], append=True)
    for i in range(10, 13):
        w.append(image=payload(i, 100_000))  # larger than the file buffer: written through
    os.kill(os.getpid(), signal.SIGKILL)
""").format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_uncommitted_records_and_a_torn_tail_are_dropped(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED, str(path)])
    assert proc.returncode == -signal.SIGKILL
    with open(path, "ab") as f:
        f.write(b"\x01\x00\x00\x00\x09\x00")  # the start of a record head that was cut off
    report = repair(path)
    assert (report.records, report.uncommitted, report.tail_bytes) == (10, 3, 6)
    assert "dropped 3 uncommitted record(s), 6 trailing byte(s)" in report.summary()
    assert records(path) == expected(range(10))


def test_an_intact_database_is_left_as_it_is(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    before = path.read_bytes()
    report = repair(path)
    assert report.output is None and report.records == 10
    assert report.summary() == f"{path}: OK, nothing to repair (10 records)"
    assert path.read_bytes() == before


def test_a_commit_without_records_is_found(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path, metadata={"classes": ["x"]}):
        pass
    with picpac.Writer(path, append=True) as w:
        w.append(image=payload(0), label=0)
    damage(path, SLOT_OFFSETS[1] + 9)
    assert repair(path).records == 1
    assert [x[0] for x in records(path)] == [payload(0)]


def test_cli_repair_and_verify(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    damage(path, SLOT_OFFSETS[1] + 9)
    verify = subprocess.run(["picpac", "verify", str(path)], capture_output=True, text=True)
    assert verify.returncode == 1
    assert "`picpac repair` recovers its records" in verify.stderr
    out = tmp_path / "out.picpac"
    done = subprocess.run(["picpac", "repair", str(path), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{path}: recovered 10 records (a Reader saw 5); written to {out}\n"
    assert records(out) == expected(range(10))
    bad = subprocess.run(["picpac", "repair", str(tmp_path / "missing.picpac")], capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    # an existing OUT is replaced only with --overwrite
    out.write_bytes(b"precious")
    refused = subprocess.run(["picpac", "repair", str(path), "-o", str(out)], capture_output=True, text=True)
    assert refused.returncode == 2 and out.read_bytes() == b"precious"
    assert refused.stderr == f"picpac: error: {out}: already exists; pass --overwrite (overwrite=True) to replace it " \
                             "with the repaired database\n"
    again = subprocess.run(["picpac", "repair", str(path), "-o", str(out), "--overwrite"], capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr
    assert records(out) == expected(range(10))
    assert sorted(os.listdir(tmp_path)) == ["db.picpac", "out.picpac"]


def test_repair_to_an_existing_output_needs_overwrite(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    damage(path, SLOT_OFFSETS[1] + 9)
    out = tmp_path / "out.picpac"
    out.write_bytes(b"precious")
    with pytest.raises(picpac.PathExistsError, match="already exists; pass --overwrite"):
        repair(path, out)
    assert out.read_bytes() == b"precious"
    assert repair(path, out, overwrite=True).records == 10 and records(out) == expected(range(10))
    assert repair(path, path).output == str(path)  # naming DB itself replaces it, as without -o
    assert records(path) == expected(range(10))


def test_not_a_database(tmp_path):
    path = tmp_path / "x.picpac"
    path.write_bytes(b"not a picpac file at all" * 10)
    with pytest.raises(picpac.FormatError, match="not a picpac database"):
        repair(path)
    assert np.frombuffer(path.read_bytes(), np.uint8).size == 240


def commit_region(path) -> tuple[int, int]:
    """(start, end) of the newest commit's region (metadata JSON, padding, index) in the file."""
    with picpac.Reader(path) as r:
        current = r.header.current
        return current.offset, current.end


def test_a_damaged_commit_region_never_gives_a_wrong_label_or_field_name(tmp_path):
    """Every byte of the newest commit's region, one bit flipped in each copy (the slot's CRC then fails): the
    repaired database holds only records exactly as written (labels, groups, field names from their recovery
    frames, each checked by its own CRC), never one changed."""
    path = tmp_path / "db.picpac"
    two_commits(path)
    start, end = commit_region(path)
    original = path.read_bytes()
    def keyed(rows):
        return {(image, label, group, tuple(sorted(meta.items()))) for image, label, group, meta in rows}
    written = keyed(expected(range(10)))
    recovered = []
    for position in range(start, end):
        copy = tmp_path / "copy.picpac"
        data = bytearray(original)
        data[position] ^= 1 << (position % 8)
        copy.write_bytes(bytes(data))
        out = tmp_path / "out.picpac"
        try:
            report = repair(copy, out, overwrite=True, sync=False)
        except picpac.CorruptError:
            continue
        got = records(out) if report.output is not None else records(copy)
        assert keyed(got) <= written and len(keyed(got)) == len(got), position
        recovered.append(len(got))
    assert len(recovered) > (end - start) * 0.9 and min(recovered) >= 5  # (the older commit, at the least)
    assert recovered.count(10) > len(recovered) / 2


def test_a_label_flipped_in_the_region_is_restored_from_its_recovery_frame(tmp_path):
    path = tmp_path / "db.picpac"
    two_commits(path)
    with picpac.Reader(path) as r:
        row = r.header.current.index_offset + 7 * INDEX_DTYPE.itemsize + INDEX_DTYPE.fields["label"][1]
    damage(path, row + 6)  # an exponent byte of record 7's label: 1.0 becomes another number
    report = repair(path)
    assert report.corrected == 1 and report.records == 10
    assert "1 record(s) kept the label, group and checksum of their recovery frames" in report.summary()
    assert records(path) == expected(range(10))


def test_a_commit_that_never_reached_its_slot_is_not_published_by_repair(tmp_path):
    """A crash between an append's commit region and its header slot: the slots say 5 records, and so do a Reader,
    verify and append; repair agrees (the region's 5 more records are uncommitted), instead of publishing 10."""
    path = tmp_path / "db.picpac"
    with picpac.Writer(path, metadata={"classes": ["a", "b", "c"]}) as w:
        for i in range(5):
            w.append(image=payload(i), label=i % 3, group=i, meta={"i": i})
    header = path.read_bytes()[:HEADER_SIZE]
    with picpac.Writer(path, append=True) as w:
        for i in range(5, 10):
            w.append(image=payload(i), label=i % 3, meta={"i": i})
    with open(path, "r+b") as f:
        f.write(header)  # the slot write the crash prevented
    assert len(records(path)) == 5
    report = repair(path)
    assert (report.records, report.uncommitted) == (5, 5) and report.output == str(path)
    assert records(path) == expected(range(5))
    assert append_one(path) == 6
