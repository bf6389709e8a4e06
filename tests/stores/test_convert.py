"""Converting (picpac/stores/convert.py): round trips through every format, the writer API, and what
other tools see in the stores picpac writes."""
from __future__ import annotations

import os
import sqlite3
import tarfile

import numpy as np
import pytest

import picpac
from picpac import stores
from picpac.errors import PicPacValueError

from helpers import payload
from store_helpers import KINDS, _needs, assert_same_records, make_db, store_path


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_keeps_every_byte(kind, db, tmp_path):
    _needs(kind)
    dst, back = store_path(tmp_path, kind), str(tmp_path / "back.picpac")
    out = stores.export_store(db, dst, kind)
    assert out.count == 23 and out.destination_bytes == stores.store_size(dst, kind) > 0
    with picpac.Reader(db) as source, stores.open_reader(dst, kind) as store:
        assert store.metadata["fields"] == source.fields == ["image", "annotation", "mask"]
        assert store.classes == ["cat", "dog", "eel"]
        assert_same_records(source, store)
    back_report = stores.import_store(dst, back, kind)
    assert back_report.count == 23 and back_report.source_bytes == out.destination_bytes
    with picpac.Reader(db) as source, picpac.Reader(back) as copy:
        assert copy.metadata == source.metadata  # fields, classes, created, the rest
        assert_same_records(source, copy)
        assert (copy.labels.view(np.uint64) == source.labels.view(np.uint64)).all()  # -0.0 and all
        assert (copy.groups == source.groups).all()


@pytest.mark.parametrize("kind", KINDS)
def test_empty_store_round_trip(kind, tmp_path):
    _needs(kind)
    db = str(tmp_path / "empty.picpac")
    with picpac.Writer(db, metadata={"classes": ["a"]}):
        pass
    stores.export_store(db, store_path(tmp_path, kind), kind)
    with stores.open_reader(store_path(tmp_path, kind), kind) as store:
        assert len(store) == 0 and store.classes == ["a"]
    stores.import_store(store_path(tmp_path, kind), tmp_path / "back.picpac", kind)
    with picpac.Reader(db) as a, picpac.Reader(tmp_path / "back.picpac") as b:
        assert len(b) == 0 and a.metadata == b.metadata


@pytest.mark.parametrize("kind", KINDS)
def test_writer_api_and_existing_target(kind, tmp_path):
    _needs(kind)
    path = store_path(tmp_path, kind)
    for round_ in range(2):  # the second writer replaces the first store
        with stores.open_writer(path, kind, metadata={"classes": ["a", "b"]}) as w:
            for i in range(3 + round_):
                w.append(image=payload(i), label=i % 2, group=7, meta={"k": round_})
    with stores.open_reader(path, kind) as r:
        assert len(r) == 4 and r.fields == ["image"] and r[3].meta == {"k": 1}
        assert [bytes(rec["image"]) for rec in r] == [payload(i) for i in range(4)]
        assert [(rec.label, rec.group) for rec in r] == [(0, 7), (1, 7), (0, 7), (1, 7)]
    with pytest.raises(PicPacValueError, match="already exists"):
        stores.export_store(make_db(tmp_path / "x.picpac", 2), path, kind)
    leftovers = [name for name in os.listdir(tmp_path) if name.startswith(".")]
    assert leftovers == []


# -- other tools read what picpac writes, and the other way round --------------------------------------
def test_stores_follow_their_formats_conventions(db, tmp_path):
    stores.export_store(db, tmp_path / "d.tar", "tar")
    with tarfile.open(tmp_path / "d.tar") as tar:
        names = tar.getnames()
        assert names[:4] == ["000000.image", "000000.annotation", "000000.cls", "000001.image"]
        assert tar.extractfile("000001.cls").read() == b"1" and tar.extractfile("000006.cls").read() == b"-7"
        # WebDataset decodes .cls with int(): a label that is not a whole number goes to .picpac.label
        assert "000002.cls" not in names and tar.extractfile("000002.picpac.label").read() == b"2.5"
        assert tar.extractfile("000004.picpac.label").read() == b"-0.0"
        assert tar.extractfile("000001.json").read() == b'{"i":1,"name":"x1.jpg"}'
        assert names[-1] == "000022.picpac.json"
    stores.export_store(db, tmp_path / "d.sqlite", "sqlite")
    with sqlite3.connect(tmp_path / "d.sqlite") as con:
        assert con.execute('SELECT id, label, "group", image FROM records WHERE id = 3').fetchone() == \
            (3, 0.1, -2, payload(3, 50 + 97 * 3))
    stores.export_store(db, tmp_path / "d.npz", "npz")
    with np.load(tmp_path / "d.npz") as npz:
        data, offsets = npz["data:image"], npz["offsets:image"]
        assert data[offsets[3]:offsets[4]].tobytes() == payload(3, 50 + 97 * 3)
        assert npz["label"][2] == 2.5 and npz["present:mask"].tolist() == [i == 4 for i in range(23)]
        arrays = dict(npz)
    np.savez(tmp_path / "savez.npz", **arrays)  # what np.savez writes reads back the same
    np.savez_compressed(tmp_path / "compressed.npz", **arrays)  # (loaded whole, not mapped)
    with picpac.Reader(db) as source:
        for name in ("savez.npz", "compressed.npz"):
            with stores.open_reader(tmp_path / name, "npz") as r:
                assert_same_records(source, r)
    stores.export_store(db, tmp_path / "d.bin", "binary")
    offsets = np.load(tmp_path / "d.bin.idx")
    blob = open(tmp_path / "d.bin", "rb").read()
    fields, label, group, meta = stores.decode_record(blob[offsets[1]:offsets[2]])
    assert bytes(fields["image"]) == payload(1, 147) and (label, group, bytes(meta)) == \
        (1.0, -2, b'{"i":1,"name":"x1.jpg"}')
