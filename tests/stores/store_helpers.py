"""Helpers of the store tests (`from store_helpers import ...`); the tests of every folder share tests/helpers.py,
and this folder's fixtures are in its conftest.py."""
from __future__ import annotations

import math
import os

import pytest

import picpac
from picpac import stores

from helpers import payload


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


def crc32c_bitwise(data: bytes) -> int:
    """CRC32C one bit at a time, straight from the definition (independent of picpac's tables)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
