"""What every reader shares (picpac/stores/base.py) on hostile input: a FIFO or a device is refused without
blocking, the dataset metadata must be an object with lists of names, a record's values must be of the
record model's types, and a raw error of the format's code is a PicPacError naming the store."""
from __future__ import annotations

import io
import json
import os
import re
import tarfile

import pytest

from picpac import stores
from picpac.errors import CorruptError, FormatError

from store_helpers import KINDS, _needs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_fifos_and_devices_are_refused_unopened(kind, tmp_path):
    _needs(kind)
    os.mkfifo(tmp_path / "fifo")  # opened by a library, it would wait for a writer forever
    os.symlink("/dev/zero", tmp_path / "zero")  # a file that never ends
    targets = {tmp_path / "fifo": "a FIFO", tmp_path / "zero": "a character device"}
    if kind == "lmdb":  # an environment directory whose data.mdb is a FIFO
        (tmp_path / "env").mkdir()
        os.mkfifo(tmp_path / "env" / "data.mdb")
        targets[tmp_path / "env" / "data.mdb"] = "a FIFO"
    for path, what in targets.items():
        with pytest.raises(FormatError, match=re.escape(f"{path}: is {what}, not a regular file; {kind} stores "
                                                        "are files")):
            stores.open_reader(tmp_path / "env" if path.name == "data.mdb" else path, kind)
        with pytest.raises(FormatError, match=re.escape(str(path))):
            stores.import_store(tmp_path / "env" if path.name == "data.mdb" else path, tmp_path / "db", kind)


def tar_store(path, metadata, members=()) -> str:
    """A tar store of one record (``000000.image``, plus ``members``) with this dataset metadata."""
    with tarfile.open(path, "w") as tar:
        for name, data in [("000000.image", b"x"), *members, ("000000.picpac.json", json.dumps(metadata).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("metadata, message", [
    ([], "its dataset metadata is a JSON list, not an object"),
    ({"fields": "image"}, "the dataset metadata's 'fields' is not a list of strings"),
    ({"fields": ["image"], "classes": [1, 2]}, "the dataset metadata's 'classes' is not a list of strings"),
    ({"fields": ["image", "image"]}, "the dataset metadata's 'fields' has an empty or repeated name"),
])
def test_dataset_metadata_is_an_object_with_lists_of_names(tmp_path, metadata, message):
    path = tar_store(tmp_path / "x.tar", metadata)
    with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
        stores.open_reader(path, "tar")


@pytest.mark.parametrize("member, message", [
    (("000000.group", b"9" * 30), "record 0 has group 999999999999999999999999999999, not an int64 above"),
    (("000000.cls", b"one"), "record 0 (000000.cls) does not hold a number"),
])
def test_record_values_of_other_types_are_named(tmp_path, member, message):
    path = tar_store(tmp_path / "x.tar", {"fields": ["image"]}, [member])
    with stores.open_reader(path, "tar") as r:
        with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
            r[0]
    with pytest.raises(CorruptError, match=re.escape(f"{path}: {message}")):
        stores.import_store(path, tmp_path / "db", "tar")
    assert not (tmp_path / "db").exists()


def test_nested_json_is_a_corrupt_error(tmp_path):
    deep = tar_store(tmp_path / "deep.tar", {"fields": ["image"]}, [("picpac.json", b"[" * 100_000)])
    with pytest.raises(CorruptError, match=re.escape(f"{deep}: damaged picpac.json member (nested too deeply)")):
        stores.open_reader(deep, "tar")


def test_a_record_without_fields_cannot_be_imported(tmp_path):
    path = tar_store(tmp_path / "x.tar", {"fields": []})
    with tarfile.open(path, "w") as tar:  # a record of a label alone
        for name, value in [("000000.cls", b"1"), ("000000.picpac.json", b"{}")]:
            info = tarfile.TarInfo(name)
            info.size = len(value)
            tar.addfile(info, io.BytesIO(value))
    with pytest.raises(FormatError, match=re.escape(f"{path}: record 0 has no fields (no bytes values)")):
        stores.import_store(path, tmp_path / "db", "tar")
