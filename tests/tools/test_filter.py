"""`picpac filter`: which records are kept for each condition, byte-for-byte copies, and the errors."""
from __future__ import annotations

import os
import shutil

import cv2
import numpy as np
import pytest
from helpers import jpeg_bomb, png, run_console

import picpac
from picpac.errors import PicPacValueError
from picpac.tools.filter import filter_db

CLASSES = ["cat", "dog", "bird"]
SIZES = [(8, 6), (20, 10), (10, 20), (30, 30)]


def build(path, n=12) -> str:
    """Record i: label i % 3 (classes cat, dog, bird), group i // 4 (none for i % 4 == 3), a PNG of size
    SIZES[i % 4] and grey value i, an annotation field, meta {"i", "src", "info": {"day"}, "flag"}."""
    with picpac.Writer(path, metadata={"classes": CLASSES, "note": "kept"}) as writer:
        for i in range(n):
            w, h = SIZES[i % 4]
            writer.append(image=png(np.full((h, w, 3), i, np.uint8)), annotation=b'{"shapes": []}' + bytes([i]),
                          label=float(i % 3), group=None if i % 4 == 3 else i // 4,
                          meta={"i": i, "src": f"cam{i % 2}", "info": {"day": i % 5}, "flag": i == 0})
    return str(path)


def ids(path) -> list[int]:
    with picpac.Reader(path) as reader:
        return [record.meta["i"] for record in reader]


@pytest.fixture
def db(tmp_path) -> str:
    return build(tmp_path / "db.picpac")


@pytest.mark.parametrize("conditions,kept", [
    ({"labels": ["0", "2"]}, [0, 2, 3, 5, 6, 8, 9, 11]),
    ({"labels": ["dog"]}, [1, 4, 7, 10]),
    ({"labels": ["1..2"]}, [1, 2, 4, 5, 7, 8, 10, 11]),
    ({"labels": ["bird", "0.5..1"]}, [1, 2, 4, 5, 7, 8, 10, 11]),
    ({"groups": ["1"]}, [4, 5, 6]),
    ({"groups": ["none", 0]}, [0, 1, 2, 3, 7, 11]),
    ({"labels": ["0"], "groups": ["none"]}, [3]),
    ({"meta": ["src=cam1"]}, [1, 3, 5, 7, 9, 11]),
    ({"meta": ["i=3", "i=4"]}, [3, 4]),                      # one key's values: any
    ({"meta": ["src=cam1", "info.day=3"]}, [3]),             # different keys: all
    ({"meta": ["flag=true"]}, [0]),
    ({"meta": ["flag=1"]}, []),                              # true is not 1
    ({"meta": ["i=1"], "labels": ["1"]}, [1]),
    ({"min_size": "10x10"}, [1, 2, 3, 5, 6, 7, 9, 10, 11]),
    ({"min_size": "10x11"}, [2, 3, 6, 7, 10, 11]),
    ({"max_size": "20x10"}, [0, 1, 4, 5, 8, 9]),
    ({"min_size": "10", "max_size": (20, 20)}, [1, 2, 5, 6, 9, 10]),
    ({"labels": ["0"], "min_size": "30x30"}, [3]),
])
def test_what_each_condition_keeps(tmp_path, db, conditions, kept):
    out = tmp_path / "out.picpac"
    if not kept:
        with pytest.raises(PicPacValueError, match=f"{db}: no record matches .*; nothing was written to {out}"):
            filter_db(db, out, **conditions)
        assert not out.exists()
        return
    report = filter_db(db, out, **conditions)
    assert ids(out) == kept and (report.kept, report.records) == (len(kept), 12)
    inverted = filter_db(db, tmp_path / "inv.picpac", invert=True, **conditions)
    assert ids(tmp_path / "inv.picpac") == sorted(set(range(12)) - set(kept)) and inverted.kept == 12 - len(kept)
    assert inverted.conditions == f"not ({report.conditions})"


def test_records_are_copied_byte_for_byte_with_the_metadata(tmp_path, db):
    out = tmp_path / "out.picpac"
    filter_db(db, out, labels=["cat", "bird"])
    with picpac.Reader(db) as source, picpac.Reader(out) as copy:
        assert copy.classes == CLASSES and copy.metadata["note"] == "kept"
        assert copy.metadata["filtered"] == {"from": db, "conditions": "label cat or bird"}
        assert set(copy.metadata) == {"fields", "created", "classes", "note", "filtered"}
        for record in copy:
            original = source[record.meta["i"]]
            assert {k: bytes(v) for k, v in record.fields.items()} == {k: bytes(v) for k, v in original.fields.items()}
            assert (record.label, record.group, record.meta) == (original.label, original.group, original.meta)


def test_sizes_come_from_headers_so_a_bomb_is_sized_not_decoded(tmp_path):
    db = tmp_path / "b.picpac"
    with picpac.Writer(db) as writer:
        writer.append(image=jpeg_bomb(), meta={"i": 0})                                   # 65500x65500
        writer.append(image=png(np.zeros((5, 7, 3), np.uint8)), meta={"i": 1})
        writer.append(image=b"not an image", meta={"i": 2})
        writer.append(other=b"no image field", meta={"i": 3})
    report = filter_db(db, tmp_path / "big.picpac", min_size="1000x1000", max_pixels=100)
    assert ids(tmp_path / "big.picpac") == [0] and report.unsized == 2
    assert report.summary().startswith(f"kept 1 of 4 records of {db} (min size 1000x1000) in {tmp_path}/big.picpac "
                                       "(2 record(s) without a readable image size matched no size condition) in ")
    filter_db(db, tmp_path / "small.picpac", max_size="100x100")
    assert ids(tmp_path / "small.picpac") == [1]
    filter_db(db, tmp_path / "rest.picpac", max_size="100x100", invert=True)   # the unsized ones too
    assert ids(tmp_path / "rest.picpac") == [0, 2, 3]


