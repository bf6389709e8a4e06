"""picpac.dataflow's stored formats (picpac, LMDB, TFRecord, NumPy, HDF5, Caffe LMDB, svmlight); the image flows'
own tests are in test_image_flows.py."""
from __future__ import annotations

import struct
import sys

import cv2
import numpy as np
import pytest

import picpac
from picpac.dataflow import (CaffeLMDB, DataFlow, DataFromList, HDF5Serializer, ImageFromFile, LMDBData,
                             LMDBDataDecoder, LMDBSerializer, MissingDependencyError, NumpySerializer, PicPacData,
                             PicPacSerializer, SVMLightData, TFRecordSerializer)
from picpac.dataflow.serialize import crc32c
from picpac.errors import CorruptError, PicPacTypeError, PicPacValueError

from dataflow_helpers import write_png


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
             "numpy": (NumpySerializer, "test.npz", [], [], {"shuffle": False}),
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


def test_caffe_lmdb_and_svmlight(tmp_path):
    lmdb = pytest.importorskip("lmdb")

    def varint(v):
        out = b""
        while v >= 0x80:
            out += bytes([v & 0x7F | 0x80])
            v >>= 7
        return out + bytes([v])

    def datum(c, h, w, pixels, label):
        return (b"\x08" + varint(c) + b"\x10" + varint(h) + b"\x18" + varint(w) + b"\x22" + varint(len(pixels))
                + pixels + b"\x28" + varint(label))
    env = lmdb.open(str(tmp_path / "caffe"), map_size=1 << 24)
    chw = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    with env.begin(write=True) as txn:
        txn.put(b"0", datum(2, 3, 4, chw.tobytes(), 7))
        txn.put(b"1", b"\xff\xff not a datum")
    env.close()
    ds = CaffeLMDB(str(tmp_path / "caffe"), shuffle=False)
    ds.reset_state()
    (img, label), = list(ds)
    assert label == 7 and np.array_equal(img, chw.transpose(1, 2, 0))
    svm = tmp_path / "data.svm"
    svm.write_text("1 1:0.5 3:2\n-1 2:1.5 # comment\n\n0 qid:3 1:1\n")
    s = SVMLightData(str(svm), shuffle=False)
    assert len(s) == 3
    rows = list(s)
    assert rows[0][0].tolist() == [0.5, 0, 2] and rows[1][0].tolist() == [0, 1.5, 0] and [r[1] for r in rows] == [1, -1, 0]


def test_a_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'picpac\[formats\]'") as info:
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path / "x.lmdb"))
    assert isinstance(info.value, ImportError)  # tensorpack's test skips on ImportError: that still works
    with pytest.raises(ImportError, match="h5py"):
        HDF5Serializer.save(DataFromList([[1]]), str(tmp_path / "x.h5"), ["a"])


def test_lmdb_flows_share_an_environment_and_forked_workers_open_their_own(tmp_path):
    pytest.importorskip("lmdb")
    from picpac.dataflow import MultiProcessRunner
    path = str(tmp_path / "shared.lmdb")
    LMDBSerializer.save(DataFromList([[i] for i in range(6)], shuffle=False), path)
    here = LMDBSerializer.load(path, shuffle=False)
    here.reset_state()
    also = LMDBSerializer.load(path, shuffle=True, seed=0)
    also.reset_state()  # LMDB alone would refuse a second open in one process
    assert list(here) == [[i] for i in range(6)] and sorted(also) == [[i] for i in range(6)]
    with MultiProcessRunner(LMDBSerializer.load(path, shuffle=False), num_prefetch=3, num_proc=1) as r:
        r.reset_state()  # the forked worker inherits this process's open environment, and opens its own
        assert list(r) == [[i] for i in range(6)]
    here.close()
    also.close()


def test_tensorpack_made_lmdb_reads_with_msgpack(tmp_path):
    """A database as tensorpack's LMDBSerializer writes it: msgpack values, msgpack-numpy arrays."""
    lmdb = pytest.importorskip("lmdb")
    msgpack = pytest.importorskip("msgpack")

    def encode(obj):
        if isinstance(obj, np.ndarray):
            return {b"nd": True, b"type": obj.dtype.str, b"kind": b"", b"shape": obj.shape, b"data": obj.tobytes()}
        raise TypeError(type(obj))
    env = lmdb.open(str(tmp_path / "tp.lmdb"), subdir=False, map_size=1 << 24)
    keys = [f"{i:08}".encode() for i in range(3)]
    with env.begin(write=True) as txn:
        for i, key in enumerate(keys):
            txn.put(key, msgpack.dumps([np.full((2, 2), i, np.float32), i], use_bin_type=True, default=encode))
        txn.put(b"__keys__", msgpack.dumps(keys, use_bin_type=True))
    env.close()
    ds = LMDBSerializer.load(str(tmp_path / "tp.lmdb"), shuffle=True, seed=0)
    ds.reset_state()
    got = sorted(ds, key=lambda dp: dp[1])
    assert len(ds) == 3 and [dp[1] for dp in got] == [0, 1, 2] and got[2][0].tolist() == [[2, 2], [2, 2]]


def test_decoding_flows_refuse_a_bomb(tmp_path):
    from helpers import jpeg_bomb

    bomb = tmp_path / "bomb.jpg"
    bomb.write_bytes(jpeg_bomb())
    with pytest.raises(picpac.ImageTooLargeError, match=r"bomb.jpg: image of 65500x65500 .*max_pixels=268435456"):
        list(ImageFromFile([str(bomb)]))
    small = write_png(tmp_path / "small.png", np.zeros((6, 8, 3), np.uint8))
    with pytest.raises(picpac.ImageTooLargeError, match="small.png: image of 8x6"):
        list(ImageFromFile([small], max_pixels=47))
    assert list(ImageFromFile([small], max_pixels=0))[0][0].shape == (6, 8, 3)
    with picpac.Writer(tmp_path / "db.picpac") as w:
        w.append(image=cv2.imencode(".png", np.zeros((6, 8, 3), np.uint8))[1].tobytes(), label=0.0)
        w.append(image=jpeg_bomb(), label=1.0)
    ds = PicPacData(tmp_path / "db.picpac", shuffle=False)
    with pytest.raises(picpac.SampleError, match=r"db.picpac: record 1 has an image of 65500x65500"):
        list(ds)
    assert len(list(PicPacData(tmp_path / "db.picpac", shuffle=False, decode=False))) == 2

    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(tmp_path / "caffe"), map_size=1 << 24)
    with env.begin(write=True) as txn:  # an encoded caffe.Datum: data (4), label (5), encoded (7)
        n = len(jpeg_bomb())  # 128 <= n < 16384: a two-byte varint
        txn.put(b"k", b"\x22" + bytes([n & 0x7F | 0x80, n >> 7]) + jpeg_bomb() + b"\x28\x01\x38\x01")
    env.close()
    caffe = CaffeLMDB(str(tmp_path / "caffe"), shuffle=False)
    caffe.reset_state()
    with pytest.raises(picpac.ImageTooLargeError, match=r"caffe: key b'k': image of 65500x65500"):
        list(caffe)
