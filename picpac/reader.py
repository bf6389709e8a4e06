"""Reader: O(1), zero-copy random access to a picpac database through mmap."""
from __future__ import annotations

import json
import mmap
import operator
import os
import stat
import struct
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import (CorruptRecordError, FormatError, MissingPathError, PicPacError,
                     PicPacTypeError)
from .format import (FIELD_ENTRY_SIZE, NO_GROUP, RECORD_HEAD, crc32, field_table, read_commit,
                     read_header)


class Record:
    """One record: named fields (zero-copy memoryviews into the file), label, group and meta.

    ``record["image"]`` or ``record.fields["image"]`` gives a field; ``record.meta`` parses the
    record's JSON meta on first use. The views stay valid while the record is referenced, even after
    the Reader is closed.
    """

    __slots__ = ("index", "label", "group", "fields", "_meta")

    def __init__(self, index: int, label: float, group: int | None, fields: dict[str, memoryview],
                 meta: memoryview):
        self.index = index
        self.label = label
        self.group = group
        self.fields = fields
        self._meta: Any = meta

    @property
    def meta(self) -> dict:
        """The record's meta dict ({} when none was stored)."""
        if isinstance(self._meta, memoryview):
            self._meta = json.loads(self._meta.tobytes()) if self._meta.nbytes else {}
        return self._meta

    def __getitem__(self, name: str) -> memoryview:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"record {self.index} has no field {name!r}; it has {list(self.fields)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v.nbytes}B" for k, v in self.fields.items())
        return f"Record(index={self.index}, label={self.label}, group={self.group}, {sizes})"


def _reopen(path: str, check: bool, seq: int, crc: int) -> Reader:
    reader = Reader(path, check=check)
    if (reader.header.current.seq, reader.header.current.crc) != (seq, crc):
        reader.close()
        raise PicPacError(f"{path}: the database changed after this Reader was sent to another process")
    return reader


class Reader:
    """Read a picpac database.

    ``len(r)``, ``r[i]`` (a :class:`Record`), iteration, ``r.labels`` / ``r.groups`` (NumPy views
    of the index), ``r.fields``, ``r.classes``, ``r.metadata``. With ``check=True`` (the default)
    every record read is verified against its CRC32 and a damaged one raises
    :class:`CorruptRecordError`. A Reader may be shared by threads, survives ``fork`` and is
    pickled (for ``spawn`` workers) by path.
    """

    def __init__(self, path: str | os.PathLike, *, check: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise PicPacTypeError(f"path must be str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        self.check = bool(check)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingPathError(f"{self.path}: no such file") from None
        except OSError as exc:
            raise PicPacError(f"{self.path}: cannot open: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            size = st.st_size
            if stat.S_ISDIR(st.st_mode):
                raise FormatError(f"{self.path}: is a directory, not a picpac database")
            if size == 0:
                raise FormatError(f"{self.path}: empty file, not a picpac database")
            try:
                self._mmap = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            except (OSError, ValueError) as exc:
                raise FormatError(f"{self.path}: cannot map: {exc}") from None
        finally:
            os.close(fd)
        try:
            state = read_header(self._mmap, size, self.path)
            self.metadata, self.index = read_commit(self._mmap, size, state.current, self.path)
        except BaseException:
            self._mmap.close()
            raise
        if state.damaged_slots:
            warnings.warn(f"{self.path}: header commit slot {state.damaged_slots} is damaged; reading the "
                          "newest intact commit (run `picpac verify`)", RuntimeWarning, stacklevel=2)
        self.header = state
        self._view = memoryview(self._mmap)
        self._size = size
        self._count = len(self.index)
        self._offsets = self.index["offset"]
        self._sizes = self.index["size"]
        self._checksums = self.index["checksum"]
        self.labels: np.ndarray = self.index["label"]
        self.groups: np.ndarray = self.index["group"]
        self.fields: list[str] = list(self.metadata["fields"])

    @property
    def classes(self) -> list[str]:
        """Class names from the dataset metadata ([] when none were stored)."""
        return list(self.metadata.get("classes") or [])

    @property
    def closed(self) -> bool:
        return self._view is None

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> Record:
        return self.read(i, self.check)

    def read(self, i: int, check: bool) -> Record:
        """Record ``i``, verified against its checksum when ``check`` is true."""
        try:
            i = operator.index(i)
        except TypeError:
            raise PicPacTypeError(f"record index must be an int, got {type(i).__name__}") from None
        n = self._count
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} out of range for {self.path} with {n} records")
        view = self._view
        if view is None:
            raise PicPacError(f"{self.path}: the Reader is closed")
        offset = self._offsets.item(i)
        size = self._sizes.item(i)
        if offset + size > self._size:
            raise CorruptRecordError(self.path, i, "lies past the end of the file")
        data = view[offset:offset + size]
        if check and crc32(data) != self._checksums.item(i):
            raise CorruptRecordError(self.path, i, "fails its checksum (damaged bytes)")
        return self._parse(i, data)

    def _parse(self, i: int, data: memoryview) -> Record:
        try:
            nfields, _, meta_size = RECORD_HEAD.unpack_from(data)
            table = field_table(nfields).unpack_from(data, RECORD_HEAD.size)
            names = self.fields
            pos = RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields
            meta = data[pos:pos + meta_size]
            pos += meta_size
            fields = {}
            for k in range(0, 2 * nfields, 2):
                end = pos + table[k + 1]
                fields[names[table[k]]] = data[pos:end]
                pos = end
        except (struct.error, IndexError) as exc:
            raise CorruptRecordError(self.path, i, f"has a damaged layout ({exc})") from None
        if pos != len(data):
            raise CorruptRecordError(self.path, i, f"has a damaged layout (fields end at {pos}, "
                                     f"record size {len(data)})")
        group = self.groups.item(i)
        return Record(i, self.labels.item(i), None if group == NO_GROUP else group, fields, meta)

    def __iter__(self) -> Iterator[Record]:
        for i in range(self._count):
            yield self[i]

    def close(self) -> None:
        """Release the mapping. Records and arrays still referenced stay valid until dropped."""
        if self._view is None:
            return
        self._view.release()
        self._view = None
        try:
            self._mmap.close()
        except BufferError:
            pass  # views handed out keep the mapping alive; it is unmapped when the last one goes

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self):
        return _reopen, (self.path, self.check, self.header.current.seq, self.header.current.crc)

    def __repr__(self) -> str:
        return f"Reader({self.path!r}, records={self._count}, fields={self.fields})"

