"""Remote picpac files through fsspec (``s3://``, ``gs://``, ``http(s)://``, ...; docs/stream.md, "Object storage").

A :class:`RemoteReader` reads a file with range requests: its header and committed index when it opens,
its records on demand. What it downloads goes through a :class:`BlockCache`, fixed-size blocks of the
file kept as files under ``cache_dir`` and evicted least recently used first once they pass ``cache_limit``;
the threads and processes of a stream share it. ``prefetch`` downloads the blocks of records about to be
read on a few threads. Every record is checked against its CRC32 when it arrives, and a failed range read
is retried with exponential backoff before it becomes a :class:`RemoteReadError`. Every request is
abandoned once it has taken ``timeout`` seconds, however its bytes arrive (the clients' own timeouts bound
each socket read, so a server that trickles a byte at a time would hold a read for ever).
"""
from __future__ import annotations

import functools
import hashlib
import os
import random
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..errors import (CorruptError, CorruptRecordError, MissingPathError, PicPacError, PicPacValueError, RemoteReadError,
                      RemoteTimeoutError)
from .layout import HEADER_SIZE, check_commit_bounds, crc32, read_commit, read_header
from .reader import BaseReader, Record
from .sizes import parse_size

T = TypeVar("T")
MIN_BLOCK, MAX_BLOCK = 2**16, 2**28
BLOCK_SIZE, CACHE_LIMIT, RETRIES = 4 * 2**20, 4 * 2**30, 5
"""The defaults of RemoteOptions (and of the stream's keys remote_block_size, cache_limit, remote_retries)."""
MAX_INDEX_BYTES = 2**31
"""The largest committed metadata and index a remote file may claim (about 60 million records)."""
MAX_BACKOFF = 10.0
REMOTE_TIMEOUT, MAX_TIMEOUT = 30.0, 86400.0
"""The seconds one request may take by default (RemoteOptions.timeout; the stream's timeout=None), and at most."""
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
CACHE_FOLDER = re.compile(r"[0-9a-f]{32}")
"""The names of the block cache's folders (one per remote file and commit)."""
CACHE_FILE = re.compile(r"(?:index|b[0-9]+)(?:\.([0-9]+)-[0-9]+\.tmp)?")
"""The names of the files the block cache counts and evicts (in its folders): blocks, and the temp files
they are written to (``b12.<pid>-<thread>.tmp``; group 1 is the writer's pid)."""
STALE_TEMP = 600.0
"""Seconds after which a temp file of the cache is left over (its writer was killed mid-write), whoever wrote it."""
CACHE_MARK = ".picpac-block-cache"
"""The empty file that marks a folder as the block cache's own."""


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL that fsspec reads (``s3://b/k``; ``file://`` and plain paths are local)."""
    return isinstance(path, str) and bool(_URL.match(path)) and not path.startswith("file://")


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/picpac`` (``~/.cache/picpac``): private to the user, unlike a shared temp folder."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "picpac")


@dataclass(frozen=True)
class RemoteOptions:
    """How remote files are read. ``cache_limit`` and ``block_size`` are bytes or sizes ("4GiB");
    ``retries``: further attempts of a failed request, waiting ``backoff`` seconds, doubled each time
    (with jitter, at most 10 s); ``timeout``: the seconds one request may take in all (a slower one is
    abandoned and counts as failed); ``storage_options``: given to fsspec (endpoint, credentials, ...)."""

    cache_dir: str | None = None
    cache_limit: int | str = CACHE_LIMIT
    block_size: int | str = BLOCK_SIZE
    retries: int = RETRIES
    backoff: float = 0.2
    prefetch_threads: int = 4
    storage_options: dict[str, Any] = field(default_factory=dict)
    timeout: float = REMOTE_TIMEOUT

    def __post_init__(self) -> None:
        block = parse_size(self.block_size, "block_size")
        limit = parse_size(self.cache_limit, "cache_limit")
        if not MIN_BLOCK <= block <= MAX_BLOCK:
            raise PicPacValueError(f"block_size must be 64KiB to 256MiB, got {self.block_size!r}")
        if limit < 2 * block:
            raise PicPacValueError(f"cache_limit ({self.cache_limit!r}) must hold at least two blocks of "
                                   f"block_size {self.block_size!r}")
        for name, low in (("retries", 0), ("prefetch_threads", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100:
                raise PicPacValueError(f"{name} must be an int in [{low}, 100], got {value!r}")
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, (int, float)) or \
                not 0 <= self.backoff <= MAX_BACKOFF:
            raise PicPacValueError(f"backoff must be 0 to {MAX_BACKOFF} seconds, got {self.backoff!r}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or \
                not 0 < self.timeout <= MAX_TIMEOUT:
            raise PicPacValueError(f"timeout must be > 0 and at most {MAX_TIMEOUT:g} seconds, got {self.timeout!r}")
        if not isinstance(self.storage_options, dict):
            raise PicPacValueError(f"storage_options must be a dict (fsspec's options), got "
                                   f"{type(self.storage_options).__name__}")
        object.__setattr__(self, "block_size", block)
        object.__setattr__(self, "cache_limit", limit)
        object.__setattr__(self, "cache_dir", os.path.abspath(os.path.expanduser(self.cache_dir or default_cache_dir())))

    def deadline(self) -> float:
        """The most seconds one read may take: every attempt at ``timeout``, and the waits between them."""
        waits = sum(min(self.backoff * 2**attempt, MAX_BACKOFF) for attempt in range(self.retries))
        return (self.retries + 1) * self.timeout + waits


def filesystem(url: str, options: RemoteOptions) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path within it; PicPacError naming what to install."""
    try:
        import fsspec.core
    except ImportError:
        raise PicPacError(f"{url}: reading remote files needs fsspec: pip install 'picpac[remote]'") from None
    try:
        return fsspec.core.url_to_fs(url, **options.storage_options)
    except (ImportError, ValueError) as exc:
        raise PicPacError(f"{url}: fsspec cannot open this URL ({exc}); install its filesystem (s3fs for "
                          "s3://, gcsfs for gs://, aiohttp for http://) or fix storage_options") from None


def remote_glob(pattern: str, options: RemoteOptions) -> list[str]:
    """The URLs that match a remote glob, sorted."""
    fs, path = filesystem(pattern, options)
    found = retrying("listing", pattern, options, lambda: bounded(fs, options.timeout, "glob", path))
    return sorted(fs.unstrip_protocol(p) for p in found)


def remote_text(url: str, options: RemoteOptions, limit: int = 2**24) -> str:
    """A small remote text file (a shard index), at most ``limit`` bytes."""
    fs, path = filesystem(url, options)

    def call() -> bytes:
        try:
            size = bounded(fs, options.timeout, "info", path).get("size")
        except FileNotFoundError:
            raise MissingPathError(f"{url}: no such remote file") from None
        if size is None:  # a server that does not say: one byte past the limit tells a larger file from one that fits
            data = fetch_range(fs, path, 0, limit + 1, options.timeout)
            if len(data) > limit:
                raise PicPacValueError(f"{url}: more than {limit} bytes, too large for a shard index (at most {limit})")
            return data
        if size > limit:
            raise PicPacValueError(f"{url}: {size} bytes, too large for a shard index (at most {limit})")
        return fetch_range(fs, path, 0, size, options.timeout)
    try:
        return retrying("reading", url, options, call).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PicPacValueError(f"{url}: cannot read the shard index: {exc}") from None


class RequestTimeout(TimeoutError):
    """A request abandoned after ``timeout`` seconds (retried like any failed request)."""

    def __init__(self, timeout: float):
        super().__init__(f"no complete answer within {timeout:g} s (timeout={timeout:g})")


def bounded(fs: Any, timeout: float, method: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fs.method(*args, **kwargs)``, abandoned after ``timeout`` seconds: a :class:`RequestTimeout`. An async
    filesystem (s3fs, http, gcsfs) cancels the request on its event loop; a blocking one's call is left to
    end on a thread of its own. ``method`` may also be a coroutine function ``(fs, *args)`` (async only)."""
    start = time.monotonic()
    try:
        if not getattr(fs, "async_impl", False):
            return _on_thread(timeout, getattr(fs, method), *args, **kwargs)
        from fsspec.asyn import sync
        call = getattr(fs, "_" + method) if isinstance(method, str) else functools.partial(method, fs)
        return sync(fs.loop, call, *args, timeout=timeout, **kwargs)
    except TimeoutError:
        if time.monotonic() - start < timeout:  # the client's own timeout, not ours
            raise
        raise RequestTimeout(timeout) from None


def _on_thread(timeout: float, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    done: list = []

    def run() -> None:
        try:
            done.append((True, call(*args, **kwargs)))
        except BaseException as exc:
            done.append((False, exc))
    thread = threading.Thread(target=run, name="picpac-request", daemon=True)
    thread.start()
    thread.join(timeout)
    if not done:
        raise TimeoutError
    ok, value = done[0]
    if not ok:
        raise value
    return value


def fetch_range(fs: Any, key: str, start: int, stop: int, timeout: float) -> bytes:
    """Bytes ``start``..``stop`` of ``key`` (fsspec's ``cat_file``), within ``timeout`` seconds (see
    :func:`bounded`). From an HTTP server at most the range's bytes are read (and one more), whatever it
    sends: one that ignores the range and answers with the whole object costs no more memory than the
    range; a RemoteReadError says it does not serve ranges."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol
    if "http" not in protocols and "https" not in protocols:
        return bounded(fs, timeout, "cat_file", key, start=start, end=stop)
    return bounded(fs, timeout, _http_range, key, start, stop)


async def _http_range(fs: Any, url: str, start: int, stop: int) -> bytes:
    size = stop - start
    if not size:
        return b""
    options = dict(fs.kwargs)
    headers = {**options.pop("headers", {}), "Range": f"bytes={start}-{stop - 1}"}
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **options) as answer:
        if answer.status == 404:
            raise FileNotFoundError(url)
        answer.raise_for_status()
        ranged = answer.status == 206
        if not ranged and start:
            raise RemoteReadError(f"{url}: the server ignores range requests (it answered HTTP {answer.status} "
                                  f"with the whole object to a request for bytes {start}-{stop}); picpac reads "
                                  "remote files by range: serve the file from a server that supports them, or "
                                  "copy it here and read it as a local file")
        # not ranged: the whole object from its first byte, of which the range is the start
        want, chunks, got = size + ranged, [], 0
        while got < want:
            chunk = await answer.content.read(want - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    if got > size:
        raise RemoteReadError(f"{url}: the server sent more than the {size} bytes asked for (bytes {start}-{stop}); "
                              "it does not serve range requests as HTTP says: serve the file from another server, "
                              "or copy it here and read it as a local file")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def retrying(what: str, url: str, options: RemoteOptions, call: Callable[[], T]) -> T:
    """``call()``, retried ``options.retries`` times with backoff; then a RemoteReadError naming ``url``.
    Any error of fsspec's is retried, a missing object too (a server that restarts answers so for a while);
    a PicPacError that ``call`` raises is final."""
    for attempt in range(options.retries + 1):
        try:
            return call()
        except PicPacError:
            raise
        except Exception as exc:  # fsspec's filesystems raise their clients' own errors (botocore, aiohttp)
            last = exc
        if attempt < options.retries:
            time.sleep(min(options.backoff * 2**attempt, MAX_BACKOFF) * random.uniform(0.5, 1.0))
    if isinstance(last, RequestTimeout):
        raise RemoteTimeoutError(f"{url}: {what} failed {options.retries + 1} times (TimeoutError: {last}); the "
                                 "server stalls or sends too slowly: check the network and the server, or allow "
                                 "more time (timeout) or more retries (remote_retries)") from last
    raise RemoteReadError(f"{url}: {what} failed {options.retries + 1} times ({type(last).__name__}: {last}); "
                          "check the network, the server and the credentials (storage_options), or allow more "
                          "retries (remote_retries)") from last


class BlockCache:
    """Blocks of remote files kept as files under ``root`` (a folder per file and commit), at most about
    ``limit`` bytes in all: the least recently used go first. Files are written to a temp name and renamed,
    so a reader never sees half a block; threads and processes may share one root. Only what the cache
    wrote is counted or evicted: files named as blocks or their temp files (:data:`CACHE_FILE`) in folders
    named as its own (:data:`CACHE_FOLDER`) that hold its :data:`CACHE_MARK`, so a ``root`` that holds other
    files (a user's folder given as ``cache_dir``) keeps them all. A temp file is counted while it may be
    being written, and removed once its writer's process is gone or it is :data:`STALE_TEMP` seconds old."""

    _shared: dict[tuple[str, int, int], BlockCache] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, root: str, limit: int) -> BlockCache:
        """The process's one cache of ``root`` and ``limit``: every reader using it counts what all store."""
        with cls._shared_lock:
            key = (root, limit, os.getpid())
            if key not in cls._shared:
                cls._shared[key] = cls(root, limit)
            return cls._shared[key]

    def __init__(self, root: str, limit: int):
        self.root, self.limit = root, limit
        os.makedirs(root, mode=0o700, exist_ok=True)
        self._lock = threading.Lock()
        self._counted: int | None = None  # bytes under root at the last count
        self._added = 0  # bytes stored since

    def read(self, path: str, start: int, size: int, length: int) -> bytes | None:
        """``size`` bytes at ``start`` of the cached file ``path``, when it is there and ``length`` bytes long."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size != length:
                self.drop(path)
                return None
            os.utime(fd)  # the mtime says when it was last used
            return os.pread(fd, size, start)
        finally:
            os.close(fd)

    def store(self, path: str, data: bytes) -> None:
        """Keep ``data`` as ``path``, then evict the least recently used files while over the limit."""
        temp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
        try:
            _own_folder(os.path.dirname(path))
            with open(temp, "wb") as f:
                f.write(data)
            os.replace(temp, path)
        except OSError:
            if os.path.exists(temp):
                os.unlink(temp)
            return  # a full disk costs a download later, not the read
        with self._lock:
            self._added += len(data)
            # other processes store too: recount once this one alone has added an eighth of the limit
            if self._counted is None or self._counted + self._added > self.limit or self._added > self.limit // 8:
                self._evict()

    def drop(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def _evict(self) -> None:
        files, total, now = [], 0, time.time()
        for folder in os.scandir(self.root):
            if CACHE_FOLDER.fullmatch(folder.name) and folder.is_dir(follow_symlinks=False) \
                    and os.path.isfile(os.path.join(folder.path, CACHE_MARK)):
                for entry in os.scandir(folder.path):
                    name = CACHE_FILE.fullmatch(entry.name)
                    if not name or not entry.is_file(follow_symlinks=False):
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if name[1] is None:
                        files.append((st.st_mtime, st.st_size, entry.path))
                    elif now - st.st_mtime > STALE_TEMP or not _alive(int(name[1])):
                        self.drop(entry.path)  # left by a writer killed mid-write
                        continue
                    total += st.st_size  # a block, or one being written (not evicted: its writer renames it)
        if total > self.limit:
            files.sort()
            for _, size, path in files:
                if total <= self.limit * 0.9:
                    break
                self.drop(path)
                total -= size
        self._counted, self._added = total, 0

    def usage(self) -> int:
        """Bytes under the root now."""
        with self._lock:
            self._evict()
            return self._counted or 0


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (here: a cache shared by hosts or pid namespaces may lose a temp file being
    written elsewhere, which costs that writer its store, not its read)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's
    except (OSError, OverflowError):
        return False
    return True


def _own_folder(folder: str) -> None:
    """Make the cache folder ``folder``, marked as the cache's own (a folder of a cache's name that an older
    picpac made gets the mark when it is used again)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    mark = os.path.join(folder, CACHE_MARK)
    if not os.path.exists(mark):
        open(mark, "ab").close()


def _reopen(url: str, check: bool, options: RemoteOptions, seq: int, crc: int) -> RemoteReader:
    reader = RemoteReader(url, check=check, options=options)
    if (reader.header.current.seq, reader.header.current.crc) != (seq, crc):
        reader.close()
        raise PicPacError(f"{url}: the file changed on the server after this reader was sent to another process")
    return reader


class RemoteReader(BaseReader):
    """Read a picpac file that fsspec reaches by URL, as a :class:`Reader` reads a local one (``len``,
    ``r[i]``, iteration, ``labels``, ``groups``, ``fields``, ``arrays``, ...). Every record is checked
    against its CRC32 whatever ``check`` says; one that fails is downloaded again once, then a
    :class:`CorruptRecordError` (or a :class:`RemoteReadError` when the file changed on the server).
    Shared by threads, survives fork, pickles by URL. ``prefetch(records)`` downloads ahead."""

    mapped = False
    downloads = True

    def __init__(self, url: str, *, check: bool = True, options: RemoteOptions | None = None):
        if not is_remote(url):
            raise PicPacValueError(f"{url!r} is no URL of a remote file (such as s3://bucket/data.picpac)")
        self.path, self.check = url, bool(check)
        self.options = options or RemoteOptions()
        self._closed = False
        self._connect()
        size, head = self._open()
        state = read_header(head, size, url)
        commit = state.current
        check_commit_bounds(commit, size, url)
        if commit.end - commit.offset > MAX_INDEX_BYTES:
            raise CorruptError(f"{url}: claims a metadata and index of {commit.end - commit.offset} bytes, more "
                               f"than {MAX_INDEX_BYTES} (a damaged or crafted file)")
        self._head = head
        digest = hashlib.sha256(f"{url}\0{size}\0{commit.seq}\0{commit.crc}".encode()).hexdigest()[:32]
        self._folder = os.path.join(self.options.cache_dir, digest)
        self.metadata, self.index = self._read_index(commit, size)
        self._load(state, size)

    def _connect(self) -> None:
        """The filesystem and what threads share, made anew in a forked child (fsspec's event loops are not
        fork-safe)."""
        self._fs, self._key = filesystem(self.path, self.options)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._inflight: dict[int, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._cache = BlockCache.shared(self.options.cache_dir, self.options.cache_limit)
        self._stalled: tuple[float, str, RemoteTimeoutError] | None = None  # (when, bytes, error): see _range

    def _filesystem(self) -> Any:
        """The filesystem, reconnected first in a forked child (callers that take the lock call this first)."""
        if self._pid != os.getpid():
            self._connect()
        return self._fs

    def _open(self) -> tuple[int, bytes]:
        """The file's size and its header's bytes."""
        def info() -> dict:
            try:
                return bounded(self._filesystem(), self.options.timeout, "info", self._key)
            except FileNotFoundError:
                raise MissingPathError(f"{self.path}: no such remote file") from None
            except PermissionError as exc:
                raise RemoteReadError(f"{self.path}: access denied ({exc}); check the credentials "
                                      "(storage_options)") from None
        size = int(retrying("reading its size", self.path, self.options, info)["size"])
        return size, self._range(0, min(size, HEADER_SIZE))

    def _range(self, start: int, stop: int) -> bytes:
        """Bytes ``start``..``stop`` of the file, from the server (retried; a short answer is retried too)."""
        def call() -> bytes:
            data = fetch_range(self._filesystem(), self._key, start, stop, self.options.timeout)
            if len(data) != stop - start:
                raise OSError(f"asked for bytes {start}-{stop}, got {len(data)} bytes")
            return data
        stalled, timeout = self._stalled, self.options.timeout
        if stalled is not None and time.monotonic() < stalled[0] + timeout:
            since, where, exc = stalled
            raise RemoteTimeoutError(
                f"{self.path}: reading bytes {start}-{stop} was not attempted: the server stalled on every attempt "
                f"({self.options.retries + 1}) of reading bytes {where} {time.monotonic() - since:.1f} s ago "
                f"({exc.__cause__}), and reads fail at once for {timeout:g} s after that; check the network and "
                "the server, or allow more time (timeout) or more retries (remote_retries)") from exc
        try:
            return retrying(f"reading bytes {start}-{stop}", self.path, self.options, call)
        except RemoteTimeoutError as exc:
            # the server stalled on every attempt: the reads queued behind this one fail at once for a while
            # instead of each waiting as long, so a worker's batch of them is not taken for a stuck worker
            self._stalled = time.monotonic(), f"{start}-{stop}", exc
            raise

    def _read_index(self, commit: Any, size: int) -> tuple[dict, np.ndarray]:
        """The commit's metadata and index, from the cache when there (and sound), else from the server."""
        path, length = os.path.join(self._folder, "index"), commit.end - commit.offset
        region = self._cache.read(path, 0, length, length)
        if region is not None:
            try:
                return read_commit(region, size, commit, self.path, base=commit.offset)
            except CorruptError:
                self._cache.drop(path)
        region = self._range(commit.offset, commit.end)
        found = read_commit(region, size, commit, self.path, base=commit.offset)
        self._cache.store(path, region)
        return found

    # -- records ---------------------------------------------------------------------------------------
    def read(self, i: int, check: bool) -> Record:
        """Record ``i``, checked against its CRC32 (always: see the class)."""
        i = self._position(i)
        if self._closed:
            raise PicPacError(f"{self.path}: the reader is closed")
        self._filesystem()
        offset, size = self._offsets.item(i), self._sizes.item(i)
        if offset + size > self._size:
            raise CorruptRecordError(self.path, i, "lies past the end of the file")
        data = self._bytes(offset, size)
        if crc32(data) != self._checksums.item(i):
            for block in self._blocks(offset, size):
                self._cache.drop(self._block_path(block))
            data = self._bytes(offset, size)
            if crc32(data) != self._checksums.item(i):
                if self._range(0, len(self._head)) != self._head:
                    raise RemoteReadError(f"{self.path}: the file changed on the server since it was opened; "
                                          "open it again (a new stream)")
                raise CorruptRecordError(self.path, i, "fails its checksum as it arrived from the server, twice "
                                         "(damaged in storage or in transit)")
        return self._parse(i, memoryview(data))

    def _blocks(self, offset: int, size: int) -> range:
        block = self.options.block_size
        return range(offset // block, (offset + max(size, 1) - 1) // block + 1)

    def _block_path(self, block: int) -> str:
        return os.path.join(self._folder, f"b{block}")

    def _bytes(self, offset: int, size: int) -> bytes:
        """Bytes ``offset``..``offset + size`` of the file, block by block through the cache."""
        bs, pieces = self.options.block_size, []
        for block in self._blocks(offset, size):
            start, stop = max(offset, block * bs) - block * bs, min(offset + size, (block + 1) * bs) - block * bs
            length = min(bs, self._size - block * bs)
            piece = self._cache.read(self._block_path(block), start, stop - start, length)
            pieces.append(self._fetch(block)[start:stop] if piece is None else piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _fetch(self, block: int) -> bytes:
        """Block ``block`` from the server, into the cache; a block already being fetched is waited for."""
        with self._lock:
            future, owner = self._inflight.get(block), False
            if future is None:
                future, owner = self._inflight.setdefault(block, Future()), True
        if not owner:
            return future.result()
        try:
            start = block * self.options.block_size
            data = self._range(start, min(start + self.options.block_size, self._size))
            self._cache.store(self._block_path(block), data)
            future.set_result(data)
            return data
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._inflight.pop(block, None)

    def prefetch(self, records: np.ndarray) -> None:
        """Download the blocks of ``records`` not yet cached, on ``prefetch_threads`` threads, in the
        background; errors are left to the read that needs the block."""
        if self._closed:
            return
        records = np.asarray(records, np.int64)
        if not len(records):
            return
        bs = self.options.block_size
        first = self._offsets[records] // bs
        last = (self._offsets[records] + np.maximum(self._sizes[records], 1) - 1) // bs
        wanted = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist())]))
        self._filesystem()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.options.prefetch_threads, thread_name_prefix="picpac-prefetch")
            todo = [b for b in wanted.tolist() if b not in self._inflight
                    and not os.path.exists(self._block_path(b))]
        # no more than half the cache ahead: blocks fetched ahead must not evict those about to be read
        todo = todo[:max(1, self.options.cache_limit // (2 * bs))]
        for block in todo:
            self._pool.submit(self._quietly, block)

    def _quietly(self, block: int) -> None:
        try:
            self._fetch(block)
        except Exception:
            pass  # the read that needs this block fetches it again and raises

    def cache_usage(self) -> int:
        """Bytes in the cache folder now (every file's blocks together)."""
        return self._cache.usage()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop prefetching; records already read stay valid (they hold their bytes)."""
        self._closed = True
        if self._pool is not None and self._pid == os.getpid():
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def __reduce__(self):
        return _reopen, (self.path, self.check, self.options, self.header.current.seq, self.header.current.crc)
