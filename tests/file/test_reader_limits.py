"""Crafted files with valid checksums: every lie about a count, size or nesting is a PicPacError, read in
bounded memory (never an IndexError, RecursionError or a huge allocation)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import picpac
from picpac.file.layout import (EMPTY_COMMIT, HEADER_SIZE, INDEX_DTYPE, NO_GROUP, RECORD_HEAD, Commit, crc32,
                                index_offset_after, pack_header)
from picpac.tools.info import describe
from picpac.tools.verify import verify

FIELDS = b'{"fields": ["image"]}'


def record(fields: list[tuple[int, bytes]] = (), meta: bytes = b"", nfields: int | None = None) -> bytes:
    """A record's bytes; ``nfields`` overrides the field count its head claims."""
    head = RECORD_HEAD.pack(len(fields) if nfields is None else nfields, 0, len(meta))
    return head + b"".join(struct.pack("<IQ", k, len(v)) for k, v in fields) + meta + b"".join(v for _, v in fields)


def build(path, records: list[bytes], metadata: bytes = FIELDS, **columns) -> None:
    """A committed database of these record bytes, with valid checksums everywhere; ``columns`` override
    index columns (offset, size, ...) after the checksums are taken."""
    data = bytearray(HEADER_SIZE)
    index = np.zeros(len(records), INDEX_DTYPE)
    for i, rec in enumerate(records):
        index[i] = (len(data), len(rec), 0.0, NO_GROUP, crc32(rec), 0)
        data += rec
    for name, values in columns.items():
        index[name] = values
    offset = len(data)
    data += metadata
    data += bytes(index_offset_after(len(data)) - len(data))
    index_offset = len(data)
    data += index.tobytes()
    commit = Commit(1, offset, len(metadata), index_offset, len(records), crc32(bytes(data[offset:])))
    data[:HEADER_SIZE] = pack_header(commit, EMPTY_COMMIT)
    path.write_bytes(bytes(data))


def test_build_makes_a_sound_database(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(0, b"abc")], b'{"i": 1}')])
    with picpac.Reader(path) as r:
        assert bytes(r[0]["image"]) == b"abc" and r[0].meta == {"i": 1}
    assert verify(path, progress=False).ok


# -- field counts ---------------------------------------------------------------------------------
def test_field_count_larger_than_the_record_is_a_damaged_layout(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(0, b"abcd")], nfields=65535)])
    with picpac.Reader(path) as r:
        with pytest.raises(picpac.CorruptRecordError, match=r"db.picpac: record 0 has a damaged layout "
                                                            r"\(its head claims 65535 fields") as info:
            r[0]
    assert info.value.index == 0
    report = verify(path, progress=False)
    assert report.damaged == [0] and "65535 fields" in report.problems[0]


CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    import picpac
    open("/proc/self/clear_refs", "w").write("5")  # ru_maxrss would hold the parent's peak (kept across exec)
    with picpac.Reader(sys.argv[1]) as r:
        for i in range(len(r)):
            try:
                r[i]
            except picpac.CorruptRecordError:
                pass
            else:
                raise SystemExit(f"record {i} read")
    print(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1])
