"""picpac.dataflow's stored formats as format.py reads them (LMDB, Caffe LMDB, svmlight, picpac, tensorpack's
values); the serializers that write them are tested in test_serialize.py, the image flows in test_image_flows.py."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

import picpac
from picpac.dataflow import (CaffeLMDB, DataFromList, ImageFromFile, LMDBData, LMDBSerializer, PicPacData, SVMLightData,
                             TFRecordSerializer, WireFormatError, codec)
from picpac.dataflow.serialize import write_tfrecord

from dataflow_helpers import RunsCode, write_png


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


def test_crafted_files_run_no_code_unless_asked_to(tmp_path):
    """picpac's own pickle5 head over a payload that runs code: in an LMDB's values and its __keys__ entry, a picpac
    database's whole datapoints and a TFRecord file, nothing runs until the reader is given unpickle=True."""
    lmdb = pytest.importorskip("lmdb")
    marker = tmp_path / "marker"
    crafted = codec.pack(codec.encode(RunsCode(marker), "pickle5"))
    env = lmdb.open(str(tmp_path / "crafted.lmdb"), subdir=False, map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"00000000", crafted)
        txn.put(b"__keys__", crafted)
    env.close()
    keys = LMDBData(str(tmp_path / "crafted.lmdb"), shuffle=True)  # its keys are scanned instead
    assert keys.keys == [b"00000000"] and not marker.exists()
    flow = LMDBSerializer.load(str(tmp_path / "crafted.lmdb"), shuffle=False)
    flow.reset_state()
    with pytest.raises(WireFormatError, match="unpickle=True"):
        next(iter(flow))
    with picpac.Writer(tmp_path / "crafted.picpac", metadata={"dataflow": {"fields": None, "format": "pickle5"}}) as w:
        w.append({"datapoint": crafted})
    with pytest.raises(WireFormatError, match="unpickle=True"):
        list(PicPacData(tmp_path / "crafted.picpac", shuffle=False))
    with open(tmp_path / "crafted.tfrecord", "wb") as f:
        write_tfrecord(f, crafted)
    with pytest.raises(WireFormatError, match="unpickle=True"):
        list(TFRecordSerializer.load(tmp_path / "crafted.tfrecord"))
    assert not marker.exists()
    flow = LMDBSerializer.load(str(tmp_path / "crafted.lmdb"), shuffle=False, unpickle=True)
    flow.reset_state()
    next(iter(flow))  # the opt-in does unpickle: the refusals above are not vacuous
    assert marker.exists()
