"""`picpac crop`: one record per annotated object, its pixels exactly the source's region, its label the
object's, its annotation moved into the crop, its meta and group pointing back at the source record."""
from __future__ import annotations

import json
import os
import shutil

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import PicPacValueError
from picpac.image.shapes import Shapes
from picpac.tools.crop import crop

from helpers import png, run_console

W, H = 64, 48
SHAPES = [
    {"type": "rect", "label": 2, "geometry": {"x": 10 / W, "y": 8 / H, "width": 30 / W, "height": 20 / H}},
    {"type": "polygon", "label": 3, "tag": 5,
     "geometry": {"points": [{"x": 0.5, "y": 0.5}, {"x": 0.75, "y": 0.5}, {"x": 0.625, "y": 0.9}]}},
    {"type": "ellipse", "geometry": {"x": 0.0, "y": 0.0, "width": 0.25, "height": 0.25}},
    {"type": "point", "label": 1, "geometry": {"x": 0.5, "y": 0.5}},
    {"type": "rect", "label": 4, "geometry": {"x": 0.9, "y": 0.1, "width": 2 / W, "height": 0.5}},
]
BOXES = [(10, 8, 30, 20), (32, 24, 16, 20), (0, 0, 16, 12)]  # the polygon's bottom, 43.2, rounds out to 44


def decode(data) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


@pytest.fixture
def source(tmp_path):
    """Two lossless records with the shapes above (the second in a group), a mask on the first, and one
    record without an annotation."""
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (H, W, 3), np.uint8) for _ in range(3)]
    mask = rng.integers(0, 5, (H, W), np.uint8)
    annotation = json.dumps({"shapes": SHAPES}).encode()
    with picpac.Writer(tmp_path / "db.picpac", metadata={"classes": ["x", "y"]}) as w:
        w.append(image=png(images[0]), annotation=annotation, mask=png(mask), label=7, meta={"path": "a.png"})
        w.append(image=png(images[1]), annotation=annotation, label=8, group=9)
        w.append(image=png(images[2]), label=0)
    return images, mask


def test_crop_cli_makes_one_record_per_object(tmp_path, source):
    images, mask = source
    done = run_console("picpac", "crop", "db.picpac", "crops.picpac", "--min-size", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cropped 6 objects from 2 annotated of 3 records of db.picpac into crops.picpac "
                                  "(2 too small and 2 points left out) in ")
    with picpac.Reader(tmp_path / "crops.picpac") as db:
        assert len(db) == 6
        assert db.labels.tolist() == [2, 3, 1, 2, 3, 1]  # the objects' labels (default 1)
        assert db.groups.tolist() == [0, 0, 0, 9, 9, 9]  # the source record, or its group
        assert "classes" not in db.metadata  # they named the source records' labels
        assert db.metadata["source"] == "crop db.picpac"
        assert db.metadata["cropped"] == {"from": "db.picpac", "margin": 0.0, "min_size": 3}
        for k, record in enumerate(db):
            source_index, s = divmod(k, 3)
            left, top, w, h = BOXES[s]
            meta = {"source": source_index, "object": s, "box": [left, top, w, h], "width": w, "height": h,
                    "channels": 3}
            assert record.meta == ({**meta, "path": "a.png"} if source_index == 0 else meta)
            # the pixels of the region, exactly (PNG stays PNG)
            assert np.array_equal(decode(record["image"]), images[source_index][top:top + h, left:left + w])
            if source_index == 0:
                assert np.array_equal(decode(record["mask"]), mask[top:top + h, left:left + w])
            else:
                assert "mask" not in record
            # the object's shape, moved: in the crop's pixels it lies where it lay in the source's
            moved = json.loads(bytes(record["annotation"]))["shapes"]
            assert len(moved) == 1 and {k: v for k, v in moved[0].items() if k != "geometry"} == \
                {k: v for k, v in SHAPES[s].items() if k != "geometry"}
            original = Shapes.from_json({"shapes": [SHAPES[s]]}, W, H)
            cropped = Shapes.from_json({"shapes": moved}, w, h)
            assert np.allclose(cropped.points + (left, top), original.points, atol=1e-9)
        # the rect's annotation is the whole crop
        rect = json.loads(bytes(db[0]["annotation"]))["shapes"][0]["geometry"]
        assert [rect[k] for k in ("x", "y", "width", "height")] == pytest.approx([0, 0, 1, 1], abs=1e-12)


