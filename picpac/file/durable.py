"""Durable output files: a temporary file beside the destination, fsync, an atomic rename, and the
removal of temporary files that dead processes left (docs/format.md, "Writing and committing"), and
:func:`exit_on_signals`, which makes SIGTERM and SIGHUP unwind like Ctrl-C so that writers remove them.

Every writer of a new file (the picpac Writer, the store writers) builds it as
``.{name}.{pid}-{8 hex digits}.picpac-tmp`` in the destination's directory, so the rename stays in one
file system and a crash leaves either the old file or the new one at the destination.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import PicPacError

TEMP_SUFFIX = ".picpac-tmp"
STALE_GRACE = 60.0
"""Seconds a dead process's temporary file must have been left untouched before it is removed."""


def target(path: str | os.PathLike) -> str:
    """The absolute path that writing ``path`` replaces: the final target when ``path`` is a symbolic
    link (so the link keeps pointing at the new file), else ``path`` itself."""
    return os.path.realpath(os.fspath(path))


def temp_path(path: str) -> str:
    """A new temporary name beside ``path``: ``.{name}.{pid}-{hex8}.picpac-tmp``."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def fsync_directory(directory: str) -> None:
    """Make the names in ``directory`` (a rename, a new or removed entry) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str, value: Any) -> None:
    """``value`` as JSON in a new file ``path``, durable (written, synced, and its name too) before this returns."""
    with open(path, "x") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def fsync_path(path: str) -> None:
    """Make a file's bytes durable; for a directory (an LMDB store), every file in its tree and the
    directories' own entries, deepest first. Symbolic links are not followed."""
    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    elif stat.S_ISDIR(mode):
        for root, _, names in os.walk(path, topdown=False):
            for name in names:
                entry = os.path.join(root, name)
                if stat.S_ISREG(os.lstat(entry).st_mode):
                    fsync_path(entry)
            fsync_directory(root)


def replace(temp: str, path: str, *, sync: bool = True) -> None:
    """Move the finished ``temp`` over ``path`` atomically; with ``sync``, ``temp`` is made durable
    before the rename and the directory's new entry after it, so a power loss leaves the old file or
    the complete new one."""
    if sync:
        fsync_path(temp)
    os.replace(temp, path)
    if sync:
        fsync_directory(os.path.dirname(os.path.abspath(path)))


def publish(temp: str, path: str, *, overwrite: bool, sync: bool = True) -> bool:
    """Give the finished ``temp`` the name ``path``: over what is there with ``overwrite``, else only if
    ``path`` is still free (False, ``temp`` left as it is, when a file took the name meanwhile). With
    ``sync``, as :func:`replace`."""
    if overwrite:
        replace(temp, path, sync=sync)
        return True
    if sync:
        fsync_path(temp)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: rename, unless the name was taken meanwhile
        if os.path.lexists(path):
            return False
        os.rename(temp, path)
    else:
        os.unlink(temp)
    if sync:
        fsync_directory(os.path.dirname(os.path.abspath(path)))
    return True


def same_file(fd: int, path: str) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``: a lock taken on ``fd`` guards ``path`` only
    then, since a new file may have been renamed over ``path`` between the open and the lock."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)


