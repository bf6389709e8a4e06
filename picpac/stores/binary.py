"""Binary + index: a data file of PPR1 records and a ``.idx`` NumPy file of their offsets."""
from __future__ import annotations

import json
import os

import numpy as np

from ..errors import CorruptError, FormatError, MissingPathError
from ..file.reader import Record
from .base import StoreWriter, MappedReader
from .records import decode_record, encode_record


def index_path(path: str) -> str:
    """The index file of a binary store: ``path + ".idx"``."""
    return path + ".idx"


class BinaryWriter(StoreWriter):
    """A data file (PPR1 records back to back, then the store's JSON description with the dataset
    metadata) and ``<path>.idx``, a NumPy ``.npy`` int64 array of N+1 offsets: record i is
    ``data[idx[i]:idx[i+1]]``, the description ``data[idx[N]:]``."""

    kind = "binary"

    def _start(self) -> None:
        self._file = open(self._temp, "wb")
        self._offsets = [0]

    def _temps(self) -> list[str]:
        return [self._temp, index_path(self._temp)]

    def _write(self, index, fields, label, group, meta) -> None:
        record = encode_record(fields, label, group, meta)
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))

    def _finish(self) -> None:
        self._file.write(json.dumps({"store": "picpac-binary", "version": 1, "serialisation": "PPR1",
                                     "metadata": self.metadata}).encode())
        self._file.close()
        with open(index_path(self._temp), "wb") as out:
            np.save(out, np.array(self._offsets, "<i8"))

    def _replace(self, temp: str, path: str) -> None:
        os.replace(index_path(temp), index_path(path))
        os.replace(temp, path)

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class BinaryReader(MappedReader):
    kind = "binary"

    def _open(self) -> None:
        view = self._map(self.path)
        idx = index_path(self.path)
        if not os.path.exists(idx):
            raise MissingPathError(f"{idx}: the index of binary store {self.path} does not exist")
        try:
            offsets = np.load(idx, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise FormatError(f"{idx}: not a NumPy offsets file ({exc})") from None
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or not len(offsets):
            raise FormatError(f"{idx}: not a 1-D integer offsets array")
        if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] > len(view):
            raise CorruptError(f"{self.path}: does not match its index {idx} (the records end at {offsets[-1]}, "
                               f"the file has {len(view)} bytes: truncated or replaced)")
        try:
            head = json.loads(bytes(view[int(offsets[-1]):]))
            self.metadata = head["metadata"]
        except (ValueError, KeyError, TypeError) as exc:
            if not len(view):
                raise FormatError(f"{self.path}: empty file, not a picpac binary store") from None
            raise CorruptError(f"{self.path}: its description after the records is damaged or truncated "
                               f"({exc})") from None
        self._offsets = offsets.astype(np.int64).tolist()
        self._count = len(offsets) - 1

    def _read(self, i: int) -> Record:
        data = self._view[self._offsets[i]:self._offsets[i + 1]]
        fields, label, group, meta = decode_record(data, self.path, i, self.check)
        return self._record(i, fields, label, group, meta)
