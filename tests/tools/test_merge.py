"""`picpac merge`: records concatenated byte for byte, class tables reconciled, failures leave no output."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import CorruptRecordError, PathExistsError, PicPacValueError
from picpac.tools.merge import merge
from picpac.tools.verify import verify

from helpers import damage_record, make_db, payload, run_console


def write_db(path: Path, n: int, *, start: int = 0, classes: list[str] | None = None, labels=None) -> Path:
    """``n`` records of two fields (image, anno), label, group and meta (some records without meta)."""
    metadata = {"classes": classes} if classes is not None else None
    with picpac.Writer(path, metadata=metadata) as writer:
        for i in range(start, start + n):
            label = labels[i - start] if labels is not None else i % 3
            writer.append(image=payload(i), anno=payload(1000 + i, 12), label=label,
                          group=None if i % 2 else i // 2, meta={"k": i, "path": f"x/{i}.jpg"} if i % 3 else None)
    return path


def raw_records(path: Path) -> list[bytes]:
    """Every record's bytes, in index order."""
    data = path.read_bytes()
    with picpac.Reader(path) as reader:
        return [data[o:o + s] for o, s in zip(reader.index["offset"].tolist(), reader.index["size"].tolist())]


def contents(path: Path) -> list[tuple]:
    """(fields as bytes, label, group, meta, checksum) of every record."""
    with picpac.Reader(path) as reader:
        return [({k: bytes(v) for k, v in r.fields.items()}, r.label, r.group, r.meta, int(reader.index["checksum"][i]))
                for i, r in enumerate(reader)]


def no_temps(folder: Path) -> bool:
    return not [p for p in os.listdir(folder) if p.endswith(".picpac-tmp")]


def test_merge_keeps_every_record_byte_for_byte_in_source_order(tmp_path):
    a, b = write_db(tmp_path / "a.picpac", 5), write_db(tmp_path / "b.picpac", 7, start=5)
    report = merge([a, b], tmp_path / "out.picpac", sync=False)
    assert report.counts == [5, 7] and report.records == 12 and report.classes == [] and report.remapped == []
    assert report.summary() == (f"merged 12 records into {tmp_path}/out.picpac (5 from {a}, 7 from {b}); "
                                "labels kept, no class names")
    out = contents(tmp_path / "out.picpac")
    assert out == contents(a) + contents(b)  # fields, labels, groups, meta and checksums
    assert raw_records(tmp_path / "out.picpac") == raw_records(a) + raw_records(b)
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.fields == ["image", "anno"] and "classes" not in reader.metadata
        assert reader.metadata["merged"]["sources"] == [str(a), str(b)]
        assert reader.metadata["merged"]["records"] == [5, 7]
    assert verify(tmp_path / "out.picpac").ok


def test_sources_with_different_fields_keep_their_fields(tmp_path):
    a = make_db(tmp_path / "a.picpac", 3)
    with picpac.Writer(tmp_path / "b.picpac") as writer:
        writer.append(mask=b"m0", image=b"i0", label=7.5)
        writer.append(extra=b"e1", label=-1)
    merge([a, tmp_path / "b.picpac"], tmp_path / "out.picpac", sync=False)
    out = contents(tmp_path / "out.picpac")
    assert [r[0] for r in out[3:]] == [{"mask": b"m0", "image": b"i0"}, {"extra": b"e1"}]
    assert [r[1] for r in out] == [0.0, 1.0, 2.0, 7.5, -1.0]
    assert [r[0] for r in out[:3]] == [r[0] for r in contents(a)]
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.fields == ["image", "mask", "extra"]


