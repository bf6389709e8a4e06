"""`picpac downsize`: large images shrunk (INTER_AREA) in their own format, small ones copied byte for
byte, masks shrunk by nearest neighbour with their image, everything else kept."""
from __future__ import annotations

import json
import os
import shutil

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import PathExistsError, PicPacValueError
from picpac.tools.downsize import downsize

from helpers import jpeg_bomb, png, run_console

ANNOTATION = json.dumps({"shapes": [{"type": "rect", "label": 1,
                                     "geometry": {"x": 0.25, "y": 0.25, "width": 0.5, "height": 0.5}}]}).encode()


@pytest.fixture
def photo(shared_data, tmp_path):
    """A real COCO JPEG (640x480), copied."""
    path = tmp_path / "photo.jpg"
    shutil.copy(shared_data / "coco128-train" / "images" / "000000000009.jpg", path)
    return path.read_bytes()


def make_source(path, photo: bytes) -> dict:
    """Records: 0 a large PNG with a mask, 1 a small PNG, 2 the real JPEG, 3 a small JPEG; labels, groups, meta."""
    rng = np.random.default_rng(0)
    large = rng.integers(0, 256, (80, 120, 3), np.uint8)
    mask = np.zeros((80, 120), np.uint8)
    mask[10:50, 20:70] = 3
    mask[40:80, 60:120] = 7
    small = rng.integers(0, 256, (20, 30, 3), np.uint8)
    tiny_jpeg = cv2.imencode(".jpg", rng.integers(0, 256, (24, 32, 3), np.uint8))[1].tobytes()
    with picpac.Writer(path, metadata={"classes": ["a", "b", "c", "d"], "note": "kept"}) as w:
        w.append(image=png(large), mask=png(mask), annotation=ANNOTATION, label=1, group=5,
                 meta={"path": "large.png", "width": 120, "height": 80, "channels": 3})
        w.append(image=png(small), annotation=ANNOTATION, extra=b"other bytes", label=2, meta={"path": "small.png"})
        w.append(image=photo, label=3, meta={"width": 640, "height": 480, "path": "photo.jpg"})
        w.append(image=tiny_jpeg, label=0)
    return {"large": large, "mask": mask, "small": small, "tiny_jpeg": tiny_jpeg}


