"""Sharded datasets: one dataset kept in many picpac files (docs/stream.md, "Sharded datasets").

A dataset is named by one picpac file, a list of files, a glob (``"data/train-*.picpac"``, its matches
sorted), or an index file (a name ending in ``.shards``). An index file is UTF-8 text with one shard
path per line, relative to the index file's folder (blank lines and lines starting with ``#`` are
ignored), or JSON ``{"shards": [...]}``. Each of these may be a URL (``s3://bucket/train-*.picpac``) read
by a :class:`~picpac.file.remote.RemoteReader`. :func:`resolve` turns any of these into the list of shard
paths, :func:`open_database` into a reader of one file or a :class:`ShardedReader` of several, which
reads the shards as one pool of records: record ``i`` of the pool is record ``i - offset`` of the shard
that holds it (the global position, as in the file that merges the shards in order).
"""
from __future__ import annotations

import bisect
import glob
import os
import posixpath
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import MissingPathError, PicPacError, PicPacTypeError, PicPacValueError
from .durable import replace, temp_path
from .layout import SHARD_INDEX_HEAD, ArraySpec, load_json
from .reader import BaseReader, IndexedReader, Reader, Record
from .remote import RemoteOptions, RemoteReader, is_remote, remote_glob, remote_text

INDEX_SUFFIX = ".shards"
GLOB_CHARS = "*?["