def test_class_tables_are_united_in_first_seen_order_and_labels_remapped(tmp_path):
    a = write_db(tmp_path / "a.picpac", 4, classes=["cat", "dog"], labels=[0, 1, 1, 0])
    b = write_db(tmp_path / "b.picpac", 5, start=4, classes=["dog", "bird", "cat"], labels=[0, 1, 2, 2, 0])
    c = write_db(tmp_path / "c.picpac", 2, start=9, classes=["cat", "dog"], labels=[1, 0])
    report = merge([a, b, c], tmp_path / "out.picpac", sync=False)
    assert report.classes == ["cat", "dog", "bird"]
    assert report.remapped == [str(b)]  # a and c have the union's ids already
    assert report.summary().endswith("; 3 classes, labels of 1 source(s) remapped")
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.classes == ["cat", "dog", "bird"]
        assert reader.labels.tolist() == [0, 1, 1, 0] + [1, 2, 0, 0, 1] + [1, 0]
        names = [reader.classes[int(label)] for label in reader.labels]
    assert names == ["cat", "dog", "dog", "cat", "dog", "bird", "cat", "cat", "dog", "dog", "cat"]
    out = contents(tmp_path / "out.picpac")
    assert [r[0] for r in out] == [r[0] for src in (a, b, c) for r in contents(src)]  # only labels changed
    assert [r[2:4] for r in out] == [r[2:4] for src in (a, b, c) for r in contents(src)]


