"""The npz store (picpac/stores/npz.py) on files that are not picpac's: not a zip, arrays of Python objects
(never unpickled), damaged .npy headers, arrays of the wrong type or length; each a PicPacError naming it."""
from __future__ import annotations

import re
import zipfile

import numpy as np
import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError

from store_helpers import make_db


@pytest.fixture
def arrays(tmp_path) -> dict[str, np.ndarray]:
    stores.export_store(make_db(tmp_path / "src.picpac", 5), tmp_path / "s.npz", "npz")
    with np.load(tmp_path / "s.npz") as npz:
        return dict(npz)


def rewrite(path, arrays: dict, members: dict[str, bytes] | None = None, compressed: bool = False) -> str:
    """An npz of ``arrays`` (np.savez), with some members' bytes replaced by ``members``."""
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    if members:
        with zipfile.ZipFile(path) as old:
            kept = {info.filename: old.read(info) for info in old.infolist()}
        kept.update(members)
        with zipfile.ZipFile(path, "w") as new:
            for name, data in kept.items():
                new.writestr(name, data)
    return str(path)


def npy(header: bytes) -> bytes:
    """A version 1.0 .npy member whose header dict is ``header`` (padded as numpy pads it)."""
    header = header + b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(64)


def test_not_an_npz_file(tmp_path):
    for name, data, error, message in [("junk.npz", b"junk" * 100, FormatError, "not an npz file"),
                                       ("cut.npz", b"PK\x03\x04" + bytes(100), CorruptError, "truncated or damaged")]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(error, match=re.escape(f"{tmp_path / name}: {message}")):
            stores.open_reader(tmp_path / name, "npz")


@pytest.mark.parametrize("compressed", [False, True])
def test_arrays_of_python_objects_are_never_loaded(tmp_path, arrays, compressed):
    arrays["label"] = np.array([1, "x", None, 2.5, {}], dtype=object)  # np.load would unpickle them
    path = rewrite(tmp_path / "objects.npz", arrays, compressed=compressed)
    message = "holds Python objects (pickles), which are never loaded" if compressed else \
        "is not a flat array of plain values"
    with pytest.raises(FormatError, match=re.escape(f"{path}: label.npy {message}")):
        stores.open_reader(path, "npz")


@pytest.mark.parametrize("header, message", [
    (b"{'descr': '<f8', 'fortran_order': False, 'shape': (5,", "damaged header of label.npy"),
    (b"{'descr': '<f8, 'fortran_order': False, 'shape': (5,), }", "damaged"),
    (b"[1, 2]", "damaged array label.npy"),
    (b"{'descr': '<f8', 'fortran_order': False, 'shape': (-5,), }", "label.npy is not a flat array"),
    (b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }", "label.npy runs past the end of the file"),
    (b"{'descr': 'U3', 'fortran_order': False, 'shape': (5,), }", "array 'label' holds <U3, not what a picpac npz"),
])
def test_damaged_npy_headers_name_the_member(tmp_path, arrays, header, message):
    path = rewrite(tmp_path / "h.npz", arrays, {"label.npy": npy(header)})
    with pytest.raises((CorruptError, FormatError), match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
        stores.open_reader(path, "npz")
    with pytest.raises((CorruptError, FormatError), match=re.escape(f"{path}: ")):
        stores.import_store(path, tmp_path / "db", "npz")


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(meta_offsets=a["meta_offsets"][::-1].copy()), "the offsets of 'meta' do not match its data"),
    (lambda a: a.update(group=a["group"][:3]), "3 groups for 5 labels"),
    (lambda a: a.update({"data:image": a["data:image"].astype("<i4")}), "array 'data:image' holds int32"),
    (lambda a: a.update({"present:image": a["present:image"].astype(np.uint8)}), "array 'present:image' holds uint8"),
    (lambda a: a.pop("offsets:image"), "damaged npz store (\"no array 'offsets:image'\")"),
])
def test_arrays_of_the_wrong_type_or_length(tmp_path, arrays, change, message):
    change(arrays)
    path = rewrite(tmp_path / "a.npz", arrays)
    with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
        stores.open_reader(path, "npz")
