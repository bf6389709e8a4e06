"""`picpac dump`: the stream's samples as PNGs (its very pixels), annotations drawn where they lie, and
an index.html of them all; written to a temporary folder renamed into place."""
from __future__ import annotations

import json
import os
import re
import shutil

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import PathExistsError, PicPacValueError
from picpac.tools.dump import annotated_config, drawn_samples, dump, load_config

from helpers import png, run_console

CONFIG = {"batch": 3, "resize_width": 96, "resize_height": 64, "perturb": True, "pert_hflip": True, "pert_angle": 10}


@pytest.fixture
def coco(shared_data, tmp_path):
    """Six real COCO photos (JPEG) with their YOLO boxes, imported."""
    src = shared_data / "coco128-train"
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    for image in sorted((src / "images").glob("*.jpg"))[:6]:
        shutil.copy(image, tmp_path / "images")
        shutil.copy(src / "detection" / f"{image.stem}.txt", tmp_path / "labels")
    done = run_console("picpac", "import", "-f", "yolo", "images", "coco.picpac", "--classes",
                       str(src / "detection-classes.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path


def stream_pictures(db, count: int, **config) -> list[np.ndarray]:
    """The first ``count`` samples of an ImageStream as BGR uint8 (H, W, C)."""
    pictures = []
    with picpac.ImageStream(db, **config) as stream:
        while len(pictures) < count:
            images = next(stream)[0]
            pictures += [image.transpose(1, 2, 0)[:, :, ::-1].astype(np.uint8) for image in images]
    return pictures[:count]


def pngs(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".png"))


def test_dump_cli_writes_the_streams_pixels_and_an_index(coco):
    pairs = [f"{k}={json.dumps(v)}" for k, v in CONFIG.items()]
    done = run_console("picpac", "dump", "coco.picpac", "out", *pairs, "--count", "5", "--seed", "7",
                       "--no-annotations", cwd=coco)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"dumped 5 samples of coco.picpac as PNGs into out \(index.html shows them\) in \d+\.\d s\n",
                        done.stdout)
    names = pngs(coco / "out")
    assert names == [f"{k:05d}.png" for k in range(5)]
    assert sorted(os.listdir(coco / "out")) == names + ["index.html"]
    for name, expected in zip(names, stream_pictures(coco / "coco.picpac", 5, **CONFIG, seed=7)):
        assert np.array_equal(cv2.imread(str(coco / "out" / name), cv2.IMREAD_UNCHANGED), expected), name
    page = (coco / "out" / "index.html").read_text()
    assert re.findall(r'<img src="([^"]+)"', page) == names
    assert page.count("<figcaption>") == 5 and "record" in page
    # another seed, another augmentation
    other = run_console("picpac", "dump", "coco.picpac", "other", *pairs, "--count", "5", "--seed", "8",
                        "--no-annotations", cwd=coco)
    assert other.returncode == 0, other.stderr
    assert any(not np.array_equal(cv2.imread(str(coco / "out" / n)), cv2.imread(str(coco / "other" / n)))
               for n in names)


def test_annotations_are_drawn_over_the_samples(coco):
    report = dump(coco / "coco.picpac", coco / "drawn", CONFIG, count=4, seed=7)
    assert report.samples == 4
    plain = stream_pictures(coco / "coco.picpac", 4, **CONFIG, seed=7)
    for name, picture in zip(pngs(coco / "drawn"), plain):
        drawn = cv2.imread(str(coco / "drawn" / name))
        assert drawn.shape == picture.shape and not np.array_equal(drawn, picture)


def boxes_db(path, label=1) -> None:
    """A black 64x48 image with a rect over [10, 40) x [8, 28)."""
    shapes = {"shapes": [{"type": "rect", "label": label,
                          "geometry": {"x": 10 / 64, "y": 8 / 48, "width": 30 / 64, "height": 20 / 48}}]}
    with picpac.Writer(path) as w:
        w.append(image=png(np.zeros((48, 64, 3), np.uint8)), annotation=json.dumps(shapes).encode(), label=3)


