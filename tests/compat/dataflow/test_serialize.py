"""picpac/compat/dataflow/serialize.py on its own: each serializer's round trip, the picpac serializer's fields and
refusals, TFRecord's layout and damage (and TensorFlow reading it), NumPy's and HDF5's in-memory files, LMDB's keys,
and what a missing optional package says."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from importlib.util import find_spec

import cv2
import numpy as np
import pytest

import picpac
from picpac.dataflow import (DataFlow, DataFromGenerator, DataFromList, HDF5Serializer, LMDBData, LMDBDataDecoder,
                             LMDBSerializer, MissingDependencyError, NumpySerializer, PicPacData, PicPacSerializer,
                             TFRecordSerializer, WireFormatError, codec)
from picpac.dataflow.base import make_rng
from picpac.dataflow.serialize import crc32c, read_tfrecords
from picpac.errors import CorruptError, PicPacTypeError, PicPacValueError
from picpac.stores import masked_crc32c

from dataflow_helpers import numbers, ready


class SeededFakeDataFlow(DataFlow):
    """tensorpack's serializer test flow, as it is there (it seeds NumPy's global RNG itself)."""

    def __init__(self, seed=42, size=32):
        super().__init__()
        self.seed, self._size, self.cache = seed, size, []

    def reset_state(self):
        np.random.seed(self.seed)
        for _ in range(self._size):
            self.cache.append([np.random.randint(low=0, high=10), np.random.randn(28, 28, 3)])

    def __len__(self):
        return self._size

    def __iter__(self):
        yield from self.cache


def write_read(path, serializer, w_args, r_args, r_kwargs):
    """tensorpack's run_write_read_test: save, load, reset both, compare datapoint by datapoint."""
    expected = SeededFakeDataFlow()
    serializer.save(expected, str(path), *w_args)
    actual = serializer.load(str(path), *r_args, **r_kwargs)
    actual.reset_state()
    expected.reset_state()
    pairs = list(zip(expected, actual))
    assert len(pairs) == 32
    for want, got in pairs:
        assert want[0] == got[0] and np.allclose(want[1], got[1])


@pytest.mark.parametrize("name", ["lmdb", "tfrecord", "numpy", "hdf5", "picpac"])
def test_serializers_round_trip(tmp_path, name):
    if name in ("lmdb", "hdf5"):
        pytest.importorskip("lmdb" if name == "lmdb" else "h5py")
    paths = [["label", "image"]]
    cases = {"lmdb": (LMDBSerializer, "test.lmdb", [], [], {"shuffle": False}),
             "tfrecord": (TFRecordSerializer, "test.tfrecord", [], [], {"size": 32}),
             "numpy": (NumpySerializer, "test.npz", [], [], {"shuffle": False, "unpickle": True}),
             "hdf5": (HDF5Serializer, "test.h5", paths, paths, {"shuffle": False}),
             "picpac": (PicPacSerializer, "test.picpac", [], [], {"shuffle": False})}
    serializer, filename, w_args, r_args, r_kwargs = cases[name]
    write_read(tmp_path / filename, serializer, w_args, r_args, r_kwargs)
    loaded = serializer.load(str(tmp_path / filename), *r_args, **r_kwargs)
    assert len(loaded) == 32


def test_serialized_values_record_their_format(tmp_path):
    pytest.importorskip("lmdb")
    ds = DataFromList([[np.arange(3), i] for i in range(5)], shuffle=False)
    LMDBSerializer.save(ds, str(tmp_path / "a.lmdb"), format="arrays")
    raw = LMDBData(str(tmp_path / "a.lmdb"), shuffle=False)
    raw.reset_state()
    pairs = list(raw)
    assert [k for k, _ in pairs] == [f"{i:08}".encode() for i in range(5)] and len(raw) == 5  # no __keys__
    assert all(bytes(v[:4]) == b"PPDF" and b"arrays" in bytes(v[:16]) for _, v in pairs)
    shuffled = LMDBData(str(tmp_path / "a.lmdb"), shuffle=True, seed=1)
    shuffled.reset_state()
    assert sorted(k for k, _ in shuffled) == [k for k, _ in pairs]
    formatted = LMDBData(str(tmp_path / "a.lmdb"), shuffle=True, keys="{:08}", seed=1)
    formatted.reset_state()
    assert len(list(formatted)) == 5
    decoded = LMDBDataDecoder(raw, lambda k, v: None if k.endswith(b"2") else [int(k)])
    assert list(decoded) == [[0], [1], [3], [4]]
    with pytest.raises(PicPacValueError, match="already there"):
        LMDBSerializer.save(ds, str(tmp_path / "a.lmdb"))


