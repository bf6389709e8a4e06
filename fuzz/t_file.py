"""Targets ``picpac`` and ``picpac-crafted``: a picpac file through every read path of the Reader.

``picpac`` mutates valid files (bit flips, replaced and interesting bytes, truncation, insertion, ...)
and keeps their checksums as they are, so whatever the Reader returns with ``check=True`` must be
exactly what was written (the seed is named by a ``fuzz`` key in the dataset metadata, itself under
the commit region's CRC). ``picpac-crafted`` makes every checksum valid again after the mutation
(records, commit region, slots: :func:`fix_crcs`) and adds structural lies (index columns, record
heads and field tables, metadata and record meta JSON, array declarations), so the parser's logic
past the checksums is what is tested: only PicPacErrors, and the paths that read a record (``r[i]``,
``array``, ``spans`` + ``gather``, ``take``, ``verify``) must agree with each other.
"""
from __future__ import annotations

import datetime
import json
import os
import random
import struct
import zlib
from typing import Any
from unittest import mock

import numpy as np

import picpac
from picpac.errors import CorruptRecordError
from picpac.file import writer
from picpac.file.layout import HEADER_SIZE, INDEX_DTYPE, MAGIC, RECORD_HEAD, SLOT, SLOT_OFFSETS, index_offset_after
from picpac.tools.verify import verify

from . import jsongen
from .common import Target, Violation, attempt, check, float_bits, outcome, scratch, write
from .mutate import interesting, mutate, put_int

# -- seeds ------------------------------------------------------------------------------------------
_EXPECTED: dict[tuple[Any, int], tuple[dict, list]] = {}
"""(seed tag, commit seq) -> (dataset metadata, [(fields, label bits, group, meta)]): what was written."""


def _png(i: int) -> bytes:
    import cv2
    pixels = np.zeros((4 + i % 3, 5, 3), np.uint8)
    pixels[:] = (i * 40 % 256, 7, 200)
    return cv2.imencode(".png", pixels)[1].tobytes()


def _annotation(i: int) -> bytes:
    return json.dumps({"shapes": [{"type": "rect", "label": i % 3,
                                   "geometry": {"x": 0.1, "y": 0.2, "width": 0.5, "height": 0.25}}]}).encode()


def _states(data: bytes) -> dict[int, tuple[dict, list]]:
    """Each committed state of a seed file, read back: by seq."""
    states = {}
    for damage in (None, 0, 1):  # as it is, then each slot damaged (the Reader then uses the other)
        buf = bytearray(data)
        if damage is not None:
            buf[SLOT_OFFSETS[damage] + 44] ^= 0xFF
        path = write("seed-state.picpac", bytes(buf))
        reader, _ = attempt(picpac.Reader, path)
        if reader is None:
            continue
        with reader:
            records = [({k: bytes(v) for k, v in rec.fields.items()}, float_bits(rec.label), rec.group, rec.meta)
                       for rec in reader]
            states[reader.header.current.seq] = (reader.metadata, records)
    return states


