"""The public API stays where the docs and batchup code import it from, whatever the layout inside."""
from __future__ import annotations

import importlib
import json
import pickle
import subprocess
import sys

import pytest

import picpac

# Every public name, by the module path users import it from (the README, docs/, batchup's modules).
PUBLIC = {
    "picpac": [
        "ImageStream", "ImageLoader", "StreamConfig", "Writer", "Reader", "Record", "write_arrays", "NO_GROUP", "__version__",
        "PicPacError", "PicPacTypeError", "PicPacValueError", "CorruptError", "CorruptRecordError", "FormatError",
        "VersionError", "MissingPathError", "ImportFailedError", "SampleError", "SourceError", "WorkerError",
        "WriterBusyError", "ImageTooLargeError", "FileIOError", "RemoteReadError", "RemoteTimeoutError", "WorkerTimeoutError",
        "OVERWRITE", "APPEND", "COMPACT", "PathExistsError", "UnclosedWriterWarning", "Terminated", "exit_on_signals",
        "dataflow", "image", "sampling", "stores", "transforms", "color", "dense", "batched", "data_source",
        "work_pool", "ingest",
    ],
    "picpac.transforms": [
        "Sample", "Transform", "Resize", "LimitSize", "Scale", "Crop", "CenterCrop", "RoundSize", "Pad",
        "RandomResizedCrop", "Flip", "Rotate90", "Rotate", "Affine", "Sometimes", "SomeOf", "OneOf", "Rasterize",
        "ErodeMask", "apply_all", "convert",
    ],
    "picpac.color": ["AddColor", "Blur", "Color", "ColorJitter", "Grayscale", "Invert", "Normalize"],
    "picpac.dense": ["BasicKeypoints", "BoxFeature", "DenseBoxAnchors", "DenseCircleAnchors", "DensePointAnchors"],
    "picpac.batched": ["plan", "draws", "convert", "Plan", "BatchCrop", "BatchFlip", "BatchNormalize", "BatchPad"],
    "picpac.image": ["REGION_DECODE", "decode", "encode", "shape_of", "shrink", "jpeg_header", "decode_channels",
                     "MAX_PIXELS", "check_pixels", "image_size"],
    "picpac.ingest": ["import_dataset", "ImportReport"],
    "picpac.stores": [
        "KINDS", "open_reader", "open_writer", "import_store", "export_store", "store_size", "ConvertReport",
        "IsolatedReader", "StoreReader", "StoreWriter", "MissingPackageError", "LmdbReader", "LmdbWriter",
        "TFRecordReader", "TFRecordWriter", "HDF5Reader", "HDF5Writer", "NpzReader", "NpzWriter", "SqliteReader",
        "SqliteWriter", "TarReader", "TarWriter", "BinaryReader", "BinaryWriter", "crc32c", "masked_crc32c", "tfrecord_frame",
        "encode_record", "decode_record", "encode_example", "decode_example", "index_path",
        "TABLE_KINDS", "ParquetReader", "ParquetWriter", "ArrowReader", "MdsReader", "TablePlan", "plan_table",
    ],
    "picpac.tools.tables": ["import_table"],
    "picpac.sampling": [
        "AbstractSampler", "StandardSampler", "SubsetSampler", "WeightedSampler", "WeightedSubsetSampler",
        "Sampler", "assign_folds", "select", "num_batches",
    ],
    "picpac.data_source": [
        "AbstractDataSource", "ArrayDataSource", "CallableDataSource", "ChoiceBatch", "ChoiceDataSource",
        "CompositeDataSource", "IteratorDataSource", "MapDataSource", "RandomAccessDataSource", "ReaderArray",
        "batch_map", "batch_map_concat", "batch_map_mean", "coerce_data_source", "mean_batch_map",
    ],
    "picpac.work_pool": ["AbstractWorkerPool", "ParallelDataSource", "SharedConstant", "WorkStream",
                         "WorkerProcessPool", "WorkerThreadPool"],
    "picpac.dataflow": [
        "DataFlow", "ProxyDataFlow", "RNGDataFlow", "DataFlowTerminated", "DataFlowError", "DataFlowReentrantGuard",
        "MissingDependencyError", "WireFormatError", "FORMATS", "worker_path", "TestDataSpeed", "PrintData",
        "BatchData", "BatchDataByShape", "FixedSizeData", "MapData", "MapDataComponent", "RepeatedData",
        "RepeatedDataPoint", "RandomChooseData", "RandomMixData", "JoinData", "ConcatData", "SelectComponent",
        "LocallyShuffleData", "CacheData", "HDF5Data", "LMDBData", "LMDBDataDecoder", "LMDBDataPoint", "CaffeLMDB",
        "SVMLightData", "PicPacData", "ImageFromFile", "AugmentImageComponent", "AugmentImageComponents",
        "AugmentImageCoordinates", "MultiProcessRunner", "MultiProcessRunnerZMQ", "MultiThreadRunner",
        "PrefetchData", "MultiProcessPrefetchData", "PrefetchDataZMQ", "MultiThreadPrefetchData",
        "MultiThreadMapData", "MultiProcessMapData", "MultiProcessMapDataZMQ", "MultiProcessMapAndBatchData",
        "MultiProcessMapAndBatchDataZMQ", "FakeData", "DataFromQueue", "DataFromList", "DataFromGenerator",
        "DataFromIterable", "send_dataflow_zmq", "RemoteDataZMQ", "RemoteTimeout", "LMDBSerializer",
        "NumpySerializer", "TFRecordSerializer", "HDF5Serializer", "PicPacSerializer", "TFRecordData",
    ],
}
# Public module paths whose code lives in a layer's subpackage: the same module object, not a copy.
HOMES = {"picpac.transforms": "picpac.image.transforms", "picpac.color": "picpac.image.color",
         "picpac.dense": "picpac.image.dense", "picpac.batched": "picpac.image.batched",
         "picpac.data_source": "picpac.compat.batchup.data_source", "picpac.work_pool": "picpac.compat.batchup.work_pool",
         "picpac.dataflow": "picpac.compat.dataflow", "picpac.ingest": "picpac.tools.ingest"}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_imports_from_its_documented_module(module):
    imported = importlib.import_module(module)
    assert [name for name in PUBLIC[module] if not hasattr(imported, name)] == []


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_a_fresh_interpreter_imports_each_public_module_by_its_name(module):
    """``import picpac.data_source`` and ``from picpac.work_pool import ...`` work as a script's first line."""
    names = ", ".join(n for n in PUBLIC[module] if not n.startswith("__"))
    code = f"import {module}\nfrom {module} import {names}\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("public, home", sorted(HOMES.items()))
