"""Other storage formats (picpac/stores.py): round trips, the CLI, laziness, checksums, forked readers."""
from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import os
import pickle
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import picpac
from picpac import stores
from picpac.errors import CorruptError, FormatError, MissingPathError, PicPacError, PicPacValueError

from conftest import SHARED_DATA, payload

KINDS = stores.KINDS
LABELS = [0, 1, 2.5, 0.1, -0.0, 1e300, -7, float("inf")]
REQUIRES = {"lmdb": "lmdb", "hdf5": "h5py"}


def _needs(kind: str) -> None:
    if kind in REQUIRES:
        pytest.importorskip(REQUIRES[kind], reason=f"{kind} needs {REQUIRES[kind]} (pip install picpac[formats])")


def store_path(directory, kind: str) -> str:
    return os.path.join(str(directory), f"data.{kind}")


def make_db(path, count: int = 23) -> str:
    """Records with every kind of variation: optional and empty fields, odd labels, groups, meta."""
    metadata = {"classes": ["cat", "dog", "eel"], "source": "test", "note": {"nested": [1, 2]}}
    with picpac.Writer(path, metadata=metadata) as w:
        for i in range(count):
            fields = {"image": payload(i, 50 + 97 * i)}
            if i % 3 == 0:
                fields["annotation"] = b'{"shapes":[]}'
            if i == 4:
                fields = {"mask": b"", **fields}  # a new field, empty, before image in the record
            w.append(fields, label=LABELS[i % len(LABELS)], group=None if i % 4 == 0 else i // 4 - 2,
                     meta={"i": i, "name": f"x{i}.jpg"} if i % 2 else None)
    return str(path)


def assert_same_records(a, b) -> None:
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert {k: bytes(v) for k, v in x.fields.items()} == {k: bytes(v) for k, v in y.fields.items()}, i
        assert list(x.fields) == list(y.fields) or set(x.fields) == set(y.fields)
        assert (x.group, x.meta) == (y.group, y.meta), i
        assert x.label == y.label or (math.isnan(x.label) and math.isnan(y.label)), i
        assert math.copysign(1, x.label) == math.copysign(1, y.label), i


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "src.picpac")


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_keeps_every_byte(kind, db, tmp_path):
    _needs(kind)
    dst, back = store_path(tmp_path, kind), str(tmp_path / "back.picpac")
    out = stores.export_store(db, dst, kind)
    assert out.count == 23 and out.destination_bytes == stores.store_size(dst, kind) > 0
    with picpac.Reader(db) as source, stores.open_reader(dst, kind) as store:
        assert store.metadata["fields"] == source.fields == ["image", "annotation", "mask"]
        assert store.classes == ["cat", "dog", "eel"]
        assert_same_records(source, store)
    back_report = stores.import_store(dst, back, kind)
    assert back_report.count == 23 and back_report.source_bytes == out.destination_bytes
    with picpac.Reader(db) as source, picpac.Reader(back) as copy:
        assert copy.metadata == source.metadata  # fields, classes, created, the rest
        assert_same_records(source, copy)
        assert (copy.labels.view(np.uint64) == source.labels.view(np.uint64)).all()  # -0.0 and all
        assert (copy.groups == source.groups).all()


@pytest.mark.parametrize("kind", KINDS)
def test_empty_store_round_trip(kind, tmp_path):
    _needs(kind)
    db = str(tmp_path / "empty.picpac")
    with picpac.Writer(db, metadata={"classes": ["a"]}):
        pass
    stores.export_store(db, store_path(tmp_path, kind), kind)
    with stores.open_reader(store_path(tmp_path, kind), kind) as store:
        assert len(store) == 0 and store.classes == ["a"]
    stores.import_store(store_path(tmp_path, kind), tmp_path / "back.picpac", kind)
    with picpac.Reader(db) as a, picpac.Reader(tmp_path / "back.picpac") as b:
        assert len(b) == 0 and a.metadata == b.metadata


