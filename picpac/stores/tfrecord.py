"""TFRecord: framed ``tf.train.Example``s with masked CRC32C, read and written without TensorFlow."""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

import numpy as np

from ..errors import CorruptError, FormatError, PicPacError, PicPacValueError, SourceError
from ..file.layout import load_json
from ..file.reader import Record
from .base import StoreWriter, corrupt_error, MappedReader
from .checksums import masked_crc32c
from .example import decode_example, encode_example


_TF_PREFIX = "picpac/"
_TF_LABEL, _TF_GROUP, _TF_META, _TF_DATASET = "picpac/label", "picpac/group", "picpac/meta", "picpac/dataset"


def tfrecord_frame(data: Any) -> bytes:
    """One TFRecord: u64 length, masked CRC32C of the length, the data, masked CRC32C of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + bytes(data) + struct.pack("<I", masked_crc32c(data))


def _label_feature(label: float) -> tuple[str, list]:
    """int64 for a whole number (a class id), float when float32 holds it exactly, else the double's bytes."""
    if label.is_integer() and -2**63 <= label < 2**63 and math.copysign(1.0, label) > 0:
        return "int64", [int(label)]
    with np.errstate(over="ignore"):
        if float(np.float32(label)) == label:
            return "float", [label]
    return "bytes", [struct.pack("<d", label)]


