"""Exceptions raised by picpac: every one derives from :class:`PicPacError`."""
from __future__ import annotations


class PicPacError(Exception):
    """Base class of every error picpac raises on purpose."""


class PicPacTypeError(PicPacError, TypeError):
    """An argument has the wrong type."""


class PicPacValueError(PicPacError, ValueError):
    """An argument has the right type but a bad value."""


class MissingPathError(PicPacError, FileNotFoundError):
    """A file or directory that picpac was asked to read does not exist."""


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


class WriterBusyError(PicPacError):
    """Another Writer holds the database open for appending."""


class SourceError(PicPacError):
    """An import source (list file, CSV, folder layout) is malformed."""


class ImportFailedError(PicPacError):
    """An import wrote nothing: a file failed under ``strict``, or no image could be imported."""
