"""One Reader used from worker processes: after fork and under spawn (the DataLoader case)."""
from __future__ import annotations

import hashlib
import multiprocessing as mp

import pytest

import picpac

from helpers import payload

N = 300
_reader: picpac.Reader | None = None


def _init(reader: picpac.Reader) -> None:
    global _reader
    _reader = reader


def _digest(i: int) -> tuple[int, str, float]:
    rec = _reader[i]
    return i, hashlib.sha256(rec["image"]).hexdigest(), rec.label


def expected() -> list[tuple[int, str, float]]:
    return [(i, hashlib.sha256(payload(i, 1000 + i)).hexdigest(), float(i % 7)) for i in range(N)]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(N):
            w.append(image=payload(i, 1000 + i), label=i % 7)
    return path


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_reader_in_worker_pool(db, method):
    order = list(range(N))[::-1] + list(range(N))
    with picpac.Reader(db) as reader:
        reader[0]  # touch the mapping in the parent before the workers start
        ctx = mp.get_context(method)
        with ctx.Pool(3, initializer=_init, initargs=(reader,)) as pool:
            got = pool.map(_digest, order, chunksize=7)
        # the parent keeps reading after its children did
        assert _digest_local(reader, 5) == expected()[5]
    want = expected()
    assert got == [want[i] for i in order]


def _digest_local(reader: picpac.Reader, i: int) -> tuple[int, str, float]:
    rec = reader[i]
    return i, hashlib.sha256(rec["image"]).hexdigest(), rec.label


def test_reader_inherited_by_fork_without_pickling(db):
    global _reader
    with picpac.Reader(db) as reader:
        _reader = reader
        try:
            with mp.get_context("fork").Pool(2) as pool:  # the global is inherited, not pickled
                got = pool.map(_digest, range(N))
        finally:
            _reader = None
    assert got == expected()