class TFRecordWriter(StoreWriter):
    """TFRecord file of ``tf.train.Example``s: one bytes feature per field, ``picpac/label`` (int64 when the
    label is a whole number, float when float32 holds it exactly, else its 8 bytes as a double),
    ``picpac/group`` (int64), ``picpac/meta`` (JSON bytes); the last example also holds the dataset
    metadata as ``picpac/dataset`` (a store of no records: one example holding only that)."""

    kind = "tfrecord"

    def _check_name(self, name: str) -> None:
        if name.startswith(_TF_PREFIX):
            raise PicPacValueError(f"{self.path}: field name {name!r}: names starting with {_TF_PREFIX!r} are "
                                   "reserved in the tfrecord format; rename the field")

    def _start(self) -> None:
        self._file = open(self._temp, "wb")
        self._last: tuple | None = None  # the last record waits: it gets the dataset metadata

    def _example(self, fields, label, group, meta, dataset: dict | None) -> bytes:
        features: dict[str, tuple[str, list]] = {name: ("bytes", [view]) for name, view in fields.items()}
        features[_TF_LABEL] = _label_feature(label)
        if group is not None:
            features[_TF_GROUP] = ("int64", [group])
        if meta:
            features[_TF_META] = ("bytes", [meta])
        if dataset is not None:
            features[_TF_DATASET] = ("bytes", [json.dumps(dataset).encode()])
        return encode_example(features)

    def _write(self, index, fields, label, group, meta) -> None:
        if self._last is not None:
            self._file.write(tfrecord_frame(self._example(*self._last, None)))
        self._last = (fields, label, group, meta)

    def _finish(self) -> None:
        if self._last is None:
            example = encode_example({_TF_DATASET: ("bytes", [json.dumps(self.metadata).encode()])})
        else:
            example = self._example(*self._last, self.metadata)
        self._file.write(tfrecord_frame(example))
        self._file.close()

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class TFRecordReader(MappedReader):
    """Reads TFRecord files of ``tf.train.Example``s: those written by :class:`TFRecordWriter` exactly,
    others as bytes features -> fields (a list of k > 1 values as ``name[0]`` ...) and numeric
    features -> meta lists. Every record's length and data CRC32C are checked (data: with ``check``).

    Files written elsewhere name their features as they like: ``image_feature`` (TensorFlow's ImageNet layout:
    ``image/encoded``) becomes the field ``image``, and ``label_feature`` (``image/class/label``, one number per
    record) the label; a record without them is an error naming it."""

    kind = "tfrecord"

    def __init__(self, path: str | os.PathLike, *, check: bool = True, image_feature: str | None = None,
                 label_feature: str | None = None):
        self.image_feature, self.label_feature = image_feature, label_feature
        super().__init__(path, check=check)

    def _open(self) -> None:
        view = self._map(self.path)
        size = len(view)
        starts, lengths = [], []
        pos = 0
        unpack = struct.Struct("<QI").unpack_from
        while pos < size:
            n = len(starts)
            if pos + 12 > size:
                raise self._bad(n, pos, f"is truncated: {size - pos} bytes where a 12-byte record head starts")
            length, length_crc = unpack(view, pos)
            if masked_crc32c(view[pos:pos + 8]) != length_crc:
                raise self._bad(n, pos, "fails its length CRC32C")
            end = pos + 12 + length + 4
            if end > size:
                raise self._bad(n, pos, f"is truncated: its {length} bytes run past the end of the file ({size} bytes)")
            starts.append(pos + 12)
            lengths.append(length)
            pos = end
        self._starts, self._lengths = starts, lengths
        self._count = len(starts)
        if starts:
            try:
                last = decode_example(self._data(len(starts) - 1))
            except ValueError as exc:
                raise FormatError(f"{self.path}: record {len(starts) - 1} is not a tf.train.Example ({exc})") from None
            if _TF_DATASET in last:
                kind, values = last[_TF_DATASET]
                if kind != "bytes" or len(values) != 1:
                    raise CorruptError(f"{self.path}: damaged {_TF_DATASET} feature (a {kind} list of "
                                       f"{len(values)} values, not one bytes value)")
                self.metadata = load_json(values[0], lambda why: CorruptError(
                    f"{self.path}: damaged {_TF_DATASET} feature ({why})"))
                if len(last) == 1:
                    self._count -= 1  # only the dataset metadata: a store of no records

    def _bad(self, n: int, pos: int, reason: str) -> PicPacError:
        if n == 0:
            return FormatError(f"{self.path}: not a TFRecord file (its first record {reason})")
        return corrupt_error(self.path, n, f"at byte {pos} {reason}")

    def _data(self, k: int) -> memoryview:
        start, length = self._starts[k], self._lengths[k]
        data = self._view[start:start + length]
        if self.check and masked_crc32c(data) != struct.unpack_from("<I", self._view, start + length)[0]:
            raise corrupt_error(self.path, k, "fails its data CRC32C (damaged bytes)")
        return data

    def _read(self, i: int) -> Record:
        try:
            features = decode_example(self._data(i))
        except ValueError as exc:
            raise corrupt_error(self.path, i, f"is not a tf.train.Example ({exc})") from None
        return self._from_features(i, features)

    def _from_features(self, i: int, features: dict) -> Record:
        label, group, meta, extra = 0.0, None, b"", {}
        fields = {}
        for given, option in ((self.image_feature, "--image-feature"), (self.label_feature, "--label-feature")):
            if given is not None and given not in features:
                raise SourceError(f"{self.path}: record {i} has no feature {given!r} ({option}); its features: "
                                  f"{sorted(features)}")
        for name, (kind, values) in features.items():
            if name == self.image_feature:
                if kind != "bytes" or len(values) != 1:
                    raise SourceError(f"{self.path}: record {i}'s feature {name!r} (--image-feature) is a {kind} list "
                                      f"of {len(values)} values, not one encoded image")
                fields["image"] = values[0]
            elif name == self.label_feature:
                if kind == "bytes" or len(values) != 1:
                    raise SourceError(f"{self.path}: record {i}'s feature {name!r} (--label-feature) is a {kind} list "
                                      f"of {len(values)} values, not one number")
                label = float(values[0])
            elif name == _TF_LABEL and values and self.label_feature is None:
                if kind == "bytes" and len(values[0]) != 8:
                    raise corrupt_error(self.path, i, f"has a {_TF_LABEL} of {len(values[0])} bytes, not a double's 8")
                label = float(values[0]) if kind != "bytes" else struct.unpack("<d", values[0])[0]
            elif name == _TF_GROUP and kind == "int64" and values:
                group = values[0]
            elif name == _TF_META and kind == "bytes" and values:
                meta = values[0]
            elif name == _TF_DATASET:
                continue
            elif kind == "bytes":
                if len(values) == 1:
                    fields[name] = values[0]
                else:
                    fields.update((f"{name}[{k}]", v) for k, v in enumerate(values))
            else:
                extra[name] = values
        if extra:
            stored = load_json(meta, lambda why: corrupt_error(self.path, i, f"has a {_TF_META} that is not valid "
                                                                             f"JSON ({why})")) if len(meta) else {}
            if not isinstance(stored, dict):
                raise corrupt_error(self.path, i, f"has a {_TF_META} that is not a JSON object")
            meta = {**stored, **extra}
        if self.image_feature is not None:  # the image first, as picpac's own layouts have it
            fields = {"image": fields.pop("image"), **fields}
        return self._record(i, self._ordered(fields), label, group, meta)
