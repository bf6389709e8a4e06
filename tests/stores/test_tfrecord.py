"""TFRecord (picpac/stores/tfrecord.py): a file written by hand reads back; CRC32C damage and damaged
features are named."""
from __future__ import annotations

import re
import struct

import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError

from helpers import payload
from store_helpers import crc32c_bitwise, store_path


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


def write_examples(path, *examples: dict) -> str:
    path.write_bytes(b"".join(stores.tfrecord_frame(stores.encode_example(e)) for e in examples))
    return str(path)


@pytest.mark.parametrize("examples, message", [
    ([{"picpac/dataset": ("int64", [2**62])}], "damaged picpac/dataset feature (a int64 list of 1 values, not one "
                                               "bytes value)"),
    ([{"picpac/dataset": ("bytes", [b"{", b"}"])}], "damaged picpac/dataset feature (a bytes list of 2 values"),
    ([{"picpac/dataset": ("bytes", [b"[" * 100_000])}], "damaged picpac/dataset feature (nested too deeply)"),
    ([{"picpac/dataset": ("bytes", [b'{"classes": "ab"}'])}], "the dataset metadata's 'classes' is not a list"),
])
def test_a_damaged_dataset_feature_is_a_corrupt_error(tmp_path, examples, message):
    path = write_examples(tmp_path / "x.tfrecord", *examples)
    with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
        stores.open_reader(path, "tfrecord")


@pytest.mark.parametrize("features, message", [
    ({"picpac/label": ("bytes", [b"\0" * 7])}, "record 0 has a picpac/label of 7 bytes, not a double's 8"),
    ({"picpac/meta": ("bytes", [b"[1]"]), "score": ("float", [0.5])}, "record 0 has a picpac/meta that is not a "
                                                                       "JSON object"),
    ({"picpac/meta": ("bytes", [b"[" * 100_000]), "score": ("float", [0.5])},
     "record 0 has a picpac/meta that is not valid JSON (nested too deeply)"),
    ({"picpac/group": ("int64", [-(2**63)])}, "record 0 has group -9223372036854775808, not an int64 above"),
])
def test_damaged_features_name_the_record(tmp_path, features, message):
    path = write_examples(tmp_path / "x.tfrecord", {"image": ("bytes", [b"abc"]), **features},
                          {"image": ("bytes", [b"def"])})
    with stores.open_reader(path, "tfrecord") as r:
        assert bytes(r[1]["image"]) == b"def"
        with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
            r[0]
    with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
        stores.import_store(path, tmp_path / "db", "tfrecord")


def imagenet_layout(path, count: int = 6) -> tuple[str, list[bytes]]:
    """A TFRecord file in TensorFlow's ImageNet layout, written by TensorFlow itself: image/encoded (the JPEG),
    image/class/label (int64), image/format and image/height."""
    tf = pytest.importorskip("tensorflow")
    from helpers import SHARED_DATA, smooth_jpeg
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:count]
    jpegs = [f.read_bytes() for f in files] or [smooth_jpeg(40 + i, 30, i) for i in range(count)]
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, data in enumerate(jpegs):
            feature = {"image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[30])),
                       "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                       "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                       "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[100 + i]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path), jpegs


def test_tensorflows_imagenet_layout_imports_with_its_labels_in_the_label_column(tmp_path):
    import picpac
    src, jpegs = imagenet_layout(tmp_path / "train.tfrecord")
    db = tmp_path / "train.picpac"
    stores.import_store(src, db, "tfrecord", image_feature="image/encoded", label_feature="image/class/label")
    with picpac.Reader(db) as r:
        assert r.labels.tolist() == [100.0 + i for i in range(len(jpegs))]
        assert list(r[0].fields) == ["image", "image/format"]
        assert [bytes(r[i].fields["image"]) for i in range(len(r))] == jpegs
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=2, resize_width=16, resize_height=16) as s:
        assert [int(x) for batch in s for x in batch[1]] == [100 + i for i in range(len(jpegs))]
    plain = tmp_path / "plain.picpac"  # without the options: the label stays a meta list, as before
    stores.import_store(src, plain, "tfrecord")
    with picpac.Reader(plain) as r:
        assert r.labels.tolist() == [0.0] * len(jpegs) and "image/encoded" in r[0].fields


def test_a_feature_a_record_lacks_or_cannot_be_is_named(tmp_path):
    from picpac.errors import PicPacValueError, SourceError
    src, _ = imagenet_layout(tmp_path / "train.tfrecord", count=2)
    for options, message in (({"label_feature": "label"}, r"record 0 has no feature 'label' \(--label-feature\); "
                                                          r"its features: \['image/class/label', "),
                             ({"image_feature": "image/height"}, r"record 0's feature 'image/height' "
                                                                 r"\(--image-feature\) is a int64 list"),
                             ({"label_feature": "image/format"}, r"'image/format' \(--label-feature\) is a bytes")):
        with pytest.raises(SourceError, match=message):
            stores.import_store(src, tmp_path / "x.picpac", "tfrecord", **options)
        assert not (tmp_path / "x.picpac").exists()
    with pytest.raises(PicPacValueError, match="label_feature name features of a TFRecord file, not of a npz"):
        stores.import_store(src, tmp_path / "y.picpac", "npz", label_feature="label")


def test_the_feature_options_go_with_from_tfrecord(tmp_path):
    from helpers import run_console
    src, _ = imagenet_layout(tmp_path / "train.tfrecord", count=2)
    out = run_console("picpac", "import", "--from", "tfrecord", src, str(tmp_path / "a.picpac"), "--image-feature",
                      "image/encoded", "--label-feature", "image/class/label", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("imported 2 records from tfrecord")
    bad = run_console("picpac", "import", str(tmp_path), str(tmp_path / "b.picpac"), "--label-feature", "x",
                      cwd=tmp_path)
    assert bad.returncode == 2
    assert "--image-feature and --label-feature name the features of a TFRecord file" in bad.stderr
