"""What every store shares (picpac/stores/base.py): no store left by a failed write, forked and
pickled readers, named errors, reserved field names, missing optional packages."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import re
import sqlite3
import sys

import pytest

from picpac import stores
from picpac.errors import CorruptRecordError, FormatError, MissingPathError, PicPacError, PicPacValueError

from store_helpers import KINDS, _needs, store_path


@pytest.mark.parametrize("kind", KINDS)
def test_an_exception_leaves_no_store(kind, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    with pytest.raises(ZeroDivisionError):
        with stores.open_writer(path, kind) as w:
            w.append(image=b"abc")
            1 / 0
    assert os.listdir(tmp_path) == []


def _digest_of(args):
    reader, i = args
    record = reader[i]
    return hashlib.sha256(b"".join(bytes(v) for v in record.fields.values())).hexdigest(), record.label


_FORKED = None


def _forked_digest(i):
    record = _FORKED[i]
    return hashlib.sha256(b"".join(bytes(v) for v in record.fields.values())).hexdigest(), record.label


@pytest.mark.parametrize("kind", KINDS)
def test_reads_in_forked_workers_and_after_pickling(kind, db, tmp_path):
    _needs(kind)
    global _FORKED
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    with stores.open_reader(path, kind) as reader:
        expected = [_digest_of((reader, i)) for i in range(len(reader))]  # the parent's handles are in use
        _FORKED = reader
        try:
            with mp.get_context("fork").Pool(2) as pool:
                assert pool.map(_forked_digest, range(len(reader)), chunksize=3) == expected
        finally:
            _FORKED = None
        assert [_digest_of((reader, i)) for i in range(len(reader))] == expected  # the parent still reads
        clone = pickle.loads(pickle.dumps(reader))
        assert type(clone) is type(reader) and [_digest_of((clone, i)) for i in range(len(clone))] == expected
        clone.close()


def _damage(path: str, kind: str) -> None:
    """Cut a store to half its size."""
    target = os.path.join(path, "data.mdb") if kind == "lmdb" else path
    size = os.path.getsize(target)
    with open(target, "r+b") as f:
        f.truncate(size // 2)


@pytest.mark.parametrize("kind", KINDS)
def test_missing_wrong_and_truncated_stores_are_named(kind, db, tmp_path):
    _needs(kind)
    missing = str(tmp_path / "missing.store")
    with pytest.raises(MissingPathError, match=re.escape(missing)):
        stores.open_reader(missing, kind)
    wrong = tmp_path / "wrong.store"
    wrong.write_bytes(b"hello, this is not a dataset\n" * 100)
    if kind == "binary":
        (tmp_path / "wrong.store.idx").write_bytes(b"nope")
    with pytest.raises(FormatError, match=re.escape(str(tmp_path / "wrong.store"))):
        stores.open_reader(wrong, kind)
    path = store_path(tmp_path, kind)
    stores.export_store(db, path, kind)
    _damage(path, kind)
    with pytest.raises(PicPacError, match=re.escape(path)):
        with stores.open_reader(path, kind) as r:
            for i in range(len(r)):
                r[i]


def test_reserved_field_names_are_refused(tmp_path):
    for kind, name in [("tar", "cls"), ("tar", "json"), ("tar", "a/b"), ("tfrecord", "picpac/label"),
                       ("sqlite", "Label"), ("sqlite", "id")]:
        with stores.open_writer(tmp_path / f"x.{kind}", kind) as w:
            with pytest.raises(PicPacValueError, match=re.escape(repr(name))):
                w.append({name: b"x"})
            w.append(image=b"x")
    with stores.open_writer(tmp_path / "y.sqlite", "sqlite") as w:
        w.append(image=b"x")
        with pytest.raises(PicPacValueError, match="case"):
            w.append(Image=b"x")


def test_missing_optional_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lmdb", None)  # import lmdb raises ImportError
    monkeypatch.setitem(sys.modules, "h5py", None)
    for kind in ("lmdb", "hdf5"):
        with pytest.raises(stores.MissingPackageError, match=re.escape("pip install picpac[formats]")):
            stores.open_writer(tmp_path / f"x.{kind}", kind)
    assert os.listdir(tmp_path) == []


def test_a_store_record_with_bad_meta_names_the_store(tmp_path):
    path = str(tmp_path / "bad.sqlite")
    with stores.open_writer(path, "sqlite") as w:
        w.append(image=b"x", meta={"a": 1})
    with sqlite3.connect(path) as con:
        con.execute("UPDATE records SET meta = ?", ("[" * 100_000,))
    with stores.open_reader(path, "sqlite") as r:
        with pytest.raises(CorruptRecordError, match=rf"{re.escape(path)}: record 0 has meta that is not valid JSON"):
            r[0].meta
