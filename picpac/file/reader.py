"""Reader: O(1), zero-copy random access to a picpac database through mmap; and the protocols every reader
implements (:class:`RecordReader`, :class:`IndexedReader`)."""
from __future__ import annotations

import mmap
from abc import abstractmethod
import operator
import os
import stat
import struct
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from ..errors import (CorruptError, CorruptRecordError, FormatError, MissingPathError, PicPacError,
                      PicPacTypeError, PicPacValueError)
from .layout import (ARRAYS_KEY, FIELD_ENTRY_SIZE, HEADER_SIZE, MAX_ARRAY_BYTES, NO_GROUP, RECORD_HEAD, ArraySpec,
                     HeaderState, crc32, crc32_joined, crc32_powers, field_table, load_json, parse_arrays,
                     read_commit, read_header)
from .mapping import advise, map_file


class Record:
    """One record: named fields (zero-copy memoryviews into the file), label, group and meta.

    ``record["image"]`` or ``record.fields["image"]`` gives a field; ``record.meta`` parses the
    record's JSON meta on first use. The views stay valid while the record is referenced, even after
    the Reader is closed.
    """

    __slots__ = ("index", "label", "group", "fields", "_meta", "_path")

    def __init__(self, index: int, label: float, group: int | None, fields: dict[str, memoryview],
                 meta: memoryview, path: str = "(unnamed file)"):
        self.index = index
        self.label = label
        self.group = group
        self.fields = fields
        self._meta: Any = meta
        self._path = path

    @property
    def meta(self) -> dict:
        """The record's meta dict ({} when none was stored); CorruptRecordError when it is not valid JSON."""
        if isinstance(self._meta, memoryview):
            self._meta = load_json(self._meta, lambda why: CorruptRecordError(
                self._path, self.index, f"has meta that is not valid JSON ({why})")) if self._meta.nbytes else {}
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


def gather_rows(data: np.ndarray, starts: np.ndarray, nbytes: int) -> np.ndarray:
    """Rows of ``nbytes`` bytes of ``data`` starting at ``starts`` (each within ``data``), copied at once."""
    if not len(starts):
        return np.empty((0, nbytes), np.uint8)
    windows = np.lib.stride_tricks.as_strided(data, (len(data) - nbytes + 1, nbytes), (1, 1), writeable=False)
    return windows[starts]


def _reopen(path: str, check: bool, seq: int, crc: int) -> Reader:
    reader = Reader(path, check=check)
    if (reader.header.current.seq, reader.header.current.crc) != (seq, crc):
        reader.close()
        raise PicPacError(f"{path}: the database changed after this Reader was sent to another process")
    return reader


_OPEN_ATTEMPTS = 20
READAHEAD_GAP = 2**20
"""Reader.prefetch joins records less than this many bytes apart into one range read ahead."""


def _changed(fd: int, size: int, header: bytes) -> bool:
    """Whether the file has grown or its header differs from ``header`` since they were read."""
    return os.fstat(fd).st_size != size or os.pread(fd, len(header), 0) != header


