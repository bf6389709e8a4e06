"""Importing annotation formats (COCO, YOLO, YOLO-seg, mask folders) as PicPac JSON shapes, on coco128."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from picpac import MissingPathError, Reader, SourceError
from picpac.ingest import import_dataset
from picpac.sources import scan

COCO128 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "coco128-train"


# -- helpers -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def coco128() -> Path:
    """The coco128-train folder, read in place (never written: databases go to tmp_path)."""
    if not (COCO128 / "images").is_dir():
        pytest.skip(f"real test data missing: {COCO128} (shared/data/coco128-train beside the repository)")
    return COCO128


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def touch_images(folder: Path, *names: str) -> Path:
    """Empty files with image names: enough for scan(), which never opens an image."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def records(db: Path) -> tuple[list[str], list[dict]]:
    """The classes and, per record, its meta, label, fields and parsed annotation shapes."""
    with Reader(db) as r:
        rows = [{"meta": rec.meta, "label": rec.label, "fields": {k: bytes(v) for k, v in rec.fields.items()}}
                for rec in r]
        classes = r.classes
    for row in rows:
        if "annotation" in row["fields"]:
            row["shapes"] = json.loads(row["fields"]["annotation"])["shapes"]
    return classes, rows


def yolo_lines(path: Path) -> list[tuple[int, list[float]]]:
    """(class, values) of every line of a YOLO label file; [] when the file is missing."""
    if not path.is_file():
        return []
    return [(int(line.split()[0]), [float(v) for v in line.split()[1:]])
            for line in path.read_text().splitlines() if line.strip()]


def close(a: list[float], b: list[float], tolerance: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))


def compact(annotation: dict) -> bytes:
    return json.dumps(annotation, separators=(",", ":")).encode()


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


def test_labels_and_classes_options_only_where_they_apply(tmp_path):
    images = touch_images(tmp_path / "images", "a.jpg")
    names = write_text(tmp_path / "names.txt", "cat\n")
    with pytest.raises(SourceError, match=r"labels \(--labels\) applies to the formats yolo, yolo-seg, "
                                          r"maskdir, not to 'dir'"):
        scan(images, "dir", labels=tmp_path)
    with pytest.raises(SourceError, match=r"classes \(--classes\) applies to .*not to 'auto'"):
        scan(images, classes=names)
    with pytest.raises(SourceError, match=r"classes \(--classes\) applies to .*not to 'coco'"):
        scan(write_text(tmp_path / "coco.json", "{}"), "coco", classes=names)
    with pytest.raises(MissingPathError, match=r"labels: no such folder; YOLO label files are looked for"):
        scan(images, "yolo")
    with pytest.raises(MissingPathError, match=r"nowhere: labels folder does not exist"):
        scan(images, "yolo-seg", labels=tmp_path / "nowhere")
    with pytest.raises(MissingPathError, match=r"none.txt: classes file does not exist"):
        scan(images, "yolo", labels=tmp_path, classes=tmp_path / "none.txt")
    with pytest.raises(SourceError, match=r"format maskdir needs the folder of masks; pass it as labels"):
        scan(images, "maskdir")
    with pytest.raises(SourceError, match=r"root \(--root\) applies to list, CSV and COCO sources"):
        scan(images, "yolo", root=tmp_path)
    with pytest.raises(SourceError, match=r"coco.json: is a file, but format 'yolo' reads a folder"):
        scan(tmp_path / "coco.json", "yolo", labels=tmp_path)


