"""Bugs the fuzzers found that are not fixed yet (docs/reliability.md lists each with a reproducer).

The CI tests tolerate exactly these signatures (``Known.matches``) and fail on any other; the runner
counts them apart. When a bug is fixed, delete its entry: the tests then hold the fix.
"""
from __future__ import annotations

from .common import Known

KNOWN: dict[str, tuple[Known, ...]] = {
    "config": (
        # config values that pass parse() but are unbounded or inconsistent reach OpenCV and NumPy raw
        Known("config-unbounded", "error", ""),
        Known("config-unbounded", "MemoryError", ""),
        Known("config-unbounded", "OverflowError", ""),
        Known("config-unbounded", "ValueError", "image.transforms.convert"),
        Known("config-unbounded", "ValueError", "image.dense.keypoint_maps"),
        Known("config-unbounded", "ValueError", "stream.processor._onehot_labels"),
        Known("config-unbounded", "ValueError", "stream.processor._task_targets"),
        Known("config-unbounded", "ValueError", "sampling.sampler.take"),
        # a NumPy array as a value: `value == option` / `value == ""` is an array, and `if` of it a ValueError
        Known("config-array-value", "ValueError", "stream.config.check"),
        Known("config-array-value", "ValueError", "stream.config._path_or_none"),
    ),
    "store-hdf5": (
        # a dataset declaring 2**56 elements is read whole at open (labels, groups, presence flags)
        Known("hdf5-huge-datasets", "MemoryError", "stores.hdf5._open"),
        Known("hdf5-huge-datasets", "MemoryError", "stores.hdf5.<dictcomp>"),
        # inside the HDF5 library: a damaged file crashes it (and reading a damaged attribute can hang)
        Known("hdf5-crash", "SIGSEGV", "crash"),
        Known("hdf5-crash", "SIGBUS", "crash"),
        Known("hdf5-crash", "SIGABRT", "crash"),
    ),
    "store-lmdb": (
        # a damaged data.mdb is mapped, and a read through a bad page pointer dies of SIGBUS (or SIGSEGV)
        Known("lmdb-crash", "SIGBUS", "crash"),
        Known("lmdb-crash", "SIGSEGV", "crash"),
    ),
}