def test_tfrecord_is_tensorflows_layout(tmp_path):
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0 and crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720's test vector
    data = np.random.default_rng(0).integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    from picpac.stores import crc32c_python
    assert crc32c(data) == crc32c_python(data)  # the vectorised CRC (shared with picpac.stores) == byte by byte
    path = tmp_path / "x.tfrecord"
    assert TFRecordSerializer.save(DataFromList([[i] for i in range(3)], shuffle=False), str(path)) == 3
    raw = path.read_bytes()
    (length,) = struct.unpack_from("<Q", raw)
    assert raw[12:16] == b"PPDF" and len(raw) == 3 * 16 + 3 * length  # 8 + 4 + data + 4 per record
    loaded = TFRecordSerializer.load(str(path))
    assert len(loaded) == 3 and list(loaded) == [[0], [1], [2]] == list(loaded)  # it can be iterated again
    damaged = bytearray(raw)
    damaged[20] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptError, match="record 0 fails its CRC32C"):
        list(TFRecordSerializer.load(str(path)))


def test_picpac_serializer_fields_and_picpac_data(tmp_path):
    images = [np.full((6, 5, 3), i, np.uint8) for i in range(4)]
    ds = DataFromList([[img, float(i), i % 2, b"raw%d" % i] for i, img in enumerate(images)], shuffle=False)
    path = tmp_path / "arrays.picpac"
    assert PicPacSerializer.save(ds, path, fields=["image", "label", "group", "blob"]) == 4
    with picpac.Reader(path) as r:
        assert list(r.labels) == [0, 1, 2, 3] and list(r.groups) == [0, 1, 0, 1]
        assert r.arrays["image"].shape == (6, 5, 3)
    back = PicPacData(path, shuffle=False)
    assert len(back) == 4 and back.fields == ["image", "label", "group", "blob"]
    dps = list(back)
    assert all(np.array_equal(dp[0], img) for dp, img in zip(dps, images))
    assert [dp[1:] for dp in dps] == [[float(i), i % 2, b"raw%d" % i] for i in range(4)]
    assert [dp[0] for dp in PicPacData(path, fields=["index"], shuffle=False)] == [0, 1, 2, 3]
    with pytest.raises(PicPacValueError, match="has no field 'mask'"):
        PicPacData(path, fields=["mask"])
    with pytest.raises(PicPacTypeError, match="component 'x' is a dict"):
        PicPacSerializer.save(DataFromList([[{}]], shuffle=False), tmp_path / "bad.picpac", fields=["x"])
    # an ordinary picpac database of encoded images: decoded to RGB
    encoded = tmp_path / "png.picpac"
    with picpac.Writer(encoded) as w:
        bgr = np.zeros((4, 4, 3), np.uint8)
        bgr[..., 2] = 255  # red, as OpenCV stores it
        w.append(image=cv2.imencode(".png", bgr)[1].tobytes(), label=3)
    (img, label), = list(PicPacData(encoded, shuffle=False))
    assert img.shape == (4, 4, 3) and img[0, 0].tolist() == [255, 0, 0] and label == 3.0  # stored BGR red -> RGB
    gray = list(PicPacData(encoded, shuffle=False, channels=1))[0][0]
    assert gray.shape == (4, 4, 1)


def test_a_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'picpac\[formats\]'") as info:
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path / "x.lmdb"))
    assert isinstance(info.value, ImportError)  # tensorpack's test skips on ImportError: that still works
    with pytest.raises(ImportError, match="h5py"):
        HDF5Serializer.save(DataFromList([[1]]), str(tmp_path / "x.h5"), ["a"])


# -- what every serializer takes ----------------------------------------------------------------------------
class DuckFlow:
    """Not a DataFlow, but reset_state and __iter__: the serializers take it, as tensorpack's do."""

    reset = False

    def reset_state(self):
        self.reset = True

    def __iter__(self):
        return iter([[7], [8]])


class SizedDuckFlow(DuckFlow):
    def __len__(self):
        return 2


