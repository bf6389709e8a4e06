"""Exceptions raised by picpac: every one derives from :class:`PicPacError`."""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any


def closest(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` a mistyped ``name`` most likely meant (for a message's "did you mean"), or None."""
    close = difflib.get_close_matches(str(name), list(names), n=1, cutoff=0.6)
    return close[0] if close else None


class PicPacError(Exception):
    """Base class of every error picpac raises on purpose."""


class PicPacTypeError(PicPacError, TypeError):
    """An argument has the wrong type."""


class PicPacValueError(PicPacError, ValueError):
    """An argument has the right type but a bad value."""


class ImageTooLargeError(PicPacValueError):
    """An image's header declares more pixels than ``max_pixels`` (a decompression bomb, or an image too
    large to decode safely); it is refused before any decoder allocates its pixels."""

    def __init__(self, width: int, height: int, limit: int, where: str = ""):
        self.width, self.height, self.limit, self.where = width, height, limit, where
        super().__init__(f"{where + ': ' if where else ''}image of {self.advice()}")

    def advice(self, knob: str = "max_pixels") -> str:
        """The size, the limit and the fix, e.g. '65500x65500 = 4,290,250,000 pixels, over ...; raise max_pixels'."""
        return (f"{self.width}x{self.height} = {self.width * self.height:,} pixels, over the limit "
                f"max_pixels={self.limit} (a decompression bomb?); raise {knob} (0: no limit) if it is genuine")

    def __reduce__(self):
        return type(self), (self.width, self.height, self.limit, self.where)


class TooManyScansError(ImageTooLargeError):
    """A progressive JPEG with more scans than picpac decodes (each scan is a pass over every block of the image,
    so a few KB of crafted scans cost seconds): refused before any decoder runs."""

    def __init__(self, width: int, height: int, scans: int, allowed: int, where: str = ""):
        self.scans, self.allowed = scans, allowed
        super().__init__(width, height, allowed, where)

    def advice(self, knob: str = "max_pixels") -> str:
        return (f"{self.width}x{self.height} in {self.scans} progressive scans, more than the {self.allowed} picpac "
                f"decodes at this size (each scan is a pass over all its pixels: crafted to be slow?); fewer scans "
                f"(re-encode it), or raise {knob} if it is genuine")

    def __reduce__(self):
        return type(self), (self.width, self.height, self.scans, self.allowed, self.where)


class MissingPathError(PicPacError, FileNotFoundError):
    """A file or directory that picpac was asked to read does not exist."""


class PathExistsError(PicPacValueError, FileExistsError):
    """An output path exists and replacing it was not asked for: ``Writer(path, overwrite=True)`` (PicPac's
    ``picpac.OVERWRITE``) or ``--overwrite`` replaces it, ``append=True`` adds to a database."""


class FormatError(PicPacError):
    """A file is not a picpac database, or its structure is invalid."""


class VersionError(FormatError):
    """A picpac database was written by a newer format version than this code knows."""


class CorruptError(FormatError):
    """Stored bytes do not match their checksum, or the file is truncated."""


class CorruptRecordError(CorruptError):
    """One record's bytes are damaged: ``index`` says which record, ``reason`` what is wrong."""

    def __init__(self, path: str, index: int, reason: str):
        super().__init__(f"{path}: record {index} {reason}; run `picpac verify {path}` to list every "
                         "damaged record")
        self.path, self.index, self.reason = path, index, reason

    def __reduce__(self):
        return type(self), (self.path, self.index, self.reason)


class SampleError(PicPacError):
    """One sample of a stream cannot be produced (e.g. its image does not decode)."""

    def __init__(self, path: str, index: int, reason: str):
        super().__init__(f"{path}: record {index} {reason}")
        self.path, self.index, self.reason = path, index, reason

    def __reduce__(self):
        return type(self), (self.path, self.index, self.reason)


class WorkerError(PicPacError):
    """A worker process died, could not start, or raised an exception that cannot be sent back."""


class WorkerTimeoutError(WorkerError, TimeoutError):
    """A worker sent no result within the ``timeout`` it was given (stopped, stuck in a native call, waiting
    on a dead mount); the message names the worker and the setting."""


class FileIOError(PicPacError, OSError):
    """The operating system failed a read or a write: no space left on device, a disk quota or file size
    limit, an I/O error, no permission. ``errno`` is the system's error number."""


class RemoteReadError(PicPacError, OSError):
    """Reading a remote file (s3://, gs://, http(s)://, ...) failed, after every retry where a retry could help:
    the network, the server, the credentials, or the file changed on the server since it was opened."""


class RemoteTimeoutError(RemoteReadError, TimeoutError):
    """A remote request did not complete within its ``timeout``, on every attempt (a server that stalls or
    trickles); the message names the URL and the setting."""


class WriterBusyError(PicPacError):
    """Another Writer holds the database open for appending."""


class SourceError(PicPacError):
    """An import source (list file, CSV, folder layout) is malformed. One made by ``file.inputs.source_error`` (an
    image or other file that cannot be read) also keeps the file's ``path`` and the ``reason``."""

    path: str | None = None
    reason: str | None = None


class ImportFailedError(PicPacError):
    """An import wrote nothing: a file failed under ``strict``, or no image could be imported."""


class MissingFrameworkError(PicPacError, ImportError):
    """An optional framework (torch, tensorflow, ...) is not installed; the message names the extra that installs it."""


def require(module: str, extra: str, who: str) -> Any:
    """``import module`` for ``who`` (the part of picpac that needs it), or a :class:`MissingFrameworkError` naming
    ``pip install 'picpac[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingFrameworkError(f"{who} needs {module!r}, which cannot be imported ({exc}): "
                                    f"pip install 'picpac[{extra}]'") from None
