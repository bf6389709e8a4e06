"""TFRecord (picpac/stores/tfrecord.py): a file written by hand reads back, CRC32C damage is named."""
from __future__ import annotations

import struct

import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError

from conftest import payload
from store_helpers import crc32c_bitwise, db, store_path  # noqa: F401 (db: a fixture)


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


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