def test_a_source_without_class_names_among_named_ones_is_refused(tmp_path):
    a = write_db(tmp_path / "a.picpac", 3, classes=["cat", "dog", "bird"])
    b = write_db(tmp_path / "b.picpac", 3)
    with pytest.raises(PicPacValueError, match=rf"^{b}: has no class names \(metadata 'classes'\) while {a} has 3.*"
                                               r"--relabel-by-source"):
        merge([a, b], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists() and no_temps(tmp_path)
    # labelled by source instead, it merges: the classes are the sources' file names
    report = merge([a, b], tmp_path / "out.picpac", relabel_by_source=True, sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.labels.tolist() == [0, 0, 0, 1, 1, 1] and reader.classes == ["a.picpac", "b.picpac"]
    assert report.summary().endswith("; labels are source indices 0..1 (classes a.picpac, b.picpac)")


def test_a_label_its_source_leaves_unnamed_is_refused_when_no_id_moves(tmp_path):
    e = write_db(tmp_path / "e.picpac", 2, classes=["cat", "dog"])
    f = write_db(tmp_path / "f.picpac", 3, classes=["cat", ""], labels=[0, 1, 0])  # 1 is unnamed in f, 'dog' in e
    with pytest.raises(PicPacValueError, match=rf"^{f}: record 1 has label 1, which its classes leave unnamed while "
                                               "the merged table names it 'dog', so it cannot be matched to a class"):
        merge([e, f], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists() and no_temps(tmp_path)
    f = write_db(tmp_path / "g.picpac", 3, classes=["cat", ""], labels=[0, 0, 0])
    report = merge([e, f], tmp_path / "out.picpac", sync=False)
    assert report.remapped == [] and report.summary().endswith("; 2 classes")
    assert contents(tmp_path / "out.picpac") == contents(e) + contents(f)


def test_relabel_by_source_labels_each_record_with_its_source(tmp_path):
    dbs = [make_db(tmp_path / f"{i}" / "db.picpac", n) for i, n in enumerate((2, 3, 1)) if
           (tmp_path / f"{i}").mkdir() is None]
    merge(dbs, tmp_path / "out.picpac", relabel_by_source=True, sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.labels.tolist() == [0, 0, 1, 1, 1, 2]
        assert reader.classes == [str(p) for p in dbs]  # same file names: the paths tell them apart
    assert [r[0] for r in contents(tmp_path / "out.picpac")] == [r[0] for db in dbs for r in contents(db)]


def test_a_label_that_is_no_class_id_is_refused_naming_the_record(tmp_path):
    a = write_db(tmp_path / "a.picpac", 2, classes=["cat", "dog"])
    b = write_db(tmp_path / "b.picpac", 3, classes=["dog"], labels=[0, 0.5, 0])
    with pytest.raises(PicPacValueError, match=rf"^{b}: record 1 has label 0.5, which is not the id of one of its "
                                               "1 class names, so it cannot be matched to a class"):
        merge([a, b], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists() and no_temps(tmp_path)


def test_sources_with_different_array_fields_are_refused(tmp_path):
    picpac.write_arrays(tmp_path / "a.picpac", np.zeros((2, 4, 4, 3), np.uint8), sync=False)
    picpac.write_arrays(tmp_path / "b.picpac", np.zeros((2, 5, 4, 3), np.uint8), sync=False)
    make_db(tmp_path / "c.picpac", 2)
    with pytest.raises(PicPacValueError, match=rf"^{tmp_path}/b.picpac: declares image \[5, 4, 3\] \|u1 .* but "
                                               rf"{tmp_path}/a.picpac declares image \[4, 4, 3\] \|u1"):
        merge([tmp_path / "a.picpac", tmp_path / "b.picpac"], tmp_path / "out.picpac")
    with pytest.raises(PicPacValueError, match=rf"^{tmp_path}/a.picpac: declares image .* but {tmp_path}/c.picpac "
                                               "declares no array fields"):
        merge([tmp_path / "c.picpac", tmp_path / "a.picpac"], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists() and no_temps(tmp_path)
    # the same declaration merges, and the output declares it too
    picpac.write_arrays(tmp_path / "d.picpac", np.ones((3, 4, 4, 3), np.uint8), labels=[5, 6, 7], sync=False)
    merge([tmp_path / "a.picpac", tmp_path / "d.picpac"], tmp_path / "out.picpac", sync=False)
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.metadata["arrays"] == {"image": {"shape": [4, 4, 3], "dtype": "uint8"}}
        assert [reader.array(i).sum() for i in range(5)] == [0, 0, 48, 48, 48]
        assert reader.stride is not None  # still records of one size back to back: the batch path reads it


def test_existing_output_and_output_among_the_sources(tmp_path):
    a, b = make_db(tmp_path / "a.picpac", 2), make_db(tmp_path / "b.picpac", 3)
    (tmp_path / "out.picpac").write_bytes(b"keep me")
    with pytest.raises(PathExistsError, match=rf"^{tmp_path}/out.picpac: already exists; pass --overwrite"):
        merge([a, b], tmp_path / "out.picpac")
    assert (tmp_path / "out.picpac").read_bytes() == b"keep me"
    merge([a, b], tmp_path / "out.picpac", overwrite=True, sync=False)
    assert len(picpac.Reader(tmp_path / "out.picpac")) == 5
    with pytest.raises(PicPacValueError, match=rf"^{a}: is also a source"):
        merge([a, b], a, overwrite=True)
    assert len(picpac.Reader(a)) == 2


def test_a_damaged_source_record_stops_the_merge_and_leaves_no_output(tmp_path):
    a, b = make_db(tmp_path / "a.picpac", 2), make_db(tmp_path / "b.picpac", 3)
    damage_record(b, 2, at=20)
    with pytest.raises(CorruptRecordError, match=rf"^{b}: record 2 fails its checksum"):
        merge([a, b], tmp_path / "out.picpac")
    assert not (tmp_path / "out.picpac").exists() and no_temps(tmp_path)


def test_cli_merges_and_errors_in_one_line(tmp_path):
    write_db(tmp_path / "a.picpac", 3, classes=["cat", "dog", "bird"])
    write_db(tmp_path / "b.picpac", 2, start=3, classes=["bird", "cat"], labels=[0, 1])
    write_db(tmp_path / "c.picpac", 2, start=5)
    done = run_console("picpac", "merge", "a.picpac", "b.picpac", "out.picpac", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("merged 5 records into out.picpac (3 from a.picpac, 2 from b.picpac); 3 classes, labels "
                           "of 1 source(s) remapped\n")
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.labels.tolist() == [0, 1, 2, 2, 0]
    done = run_console("picpac", "merge", "a.picpac", "c.picpac", "out2.picpac", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "picpac: error: c.picpac: has no class names (metadata 'classes') while a.picpac has 3, so its labels cannot "
        "be matched to classes; re-import it with its class names, or pass --relabel-by-source "
        "(relabel_by_source=True) to label records by their source"]
    assert not (tmp_path / "out2.picpac").exists() and no_temps(tmp_path)
    done = run_console("picpac", "merge", "a.picpac", "c.picpac", "out.picpac", "--relabel-by-source", cwd=tmp_path)
    assert done.returncode == 2 and "out.picpac: already exists; pass --overwrite" in done.stderr
    done = run_console("picpac", "merge", "--relabel-by-source", "--overwrite", "a.picpac", "c.picpac", "out.picpac",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run_console("picpac", "verify", "out.picpac", cwd=tmp_path).stdout == "out.picpac: OK (5 records)\n"
    with picpac.Reader(tmp_path / "out.picpac") as reader:
        assert reader.labels.tolist() == [0, 0, 0, 1, 1] and reader.classes == ["a.picpac", "c.picpac"]
    assert run_console("picpac", "merge", "out.picpac", cwd=tmp_path).returncode == 2  # OUT and no source


def test_merge_real_imagenet_jpegs_imported_from_class_folders(tmp_path, shared_data):
    """Two imports of real ImageNet JPEGs with overlapping classes: the merged classes are the union and
    every image is the original file's bytes, under its class's name."""
    rows = [line.split("\t") for line in (shared_data / "imagenet-250" / "labels.tsv").read_text().splitlines()[1:]]
    picked = rows[:5]  # (file, class index, class name)
    layout = {"a": [picked[0], picked[1], picked[2]], "b": [picked[3], picked[1], picked[4], picked[0]]}
    expected = []
    for part, chosen in layout.items():
        for k, (name, _, cls) in enumerate(chosen):
            folder = tmp_path / part / cls.strip()
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(shared_data / "imagenet-250" / name, folder / f"{k}_{name}")
        done = run_console("picpac", "import", part, f"{part}.picpac", "--threads", "1", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        with picpac.Reader(tmp_path / f"{part}.picpac") as reader:
            expected += [(reader.classes[int(r.label)], bytes(r["image"])) for r in reader]
    done = run_console("picpac", "merge", "a.picpac", "b.picpac", "all.picpac", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    a_classes = sorted(c.strip() for _, _, c in layout["a"])
    b_classes = sorted(c.strip() for _, _, c in layout["b"])
    with picpac.Reader(tmp_path / "all.picpac") as reader:
        assert reader.classes == a_classes + [c for c in b_classes if c not in a_classes]
        got = [(reader.classes[int(r.label)], bytes(r["image"])) for r in reader]
        assert got == expected and len(got) == 7
        originals = {(tmp_path / p / c.strip()).joinpath(f"{k}_{n}").read_bytes() for p, ch in layout.items()
                     for k, (n, _, c) in enumerate(ch)}
        assert {image for _, image in got} == originals
        assert cv2.imdecode(np.frombuffer(got[0][1], np.uint8), cv2.IMREAD_COLOR).ndim == 3
    verified = run_console("picpac", "verify", "--decode", "all.picpac", cwd=tmp_path)
    assert verified.returncode == 0 and verified.stdout == "all.picpac: OK (7 records, images decoded)\n"


def test_the_summary_counts_the_classes_the_records_are_not_the_table(tmp_path):
    """Two halves of an import whose class table names 997 classes (ImageNet's, deduplicated) while its records use
    250 of them (imagenet-250): the summary said "997 classes"."""
    table = [f"class{k}" for k in range(997)]
    a = write_db(tmp_path / "a.picpac", 6, classes=table, labels=[0, 10, 20, 0, 10, 20])
    b = write_db(tmp_path / "b.picpac", 4, start=6, classes=table, labels=[30, 40, 30, 996])
    report = merge([a, b], tmp_path / "out.picpac", sync=False)
    assert report.used == 6 and report.summary().endswith("; 6 classes in the records (the class table names 997)")
    whole = write_db(tmp_path / "c.picpac", 3, classes=["x", "y", "z"], labels=[0, 1, 2])
    assert merge([whole], tmp_path / "one.picpac", sync=False).summary().endswith("; 3 classes")
