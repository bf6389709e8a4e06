"""Binary + index: a data file of PPR1 records and a ``.idx`` NumPy file of their offsets.

The two files are one store: the data file's description records the index's size and CRC32, the
writer replaces them in an order that never shows a data file beside another store's index
(:func:`pair_steps`), and the reader refuses a pair that does not belong together.
"""
from __future__ import annotations

import array
import io
import json
import os
import stat
import zlib
from collections.abc import Callable

import numpy as np
from numpy.lib import format as npy

from ..errors import CorruptError, FormatError, MissingPathError, PicPacValueError
from ..file import durable
from ..file.kinds import file_kind
from ..file.layout import load_json
from ..file.reader import Record
from .base import MappedReader, StoreWriter
from .records import decode_record, encode_record


STORE = "picpac-binary"
MAX_DESCRIPTION = 64 << 20
"""The most bytes the JSON description after the records may take (it holds the dataset metadata)."""
_MIN_RECORD = len(encode_record({}))  # a PPR1 record of no fields is its head alone
_MAX_NPY_HEADER = 1 << 16


def index_path(path: str) -> str:
    """The index file of a binary store: ``path + ".idx"``."""
    return path + ".idx"


def _npy(offsets: array.array) -> bytes:
    out = io.BytesIO()
    np.save(out, np.asarray(offsets, "<i8"))
    return out.getvalue()


def pair_steps(data_temp: str, index_temp: str, path: str, sync: bool = True
               ) -> list[tuple[str, Callable[[], None]]]:
    """The steps, in order, that move a finished data file and index to ``path`` and ``path.idx``.

    A crash (or a power loss: each step is made durable before the next) after any step leaves one
    of three states, never a data file beside another store's index:

    * before "remove the old data file": the old pair (or no store), plus the two temporaries;
    * from it to "rename the data file": no data file, so no store (a reader raises
      MissingPathError); the index is the old one until "rename the index", then the new one, and
      the next writer replaces it;
    * after "rename the data file": the new pair.

    The temporaries a crash leaves are removed by the next writer of ``path`` once their process
    is gone (:func:`picpac.file.durable.remove_stale_temps`). Two writers racing on one path can
    still interleave their renames; the reader's pair check then refuses the mixed pair.
    """
    directory, index = os.path.dirname(os.path.abspath(path)), index_path(path)

    def remove_old_data() -> None:
        if os.path.lexists(path):
            os.unlink(path)

    def sync_directory() -> None:
        durable.fsync_directory(directory)

    steps = [("fsync the temporaries", lambda: (durable.fsync_path(data_temp), durable.fsync_path(index_temp))),
             ("remove the old data file", remove_old_data),
             ("fsync the directory", sync_directory),
             ("rename the index", lambda: os.replace(index_temp, index)),
             ("fsync the directory", sync_directory),
             ("rename the data file", lambda: os.replace(data_temp, path)),
             ("fsync the directory", sync_directory)]
    return [step for step in steps if sync or not step[0].startswith("fsync")]