def test_a_box_is_outlined_on_its_edge_pixels(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    dump(tmp_path / "boxes.picpac", tmp_path / "out", {"loop": False}, count=1)
    picture = cv2.imread(str(tmp_path / "out" / "00000.png"))
    green = [0, 200, 0]  # label 1's colour (BGR)
    for y in range(14, 28):
        assert picture[y, 10].tolist() == green and picture[y, 39].tolist() == green
    for x in range(12, 40):
        assert picture[27, x].tolist() == green
    assert picture[14:27, 11:39].max() == 0  # inside: the image
    assert picture[30:, :].max() == 0 and picture[:, 42:].max() == 0  # outside: the image
    assert picture[3:13, 2:9].max() > 0  # the record's label, written in the corner


def test_a_mask_is_blended_in(tmp_path):
    mask = np.zeros((48, 64), np.uint8)
    mask[20:40, 30:60] = 2
    with picpac.Writer(tmp_path / "masks.picpac") as w:
        w.append(image=png(np.zeros((48, 64, 3), np.uint8)), mask=png(mask))
    dump(tmp_path / "masks.picpac", tmp_path / "out", {"loop": False}, count=1)
    picture = cv2.imread(str(tmp_path / "out" / "00000.png"))
    assert (picture[20:40, 30:60] == [128, 0, 0]).all()  # half of label 2's colour (255, 0, 0) over black
    assert picture[14:, :30].max() == 0 and picture[:, 60:].max() == 0 and picture[40:].max() == 0


def test_mean_and_std_are_undone(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    normal = {"loop": False, "value_range": "0-1", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    dump(tmp_path / "boxes.picpac", tmp_path / "a", {"loop": False, "order": "NHWC", "dtype": "uint8"}, count=1,
         annotations=False)
    dump(tmp_path / "boxes.picpac", tmp_path / "b", normal, count=1, annotations=False)
    assert np.array_equal(cv2.imread(str(tmp_path / "a" / "00000.png")), cv2.imread(str(tmp_path / "b" / "00000.png")))


def test_config_files_and_pairs(tmp_path):
    (tmp_path / "c.yaml").write_text("batch: 4\nresize_width: 32\nperturb: true\n")
    (tmp_path / "c.json").write_text('{"resize_height": 24, "batch": 2}')
    assert load_config([str(tmp_path / "c.yaml"), str(tmp_path / "c.json"), "resize_width=16", "mean=[1,2,3]"]) == \
        {"batch": 2, "resize_width": 16, "resize_height": 24, "perturb": True, "mean": [1, 2, 3]}
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(PicPacValueError, match="must hold a mapping of stream keys"):
        load_config([str(tmp_path / "list.yaml")])
    with pytest.raises(PicPacValueError, match="cannot read the config file"):
        load_config([str(tmp_path / "missing.yaml")])


def test_outputs_are_replaced_only_when_asked_and_only_a_dump(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    dump(tmp_path / "boxes.picpac", tmp_path / "out", {"loop": False}, count=1)
    with pytest.raises(PathExistsError):
        dump(tmp_path / "boxes.picpac", tmp_path / "out", {"loop": False}, count=1)
    done = run_console("picpac", "dump", "boxes.picpac", "out", "loop=false", "--overwrite", "--count", "3",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert pngs(tmp_path / "out") == ["00000.png"]  # one pass of one record
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    done = run_console("picpac", "dump", "boxes.picpac", "mine", "--overwrite", cwd=tmp_path)
    assert done.returncode == 2 and "is not a folder that `picpac dump` wrote" in done.stderr
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["boxes.picpac", "mine", "out"]  # no temporary folder left


def test_a_bad_key_is_one_line_and_leaves_nothing(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    done = run_console("picpac", "dump", "boxes.picpac", "out", "resize_widht=32", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("picpac: error: unknown config key 'resize_widht'; did you mean 'resize_width'?\n")
    assert sorted(os.listdir(tmp_path)) == ["boxes.picpac"]


def test_a_detection_sample_shows_the_box_of_its_turned_shape(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    config = annotated_config({"task": "detect", "perturb": True, "pert_angle": 40, "seed": 4, "loop": False},
                              ["image", "annotation"])
    with picpac.ImageStream(tmp_path / "boxes.picpac", **config) as stream:
        batch = next(stream)
        c = stream.config
    (picture, record, label), = drawn_samples(batch, c, [], "labels")
    box = batch[1][0, 0]
    assert (record, label) == (0, 3.0) and box[0] == 1 and abs(box[3] - box[1]) > 31  # turned: a larger box
    x1, y1, x2, y2 = (round(v) for v in box[1:])
    green = [0, 200, 0]
    for y in range(y1 + 8, y2 - 8):
        assert picture[y, x1].tolist() == green and picture[y, x2 - 1].tolist() == green
    for x in range(x1, x2):
        assert picture[y2 - 1, x].tolist() == green
    plain, = drawn_samples(batch, c, [], "labels", annotations=False)
    assert plain[0][y1 + 8:y2 - 8, x1].max() == 0  # the stream's own pixels: black there


def test_a_segmentation_the_config_asks_for_is_blended_under_the_outline(tmp_path):
    boxes_db(tmp_path / "boxes.picpac")
    dump(tmp_path / "boxes.picpac", tmp_path / "out", {"loop": False, "annotate": "json"}, count=1)
    picture = cv2.imread(str(tmp_path / "out" / "00000.png"))
    assert (picture[14:27, 11:39] == [0, 100, 0]).all()  # label 1's green, half and half with black
    assert picture[20, 10].tolist() == [0, 200, 0] and picture[27, 20].tolist() == [0, 200, 0]
    assert picture[30:, :].max() == 0 and picture[:, 42:].max() == 0
