"""The LMDB store (picpac/stores/lmdb.py) grows its map as needed, writes nothing but its records; damage
liblmdb finds is a CorruptError."""
from __future__ import annotations

import hashlib
import re
import struct

import pytest

from picpac import stores
from picpac.errors import CorruptError

from helpers import payload


def test_lmdb_map_grows_as_needed(tmp_path, monkeypatch):
    pytest.importorskip("lmdb")
    monkeypatch.setattr(stores.LmdbWriter, "_MAP_SIZE", 64 << 10)
    monkeypatch.setattr(stores.LmdbWriter, "_BATCH_BYTES", 100 << 10)
    images = [payload(i, 30_000) for i in range(40)]  # 1.2 MB into a 64 KiB map
    with stores.open_writer(tmp_path / "grow.lmdb", "lmdb") as w:
        for image in images:
            w.append(image=image)
    with stores.open_reader(tmp_path / "grow.lmdb", "lmdb") as r:
        assert [bytes(rec["image"]) for rec in r] == images


def test_the_store_holds_no_leftovers_of_the_writers_memory(tmp_path):
    """Each record's bytes are in data.mdb once: the unused ends of pages are zeros, not copies of whatever
    the writing process's heap held (other records, or anything else it had in memory)."""
    pytest.importorskip("lmdb")
    for trial in range(5):
        path = tmp_path / f"{trial}.lmdb"
        with stores.open_writer(path, "lmdb") as w:
            for i in range(8):
                w.append(image=payload(i, 3000), label=i)
        data = (path / "data.mdb").read_bytes()
        # payload(i) repeats one 32-byte digest: 93 whole copies of it in each record
        assert [data.count(hashlib.sha256(str(i).encode()).digest()) for i in range(8)] == [3000 // 32] * 8


def test_damage_liblmdb_reports_is_a_corrupt_error(tmp_path):
    pytest.importorskip("lmdb")
    path = tmp_path / "s.lmdb"
    with stores.open_writer(path, "lmdb") as w:
        for i in range(3):
            w.append(image=payload(i, 100))
    data = bytearray((path / "data.mdb").read_bytes())
    (flags,) = struct.unpack_from("<H", data, 2 * 4096 + 10)
    assert flags & 0x02  # page 2: the leaf of every key
    struct.pack_into("<H", data, 2 * 4096 + 10, 0x10)  # now it says it is a meta page
    (path / "data.mdb").write_bytes(data)
    with pytest.raises(CorruptError, match=re.escape(f"{path}: damaged lmdb store (CorruptedError: mdb_get: "
                                                     "MDB_CORRUPTED: Located page was wrong type)")):
        stores.open_reader(path, "lmdb")
    with pytest.raises(CorruptError, match=re.escape(f"{path}: damaged lmdb store (CorruptedError")):
        stores.import_store(path, tmp_path / "db", "lmdb")


def test_a_nested_description_is_a_corrupt_error(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "s.lmdb"
    with lmdb.open(str(path), map_size=1 << 20) as env, env.begin(write=True) as txn:
        txn.put(stores.LMDB_META_KEY, b"[" * 100_000)
    with pytest.raises(CorruptError, match=re.escape(f"{path}: damaged __picpac__ entry (nested too deeply)")):
        stores.open_reader(path, "lmdb")
