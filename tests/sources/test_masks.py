"""Mask folders (picpac/sources/masks.py), on the coco128 semantic masks."""
from __future__ import annotations

import pytest

from picpac import SourceError
from picpac.ingest import import_dataset
from picpac.sources import scan

from source_helpers import records, touch_images


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
