"""picpac: a whole training dataset in one file, streamed with on-the-fly decoding and augmentation.

The package is one subpackage per layer (docs/architecture.md); this module is the public API.
"""
__version__ = "0.1.0"

import sys

from . import dataflow, image, sampling, stores  # public subpackages (docs/dataflow.md, stores.md, data_source.md)
from .engine import work_pool
from .errors import (CorruptError, CorruptRecordError, FileIOError, FormatError, ImageTooLargeError, ImportFailedError,
                     MissingPathError, PathExistsError, PicPacError, PicPacTypeError, PicPacValueError, SampleError,
                     SourceError, VersionError, WorkerError, WriterBusyError)
from .file.durable import Terminated, exit_on_signals
from .file.layout import NO_GROUP
from .file.reader import Reader, Record
from .file.writer import APPEND, COMPACT, OVERWRITE, UnclosedWriterWarning, Writer, write_arrays
from .image import batched, color, dense, transforms
from .sampling import data_source
from .stream.image_stream import ImageStream
from .stream.loader import ImageLoader
from .tools import ingest

# Public module names that the docs and batchup code import (``from picpac.transforms import Flip``,
# ``from picpac import data_source, work_pool``): each is the layer's module itself, registered under
# its public name the way ``os.path`` is ``posixpath``, so there is one module, not a copy.
PUBLIC_MODULES = {"transforms": transforms, "color": color, "dense": dense, "batched": batched,
                  "data_source": data_source, "work_pool": work_pool, "ingest": ingest}
for _name, _module in PUBLIC_MODULES.items():
    sys.modules[f"{__name__}.{_name}"] = _module
del _name, _module

__all__ = [
    "dataflow", "image", "sampling", "stores", *PUBLIC_MODULES,
    "CorruptError", "CorruptRecordError", "FileIOError", "FormatError", "ImageTooLargeError", "ImportFailedError", "MissingPathError", "NO_GROUP", "PicPacError",
    "ImageLoader", "ImageStream", "PicPacTypeError", "PicPacValueError", "Reader", "Record", "SampleError", "SourceError", "VersionError", "WorkerError", "Writer",
    "WriterBusyError", "__version__", "write_arrays",
    "OVERWRITE", "APPEND", "COMPACT", "PathExistsError", "UnclosedWriterWarning", "Terminated", "exit_on_signals",
]
