"""`picpac relabel` and `picpac filter --class`, on coco128's panoptic annotations (imported as picpac imports
them: rect shapes labelled by COCO category id, the class table by id) and on a labelled database."""
from __future__ import annotations

import json

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacValueError
from picpac.ingest import import_dataset
from picpac.tools.filter import filter_db
from picpac.tools.relabel import relabel_db
from helpers import SHARED_DATA, png, run_console

COCO = SHARED_DATA / "coco128-train"


@pytest.fixture(scope="module")
def coco(tmp_path_factory) -> tuple[str, dict]:
    """The panoptic JSON imported (100 images), and the JSON itself."""
    if not (COCO / "images").is_dir():
        pytest.skip(f"real test data missing: {COCO} (shared/data/coco128-train beside the repository)")
    src = COCO / "panoptic" / "panoptic_train2017.json"
    db = tmp_path_factory.mktemp("coco") / "coco.picpac"
    import_dataset(src, db, root=COCO / "images", threads=2)
    return str(db), json.loads(src.read_text())


def shapes(path) -> list[tuple[str, list[float]]]:
    """Each record's image path and its shapes' classes."""
    with picpac.Reader(path) as r:
        return [(r[i].meta["path"], [s["label"] for s in json.loads(bytes(r[i]["annotation"]))["shapes"]])
                for i in range(len(r))]


def test_filter_by_class_keeps_the_records_with_a_shape_of_it(coco, tmp_path):
    db, doc = coco
    segments = {a["image_id"]: a["segments_info"] for a in doc["annotations"]}
    people = [image["file_name"] for image in doc["images"]  # the records are in the images' order
              if any(s["category_id"] == 1 for s in segments[image["id"]])]
    for given in ("person", "1"):
        out = tmp_path / f"people-{given}.picpac"
        report = filter_db(db, out, classes=[given])
        assert [path for path, _ in shapes(out)] == people and report.kept == len(people) < report.records
    with picpac.Reader(out) as r:
        assert r.metadata["classes"][1] == "person"  # the class table kept


def test_drop_other_classes_keeps_only_the_shapes_of_the_classes_given(coco, tmp_path):
    db, doc = coco
    segments = {a["image_id"]: a["segments_info"] for a in doc["annotations"]}
    counts = [sum(s["category_id"] in (1, 3) for s in segments[image["id"]]) for image in doc["images"]]
    out = tmp_path / "people-and-cars.picpac"
    filter_db(db, out, classes=["person", "car"], drop_other_classes=True)
    kept = shapes(out)
    assert [len(labels) for _, labels in kept] == [n for n in counts if n]
    assert all(set(labels) <= {1, 3} for _, labels in kept)
    with picpac.ImageStream(out, loop=False, batch=4, task="detect", resize_width=64, resize_height=64) as s:
        assert {int(x) for batch in s for x in batch[1][..., 0].ravel() if x >= 0} <= {1, 3}


def test_relabel_maps_shape_classes_by_name_adding_new_names(coco, tmp_path):
    db, _ = coco
    out = tmp_path / "relabeled.picpac"
    report = relabel_db(db, out, ["person=human", "car=2"])
    before, after = shapes(db), shapes(out)
    expected = [[201 if c == 1 else 2 if c == 3 else c for c in labels] for _, labels in before]
    assert [labels for _, labels in after] == expected
    assert report.shapes == sum(c in (1, 3) for _, labels in before for c in labels) and report.labels == 0
    with picpac.Reader(db) as a, picpac.Reader(out) as b:
        assert b.metadata["classes"] == a.metadata["classes"] + ["human"]
        assert b.metadata["relabeled"]["map"] == {"1": 201, "3": 2}
        assert all(bytes(a[i]["image"]) == bytes(b[i]["image"]) for i in range(len(a)))


def test_relabel_maps_record_labels_and_refuses_what_names_no_class(tmp_path):
    db = tmp_path / "pets.picpac"
    with picpac.Writer(db, metadata={"classes": ["cat", "dog", "bird"]}) as w:
        for i in range(9):
            w.append(image=png(np.full((4, 4, 3), i, np.uint8)), label=i % 3)
    out = tmp_path / "mammals.picpac"
    report = relabel_db(db, out, ["cat=dog"])
    with picpac.Reader(out) as r:
        assert r.labels.tolist() == [1, 1, 2] * 3 and report.labels == 3
    for mapping, says in ((["fish=cat"], r"'fish' is not a class id .* \(its classes are cat, dog, bird\)"),
                          (["cat"], "'cat' is not OLD=NEW"), (["cat=dog", "cat=bird"], "'cat' two new classes")):
        with pytest.raises(PicPacValueError, match=says):
            relabel_db(db, tmp_path / "x.picpac", mapping)
        assert not (tmp_path / "x.picpac").exists()


