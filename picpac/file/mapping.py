"""Read-only file mappings that hold no file descriptor.

``mmap.mmap`` keeps a duplicate of the descriptor it maps for as long as the mapping lives (before Python
3.13's ``trackfd=False``), so a process that maps a dataset of a thousand shards runs out of descriptors
under the usual ``ulimit -n 1024``. :func:`map_file` maps with the C library's ``mmap`` instead: the caller
closes its descriptor at once, and the mapping lives as long as any view of it (records' memoryviews,
NumPy arrays) does.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import weakref

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ssize_t]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """The owner of a mapping, which NumPy views through ``__array_interface__`` (read-only): the mapping is
    unmapped when it is collected, after the last array or memoryview that keeps it."""

    __slots__ = ("__array_interface__", "__weakref__")

    def __init__(self, address: int, size: int):
        self.__array_interface__ = {"data": (address, True), "shape": (size,), "typestr": "|u1", "version": 3}
        # not at exit: a daemon thread may still be reading it then (the process's end unmaps it)
        weakref.finalize(self, _libc.munmap, address, size).atexit = False


def map_file(fd: int, size: int) -> np.ndarray:
    """The first ``size`` (> 0) bytes of the file open as ``fd``, mapped read-only and shared, as a read-only
    uint8 array; OSError when the file cannot be mapped. ``fd`` may be closed at once. The mapping is
    unmapped when the array and every view of it are gone."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address == _FAILED:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return np.asarray(_Mapping(address, size))


def advise(data: np.ndarray, advice: int, start: int = 0, length: int | None = None) -> None:
    """``madvise`` bytes ``start``..``start + length`` (to the end: None) of a mapping from :func:`map_file`
    (``start`` a multiple of the page size): ``mmap.MADV_WILLNEED`` to read them ahead, ``MADV_DONTNEED``
    to drop its pages (read again on the next access). A hint: errors are ignored."""
    _libc.madvise(data.ctypes.data + start, data.nbytes - start if length is None else length, advice)