class _Epoch(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime(2000, 1, 1, tzinfo=tz)


def file_seeds() -> list[bytes]:
    """Five small valid files (each under ~2 KB, so mutations land on structure often), the same bytes in
    every process and on every machine (the Writer's ``created`` time and host are fixed)."""
    with mock.patch.object(writer.datetime, "datetime", _Epoch), mock.patch.object(writer.platform, "node",
                                                                                   lambda: "fuzz"):
        return _file_seeds()


def prepare(seeds: list[bytes]) -> None:
    _EXPECTED.clear()
    for data in seeds:
        for seq, state in _states(data).items():
            _EXPECTED[(state[0].get("fuzz"), seq)] = state


def _file_seeds() -> list[bytes]:
    d = scratch()
    paths = []
    p = os.path.join(d, "s0.picpac")  # images, annotations, meta, groups, classes
    with picpac.Writer(p, metadata={"fuzz": 0, "classes": ["a", "b", "c"]}, sync=False) as w:
        for i in range(4):
            w.append(image=_png(i), annotation=_annotation(i), label=i % 3, group=i // 2 if i else None,
                     meta={"i": i} if i % 2 else None)
    paths.append(p)
    p = os.path.join(d, "s1.picpac")  # array records back to back: stride, take, spans, gather
    images = np.arange(5 * 3 * 4 * 2, dtype=np.uint8).reshape(5, 3, 4, 2)
    picpac.write_arrays(p, images, labels=[0, 1, 0, 1, 2], groups=[1, 1, 2, 2, 3], metadata={"fuzz": 1}, sync=False)
    paths.append(p)
    p = os.path.join(d, "s2.picpac")  # two commits (an append): the older slot is a fallback
    with picpac.Writer(p, metadata={"fuzz": 2}, sync=False) as w:
        for i in range(2):
            w.append(image=b"first-%d" % i, label=float(i))
    with picpac.Writer(p, append=True, sync=False) as w:
        w.append(image=b"appended", mask=b"m", label=-0.0, meta={"k": [1, 2]})
    paths.append(p)
    p = os.path.join(d, "s3.picpac")  # no records
    with picpac.Writer(p, metadata={"fuzz": 3}, sync=False):
        pass
    paths.append(p)
    p = os.path.join(d, "s4.picpac")  # many fields, empty values, float16 arrays big-endian
    spec = {"arr": {"shape": [2, 3], "dtype": ">f2"}}
    with picpac.Writer(p, metadata={"fuzz": 4, "arrays": spec}, sync=False) as w:
        for i in range(3):
            fields = {f"f{k}": bytes([k]) * ((i + k) % 3) for k in range(5)}
            w.append(fields, arr=np.full((2, 3), i, ">f2"), label=1e300 if i == 1 else i, group=-(2**62) + i)
    paths.append(p)
    seeds = []
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        os.unlink(p)
        seeds.append(data)
    return seeds


# -- crafted: checksums made valid again --------------------------------------------------------------
def fix_crcs(data: bytes) -> bytes:
    """``data`` with every checksum that the structure lets one compute made valid: each in-file record's
    CRC in its index entry, each slot's commit-region CRC, each slot's own CRC (older seq first)."""
    buf = bytearray(data)
    if len(buf) < HEADER_SIZE or bytes(buf[:len(MAGIC)]) != MAGIC:
        return bytes(buf)
    slots = []
    for at in SLOT_OFFSETS:
        seq, offset, meta_size, index_offset, count, crc, _ = SLOT.unpack_from(buf, at)
        slots.append((seq, at, offset, meta_size, index_offset, count, crc))
    for seq, at, offset, meta_size, index_offset, count, crc in sorted(slots):
        end = index_offset + INDEX_DTYPE.itemsize * count
        if seq and HEADER_SIZE <= offset <= index_offset and end <= len(buf) and count <= 1 << 16:
            index = np.frombuffer(bytes(buf[index_offset:end]), INDEX_DTYPE).copy()
            for j in range(count):
                start, size = int(index["offset"][j]), int(index["size"][j])
                if start + size <= len(buf):
                    index["checksum"][j] = zlib.crc32(buf[start:start + size])
            buf[index_offset:end] = index.tobytes()
            crc = zlib.crc32(buf[offset:end])
        body = SLOT.pack(seq, offset, meta_size, index_offset, count, crc, 0)[:-4]
        buf[at:at + SLOT.size] = body + struct.pack("<I", zlib.crc32(body))
    return bytes(buf)


def _current(buf: bytearray) -> tuple[int, int, int, int, int] | None:
    """(slot position, offset, meta size, index offset, count) of the valid-looking newest slot."""
    if len(buf) < HEADER_SIZE:
        return None
    best = None
    for at in SLOT_OFFSETS:
        seq, offset, meta_size, index_offset, count, _, _ = SLOT.unpack_from(buf, at)
        if best is None or seq > best[0]:
            best = (seq, at, offset, meta_size, index_offset, count)
    return best[1:]


def _entries(buf: bytearray) -> list[tuple[int, int, int]]:
    """(position of the index entry, record offset, record size) of the current commit's entries in the file."""
    current = _current(buf)
    if current is None:
        return []
    _, _, _, index_offset, count = current
    out = []
    for j in range(min(count, 64)):
        at = index_offset + INDEX_DTYPE.itemsize * j
        if at + INDEX_DTYPE.itemsize > len(buf):
            break
        offset, size = struct.unpack_from("<QQ", buf, at)
        out.append((at, offset, size))
    return out


def _weird_metadata(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    fields = rng.choice((["image"], ["image", "annotation", "mask"], ["image", "image"], [], ["arr"],
                         [f"f{k}" for k in range(5)] + ["arr"], ["x"] * 40000, "image", [1, 2], [["image"]], None))
    meta: dict[str, Any] = {"fields": fields}
    if kind == 0:
        return jsongen.hostile_text(rng)
    if kind == 1:
        meta["classes"] = rng.choice((["a"], [], "abc", [1], [None], ["a"] * 10000, {"a": 1}))
    if kind in (2, 3, 4):
        shape = rng.choice(([3, 4, 2], [2, 3], [24], [0], [], [-1], [2**48], [2**62], [2**24, 2**24], [1] * 33,
                            [1.5], ["3"], [True], 5, None, [2**16, 2**16, 2**15], [1] * 32, [10**30]))
        dtype = rng.choice(("uint8", "<f4", ">i2", ">f2", "bool", "O", "V8", "S4", "u1,u1", "(2,)u1", "complex64",
                            "M8", "U3", "float16", 5, None, "x" * 40, "uint64", "i8", "f8", "int8", "b1"))
        name = rng.choice(("image", "arr", "mask", "nope"))
        meta["arrays"] = rng.choice(({name: {"shape": shape, "dtype": dtype}}, {name: shape}, [name], "x",
                                     {name: {"shape": shape}}, {name: {"dtype": dtype}}))
    if kind == 5:
        meta[rng.choice(jsongen.STRINGS)] = jsongen.value(rng)
    return jsongen.dumps(meta)


def _record_bytes(rng: random.Random, fields: int) -> bytes:
    """A record with a head and table that may lie about their counts and sizes."""
    n = rng.choice((0, 1, 2, 3, fields, fields + 1, 40, 65535))
    meta = rng.choice((b"", b"{}", b'{"i": 1}', jsongen.hostile_text(rng)))
    values = [bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 5, 24)))) for _ in range(min(n, 4))]
    table = b"".join(struct.pack("<IQ", rng.choice((k, k, 0, fields, 2**32 - 1)),
                                 len(v) if rng.random() < 0.8 else interesting(rng, 8)) for k, v in enumerate(values))
    claimed_meta = len(meta) if rng.random() < 0.85 else interesting(rng, 4)
    return RECORD_HEAD.pack(n, rng.choice((0, 0, 1)), claimed_meta) + table + meta + b"".join(values)


