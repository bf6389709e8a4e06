"""picpac: a whole training dataset in one file, streamed with on-the-fly decoding and augmentation.

The package is one subpackage per layer (docs/architecture.md); this module is the public API.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from . import image, sampling, stores  # public subpackages (stores.md, data_source.md)
from ._version import __version__
from .compat import dataflow  # public as picpac.dataflow (docs/dataflow.md)
from .compat.batchup import batch_samplers, data_source, work_pool
from .errors import (CorruptError, CorruptRecordError, FileIOError, FormatError, ImageTooLargeError, ImportFailedError,
                     MissingPathError, PathExistsError, PicPacError, PicPacTypeError, PicPacValueError, RemoteReadError,
                     RemoteTimeoutError, SampleError, SourceError, VersionError, WorkerError, WorkerTimeoutError,
                     WriterBusyError)
from .file.durable import Terminated, exit_on_signals
from .file.layout import NO_GROUP
from .file.reader import Reader, Record
from .file.writer import APPEND, COMPACT, OVERWRITE, UnclosedWriterWarning, Writer, write_arrays
from .image import batched, color, dense, transforms
from .stream.config import StreamConfig
from .stream.image_stream import ImageStream
from .stream.loader import ImageLoader
from .tools import ingest

# Public module names that the docs and batchup code import (``from picpac.transforms import Flip``,
# ``from picpac import data_source, work_pool``, ``from picpac.dataflow import BatchData``): each is the
# layer's module itself, registered under its public name the way ``os.path`` is ``posixpath``, so there
# is one module, not a copy.
PUBLIC_MODULES = {"transforms": transforms, "color": color, "dense": dense, "batched": batched,
                  "data_source": data_source, "work_pool": work_pool, "ingest": ingest, "dataflow": dataflow}
# Where the compat modules lived inside the core layers before they moved to compat/: pickles name these
# paths (a DataFlowError sent by an older peer, a saved data source), so they load as the module itself too.
MOVED_MODULES = {"sampling.data_source": data_source, "sampling.batch_samplers": batch_samplers,
                 "engine.work_pool": work_pool,
                 **{f"dataflow.{name.rpartition('.')[2]}": module for name, module in list(sys.modules.items())
                    if name.startswith(f"{dataflow.__name__}.")}}
for _name, _module in (PUBLIC_MODULES | MOVED_MODULES).items():
    sys.modules[f"{__name__}.{_name}"] = _module
    _package, _, _last = _name.rpartition(".")
    if _package:  # ``picpac.sampling.data_source`` as an attribute, as a submodule is
        setattr(sys.modules[f"{__name__}.{_package}"], _last, _module)
# batchup code imports its samplers from ``picpac.sampling``: the core package offers them by their names.
for _name in batch_samplers.__all__:
    setattr(sampling, _name, getattr(batch_samplers, _name))
sampling.__all__ = [*sampling.__all__, *batch_samplers.__all__]
del _name, _module, _package, _last

# Public module names of adapters (``picpac.ray`` is Ray Data's, docs/adapters.md): each is the adapter module
# itself, as above, but imported only when first used, since ``import picpac`` must not import a framework. The
# finder serves ``import picpac.ray`` and ``from picpac.ray import ...``; ``__getattr__`` serves ``picpac.ray``
# and ``from picpac import ray`` after ``import picpac``.
LAZY_MODULES = {"ray": "picpac.adapters.ray"}


class _LazyAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``picpac.<alias>`` as the module LAZY_MODULES names (one module, not a copy)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in LAZY_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(LAZY_MODULES[spec.name.rpartition(".")[2]])
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias's; exec_module restores it
        return module

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__  # the alias's, which create_module gave the aliased module's spec to keep
        assert spec is not None, "the import system sets it before exec_module"
        module.__spec__ = spec.loader_state  # the module itself ran when it was imported


sys.meta_path.append(_LazyAliasFinder())


def __getattr__(name: str) -> ModuleType:
    if name in LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "image", "sampling", "stores", *PUBLIC_MODULES,
    "CorruptError", "CorruptRecordError", "FileIOError", "FormatError", "ImageTooLargeError", "ImportFailedError", "MissingPathError", "NO_GROUP", "PicPacError",
    "ImageLoader", "ImageStream", "StreamConfig", "PicPacTypeError", "PicPacValueError", "Reader", "Record", "RemoteReadError", "RemoteTimeoutError", "SampleError", "SourceError", "VersionError", "WorkerError",
    "WorkerTimeoutError", "Writer",
    "WriterBusyError", "__version__", "write_arrays",
    "OVERWRITE", "APPEND", "COMPACT", "PathExistsError", "UnclosedWriterWarning", "Terminated", "exit_on_signals",
]