@runtime_checkable
class RecordReader(Protocol):
    """What every reader of records offers, whatever holds them: a picpac file (:class:`Reader`, ``RemoteReader``),
    its shards (``ShardedReader``), another storage format (``stores.StoreReader``), or a child process reading
    one once, in order (``stores.IsolatedReader``). ``path`` names what it reads (for messages), ``metadata`` is
    the dataset's, ``fields`` and ``classes`` come from it; ``len(r)``, the :class:`Record` s in order by
    iteration, ``close()`` and ``with``. The readers derive from it: ``classes`` and ``with`` are written here."""

    path: str
    metadata: dict
    fields: list[str]

    @abstractmethod
    def __len__(self) -> int:
        """The number of records."""

    @abstractmethod
    def __iter__(self) -> Iterator[Record]:
        """The records, in order."""

    @abstractmethod
    def close(self) -> None:
        """Release what the reader holds; records already read stay valid."""

    @property
    def classes(self) -> list[str]:
        """Class names from the dataset metadata ([] when none were stored)."""
        return list(self.metadata.get("classes") or [])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class IndexedReader(RecordReader, Protocol):
    """A reader of a picpac database (:class:`Reader`, ``RemoteReader``, ``ShardedReader``: what the stream and the
    tools take), whose index gives every record's label and group without reading it: ``labels`` and ``groups``
    (arrays over the records), ``r[i]`` and ``read(i, check)`` (record ``i``, verified against its checksum when
    ``check``; ``r[i]`` with the reader's ``check``), the declared ``arrays`` and ``array(i, field)``,
    ``prefetch(records)``, ``downloads`` (its records come over the network: worth reading ahead whatever the
    order), ``mapped`` (a local file mapped in memory, which the stream's batch path reads) and ``closed``."""

    check: bool
    labels: np.ndarray
    groups: np.ndarray
    downloads: bool
    mapped: bool

    @property
    @abstractmethod
    def arrays(self) -> dict[str, ArraySpec]:
        """The fixed-shape array fields the metadata declares (``{}`` for none; docs/arrays.md)."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""

    @abstractmethod
    def read(self, i: int, check: bool) -> Record:
        """Record ``i``, verified against its checksum when ``check`` is true."""

    @abstractmethod
    def array(self, i: int, field: str = "image") -> np.ndarray:
        """Record ``i``'s declared array ``field`` as a read-only NumPy array."""

    @abstractmethod
    def prefetch(self, records: np.ndarray) -> None:
        """Start reading ``records`` ahead, in the background (a hint: nothing is returned or raised)."""

    def __getitem__(self, i: int) -> Record:
        return self.read(i, self.check)

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self)):
            yield self[i]