def test_a_serializer_takes_a_dataflow_and_writes_one_pass(tmp_path):
    with pytest.raises(PicPacTypeError, match=r"^expected a DataFlow, got list$"):
        TFRecordSerializer.save([[1], [2]], tmp_path / "list.tfrecord")

    duck = SizedDuckFlow()
    assert NumpySerializer.save(duck, tmp_path / "duck.npz") == 2 and duck.reset
    unknown = DataFromGenerator(lambda: ([i] for i in range(4)))  # no len(): written all the same
    assert PicPacSerializer.save(unknown, tmp_path / "gen.picpac") == 4
    assert list(PicPacSerializer.load(tmp_path / "gen.picpac", shuffle=False)) == [[0], [1], [2], [3]]


def test_a_flow_without_len_is_written_all_the_same(tmp_path):
    assert NumpySerializer.save(DuckFlow(), tmp_path / "duck.npz") == 2
    assert list(NumpySerializer.load(tmp_path / "duck.npz", shuffle=False, unpickle=True)) == [[7], [8]]


# -- picpac ---------------------------------------------------------------------------------------------------
def test_whole_datapoints_come_back_as_they_were_in_the_format_recorded(tmp_path):
    dps = [[{"a": None, "b": [1, (2, 3)]}, np.float16(1.5), b"raw"], [{"a": 1}, np.float16(2), b""]]
    path = tmp_path / "whole.picpac"
    assert PicPacSerializer.save(DataFromList(dps, shuffle=False), path, format="pickle5") == 2
    with picpac.Reader(path) as r:
        assert r.metadata["dataflow"] == {"fields": None, "format": "pickle5"} and r.fields == ["datapoint"]
        assert bytes(r[0]["datapoint"][:14]) == b"PPDF\x01\x00\x07pickle5"
    with pytest.raises(WireFormatError, match=r"unpickling runs code, so it is refused unless asked for"):
        list(PicPacSerializer.load(path, shuffle=False))
    back = list(PicPacSerializer.load(path, shuffle=False, unpickle=True))
    assert back == dps and type(back[0][1]) is np.float16
    with pytest.raises(PicPacTypeError, match=r"component 0 is a dict: use format='pickle5'"):
        PicPacSerializer.save(DataFromList(dps, shuffle=False), tmp_path / "default.picpac")
    arrays = tmp_path / "arrays.picpac"
    PicPacSerializer.save(numbers(3), arrays)  # the default format: arrays
    with picpac.Reader(arrays) as r:
        assert r.metadata["dataflow"]["format"] == "arrays" and bytes(r[2]["datapoint"][:13]) == b"PPDF\x01\x00\x06arrays"
    loaded = PicPacSerializer.load(arrays, seed=3)  # shuffle=True by default, in the order of its seed
    loaded.reset_state()
    assert [dp[0] for dp in loaded] == make_rng(3).permutation(3).tolist()


def test_fields_go_to_the_index_and_the_metadata(tmp_path):
    dps = [[np.full((2, 3), i, np.int16), 0.5 * i, i % 2, "note %d" % i, b"\x00%c" % i] for i in range(3)]
    path = tmp_path / "fields.picpac"
    assert PicPacSerializer.save(DataFromList(dps, shuffle=False), path,
                                 fields=["image", "label", "group", "note", "blob"]) == 3
    with picpac.Reader(path) as r:
        assert r.labels.tolist() == [0.0, 0.5, 1.0] and r.groups.tolist() == [0, 1, 0]
        assert r.metadata["arrays"] == {"image": {"shape": [2, 3], "dtype": "int16"}}
        assert r.metadata["dataflow"] == {"fields": ["image", "label", "group", "note", "blob"], "format": "arrays"}
    back = list(PicPacData(path, shuffle=False))
    assert [dp[1:] for dp in back] == [[0.0, 0, b"note 0", b"\x00\x00"], [0.5, 1, b"note 1", b"\x00\x01"],
                                       [1.0, 0, b"note 2", b"\x00\x02"]]  # a str is stored as its UTF-8 bytes
    assert all(np.array_equal(dp[0], src[0]) and dp[0].dtype == np.int16 for dp, src in zip(back, dps))


