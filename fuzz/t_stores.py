"""Targets ``store-<kind>``: each foreign store reader (picpac.stores) on mutated valid stores.

Each seed is a small store written by picpac's own writer (3 records with image, annotation and mask
fields, labels whole and fractional, groups, meta; classes and a ``fuzz`` key in the dataset metadata),
and one of no records. A case's bytes are the store's file (``lmdb``: its ``data.mdb``; ``binary``: the
index, then the data file, after a 4-byte length of the index). ``open_reader`` and a read of every
record (fields, label, group, meta; ``check=True`` and ``check=False``), then ``import_store`` to a
picpac file, must give PicPacErrors only. Where the format checksums its records (TFRecord's CRC32C,
PPR1's CRC32 in lmdb and binary), a record read with ``check=True`` must be the one written at that
number. ``store-tfrecord-crafted`` and ``store-binary-crafted`` make the checksums valid again after the
mutation (and edit tf.train.Example features: kinds, counts, label bytes, dataset JSON), so the
decoders past the checksums are tested. LMDB and HDF5 go through C libraries that may crash on damaged
files: the harness runs every case in a worker process whose death is a recorded crash.
"""
from __future__ import annotations

import os
import random
import shutil
import struct
import zlib

import numpy as np

import picpac
from picpac import stores
from picpac.stores.checksums import masked_crc32c
from picpac.stores.example import decode_example, encode_example

from . import jsongen
from .common import Target, attempt, check, float_bits, outcome, scratch
from .mutate import interesting, mutate, put_int

KINDS = ("tfrecord", "tar", "sqlite", "npz", "hdf5", "lmdb", "binary")
CHECKSUMMED = {"tfrecord", "lmdb", "binary"}
_EXPECTED: dict[str, list[tuple]] = {}


def _records() -> list[tuple[dict, float, int | None, dict | None]]:
    return [({"image": b"\xff\xd8jpeg-%d" % i + bytes(range(i * 7)), "annotation": b'{"shapes": []}',
              **({"mask": b"\x89PNG-mask"} if i != 1 else {})}, [1.0, 0.25, -0.0][i], [7, None, -(2**63) + 1][i],
             {"i": i} if i != 2 else None) for i in range(3)]


def _path(kind: str, name: str) -> str:
    return os.path.join(scratch(), f"{name}.{kind}")


def store_bytes(kind: str, path: str) -> bytes:
    """A store on disk as one case's bytes."""
    if kind == "lmdb":
        with open(os.path.join(path, "data.mdb"), "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        data = f.read()
    if kind == "binary":
        with open(stores.index_path(path), "rb") as f:
            index = f.read()
        return struct.pack("<I", len(index)) + index + data
    return data


def write_store(kind: str, data: bytes, name: str = "case") -> str:
    """One case's bytes as a store on disk: its path."""
    path = _path(kind, name)
    if kind == "lmdb":
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "data.mdb"), "wb") as f:
            f.write(data)
        return path
    if kind == "binary":
        (size,) = struct.unpack_from("<I", data.ljust(4, b"\0"))
        with open(stores.index_path(path), "wb") as f:
            f.write(data[4:4 + size])
        data = data[4 + size:]
    with open(path, "wb") as f:
        f.write(data)
    return path


def store_seeds(kind: str) -> list[bytes]:
    seeds = []
    for n in (3, 0):
        path = _path(kind, f"seed{n}")
        if os.path.isdir(path):
            shutil.rmtree(path)
        with stores.open_writer(path, kind, metadata={"fuzz": kind, "classes": ["cat", "dog"]}) as w:
            for fields, label, group, meta in _records()[:n]:
                w.append(fields, label=label, group=group, meta=meta)
        seeds.append(store_bytes(kind, path))
    return seeds


def prepare(kind: str, seeds: list[bytes]) -> None:
    """What the store of the first seed holds, read back from its bytes."""
    with stores.open_reader(write_store(kind, seeds[0], "expected"), kind) as r:
        _EXPECTED[kind] = [({k: bytes(v) for k, v in rec.fields.items()}, float_bits(rec.label), rec.group, rec.meta)
                           for rec in r]


# -- crafted: checksums made valid again ------------------------------------------------------------
def fix_tfrecord(data: bytes) -> bytes:
    """Every frame's two CRC32Cs recomputed, following the (possibly mutated) lengths."""
    buf = bytearray(data)
    pos = 0
    while pos + 12 <= len(buf):
        (length,) = struct.unpack_from("<Q", buf, pos)
        buf[pos + 8:pos + 12] = struct.pack("<I", masked_crc32c(bytes(buf[pos:pos + 8])))
        end = pos + 12 + length
        if end + 4 > len(buf):
            break
        buf[end:end + 4] = struct.pack("<I", masked_crc32c(bytes(buf[pos + 12:end])))
        pos = end + 4
    return bytes(buf)


def fix_binary(data: bytes) -> bytes:
    """Every PPR1 record's CRC32 recomputed, at the offsets of the (possibly mutated) index."""
    try:
        (size,) = struct.unpack_from("<I", data)
        import io
        offsets = np.load(io.BytesIO(data[4:4 + size]), allow_pickle=False)
        offsets = [int(v) for v in offsets.reshape(-1)[:1000]]
    except Exception:
        return data
    buf = bytearray(data)
    base = 4 + size
    for start, end in zip(offsets, offsets[1:]):
        a, b = base + start, base + end
        if 0 <= start and a + 8 <= b <= len(buf) and buf[a:a + 4] == b"PPR1":
            buf[a + 4:a + 8] = struct.pack("<I", zlib.crc32(buf[a + 8:b]))
    return bytes(buf)


