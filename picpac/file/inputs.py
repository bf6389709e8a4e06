"""Reading the files picpac takes in whole (an image to import or decode, a mask, a list, CSV, COCO, YAML
or label file): regular files only, found without blocking on a FIFO or reading a device, at most
:data:`MAX_FILE_BYTES`; text as UTF-8 without NUL bytes. Every refusal is a SourceError naming the file."""
from __future__ import annotations

import os
import stat

from ..errors import SourceError
from .kinds import file_kind

MAX_FILE_BYTES = 1 << 30
"""The largest file an import reads (an image, a mask, a list, CSV, COCO, YAML or label file): a larger
one is refused before a byte of it is read."""


def source_error(path: str, reason: str) -> SourceError:
    """SourceError ``path: reason``, keeping both (the importer lists a skipped image's reason)."""
    error = SourceError(f"{path}: {reason}")
    error.path, error.reason = path, reason
    return error


def _regular(path: str, info: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise source_error(path, f"{file_kind(info.st_mode)}, not a regular file")
    if info.st_size > limit:
        raise source_error(path, f"{info.st_size:,} bytes, over the {limit:,}-byte limit of a file an import reads")


def read_file(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path``: a missing file, a FIFO, a device, a directory, a socket or
    more than ``limit`` bytes is a SourceError naming it (:func:`source_error`), found without blocking
    on a FIFO or reading a device."""
    try:
        _regular(path, os.stat(path), limit)
        # O_NONBLOCK: a FIFO put in its place since the stat must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise source_error(path, "missing file") from None
    except ValueError:  # os.stat's refusal of a NUL byte
        raise source_error(path, "the path holds a NUL byte") from None
    except OSError as exc:
        raise source_error(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _regular(path, info, limit)
        chunks, total = [], 0
        while total <= limit:  # a file growing as it is read stops at the limit too
            chunk = os.read(fd, min(max(info.st_size - total, 0) + 1, 1 << 24, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise source_error(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise source_error(path, f"over the {limit:,}-byte limit of a file an import reads (it grew)")
    return b"".join(chunks)


def read_text(path: str, what: str) -> str:
    """A UTF-8 text file (a list, CSV, label or class name file: ``what``, for messages) as str."""
    try:
        text = read_file(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                          f"{what} must be UTF-8") from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise SourceError(f"{path}:{line}: holds a NUL byte; {what} are text without NUL bytes (is it a "
                          "binary file?)")
    return text
