"""YOLO and YOLO-seg label folders and class-name files (picpac/sources/yolo.py), on coco128."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from picpac import SourceError
from picpac.ingest import import_dataset
from picpac.sources import scan

from source_helpers import close, compact, records, touch_images, write_text, yolo_lines


# -- YOLO --------------------------------------------------------------------------------------
def test_yolo_rects_read_back_as_the_label_lines(coco128, tmp_path):
    report = import_dataset(coco128 / "images", tmp_path / "db", format="yolo", labels=coco128 / "detection",
                            classes=coco128 / "detection-classes.yaml", threads=2)
    assert report.count == 128 and report.skipped == []
    assert report.source == f"yolo {coco128 / 'images'}"
    classes, rows = records(tmp_path / "db")
    assert len(classes) == 80 and classes[0] == "person" and classes[79] == "toothbrush"
    images = sorted(p.name for p in (coco128 / "images").iterdir())
    assert [row["meta"]["path"] for row in rows] == images
    empty = []
    for row in rows:
        assert row["label"] == 0.0
        assert row["fields"]["image"] == (coco128 / "images" / row["meta"]["path"]).read_bytes()
        source = yolo_lines(coco128 / "detection" / (row["meta"]["path"][:-4] + ".txt"))
        assert len(row["shapes"]) == len(source)
        if not source:
            empty.append(row["meta"]["path"])
        for shape, (cls, (cx, cy, w, h)) in zip(row["shapes"], source):
            assert shape["type"] == "rect" and shape["label"] == cls and "tag" not in shape
            g = shape["geometry"]
            back = [g["x"] + g["width"] / 2, g["y"] + g["height"] / 2, g["width"], g["height"]]
            assert close(back, [cx, cy, w, h], 1e-6), (row["meta"]["path"], back, [cx, cy, w, h])
    assert empty == ["000000000250.jpg", "000000000508.jpg"]  # no label file: no objects


def test_yolo_seg_polygons_read_back_as_the_label_lines(coco128, tmp_path):
    report = import_dataset(coco128 / "images", tmp_path / "db", format="yolo-seg",
                            labels=coco128 / "instance-polygons", classes=coco128 / "instance-classes.yaml",
                            threads=2)
    assert report.count == 128 and report.skipped == []
    classes, rows = records(tmp_path / "db")
    assert classes[1] == "person" and classes[13] == "stop sign" and classes[12] == "" and len(classes) == 91
    missing = 0
    for row in rows:
        label_file = coco128 / "instance-polygons" / (row["meta"]["path"][:-4] + ".txt")
        source = yolo_lines(label_file)
        missing += not label_file.exists()
        assert len(row["shapes"]) == len(source)  # an image without a label file has no shapes
        half = [0.5 / row["meta"]["width"], 0.5 / row["meta"]["height"]]  # pixel centres -> continuous
        for shape, (cls, coordinates) in zip(row["shapes"], source):
            assert shape["type"] == "polygon" and shape["label"] == cls and classes[cls]
            points = [v for p in shape["geometry"]["points"] for v in (p["x"], p["y"])]
            shifted = [v + half[i % 2] for i, v in enumerate(coordinates)]
            assert close(points, shifted, 1e-6)
    assert missing == 28


def test_yolo_default_labels_folder_and_text_classes(tmp_path):
    images = touch_images(tmp_path / "data" / "images", "a.jpg", "b.png")
    touch_images(images / "sub", "c.jpg")
    write_text(tmp_path / "data" / "labels" / "a.txt", "1 0.5 0.5 0.2 0.4\n\n0 0.25 0.75 0.5 0.5\n")
    write_text(tmp_path / "data" / "labels" / "sub" / "c.txt", "1 0.1 0.1 0.2 0.2\n")
    names = write_text(tmp_path / "names.txt", "cat\ndog\n\n")
    listing = scan(images, "yolo", classes=names)
    assert listing.classes == ["cat", "dog"] and listing.root == str(images)
    assert [item.path for item in listing.items] == [str(images / n) for n in ("a.jpg", "b.png", "sub/c.jpg")]
    assert listing.items[0].annotation == compact({"shapes": [
        {"type": "rect", "geometry": {"x": 0.4, "y": 0.3, "width": 0.2, "height": 0.4}, "label": 1},
        {"type": "rect", "geometry": {"x": 0.0, "y": 0.5, "width": 0.5, "height": 0.5}, "label": 0}]})
    assert listing.items[1].annotation == b'{"shapes":[]}'
    assert json.loads(listing.items[2].annotation)["shapes"][0]["label"] == 1


@pytest.mark.parametrize("fmt, line, message", [
    ("yolo", "0 0.5 0.5 0.2", r"a.txt:2: expected `class cx cy w h` \(5 values\), got 4 values"),
    ("yolo", "0 0.5 0.5 0.2 0.2 0.3", r"a.txt:2: expected `class cx cy w h` \(5 values\), got 6 .* -f yolo-seg"),
    ("yolo", "0 0.5 half 0.2 0.2", r"a.txt:2: 'half' is not a number"),
    ("yolo", "0 0.5 nan 0.2 0.2", r"a.txt:2: 'nan' is not a number"),
    ("yolo", "1.0 0.5 0.5 0.2 0.2", r"a.txt:2: class '1.0' is not an integer"),
    ("yolo", "-1 0.5 0.5 0.2 0.2", r"a.txt:2: class '-1' is not an integer"),
    ("yolo", "person 0.5 0.5 0.2 0.2", r"a.txt:2: class 'person' is not an integer"),
    ("yolo", "2 0.5 0.5 0.2 0.2", r"a.txt:2: class 2 has no name in .*names.yaml"),
    ("yolo-seg", "0 0.1 0.1 0.5 0.1 0.3", r"a.txt:2: expected `class x1 y1 .*`, got an odd number of "
                                          r"coordinates \(5\)"),
    ("yolo-seg", "0 0.5 0.5 0.2 0.2", r"a.txt:2: expected `class x1 y1 .*`, got 2 points; .*at least 3"),
    ("yolo-seg", "x 0.1 0.1 0.5 0.1 0.3 0.6", r"a.txt:2: class 'x' is not an integer"),
])
def test_malformed_yolo_lines_name_file_and_line(tmp_path, fmt, line, message):
    images = touch_images(tmp_path / "images", "a.jpg")
    first = "0 0.5 0.5 0.2 0.2" if fmt == "yolo" else "0 0.1 0.1 0.5 0.1 0.3 0.6"
    write_text(tmp_path / "labels" / "a.txt", f"{first}\n{line}\n")
    names = write_text(tmp_path / "names.yaml", "names: {0: cat, 1: dog}\n")
    with pytest.raises(SourceError, match=message):
        import_dataset(images, tmp_path / "db", format=fmt, classes=names)
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("name, text, expected", [
    ("list.yaml", "names: [cat, dog]\n", ["cat", "dog"]),
    ("map.yml", "nc: 3\nnames:\n  0: cat\n  2: bird\n", ["cat", "", "bird"]),
    ("semantic.yaml", "classes:\n  0: unlabeled\n  1: person\n", ["unlabeled", "person"]),
    ("names.txt", "cat\n  dog  \n", ["cat", "dog"]),
])
def test_classes_files(tmp_path, name, text, expected):
    images = touch_images(tmp_path / "images", "a.jpg")
    (tmp_path / "labels").mkdir()
    assert scan(images, "yolo", classes=write_text(tmp_path / name, text)).classes == expected


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "names: [cat,\n  dog\n", r"bad.yaml:\d+: not valid YAML"),
    ("bad.yaml", "train: images\n", r"bad.yaml: no class names; a YOLO dataset YAML holds `names:`"),
    ("bad.yaml", "names: {cat: 0}\n", r"bad.yaml: class id 'cat' is not an integer"),
    ("bad.txt", "cat\n\ndog\n", r"bad.txt:2: empty class name"),
])
def test_bad_classes_files(tmp_path, name, text, message):
    images = touch_images(tmp_path / "images", "a.jpg")
    (tmp_path / "labels").mkdir()
    with pytest.raises(SourceError, match=message):
        scan(images, "yolo", classes=write_text(tmp_path / name, text))


# -- command line ------------------------------------------------------------------------------
def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    if shutil.which(args[0]) is None:
        pytest.skip(f"console script {args[0]} not on PATH; run `pip install -e .`")
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_imports_yolo(coco128, tmp_path):
    done = run_cli("picpac", "import", str(coco128 / "images"), "db", "-f", "yolo", "--labels",
                   str(coco128 / "detection"), "--classes", str(coco128 / "detection-classes.yaml"),
                   "--threads", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 128 records from yolo {coco128 / 'images'} into db (")
    classes, rows = records(tmp_path / "db")
    assert classes[0] == "person" and len(rows) == 128


def test_cli_malformed_label_line_is_one_error_line(tmp_path):
    touch_images(tmp_path / "images", "a.jpg")
    bad = write_text(tmp_path / "labels" / "a.txt", "0 0.5 0.5 0.2 0.2\n3 0.5 0.5\n")
    done = run_cli("picpac", "import", "images", "db", "-f", "yolo", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"picpac: error: {bad.resolve()}:2: expected `class cx cy w h` (5 values), "
                                  "got 3 values")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("name, text, message", [
    ("deep.yaml", "names: " + "[" * 5000 + "]" * 5000 + "\n", r"deep.yaml: YAML nested too deeply"),
    ("bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                  "names: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
     r"bomb.yaml: a class name is a YAML list; class names are strings"),
    ("ids.yaml", "names: {0: cat, 1000000000: dog}\n", r"ids.yaml: class id 1000000000 is not an integer 0, 1, "
                                                       r"..., 1048575"),
    ("digits.yaml", "names: {'12345678901234567890': dog}\n", r"digits.yaml: class id '12345678901234567890' is not"),
    ("int.yaml", "names: [" + "1" * 5000 + "]\n", r"int.yaml: not valid YAML \(Exceeds the limit"),
    ("date.yaml", "names: [2023-13-45]\n", r"date.yaml: not valid YAML \(month must be in 1..12\)"),
    ("nul.txt", "cat\n\0dog\n", r"nul.txt:2: holds a NUL byte; class name files are text"),
], ids=lambda value: str(value)[:20])
def test_hostile_classes_files(tmp_path, name, text, message):
    images = touch_images(tmp_path / "images", "a.jpg")
    (tmp_path / "labels").mkdir()
    with pytest.raises(SourceError, match=message):
        scan(images, "yolo", classes=write_text(tmp_path / name, text))


@pytest.mark.timeout(60)
def test_a_label_file_that_is_no_file_or_holds_a_huge_class_id(tmp_path):
    images = touch_images(tmp_path / "images", "a.jpg", "b.jpg")
    (tmp_path / "labels").mkdir()
    os.mkfifo(tmp_path / "labels" / "a.txt")  # read, it would block the scan forever
    with pytest.raises(SourceError, match=re.escape(f"{tmp_path / 'labels' / 'a.txt'}: a FIFO, not a regular file")):
        scan(images, "yolo")
    os.unlink(tmp_path / "labels" / "a.txt")
    write_text(tmp_path / "labels" / "b.txt", "1" * 5000 + " 0.5 0.5 0.1 0.1\n")
    with pytest.raises(SourceError, match=re.escape(f"{tmp_path / 'labels' / 'b.txt'}:1: class '1111")):
        scan(images, "yolo")
