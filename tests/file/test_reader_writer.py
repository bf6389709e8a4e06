"""Writer/Reader round trips, append semantics, and the errors of the file format."""
from __future__ import annotations

import os
import pickle
import struct
import threading

import numpy as np
import pytest

import picpac
from picpac.file.frames import RECORD_FRAME, RecordFrame, read_metadata_frame, read_record_frame
from picpac.file.layout import HEADER_SIZE, INDEX_DTYPE, MAGIC, VERSION, read_header

from helpers import payload


def write_db(path, n: int, **kwargs) -> None:
    with picpac.Writer(path, **kwargs) as w:
        for i in range(n):
            w.append(image=payload(i), label=i % 3, group=i // 4 if i % 2 else None, meta={"i": i})


def test_round_trip_fields_labels_groups_meta(tmp_path):
    path = tmp_path / "db.picpac"
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    with picpac.Writer(path, metadata={"classes": ["cat", "dog"], "source": "test"}) as w:
        assert w.append(image=b"\xff\xd8jpeg", label=1, annotation=b'{"shapes": []}', meta={"w": 5}) == 0
        assert w.append({"label": b"a field named label"}, label=-2.5, group=7) == 1
        assert w.append(array=arr, label=0) == 2
        assert len(w) == 3
    with picpac.Reader(path) as r:
        assert len(r) == 3
        assert r.fields == ["image", "annotation", "label", "array"]
        assert r.classes == ["cat", "dog"]
        assert r.metadata["source"] == "test"
        assert r.metadata["created"]["by"] == f"picpac {picpac.__version__}"
        rec = r[0]
        assert isinstance(rec["image"], memoryview)
        assert bytes(rec["image"]) == b"\xff\xd8jpeg"
        assert bytes(rec.fields["annotation"]) == b'{"shapes": []}'
        assert (rec.label, rec.group, rec.meta, rec.index) == (1.0, None, {"w": 5}, 0)
        assert "image" in rec and "array" not in rec
        assert bytes(r[1]["label"]) == b"a field named label"
        assert (r[1].label, r[1].group, r[1].meta) == (-2.5, 7, {})
        np.testing.assert_array_equal(np.frombuffer(r[-1]["array"], np.float32).reshape(3, 4), arr)
        with pytest.raises(KeyError, match="has no field 'mask'"):
            r[0]["mask"]
        np.testing.assert_array_equal(r.labels, [1.0, -2.5, 0.0])
        np.testing.assert_array_equal(r.groups, [picpac.NO_GROUP, 7, picpac.NO_GROUP])
        assert r.index.dtype == INDEX_DTYPE
        data = path.read_bytes()  # the first record comes after a metadata frame and its own frame (format.md)
        metadata, length = read_metadata_frame(data, HEADER_SIZE, len(data))
        assert metadata["fields"] == ["image", "annotation"]  # those of the first record
        assert read_record_frame(data, HEADER_SIZE + length, len(data)) == RecordFrame(59, 1.0, picpac.NO_GROUP,
                                                                                      r.index["checksum"][0])
        assert r.index["offset"][0] == HEADER_SIZE + length + RECORD_FRAME.size


def test_iteration_and_numpy_indices(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 25)
    with picpac.Reader(path) as r:
        recs = list(r)
        assert [bytes(x["image"]) for x in recs] == [payload(i) for i in range(25)]
        assert [x.meta["i"] for x in recs] == list(range(25))
        assert [x.group for x in recs[:6]] == [None, 0, None, 0, None, 1]
        assert bytes(r[np.int64(3)]["image"]) == payload(3)
        with pytest.raises(IndexError):
            r[25]
        with pytest.raises(IndexError):
            r[-26]
        with pytest.raises(picpac.PicPacTypeError):
            r[1.5]


def test_empty_database(tmp_path):
    path = tmp_path / "empty.picpac"
    picpac.Writer(path).close()
    with picpac.Reader(path) as r:
        assert len(r) == 0 and list(r) == [] and r.labels.shape == (0,) and r.fields == []


def test_storage_is_original_bytes_plus_small_overhead(tmp_path):
    path = tmp_path / "db.picpac"
    data = [payload(i, 10_000) for i in range(50)]
    with picpac.Writer(path) as w:
        for d in data:
            w.append(image=d)
    raw = sum(map(len, data))
    # per record: 40-byte frame + 8-byte head + 12-byte field entry + 40-byte index entry; plus header and metadata
    # (in a metadata frame too)
    assert os.path.getsize(path) <= raw + 50 * 100 + HEADER_SIZE + 400
    blob = path.read_bytes()
    assert all(d in blob for d in data)


def test_new_database_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_db(tmp_path / "db.picpac", 1)
    finally:
        os.umask(old)
    assert (tmp_path / "db.picpac").stat().st_mode & 0o777 == 0o640


def test_append_keeps_old_bytes_and_adds_records(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 10, metadata={"classes": ["a", "b", "c"]})
    before = path.read_bytes()
    old_commit = read_header(before, len(before), str(path)).current
    with picpac.Writer(path, append=True) as w:
        assert len(w) == 10
        w.append(image=payload(10), mask=b"new field", label=2)
    after = path.read_bytes()
    # the records already written are not rewritten: everything but the header slots is a prefix
    assert after[HEADER_SIZE:old_commit.end] == before[HEADER_SIZE:]
    with picpac.Reader(path) as r:
        assert len(r) == 11
        assert r.fields == ["image", "mask"]
        assert r.classes == ["a", "b", "c"]
        assert [bytes(x["image"]) for x in r] == [payload(i) for i in range(11)]
        assert bytes(r[10]["mask"]) == b"new field"


def test_append_creates_missing_database(tmp_path):
    path = tmp_path / "new.picpac"
    with picpac.Writer(path, append=True) as w:
        w.append(image=b"x")
    with picpac.Reader(path) as r:
        assert len(r) == 1


def test_explicit_commits_are_visible_to_new_readers(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"0")
        assert not path.exists()  # nothing is visible before the first commit
        w.commit()
        w.append(image=b"1")
        with picpac.Reader(path) as r:
            assert len(r) == 1
        w.commit()
        with picpac.Reader(path) as r:
            assert [bytes(x["image"]) for x in r] == [b"0", b"1"]
        w.append(image=b"2")
    with picpac.Reader(path) as r:
        assert len(r) == 3


def test_exception_in_with_discards(tmp_path):
    path = tmp_path / "db.picpac"
    with pytest.raises(RuntimeError):
        with picpac.Writer(path) as w:
            w.append(image=b"x")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    write_db(path, 3)
    with pytest.raises(RuntimeError):
        with picpac.Writer(path, append=True) as w:
            w.append(image=b"x")
            raise RuntimeError("boom")
    with picpac.Reader(path) as r:
        assert len(r) == 3
    assert os.listdir(tmp_path) == ["db.picpac"]


def test_overwrite_replaces_atomically(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 5)
    with picpac.Reader(path) as old:
        with picpac.Writer(path, overwrite=True) as w:
            w.append(image=b"replacement")
            with picpac.Reader(path) as still_old:
                assert len(still_old) == 5
        assert len(old) == 5 and bytes(old[4]["image"]) == payload(4)  # an open Reader keeps its file
    with picpac.Reader(path) as r:
        assert len(r) == 1


def test_second_appender_is_refused(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 2)
    with picpac.Writer(path, append=True):
        with pytest.raises(picpac.WriterBusyError, match="another Writer"):
            picpac.Writer(path, append=True)


def test_writer_argument_errors(tmp_path):
    path = tmp_path / "db.picpac"
    with pytest.raises(picpac.PicPacTypeError):
        picpac.Writer(123)
    with pytest.raises(picpac.MissingPathError, match="does not exist"):
        picpac.Writer(tmp_path / "no" / "db.picpac")
    with pytest.raises(picpac.PicPacTypeError, match="classes"):
        picpac.Writer(path, metadata={"classes": "cat"})
    with picpac.Writer(path) as w:
        with pytest.raises(picpac.PicPacTypeError, match="field 'image': got str"):
            w.append(image="not bytes")
        with pytest.raises(picpac.PicPacTypeError, match="field 'image'"):
            w.append(image=5)
        with pytest.raises(picpac.PicPacTypeError, match="label"):
            w.append(image=b"x", label="3")
        with pytest.raises(picpac.PicPacTypeError, match="group"):
            w.append(image=b"x", group=1.5)
        with pytest.raises(picpac.PicPacValueError, match="group"):
            w.append(image=b"x", group=picpac.NO_GROUP)
        with pytest.raises(picpac.PicPacTypeError, match="meta"):
            w.append(image=b"x", meta={"a": object()})
        with pytest.raises(picpac.PicPacValueError, match="at least one field"):
            w.append(label=1)
        with pytest.raises(picpac.PicPacValueError, match="contiguous"):
            w.append(image=np.zeros((4, 4), np.uint8)[:, ::2])
        w.append(image=b"ok")
    with picpac.Reader(path) as r:
        assert len(r) == 1  # rejected appends left nothing behind
    with pytest.raises(picpac.PicPacError, match="closed"):
        w.append(image=b"late")


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(picpac.MissingPathError, match="nope.picpac"):
        picpac.Reader(tmp_path / "nope.picpac")
    with pytest.raises(picpac.FormatError, match="is a directory"):
        picpac.Reader(tmp_path)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(picpac.FormatError, match="empty"):
        picpac.Reader(tmp_path / "empty")
    (tmp_path / "text.txt").write_bytes(b"hello world, not a database" * 10)
    with pytest.raises(picpac.FormatError, match="text.txt: not a picpac database"):
        picpac.Reader(tmp_path / "text.txt")
    with pytest.raises(picpac.PicPacTypeError):
        picpac.Reader(None)
    path = tmp_path / "db.picpac"
    write_db(path, 4)
    data = bytearray(path.read_bytes())
    newer = bytearray(data)
    newer[8:12] = struct.pack("<I", VERSION + 1)
    (tmp_path / "newer.picpac").write_bytes(newer)
    with pytest.raises(picpac.VersionError, match=f"version {VERSION + 1}.*upgrade picpac"):
        picpac.Reader(tmp_path / "newer.picpac")
    (tmp_path / "short.picpac").write_bytes(data[:-10])
    with pytest.raises(picpac.CorruptError, match="short.picpac: truncated"):
        picpac.Reader(tmp_path / "short.picpac")
    (tmp_path / "magic.picpac").write_bytes(MAGIC + b"\x01")
    with pytest.raises(picpac.CorruptError, match="magic.picpac"):
        picpac.Reader(tmp_path / "magic.picpac")


def flip_record_byte(path, record: int, position: int, bit: int) -> None:
    with picpac.Reader(path) as r:
        offset = int(r.index["offset"][record])
    data = bytearray(path.read_bytes())
    data[offset + position] ^= bit
    path.write_bytes(data)


def test_damaged_record_is_named(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 6)
    flip_record_byte(path, 3, 40, 0x10)
    with picpac.Reader(path) as r:
        assert bytes(r[2]["image"]) == payload(2)
        with pytest.raises(picpac.CorruptRecordError, match="record 3 fails its checksum") as info:
            r[3]
        assert (info.value.index, info.value.reason) == (3, "fails its checksum (damaged bytes)")
        copy = pickle.loads(pickle.dumps(info.value))  # errors cross process boundaries intact
        assert (type(copy), str(copy), copy.index) == (picpac.CorruptRecordError, str(info.value), 3)
        with picpac.Reader(path, check=False) as unchecked:
            assert bytes(unchecked[3]["image"]) != payload(3)  # without checks the bytes come back as stored


def test_damaged_layout_without_checks_raises_not_crashes(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 3)
    flip_record_byte(path, 1, 8 + 4, 0x40)  # the first field's size
    with picpac.Reader(path, check=False) as r:
        with pytest.raises(picpac.CorruptRecordError, match="record 1 has a damaged layout"):
            r[1]


def test_closed_reader_and_views_that_outlive_it(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 3)
    r = picpac.Reader(path)
    rec = r[1]
    labels = r.labels
    r.close()
    r.close()
    assert r.closed
    assert bytes(rec["image"]) == payload(1) and labels.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(picpac.PicPacError, match="closed"):
        r[0]


def test_threads_share_one_reader(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 200)
    expected = [payload(i) for i in range(200)]
    errors = []
    with picpac.Reader(path) as r:
        def work(seed: int) -> None:
            rng = np.random.default_rng(seed)
            for i in rng.integers(0, 200, 2000):
                if bytes(r[i]["image"]) != expected[i]:
                    errors.append(i)
        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_pickled_reader_reopens_same_commit(tmp_path):
    path = tmp_path / "db.picpac"
    write_db(path, 5)
    with picpac.Reader(path) as r:
        blob = pickle.dumps(r)
        with pickle.loads(blob) as copy:
            assert len(copy) == 5 and bytes(copy[4]["image"]) == payload(4)
        with picpac.Writer(path, append=True) as w:
            w.append(image=b"more")
        with pytest.raises(picpac.PicPacError, match="changed"):
            pickle.loads(blob)


@pytest.mark.parametrize("append", [False, True])
def test_a_symlink_path_writes_its_target(tmp_path, append):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "real.picpac"
    link = tmp_path / "link.picpac"
    link.symlink_to(target)
    for i in range(2):  # creates the target, then replaces (or appends to) it
        with picpac.Writer(link, append=append, overwrite=not append) as w:
            w.append(image=payload(i))
    assert link.is_symlink() and os.readlink(link) == str(target)
    with picpac.Reader(link) as r:
        assert [bytes(x["image"]) for x in r] == [payload(i) for i in range(2)][-1 - append:]
    assert os.listdir(tmp_path / "data") == ["real.picpac"]


def test_writer_removes_temporary_files_that_dead_writers_left(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    path = tmp_path / "db.picpac"
    stale = tmp_path / f".db.picpac.{pid}-0123abcd.picpac-tmp"
    live = tmp_path / f".db.picpac.{os.getpid()}-0123abcd.picpac-tmp"
    for temp in (stale, live):
        temp.write_bytes(b"left by a killed writer")
        os.utime(temp, (1, 1))
    with picpac.Writer(path) as w:
        w.append(image=b"x")
    assert sorted(os.listdir(tmp_path)) == sorted(["db.picpac", live.name])
