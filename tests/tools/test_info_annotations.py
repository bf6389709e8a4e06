"""`picpac info` on detection and segmentation databases imported from the real COCO128 data: record
labels and shape classes apart, shapes counted per class, names from the metadata, no empty names."""
from __future__ import annotations

import shutil

import pytest

import picpac

from helpers import run_console


@pytest.fixture
def coco(shared_data, tmp_path):
    """The COCO128 images (the first 24), their YOLO boxes, masks and the panoptic JSON, copied."""
    src = shared_data / "coco128-train"
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for image in sorted((src / "images").glob("*.jpg"))[:24]:
        shutil.copy(image, tmp_path / "images")
        mask = src / "semantic-masks" / f"{image.stem}.png"
        if mask.exists():
            shutil.copy(mask, tmp_path / "masks")
    shutil.copytree(src / "detection", tmp_path / "labels")
    for name in ("detection-classes.yaml", "semantic-classes.yaml"):
        shutil.copy(src / name, tmp_path)
    return tmp_path


def lines_between(lines: list[str], start: str, end: str) -> list[str]:
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(i for i, line in enumerate(lines) if line.startswith(end))
    return lines[first:last]


def test_detection_db_shows_shape_classes_apart_from_record_labels(coco):
    done = run_console("picpac", "import", "-f", "yolo", "images", "det.picpac", "--classes", "detection-classes.yaml",
               cwd=coco)
    assert done.returncode == 0, done.stderr
    info = run_console("picpac", "info", "det.picpac", cwd=coco)
    assert info.returncode == 0, info.stderr
    lines = info.stdout.splitlines()
    with picpac.Reader(coco / "det.picpac") as db:
        names = db.classes
    assert len(names) == 80 and names[0] == "person"
    assert f"classes:  80 of the annotation shapes' labels: {', '.join(names)}" in lines
    # the records' labels are all 0 and are not named after a shape class
    assert lines_between(lines, "labels:", "shapes:") == ["labels:   count per label", "       0: 24"]
    shapes = lines_between(lines, "shapes:", "groups:")
    # count the shapes of the label files by hand
    counts: dict[int, int] = {}
    for image in (coco / "images").glob("*.jpg"):
        label_file = coco / "labels" / f"{image.stem}.txt"
        for row in label_file.read_text().splitlines() if label_file.exists() else []:
            counts[int(row.split()[0])] = counts.get(int(row.split()[0]), 0) + 1
    total = sum(counts.values())
    with_shapes = sum(1 for image in (coco / "images").glob("*.jpg")
                      if (coco / "labels" / f"{image.stem}.txt").exists()
                      and (coco / "labels" / f"{image.stem}.txt").read_text().strip())
    assert shapes[0] == (f"shapes:   {total} in {with_shapes} of 24 annotated records (rect {total}); "
                         "count per shape label")
    expected = [f"  {label:>6} {names[label]}: {n}" for label, n in sorted(counts.items())]
    assert shapes[1:] == expected[:20] + ([f"  ... and {len(expected) - 20} more"] if len(expected) > 20 else [])
    assert ", ," not in info.stdout


def test_coco_ids_with_gaps_are_listed_with_their_ids(shared_data, tmp_path):
    src = shared_data / "coco128-train" / "panoptic" / "panoptic_train2017.json"
    shutil.copy(src, tmp_path / "panoptic.json")
    shutil.copytree(shared_data / "coco128-train" / "images", tmp_path / "images")
    done = run_console("picpac", "import", "panoptic.json", "pan.picpac", "--root", "images", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = run_console("picpac", "info", "pan.picpac", cwd=tmp_path).stdout.splitlines()
    with picpac.Reader(tmp_path / "pan.picpac") as db:
        classes = db.classes
    named = [(i, name) for i, name in enumerate(classes) if name]
    assert len(named) < len(classes)  # COCO's ids have gaps
    (line,) = [line for line in lines if line.startswith("classes:")]
    assert line == (f"classes:  {len(named)} named ids in 0-{len(classes) - 1} of the annotation shapes' labels: "
                    + ", ".join(f"{i} {name}" for i, name in named))
    assert ", ," not in "\n".join(lines)
    assert lines[lines.index("labels:   count per label") + 1] == "       0: 100"
    assert lines[lines.index("labels:   count per label") + 2].startswith("shapes:   ")


def test_segmentation_db_names_the_mask_values(coco):
    done = run_console("picpac", "import", "-f", "maskdir", "images", "seg.picpac", "--labels", "masks",
               "--classes", "semantic-classes.yaml", cwd=coco)
    assert done.returncode == 0, done.stderr
    info = run_console("picpac", "info", "seg.picpac", "--json", cwd=coco)
    import json
    d = json.loads(info.stdout)
    assert d["classes_of"] == "masks" and d["shapes"] is None
    assert d["labels"]["counts"] == [{"label": 0, "name": None, "count": d["records"]}]
    lines = run_console("picpac", "info", "seg.picpac", cwd=coco).stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("classes:")]
    assert " of the mask pixel values: " in line and ", ," not in line
    assert "fields:   image, mask" in lines