def test_downsize_cli_shrinks_large_images_and_copies_small_ones(tmp_path, photo):
    source = make_source(tmp_path / "db.picpac", photo)
    done = run_console("picpac", "downsize", "db.picpac", "out.picpac", "--max-size", "40", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("downsized 2 of 4 records of db.picpac to at most 40 px (2 copied unchanged, "
                                  "1 masks resized) into out.picpac: ")
    assert done.stdout.count("\n") == 1
    with picpac.Reader(tmp_path / "db.picpac") as before, picpac.Reader(tmp_path / "out.picpac") as after:
        assert len(after) == 4
        assert after.labels.tolist() == [1, 2, 3, 0] and after.groups[0] == 5
        assert after.classes == ["a", "b", "c", "d"] and after.metadata["note"] == "kept"
        assert after.metadata["downsized"] == {"from": "db.picpac", "max_size": 40}
        # record 0: 120x80 -> 40x27 (80 * 40 / 120 = 26.7), exactly OpenCV's INTER_AREA, still PNG (lossless)
        large = cv2.imdecode(np.frombuffer(after[0]["image"], np.uint8), cv2.IMREAD_UNCHANGED)
        assert large.shape == (27, 40, 3)
        assert np.array_equal(large, cv2.resize(source["large"], (40, 27), interpolation=cv2.INTER_AREA))
        # its mask: nearest neighbour, so only the values it had
        mask = cv2.imdecode(np.frombuffer(after[0]["mask"], np.uint8), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(mask, cv2.resize(source["mask"], (40, 27), interpolation=cv2.INTER_NEAREST))
        assert set(np.unique(mask)) == {0, 3, 7}
        # relative JSON annotations are unchanged; the meta follows the image
        assert bytes(after[0]["annotation"]) == ANNOTATION
        assert after[0].meta == {"path": "large.png", "width": 40, "height": 27, "channels": 3}
        # record 1 and 3 fit: every field byte for byte
        for i in (1, 3):
            assert {k: bytes(v) for k, v in after[i].fields.items()} == \
                   {k: bytes(v) for k, v in before[i].fields.items()}
            assert after[i].meta == before[i].meta
        # record 2: the real photo, 640x480 -> 40x30, still a JPEG
        jpeg = bytes(after[2]["image"])
        assert jpeg[:3] == b"\xff\xd8\xff"
        pixels = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert pixels.shape == (30, 40, 3)
        expected = cv2.resize(cv2.imdecode(np.frombuffer(photo, np.uint8), cv2.IMREAD_COLOR), (40, 30),
                              interpolation=cv2.INTER_AREA)
        # exactly the shrunk photo encoded at quality 95 (the default)
        assert jpeg == cv2.imencode(".jpg", expected, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
        assert after[2].meta == {"width": 40, "height": 30, "path": "photo.jpg"}


def test_quality_sets_the_jpeg_quality(tmp_path, photo):
    make_source(tmp_path / "db.picpac", photo)
    sizes = {}
    for quality in (30, 95):
        report = downsize(tmp_path / "db.picpac", tmp_path / f"q{quality}.picpac", 200, quality=quality, threads=1)
        assert (report.records, report.resized) == (4, 1)  # only the photo exceeds 200
        with picpac.Reader(tmp_path / f"q{quality}.picpac") as db:
            sizes[quality] = len(db[2]["image"])
            decoded = cv2.imdecode(np.frombuffer(db[2]["image"], np.uint8), cv2.IMREAD_COLOR)
            assert decoded.shape == (150, 200, 3)
    assert sizes[30] < sizes[95] / 2


def test_an_existing_out_is_refused_unless_overwrite(tmp_path, photo):
    make_source(tmp_path / "db.picpac", photo)
    (tmp_path / "out.picpac").write_bytes(b"keep me")
    done = run_console("picpac", "downsize", "db.picpac", "out.picpac", "--max-size", "40", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "picpac: error: out.picpac: already exists; pass --overwrite (overwrite=True) to replace it\n"
    assert (tmp_path / "out.picpac").read_bytes() == b"keep me"
    with pytest.raises(PathExistsError):
        downsize(tmp_path / "db.picpac", tmp_path / "out.picpac", 40)
    downsize(tmp_path / "db.picpac", tmp_path / "out.picpac", 40, overwrite=True)
    with picpac.Reader(tmp_path / "out.picpac") as db:
        assert len(db) == 4


def test_an_image_over_the_pixel_limit_is_refused_naming_the_record(tmp_path):
    with picpac.Writer(tmp_path / "db.picpac") as w:
        w.append(image=png(np.zeros((8, 8, 3), np.uint8)))
        w.append(image=jpeg_bomb())
    done = run_console("picpac", "downsize", "db.picpac", "out.picpac", "--max-size", "4", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("picpac: error: db.picpac: record 1 has a 'image' 65500x65500 = ")
    assert "raise --max-pixels" in done.stderr and done.stderr.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["db.picpac"]  # no output, no temporary file


def test_an_undecodable_image_names_the_record_and_the_fix(tmp_path):
    big = png(np.zeros((50, 50, 3), np.uint8))
    with picpac.Writer(tmp_path / "db.picpac") as w:
        w.append(image=big[:60])  # a PNG header that says 50x50, and no pixels
    with pytest.raises(PicPacValueError, match=r"record 0 cannot decode its 'image' field; run `picpac verify"):
        downsize(tmp_path / "db.picpac", tmp_path / "out.picpac", 10)
    assert not (tmp_path / "out.picpac").exists()


def test_array_databases_are_refused(tmp_path):
    picpac.write_arrays(tmp_path / "arrays.picpac", np.zeros((2, 8, 8, 3), np.uint8), [0, 1])
    with pytest.raises(PicPacValueError, match="fixed-shape arrays"):
        downsize(tmp_path / "arrays.picpac", tmp_path / "out.picpac", 4)