def test_console_relabel_and_filter_class(coco, tmp_path):
    db, _ = coco
    out = run_console("picpac", "relabel", db, str(tmp_path / "r.picpac"), "--map", "person=human", cwd=tmp_path)
    assert out.returncode == 0 and "applied to the annotation shapes' classes: the class table names them" in out.stdout
    kept = run_console("picpac", "filter", str(tmp_path / "r.picpac"), str(tmp_path / "h.picpac"), "--class",
                       "human", cwd=tmp_path)
    assert kept.returncode == 0 and "an annotation of class human" in kept.stdout
    bad = run_console("picpac", "filter", db, str(tmp_path / "z.picpac"), "--class", "unicorn", cwd=tmp_path)
    assert bad.returncode != 0 and "'unicorn' is not a class id" in bad.stderr


def annotated_db(path, source: str | None) -> str:
    """Four records labelled 0, 1, 0, 1 whose shapes are labelled 1 and 2 (another id space than the labels'), with
    the class table ["zero", "one", "two"] and the import ``source`` that says what the table names."""
    shape = {"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}}
    metadata = {"classes": ["zero", "one", "two"], **({"source": source} if source else {})}
    with picpac.Writer(path, metadata=metadata) as w:
        for i in range(4):
            doc = {"shapes": [{**shape, "label": 1}, {**shape, "label": 2}]}
            w.append(image=png(np.full((4, 4, 3), i, np.uint8)), annotation=json.dumps(doc).encode(), label=i % 2)
    return str(path)


def labels_and_shapes(path) -> tuple[list[float], list[list[float]]]:
    with picpac.Reader(path) as r:
        return r.labels.tolist(), [[s["label"] for s in json.loads(bytes(r[i]["annotation"]))["shapes"]]
                                   for i in range(len(r))]


def test_a_name_maps_what_the_class_table_names_and_nothing_else(tmp_path):
    """docs/cli.md's example relabelled the circles' shapes too: the table names record labels, the shapes use other
    ids. A YOLO import's table names the shapes: --map person=human must leave every record's label 0."""
    labelled = annotated_db(tmp_path / "labels.picpac", None)
    report = relabel_db(labelled, tmp_path / "a.picpac", ["one=zero"])
    assert labels_and_shapes(tmp_path / "a.picpac") == ([0, 0, 0, 0], [[1, 2]] * 4)
    assert (report.labels, report.shapes, report.applied) == (2, 0, "labels")
    assert "applied to the record labels: the class table names them" in report.summary()
    yolo = annotated_db(tmp_path / "yolo.picpac", "yolo /data/labels")
    report = relabel_db(yolo, tmp_path / "b.picpac", ["one=zero"])
    assert labels_and_shapes(tmp_path / "b.picpac") == ([0, 1, 0, 1], [[0, 2]] * 4)
    assert (report.labels, report.shapes, report.applied) == (0, 4, "shapes")
    assert "record labels 0 of 4 changed, annotation shapes 4 changed" in report.summary()
    relabel_db(yolo, tmp_path / "c.picpac", ["1=0"], apply_to="both")
    assert labels_and_shapes(tmp_path / "c.picpac") == ([0, 0, 0, 0], [[0, 2]] * 4)
    masks = annotated_db(tmp_path / "masks.picpac", "maskdir /data/masks")
    with pytest.raises(PicPacValueError, match="names the values of its masks, which relabel does not change"):
        relabel_db(masks, tmp_path / "d.picpac", ["one=zero"])


@pytest.mark.parametrize("pair, says", [
    ("one=1e400", r"'1e400' is no class id a stream can take: ids are finite and at most 3.403e\+38"),
    ("one=1e39", r"'1e39' is no class id a stream can take"),
    ("-inf=one", r"'-inf' is not a class id"),
    ("one=\udcffname", r"class names are text \(valid UTF-8\)"),
    ("onr=two", r"'onr' is not a class id \(a number\) or a class name of the database; did you mean 'one'\?"),
])
def test_a_new_id_must_be_finite_float32_and_a_name_valid_text(tmp_path, pair, says):
    db = annotated_db(tmp_path / "db.picpac", None)
    with pytest.raises(PicPacValueError, match=says):
        relabel_db(db, tmp_path / "x.picpac", [pair])
    assert not (tmp_path / "x.picpac").exists()


def test_filter_by_a_mistyped_class_says_what_was_meant(tmp_path):
    db = annotated_db(tmp_path / "db.picpac", "yolo /data/labels")
    with pytest.raises(PicPacValueError, match=r"'tow' is not a class id .* did you mean 'two'\?"):
        filter_db(db, tmp_path / "x.picpac", classes=["tow"])