def test_the_picpac_serializer_refuses_what_it_cannot_store_and_leaves_no_file(tmp_path):
    path = tmp_path / "bad.picpac"
    ds = DataFromList([[np.arange(3), 1.0]], shuffle=False)
    for fields in (["a", "a"], ["a", ""], ["a", 3]):
        with pytest.raises(PicPacValueError, match=r"^fields must be distinct non-empty names, got \["):
            PicPacSerializer.save(ds, path, fields=fields)
    with pytest.raises(PicPacValueError, match=r"^the datapoints have 2 components, fields names 3$"):
        PicPacSerializer.save(ds, path, fields=["a", "label", "b"])
    for name in ("index", "meta"):
        with pytest.raises(PicPacValueError, match=rf"^'{name}' is read from the index; it cannot be written as a "
                                                   r"field$"):
            PicPacSerializer.save(ds, path, fields=["a", name])
    uneven = DataFromList([[np.arange(3), 1.0], [np.arange(3)]], shuffle=False)
    with pytest.raises(PicPacValueError, match=r"^a datapoint has 1 components, fields names 2$"):
        PicPacSerializer.save(uneven, path, fields=["a", "label"])
    other_shape = DataFromList([[np.arange(3)], [np.arange(4)]], shuffle=False)
    with pytest.raises(PicPacValueError, match=r"field 'a': got a int64 array of shape \(4,\); the metadata 'arrays' "
                                               r"declares int64 arrays of shape \(3,\)"):
        PicPacSerializer.save(other_shape, path, fields=["a"])
    assert not path.exists() and list(tmp_path.iterdir()) == []  # nothing half-written was left
    PicPacSerializer.save(numbers(2), path)
    with pytest.raises(picpac.PathExistsError, match="already exists; to replace it pass overwrite=True"):
        PicPacSerializer.save(numbers(3), path)
    assert PicPacSerializer.save(numbers(3), path, overwrite=True) == 3
    assert list(PicPacSerializer.load(path, shuffle=False)) == [[0], [1], [2]]


@pytest.mark.parametrize("fields", [None, ["x"]])
def test_an_empty_flow_saved_to_picpac_loads_as_an_empty_flow(tmp_path, fields):
    path = tmp_path / "empty.picpac"
    assert PicPacSerializer.save(numbers(0), path, fields=fields) == 0
    loaded = PicPacSerializer.load(path, shuffle=False)
    assert len(loaded) == 0 and list(loaded) == []


# -- TFRecord -------------------------------------------------------------------------------------------------
def test_tfrecord_damage_is_named_by_record(tmp_path):
    path = tmp_path / "x.tfrecord"
    TFRecordSerializer.save(numbers(2), path)
    raw = path.read_bytes()
    size = struct.unpack_from("<Q", raw)[0]
    first = 16 + size
    cases = {"a head cut short": (raw[:first + 5], r"record 1 is truncated"),
             "data cut short": (raw[:first + 12 + 3], r"record 1 is truncated"),
             "a damaged length": (raw[:first] + bytes([raw[first] ^ 1]) + raw[first + 1:],
                                  r"record 1 has a damaged length \(not a TFRecord file\?\)")}
    for name, (data, message) in cases.items():
        path.write_bytes(data)
        with pytest.raises(CorruptError, match=rf"^{path}: {message}"):
            list(TFRecordSerializer.load(path))
    damaged = bytearray(raw)
    damaged[12 + 20] ^= 0xFF  # inside record 0's data
    path.write_bytes(bytes(damaged))
    assert [len(r) for r in read_tfrecords(str(path), check=False)] == [size, size]  # the CRC not checked
    with pytest.raises(CorruptError, match="record 0 fails its CRC32C"):
        next(read_tfrecords(str(path)))


def test_a_file_that_is_no_tfrecord_is_a_corrupt_error_naming_it(tmp_path):
    path = tmp_path / "photo.tfrecord"
    path.write_bytes(b"PNG and other things")
    with pytest.raises(CorruptError, match=rf"^{path}: record 0 has a damaged length"):
        [dp for dp in TFRecordSerializer.load(path)]  # iterating alone: right
    with pytest.raises(CorruptError, match=rf"^{path}: record 0 has a damaged length"):
        list(TFRecordSerializer.load(path))
    with pytest.raises(CorruptError, match=rf"^{path}: record 0 has a damaged length"):
        len(TFRecordSerializer.load(path))
    huge = struct.pack("<Q", 2**64 - 1)  # a head whose CRC holds but whose length no file has
    path.write_bytes(huge + struct.pack("<I", masked_crc32c(huge)) + b"data")
    for read in (len, list):
        with pytest.raises(CorruptError, match=rf"^{path}: record 0 is truncated$"):
            read(TFRecordSerializer.load(path))


