"""POSIX shared memory for the process engine: one named block, mapped by the consumer and its workers.

Every block is ``/dev/shm/picpac_<pid of the consumer>_<random>``, registered with multiprocessing's
resource tracker by its creator, so it is unlinked even if that process is killed.
"""
from __future__ import annotations

import mmap
import os
import secrets
from multiprocessing import resource_tracker

import numpy as np

from ..errors import PicPacError

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

PREFIX = "picpac_"
"""Every shared-memory block is ``/dev/shm/picpac_<pid of the consumer>_<random>``."""


class SharedBlock:
    """A POSIX shared-memory block mapped into this process.

    The creator registers it with multiprocessing's resource tracker (so it is unlinked even if
    this process is killed) and unlinks it; workers only map it. The mapping is a plain ``mmap``:
    NumPy views of it keep it alive after ``unlink()``, so a batch the user holds never dangles.
    """

    def __init__(self, name: str, size: int, create: bool):
        if _posixshmem is None:  # pragma: no cover
            raise PicPacError("backend='process' needs POSIX shared memory (Linux or macOS)")
        self.name, self.size, self._owner = name, size, create
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                resource_tracker.register("/" + name, "shared_memory")
                self._reserve(fd, size)
            self.mmap = mmap.mmap(fd, size)
        except BaseException:
            if create:
                self.unlink()
            raise
        finally:
            os.close(fd)

    @staticmethod
    def _reserve(fd: int, size: int) -> None:
        """Allocate every page now: a full /dev/shm fails here, not as SIGBUS in a worker later."""
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:  # pragma: no cover - macOS
                os.ftruncate(fd, size)
        except OSError as exc:
            raise PicPacError(f"cannot reserve {size / 2**20:.1f} MiB of shared memory for backend='process' "
                              f"({exc.strerror}); make /dev/shm larger (docker: --shm-size), or lower batch, "
                              "preload or the image size, or use dtype='uint8'") from None

    @classmethod
    def create(cls, size: int) -> SharedBlock:
        for _ in range(100):
            try:
                return cls(f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}", size, create=True)
            except FileExistsError:
                continue
        raise PicPacError("cannot find a free shared-memory name")  # pragma: no cover

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.mmap)

    def unlink(self) -> None:
        if self._owner:
            self._owner = False
            try:
                _posixshmem.shm_unlink("/" + self.name)
            except FileNotFoundError:
                pass
            resource_tracker.unregister("/" + self.name, "shared_memory")