def test_a_public_module_path_is_the_module_itself(public, home):
    assert importlib.import_module(public) is importlib.import_module(home)
    assert getattr(picpac, public.rsplit(".", 1)[1]) is sys.modules[home]


def test_import_picpac_loads_no_adapter():
    """``picpac.ray`` is named by the package but imported on first use: ``import picpac`` loads no framework."""
    code = "import sys, picpac\nprint([n for n in ('ray', 'picpac.ray', 'picpac.adapters.ray') if n in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_picpac_ray_is_the_ray_adapter_itself():
    """``import picpac.ray``, ``from picpac import ray`` and ``picpac.ray`` give picpac.adapters.ray (docs/adapters.md,
    "Ray Data"), the module itself, as the public module paths above are theirs."""
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'picpac[ray]')")
    code = ("import sys, picpac\n"
            "from picpac import ray\n"
            "import picpac.ray\n"
            "from picpac.ray import read_picpac, write_picpac, import_images, StreamTransform\n"
            "import picpac.adapters.ray as adapter\n"
            "assert ray is picpac.ray is adapter is sys.modules['picpac.ray'] and read_picpac is adapter.read_picpac\n"
            "assert adapter.__spec__.name == 'picpac.adapters.ray'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_public_objects_pickle_by_the_module_that_holds_them():
    """Recipes sent to spawned workers name the real module, which imports without the alias."""
    flip = picpac.transforms.Flip(horizontal=0.5)
    assert type(pickle.loads(pickle.dumps(flip))) is picpac.transforms.Flip
    assert picpac.transforms.Flip.__module__ == "picpac.image.transforms"


def test_pickles_naming_the_old_homes_of_the_compat_modules_load():
    """batchup's and tensorpack's modules moved from the core layers to compat/: a pickle made before names
    ``picpac.dataflow.base`` or ``picpac.sampling.data_source``, and loads (in a fresh interpreter) as the same class."""
    from picpac.compat.batchup.batch_samplers import StandardSampler
    from picpac.compat.batchup.data_source import ArrayDataSource
    from picpac.compat.batchup.work_pool import SharedConstant
    from picpac.compat.dataflow.base import DataFlowError
    from picpac.compat.dataflow.common import BatchData
    moved = {"picpac.dataflow.base": DataFlowError("gone"), "picpac.dataflow.common": BatchData,
             "picpac.sampling.batch_samplers": StandardSampler, "picpac.sampling.data_source": ArrayDataSource,
             "picpac.engine.work_pool": SharedConstant}
    old, homes = [], []
    for path, obj in moved.items():
        cls = obj if isinstance(obj, type) else type(obj)
        data = pickle.dumps(obj, protocol=0)  # names the module as text: "c<module>\n<class>\n"
        assert data.count(f"c{cls.__module__}\n".encode()) == 1
        old.append(data.replace(f"c{cls.__module__}\n".encode(), f"c{path}\n".encode()))
        homes.append(f"{cls.__module__}.{cls.__qualname__}")
    code = ("import json, pickle\n"
            f"objs = [pickle.loads(d) for d in {old!r}]\n"
            "kinds = [o if isinstance(o, type) else type(o) for o in objs]\n"
            "print(json.dumps([[f'{k.__module__}.{k.__qualname__}' for k in kinds], str(objs[0])]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [homes, "gone"]


def test_the_public_api_lists_what_it_offers():
    assert sorted(picpac.__all__) == sorted(PUBLIC["picpac"])
    assert sorted(picpac.dataflow.__all__) == sorted(PUBLIC["picpac.dataflow"])
    for module in ("picpac.sampling", "picpac.data_source", "picpac.work_pool"):
        assert sorted(importlib.import_module(module).__all__) == sorted(PUBLIC[module]), module