def test_tfrecord_data_counts_its_records_or_takes_a_size(tmp_path):
    path = tmp_path / "n.tfrecord"
    assert TFRecordSerializer.save(numbers(5), path, format="arrays") == 5
    assert len(TFRecordSerializer.load(path)) == 5 and len(TFRecordSerializer.load(path, size=2)) == 2
    assert [dp[0] for dp in TFRecordSerializer.load(path)] == [0, 1, 2, 3, 4]
    assert [codec.read_head(codec.unpack(r)[0])[1] for r in read_tfrecords(str(path))] == ["arrays"] * 5
    with pytest.raises(picpac.MissingPathError, match=rf"^{tmp_path / 'none.tfrecord'}: no such file$"):
        TFRecordSerializer.load(tmp_path / "none.tfrecord")


TF_READS_AND_WRITES = """
import json, sys
import tensorflow as tf
ours, theirs = sys.argv[1:3]
records = [r.numpy().hex() for r in tf.data.TFRecordDataset(ours)]
with tf.io.TFRecordWriter(theirs) as w:
    for value in json.loads(sys.argv[3]):
        w.write(bytes.fromhex(value))
print(json.dumps(records))
"""


@pytest.mark.skipif(find_spec("tensorflow") is None, reason="needs tensorflow")
def test_tensorflow_reads_the_file_and_picpac_reads_tensorflows(tmp_path):
    """In a process of its own: TensorFlow's threads would make later forks in this one unsafe."""
    ours, theirs = tmp_path / "ours.tfrecord", tmp_path / "theirs.tfrecord"
    TFRecordSerializer.save(DataFromList([[np.arange(4), "a"], [np.eye(2), "b"]], shuffle=False), ours)
    values = [codec.dumps([i, np.full(3, i)], "arrays").hex() for i in range(3)]
    out = subprocess.run([sys.executable, "-c", TF_READS_AND_WRITES, str(ours), str(theirs), json.dumps(values)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [r.hex() for r in read_tfrecords(str(ours))]
    back = list(TFRecordSerializer.load(theirs))
    assert [dp[0] for dp in back] == [0, 1, 2] and [dp[1].tolist() for dp in back] == [[i] * 3 for i in range(3)]


# -- NumPy, HDF5, LMDB ----------------------------------------------------------------------------------------
def test_numpy_serializer_keeps_datapoints_and_shuffles_by_seed(tmp_path):
    dps = [[np.arange(i + 1), {"i": i}] for i in range(5)]
    path = tmp_path / "dps.npz"
    assert NumpySerializer.save(DataFromList(dps, shuffle=False), path) == 5
    with pytest.raises(WireFormatError, match=r"dps.npz: NumpySerializer stores its datapoints pickled .* "
                                              r"NumpySerializer.load\(path, unpickle=True\)"):
        NumpySerializer.load(path, shuffle=False)
    in_order = ready(NumpySerializer.load(path, shuffle=False, unpickle=True))
    assert all(type(dp) is list and np.array_equal(dp[0], src[0]) and dp[1] == src[1]
               for dp, src in zip(in_order, dps))
    shuffled = ready(NumpySerializer.load(path, seed=8, unpickle=True))
    assert [dp[1]["i"] for dp in shuffled] == make_rng(8).permutation(5).tolist()


def test_hdf5_serializer_stacks_each_component_into_its_dataset(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "d.h5"
    ds = DataFromList([[np.full((2, 2), i, np.float32), i] for i in range(3)], shuffle=False)
    assert HDF5Serializer.save(ds, path, ["img", "label"]) == 3
    with h5py.File(path, "r") as f:
        assert f["img"].shape == (3, 2, 2) and f["img"].dtype == np.float32 and f["label"][:].tolist() == [0, 1, 2]
    with pytest.raises(PicPacValueError, match=r"^a datapoint has 2 components, data_paths names 1$"):
        HDF5Serializer.save(ds, tmp_path / "e.h5", ["img"])


def test_lmdb_serializer_writes_tensorpacks_keys_across_commits(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    folder = tmp_path / "db"
    folder.mkdir()
    assert LMDBSerializer.save(numbers(5), folder, write_frequency=2) == 5  # a folder: data.mdb inside it
    env = lmdb.open(str(folder), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k for k, _ in txn.cursor()]
        listed = codec.loads(txn.get(b"__keys__"))
    env.close()
    assert keys == [b"00000000", b"00000001", b"00000002", b"00000003", b"00000004", b"__keys__"]
    assert len(listed) == 1 and listed[0].tolist() == keys[:5]  # one bytes array: no pickle
    assert list(ready(LMDBSerializer.load(folder, shuffle=False))) == [[i] for i in range(5)]
    with pytest.raises(PicPacValueError, match=rf"^{folder}: an LMDB database is already there; remove it or choose "
                                               r"another path$"):
        LMDBSerializer.save(numbers(1), folder)