@pytest.mark.parametrize("kind", KINDS)
def test_writer_api_and_existing_target(kind, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    for round_ in range(2):  # the second writer replaces the first store
        with stores.open_writer(path, kind, metadata={"classes": ["a", "b"]}) as w:
            for i in range(3 + round_):
                w.append(image=payload(i), label=i % 2, group=7, meta={"k": round_})
    with stores.open_reader(path, kind) as r:
        assert len(r) == 4 and r.fields == ["image"] and r[3].meta == {"k": 1}
        assert [bytes(rec["image"]) for rec in r] == [payload(i) for i in range(4)]
        assert [(rec.label, rec.group) for rec in r] == [(0, 7), (1, 7), (0, 7), (1, 7)]
    with pytest.raises(PicPacValueError, match="already exists"):
        stores.export_store(make_db(tmp_path / "x.picpac", 2), path, kind)
    leftovers = [name for name in os.listdir(tmp_path) if name.startswith(".")]
    assert leftovers == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_exception_leaves_no_store(kind, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    with pytest.raises(ZeroDivisionError):
        with stores.open_writer(path, kind) as w:
            w.append(image=b"abc")
            1 / 0
    assert os.listdir(tmp_path) == []


def _digest_of(args):
    reader, i = args
    record = reader[i]
    return hashlib.sha256(b"".join(bytes(v) for v in record.fields.values())).hexdigest(), record.label


_FORKED = None


def _forked_digest(i):
    record = _FORKED[i]
    return hashlib.sha256(b"".join(bytes(v) for v in record.fields.values())).hexdigest(), record.label


@pytest.mark.parametrize("kind", KINDS)
def test_reads_in_forked_workers_and_after_pickling(kind, db, tmp_path):
    _needs(kind)
    global _FORKED
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    with stores.open_reader(path, kind) as reader:
        expected = [_digest_of((reader, i)) for i in range(len(reader))]  # the parent's handles are in use
        _FORKED = reader
        try:
            with mp.get_context("fork").Pool(2) as pool:
                assert pool.map(_forked_digest, range(len(reader)), chunksize=3) == expected
        finally:
            _FORKED = None
        assert [_digest_of((reader, i)) for i in range(len(reader))] == expected  # the parent still reads
        clone = pickle.loads(pickle.dumps(reader))
        assert type(clone) is type(reader) and [_digest_of((clone, i)) for i in range(len(clone))] == expected
        clone.close()


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_hdf5_reads_lazily(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "lazy.hdf5")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, 40_000, np.uint8).tobytes() for _ in range(100)]  # 4 MB
    with stores.open_writer(path, "hdf5") as w:
        for i, image in enumerate(images):
            w.append(image=image, label=i)
    before = _read_bytes()
    reader = stores.open_reader(path, "hdf5")
    opened = _read_bytes()
    record = reader[5]
    done = _read_bytes()
    assert bytes(record["image"]) == images[5] and record.label == 5
    assert opened - before < 400_000, "opening read the field data"
    assert 40_000 <= done - opened < 400_000, "reading record 5 read other records"
    # the reader holds h5py datasets, not arrays, and they give the same element
    assert isinstance(reader.datasets["image"], h5py.Dataset)
    with h5py.File(path, "r") as f:
        assert f["fields/image"].dtype == h5py.vlen_dtype(np.uint8) and len(f["fields/image"]) == 100
        assert f["fields/image"][5].tobytes() == images[5]
    reader.close()


