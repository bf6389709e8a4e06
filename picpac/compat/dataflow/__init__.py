"""tensorpack's DataFlow API on picpac's engines. See docs/dataflow.md.

A DataFlow is an iterable of datapoints with ``__len__`` and ``reset_state``. The classes here keep
tensorpack's names, arguments and documented behaviour; the parallel ones run on picpac's thread and
process engines (``picpac.engine``), which forward a worker's exception with its traceback, notice a
dead worker at once, and stop every thread and process on ``close()``.
"""
from .base import (DataFlow, DataFlowError, DataFlowReentrantGuard, DataFlowTerminated, MissingDependencyError,
                   ProxyDataFlow, RNGDataFlow, worker_path)
from .codec import FORMATS, WireFormatError
from .common import (BatchData, BatchDataByShape, CacheData, ConcatData, FixedSizeData, JoinData,
                     LocallyShuffleData, MapData, MapDataComponent, PrintData, RandomChooseData, RandomMixData,
                     RepeatedData, RepeatedDataPoint, SelectComponent, TestDataSpeed)
from .format import CaffeLMDB, HDF5Data, LMDBData, LMDBDataDecoder, LMDBDataPoint, PicPacData, SVMLightData
from .image import AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, ImageFromFile
from .parallel import (MultiProcessPrefetchData, MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadPrefetchData,
                       MultiThreadRunner, PrefetchData, PrefetchDataZMQ)
from .parallel_map import (MultiProcessMapAndBatchData, MultiProcessMapAndBatchDataZMQ, MultiProcessMapData,
                           MultiProcessMapDataZMQ, MultiThreadMapData)
from .raw import DataFromGenerator, DataFromIterable, DataFromList, DataFromQueue, FakeData
from .remote import RemoteDataZMQ, RemoteTimeout, send_dataflow_zmq
from .serialize import (HDF5Serializer, LMDBSerializer, NumpySerializer, PicPacSerializer, TFRecordData,
                        TFRecordSerializer)

__all__ = [
    "DataFlow", "ProxyDataFlow", "RNGDataFlow", "DataFlowTerminated", "DataFlowError", "DataFlowReentrantGuard",
    "MissingDependencyError", "WireFormatError", "FORMATS", "worker_path",
    "TestDataSpeed", "PrintData", "BatchData", "BatchDataByShape", "FixedSizeData", "MapData", "MapDataComponent",
    "RepeatedData", "RepeatedDataPoint", "RandomChooseData", "RandomMixData", "JoinData", "ConcatData",
    "SelectComponent", "LocallyShuffleData", "CacheData",
    "HDF5Data", "LMDBData", "LMDBDataDecoder", "LMDBDataPoint", "CaffeLMDB", "SVMLightData", "PicPacData",
    "ImageFromFile", "AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates",
    "MultiProcessRunner", "MultiProcessRunnerZMQ", "MultiThreadRunner", "PrefetchData", "MultiProcessPrefetchData",
    "PrefetchDataZMQ", "MultiThreadPrefetchData",
    "MultiThreadMapData", "MultiProcessMapData", "MultiProcessMapDataZMQ", "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "FakeData", "DataFromQueue", "DataFromList", "DataFromGenerator", "DataFromIterable",
    "send_dataflow_zmq", "RemoteDataZMQ", "RemoteTimeout",
    "LMDBSerializer", "NumpySerializer", "TFRecordSerializer", "HDF5Serializer", "PicPacSerializer", "TFRecordData",
]
