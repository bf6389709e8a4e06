"""picpac: a whole training dataset in one file, streamed with on-the-fly decoding and augmentation."""
__version__ = "0.1.0"

from .errors import (CorruptError, CorruptRecordError, FormatError, ImportFailedError, MissingPathError,
                     PicPacError, PicPacTypeError, PicPacValueError, SampleError, SourceError, VersionError,
                     WorkerError, WriterBusyError)
from .format import NO_GROUP
from .loader import ImageLoader
from .reader import Reader, Record
from .stream import ImageStream
from .writer import Writer, write_arrays
from . import dataflow  # tensorpack's DataFlow API (docs/dataflow.md)

__all__ = [
    "dataflow",
    "CorruptError", "CorruptRecordError", "FormatError", "ImportFailedError", "MissingPathError", "NO_GROUP", "PicPacError",
    "ImageLoader", "ImageStream", "PicPacTypeError", "PicPacValueError", "Reader", "Record", "SampleError", "SourceError", "VersionError", "WorkerError", "Writer",
    "WriterBusyError", "__version__", "write_arrays",
]