def _example_edit(example: bytes, rng: random.Random) -> bytes:
    try:
        features = {k: (kind, [bytes(v) if isinstance(v, memoryview) else v for v in values])
                    for k, (kind, values) in decode_example(example).items()}
    except ValueError:
        return example
    name = rng.choice(sorted(features) + ["picpac/label", "picpac/group", "picpac/meta", "picpac/dataset", "extra"])
    op = rng.randrange(6)
    if op == 0:
        features[name] = ("bytes", [rng.choice((b"", b"\0" * 7, b"\0" * 8, b"\0" * 9, jsongen.hostile_text(rng)))])
    elif op == 1:
        features[name] = ("int64", rng.choice(([], [0], [2**63 - 1], [-(2**63)], [1, 2, 3])))
    elif op == 2:
        features[name] = ("float", rng.choice(([], [float("nan")], [float("inf")], [0.5, 1.5])))
    elif op == 3:
        features[name] = ("bytes", [b"a", b"bb", b""][:rng.randint(0, 3)])
    elif op == 4:
        features.pop(name, None)
    else:
        features["picpac/dataset"] = ("bytes", [jsongen.dumps(rng.choice((
            {"fields": rng.choice((["image"], "image", [1], None))}, [], 5, {"fields": ["image"], "classes": "ab"},
            jsongen.value(rng))))])
    return encode_example(features)


def crafted_tfrecord(seed: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        frames, pos = [], 0
        while pos + 12 <= len(seed):
            (length,) = struct.unpack_from("<Q", seed, pos)
            frames.append(seed[pos + 12:pos + 12 + length])
            pos += 16 + length
        if frames:
            k = rng.randrange(len(frames))
            frames[k] = _example_edit(frames[k], rng)
            seed = b"".join(stores.tfrecord_frame(f) for f in frames)
    return fix_tfrecord(mutate(seed, rng, hot=64) if rng.random() < 0.7 else seed)


def crafted_binary(seed: bytes, rng: random.Random) -> bytes:
    return fix_binary(binary_mutate(seed, rng))


def binary_mutate(seed: bytes, rng: random.Random) -> bytes:
    """Mutate the index or the data file (and sometimes the index's length)."""
    (size,) = struct.unpack_from("<I", seed)
    index, data = seed[4:4 + size], seed[4 + size:]
    if rng.random() < 0.3:
        index = mutate(index, rng, hot=128)
    else:
        data = mutate(data, rng, hot=256)
    out = bytearray(struct.pack("<I", len(index)) + index + data)
    if rng.random() < 0.03:
        put_int(out, 0, interesting(rng, 4), 4)
    return bytes(out)


# -- the checks -------------------------------------------------------------------------------------
def run_store(kind: str, data: bytes, raw: bool) -> str:
    path = write_store(kind, data)
    errors: list = []
    reader, err = attempt(stores.open_reader, path, kind)
    errors.append(err)
    if reader is not None:
        with reader:
            _ = reader.fields, reader.classes, repr(reader)
            expected = _EXPECTED.get(kind) if raw and kind in CHECKSUMMED else None
            for i in range(len(reader)):
                rec, err = attempt(reader.__getitem__, i)
                errors.append(err)
                if rec is None:
                    continue
                got = ({k: bytes(v) for k, v in rec.fields.items()}, float_bits(rec.label), rec.group)
                meta, err = attempt(lambda: rec.meta)
                errors.append(err)
                if expected is not None:
                    check(i < len(expected) and got == expected[i][:3] and (err is None and meta == expected[i][3]),
                          f"record {i} of a damaged {kind} store reads {got!r:.200}; "
                          f"{expected[i] if i < len(expected) else None!r:.200} was written", "wrong-record")
    unchecked, err = attempt(stores.open_reader, path, kind, check=False)
    errors.append(err)
    if unchecked is not None:
        with unchecked:
            for i in range(len(unchecked)):
                rec, err = attempt(unchecked.__getitem__, i)
                errors.append(err)
                if rec is not None:
                    errors.append(attempt(lambda: rec.meta)[1])
    db = os.path.join(scratch(), f"imported-{kind}.picpac")
    report, err = attempt(stores.import_store, path, db, kind, overwrite=True)
    errors.append(err)
    if report is not None:
        with picpac.Reader(db) as r:
            check(len(r) == report.count, f"import_store reports {report.count} records, wrote {len(r)}", "import-count")
    return outcome(errors)


def _target(kind: str) -> list[Target]:
    needs = {"hdf5": ("h5py",), "lmdb": ("lmdb",)}.get(kind, ())
    mutator = binary_mutate if kind == "binary" else (lambda seed, rng: mutate(seed, rng, hot=512))
    out = [Target(f"store-{kind}", f"a {kind} store, mutated: open, read every record, import_store",
                  lambda: store_seeds(kind), mutator, lambda data: run_store(kind, data, True), needs=needs,
                  prepare=lambda seeds: prepare(kind, seeds))]
    if kind == "tfrecord":
        out.append(Target("store-tfrecord-crafted", "a tfrecord store, mutated with valid CRC32Cs, Example features edited",
                          lambda: store_seeds(kind), crafted_tfrecord,
                          lambda data: run_store(kind, fix_tfrecord(data), False),
                          prepare=lambda seeds: prepare(kind, seeds)))
    if kind == "binary":
        out.append(Target("store-binary-crafted", "a binary store, mutated with valid PPR1 CRC32s",
                          lambda: store_seeds(kind), crafted_binary, lambda data: run_store(kind, fix_binary(data), False),
                          prepare=lambda seeds: prepare(kind, seeds)))
    return out


TARGETS = [t for kind in KINDS for t in _target(kind)]