def test_margin_widens_crops_within_the_image(tmp_path, source):
    images, _ = source
    report = crop(tmp_path / "db.picpac", tmp_path / "crops.picpac", margin=0.5, min_size=3, threads=1)
    assert (report.objects, report.small, report.points) == (6, 2, 2)
    with picpac.Reader(tmp_path / "crops.picpac") as db:
        # rect [10, 40) x [8, 28) widened by 15 and 10: [-5, 55) x [-2, 38), kept inside the image
        assert db[0].meta["box"] == [0, 0, 55, 38]
        assert np.array_equal(decode(db[0]["image"]), images[0][0:38, 0:55])
        geometry = json.loads(bytes(db[0]["annotation"]))["shapes"][0]["geometry"]
        assert [geometry[k] for k in ("x", "y", "width", "height")] == \
            pytest.approx([10 / 55, 8 / 38, 30 / 55, 20 / 38], abs=1e-12)


def test_min_size_leaves_out_small_objects(tmp_path, source):
    report = crop(tmp_path / "db.picpac", tmp_path / "crops.picpac", min_size=1, threads=1)
    assert (report.objects, report.small) == (8, 0)  # the 2-pixel-wide rect is kept
    report = crop(tmp_path / "db.picpac", tmp_path / "crops.picpac", min_size=13, overwrite=True, threads=1)
    assert (report.objects, report.small) == (4, 4)  # the ellipse (16x12) too is left out
    with picpac.Reader(tmp_path / "crops.picpac") as db:
        assert [r.meta["object"] for r in db] == [0, 1, 0, 1]


def test_nothing_to_crop_writes_nothing(tmp_path):
    with picpac.Writer(tmp_path / "db.picpac") as w:
        w.append(image=png(np.zeros((8, 8, 3), np.uint8)), annotation=b'{"shapes": []}')
    done = run_console("picpac", "crop", "db.picpac", "crops.picpac", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("picpac: error: db.picpac: none of its 1 records (1 annotated) has a box, polygon")
    assert sorted(os.listdir(tmp_path)) == ["db.picpac"]


def test_a_bad_annotation_names_the_record(tmp_path):
    with picpac.Writer(tmp_path / "db.picpac") as w:
        w.append(image=png(np.zeros((8, 8, 3), np.uint8)), annotation=b'{"shapes": [{"type": "circle"}]}')
    with pytest.raises(PicPacValueError, match=r"db.picpac: record 0 has a bad annotation: annotation shape 0"):
        crop(tmp_path / "db.picpac", tmp_path / "crops.picpac")
    assert not (tmp_path / "crops.picpac").exists()


def test_existing_out_is_refused(tmp_path, source):
    (tmp_path / "crops.picpac").write_bytes(b"keep")
    done = run_console("picpac", "crop", "db.picpac", "crops.picpac", cwd=tmp_path)
    assert done.returncode == 2 and "already exists; pass --overwrite" in done.stderr
    assert (tmp_path / "crops.picpac").read_bytes() == b"keep"


def test_coco_polygons_become_crops_of_exactly_their_pixels(shared_data, tmp_path):
    """Real COCO photos (as lossless PNGs) with their YOLO-seg instance polygons."""
    src = shared_data / "coco128-train"
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    for stem in ("000000000009", "000000000025", "000000000030"):
        pixels = cv2.imread(str(src / "images" / f"{stem}.jpg"), cv2.IMREAD_COLOR)
        cv2.imwrite(str(tmp_path / "images" / f"{stem}.png"), pixels)
        shutil.copy(src / "instance-polygons" / f"{stem}.txt", tmp_path / "labels")
    shutil.copy(src / "instance-classes.yaml", tmp_path)
    done = run_console("picpac", "import", "-f", "yolo-seg", "images", "coco.picpac", "--classes",
                       "instance-classes.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run_console("picpac", "crop", "coco.picpac", "crops.picpac", "--margin", "0.1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with picpac.Reader(tmp_path / "coco.picpac") as db, picpac.Reader(tmp_path / "crops.picpac") as crops:
        shapes = {i: Shapes.from_json(bytes(db[i]["annotation"]), *decode(db[i]["image"]).shape[1::-1])
                  for i in range(len(db))}
        assert len(crops) == sum(len(s) for s in shapes.values()) > 3
        assert crops.classes == db.classes  # they named the shapes' labels: now the records'
        for record in crops:
            source, s = record.meta["source"], record.meta["object"]
            left, top, w, h = record.meta["box"]
            whole = decode(db[source]["image"])
            assert np.array_equal(decode(record["image"]), whole[top:top + h, left:left + w])
            assert record.label == shapes[source].labels[s]
            x1, y1, x2, y2 = shapes[source].boxes()[s]
            assert left <= max(0, x1) and top <= max(0, y1)
            assert left + w >= min(x2, whole.shape[1]) and top + h >= min(y2, whole.shape[0])
            moved = Shapes.from_json(bytes(record["annotation"]), w, h)
            assert np.allclose(moved.boxes()[0] + (left, top, left, top), shapes[source].boxes()[s], atol=1e-6)
