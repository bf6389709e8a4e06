"""`picpac demo`: draw a labelled shape dataset, import it, describe it and read it all back."""
from __future__ import annotations

import csv
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from .. import image
from ..errors import PicPacError
from ..file.reader import Reader
from .info import describe, format_description
from .ingest import import_dataset

CLASSES = ("circle", "rectangle", "triangle")  # already sorted: the importer numbers them 0, 1, 2
SIZE = 96


def run_demo(count: int = 300, workdir: str | None = None, echo: Callable[[str], Any] = print) -> None:
    """Draw ``count`` images of shapes, import them with a CSV and show what the database holds.

    Files go to a temporary directory, or to ``workdir`` (created if needed), which is kept.
    """
    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
        _run(count, workdir, echo)
        return
    with tempfile.TemporaryDirectory(prefix="picpac-demo-") as tmp:
        _run(count, tmp, echo)


def _run(count: int, workdir: str, echo: Callable[[str], Any]) -> None:
    csv_path, labels = draw_dataset(count, workdir)
    echo(f"drew {count} images of {', '.join(CLASSES)} into {workdir}")
    db = os.path.join(workdir, "shapes.picpac")
    echo(import_dataset(csv_path, db, format="csv", overwrite=True).summary())
    echo(format_description(describe(db)))
    echo(_read_back(db, labels))


def draw_dataset(count: int, workdir: str) -> tuple[str, dict[str, int]]:
    """Write ``count`` JPEGs under ``workdir``/images and a CSV listing them.

    Returns the CSV's path and the class index of every image, by its path relative to ``workdir``.
    """
    rng = np.random.default_rng(0)
    labels = {}
    os.makedirs(os.path.join(workdir, "images"), exist_ok=True)
    csv_path = os.path.join(workdir, "shapes.csv")
    with open(csv_path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "label", "annotation"])
        for i in range(count):
            label = int(rng.integers(len(CLASSES)))
            pixels, shape = draw_image(rng, label)
            name = f"images/{i:05d}.jpg"
            with open(os.path.join(workdir, name), "wb") as image_file:
                image_file.write(image.encode(pixels, ".jpg"))
            out.writerow([name, CLASSES[label], json.dumps({"shapes": [shape]})])
            labels[name] = label
    return csv_path, labels


def draw_image(rng: np.random.Generator, label: int) -> tuple[np.ndarray, dict[str, Any]]:
    """A noisy SIZE x SIZE BGR image holding one shape of class ``label``, and its annotation shape."""
    background = rng.integers(0, 110, 3)
    noise = rng.integers(-20, 21, (SIZE, SIZE, 3))
    pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
    colour = tuple(int(c) for c in rng.integers(140, 256, 3))
    draw = (_draw_circle, _draw_rectangle, _draw_triangle)[label]
    geometry_type, geometry = draw(rng, pixels, colour)
    # Shape labels are mask values when annotations are rendered: 0 stays the background.
    return pixels, {"type": geometry_type, "geometry": geometry, "label": label + 1}


def _draw_circle(rng: np.random.Generator, image: np.ndarray, colour: tuple[int, ...]) -> tuple[str, dict]:
    r = int(rng.integers(10, 31))
    cx, cy = (int(v) for v in rng.integers(r, SIZE - r, 2))
    cv2.circle(image, (cx, cy), r, colour, -1, cv2.LINE_AA)
    return "ellipse", _box(cx - r, cy - r, 2 * r, 2 * r)


def _draw_rectangle(rng: np.random.Generator, image: np.ndarray, colour: tuple[int, ...]) -> tuple[str, dict]:
    w, h = (int(v) for v in rng.integers(16, 61, 2))
    x, y = int(rng.integers(0, SIZE - w)), int(rng.integers(0, SIZE - h))
    cv2.rectangle(image, (x, y), (x + w - 1, y + h - 1), colour, -1)
    return "rect", _box(x, y, w, h)


def _draw_triangle(rng: np.random.Generator, image: np.ndarray, colour: tuple[int, ...]) -> tuple[str, dict]:
    r = int(rng.integers(14, 36))
    cx, cy = (int(v) for v in rng.integers(r, SIZE - r, 2))
    angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3
    points = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], axis=1).round().astype(np.int32)
    cv2.fillPoly(image, [points], colour, cv2.LINE_AA)
    return "polygon", {"points": [{"x": _norm(x), "y": _norm(y)} for x, y in points.tolist()]}


def _box(x: int, y: int, w: int, h: int) -> dict[str, float]:
    return {"x": _norm(x), "y": _norm(y), "width": _norm(w), "height": _norm(h)}


def _norm(v: float) -> float:
    return round(v / SIZE, 6)


def _read_back(db: str, labels: dict[str, int]) -> str:
    """Read and decode every record, checking it against what was drawn; the throughput line."""
    count = len(labels)
    start = time.perf_counter()
    with Reader(db, check=True) as reader:
        records = list(reader)
        read_s = time.perf_counter() - start
        if reader.classes != list(CLASSES) or len(records) != count:
            raise PicPacError(f"demo: {db} holds {len(records)} records of classes {reader.classes}, "
                              f"expected {count} of {list(CLASSES)}")
        for record in records:
            pixels = image.decode(record["image"])
            drawn = labels.get(record.meta["path"])
            if pixels is None or pixels.shape != (SIZE, SIZE, 3) or drawn != record.label:
                raise PicPacError(f"demo: record {record.index} of {db} does not read back as drawn")
        total_s = time.perf_counter() - start
    return (f"read {count} records in {read_s:.3f} s: {count / read_s:,.0f} records/s "
            f"(decoded: {count / total_s:,.0f} img/s)")
