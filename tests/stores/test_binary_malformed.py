"""Crafted and damaged binary stores (picpac/stores/binary.py): every malformed data file, index or
description gives a PicPacError naming the file, never a ValueError, IndexError or MemoryError, and
a store that opens reads back exactly what was written."""
from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

from picpac.errors import CorruptError, FormatError, MissingPathError, PicPacError
from picpac.stores import binary
from picpac.stores.binary import BinaryReader, BinaryWriter, index_path

IMAGES = [b"a" * 40, b"", b"bc" * 9, b"d"]


def write(path) -> tuple[bytes, bytes]:
    with BinaryWriter(path, metadata={"classes": ["x", "y"]}) as w:
        for i, image in enumerate(IMAGES):
            w.append(image=image, label=i, group=i // 2, meta={"i": i} if i % 2 else None)
    return open(path, "rb").read(), open(index_path(path), "rb").read()


def outcome(path: str) -> str:
    """'ok' when the store opens and every record reads back as written, else the error's class name;
    any error but a PicPacError naming the store fails the test."""
    try:
        with BinaryReader(path) as r:
            images = [bytes(r[i]["image"]) for i in range(len(r))]
            assert images == IMAGES and [r[i].label for i in range(len(r))] == list(range(len(IMAGES)))
            assert [r[i].group for i in range(len(r))] == [0, 0, 1, 1]
        return "ok"
    except PicPacError as exc:
        assert path in str(exc), exc
        return type(exc).__name__


def npy(header: str, body: bytes = b"", version: tuple[int, int] = (1, 0)) -> bytes:
    size = struct.pack("<H" if version == (1, 0) else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + size + header.encode("latin1") + body


def offsets_file(values, dtype: str = "<i8") -> bytes:
    return npy(f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': ({len(values)},), }}\n",
               np.asarray(values, dtype).tobytes())


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "s.bin")
    data, index = write(path)
    return path, data, index


def test_the_untouched_store_reads(store):
    assert outcome(store[0]) == "ok"


def test_every_truncation_of_the_data_file_is_refused(store):
    path, data, _ = store
    for size in range(len(data)):
        with open(path, "wb") as f:
            f.write(data[:size])
        assert outcome(path) in ("CorruptError", "FormatError"), size


def test_every_byte_flip_of_the_data_file_is_caught_or_harmless(store):
    path, data, _ = store
    outcomes = set()
    for i in range(len(data)):
        with open(path, "wb") as f:
            f.write(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
        outcomes.add(outcome(path))
    assert outcomes <= {"ok", "CorruptError", "CorruptRecordError", "FormatError"} and "CorruptError" in outcomes


def test_every_truncation_and_byte_flip_of_the_index_is_refused(store):
    path, _, index = store
    mutations = [index[:size] for size in range(len(index))] + \
        [index[:i] + bytes([index[i] ^ 0xFF]) + index[i + 1:] for i in range(len(index))] + [index + b"\0"]
    for mutated in mutations:
        with open(index_path(path), "wb") as f:
            f.write(mutated)
        result = outcome(path)
        # a flip in the header's padding spaces changes nothing numpy reads, but the CRC32 tells
        assert result in ("CorruptError", "FormatError"), mutated


@pytest.mark.parametrize("index, error", [
    (offsets_file([0, 10, 5, 20]), CorruptError),  # not monotonic
    (offsets_file([0, 10, 10**6]), CorruptError),  # past the end
    (offsets_file([-8, 10]), CorruptError),
    (offsets_file([5, 10]), CorruptError),  # not from 0
    (offsets_file([0, 2**64 - 1], "<u8"), CorruptError),
    (offsets_file([0, 3], "|i1"), CorruptError),  # a valid small integer type, but not this store's index
    (offsets_file([0.0, 3.0], "<f8"), FormatError),
    (offsets_file([], "<i8"), FormatError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000000,), }\n", bytes(16)), CorruptError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': (-3,), }\n", bytes(16)), CorruptError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }\n", bytes(16)), FormatError),
    (npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", bytes(16)), FormatError),
    (npy("{'descr': [('a', '<i8')], 'fortran_order': False, 'shape': (2,), }\n", bytes(16)), FormatError),
    (npy("{'descr': '<i16', 'fortran_order': False, 'shape': (2,), }\n", bytes(32)), FormatError),
    (npy("{'descr': '<i8', 'fortran_order': 1, 'shape': (2,), }\n", bytes(16)), FormatError),
    (npy("[1, 2, 3]\n"), FormatError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': " + "(" * 5000 + ")" * 5000 + "}\n"), FormatError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }" + " " * 70000 + "\n", bytes(16),
         (2, 0)), FormatError),
    (npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }\n", bytes(16), (3, 0)), FormatError),
    (npy("\xff\xfe{'descr'", b"", (1, 0)), FormatError),
    (b"PK\x03\x04 a zip, not an npy", FormatError),
    (b"", FormatError),
])
def test_crafted_index_files_are_refused(store, index, error):
    path = store[0]
    with open(index_path(path), "wb") as f:
        f.write(index)
    with pytest.raises(error, match=path):
        BinaryReader(path)