class BaseReader(IndexedReader):
    """What the readers of one committed picpac file share: the index (``len``, ``labels``, ``groups``),
    ``fields``, ``metadata``, the declared ``arrays``, and records parsed from their bytes.
    A subclass sets ``path``, ``check``, ``metadata`` and ``index`` and calls :meth:`_load`; it provides
    :meth:`read` (record ``i``'s bytes, checked, parsed by :meth:`_parse`), ``prefetch``, ``close`` and
    ``closed``."""

    index: np.ndarray
    downloads = False

    @property
    def file_size(self) -> int:
        """Bytes of the file (local or remote) when it was opened."""
        return self._size

    def _load(self, state: HeaderState, size: int) -> None:
        """Take the committed ``state`` of a file of ``size`` bytes whose ``metadata`` and ``index`` are loaded."""
        self.header = state
        self._size = size
        self._count = len(self.index)
        self._offsets = self.index["offset"]
        self._sizes = self.index["size"]
        self._checksums = self.index["checksum"]
        self.labels: np.ndarray = self.index["label"]
        self.groups: np.ndarray = self.index["group"]
        self.fields: list[str] = list(self.metadata["fields"])
        self._arrays: dict[str, ArraySpec] | None = None

    @property
    def arrays(self) -> dict[str, ArraySpec]:
        """The fixed-shape array fields the metadata declares (``{}`` for none; docs/arrays.md)."""
        if self._arrays is None:  # an array larger than every record would be one no record holds
            self.check_file()  # the sizes are read from the index, which a mapped file holds
            limit = min(int(self._sizes.max()), self._size) if self._count else MAX_ARRAY_BYTES
            self._arrays = parse_arrays(self.metadata, self.path, limit=limit)
        return self._arrays

    def array(self, i: int, field: str = "image") -> np.ndarray:
        """Record ``i``'s declared array ``field`` as a read-only NumPy array (zero-copy where the file is mapped)."""
        spec = self.arrays.get(field)
        if spec is None:
            raise PicPacValueError(f"{self.path}: field {field!r} is not declared as an array in the metadata "
                                   f"'{ARRAYS_KEY}' (declared: {list(self.arrays)})")
        record = self[i]
        data = record.fields.get(field)
        if data is None:
            raise CorruptRecordError(self.path, record.index, f"has no {field!r} field, which the metadata "
                                     f"'{ARRAYS_KEY}' declares")
        if data.nbytes != spec.nbytes:
            raise CorruptRecordError(self.path, record.index, f"has {data.nbytes} bytes in its {field!r} field; "
                                     f"the declared {spec} array needs {spec.nbytes}")
        return np.frombuffer(data, spec.dtype).reshape(spec.shape)

    def __len__(self) -> int:
        return self._count

    def _position(self, i: int) -> int:
        """``i`` as a record number in range (negative counts from the end), else TypeError / IndexError."""
        try:
            i = operator.index(i)
        except TypeError:
            raise PicPacTypeError(f"record index must be an int, got {type(i).__name__}") from None
        n = self._count
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} out of range for {self.path} with {n} records")
        return i

    def _parse(self, i: int, data: memoryview) -> Record:
        try:
            nfields, _, meta_size = RECORD_HEAD.unpack_from(data)
            pos = RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields
            if pos + meta_size > len(data):  # before field_table(nfields): a crafted count builds no struct
                raise CorruptRecordError(self.path, i, f"has a damaged layout (its head claims {nfields} fields "
                                         f"and {meta_size} bytes of meta, more than its {len(data)} bytes)")
            table = field_table(nfields).unpack_from(data, RECORD_HEAD.size)
            names = self.fields
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
        return Record(i, self.labels.item(i), None if group == NO_GROUP else group, fields, meta, self.path)

    def check_file(self) -> None:
        """PicPacError when reading on is unsafe because the file changed under the reader; nothing to check
        for a reader that holds what it reads (see :meth:`Reader.check_file`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, records={self._count}, fields={self.fields})"


class Reader(BaseReader):
    """Read a picpac database.

    ``len(r)``, ``r[i]`` (a :class:`Record`), iteration, ``r.labels`` / ``r.groups`` (NumPy views
    of the index), ``r.fields``, ``r.classes``, ``r.metadata``. With ``check=True`` (the default)
    every record read is verified against its CRC32 and a damaged one raises
    :class:`CorruptRecordError`. A Reader may be shared by threads, survives ``fork`` and is
    pickled (for ``spawn`` workers) by path. Fields declared as fixed-shape arrays (``r.arrays``)
    read back with ``r.array(i)``; ``spans``, ``take`` and ``gather`` read many records at once
    (the stream's batch path).
    """

    mapped = True
    """The file is mapped in memory (the stream's batch path needs that)."""

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
            size, state = self._map_committed(fd)
        finally:
            os.close(fd)
        if state.damaged_slots:
            warnings.warn(f"{self.path}: header commit slot {state.damaged_slots} is damaged; reading the "
                          "newest intact commit (run `picpac verify`)", RuntimeWarning, stacklevel=2)
        self._view: memoryview | None = self._bytes.data
        self._load(state, size)
        self._stride: int | None = None  # see stride
        self._rows: np.ndarray | None = None  # the records' region as (count, stride) uint8
        self._powers: tuple[int, np.ndarray] | None = None  # crc32_powers for rows of whole records
        self._good: np.ndarray | None = None  # records whose checksum spans() found good, for once=True

    def _map_committed(self, fd: int) -> tuple[int, HeaderState]:
        """Map the file (as ``_bytes``, uint8; the mapping holds no descriptor) and load its newest commit:
        ``(size, header state)``.

        A Writer appending meanwhile grows the file and then writes a header slot, so the header is read
        before the size. A slot read while it is being written would make a sound file look damaged: when
        what was read fails and the file has changed since, it is read again.
        """
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise FormatError(f"{self.path}: is a directory, not a picpac database")
        for attempt in range(_OPEN_ATTEMPTS):
            # the header before the size: a slot is written after the commit it names, so that commit lies
            # within a size taken later (the other order races every commit)
            header = os.pread(fd, HEADER_SIZE, 0)
            st = os.fstat(fd)
            if st.st_size == 0:
                raise FormatError(f"{self.path}: empty file, not a picpac database")
            try:
                data = map_file(fd, st.st_size)
            except OSError as exc:
                raise FormatError(f"{self.path}: cannot map: {exc}") from None
            try:
                state = read_header(header, st.st_size, self.path)
                self.metadata, self.index = read_commit(data, st.st_size, state.current, self.path)
                if not state.damaged_slots or not _changed(fd, st.st_size, header):
                    self._bytes, self._identity = data, (st.st_dev, st.st_ino)
                    return st.st_size, state
                del self.index  # a slot torn while being written: read again (the index views the map)
            except CorruptError:
                if attempt == _OPEN_ATTEMPTS - 1 or not _changed(fd, st.st_size, header):
                    raise
        raise CorruptError(f"{self.path}: the header changed on each of {_OPEN_ATTEMPTS} reads "
                           "(a Writer committing faster than it can be opened?)")

    # -- vectorised reads (the stream's batch path) ------------------------------------------------
    def spans(self, records: np.ndarray, field: str, rows: np.ndarray | None = None, once: bool = False
              ) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """Where ``field`` lies in each of ``records``, parsed for all of them at once.

        Returns byte offsets and sizes (size -1: the record has no such field, or a problem) and the
        problems found, ``{i: reason}`` by position in ``records``: a damaged layout, or (with
        ``check``) a failed checksum, as :class:`CorruptRecordError` would say it. Offsets are in the
        file, or, when ``rows`` holds the records' bytes (from :meth:`take`), in ``rows.reshape(-1)``,
        which is then parsed and checked instead of the file. With ``once``, a record whose checksum
        this Reader has already found good (in an earlier call with ``once``) is not checked again.
        """
        if self._view is None:
            raise PicPacError(f"{self.path}: the Reader is closed")
        self.check_file()
        records = np.asarray(records, np.int64)
        sizes = self._sizes[records].astype(np.int64)
        if rows is None:
            data, offsets, end = self._bytes, self._offsets[records].astype(np.int64), self._size
        else:
            data, offsets, end = rows.reshape(-1), np.arange(len(records), dtype=np.int64) * rows.shape[1], rows.size
        if rows is not None and len(records) and (sizes == rows.shape[1]).all():
            same = self._same_layout(rows, field)
            if same is not None:  # every record's head and field table are the first one's
                starts = offsets + same[0]
                lengths = np.full(len(records), same[1], np.int64)
                problems = self._rows_checksum_problems(records, rows, once)
                lengths[list(problems)] = -1
                return starts, lengths, problems
        starts = np.zeros(len(records), np.int64)
        lengths = np.full(len(records), -1, np.int64)
        problems = {}
        # offsets and sizes may be anything up to 2**64 - 1 (negative as int64): no sum that can overflow
        fine = (offsets >= 0) & (offsets <= end) & (sizes >= RECORD_HEAD.size) & (sizes <= end - offsets)
        for i in np.flatnonzero(~fine).tolist():
            short = 0 <= sizes[i] < RECORD_HEAD.size
            problems[i] = "has a damaged layout" if short else "lies past the end of the file"
        head = np.zeros((len(records), RECORD_HEAD.size), np.uint8)
        head[fine] = gather_rows(data, offsets[fine], RECORD_HEAD.size)
        nfields = head[:, 0:2].copy().view("<u2")[:, 0].astype(np.int64)
        meta = head[:, 4:8].copy().view("<u4")[:, 0].astype(np.int64)
        position = offsets + RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields + meta
        fine &= position <= offsets + sizes
        wanted = self.fields.index(field) if field in self.fields else -1
        for k in range(int(nfields[fine].max(initial=0))):
            chosen = np.flatnonzero(fine & (nfields > k))
            entry = gather_rows(data, offsets[chosen] + RECORD_HEAD.size + FIELD_ENTRY_SIZE * k, FIELD_ENTRY_SIZE)
            ids = entry[:, 0:4].copy().view("<u4")[:, 0]
            size = np.minimum(entry[:, 4:12].copy().view("<u8")[:, 0], np.uint64(end)).astype(np.int64)
            fine[chosen[ids >= len(self.fields)]] = False  # a field id the metadata does not name, as r[i] says
            hit = ids == wanted
            starts[chosen[hit]], lengths[chosen[hit]] = position[chosen[hit]], size[hit]
            position[chosen] += size
        fine &= position == offsets + sizes
        for i in np.flatnonzero(~fine).tolist():
            problems.setdefault(i, "has a damaged layout (its fields do not add up to its size)")
        chosen = np.flatnonzero(fine & ~self._verified[records]) if once and self.check else np.flatnonzero(fine)
        if rows is not None and len(chosen) == len(rows) and (sizes == rows.shape[1]).all():
            pieces = iter(rows)  # rows of a C-contiguous array: no slicing
        else:
            begin, stop = offsets[chosen].tolist(), (offsets[chosen] + sizes[chosen]).tolist()
            view = data.data if rows is not None else self._view
            pieces = map(view.__getitem__, map(slice, begin, stop))
        failed = self._checksum_problems(records[chosen], pieces, chosen)
        if self.check:
            self._verified[records[np.setdiff1d(chosen, list(failed))]] = True
        problems.update(failed)
        lengths[list(problems)] = -1
        return starts, lengths, problems

    @property
    def _verified(self) -> np.ndarray:
        if self._good is None:
            self._good = np.zeros(self._count, bool)
        return self._good

    def _same_layout(self, rows: np.ndarray, field: str) -> tuple[int, int] | None:
        """(start, size) of ``field`` in every row, when all rows have the first row's head and field table
        (and it is a sound one); else None."""
        first = rows[0]
        if len(first) < RECORD_HEAD.size:
            return None
        nfields, _, meta = RECORD_HEAD.unpack_from(first)
        table = RECORD_HEAD.size + FIELD_ENTRY_SIZE * nfields
        if table > rows.shape[1] or not (rows[:, :table] == first[:table]).all():
            return None
        entries = field_table(nfields).unpack_from(first, RECORD_HEAD.size)
        position, found = table + meta, (0, -1)
        if any(fid >= len(self.fields) for fid in entries[::2]):
            return None  # the slow path names the damage
        for k in range(0, 2 * nfields, 2):
            if self.fields[entries[k]] == field:
                found = (position, entries[k + 1])
            position += entries[k + 1]
        return found if position == rows.shape[1] else None

    def _rows_checksum_problems(self, records: np.ndarray, rows: np.ndarray, once: bool) -> dict[int, str]:
        """:meth:`_checksum_problems` of whole records as the rows of a C-contiguous array: one CRC over all of
        them (zlib lets other threads run meanwhile) against the one their checksums give when joined;
        only when these differ is every record checked, to name the damaged ones. With ``once``, rows
        already found good are not checked again (unless others among them are new)."""
        if not self.check or not len(records) or (once and self._verified[records].all()):
            return {}
        powers = self._powers
        if powers is None or powers[0] != rows.shape[1] or len(powers[1]) < len(rows):
            powers = self._powers = (rows.shape[1], crc32_powers(rows.shape[1], max(len(rows), 256)))
        if zlib.crc32(rows.data) == crc32_joined(self._checksums[records], powers[1]):
            self._verified[records] = True
            return {}
        failed = self._checksum_problems(records, iter(rows))
        self._verified[records[np.setdiff1d(np.arange(len(records)), list(failed))]] = True
        return failed

    def _checksum_problems(self, records: np.ndarray, pieces: Iterator, where: np.ndarray | None = None
                           ) -> dict[int, str]:
        """With ``check``: the records whose bytes (``pieces``, one per record) fail their checksum, by
        position (``where[i]`` for the i-th piece when given)."""
        if not self.check or not len(records):
            return {}
        found = np.fromiter(map(zlib.crc32, pieces), np.int64, len(records))
        bad = np.flatnonzero(found != self._checksums[records])
        return {int(i if where is None else where[i]): "fails its checksum (damaged bytes)" for i in bad}

    @property
    def stride(self) -> int | None:
        """The record size, when every record has it and they lie back to back in index order within the
        file (as :func:`picpac.write_arrays` writes them); None for any other layout (and records lying
        past the end of the file, which :meth:`spans` names)."""
        if self._stride is None:
            self.check_file()
            sizes, offsets, n = self._sizes, self._offsets, self._count
            # checked first: within the file, offsets[0] + k * sizes[0] cannot wrap around in uint64
            inside = n > 0 and int(offsets[0]) + n * int(sizes[0]) <= self._size
            even = inside and bool((sizes == sizes[0]).all()) and bool(
                (offsets == offsets[0] + np.arange(n, dtype=np.uint64) * sizes[0]).all())
            self._stride = int(sizes[0]) if even else 0
        return self._stride or None

    def take(self, records: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The whole bytes of ``records`` as the rows of ``out`` (len(records), stride), by one ``np.take``
        from the records' region viewed as one array (needs :attr:`stride`); returns ``out``."""
        if self._view is None:
            raise PicPacError(f"{self.path}: the Reader is closed")
        self.check_file()
        stride = self.stride
        if stride is None:
            raise PicPacValueError(f"{self.path}: records are not of one size back to back within the file; "
                                   "use spans() and gather()")
        if self._rows is None:
            start = int(self._offsets[0])
            self._rows = self._bytes[start:start + self._count * stride].reshape(self._count, stride)
        return np.take(self._rows, np.asarray(records, np.int64), axis=0, out=out, mode="clip")

    def gather(self, starts: np.ndarray, nbytes: int, source: np.ndarray | None = None) -> np.ndarray:
        """``nbytes`` bytes from each of ``starts`` (offsets from :meth:`spans`: in the file, or in ``source``,
        the flat rows given to it), as a new (len(starts), nbytes) uint8 array: one vectorised copy."""
        if source is None:
            if self._view is None:
                raise PicPacError(f"{self.path}: the Reader is closed")
            self.check_file()
            source = self._bytes
        return gather_rows(source, np.asarray(starts, np.int64), nbytes)

    def prefetch(self, records: np.ndarray) -> None:
        """Ask the kernel to read the bytes of ``records`` into the page cache now, in the background
        (``madvise(MADV_WILLNEED)``), records less than READAHEAD_GAP apart as one range: so a file larger
        than memory read in chunked order (``shuffle_chunk``) is read by whole regions, not record by record."""
        records = np.asarray(records, np.int64)
        if self._view is None or not len(records) or self._cut_to() is not None:
            return  # a file cut shorter: the read that follows names it
        starts = np.minimum(self._offsets[records], self._size).astype(np.int64)
        ends = np.minimum(starts + self._sizes[records].astype(np.int64), self._size)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        breaks = np.flatnonzero(starts[1:] > ends[:-1] + READAHEAD_GAP) + 1
        page = mmap.PAGESIZE
        for begin, end in zip(starts[np.r_[0, breaks]].tolist(), ends[np.r_[breaks - 1, -1]].tolist()):
            begin -= begin % page
            if end > begin:
                advise(self._bytes, mmap.MADV_WILLNEED, begin, end - begin)

    @property
    def closed(self) -> bool:
        return self._view is None

    def _cut_to(self) -> int | None:
        """The file's size when it is now shorter than when it was mapped, else None."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # removed or renamed away: the mapping keeps its file
        return st.st_size if st.st_size < self._size and (st.st_dev, st.st_ino) == self._identity else None

    def check_file(self) -> None:
        """PicPacError naming the file when it is shorter than when it was mapped (truncated, or overwritten in
        place by a shorter file): the pages it lost (records, and the index the Reader reads from the file) would
        kill the process with SIGBUS when read. One ``stat``, before every record :meth:`read` reads and in each
        call of the batch path. Not caught: a file cut while a read is under way, and a file overwritten in place
        at its size or larger (reads follow its new bytes; ``check`` catches records that then fail their
        checksums). A file replaced by a rename (as picpac's tools write) is no danger: the mapping keeps the
        file it mapped."""
        size = self._cut_to()
        if size is not None:
            raise PicPacError(f"{self.path}: the file was cut to {size} bytes while it was being read "
                              f"(it had {self._size}): it was truncated or overwritten in place, and reading on "
                              "would kill the process (SIGBUS). Open it again; replace a file that is being read "
                              "by writing a new one and renaming it over the old")

    def read(self, i: int, check: bool) -> Record:
        """Record ``i``, verified against its checksum when ``check`` is true."""
        i = self._position(i)
        view = self._view
        if view is None:
            raise PicPacError(f"{self.path}: the Reader is closed")
        self.check_file()  # the index and the record lie in the mapped file
        offset = self._offsets.item(i)
        size = self._sizes.item(i)
        if offset + size > self._size:
            raise CorruptRecordError(self.path, i, "lies past the end of the file")
        data = view[offset:offset + size]
        if check and crc32(data) != self._checksums.item(i):
            raise CorruptRecordError(self.path, i, "fails its checksum (damaged bytes)")
        return self._parse(i, data)

    def close(self) -> None:
        """Release the mapping. Records and arrays still referenced stay valid until dropped (the mapping is
        unmapped when the last view of it goes)."""
        if self._view is None:
            return
        del self._bytes
        self._rows = None
        self._view.release()
        self._view = None

    def __reduce__(self) -> tuple[Callable[[str, bool, int, int], Reader], tuple[str, bool, int, int]]:
        return _reopen, (self.path, self.check, self.header.current.seq, self.header.current.crc)