def test_array_fields_are_sized_by_their_declaration(tmp_path):
    db = tmp_path / "a.picpac"
    picpac.write_arrays(db, np.zeros((3, 6, 9, 3), np.uint8), labels=[0, 1, 2])
    filter_db(db, tmp_path / "a2.picpac", min_size="9x6", labels=["1..2"])
    with picpac.Reader(tmp_path / "a2.picpac") as reader:
        assert reader.labels.tolist() == [1, 2] and reader.arrays == picpac.Reader(db).arrays
    with pytest.raises(PicPacValueError, match="no record matches min size 10x6"):
        filter_db(db, tmp_path / "a3.picpac", min_size="10x6")


@pytest.mark.parametrize("options,says", [
    ({}, "no condition given; pass --label, --group, --meta, --class, --min-size or --max-size"),
    ({"labels": ["fish"]}, ("--label 'fish' is not a number, a range A..B (A <= B) or a class name of the database "
                           "(its classes are cat, dog, bird)")),
    ({"labels": ["3..1"]}, "--label '3..1' is not a number, a range A..B (A <= B)"),
    ({"groups": ["x"]}, "--group 'x' is not a group id (a 64-bit int) or 'none'"),
    ({"meta": ["src"]}, "--meta 'src' is not KEY=VALUE (e.g. --meta source=camera1)"),
    ({"min_size": "10by10"}, "--min-size '10by10' is not WIDTHxHEIGHT (e.g. --min-size 640x480) or N"),
    ({"min_size": "30x30", "max_size": "20x40"}, "--min-size 30x30 exceeds --max-size 20x40: no image can match"),
    ({"max_size": "9", "field": "mask"}, ("has no field 'mask' to read image sizes from; its fields are "
                                         "['image', 'annotation']: pass --field NAME")),
])
def test_bad_options_name_the_file_and_write_nothing(tmp_path, db, options, says):
    with pytest.raises(PicPacValueError) as info:
        filter_db(db, tmp_path / "out.picpac", **options)
    assert str(info.value).startswith(f"{db}: ") and says in str(info.value), str(info.value)
    assert os.listdir(tmp_path) == ["db.picpac"]


def test_console_refuses_an_existing_out_and_replaces_it_with_overwrite(tmp_path, db):
    (tmp_path / "out.picpac").write_bytes(b"keep me")
    done = run_console("picpac", "filter", "db.picpac", "out.picpac", "--label", "dog", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("picpac: error: out.picpac: already exists; pass --overwrite (overwrite=True) to "
                           "replace it (nothing was written)\n")
    assert (tmp_path / "out.picpac").read_bytes() == b"keep me"
    done = run_console("picpac", "filter", "db.picpac", "out.picpac", "--label", "dog", "--group", "none",
                       "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kept 1 of 12 records of db.picpac (label dog and group none) in out.picpac in ")
    assert done.stdout.count("\n") == 1 and ids(tmp_path / "out.picpac") == [7]
    done = run_console("picpac", "filter", "db.picpac", "none.picpac", "--meta", "src=cam9", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == (
        "picpac: error: db.picpac: no record matches meta src=cam9; nothing was written to none.picpac\n")
    assert sorted(os.listdir(tmp_path)) == ["db.picpac", "out.picpac"]


def test_real_jpegs_filtered_by_size(tmp_path, shared_data):
    images = tmp_path / "images"
    images.mkdir()
    for path in sorted((shared_data / "imagenet-250").glob("*.JPEG"))[:12]:
        shutil.copyfile(path, images / path.name)   # the shared data is read-only: work on copies
    with picpac.Writer(tmp_path / "real.picpac") as writer:
        for i, path in enumerate(sorted(images.iterdir())):
            writer.append(image=path.read_bytes(), label=float(i % 2), meta={"name": path.name})
    sizes = {p.name: cv2.imread(str(p)).shape[1::-1] for p in images.iterdir()}
    wanted = sorted(name for name, (w, h) in sizes.items() if w >= 500 and h >= 375)
    assert 0 < len(wanted) < 12
    done = run_console("picpac", "filter", "real.picpac", "big.picpac", "--min-size", "500x375", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"kept {len(wanted)} of 12 records of real.picpac (min size 500x375) in big.picpac")
    with picpac.Reader(tmp_path / "big.picpac") as reader:
        assert [r.meta["name"] for r in reader] == wanted
        assert all(bytes(r["image"]) == (images / r.meta["name"]).read_bytes() for r in reader)
    done = run_console("picpac", "filter", "real.picpac", "small.picpac", "--min-size", "500x375", "--invert",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with picpac.Reader(tmp_path / "small.picpac") as reader:
        assert sorted(r.meta["name"] for r in reader) == sorted(set(sizes) - set(wanted))
