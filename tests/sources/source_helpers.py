"""Helpers of the tests of the source layouts (`from source_helpers import ...`: small files, records as
written); the tests of every folder share tests/helpers.py, and this folder's fixtures are in its conftest.py."""
from __future__ import annotations

import json
from pathlib import Path

from picpac import Reader


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
