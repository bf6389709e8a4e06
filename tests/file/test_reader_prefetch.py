"""Reader.prefetch: the kernel reads the records' pages ahead (madvise WILLNEED), seen with mincore(2)."""
from __future__ import annotations

import ctypes
import mmap
import os
import time

import numpy as np
import pytest

import picpac
from picpac.file.mapping import advise

from helpers import payload

libc = ctypes.CDLL(None, use_errno=True)


def resident(reader: picpac.Reader, begin: int, end: int) -> np.ndarray:
    """Whether each page of the file's bytes begin..end is in the page cache."""
    page = mmap.PAGESIZE
    begin -= begin % page
    base = reader._bytes.ctypes.data  # the mapping
    pages = -(-(end - begin) // page)
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(base + begin), ctypes.c_size_t(end - begin), vec) != 0:
        pytest.skip(f"mincore failed: {os.strerror(ctypes.get_errno())}")
    return np.frombuffer(vec, np.uint8) & 1 == 1


def evict(reader: picpac.Reader, path) -> None:
    advise(reader._bytes, mmap.MADV_DONTNEED)  # the mapping's pages: fadvise leaves mapped pages cached
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def span(reader: picpac.Reader, i: int) -> tuple[int, int]:
    offset = int(reader.index["offset"][i])
    return offset, offset + int(reader.index["size"][i])


def test_prefetch_brings_the_records_pages_into_the_page_cache(tmp_path):
    path = tmp_path / "a.picpac"
    with picpac.Writer(path) as w:
        for i in range(640):  # 40 MiB: the middle lies far from what opening it reads (and reads ahead)
            w.append(image=payload(i, 64 * 1024))
    reader = picpac.Reader(path)
    wanted, other = [400, 250, 251], 320
    for _ in range(20):  # pages still being written back are dropped once they are clean
        evict(reader, path)
        if not any(resident(reader, *span(reader, i)).any() for i in [*wanted, other]):
            break
        time.sleep(0.05)
    else:
        pytest.skip("this file system keeps the file's pages cached (tmpfs?): nothing to see")
    reader.prefetch(np.array(wanted))
    deadline = time.monotonic() + 10
    while not all(resident(reader, *span(reader, i)).all() for i in wanted) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(resident(reader, *span(reader, i)).all() for i in wanted)
    assert not resident(reader, *span(reader, other)).any()  # 251 and 400 lie far apart: not one range
    assert bytes(reader[400]["image"]) == payload(400, 64 * 1024)


def test_prefetch_of_nothing_or_on_a_closed_reader_does_nothing(tmp_path):
    path = tmp_path / "a.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"x")
    reader = picpac.Reader(path)
    reader.prefetch(np.array([], np.int64))
    reader.close()
    reader.prefetch(np.array([0]))
    assert reader.closed