def test_an_index_far_larger_than_its_data_file_is_refused_unread(store):
    path = store[0]
    with open(index_path(path), "wb") as f:
        f.write(offsets_file(np.arange(0, 200_000)))
    with pytest.raises(CorruptError, match="more offsets than its data file"):
        BinaryReader(path)


def test_an_index_that_is_a_directory_or_missing(store):
    path = store[0]
    os.unlink(index_path(path))
    with pytest.raises(MissingPathError, match=path):
        BinaryReader(path)
    os.mkdir(index_path(path))
    with pytest.raises(FormatError, match="is a directory"):
        BinaryReader(path)


def craft(path: str, tail: bytes) -> None:
    """Replace the description after the store's records by ``tail`` (the index stays as it is)."""
    data, offsets = open(path, "rb").read(), np.load(index_path(path))
    with open(path, "wb") as f:
        f.write(data[:offsets[-1]] + tail)


@pytest.mark.parametrize("tail, error", [
    (b"", CorruptError),
    (b"not json at all", CorruptError),
    (b"\xff\xfe\x00", CorruptError),
    (b"[" * 100_000 + b"]" * 100_000, CorruptError),
    (b"1" * 5000, CorruptError),  # an integer with more digits than Python converts
    (b"[1, 2]", FormatError),
    (b'{"metadata": {}}', FormatError),
    (b'{"store": "picpac-lmdb", "metadata": {}}', FormatError),
    (b'{"store": "picpac-binary", "metadata": [1]}', CorruptError),
    (b'{"store": "picpac-binary"}', CorruptError),
    (b'{"store": "picpac-binary", "metadata": {"fields": 3}}', CorruptError),
    (b'{"store": "picpac-binary", "metadata": {"fields": ["image", 7]}}', CorruptError),
    (b'{"store": "picpac-binary", "metadata": {"fields": ["image"]}, "count": 3}', CorruptError),
    (b'{"store": "picpac-binary", "metadata": {"fields": ["image"]}, "count": 4, "index": "x"}', CorruptError),
    (b'{"store": "picpac-binary", "metadata": {"fields": ["image"]}, "count": 4, "index": {"bytes": 1}}',
     CorruptError),
])
def test_malformed_descriptions_are_refused(store, tail, error):
    path = store[0]
    craft(path, tail)
    with pytest.raises(error, match=path):
        BinaryReader(path)


def test_a_description_over_the_limit_is_refused_unparsed(store, monkeypatch):
    path = store[0]
    monkeypatch.setattr(binary, "MAX_DESCRIPTION", 100)
    with pytest.raises(CorruptError, match="over the 100 of a description"):
        BinaryReader(path)
    with pytest.raises(PicPacError, match="over the 100 a binary store holds"):
        write(path)


def test_a_legacy_description_with_a_consistent_index_reads(store):
    path = store[0]
    craft(path, json.dumps({"store": "picpac-binary", "version": 1, "serialisation": "PPR1",
                            "metadata": {"fields": ["image"], "classes": ["x", "y"]}}).encode())
    assert outcome(path) == "ok"


def test_the_recorded_crc_guards_the_index(store):
    path, data, index = store
    offsets = np.load(index_path(path))
    head = json.loads(data[offsets[-1]:])
    assert head["index"]["crc32"] == zlib.crc32(index)
    head["index"]["crc32"] ^= 1
    craft(path, json.dumps(head).encode())
    with pytest.raises(CorruptError, match="belongs to another store"):
        BinaryReader(path)


def test_an_index_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "s.bin"
    with BinaryWriter(path) as w:
        w.append(image=b"abc")
    os.unlink(index_path(str(path)))
    os.mkfifo(index_path(str(path)))
    with pytest.raises(FormatError, match=r"s.bin.idx: is a FIFO"):
        BinaryReader(path)