""")


def test_many_crafted_field_counts_read_in_bounded_memory(tmp_path):
    """Before the check, each count built (and cached) a 4 MB struct: 1,000 of them in a 56 KB file took
    gigabytes (here, under a 2 GiB address-space limit, a MemoryError)."""
    path = tmp_path / "counts.picpac"
    build(path, [record(nfields=65535 - k) for k in range(1000)])
    assert os.path.getsize(path) < 60_000
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env, check=False,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 300_000  # peak RSS in KiB while reading


# -- JSON -----------------------------------------------------------------------------------------
def test_record_meta_that_is_not_json_names_the_record(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(0, b"a")], b"[" * 100_000), record([(0, b"b")], b"{bad"), record([(0, b"c")], b"{}")])
    with picpac.Reader(path) as r:
        with pytest.raises(picpac.CorruptRecordError, match=r"db.picpac: record 0 has meta that is not valid "
                                                            r"JSON \(nested too deeply\)"):
            r[0].meta
        with pytest.raises(picpac.CorruptRecordError, match="record 1 has meta that is not valid JSON"):
            r[1].meta
        assert bytes(r[0]["image"]) == b"a" and r[2].meta == {}
    assert describe(path)["sizes"]["unreadable"] == 2


def test_dataset_metadata_nested_too_deeply(tmp_path):
    path = tmp_path / "deep.picpac"
    build(path, [], metadata=b'{"fields": [], "x": ' + b"[" * 100_000)
    with pytest.raises(picpac.CorruptError, match="deep.picpac: dataset metadata is not valid JSON: nested too"):
        picpac.Reader(path)


@pytest.mark.parametrize("metadata, why", [
    ({"fields": [["image"]]}, "field list"),
    ({"fields": ["image", 3]}, "field list"),
    ({"fields": ["image"], "classes": 5}, "'classes' is not a list of str"),
    ({"fields": ["image"], "classes": [{}]}, "'classes' is not a list of str"),
])
def test_field_names_and_classes_must_be_str(tmp_path, metadata, why):
    path = tmp_path / "names.picpac"
    build(path, [record([(0, b"a")])], metadata=json.dumps(metadata).encode())
    with pytest.raises(picpac.FormatError, match=f"names.picpac: dataset metadata.*{why}"):
        picpac.Reader(path)


# -- arrays ---------------------------------------------------------------------------------------
def arrays_db(path, spec: dict, image: bytes = b"") -> None:
    build(path, [record([(0, image)])], metadata=json.dumps({"fields": ["image"], "arrays": {"image": spec}}).encode())


def test_array_shape_whose_size_overflows_int64(tmp_path):
    path = tmp_path / "big.picpac"
    arrays_db(path, {"shape": [2**40, 2**40], "dtype": "float64"})  # 2**83 bytes: 0 in int64
    with picpac.Reader(path) as r:
        with pytest.raises(picpac.FormatError, match=r"big.picpac: metadata 'arrays' field 'image' declares "
                                                     r"1099511627776x1099511627776 float64 arrays"):
            r.array(0)


def test_array_larger_than_every_record(tmp_path):
    path = tmp_path / "big.picpac"
    arrays_db(path, {"shape": [1 << 20], "dtype": "uint8"}, b"x" * 16)
    with picpac.Reader(path) as r:
        with pytest.raises(picpac.FormatError, match="field 'image' declares 1048576 uint8 arrays of 1048576 "
                                                     "bytes, more than 36"):
            r.arrays
    empty = tmp_path / "empty.picpac"  # no records: nothing to bound it by but MAX_ARRAY_BYTES
    picpac.Writer(empty, metadata={"arrays": {"image": {"shape": [1000, 1000], "dtype": "uint8"}}}).close()
    with picpac.Reader(empty) as r:
        assert r.arrays["image"].nbytes == 1_000_000


# -- spans, take, stride --------------------------------------------------------------------------
def test_spans_with_offsets_and_sizes_that_overflow(tmp_path):
    path = tmp_path / "db.picpac"
    good = record([(0, b"abcd")])
    build(path, [good] * 4, offset=[HEADER_SIZE, 2**62, 2**63 + 5, HEADER_SIZE + len(good)],
          size=[len(good), 2**63 - 1, len(good), 2**64 - 1])
    with picpac.Reader(path) as r:
        starts, lengths, problems = r.spans(np.arange(4), "image")
        assert problems == {1: "lies past the end of the file", 2: "lies past the end of the file",
                            3: "lies past the end of the file"}
        assert lengths.tolist() == [4, -1, -1, -1] and bytes(r.gather(starts[:1], 4)[0]) == b"abcd"
        assert r.stride is None
        for i in (1, 2, 3):
            with pytest.raises(picpac.CorruptRecordError, match=f"record {i} lies past the end of the file"):
                r[i]


@pytest.mark.parametrize("offset, size", [
    ([HEADER_SIZE + k * 2**40 for k in range(3)], 2**40),  # back to back, past the end of the file
    ([HEADER_SIZE, HEADER_SIZE + 2**63, HEADER_SIZE], 2**63),  # offsets that wrap around in uint64
])
def test_stride_past_the_end_of_the_file(tmp_path, offset, size):
    path = tmp_path / "db.picpac"
    build(path, [record([(0, b"abcd")])] * 3, offset=offset, size=size)
    with picpac.Reader(path) as r:
        assert r.stride is None
        with pytest.raises(picpac.PicPacValueError, match="not of one size back to back within the file"):
            r.take(np.arange(3), np.zeros((3, 16), np.uint8))
        _, lengths, problems = r.spans(np.arange(3), "image")
        assert (lengths == -1).all() and set(problems) == {0, 1, 2}
        with pytest.raises(picpac.CorruptRecordError, match="record 1 lies past the end of the file"):
            r[1]


def test_records_shorter_than_their_head_back_to_back(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [b"\x01\x00\x00\x00"] * 3)
    with picpac.Reader(path) as r:
        assert r.stride == 4
        rows = r.take(np.arange(3), np.zeros((3, 4), np.uint8))
        for source in (rows, None):
            _, lengths, problems = r.spans(np.arange(3), "image", source)
            assert (lengths == -1).all() and problems == dict.fromkeys(range(3), "has a damaged layout")
        with pytest.raises(picpac.CorruptRecordError, match="record 2 has a damaged layout"):
            r[2]


def test_gather_and_spans_with_crafted_field_counts(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(0, b"abcd")], nfields=65535), record([(0, b"efgh")])])
    with picpac.Reader(path) as r:
        starts, lengths, problems = r.spans(np.arange(2), "image")
        assert lengths.tolist() == [-1, 4] and list(problems) == [0]
        assert bytes(r.gather(starts[1:], 4)[0]) == b"efgh"


def test_a_field_id_the_metadata_does_not_name_is_damage_on_every_path(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(5, b"abc")]), record([(5, b"abc")])])
    with picpac.Reader(path) as r:
        with pytest.raises(picpac.CorruptRecordError, match="damaged layout"):
            r[0]
        for rows in (None, r.take(np.arange(2), np.empty((2, r.stride), np.uint8))):
            starts, lengths, problems = r.spans(np.arange(2), "image", rows)
            assert list(lengths) == [-1, -1] and sorted(problems) == [0, 1]


def test_a_field_named_twice_in_the_metadata_is_refused(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(1, b"abc")])], metadata=b'{"fields": ["x", "x"]}')
    with pytest.raises(picpac.FormatError, match="names a field twice"):
        picpac.Reader(path)


def test_array_of_a_record_without_the_declared_field(tmp_path):
    path = tmp_path / "db.picpac"
    build(path, [record([(1, b"abcd")])],
          metadata=b'{"fields": ["image", "mask"], "arrays": {"image": {"shape": [4], "dtype": "uint8"}}}')
    with picpac.Reader(path) as r, pytest.raises(picpac.CorruptRecordError, match="has no 'image' field"):
        r.array(0)
