"""POSIX shared memory for the process engine: one named block, mapped by the consumer and its workers.

Every block is ``/dev/shm/picpac_<pid>_<start>_<pidns>_<random>`` on Linux: the creator's pid, its start
time (in clock ticks since boot, from /proc) and its pid namespace, so that the owner of a block can be
told from its name (``picpac_<pid>_<random>`` elsewhere). The creator registers it with multiprocessing's
resource tracker, so it is unlinked even if that process is killed; a SIGKILL of the whole process group
kills the tracker too, so each new block first removes the blocks whose creator is gone (:func:`reclaim`).
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
from multiprocessing import resource_tracker

import numpy as np

from ..errors import PicPacError

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

PREFIX = "picpac_"
"""Every shared-memory block is ``/dev/shm/picpac_<pid of the consumer>_...``."""
SHM = "/dev/shm"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)_(\d+)_(\d+)_[0-9a-f]{8}")
"""A block's name on Linux: its creator's pid, start time and pid namespace, then 8 random hex digits."""


def proc_stat(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...: field 3 is at index 0);
    None where there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold anything
    except (OSError, IndexError):
        return None
    return fields or None


def _start_time(pid: int | str) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22); None if there is none."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _namespace() -> int | None:
    """This process's pid namespace (the pids in a block's name mean something only within it)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _owner() -> str:
    """This process as a block's name tells it: ``<pid>_<start>_<pidns>`` on Linux, else ``<pid>``."""
    pid, start, space = os.getpid(), _start_time("self"), _namespace()
    return f"{pid}" if start is None or space is None else f"{pid}_{start}_{space}"


def reclaim(folder: str = SHM) -> list[str]:
    """Unlink the blocks in ``folder`` (/dev/shm) that a dead process of this pid namespace created; their
    names. Only regular files of this user that picpac named (:data:`_OWNED`) are looked at, and a block
    is kept while a process of its pid and start time lives (a pid reused since is another process)."""
    space = _namespace()
    if _posixshmem is None or space is None or not os.path.isdir(folder):
        return []
    removed = []
    for entry in os.scandir(folder):
        owned = _OWNED.fullmatch(entry.name)
        if owned is None or int(owned[3]) != space or _start_time(owned[1]) == int(owned[2]):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                continue
            _posixshmem.shm_unlink("/" + entry.name)
        except (FileNotFoundError, PermissionError):  # gone meanwhile (another reclaim, its tracker)
            continue
        removed.append(entry.name)
    return removed


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
        """A new block of ``size`` bytes, after unlinking those whose creator is dead (:func:`reclaim`)."""
        reclaim()
        owner = _owner()
        for _ in range(100):
            try:
                return cls(f"{PREFIX}{owner}_{secrets.token_hex(4)}", size, create=True)
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
