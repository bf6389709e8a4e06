"""The HDF5 store (picpac/stores/hdf5.py) reads lazily."""
from __future__ import annotations

import os

import numpy as np
import pytest

from picpac import stores


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