class BinaryWriter(StoreWriter):
    """A data file (PPR1 records back to back, then the store's JSON description with the dataset
    metadata, the record count and the index's size and CRC32) and ``<path>.idx``, a NumPy ``.npy``
    int64 array of N+1 offsets: record i is ``data[idx[i]:idx[i+1]]``, the description ``data[idx[N]:]``.
    The index lies beside the data file's target when ``path`` is a symbolic link."""

    kind = "binary"

    def _outputs(self) -> list[str]:
        return [self._target, index_path(self._target)]

    def _check_target(self) -> None:
        super()._check_target()
        index = index_path(self._target)
        if os.path.islink(index):
            raise PicPacValueError(f"{index}: the index of binary store {self.path} is a symbolic link; the two "
                                   "files of a binary store are written together in one directory (link the "
                                   "data file only: the index is found beside its target)")
        if os.path.isdir(index):
            raise PicPacValueError(f"{index}: is a directory; not replacing it with the index of {self.path}")

    def _start(self) -> None:
        self._index_temp = durable.temp_path(index_path(self._target))
        self._file = open(self._temp, "xb")
        self._offsets = array.array("q", [0])

    def _temps(self) -> list[str]:
        return [self._temp, self._index_temp]

    def _write(self, index, fields, label, group, meta) -> None:
        record = encode_record(fields, label, group, meta)
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))

    def _finish(self) -> None:
        index = _npy(self._offsets)
        description = json.dumps({"store": STORE, "version": 1, "serialisation": "PPR1", "count": self._count,
                                  "index": {"bytes": len(index), "crc32": zlib.crc32(index)},
                                  "metadata": self.metadata}).encode()
        if len(description) > MAX_DESCRIPTION:
            raise PicPacValueError(f"{self.path}: the dataset metadata takes {len(description)} bytes, over the "
                                   f"{MAX_DESCRIPTION} a binary store holds; store large data as fields")
        self._file.write(description)
        self._file.close()
        with open(self._index_temp, "xb") as out:
            out.write(index)

    def _replace(self, temp: str, path: str) -> None:
        self._check_target()
        for _, step in pair_steps(temp, self._index_temp, path, self._sync):
            step()

    def _release(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


def find_index(path: str) -> str:
    """The index of the binary store ``path``: beside the data file's target when ``path`` is a
    symbolic link, else (or when there is none there) ``path.idx``."""
    for candidate in dict.fromkeys([index_path(os.path.realpath(path)), index_path(path)]):
        if os.path.exists(candidate):
            return candidate
    raise MissingPathError(f"{index_path(path)}: the index of binary store {path} does not exist")


def _read_index(idx: str, data_size: int) -> bytes:
    """The index file's bytes, refused unread when it is larger than any index of ``data_size`` bytes."""
    limit = _MAX_NPY_HEADER + 8 * (data_size // _MIN_RECORD + 1)
    fd = os.open(idx, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FormatError(f"{idx}: is {file_kind(mode)}, not the index of a binary store")
    with open(fd, "rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise CorruptError(f"{idx}: over {limit} bytes, more offsets than its data file of {data_size} bytes "
                           "can hold: not its index")
    return raw


def _parse_offsets(raw: bytes, idx: str) -> np.ndarray:
    """The offsets in the ``.npy`` bytes ``raw``: a 1-D integer array whose header agrees with its size."""
    stream = io.BytesIO(raw)
    try:
        version = npy.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unknown .npy version {version}")
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read(stream, max_header_size=_MAX_NPY_HEADER)
    except Exception as exc:  # numpy parses the header with ast: any failure means a damaged header
        raise FormatError(f"{idx}: not a NumPy offsets file ({type(exc).__name__}: {exc})"[:500]) from None
    if len(shape) != 1 or dtype.kind not in "iu" or dtype.itemsize > 8 or not shape[0]:
        raise FormatError(f"{idx}: not a 1-D integer offsets array (dtype {dtype}, shape {shape})"[:500])
    body = memoryview(raw)[stream.tell():]
    if len(body) != shape[0] * dtype.itemsize:
        raise CorruptError(f"{idx}: its header declares {shape[0]} offsets, it holds {len(body)} bytes "
                           "(truncated or damaged)")
    return np.frombuffer(body, dtype)


class BinaryReader(MappedReader):
    kind = "binary"

    def _open(self) -> None:
        view = self._map(self.path)
        if not len(view):
            raise FormatError(f"{self.path}: empty file, not a picpac binary store")
        idx = find_index(self.path)
        raw = _read_index(idx, len(view))
        offsets = _parse_offsets(raw, idx)
        if offsets[0] != 0 or (offsets[1:] < offsets[:-1]).any() or offsets[-1] > len(view):
            raise CorruptError(f"{self.path}: does not match its index {idx} (the records end at {offsets[-1]}, "
                               f"the file has {len(view)} bytes, the offsets must rise from 0: truncated, "
                               "damaged, or the index of another store)")
        offsets = offsets.astype(np.int64)
        count = len(offsets) - 1
        head = self._description(view[int(offsets[-1]):], idx)
        recorded = head.get("index")
        # Stores written before the pair check lack "count" and "index"; their offsets were checked above.
        if "count" in head or recorded is not None:
            crc = zlib.crc32(raw)
            if not (isinstance(recorded, dict) and head.get("count") == count and recorded.get("bytes") == len(raw)
                    and recorded.get("crc32") == crc):
                raise CorruptError(f"{self.path}: its index {idx} belongs to another store (the data file "
                                   f"describes {head.get('count')!r} records and an index {recorded!r}; the index "
                                   f"has {count} records, {len(raw)} bytes, CRC32 {crc}): the pair was replaced "
                                   "part way or mixed up; write the store again")
        self.metadata = head["metadata"]
        self._offsets = offsets
        self._count = count

    def _description(self, tail: memoryview, idx: str) -> dict:
        """The JSON after the records, checked: a picpac-binary description with a metadata dict."""
        if len(tail) > MAX_DESCRIPTION:
            raise CorruptError(f"{self.path}: {len(tail)} bytes after the records its index {idx} lists, over the "
                               f"{MAX_DESCRIPTION} of a description: damaged, or the index of another store")
        head = load_json(tail, lambda reason: CorruptError(
            f"{self.path}: its description after the records is damaged or truncated, or its index {idx} belongs "
            f"to another store ({reason})"[:500]))
        if not isinstance(head, dict) or head.get("store") != STORE:
            raise FormatError(f"{self.path}: not a picpac binary store (no {STORE!r} description after the records)")
        metadata = head.get("metadata")
        fields = metadata.get("fields", []) if isinstance(metadata, dict) else None
        if not (isinstance(fields, list) and all(isinstance(name, str) for name in fields)):
            raise CorruptError(f"{self.path}: its description's metadata is not a dict with a list of field names")
        return head

    def _read(self, i: int) -> Record:
        data = self._view[int(self._offsets[i]):int(self._offsets[i + 1])]
        fields, label, group, meta = decode_record(data, self.path, i, self.check)
        return self._record(i, fields, label, group, meta)