# -- COCO --------------------------------------------------------------------------------------
def test_coco_panoptic_segments_become_bbox_rects(coco128, tmp_path):
    src = coco128 / "panoptic" / "panoptic_train2017.json"
    coco = json.loads(src.read_text())
    report = import_dataset(src, tmp_path / "db", root=coco128 / "images", threads=2)  # auto: .json is coco
    assert report.count == 100 and report.skipped == [] and report.source == f"coco {src}"
    classes, rows = records(tmp_path / "db")
    assert all(classes[c["id"]] == c["name"] for c in coco["categories"])
    assert len(classes) == 201 and classes[0] == "" and classes[1] == "person"
    segments = {a["image_id"]: a["segments_info"] for a in coco["annotations"]}
    assert [row["meta"]["path"] for row in rows] == [image["file_name"] for image in coco["images"]]
    for row, image in zip(rows, coco["images"]):
        assert (row["meta"]["width"], row["meta"]["height"]) == (image["width"], image["height"])
        assert row["label"] == 0.0 and len(row["shapes"]) == len(segments[image["id"]])
        for shape, segment in zip(row["shapes"], segments[image["id"]]):
            assert shape["type"] == "rect" and shape["label"] == segment["category_id"]
            assert shape.get("tag") == (1 if segment["iscrowd"] else None)
            g = shape["geometry"]
            pixels = [g["x"] * image["width"], g["y"] * image["height"],
                      g["width"] * image["width"], g["height"] * image["height"]]
            assert close(pixels, segment["bbox"], 1e-3), (image["file_name"], pixels, segment["bbox"])


def test_coco_instances_polygons_parts_and_crowds(coco128, tmp_path):
    names = ["000000000009.jpg", "000000000025.jpg", "000000000030.jpg"]
    sizes = [(640, 480), (640, 426), (640, 428)]
    polygons = [[(cls, [v * (w if i % 2 == 0 else h) for i, v in enumerate(values)])
                 for cls, values in yolo_lines(coco128 / "instance-polygons" / (name[:-4] + ".txt"))]
                for name, (w, h) in zip(names, sizes)]
    (cls_a, one), (cls_b, two), (_, three) = polygons[0][:3]
    (cls_c, _), = polygons[1][:1]
    coco = {
        "images": [{"id": 10 + i, "file_name": name, "width": w, "height": h}
                   for i, (name, (w, h)) in enumerate(zip(names, sizes))],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": cls_a, "iscrowd": 0, "segmentation": [one], "bbox": [1, 2, 3, 4]},
            {"id": 2, "image_id": 10, "category_id": cls_b, "iscrowd": 0, "segmentation": [two, three],
             "bbox": [1, 2, 3, 4]},
            {"id": 3, "image_id": 11, "category_id": cls_c, "iscrowd": 1,
             "segmentation": {"counts": [0, 5, 100], "size": [426, 640]}, "bbox": [64, 42.6, 320, 213]},
            {"id": 4, "image_id": 11, "category_id": 90, "bbox": [0, 0, 640, 426]},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 51, "name": "bowl"}, {"id": 90, "name": "toothbrush"}],
    }
    src = write_text(tmp_path / "instances.json", json.dumps(coco))

    def points(pixels, w, h):
        return [{"x": round(x / w, 6), "y": round(y / h, 6)} for x, y in zip(pixels[::2], pixels[1::2])]

    expected = [
        {"shapes": [
            {"type": "polygon", "geometry": {"points": points(one, 640, 480)}, "label": cls_a},
            {"type": "polygons", "geometry": {"polygons": [points(two, 640, 480), points(three, 640, 480)]},
             "label": cls_b}]},
        {"shapes": [
            {"type": "rect", "geometry": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.5}, "label": cls_c, "tag": 1},
            {"type": "rect", "geometry": {"x": 0.0, "y": 0.0, "width": 1.0, "height": 1.0}, "label": 90}]},
        {"shapes": []},
    ]
    report = import_dataset(src, tmp_path / "db", format="coco", root=coco128 / "images", threads=2)
    assert report.count == 3 and report.skipped == []
    classes, rows = records(tmp_path / "db")
    assert [row["fields"]["annotation"] for row in rows] == [compact(e) for e in expected]
    assert [row["meta"]["path"] for row in rows] == names
    assert len(classes) == 91 and (classes[1], classes[51], classes[90], classes[2]) == ("person", "bowl",
                                                                                        "toothbrush", "")
    # the points are the YOLO-seg source again (pixels / size)
    assert close([p["x"] for p in expected[0]["shapes"][0]["geometry"]["points"]],
                 yolo_lines(coco128 / "instance-polygons" / "000000000009.txt")[0][1][::2], 1e-6)