def _relocate_commit(buf: bytearray, metadata: bytes | None) -> None:
    """Copy the current commit region to the end of the file with new metadata, and point its slot there."""
    current = _current(buf)
    if current is None:
        return
    at, offset, meta_size, index_offset, count = current
    count = min(count, 1 << 12)
    index = bytes(buf[index_offset:index_offset + INDEX_DTYPE.itemsize * count])
    if metadata is None:
        metadata = bytes(buf[offset:offset + meta_size])
    new_offset = len(buf)
    buf += metadata
    buf += bytes(index_offset_after(len(buf)) - len(buf))
    new_index = len(buf)
    buf += index
    seq = SLOT.unpack_from(buf, at)[0]
    buf[at:at + SLOT.size] = SLOT.pack(seq, new_offset, len(metadata), new_index, len(index) // INDEX_DTYPE.itemsize, 0, 0)


def crafted_mutate(seed: bytes, rng: random.Random) -> bytes:
    """Structural lies, then (sometimes) byte mutations; checksums are made valid by the target."""
    buf = bytearray(seed)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        entries = _entries(buf)
        if op == 0 and entries:  # an index column
            at, _, _ = rng.choice(entries)
            column = rng.randrange(6)
            width = 4 if column >= 4 else 8
            pos = at + (16 + 8 * (column - 2) if 2 <= column < 4 else 8 * column if column < 2 else 32 + 4 * (column - 4))
            if column == 0 and rng.random() < 0.5:  # another record's offset, or a place inside the file
                value = rng.choice([e[1] for e in entries] + [rng.randrange(len(buf) + 1)])
            elif column == 1 and rng.random() < 0.5:
                value = rng.choice([e[2] for e in entries] + [rng.randrange(64), len(buf)])
            elif column == 2:
                put_int(buf, pos, struct.unpack("<Q", struct.pack("<d", rng.choice(jsongen.NUMBERS[:13] + (float("nan"),))))[0], 8)
                continue
            else:
                value = interesting(rng, width)
            put_int(buf, pos, value, width)
        elif op == 1 and entries:  # a record's head
            _, offset, size = rng.choice(entries)
            if rng.random() < 0.5:
                put_int(buf, offset, interesting(rng, 2), 2)
            else:
                put_int(buf, offset + 4, interesting(rng, 4) if rng.random() < 0.7 else rng.randrange(max(1, size)), 4)
        elif op == 2 and entries:  # a field table entry
            _, offset, size = rng.choice(entries)
            k = rng.randrange(4)
            if rng.random() < 0.5:
                put_int(buf, offset + 8 + 12 * k, rng.choice((0, 1, 2, 5, 6, interesting(rng, 4))), 4)
            else:
                put_int(buf, offset + 12 + 12 * k, rng.choice((0, 1, size, interesting(rng, 8))), 8)
        elif op == 3:  # new dataset metadata
            _relocate_commit(buf, _weird_metadata(rng))
        elif op == 4 and entries:  # a new record appended at the end, pointed to by an entry
            record = _record_bytes(rng, rng.choice((1, 2, 3, 6)))
            _relocate_commit(buf, None)
            entries = _entries(buf)
            at, _, _ = rng.choice(entries)
            put_int(buf, at, len(buf), 8)
            put_int(buf, at + 8, len(record) if rng.random() < 0.9 else len(record) + rng.choice((-1, 1)), 8)
            buf += record
        elif op == 5:  # a slot's numbers
            at = rng.choice(SLOT_OFFSETS)
            put_int(buf, at + 8 * rng.randrange(5), interesting(rng, 8), 8)
        elif op == 6 and entries:  # a record's meta JSON replaced in place (same length, or lying)
            _, offset, size = rng.choice(entries)
            if offset + 8 <= len(buf):
                nfields, _, meta_size = RECORD_HEAD.unpack_from(buf, offset)
                start = offset + 8 + 12 * nfields
                text = jsongen.hostile_text(rng)[:max(meta_size, 1)]
                buf[start:start + len(text)] = text
        else:
            buf = bytearray(mutate(bytes(buf), rng, hot=HEADER_SIZE * 2))
    return fix_crcs(bytes(buf))


def raw_mutate(seed: bytes, rng: random.Random) -> bytes:
    return mutate(seed, rng, hot=HEADER_SIZE * 2)


# -- the checks -------------------------------------------------------------------------------------
def _record_tuple(rec: picpac.Record) -> tuple:
    return {k: bytes(v) for k, v in rec.fields.items()}, float_bits(rec.label), rec.group


def read_all(path: str, raw: bool) -> str:
    reader, err = attempt(picpac.Reader, path)
    if reader is None:
        report, verr = attempt(verify, path, progress=False)
        check(verr is not None, f"verify opened a file the Reader refused ({err})", "verify-opens")
        return outcome([err])
    errors: list = []
    with reader:
        n = len(reader)
        expected = None
        if raw:
            key = (reader.metadata.get("fuzz"), reader.header.current.seq)
            expected = _EXPECTED.get(key)
            check(expected is not None and reader.metadata == expected[0],
                  f"the Reader opened a damaged file and returned metadata no seed had: {reader.metadata!r:.200}",
                  "wrong-metadata")
            check(n == len(expected[1]), f"{n} records, {len(expected[1])} were written", "wrong-count")
            labels = [float_bits(x) for x in reader.labels.tolist()]
            check(labels == [r[1] for r in expected[1]], "labels differ from what was written", "wrong-labels")
        arrays, err = attempt(lambda: reader.arrays)
        errors.append(err)
        failed, records = {}, {}
        for i in range(n):
            rec, err = attempt(reader.__getitem__, i)
            errors.append(err)
            if err is not None:
                check(isinstance(err, CorruptRecordError) and err.index == i, f"r[{i}] raised {err!r}", "record-error")
                failed[i] = err.reason
                continue
            got = _record_tuple(rec)
            meta, err = attempt(lambda: rec.meta)
            errors.append(err)
            records[i] = got
            if expected is not None:
                want = expected[1][i]
                check(got == want[:3] and meta == want[3], f"record {i} reads {got!r:.200}, {want!r:.200} was written",
                      "wrong-record")
            for name, spec in (arrays or {}).items():
                array, err = attempt(reader.array, i, name)
                errors.append(err)
                if array is not None:
                    check(array.shape == spec.shape and array.dtype == spec.dtype, f"array {i} {name}: {array.shape}",
                          "array-shape")
                    check(array.tobytes() == got[0].get(name), f"array {i} {name} differs from its field", "array-bytes")
            _, err = attempt(reader.read, i, False)
            errors.append(err)
        _check_spans(reader, n, failed, records, errors)
        report, err = attempt(verify, path, progress=False, decode=True, max_pixels=1 << 16)
        errors.append(err)
        if report is not None:
            check(set(failed) <= set(report.damaged), f"verify missed damaged records {set(failed) - set(report.damaged)}",
                  "verify-misses")
    return outcome(errors)


def _check_spans(reader: picpac.Reader, n: int, failed: set, records: dict, errors: list) -> None:
    everything = np.arange(n)
    for name in reader.fields[:3] + ["not-a-field"]:
        found, err = attempt(reader.spans, everything, name)
        errors.append(err)
        if found is None:
            continue
        starts, lengths, problems = found
        _same_problems(name, problems, failed, "spans")
        for i, got in records.items():
            value = got[0].get(name)
            if value is None:
                check(lengths[i] == -1, f"spans({name!r}) gives record {i} a field it lacks", "spans-field")
                continue
            check(lengths[i] == len(value), f"spans({name!r}) gives record {i} {lengths[i]} bytes, r[i] {len(value)}",
                  "spans-size")
            rows, err = attempt(reader.gather, starts[i:i + 1], int(lengths[i]))
            errors.append(err)
            if rows is not None:
                check(rows.tobytes() == value, f"gather of record {i} {name!r} differs from r[i]", "gather-bytes")
    stride, err = attempt(lambda: reader.stride)
    errors.append(err)
    if not stride or not n:
        return
    out = np.empty((n, stride), np.uint8)
    taken, err = attempt(reader.take, everything, out)
    errors.append(err)
    if taken is None:
        return
    for name in reader.fields[:2]:
        found, err = attempt(reader.spans, everything, name, out)
        errors.append(err)
        if found is None:
            continue
        starts, lengths, problems = found
        _same_problems(name, problems, failed, "spans-rows")
        for i, got in records.items():
            value = got[0].get(name)
            if value is not None and lengths[i] >= 0:
                rows, err = attempt(reader.gather, starts[i:i + 1], int(lengths[i]), out.reshape(-1))
                check(rows is None or rows.tobytes() == value, f"gather(rows) of record {i} differs from r[i]",
                      "gather-rows-bytes")


def _same_problems(name: str, problems: dict, failed: dict, how: str) -> None:
    missed = sorted(set(failed) - set(problems))
    if missed:  # r[i] looks a field id up in the metadata's fields; spans takes an unknown id for another field
        why = "-field-id" if all("index out of range" in failed[i] for i in missed) else ""
        raise Violation(f"{how}({name!r}) reads records {missed} that r[i] refuses ({failed})", f"{how}-misses-damage{why}")
    check(not set(problems) - set(failed), f"{how}({name!r}) refuses records {sorted(set(problems) - set(failed))} "
                                           f"that r[i] reads: {problems}", f"{how}-extra-damage")


def run_raw(data: bytes) -> str:
    return read_all(write("case.picpac", data), raw=True)


def run_crafted(data: bytes) -> str:
    return read_all(write("case.picpac", fix_crcs(data)), raw=False)


TARGETS = [
    Target("picpac", "a picpac file, mutated, checksums kept: read every way, bytes as written or a PicPacError",
           file_seeds, raw_mutate, run_raw, prepare=prepare),
    Target("picpac-crafted", "a picpac file with structural lies and valid checksums: PicPacErrors, read paths agree",
           file_seeds, crafted_mutate, run_crafted, prepare=prepare),
]
