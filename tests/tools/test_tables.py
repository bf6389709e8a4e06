"""picpac/tools/tables.py: `picpac import --from parquet|arrow|mds` on tables that Hugging Face's ``datasets`` and
MDSWriter wrote: detection columns as shapes, rows without a usable image or label listed, and picpac -> parquet
-> picpac through the command line exact."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import picpac
from picpac.sources.base import annotation_json, rect_json, shape_json
from picpac.tools.tables import import_table

from helpers import coco_boxes, hf_datasets, imagenet_jpegs

pytest.importorskip("pyarrow", reason="the parquet format needs pyarrow (pip install picpac[parquet])")
MDS = Path(__file__).resolve().parents[1] / "stores" / "mds"


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["picpac", *map(str, args)], capture_output=True, text=True, timeout=120)


def write_detection(datasets, path, rows, classes, xyxy: bool = False) -> None:
    """A detection dataset as the Hub's are: an Image, ``objects`` of ``bbox`` lists and ClassLabel ``category``
    lists, and an id."""
    box = datasets.List(datasets.Value("float32"), length=4)
    features = datasets.Features({"image_id": datasets.Value("int64"), "image": datasets.Image(),
                                  "objects": {"bbox": datasets.List(box),
                                              "category": datasets.List(datasets.ClassLabel(names=classes))}})
    bboxes = [[[x, y, x + w, y + h] if xyxy else [x, y, w, h] for x, y, w, h in row[4]] for row in rows]
    datasets.Dataset.from_dict({"image_id": list(range(len(rows))),
                                "image": [{"bytes": row[1], "path": None} for row in rows],
                                "objects": [{"bbox": b, "category": row[5]} for b, row in zip(bboxes, rows)]},
                               features=features).to_parquet(str(path))


def test_a_detection_dataset_becomes_shapes(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    rows, classes = coco_boxes(6)
    for fmt in ("xywh", "xyxy"):
        write_detection(datasets, tmp_path / f"{fmt}.parquet", rows, classes, xyxy=fmt == "xyxy")
        result = run_cli("import", "--from", "parquet", tmp_path / f"{fmt}.parquet", tmp_path / f"{fmt}.picpac",
                         "--bbox-format", fmt)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"imported 6 records from parquet {tmp_path / f'{fmt}.parquet'} into ")
        assert result.stdout.rstrip().endswith("80 classes: person, bicycle, car, motorcycle, airplane, ...")
        with picpac.Reader(tmp_path / f"{fmt}.picpac") as r:
            assert r.classes == classes and r.fields == ["image", "annotation"]
            for i, (record, row) in enumerate(zip(r, rows)):
                _, data, width, height, boxes, ids = row
                assert bytes(record["image"]) == data and record.label == 0.0 and record.meta == {"image_id": i}
                if fmt == "xywh":  # the values as float32 holds them
                    boxes = [[float(np.float32(v)) for v in box] for box in boxes]
                else:  # (x + w) - x in float32 is not always w: w is what the stored corners give
                    stored = [[float(np.float32(v)) for v in (x, y, x + w, y + h)] for x, y, w, h in boxes]
                    boxes = [[a, b, c - a, d - b] for a, b, c, d in stored]
                assert bytes(record["annotation"]) == annotation_json([
                    shape_json("rect", rect_json(x / width, y / height, w / width, h / height), cid)
                    for (x, y, w, h), cid in zip(boxes, ids)])
    result = run_cli("import", "--from", "parquet", tmp_path / "xywh.parquet", tmp_path / "bad.picpac",
                     "--bbox-format", "xyxy")
    assert result.returncode == 0, result.stderr  # boxes read as the wrong format: rows whose boxes cannot be, listed
    skipped = result.stdout.splitlines()[2:]
    assert result.stdout.splitlines()[1] == f"skipped {len(skipped)}:" and skipped
    assert all(": column 'objects': bbox [" in line and "is it xywh? (--bbox-format)" in line for line in skipped)


def test_rows_without_a_usable_image_or_label_are_listed(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    jpegs = imagenet_jpegs(5)
    images = [{"bytes": data, "path": None} for _, data, _ in jpegs]
    images[1] = None
    images[3] = {"bytes": b"not an image", "path": None}
    labels = [0, 1, None, 1, 0]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    datasets.Dataset.from_dict({"image": images, "label": labels}, features=features).to_parquet(
        str(tmp_path / "t.parquet"))
    report = import_table(tmp_path / "t.parquet", tmp_path / "t.picpac", "parquet", progress=False)
    where = str(tmp_path / "t.parquet")
    assert report.count == 2 and report.skipped == [
        (f"{where}: row 1", "no image (null in the image column 'image')"),
        (f"{where}: row 2", "its label is null"),
        (f"{where}: row 3", "cannot decode (corrupt, truncated or not an image)")]
    assert report.summary().splitlines()[1:] == ["skipped 3:", f"  {where}: row 1: no image (null in the image "
                                                 "column 'image')", f"  {where}: row 2: its label is null",
                                                 f"  {where}: row 3: cannot decode (corrupt, truncated or not an "
                                                 "image)"]
    with picpac.Reader(tmp_path / "t.picpac") as r:
        assert [bytes(x["image"]) for x in r] == [jpegs[0][1], jpegs[4][1]] and r.classes == ["a", "b"]
    result = run_cli("import", "--from", "parquet", tmp_path / "t.parquet", tmp_path / "s.picpac", "--strict")
    assert result.returncode == 2 and not (tmp_path / "s.picpac").exists()
    assert result.stderr == (f"picpac: error: {where}: row 1: no image (null in the image column 'image'); nothing "
                             "was written. Fix or remove the row, or import without --strict (strict=False) to skip "
                             "it\n")


def test_picpac_to_parquet_to_picpac_through_the_command_line(tmp_path):
    jpegs = imagenet_jpegs(12)
    classes = [f"class {i}" for i in range(1000)]
    with picpac.Writer(tmp_path / "a.picpac", metadata={"classes": classes}) as w:
        for i, (name, data, label) in enumerate(jpegs):
            w.append(image=data, label=label, meta={"path": name, "size": [i, i + 1], "w": 0.5 * i})
    assert run_cli("export", "--to", "parquet", tmp_path / "a.picpac", tmp_path / "a.parquet").returncode == 0
    result = run_cli("import", "--from", "parquet", tmp_path / "a.parquet", tmp_path / "b.picpac")
    assert result.returncode == 0, result.stderr
    with picpac.Reader(tmp_path / "a.picpac") as a, picpac.Reader(tmp_path / "b.picpac") as b:
        assert len(a) == len(b) == 12 and b.classes == classes and b.fields == ["image"]
        for x, y in zip(a, b):
            assert (bytes(x["image"]), x.label, x.meta) == (bytes(y["image"]), y.label, y.meta)


def test_arrow_and_mds_from_the_command_line(monkeypatch, tmp_path):
    datasets = hf_datasets(monkeypatch, tmp_path)
    jpegs = imagenet_jpegs(4)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["x", "y"])})
    datasets.Dataset.from_dict({"image": [{"bytes": d, "path": None} for _, d, _ in jpegs], "label": [1, 0, 1, 0]},
                               features=features).save_to_disk(str(tmp_path / "saved"), num_shards=2)
    result = run_cli("import", "--from", "arrow", tmp_path / "saved", tmp_path / "a.picpac")
    assert result.returncode == 0 and "imported 4 records from arrow" in result.stdout
    with picpac.Reader(tmp_path / "a.picpac") as r:
        assert [x.label for x in r] == [1.0, 0.0, 1.0, 0.0] and bytes(r[3]["image"]) == jpegs[3][1]
    result = run_cli("import", "--from", "mds", MDS / "plain", tmp_path / "m.picpac", "--threads", "1")
    assert result.returncode == 0, result.stderr
    expected = json.loads((MDS / "expected.json").read_text())
    with picpac.Reader(tmp_path / "m.picpac") as r:
        assert [x.label for x in r] == [e["label"] for e in expected] and r.fields == ["image", "raw"]
        assert r[2].meta == {"info": {"i": 2, "tags": ["a", "a"]}, "name": "img2", "score": 0.5}


def test_options_that_belong_to_tables_or_not(tmp_path):
    result = run_cli("import", "--image-column", "img", tmp_path, tmp_path / "x.picpac")
    assert result.returncode == 2 and "--image-column and --bbox-format name columns of a table" in result.stderr
    result = run_cli("import", "--from", "tar", "--bbox-format", "xyxy", tmp_path / "x.tar", tmp_path / "x.picpac")
    assert result.returncode == 2 and "go with --from parquet, arrow, mds" in result.stderr
    result = run_cli("import", "--from", "mds", "--labels", tmp_path, MDS / "plain", tmp_path / "x.picpac")
    assert result.returncode == 2 and "--from cannot be combined with --labels" in result.stderr
    result = run_cli("import", "--from", "mds", "--image-column", "nope", MDS / "plain", tmp_path / "x.picpac")
    assert result.returncode == 2 and "no column 'nope' (--image-column); its columns are image, info" in result.stderr
    with pytest.raises(picpac.PicPacError, match="bbox_format .* must be one of xywh, xyxy"):
        import_table(MDS / "plain", tmp_path / "x.picpac", "mds", bbox_format="cxcywh")