@pytest.mark.parametrize("change, message", [
    (lambda c: c["annotations"][0].update(image_id=99), r"annotations\[0\]: image_id 99 is not the id of an entry"),
    (lambda c: c["annotations"][0].update(segmentation=[[1, 2, 3]]), r"annotations\[0\]: .*odd number of "
                                                                      r"coordinates \(3\)"),
    (lambda c: c["annotations"][0].update(segmentation=[1, 2, 3, 4, 5, 6]), r"segmentation must be a list of polygons"),
    (lambda c: c["annotations"][0].update(segmentation=None, bbox=None), r"annotations\[0\]: expected `bbox`"),
    (lambda c: c["annotations"][0].update(category_id="cat"), r"`category_id` must be an integer"),
    (lambda c: c["images"][0].pop("width"), r"images\[0\]: `width` must be a positive number"),
    (lambda c: c["images"].append(dict(c["images"][0])), r"images\[1\]: image id 1 appears twice"),
    (lambda c: c.pop("images"), r"not a COCO file: no `images` list"),
])
def test_malformed_coco_names_the_entry(tmp_path, change, message):
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}],
            "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "segmentation": [[1, 1, 5, 1, 3, 4]]}],
            "categories": [{"id": 1, "name": "cat"}]}
    change(coco)
    src = write_text(tmp_path / "coco.json", json.dumps(coco))
    with pytest.raises(SourceError, match=message):
        scan(src)
    write_text(tmp_path / "broken.json", '{"images": [')
    with pytest.raises(SourceError, match=r"broken.json: not valid JSON"):
        scan(tmp_path / "broken.json", "coco")


# -- mask folders ------------------------------------------------------------------------------
def test_maskdir_stores_the_semantic_masks(coco128, tmp_path):
    report = import_dataset(coco128 / "images", tmp_path / "db", format="maskdir",
                            labels=coco128 / "semantic-masks", classes=coco128 / "semantic-classes.yaml",
                            threads=2)
    assert report.count == 100
    masks = coco128 / "semantic-masks"
    assert report.skipped == [(name, f"mask {masks / (name[:-4] + '.png')}: missing file")
                              for name in sorted(p.name for p in (coco128 / "images").iterdir())
                              if not (masks / (name[:-4] + ".png")).exists()]
    assert len(report.skipped) == 28
    classes, rows = records(tmp_path / "db")
    assert classes[0] == "unlabeled" and classes[1] == "person" and classes[200] == "rug-merged"
    for row in rows:
        assert sorted(row["fields"]) == ["image", "mask"]
        assert row["fields"]["mask"] == (masks / (row["meta"]["path"][:-4] + ".png")).read_bytes()
        assert row["fields"]["image"] == (coco128 / "images" / row["meta"]["path"]).read_bytes()


def test_maskdir_matches_stems_and_ignores_masks_inside_the_images_folder(tmp_path):
    images = touch_images(tmp_path / "images", "a.jpg", "b.JPG")
    touch_images(images / "masks", "a.png", "b.bmp")
    listing = scan(images, "maskdir", labels=images / "masks")
    assert [(item.path, item.mask_path) for item in listing.items] == [
        (str(images / "a.jpg"), str(images / "masks" / "a.png")),
        (str(images / "b.JPG"), str(images / "masks" / "b.bmp"))]
    assert listing.classes is None
    touch_images(images / "masks", "a.tif")
    with pytest.raises(SourceError, match=r"masks a.png and a.tif have the same name stem"):
        scan(images, "maskdir", labels=images / "masks")


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