def is_index(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a shard index file (by its suffix ``.shards``)."""
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(INDEX_SUFFIX)


def is_glob(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a glob pattern rather than an existing file."""
    path = os.fspath(path)
    if is_remote(path):  # "?" starts a URL's query string (a signed URL's), so only "*" and "[" make a glob
        return any(ch in path.split("?", 1)[0] for ch in "*[")
    return any(ch in path for ch in GLOB_CHARS) and not os.path.exists(path)


def read_index(path: str | os.PathLike, remote: RemoteOptions | None = None) -> list[str]:
    """The shard paths an index file names (relative ones resolved against its folder), each local one
    checked to exist: a missing one is a MissingPathError naming it; an index naming none is a
    PicPacValueError. An index at a URL names URLs (relative ones resolved against its folder's URL)."""
    path = os.fspath(path)
    if is_remote(path):
        names = _index_names(path, remote_text(path, remote or RemoteOptions()))
        base = posixpath.dirname(path)
        return [_remote_shard(path, n, base) for n in names]
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise MissingPathError(f"{path}: no such shard index file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PicPacValueError(f"{path}: cannot read the shard index: {exc}") from None
    names = _index_names(path, text)
    base = os.path.dirname(os.path.abspath(path))
    shards = [n if os.path.isabs(n) or is_remote(n) else os.path.join(base, n) for n in names]
    for name, shard in zip(names, shards):
        if not is_remote(shard) and not os.path.isfile(shard):
            raise MissingPathError(f"{path}: shard {name!r} does not exist ({shard})")
    return shards


def _remote_shard(index: str, name: str, base: str) -> str:
    """The URL of shard ``name`` of the remote ``index`` (whose folder's URL is ``base``): a name relative to
    it, or a URL of the index's own scheme and server. An index from a server never makes a reader open a
    local file (an absolute path, a FIFO that blocks) or reach another server."""
    if not name.startswith("/") and "://" not in name:
        return posixpath.join(base, name)
    scheme, _, rest = index.partition("://")
    own = f"{scheme}://{rest.split('/', 1)[0]}/"
    if name.startswith(own):
        return name
    raise PicPacValueError(f"{index}: shard {name!r:.200} is not on the index's own server ({own}); a remote "
                           "shard index names its shards relative to its folder, or by URLs that start with "
                           f"{own}")


def _index_names(path: str, text: str) -> list[str]:
    """The shard names an index file's text lists (one per line, or JSON)."""
    if text.lstrip().startswith("{"):
        data = load_json(text.encode("utf-8"), lambda why: PicPacValueError(
            f"{path}: the shard index is not valid JSON ({why})"))
        names = data.get("shards") if isinstance(data, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise PicPacValueError(f"{path}: a JSON shard index is {{\"shards\": [\"a.picpac\", ...]}} "
                                   "(a list of shard paths)")
    else:
        names = [line.strip() for line in text.splitlines()]
        names = [n for n in names if n and not n.startswith("#")]
    if not names:
        raise PicPacValueError(f"{path}: the shard index names no shards (one shard path per line, relative "
                               "to the index file's folder)")
    return names


def write_index(path: str | os.PathLike, shards: Sequence[str | os.PathLike]) -> None:
    """Write an index file naming ``shards`` (relative to its folder), atomically: temp file, fsync, rename."""
    path = os.fspath(path)
    if not shards:
        raise PicPacValueError(f"{path}: a shard index needs at least one shard")
    base = os.path.dirname(os.path.abspath(path))
    lines = [os.path.relpath(os.path.abspath(os.fspath(s)), base) for s in shards]
    temp = temp_path(path)
    try:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(f"{SHARD_INDEX_HEAD.decode()}: one shard per line, relative to this file's folder\n")
            f.write("".join(f"{line}\n" for line in lines))
        replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def resolve(spec: Any, remote: RemoteOptions | None = None) -> list[str]:
    """The shard paths of a dataset spec: a path or URL (one file, a glob, or an index file) or a list of them."""
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        if is_index(path):
            return read_index(path, remote)
        if is_glob(path):
            found = remote_glob(path, remote or RemoteOptions()) if is_remote(path) else sorted(glob.glob(path))
            if not found:
                raise MissingPathError(f"{path}: no file matches this pattern")
            return found
        return [path]
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise PicPacValueError("the list of shards is empty: name at least one picpac file")
        paths: list[str] = []
        for item in spec:
            if not isinstance(item, (str, os.PathLike)):
                raise PicPacTypeError(f"a shard is a path (str or os.PathLike), got {type(item).__name__}")
            paths += resolve(item, remote)
        return paths
    raise PicPacTypeError(f"a database is a path, a glob, an index file or a list of paths, "
                          f"got {type(spec).__name__}")


def open_file(path: str, *, check: bool = True, remote: RemoteOptions | None = None) -> Reader | RemoteReader:
    """A Reader for a local file, a RemoteReader for a URL (read with ``remote``'s options)."""
    return RemoteReader(path, check=check, options=remote) if is_remote(path) else Reader(path, check=check)


def open_database(spec: Any, *, check: bool = True, remote: RemoteOptions | None = None
                  ) -> Reader | RemoteReader | ShardedReader:
    """A reader of one file, or a ShardedReader of several (a list, a glob or an index file); URLs are read
    with ``remote``'s options (the defaults of :class:`RemoteOptions` when None)."""
    sharded = isinstance(spec, (list, tuple)) or is_index(spec) or is_glob(spec)
    paths = resolve(spec, remote)
    if not sharded:
        return open_file(paths[0], check=check, remote=remote)
    name = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else None
    return ShardedReader(paths, check=check, name=name, remote=remote)


def _reopen(paths: list[str], check: bool, name: str | None, commits: list[tuple[int, int]],
            remote: RemoteOptions | None = None) -> ShardedReader:
    reader = ShardedReader(paths, check=check, name=name, remote=remote)
    if [(r.header.current.seq, r.header.current.crc) for r in reader.shards] != commits:
        reader.close()
        raise PicPacError(f"{reader.path}: a shard changed after this reader was sent to another process")
    return reader


class ShardedReader(IndexedReader):
    """The shards of a dataset read as one pool: ``len``, ``r[i]`` (global record ``i``), iteration,
    ``labels``/``groups`` (the shards' joined), ``fields``, ``classes``, ``arrays``, ``metadata`` (the
    first shard's). Shares, survives fork and pickles (by paths) like a Reader. The shards' declared
    arrays must agree. ``shards``: the Readers, ``offsets``: the global position of each one's first record.
    """

    mapped = False

    def __init__(self, paths: Sequence[str | os.PathLike], *, check: bool = True, name: str | None = None,
                 remote: RemoteOptions | None = None):
        if not paths:
            raise PicPacValueError("a sharded dataset needs at least one shard")
        self.paths = [os.fspath(p) for p in paths]
        self.check = bool(check)
        self.name = name
        self.remote = remote
        self.path = name if name is not None else \
            f"{self.paths[0]} (+{len(self.paths) - 1} shards)" if len(self.paths) > 1 else self.paths[0]
        self.shards: list[BaseReader] = []
        try:
            self._open_shards()
            counts = [len(r) for r in self.shards]
            self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._starts = self.offsets[:-1].tolist()
            self._count = int(self.offsets[-1])
            self.labels = np.concatenate([r.labels for r in self.shards])
            self.groups = np.concatenate([r.groups for r in self.shards])
            fields: list[str] = []
            for r in self.shards:
                fields += [f for f in r.fields if f not in fields]
            self.fields = fields
            self.metadata = self.shards[0].metadata
            self._arrays: dict[str, ArraySpec] | None = None
        except BaseException:
            self.close()
            raise

    def _open_shards(self) -> None:
        """Open every shard into ``shards``; remote ones on a few threads, since each costs round trips."""
        remote = [p for p in self.paths if is_remote(p)]
        opened: dict[str, BaseReader] = {}
        if len(remote) > 1:
            with ThreadPoolExecutor(min(8, len(remote))) as pool:
                futures = {p: pool.submit(open_file, p, check=self.check, remote=self.remote) for p in remote}
                for p, future in futures.items():
                    try:
                        opened[p] = future.result()
                    except BaseException:
                        for f in futures.values():
                            if not f.exception():
                                f.result().close()
                        raise
        for p in self.paths:
            self.shards.append(opened.pop(p) if p in opened else open_file(p, check=self.check, remote=self.remote))

    def prefetch(self, records: Sequence[int]) -> None:
        """Read ahead global ``records``: each shard's ``prefetch`` (a download, or the kernel's readahead)."""
        records = np.asarray(records, np.int64)
        shards = np.searchsorted(self.offsets, records, side="right") - 1
        for k in np.unique(shards).tolist():
            self.shards[k].prefetch(records[shards == k] - self.offsets[k])

    @property
    def downloads(self) -> bool:
        """Whether a shard is read over the network."""
        return any(shard.downloads for shard in self.shards)

    @property
    def arrays(self) -> dict[str, ArraySpec]:
        """The declared arrays, the same in every shard (else a PicPacValueError naming the first that differs)."""
        if self._arrays is None:
            first = self.shards[0].arrays
            for r in self.shards[1:]:
                if r.arrays != first:
                    raise PicPacValueError(f"{r.path}: its declared arrays {r.arrays} differ from those of "
                                           f"{self.shards[0].path} ({first}); the shards of a dataset must agree")
            self._arrays = first
        return self._arrays

    @property
    def closed(self) -> bool:
        return not self.shards or self.shards[0].closed

    def locate(self, i: int) -> tuple[int, int]:
        """(shard, record in it) of global record ``i``."""
        n = self._count
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} out of range for {self.path} with {n} records")
        shard = bisect.bisect_right(self._starts, i) - 1
        return shard, i - self._starts[shard]

    def __len__(self) -> int:
        return self._count

    def read(self, i: int, check: bool) -> Record:
        """Global record ``i``; a shard cut shorter since it was opened is a PicPacError naming it (as a Reader's)."""
        shard, local = self.locate(int(i))
        return self.shards[shard].read(local, check)

    def array(self, i: int, field: str = "image") -> np.ndarray:
        shard, local = self.locate(int(i))
        return self.shards[shard].array(local, field)

    def close(self) -> None:
        for r in self.shards:
            r.close()

    def __reduce__(self):
        return _reopen, (self.paths, self.check, self.name,
                         [(r.header.current.seq, r.header.current.crc) for r in self.shards], self.remote)

    def __repr__(self) -> str:
        return f"ShardedReader({self.path!r}, shards={len(self.shards)}, records={self._count})"