def lock(path: str) -> int | None:
    """Hold an exclusive ``flock`` on the temporary file or directory ``path`` while it is written:
    :func:`remove_stale_temps` never removes a locked temporary, even one whose writer runs on
    another host of a network file system. Returns the descriptor to close when done, or None
    where the lock cannot be taken (a file system without locks, or a library holding its own)."""
    try:
        fd = os.open(path, (os.O_RDONLY if os.path.isdir(path) else os.O_RDWR) | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _temp_name(path: str) -> re.Pattern:
    name = os.path.basename(os.path.abspath(path))
    return re.compile(r"\." + re.escape(name) + r"\.([1-9][0-9]{0,9})-[0-9a-f]{8}" + re.escape(TEMP_SUFFIX))


def _process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts; a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _newest_change(path: str, mode: int) -> float:
    """The latest mtime of ``path`` and, for a directory, of everything in it."""
    newest = os.lstat(path).st_mtime
    if stat.S_ISDIR(mode):
        for root, dirs, names in os.walk(path):
            for name in dirs + names:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def _locked(path: str, mode: int) -> bool:
    """Whether some process (here, or on another host where the file system shares locks) holds a
    ``flock`` on ``path``; False where that cannot be told."""
    try:
        fd = os.open(path, (os.O_RDONLY if stat.S_ISDIR(mode) else os.O_RDWR) | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def _temps(path: str) -> list[tuple[os.DirEntry, int]]:
    """The entries beside ``path`` named exactly as its temporaries, with the pid each name holds."""
    pattern = _temp_name(path)
    try:
        entries = list(os.scandir(os.path.dirname(os.path.abspath(path))))
    except OSError:
        return []
    return [(entry, int(match.group(1))) for entry in entries if (match := pattern.fullmatch(entry.name))]


def _remove(path: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def remove_stale_temps(path: str, *, grace: float = STALE_GRACE) -> list[str]:
    """Remove the temporary files and directories of ``path`` that dead writers left, and return them.

    A candidate is removed only when all of these hold: its name is exactly
    ``.{name of path}.{pid}-{hex8}.picpac-tmp`` in ``path``'s directory; it is a regular file or a
    directory (never a link); no process ``pid`` exists on this host; nothing in it changed for
    ``grace`` seconds; and no process holds a lock on it. The last two keep the temporary of a
    writer on another host of a shared file system, whose pid means nothing here. A candidate that
    cannot be examined or removed (permissions, a race with another cleaner) is left alone."""
    removed = []
    now = time.time()
    for entry, pid in _temps(path):
        if _process_exists(pid):
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                continue
            if now - _newest_change(entry.path, mode) < grace or _locked(entry.path, mode):
                continue
            _remove(entry.path, mode)
        except OSError:
            continue
        removed.append(entry.path)
    return removed


def dead_temp_folders(path: str) -> list[str]:
    """The temporary directories of ``path`` whose writer is dead on this host and which no process locks: what a
    killed writer of several files left (``picpac split``), to be finished or removed by the next one. Unlike
    :func:`remove_stale_temps` no grace period applies: the lock tells a live writer on another host."""
    dead = []
    for entry, pid in _temps(path):
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode) and not _process_exists(pid) and not _locked(entry.path, mode):
                dead.append(entry.path)
        except OSError:
            continue
    return dead


def remove_temps_of(path: str, pid: int) -> None:
    """Remove every temporary of ``path`` that process ``pid`` made: one this process knows is dead (a
    child it stopped), so neither the grace period nor the lock applies. Links are left alone."""
    for entry, owner in _temps(path):
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            if owner == pid and (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                _remove(entry.path, mode)
        except OSError:
            continue  # (called while an error is raised: this must not replace it)


# -- termination by a signal ------------------------------------------------------------------------
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""What batch schedulers, ``timeout``, ``docker stop`` (SIGTERM) and a closed terminal (SIGHUP) send."""


class Terminated(SystemExit):
    """Raised in the main thread by a signal inside :func:`exit_on_signals`. Like the KeyboardInterrupt of
    a Ctrl-C it unwinds ``with`` blocks and ``finally`` clauses (a Writer aborts and removes its temporary
    file), ``except Exception`` does not catch it, and uncaught it ends Python with exit status
    128 + the signal's number (143 for SIGTERM, 129 for SIGHUP). ``signum`` is the signal."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    def __str__(self) -> str:
        return f"terminated by {self.signal_name}"

    def __reduce__(self):
        return type(self), (self.signum,)


@contextmanager
def exit_on_signals(signals: tuple[int, ...] = TERMINATING_SIGNALS) -> Iterator[None]:
    """Within the block, ``signals`` (SIGTERM and SIGHUP) raise :class:`Terminated` in the main thread
    instead of killing the process at once, so the cleanup that a Ctrl-C runs runs for them too.

    Only a signal whose action is the default one is taken over: one that is ignored (``nohup``) stays
    ignored, and a handler the program installed stays in place. The first signal raises; later ones
    are ignored while the program unwinds, so its cleanup is not cut short (SIGKILL still stops it).
    The previous actions are restored when the block ends. picpac's command line runs in this block;
    the library never installs a handler by itself (a library must not change a program's signals):
    a script that wants the same wraps its work in ``with picpac.exit_on_signals():``. It must be
    entered in the main thread, which is where Python runs signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        raise PicPacError("exit_on_signals() must be entered in the main thread: Python runs signal handlers "
                          "only there")
    fired = False

    def handler(signum: int, frame) -> None:
        nonlocal fired
        if not fired:  # later signals: the first one's unwinding is under way
            fired = True
            raise Terminated(signum)

    previous = {}
    try:
        for signum in signals:
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, handler)
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)