# -- TFRecord ----------------------------------------------------------------------------------------
def crc32c_bitwise(data: bytes) -> int:
    """CRC32C one bit at a time, straight from the definition (independent of picpac's tables)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_known_values():
    # the check value of CRC-32C and the iSCSI vectors of RFC 3720 (TensorFlow's crc32c_test.cc has them)
    vectors = {b"123456789": 0xE3069283, bytes(32): 0x8A9136AA, b"\xff" * 32: 0x62A8AB43,
               bytes(range(32)): 0x46DD794E, bytes(range(31, -1, -1)): 0x113FDB5C}
    for data, crc in vectors.items():
        assert crc32c_bitwise(data) == crc
        assert stores.crc32c(data) == stores.crc32c_python(data) == stores.crc32c_numpy(data) == crc
    rng = np.random.default_rng(1)
    for n in (0, 1, 255, 256, 257, 1000, 4099, 70_001):
        data = rng.integers(0, 256, n, np.uint8).tobytes()
        assert stores.crc32c_numpy(data) == stores.crc32c_python(data) == stores.crc32c(data)
        assert stores.crc32c_numpy(data[10:], stores.crc32c(data[:10])) == stores.crc32c(data)
    assert crc32c_bitwise(b"x" * 300) == stores.crc32c_numpy(b"x" * 300)


def test_tfrecord_written_by_hand_reads_back(tmp_path):
    # tf.train.Example {features {feature {key: "image" value {bytes_list {value: "abc"}}}
    #                             feature {key: "picpac/label" value {int64_list {value: 7}}}
    #                             feature {key: "score" value {float_list {value: 0.5}}}}}
    # assembled from the protobuf wire format; score is an unpacked float (fixed32), the label packed.
    image = b"\x0a\x05image" + b"\x12\x07" + b"\x0a\x05" + b"\x0a\x03abc"
    label = b"\x0a\x0cpicpac/label" + b"\x12\x05" + b"\x1a\x03" + b"\x0a\x01\x07"
    score = b"\x0a\x05score" + b"\x12\x07" + b"\x12\x05" + b"\x0d" + struct.pack("<f", 0.5)
    features = b"".join(b"\x0a" + bytes([len(e)]) + e for e in (image, label, score))
    example = b"\x0a" + bytes([len(features)]) + features + b"\x10\x01"  # + an unknown field 2 to skip
    length = struct.pack("<Q", len(example))
    frame = length + struct.pack("<I", masked(crc32c_bitwise(length))) + example + \
        struct.pack("<I", masked(crc32c_bitwise(example)))
    path = tmp_path / "hand.tfrecord"
    path.write_bytes(frame * 2)
    with stores.open_reader(path, "tfrecord") as r:
        assert len(r) == 2 and r.metadata == {}
        rec = r[1]
        assert bytes(rec["image"]) == b"abc" and list(rec.fields) == ["image"]
        assert rec.label == 7.0 and rec.group is None and rec.meta == {"score": [0.5]}
    # and picpac writes exactly this framing and these bytes for the same features
    ours = stores.encode_example({"image": ("bytes", [b"abc"]), "picpac/label": ("int64", [7])})
    assert ours == b"\x0a" + bytes([len(image + label) + 4]) + b"\x0a" + bytes([len(image)]) + image + \
        b"\x0a" + bytes([len(label)]) + label
    assert stores.tfrecord_frame(example) == frame
    assert stores.decode_example(stores.encode_example(
        {"n": ("int64", [-1, 2**62]), "f": ("float", [1.5, -2.0]), "b": ("bytes", [b"", b"x"])})) == \
        {"n": ("int64", [-1, 2**62]), "f": ("float", [1.5, -2.0]), "b": ("bytes", [b"", b"x"])}


def test_tfrecord_crc_mismatch_is_detected_and_named(db, tmp_path):
    path = store_path(tmp_path, "tfrecord")
    stores.export_store(db, path, "tfrecord")
    data = bytearray(open(path, "rb").read())
    with stores.open_reader(path, "tfrecord") as r:
        starts = r._starts
    damaged = tmp_path / "damaged.tfrecord"
    bad = bytearray(data)
    bad[data.find(payload(3, 50 + 97 * 3)) + 20] ^= 0x01  # a byte of record 3's image
    damaged.write_bytes(bad)
    with stores.open_reader(damaged, "tfrecord") as r:
        assert bytes(r[2]["image"]) == payload(2, 50 + 97 * 2)
        with pytest.raises(CorruptError, match=r"damaged\.tfrecord: record 3 fails its data CRC32C"):
            r[3]
    with stores.open_reader(damaged, "tfrecord", check=False) as r:
        r[3]  # not checked: read as is
    bad = bytearray(data)
    bad[starts[5] - 12] ^= 0x01  # the length of record 5
    damaged.write_bytes(bad)
    with pytest.raises(CorruptError, match=r"damaged\.tfrecord: record 5 at byte \d+ fails its length CRC32C"):
        stores.open_reader(damaged, "tfrecord")
    damaged.write_bytes(data[:-3])
    with pytest.raises(CorruptError, match=r"damaged\.tfrecord: record 22 .* truncated"):
        stores.open_reader(damaged, "tfrecord")
    damaged.write_bytes(b"not a tfrecord file at all")
    with pytest.raises(FormatError, match=r"damaged\.tfrecord: not a TFRecord file"):
        stores.open_reader(damaged, "tfrecord")


# -- errors --------------------------------------------------------------------------------------------
def _damage(path: str, kind: str) -> None:
    """Cut a store to half its size."""
    target = os.path.join(path, "data.mdb") if kind == "lmdb" else path
    size = os.path.getsize(target)
    with open(target, "r+b") as f:
        f.truncate(size // 2)


@pytest.mark.parametrize("kind", KINDS)
def test_missing_wrong_and_truncated_stores_are_named(kind, db, tmp_path):
    _needs(kind)
    missing = str(tmp_path / "missing.store")
    with pytest.raises(MissingPathError, match=re.escape(missing)):
        stores.open_reader(missing, kind)
    wrong = tmp_path / "wrong.store"
    wrong.write_bytes(b"hello, this is not a dataset\n" * 100)
    if kind == "binary":
        (tmp_path / "wrong.store.idx").write_bytes(b"nope")
    with pytest.raises(FormatError, match=re.escape(str(tmp_path / "wrong.store"))):
        stores.open_reader(wrong, kind)
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    _damage(path, kind)
    with pytest.raises(PicPacError, match=re.escape(path)):
        with stores.open_reader(path, kind) as r:
            for i in range(len(r)):
                r[i]


@pytest.mark.parametrize("kind", ["lmdb", "binary"])
def test_ppr1_crc_names_the_damaged_record(kind, db, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    target = os.path.join(path, "data.mdb") if kind == "lmdb" else path
    data = bytearray(open(target, "rb").read())
    at = data.find(payload(6, 50 + 97 * 6))
    data[at + 10] ^= 0xFF
    open(target, "wb").write(data)
    with stores.open_reader(path, kind) as r:
        r[5]
        with pytest.raises(CorruptError, match=re.escape(path) + r": record 6 fails its CRC32"):
            r[6]


def test_lmdb_map_grows_as_needed(tmp_path, monkeypatch):
    pytest.importorskip("lmdb")
    monkeypatch.setattr(stores.LmdbWriter, "_MAP_SIZE", 64 << 10)
    monkeypatch.setattr(stores.LmdbWriter, "_BATCH_BYTES", 100 << 10)
    images = [payload(i, 30_000) for i in range(40)]  # 1.2 MB into a 64 KiB map
    with stores.open_writer(tmp_path / "grow.lmdb", "lmdb") as w:
        for image in images:
            w.append(image=image)
    with stores.open_reader(tmp_path / "grow.lmdb", "lmdb") as r:
        assert [bytes(rec["image"]) for rec in r] == images


def test_reserved_field_names_are_refused(tmp_path):
    for kind, name in [("tar", "cls"), ("tar", "json"), ("tar", "a/b"), ("tfrecord", "picpac/label"),
                       ("sqlite", "Label"), ("sqlite", "id")]:
        with stores.open_writer(tmp_path / f"x.{kind}", kind) as w:
            with pytest.raises(PicPacValueError, match=re.escape(repr(name))):
                w.append({name: b"x"})
            w.append(image=b"x")
    with stores.open_writer(tmp_path / "y.sqlite", "sqlite") as w:
        w.append(image=b"x")
        with pytest.raises(PicPacValueError, match="case"):
            w.append(Image=b"x")


def test_missing_optional_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)  # import lmdb raises ImportError
    monkeypatch.setitem(sys.modules, "h5py", None)
    for kind in ("lmdb", "hdf5"):
        with pytest.raises(stores.MissingPackageError, match=re.escape("pip install picpac[formats]")):
            stores.open_writer(tmp_path / f"x.{kind}", kind)
    assert os.listdir(tmp_path) == []


# -- other tools read what picpac writes, and the other way round --------------------------------------
def test_stores_follow_their_formats_conventions(db, tmp_path):
    stores.export_store(db, tmp_path / "d.tar", "tar")
    with tarfile.open(tmp_path / "d.tar") as tar:
        names = tar.getnames()
        assert names[:4] == ["000000.image", "000000.annotation", "000000.cls", "000001.image"]
        assert tar.extractfile("000001.cls").read() == b"1" and tar.extractfile("000002.cls").read() == b"2.5"
        assert tar.extractfile("000001.json").read() == b'{"i":1,"name":"x1.jpg"}'
        assert names[-1] == "000022.picpac.json"
    stores.export_store(db, tmp_path / "d.sqlite", "sqlite")
    with sqlite3.connect(tmp_path / "d.sqlite") as con:
        assert con.execute('SELECT id, label, "group", image FROM records WHERE id = 3').fetchone() == \
            (3, 0.1, -2, payload(3, 50 + 97 * 3))
    stores.export_store(db, tmp_path / "d.npz", "npz")
    with np.load(tmp_path / "d.npz") as npz:
        data, offsets = npz["data:image"], npz["offsets:image"]
        assert data[offsets[3]:offsets[4]].tobytes() == payload(3, 50 + 97 * 3)
        assert npz["label"][2] == 2.5 and npz["present:mask"].tolist() == [i == 4 for i in range(23)]
        arrays = dict(npz)
    np.savez(tmp_path / "savez.npz", **arrays)  # what np.savez writes reads back the same
    np.savez_compressed(tmp_path / "compressed.npz", **arrays)  # (loaded whole, not mapped)
    with picpac.Reader(db) as source:
        for name in ("savez.npz", "compressed.npz"):
            with stores.open_reader(tmp_path / name, "npz") as r:
                assert_same_records(source, r)
    stores.export_store(db, tmp_path / "d.bin", "binary")
    offsets = np.load(tmp_path / "d.bin.idx")
    blob = open(tmp_path / "d.bin", "rb").read()
    fields, label, group, meta = stores.decode_record(blob[offsets[1]:offsets[2]])
    assert bytes(fields["image"]) == payload(1, 147) and (label, group, bytes(meta)) == \
        (1.0, -2, b'{"i":1,"name":"x1.jpg"}')


# -- the CLI on real JPEGs -------------------------------------------------------------------------------
SUMMARY = {
    "export": r"exported (\d+) records from \S+ \(([\d,]+) bytes\) to {kind} \S+ \(([\d,]+) bytes, "
              r"[\d.]+x the source\) in [\d.]+ s",
    "import": r"imported (\d+) records from {kind} \S+ \(([\d,]+) bytes\) to \S+ \(([\d,]+) bytes, "
              r"[\d.]+x the source\) in [\d.]+ s",
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def jpeg_db(tmp_path_factory):
    source = str(SHARED_DATA / "imagenet-250")
    if not os.path.isdir(source):
        pytest.skip(f"real data not found at {source} (the ../shared folder beside the repo)")
    folder = tmp_path_factory.mktemp("jpegs")
    names = sorted(n for n in os.listdir(source) if n.endswith(".JPEG"))[:24]
    for name in names:
        shutil.copy(os.path.join(source, name), folder / name)
    db = folder.parent / "imagenet24.picpac"
    result = run_cli("import", "-f", "dir", folder, db)
    assert result.returncode == 0, result.stderr
    return db, {name: (folder / name).read_bytes() for name in names}


@pytest.mark.parametrize("kind", KINDS)
def test_cli_converts_jpegs_both_ways_keeping_every_byte(kind, jpeg_db, tmp_path):
    _needs(kind)
    db, jpegs = jpeg_db
    dst, back = store_path(tmp_path, kind), tmp_path / "back.picpac"
    result = run_cli("export", "--to", kind, db, dst)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(SUMMARY["export"].format(kind=kind), result.stdout.strip())
    assert match and match.group(1) == "24", result.stdout
    assert int(match.group(2).replace(",", "")) == os.path.getsize(db)
    assert int(match.group(3).replace(",", "")) == stores.store_size(dst, kind)
    assert run_cli("export", "--to", kind, db, dst).returncode == 2  # exists
    result = run_cli("import", "--from", kind, dst, back)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(SUMMARY["import"].format(kind=kind), result.stdout.strip())
    assert match and match.group(1) == "24", result.stdout
    with picpac.Reader(db) as a, picpac.Reader(back) as b:
        assert a.metadata == b.metadata
        assert_same_records(a, b)
        assert {rec.meta["path"]: bytes(rec["image"]) for rec in b} == jpegs


def test_cli_errors_are_one_line(tmp_path, jpeg_db):
    db, _ = jpeg_db
    (tmp_path / "junk.tfrecord").write_bytes(b"junk" * 10)
    result = run_cli("import", "--from", "tfrecord", tmp_path / "junk.tfrecord", tmp_path / "x.picpac")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"picpac: error: {tmp_path / 'junk.tfrecord'}: not a TFRecord file "
                                          "(its first record fails its length CRC32C)"]
    assert not (tmp_path / "x.picpac").exists()
    result = run_cli("import", "--from", "tar", "-f", "dir", db, tmp_path / "x.picpac")
    assert result.returncode == 2 and "--from cannot be combined with -f/--format" in result.stderr
    result = run_cli("export", "--to", "tar", tmp_path / "missing.picpac", tmp_path / "x.tar")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "missing.picpac" in result.stderr
