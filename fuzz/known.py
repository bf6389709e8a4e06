"""Bugs the fuzzers found that are not fixed yet (docs/reliability.md lists each with a reproducer).

The CI tests tolerate exactly these signatures (``Known.matches``) and fail on any other; the runner
counts them apart. When a bug is fixed, delete its entry: the tests then hold the fix.
"""
from __future__ import annotations

from .common import Known

KNOWN: dict[str, tuple[Known, ...]] = {
    "store-hdf5": (
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
