"""picpac.stores.example: tf.train.Example by hand, against protobuf's own encoder and parser (the Example schema
built from its descriptor: no TensorFlow imported), packed and unpacked lists, unknown fields, and malformed
messages."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from picpac.errors import PicPacValueError
from picpac.stores.example import decode_example, encode_example, read_varint

protobuf = pytest.importorskip("google.protobuf", reason="protobuf (TensorFlow's dependency) is the reference here")
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

FIELD = descriptor_pb2.FieldDescriptorProto


def example_class(syntax: str):
    """tensorflow/core/example/{example,feature}.proto's messages; proto3 packs numeric lists, proto2 (without
    ``[packed=true]``) writes one field per value, as old writers did."""
    package = f"reference_{syntax}"
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax=syntax)
    for name, kind in (("BytesList", FIELD.TYPE_BYTES), ("FloatList", FIELD.TYPE_FLOAT),
                       ("Int64List", FIELD.TYPE_INT64)):
        file.message_type.add(name=name).field.add(name="value", number=1, type=kind, label=FIELD.LABEL_REPEATED)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, kind) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                           ("int64_list", "Int64List")), 1):
        feature.field.add(name=name, number=number, type=FIELD.TYPE_MESSAGE, type_name=f".{package}.{kind}",
                          label=FIELD.LABEL_OPTIONAL, oneof_index=0)
    features = file.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=FIELD.TYPE_MESSAGE, type_name=f".{package}.Feature",
                    label=FIELD.LABEL_OPTIONAL)
    features.field.add(name="feature", number=1, type=FIELD.TYPE_MESSAGE, type_name=f".{package}.Features.FeatureEntry",
                       label=FIELD.LABEL_REPEATED)
    file.message_type.add(name="Example").field.add(name="features", number=1, type=FIELD.TYPE_MESSAGE,
                                                   type_name=f".{package}.Features", label=FIELD.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Example"))


Example, UnpackedExample = example_class("proto3"), example_class("proto2")
KIND_FIELD = {"bytes": "bytes_list", "float": "float_list", "int64": "int64_list"}
FEATURES = {
    "image": ("bytes", [b"\xff\xd8 jpeg", b"", bytes(range(256)) * 3]),
    "label": ("int64", [0, 1, -1, 127, 128, 300, 2**63 - 1, -(2**63)]),
    "score": ("float", [0.5, -2.25, 2.0**100, float("inf")]),  # float32-exact
    "empty_floats": ("float", []),
    "empty_ints": ("int64", []),
    "name/with/slashes": ("bytes", ["ünïcode".encode()]),
}


def reference(features: dict, cls=Example):
    message = cls()
    for name, (kind, values) in features.items():
        getattr(message.features.feature[name], KIND_FIELD[kind]).SetInParent()
        getattr(message.features.feature[name], KIND_FIELD[kind]).value.extend(values)
    return message


def as_features(message) -> dict:
    out = {}
    for name, feature in message.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = ({v: k for k, v in KIND_FIELD.items()}[kind], list(getattr(feature, kind).value)) if kind \
            else ("bytes", [])
    return out


def plain(decoded: dict) -> dict:
    return {name: (kind, [bytes(v) if kind == "bytes" else v for v in values])
            for name, (kind, values) in decoded.items()}


def test_encode_example_writes_protobufs_bytes():
    ours = encode_example(dict(sorted(FEATURES.items())))  # protobuf's deterministic order: by key
    assert ours == reference(FEATURES).SerializeToString(deterministic=True)


def test_protobuf_parses_what_encode_example_writes():
    assert as_features(Example.FromString(encode_example(FEATURES))) == FEATURES


@pytest.mark.parametrize("cls", [Example, UnpackedExample], ids=["packed", "unpacked"])
def test_decode_example_reads_protobufs_bytes(cls):
    data = reference(FEATURES, cls).SerializeToString()
    assert plain(decode_example(data)) == FEATURES


def test_unpacked_lists_are_one_field_per_value():
    data = reference({"x": ("int64", [5, 6])}, UnpackedExample).SerializeToString()
    assert b"\x08\x05\x08\x06" in data  # field 1, varint, twice: not packed
    assert decode_example(data) == {"x": ("int64", [5, 6])}


def test_floats_are_float32():
    (value,) = decode_example(encode_example({"f": ("float", [0.1])}))["f"][1]
    assert value == float(np.float32(0.1)) != 0.1


def test_bytes_values_are_views_into_the_data():
    data = bytearray(encode_example({"image": ("bytes", [b"abcdef"])}))
    (view,) = decode_example(data)["image"][1]
    assert isinstance(view, memoryview) and bytes(view) == b"abcdef"
    data[data.index(b"abcdef")] = ord("X")
    assert bytes(view) == b"Xbcdef"


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, lambda d: np.frombuffer(d, np.uint8),
                                  lambda d: memoryview(np.frombuffer(d, np.uint8))],
                         ids=["bytes", "bytearray", "memoryview", "ndarray", "ndarray-view"])
def test_decode_example_takes_any_bytes_like(wrap):
    data = encode_example({"label": ("int64", [7])})
    assert decode_example(wrap(data)) == {"label": ("int64", [7])}


def test_unknown_fields_are_skipped_and_the_last_kind_and_name_count():
    first = reference({"a": ("int64", [1]), "b": ("bytes", [b"x"])}).SerializeToString()
    second = reference({"a": ("float", [2.0])}).SerializeToString()
    data = b"\x10\x01" + first + b"\x1a\x03abc" + second + b"\x25" + struct.pack("<f", 1.0)  # fields 2, 3, 4 unknown
    merged = Example.FromString(data)  # protobuf merges the concatenation: a later entry replaces the key
    assert plain(decode_example(data)) == as_features(merged) == {"a": ("float", [2.0]), "b": ("bytes", [b"x"])}


def delimited(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_a_feature_of_two_kinds_is_its_last_one_as_protobufs_oneof():
    feature = delimited(3, delimited(1, b"\x07")) + delimited(2, delimited(1, struct.pack("<f", 1.5)))
    data = delimited(1, delimited(1, delimited(1, b"a") + delimited(2, feature)))
    assert decode_example(data) == as_features(Example.FromString(data)) == {"a": ("float", [1.5])}


def test_a_feature_without_a_kind_is_an_empty_bytes_list():
    message = Example()
    message.features.feature["none"].SetInParent()
    assert decode_example(message.SerializeToString()) == {"none": ("bytes", [])} == as_features(message)


def test_encode_example_refuses_an_unknown_kind_naming_the_feature():
    with pytest.raises(PicPacValueError, match=r"^feature 'x': kind must be bytes, float or int64, got 'double'$"):
        encode_example({"x": ("double", [1.0])})


@pytest.mark.parametrize("data", [b"\x0a\x05abc", b"\x0a\x80", b"\x0a\x02\x0a\x05"], ids=["short", "cut-varint",
                                                                                          "inner-short"])
def test_truncated_messages_are_value_errors(data):
    with pytest.raises(ValueError, match="truncated message|runs past the end"):
        decode_example(data)


def test_a_fixed_field_past_the_end_is_a_value_error():
    with pytest.raises(ValueError, match="^a fixed-size field runs past the end$"):
        decode_example(b"\x0d\x00\x00")


@pytest.mark.parametrize("wire", [3, 4, 6, 7])
def test_group_and_unknown_wire_types_are_value_errors(wire):
    with pytest.raises(ValueError, match=f"^wire type {wire} is not used by tf.train.Example$"):
        decode_example(bytes([1 << 3 | wire]))


def test_read_varint_values_and_positions():
    buf = memoryview(b"\x00\x7f\x80\x01\xac\x02" + b"\xff" * 9 + b"\x01")
    assert read_varint(buf, 0) == (0, 1)
    assert read_varint(buf, 1) == (127, 2)
    assert read_varint(buf, 2) == (128, 4)
    assert read_varint(buf, 4) == (300, 6)
    assert read_varint(buf, 6) == (2**64 - 1, 16)


def test_read_varint_refuses_more_than_ten_bytes():
    with pytest.raises(ValueError, match="^varint longer than 10 bytes$"):
        read_varint(memoryview(b"\x80" * 10 + b"\x01"), 0)  # an 11th byte
    with pytest.raises(ValueError, match="varint longer than 10 bytes"):
        decode_example(b"\x08" + b"\x80" * 11)
