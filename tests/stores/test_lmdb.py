"""The LMDB store (picpac/stores/lmdb.py) grows its map as needed."""
from __future__ import annotations

import pytest

from picpac import stores

from conftest import payload


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
