"""picpac.tools.demo: each drawn shape is where its annotation says, the dataset files and CSV it writes,
its temporary folder, and the read-back check that refuses a database not as drawn."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac.errors import PicPacError
from picpac.tools.demo import CLASSES, SIZE, _read_back, draw_dataset, draw_image, run_demo


def bright(pixels: np.ndarray) -> np.ndarray:
    """Where the shape is: its colour has every channel >= 140, the noisy background none above 129."""
    return (pixels >= 140).all(axis=2)


def box(geometry: dict) -> tuple[int, int, int, int]:
    return tuple(round(geometry[k] * SIZE) for k in ("x", "y", "width", "height"))


def test_a_rectangle_fills_its_box_exactly():
    for seed in range(5):
        pixels, shape = draw_image(np.random.default_rng(seed), 1)
        assert pixels.shape == (SIZE, SIZE, 3) and pixels.dtype == np.uint8
        assert shape["type"] == "rect" and shape["label"] == 2
        x, y, w, h = box(shape["geometry"])
        want = np.zeros((SIZE, SIZE), bool)
        want[y:y + h, x:x + w] = True
        assert np.array_equal(bright(pixels), want)
        assert len(np.unique(pixels[want], axis=0)) == 1  # one colour, no noise on it


def test_a_circle_lies_in_its_bounding_box():
    for seed in range(5):
        pixels, shape = draw_image(np.random.default_rng(seed), 0)
        assert shape["type"] == "ellipse" and shape["label"] == 1
        x, y, w, h = box(shape["geometry"])
        assert w == h
        r, (cx, cy) = w / 2, (x + w / 2, y + h / 2)
        ys, xs = np.nonzero(bright(pixels))
        distance = np.hypot(xs - cx, ys - cy)
        assert distance.max() <= r + 1
        assert abs(len(xs) - np.pi * r * r) < 2 * np.pi * r  # filled: its area, within its rim


def test_a_triangle_lies_within_its_polygon():
    for seed in range(5):
        pixels, shape = draw_image(np.random.default_rng(seed), 2)
        assert shape["type"] == "polygon" and shape["label"] == 3
        points = np.array([[p["x"] * SIZE, p["y"] * SIZE] for p in shape["geometry"]["points"]], np.float32)
        assert points.shape == (3, 2)
        ys, xs = np.nonzero(bright(pixels))
        inside = [cv2.pointPolygonTest(points, (float(x), float(y)), True) for x, y in zip(xs, ys)]
        assert min(inside) >= -1.5
        assert abs(len(xs) - cv2.contourArea(points)) < cv2.arcLength(points, True)


def test_draw_image_depends_only_on_the_generator():
    a = draw_image(np.random.default_rng(3), 2)
    b = draw_image(np.random.default_rng(3), 2)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]


def test_draw_dataset_writes_the_jpegs_and_a_csv_of_them(tmp_path):
    csv_path, labels = draw_dataset(9, str(tmp_path))
    assert csv_path == str(tmp_path / "shapes.csv")
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["path", "label", "annotation"] and len(rows) == 10
    assert list(labels) == [f"images/{i:05d}.jpg" for i in range(9)] == [row[0] for row in rows[1:]]
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [f"{i:05d}.jpg" for i in range(9)]
    for path, name, annotation in rows[1:]:
        assert name == CLASSES[labels[path]]
        (shape,) = json.loads(annotation)["shapes"]
        assert shape["label"] == labels[path] + 1 and shape["type"] == ("ellipse", "rect", "polygon")[labels[path]]
        pixels = cv2.imread(str(tmp_path / path))
        assert pixels.shape == (SIZE, SIZE, 3)
    assert set(labels.values()) == {0, 1, 2}
    again, labels_again = draw_dataset(9, str(tmp_path / "again"))
    assert labels_again == labels and Path(again).read_bytes() == Path(csv_path).read_bytes()


def test_run_demo_in_a_temporary_folder_removes_it(tmp_path):
    echoed: list[str] = []
    run_demo(count=6, echo=echoed.append)
    folder = Path(re.fullmatch(r"drew 6 images of circle, rectangle, triangle into (.+)", echoed[0])[1])
    assert folder.name.startswith("picpac-demo-") and not folder.exists()
    assert len(echoed) == 4 and re.fullmatch(r"read 6 records in .* img/s\)", echoed[3])


def test_run_demo_makes_its_workdir(tmp_path):
    workdir = tmp_path / "a" / "b"
    run_demo(count=3, workdir=str(workdir), echo=lambda line: None)
    assert sorted(p.name for p in workdir.iterdir()) == ["images", "shapes.csv", "shapes.picpac"]


def test_the_read_back_refuses_a_record_not_as_drawn(tmp_path):
    run_demo(count=4, workdir=str(tmp_path), echo=lambda line: None)
    db = str(tmp_path / "shapes.picpac")
    _, labels = draw_dataset(4, str(tmp_path / "same"))
    assert _read_back(db, labels).startswith("read 4 records in ")
    wrong = dict(labels, **{"images/00002.jpg": (labels["images/00002.jpg"] + 1) % 3})
    with pytest.raises(PicPacError, match=rf"^demo: record 2 of {re.escape(db)} does not read back as drawn$"):
        _read_back(db, wrong)
    with pytest.raises(PicPacError, match=rf"^demo: {re.escape(db)} holds 4 records of classes \['circle', "
                                          r"'rectangle', 'triangle'\], expected 3 of"):
        _read_back(db, dict(list(labels.items())[:3]))
