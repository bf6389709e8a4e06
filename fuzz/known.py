"""Failures the fuzzers meet that picpac's code does not fix (docs/reliability.md lists each with a reproducer).

What is left are crashes inside liblmdb and libhdf5 on damaged files: the targets drive ``open_reader``,
which runs those libraries in the calling process (documented for trusted files only), while every
import reads them in a child process where a crash is a CorruptError (``IsolatedReader``). A bug the
fuzzers find goes here until it is fixed, then its entry is deleted and the tests hold the fix.
The CI tests tolerate exactly these signatures (``Known.matches``) and fail on any other; the runner
counts them apart.
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
