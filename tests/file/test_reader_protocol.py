"""The reader protocols (picpac/file/reader.py): every reader (a picpac file local or remote, its shards, every
other store format, a child process reading one) is a RecordReader, and the readers of picpac databases are
IndexedReaders, on real files with their real records."""
from __future__ import annotations

import inspect
import itertools
import os

import numpy as np
import pytest

import picpac
from picpac import stores
from picpac.file.reader import IndexedReader, Reader, RecordReader
from picpac.file.remote import RemoteOptions, RemoteReader
from picpac.file.shards import ShardedReader
from picpac.stores.base import StoreReader
from picpac.stores.convert import IsolatedReader

_buckets = itertools.count()
CLASSES = ["cat", "dog", "eel"]


def write(path, start: int, n: int) -> str:
    """Records start..start+n-1: an 8-byte array 'image' (declared), a label i % 3, a group i // 2, meta {"i": i}."""
    with picpac.Writer(path, metadata={"classes": CLASSES, "arrays": {"image": {"shape": [8], "dtype": "uint8"}}}) as w:
        for i in range(start, start + n):
            w.append(image=np.arange(i, i + 8, dtype=np.uint8).tobytes(), label=i % 3, group=i // 2, meta={"i": i})
    return str(path)


def expected(n: int = 10) -> list[tuple]:
    return [(i, float(i % 3), i // 2, bytes(range(i, i + 8)), {"i": i}) for i in range(n)]


def seen(records) -> list[tuple]:
    return [(r.index, r.label, r.group, bytes(r["image"]), r.meta) for r in records]


def members(protocol: type) -> set[str]:
    """What a protocol asks for: its own annotations, methods and properties (of it and the protocols it extends)."""
    names = set()
    for cls in protocol.__mro__:
        if cls in (RecordReader, IndexedReader):
            names |= set(cls.__annotations__) | {n for n, v in vars(cls).items() if not n.startswith("_")
                                                 and (callable(v) or isinstance(v, property))}
            names |= {n for n in ("__len__", "__iter__", "__getitem__", "__enter__", "__exit__") if n in vars(cls)}
    return names


def check_record_reader(reader, path: str, indices: list[int] = list(range(10))) -> None:
    """``indices``: the records' own (a shard's record numbers, in a ShardedReader)."""
    assert isinstance(reader, RecordReader) and RecordReader in type(reader).__mro__
    assert {m for m in members(RecordReader) if inspect.getattr_static(reader, m, None) is None} == set()
    assert path in reader.path
    assert (len(reader), reader.fields, reader.classes) == (10, ["image"], CLASSES)
    assert reader.metadata["classes"] == CLASSES
    assert seen(reader) == [(i, *e[1:]) for i, e in zip(indices, expected())]


def check_indexed_reader(reader) -> None:
    assert IndexedReader in type(reader).__mro__
    assert {m for m in members(IndexedReader) if inspect.getattr_static(reader, m, None) is None} == set()
    assert reader.labels.tolist() == [i % 3 for i in range(10)] and reader.groups.tolist() == [i // 2 for i in range(10)]
    assert [r[1:] for r in seen([reader[7], reader.read(-1, True), reader.read(2, False)])] == \
        [expected()[i][1:] for i in (7, 9, 2)]
    assert list(reader.arrays) == ["image"] and reader.array(4).tolist() == list(range(4, 12))
    reader.prefetch(np.array([3, 8]))
    assert (reader.check, reader.closed) == (True, False)


@pytest.fixture
def files(tmp_path):
    return write(tmp_path / "all.picpac", 0, 10), [write(tmp_path / "a.picpac", 0, 4), write(tmp_path / "b.picpac", 4, 6)]


def test_a_reader_is_an_indexed_record_reader(files):
    with Reader(files[0]) as reader:
        check_record_reader(reader, files[0])
        check_indexed_reader(reader)
        assert (reader.mapped, reader.downloads) == (True, False)
    assert reader.closed


def test_a_sharded_reader_is_an_indexed_record_reader(files):
    with ShardedReader(files[1]) as reader:
        check_record_reader(reader, files[1][0], [0, 1, 2, 3, 0, 1, 2, 3, 4, 5])
        check_indexed_reader(reader)
        assert (reader.mapped, reader.downloads) == (False, False)
    assert reader.closed


def test_a_remote_reader_is_an_indexed_record_reader(files, s3_server, tmp_path):
    url = s3_server.put(f"protocol{next(_buckets)}-{os.getpid()}", "all.picpac", open(files[0], "rb").read())
    options = RemoteOptions(storage_options=s3_server.options, cache_dir=str(tmp_path / "cache"), backoff=0.05)
    with RemoteReader(url, options=options) as reader:
        check_record_reader(reader, url)
        check_indexed_reader(reader)
        assert (reader.mapped, reader.downloads) == (False, True)
    assert reader.closed


@pytest.mark.parametrize("kind", stores.KINDS)
def test_every_store_reader_is_a_record_reader(files, tmp_path, kind):
    pytest.importorskip({"lmdb": "lmdb", "hdf5": "h5py"}.get(kind, "numpy"))
    path = str(tmp_path / f"all.{kind}")
    stores.export_store(files[0], path, kind)
    with stores.open_reader(path, kind) as reader:
        assert isinstance(reader, StoreReader)
        check_record_reader(reader, path)
        assert IndexedReader not in type(reader).__mro__  # records by position, but no index of labels and groups
    if kind in stores.convert.CHILD_READS:
        with IsolatedReader(path, kind) as reader:
            check_record_reader(reader, path)
        with pytest.raises(ProcessLookupError):  # ``with`` closed it: the child is stopped and reaped
            os.kill(reader._child.pid, 0)
