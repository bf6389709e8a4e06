"""``tf.train.Example``, encoded and decoded by hand (protobuf wire format), without TensorFlow."""
from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import PicPacValueError


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: Mapping[str, tuple[str, list]]) -> bytes:
    """A ``tf.train.Example`` from ``{name: (kind, values)}``, kind ``"bytes"``, ``"float"`` or ``"int64"``;
    float and int64 lists are packed, as TensorFlow writes them."""
    entries = []
    for name, (kind, values) in features.items():
        if kind == "bytes":
            body = _delimited(1, b"".join(_delimited(1, bytes(v)) for v in values))
        elif kind == "float":
            body = _delimited(2, _delimited(1, struct.pack(f"<{len(values)}f", *values)) if values else b"")
        elif kind == "int64":
            body = _delimited(3, _delimited(1, b"".join(map(_varint, values))) if values else b"")
        else:
            raise PicPacValueError(f"feature {name!r}: kind must be bytes, float or int64, got {kind!r}")
        entries.append(_delimited(1, _delimited(1, name.encode()) + _delimited(2, body)))
    return _delimited(1, b"".join(entries))


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint at ``pos``: its value and the position after it."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields_of(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: varints as int, length-delimited as views,
    fixed32/64 as views of 4/8 bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > end:
                raise ValueError("a length-delimited field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ValueError("a fixed-size field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} is not used by tf.train.Example")
        yield number, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_example(data: Any) -> dict[str, tuple[str, list]]:
    """``{name: (kind, values)}`` of a serialised ``tf.train.Example`` (bytes values as zero-copy views).

    Accepts packed and unpacked numeric lists and skips unknown fields, as protobuf parsers do.
    Raises ValueError on a malformed message."""
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
    try:
        return _decode_example(buf)
    except (IndexError, struct.error) as exc:
        raise ValueError(f"truncated message ({exc})") from None


def _decode_example(buf: memoryview) -> dict[str, tuple[str, list]]:
    features: dict[str, tuple[str, list]] = {}
    for number, wire, message in _fields_of(buf):
        if number != 1 or wire != 2:
            continue  # Example: only field 1 (features)
        for n1, w1, entry in _fields_of(message):
            if n1 != 1 or w1 != 2:
                continue  # Features: field 1 is the map<string, Feature>
            name, feature = "", None
            for n2, w2, value in _fields_of(entry):
                if n2 == 1 and w2 == 2:
                    name = bytes(value).decode()
                elif n2 == 2 and w2 == 2:
                    feature = value
            kind, values = "bytes", []
            for n3, w3, lst in _fields_of(feature if feature is not None else memoryview(b"")):
                if w3 != 2 or n3 not in (1, 2, 3):
                    continue
                kind, values = {1: "bytes", 2: "float", 3: "int64"}[n3], []  # oneof: the last one counts
                for n4, w4, value in _fields_of(lst):
                    if n4 != 1:
                        continue
                    if kind == "bytes" and w4 == 2:
                        values.append(value)
                    elif kind == "float" and w4 == 2:
                        values.extend(struct.unpack(f"<{len(value) // 4}f", value))
                    elif kind == "float" and w4 == 5:
                        values.append(struct.unpack("<f", value)[0])
                    elif kind == "int64" and w4 == 2:
                        pos = 0
                        while pos < len(value):
                            v, pos = read_varint(value, pos)
                            values.append(_signed64(v))
                    elif kind == "int64" and w4 == 0:
                        values.append(_signed64(value))
            features[name] = (kind, values)
    return features
