"""`picpac compact`: after appends only the newest commit's records and region are kept, byte for byte."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import picpac
from picpac.errors import CorruptRecordError, PathExistsError, WriterBusyError
from picpac.file.frames import METADATA_FRAME, RECORD_FRAME, metadata_frame, record_frame
from picpac.file.layout import HEADER_SIZE, INDEX_DTYPE, index_offset_after
from picpac.tools.compact import compact
from picpac.tools.verify import verify

from helpers import damage_record, payload, run_console


def appended_db(path, rounds: int = 4, per_round: int = 5):
    """A database built by one Writer and ``rounds - 1`` appends, each leaving an old commit region behind."""
    n = 0
    for r in range(rounds):
        metadata = {"classes": ["a", "b", "c"], "note": "kept"} if r == 0 else None
        with picpac.Writer(path, append=r > 0, metadata=metadata, sync=False) as writer:
            for _ in range(per_round):
                fields = {"image": payload(n)} if n % 4 else {"anno": payload(500 + n, 9), "image": payload(n)}
                writer.append(fields, label=n % 3, group=None if n % 2 else n, meta={"i": n} if n % 3 else None)
                n += 1
    return path


def snapshot(path) -> tuple:
    """Every record's bytes, labels, groups, checksums, the metadata's bytes and the fields."""
    data = path.read_bytes()
    with picpac.Reader(path) as reader:
        index = reader.index
        commit = reader.header.current
        records = [data[o:o + s] for o, s in zip(index["offset"].tolist(), index["size"].tolist())]
        return (records, index["label"].tolist(), index["group"].tolist(), index["checksum"].tolist(),
                data[commit.offset:commit.offset + commit.meta_size], reader.fields, reader.classes)


def no_temps(folder) -> bool:
    return not [p for p in os.listdir(folder) if p.endswith(".picpac-tmp")]


def test_compact_in_place_drops_old_commit_regions_and_keeps_every_byte(tmp_path):
    db = appended_db(tmp_path / "db.picpac")
    before, size = snapshot(db), db.stat().st_size
    report = compact(db, sync=False)
    records = before[0]
    meta = before[4]
    # the records back to back, each after its recovery frame, and the commit's metadata in a frame before them
    start = HEADER_SIZE + METADATA_FRAME.size + len(meta)
    ends = start + np.cumsum([RECORD_FRAME.size + len(r) for r in records])
    expected = index_offset_after(int(ends[-1]) + len(meta)) + INDEX_DTYPE.itemsize * 20
    assert db.stat().st_size == expected == report.bytes_after < size == report.bytes_before
    assert report.records == 20 and report.output == str(db)
    assert report.summary() == f"{db}: 20 records, {size:,} -> {expected:,} bytes ({size - expected:,} bytes freed)"
    assert snapshot(db) == before
    data = db.read_bytes()
    assert data[HEADER_SIZE:start] == metadata_frame(meta)
    with picpac.Reader(db) as reader:
        assert reader.index["offset"].tolist() == (ends - list(map(len, records))).tolist()
        for entry in reader.index:
            assert data[entry["offset"] - RECORD_FRAME.size:entry["offset"]] == record_frame(
                entry["size"], entry["label"], entry["group"], entry["checksum"])
        assert reader.header.damaged_slots == () and reader.metadata["note"] == "kept"
        assert reader.stride is None  # (records of several sizes)
    assert verify(db).ok and no_temps(tmp_path)
    # a compact database appends as any other
    with picpac.Writer(db, append=True, sync=False) as writer:
        writer.append(image=b"new", label=2)
    with picpac.Reader(db) as reader:
        assert len(reader) == 21 and bytes(reader[20]["image"]) == b"new"
        assert [bytes(r["image"]) for r in reader][:20] == [payload(i) for i in range(20)]


def test_a_compact_database_is_left_as_it_is(tmp_path):
    db = appended_db(tmp_path / "db.picpac", rounds=1)
    inode, data = db.stat().st_ino, db.read_bytes()
    report = compact(db, sync=False)
    assert report.output is None and report.bytes_after == report.bytes_before == len(data)
    assert report.summary() == f"{db}: already compact (5 records, {len(data):,} bytes)"
    assert db.stat().st_ino == inode and db.read_bytes() == data
    compact(db, sync=False)  # and compacting twice changes nothing either
    db2 = appended_db(tmp_path / "db2.picpac")
    compact(db2, sync=False)
    data = db2.read_bytes()
    assert compact(db2, sync=False).output is None and db2.read_bytes() == data


def test_records_without_frames_stay_without(tmp_path):
    """A database of array fields has no recovery frames (its records lie back to back for the batch path):
    compacting one keeps it so."""
    db = tmp_path / "arrays.picpac"
    picpac.write_arrays(db, np.arange(5 * 12, dtype=np.uint8).reshape(5, 4, 3), labels=range(5), sync=False)
    data = db.read_bytes()
    assert compact(db, sync=False).output is None and db.read_bytes() == data
    with picpac.Writer(db, append=True, sync=False) as writer:
        writer.append(image=np.full((4, 3), 7, np.uint8), label=5)
    compact(db, sync=False)
    with picpac.Reader(db) as reader:
        assert reader.stride == reader.index["size"][0] and reader.labels.tolist() == list(range(6))
        assert reader.index["offset"].tolist() == [HEADER_SIZE + i * reader.stride for i in range(6)]


def test_compact_to_output_leaves_the_source_and_refuses_an_existing_output(tmp_path):
    db = appended_db(tmp_path / "db.picpac")
    data = db.read_bytes()
    report = compact(db, tmp_path / "out.picpac", sync=False)
    assert report.summary().endswith(f"; written to {tmp_path}/out.picpac")
    assert db.read_bytes() == data and snapshot(tmp_path / "out.picpac") == snapshot(db)
    assert (tmp_path / "out.picpac").stat().st_size == report.bytes_after < len(data)
    (tmp_path / "other.picpac").write_bytes(b"keep")
    with pytest.raises(PathExistsError, match=rf"^{tmp_path}/other.picpac: already exists; pass --overwrite"):
        compact(db, tmp_path / "other.picpac")
    assert (tmp_path / "other.picpac").read_bytes() == b"keep"
    compact(db, tmp_path / "other.picpac", overwrite=True, sync=False)
    assert snapshot(tmp_path / "other.picpac") == snapshot(db) and no_temps(tmp_path)


def test_a_damaged_record_stops_compaction_and_leaves_the_file(tmp_path):
    db = appended_db(tmp_path / "db.picpac")
    data = damage_record(db, 12)
    with pytest.raises(CorruptRecordError, match=rf"^{db}: record 12 fails its checksum .*`picpac repair` drops it"):
        compact(db)
    assert db.read_bytes() == data and no_temps(tmp_path)


def test_bytes_of_an_interrupted_append_are_dropped_and_permissions_kept(tmp_path):
    db = appended_db(tmp_path / "db.picpac", rounds=2)
    before = snapshot(db)
    with open(db, "ab") as file:
        file.write(b"\0\1" * 100)  # what an append killed before its commit leaves
    db.chmod(0o640)
    compact(db, sync=False)
    assert snapshot(db) == before and stat.S_IMODE(db.stat().st_mode) == 0o640
    with picpac.Reader(db) as reader:
        assert reader.header.current.end == db.stat().st_size


def test_an_appending_writer_makes_compact_wait(tmp_path):
    db = appended_db(tmp_path / "db.picpac", rounds=2)
    writer = picpac.Writer(db, append=True, sync=False)
    try:
        with pytest.raises(WriterBusyError, match=rf"^{db}: a Writer \(or another picpac compact\) holds this "
                                                 "database's lock; try again when it has finished$"):
            compact(db)
        writer.append(image=b"x", label=1)
    finally:
        writer.close()
    compact(db, sync=False)
    with picpac.Reader(db) as reader:
        assert len(reader) == 11 and bytes(reader[10]["image"]) == b"x"


def test_cli_compacts_in_place_and_verify_passes(tmp_path):
    db = appended_db(tmp_path / "db.picpac")
    before, size = snapshot(db), db.stat().st_size
    done = run_console("picpac", "compact", "db.picpac", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = db.stat().st_size
    assert after < size
    assert done.stdout == f"db.picpac: 20 records, {size:,} -> {after:,} bytes ({size - after:,} bytes freed)\n"
    assert snapshot(db) == before
    verified = run_console("picpac", "verify", "db.picpac", cwd=tmp_path)
    assert (verified.returncode, verified.stdout) == (0, "db.picpac: OK (20 records)\n")
    done = run_console("picpac", "compact", "db.picpac", cwd=tmp_path)
    assert done.stdout == f"db.picpac: already compact (20 records, {after:,} bytes)\n"
    done = run_console("picpac", "compact", "db.picpac", "-o", "db.picpac.bak", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.endswith("; written to db.picpac.bak\n")
    done = run_console("picpac", "compact", "db.picpac", "-o", "db.picpac.bak", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("picpac: error: db.picpac.bak: already exists; pass --overwrite (overwrite=True) to "
                           "replace it\n")
    done = run_console("picpac", "compact", "missing.picpac", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, "picpac: error: missing.picpac: no such file\n")
    assert no_temps(tmp_path)
