"""The HDF5 store (picpac/stores/hdf5.py) reads lazily, and checks its layout (types, lengths) at open."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from picpac import stores
from picpac.errors import CorruptError


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_hdf5_reads_lazily(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "lazy.hdf5")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, 40_000, np.uint8).tobytes() for _ in range(100)]  # 4 MB
    with stores.open_writer(path, "hdf5") as w:
        for i, image in enumerate(images):
            w.append(image=image, label=i)
    before = _read_bytes()
    reader = stores.open_reader(path, "hdf5")
    opened = _read_bytes()
    record = reader[5]
    done = _read_bytes()
    assert bytes(record["image"]) == images[5] and record.label == 5
    assert opened - before < 400_000, "opening read the field data"
    assert 40_000 <= done - opened < 400_000, "reading record 5 read other records"
    # the reader holds h5py datasets, not arrays, and they give the same element
    assert isinstance(reader.datasets["image"], h5py.Dataset)
    with h5py.File(path, "r") as f:
        assert f["fields/image"].dtype == h5py.vlen_dtype(np.uint8) and len(f["fields/image"]) == 100
        assert f["fields/image"][5].tobytes() == images[5]
    reader.close()


@pytest.fixture
def store(tmp_path) -> str:
    pytest.importorskip("h5py")
    path = str(tmp_path / "s.hdf5")
    with stores.open_writer(path, "hdf5", metadata={"classes": ["a"]}) as w:
        for i in range(4):
            w.append(image=bytes([i]) * 10, label=i, meta={"i": i})
    return path


def _set_metadata(f, value) -> None:
    f.attrs["picpac_metadata"] = value


def _replace(name: str, data):
    def change(f) -> None:
        del f[name]
        f[name] = data
    return change


def _resize(f) -> None:
    for name in ("label", "group", "meta", "fields/image", "present/image"):
        f[name].resize((10**9,))  # a shape, not data: reading the labels would take 8 GB


@pytest.mark.parametrize("change, message", [
    (lambda f: _set_metadata(f, np.arange(3)), "its picpac_metadata attribute is a ndarray, not a JSON string"),
    (lambda f: _set_metadata(f, "[" * 100_000), "its picpac_metadata attribute is not JSON (nested too deeply)"),
    (lambda f: _set_metadata(f, "[]"), "damaged picpac HDF5 layout (list indices must be integers"),
    (lambda f: _set_metadata(f, '{"fields": [7]}'), "damaged picpac HDF5 layout ("),
    (_replace("label", np.array([b"a", b"b", b"c", b"d"])),
     "dataset label holds |S1 of shape (4,), not what the picpac"),
    (_replace("fields/image", np.zeros((4, 10), np.uint8)), "dataset fields/image holds uint8 of shape (4, 10)"),
    (_replace("present/image", np.ones(3, bool)), "datasets of different lengths (present/image: 3, label: 4)"),
    (lambda f: f.__delitem__("group"), "damaged picpac HDF5 layout (\"Unable to synchronously open object"),
    (_replace("group", np.dtype("<i8")), "group is a Datatype, not a dataset"),
    (_resize, "datasets of 1,000,000,000 records in a file of"),
])
def test_damaged_layouts_are_corrupt_errors(store, change, message):
    import h5py
    with h5py.File(store, "r+") as f:
        change(f)
    with pytest.raises(CorruptError, match=re.escape(f"{store}: {message}")):
        stores.open_reader(store, "hdf5")
