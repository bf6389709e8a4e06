"""`picpac split`: fold files hold exactly what the stream's split keys select, groups never straddle."""
from __future__ import annotations

import os
import re

import cv2
import numpy as np
import pytest
from helpers import damage_record, png, run_console

import picpac
from picpac.errors import PicPacValueError
from picpac.tools.split import folds_of_test, output_paths, split_db


def build(path, labels, groups, classes=None) -> str:
    """Record i: a 5x4 PNG of grey value i (so a streamed image names its record), meta {"i": i}."""
    with picpac.Writer(path, metadata={"classes": classes} if classes else None) as writer:
        for i, (label, group) in enumerate(zip(labels, groups)):
            writer.append(image=png(np.full((4, 5, 3), i, np.uint8)), label=float(label), group=group,
                          meta={"i": i})
    return str(path)


def mixed_db(path, n=60) -> str:
    """Labels 0..2 (uneven), groups of 1 to 4 records for two thirds of the records, the rest ungrouped."""
    rng = np.random.default_rng(7)
    labels = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    groups = [None if i % 3 == 0 else int(i // 4) for i in range(n)]
    return build(path, labels, groups)


def file_ids(path) -> list[int]:
    """The source record of every record of a part, in file order (its meta's i, checked against its pixels)."""
    ids = []
    with picpac.Reader(path) as reader:
        for record in reader:
            pixels = cv2.imdecode(np.frombuffer(record["image"], np.uint8), cv2.IMREAD_COLOR)
            assert (pixels == record.meta["i"]).all()
            ids.append(record.meta["i"])
    return ids


def stream_ids(db, **keys) -> set[int]:
    stream = picpac.ImageStream(db, loop=False, batch=1, workers=1, **keys)
    ids = [int(images[0, 0, 0, 0]) for images, _labels, _pad in stream]
    assert len(ids) == len(set(ids)) == stream.size()
    return set(ids)


@pytest.mark.parametrize("stratify,shuffle,seed", [(True, True, 2016), (False, True, 5), (True, False, 11)])
def test_each_fold_file_is_what_the_stream_selects(tmp_path, stratify, shuffle, seed):
    db = mixed_db(tmp_path / "data.picpac")
    report = split_db(db, folds=4, seed=seed, stratify=stratify, shuffle=shuffle)
    paths = [str(tmp_path / f"data-fold{f}.picpac") for f in range(4)]
    assert [p for p, _ in report.parts] == paths == output_paths(db, folds=4)
    keys = {"split": 4, "seed": seed, "stratify": stratify, "shuffle": shuffle}
    with picpac.Reader(db) as source:
        labels, groups = source.labels.copy(), source.groups.copy()
        source_bytes = [bytes(r["image"]) for r in source]
    seen, runs = [], set()
    for f, path in enumerate(paths):
        ids = file_ids(path)
        assert ids == sorted(ids) and report.parts[f][1] == len(ids)
        assert set(ids) == stream_ids(db, split_fold=f, split_negate=True, **keys)
        assert set(range(60)) - set(ids) == stream_ids(db, split_fold=f, split_negate=False, **keys)
        with picpac.Reader(path) as part:  # label, group and bytes as in the source
            assert part.labels.tolist() == labels[ids].tolist()
            assert part.groups.tolist() == groups[ids].tolist()
            assert [bytes(r["image"]) for r in part] == [source_bytes[i] for i in ids]
            provenance = dict(part.metadata["split"])
            runs.add(provenance.pop("id"))
            assert provenance == {"from": db, "split": 4, "seed": seed, "stratify": stratify,
                                  **({} if shuffle else {"shuffle": False}), "split_fold": f, "split_negate": True,
                                  "parts": [os.path.basename(p) for p in paths]}
        seen += ids
    assert sorted(seen) == list(range(60))
    assert len(runs) == 1 and re.fullmatch("[0-9a-f]{16}", runs.pop())  # the parts of one run
    grouped = groups != picpac.file.layout.NO_GROUP
    part_of = {i: f for f, path in enumerate(paths) for i in file_ids(path)}
    for g in np.unique(groups[grouped]):
        assert len({part_of[i] for i in np.flatnonzero(groups == g)}) == 1, g
    assert report.summary().startswith(f"split {db} (60 records) into 4 parts in {tmp_path} (records: "
                                       f"data-fold0.picpac {report.parts[0][1]}, ")


def test_stratified_folds_deal_each_class_evenly(tmp_path):
    db = build(tmp_path / "s.picpac", [i % 3 for i in range(30)], [None] * 30)
    split_db(db, folds=5, seed=3)
    for f in range(5):
        with picpac.Reader(tmp_path / f"s-fold{f}.picpac") as part:
            assert np.bincount(part.labels.astype(int)).tolist() == [2, 2, 2]


def test_console_test_fraction_is_the_streams_fold(tmp_path):
    db = mixed_db(tmp_path / "data.picpac")
    os.mkdir(tmp_path / "out")
    done = run_console("picpac", "split", "data.picpac", "--test", "1/4", "--fold", "2", "--seed", "9",
                       "-o", "out", "--prefix", "cv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    train, test = file_ids(tmp_path / "out" / "cv-train.picpac"), file_ids(tmp_path / "out" / "cv-test.picpac")
    keys = {"split": 4, "split_fold": 2, "seed": 9, "stratify": True}
    assert set(test) == stream_ids(db, split_negate=True, **keys)
    assert set(train) == stream_ids(db, split_negate=False, **keys)
    assert sorted(train + test) == list(range(60))
    line = done.stdout.strip()
    assert "\n" not in line and line.startswith(f"split data.picpac (60 records) into 2 parts in out (records: "
                                                f"cv-train.picpac {len(train)}, cv-test.picpac {len(test)}); ")
    assert "test is ImageStream(split_fold=2, split_negate=True, split=4, seed=9, stratify=True)" in line
    assert sorted(os.listdir(tmp_path / "out")) == ["cv-test.picpac", "cv-train.picpac"]


def test_test_fractions():
    assert [folds_of_test(t) for t in ("0.1", 0.2, "1/3", "0.5", " 1 / 8 ", 0.125)] == [10, 5, 3, 2, 8, 8]
    for bad, says in [("0.3", ("--test 0.3 is not 1/K for a whole K: the stream's split keys cut the database into "
                              "K equal folds; use --test 1/3 or --test 1/4, or --folds K")),
                      ("0.6", "--test 0.6 must be in (0, 0.5]"), ("abc", "--test 'abc' is not a fraction"),
                      ("0", "--test 0 must be in (0, 0.5]"), ("inf", "--test 'inf' is not a fraction"),
                      ("1/0", "--test '1/0' is not a fraction")]:
        with pytest.raises(PicPacValueError) as info:
            folds_of_test(bad, "d.picpac")
        assert str(info.value).startswith(f"d.picpac: {says}"), str(info.value)


def test_metadata_and_meta_are_kept(tmp_path):
    db = build(tmp_path / "c.picpac", [0, 1, 0, 1], [None] * 4, classes=["cat", "dog"])
    split_db(db, test=0.5, stratify=False)
    with picpac.Reader(db) as source, picpac.Reader(tmp_path / "c-test.picpac") as test:
        assert test.classes == ["cat", "dog"] and source.metadata["created"] != {}
        assert set(test.metadata) == {"fields", "created", "classes", "split"}
        assert [r.meta for r in test] == [source[i].meta for i in file_ids(tmp_path / "c-test.picpac")]


def test_existing_outputs_are_refused_and_nothing_written(tmp_path):
    db = mixed_db(tmp_path / "data.picpac")
    (tmp_path / "data-fold1.picpac").write_bytes(b"keep me")
    done = run_console("picpac", "split", "data.picpac", "--folds", "3", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("picpac: error: data-fold1.picpac: already exists; pass --overwrite (overwrite=True) "
                           "to replace it (nothing was written)\n")
    assert sorted(os.listdir(tmp_path)) == ["data-fold1.picpac", "data.picpac"]
    assert (tmp_path / "data-fold1.picpac").read_bytes() == b"keep me"
    report = split_db(db, folds=3, overwrite=True)
    assert sum(n for _, n in report.parts) == 60 and len(file_ids(tmp_path / "data-fold1.picpac")) > 0


@pytest.mark.parametrize("options,says", [
    ({}, "give either --folds K (write every fold) or --test FRACTION (write a train and a test part), not neither"),
    ({"folds": 3, "test": 0.5}, "not both"),
    ({"folds": 3, "fold": 1}, "--fold picks the test fold of --test; --folds writes every fold"),
    ({"test": "1/3", "fold": 3}, "--fold must be in 0..2 for --test 1/3 (3 folds), got 3"),
    ({"folds": 1}, "--folds must be a whole number >= 2, got 1"),
    ({"folds": 9}, ("would be empty: 8 records in 8 units (groups and ungrouped records) cannot fill 9 folds; "
                   "use fewer folds (nothing was written)")),
])
def test_bad_options_name_the_file_and_write_nothing(tmp_path, options, says):
    db = build(tmp_path / "e.picpac", [0, 1] * 4, [None] * 8)
    with pytest.raises(PicPacValueError) as info:
        split_db(db, **options)
    assert str(info.value).startswith(f"{db}: ") and says in str(info.value)
    assert os.listdir(tmp_path) == ["e.picpac"]


def test_stratify_needs_whole_labels_and_says_the_fix(tmp_path):
    build(tmp_path / "f.picpac", [0, 0.5, 1, 2], [None] * 4)
    done = run_console("picpac", "split", "f.picpac", "--folds", "2", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == (
        "picpac: error: f.picpac: stratify needs integral class labels, but record 1 has label 0.5 (1 non-integral "
        "label(s) in all); pass --no-stratify to split without classes\n")
    assert os.listdir(tmp_path) == ["f.picpac"]
    done = run_console("picpac", "split", "f.picpac", "--folds", "2", "--no-stratify", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(file_ids(tmp_path / "f-fold0.picpac") + file_ids(tmp_path / "f-fold1.picpac")) == [0, 1, 2, 3]


def test_an_output_that_is_the_source_is_refused(tmp_path):
    db = build(tmp_path / "x-fold0.picpac", [0, 1] * 3, [None] * 6)
    with pytest.raises(PicPacValueError, match="x-fold0.picpac: is the database being read; choose another output name"):
        split_db(db, folds=2, prefix="x", overwrite=True, output_dir=tmp_path)
    assert os.listdir(tmp_path) == ["x-fold0.picpac"]


def test_a_damaged_record_stops_the_split_naming_it(tmp_path):
    db = build(tmp_path / "d.picpac", [0, 1] * 5, [None] * 10)
    damage_record(db, 4)
    with pytest.raises(picpac.errors.CorruptRecordError, match="record 4"):
        split_db(db, folds=2)
    assert os.listdir(tmp_path) == ["d.picpac"]


def test_overwrite_removes_the_parts_of_the_replaced_set_that_the_new_set_lacks(tmp_path):
    db = mixed_db(tmp_path / "data.picpac")
    done = run_console("picpac", "split", "data.picpac", "--folds", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    other = build(tmp_path / "other.picpac", [0, 1] * 4, [None] * 8)
    (tmp_path / "x").mkdir()
    split_db(other, folds=2, prefix="data", output_dir=tmp_path / "x")
    os.rename(tmp_path / "x" / "data-fold1.picpac", tmp_path / "data-fold5.picpac")  # a split of another database
    (tmp_path / "data-fold6.picpac").write_bytes(b"keep me")  # no picpac database
    split_db(db, test=0.5, stratify=False)  # another set of data.picpac beside it, not at the new paths
    keep = sorted(os.listdir(tmp_path))
    done = run_console("picpac", "split", "data.picpac", "--folds", "3", "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "; removed data-fold3.picpac (a part of the set replaced)" in done.stdout
    assert sorted(os.listdir(tmp_path)) == [name for name in keep if name != "data-fold3.picpac"]
    assert sorted(i for f in range(3) for i in file_ids(tmp_path / f"data-fold{f}.picpac")) == list(range(60))
    assert (tmp_path / "data-fold6.picpac").read_bytes() == b"keep me"
    with picpac.Reader(tmp_path / "data-fold5.picpac") as part:
        assert part.metadata["split"]["from"] == other


def test_overwrite_removes_fold_files_of_a_set_written_before_parts_were_recorded(tmp_path):
    db = mixed_db(tmp_path / "data.picpac")
    for f in range(4):  # a 4-fold set as an older picpac wrote it: no "id", no "parts"
        with picpac.Reader(db) as source, picpac.Writer(tmp_path / f"data-fold{f}.picpac", metadata={
                "split": {"from": db, "split": 4, "seed": 2016, "stratify": True, "split_fold": f,
                          "split_negate": True}}) as part:
            part.append(image=bytes(source[f]["image"]), meta={"i": f})
    report = split_db(db, folds=3, overwrite=True)
    assert report.removed == [str(tmp_path / "data-fold3.picpac")]
    assert sorted(os.listdir(tmp_path)) == ["data-fold0.picpac", "data-fold1.picpac", "data-fold2.picpac",
                                            "data.picpac"]


def test_a_writer_appending_to_a_part_to_remove_refuses_the_split(tmp_path):
    db = mixed_db(tmp_path / "data.picpac")
    split_db(db, folds=4)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    with picpac.Writer(tmp_path / "data-fold3.picpac", append=True):
        with pytest.raises(picpac.errors.WriterBusyError, match="data-fold3.picpac: another Writer is appending"):
            split_db(db, folds=3, overwrite=True)
        assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def test_an_output_folder_that_is_missing_is_made(tmp_path):
    db = mixed_db(tmp_path / "db.picpac")
    out = tmp_path / "parts" / "k2"
    report = split_db(db, folds=2, output_dir=out)
    assert sorted(os.listdir(out)) == ["db-fold0.picpac", "db-fold1.picpac"]
    assert sum(n for _, n in report.parts) == 60
    (tmp_path / "a_file").write_bytes(b"")
    with pytest.raises(PicPacValueError, match=r"a_file/k2: cannot make the output folder \(Not a directory\)"):
        split_db(db, folds=2, output_dir=tmp_path / "a_file" / "k2")
