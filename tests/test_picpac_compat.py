"""PicPac's own configs run unchanged (docs/stream.md, "PicPac's configs"): the legacy README's, the
v2 README's (classification, segmentation with rasterize, box regression with dense anchors) and
the keys of both APIs, verbatim, on real images and annotations copied from ../shared/data."""
from __future__ import annotations

import json
import shutil
import warnings

import cv2
import numpy as np
import pytest
from helpers import SHARED_DATA

import picpac
from picpac.stream import legacy
from picpac.stream.legacy import PicPacConfigWarning

COCO = SHARED_DATA / "coco128-train"
IMAGENET = SHARED_DATA / "imagenet-250"


def _copy(sources, folder):
    folder.mkdir(exist_ok=True)
    out = []
    for source in sources:
        shutil.copy(source, folder / source.name)
        out.append(folder / source.name)
    return out


@pytest.fixture(scope="module")
def classes_db(tmp_path_factory):
    """24 ImageNet JPEGs, stored at 64x64 (picpac-import --resize 64), labels class index % 4."""
    if not IMAGENET.is_dir():
        pytest.skip(f"real data not found at {IMAGENET} (the ../shared folder beside the repo)")
    tmp = tmp_path_factory.mktemp("classes")
    rows = [line.split("\t") for line in (IMAGENET / "labels.tsv").read_text().splitlines()[1:25]]
    files = _copy([IMAGENET / row[0] for row in rows], tmp / "images")
    path = tmp / "classes.picpac"
    with picpac.Writer(path) as w:
        for file, row in zip(files, rows):
            image = cv2.resize(cv2.imread(str(file)), (64, 64))
            w.append(image=cv2.imencode(".jpg", image)[1].tobytes(), label=int(row[1]) % 4)
    return path, files


def _polygons(text: str) -> dict:
    shapes = []
    for line in text.splitlines():
        values = [float(v) for v in line.split()[1:]]
        points = [{"x": x, "y": y} for x, y in zip(values[0::2], values[1::2])]
        shapes.append({"type": "polygon", "label": 1, "geometry": {"points": points}})
    return {"shapes": shapes}


def _rects(text: str) -> dict:
    shapes = []
    for line in text.splitlines():
        _, cx, cy, w, h = (float(v) for v in line.split())
        shapes.append({"type": "rect", "label": 1, "geometry": {"x": cx - w / 2, "y": cy - h / 2, "width": w,
                                                                 "height": h}})
    return {"shapes": shapes}


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """Three databases of 12 COCO images: polygons (JSON), boxes (JSON), semantic masks (PNG); field 0 the
    image, field 1 the annotation, as picpac-import -f 3 / -f 4 wrote them."""
    if not COCO.is_dir():
        pytest.skip(f"real data not found at {COCO} (the ../shared folder beside the repo)")
    tmp = tmp_path_factory.mktemp("coco")
    names = sorted(p.stem for p in (COCO / "instance-polygons").iterdir())[:12]
    images = _copy([COCO / "images" / f"{n}.jpg" for n in names], tmp / "images")
    polygons = _copy([COCO / "instance-polygons" / f"{n}.txt" for n in names], tmp / "polygons")
    boxes = _copy([COCO / "detection" / f"{n}.txt" for n in names], tmp / "boxes")
    masks = _copy([COCO / "semantic-masks" / f"{n}.png" for n in names], tmp / "masks")
    paths = {kind: tmp / f"{kind}.picpac" for kind in ("polygons", "boxes", "masks")}
    with picpac.Writer(paths["polygons"]) as p, picpac.Writer(paths["boxes"]) as b, \
            picpac.Writer(paths["masks"]) as m:
        for image, polygon, box, mask in zip(images, polygons, boxes, masks):
            data = image.read_bytes()
            p.append(image=data, annotation=json.dumps(_polygons(polygon.read_text())).encode())
            b.append(image=data, annotation=json.dumps(_rects(box.read_text())).encode())
            m.append(image=data, mask=mask.read_bytes())
    return paths


def batches(stream):
    """PicPac's loop: next() until StopIteration."""
    out = []
    while True:
        try:
            out.append(stream.next())
        except StopIteration:
            break
    return out


# -- legacy (2016-2018): ImageStream(path, **config) -------------------------------------------------
def test_the_trial_config_runs(classes_db):
    path, _ = classes_db
    config = dict(loop=True, shuffle=True, reshuffle=True, batch=64, split=1, split_fold=0, annotate=False,
                  channels=3, stratify=True, dtype='float32', pert_color1=20, pert_angle=20, pert_min_scale=0.8,
                  pert_max_scale=1.2, pert_hflip=True, pert_vflip=True)
    with picpac.ImageStream(path, **config) as stream:
        images, labels, pad = stream.next()
    assert images.shape == (64, 3, 64, 64) and labels.shape == (64,) and pad == 0
    assert set(labels.tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_the_legacy_readme_config_runs_verbatim(classes_db):
    path, _ = classes_db
    db_path, batch, K = path, 5, 4
    seed = 1996
    config = dict(seed=seed,
                  loop=False,
                  shuffle=True,
                  reshuffle=True,
                  batch=batch,
                  resize_width=256,
                  resize_height=256,
                  split=K,
                  split_fold=0,
                  channels=1,
                  stratify=False,
                  pert_color1=10,
                  pert_angle=5,
                  pert_min_scale=0.8,
                  pert_max_scale=1.2,
                  pad=False,
                  pert_hflip=True,
                  )
    with pytest.warns(PicPacConfigWarning, match="'negate': read as split_negate") if "negate" not in \
            legacy._warned else warnings.catch_warnings():
        train_stream = picpac.ImageStream(db_path, negate=False, perturb=True, **config)
    valid_stream = picpac.ImageStream(db_path, negate=True, perturb=False, **config)
    with train_stream, valid_stream:
        assert (train_stream.size(), valid_stream.size()) == (18, 6)
        train, valid = batches(train_stream), batches(valid_stream)
    # loop=False, pad=False: the last batch is shorter, as PicPac's legacy stream truncates it
    assert [len(b[0]) for b in train] == [5, 5, 5, 3] and [len(b[0]) for b in valid] == [5, 1]
    assert all(b[0].shape[1:] == (1, 256, 256) and b[2] == 0 for b in train + valid)
    # with pad=True: a whole batch, and pad says how many samples fill it up
    config["pad"] = True
    with picpac.ImageStream(db_path, negate=True, perturb=False, **config) as padded:
        assert [(len(b[0]), b[2]) for b in batches(padded)] == [(5, 0), (5, 4)]


def test_every_legacy_key_is_accepted(coco):
    config = dict(seed=3, loop=True, shuffle=True, reshuffle=True, stratify=False, split=3, split_fold=1,
                  split_negate=False, mixin=str(coco["boxes"]), mixin_group_reset=-1, mixin_group_delta=0,
                  mixin_max=4, cache=True, preload=16, threads=2, channels=0, min_size=-1, max_size=-1,
                  resize_width=96, resize_height=64, crop_width=80, crop_height=48, round_div=16, round_mod=0,
                  decode_mode=1, annotate="json", anno_type=0, anno_copy=False, anno_palette="tableau20",
                  anno_number=False, anno_color1=1, anno_color2=0, anno_color3=0, anno_thickness=-1,
                  anno_min_ratio=0.05, point_radius=3, perturb=True, pert_colorspace="SAME", pert_color1=10,
                  pert_color2=10, pert_color3=10, pert_angle=10, pert_min_scale=0.9, pert_max_scale=1.1,
                  pert_hflip=True, pert_vflip=False, pert_border=0, mean_color1=104, mean_color2=117,
                  mean_color3=123, onehot=2, batch=4, pad=False, bgr2rgb=True, channel_first=True,
                  multi_images=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PicPacConfigWarning)
        with picpac.ImageStream(str(coco["polygons"]), **config) as stream:
            assert stream.config["mean"] == (123.0, 117.0, 104.0)  # B, G, R means, output in RGB
            assert stream.config["channels"] == 3 and stream.config["pert_colorspace"] == "SAME"
            images, masks, pad = stream.next()
    assert images.shape == (4, 3, 48, 80) and images.dtype == np.float32
    assert masks.shape == (4, 2, 48, 80) and set(np.unique(masks)) <= {0.0, 1.0}
    assert np.array_equal(masks.sum(axis=1), np.ones((4, 48, 80)))  # per-pixel one-hot
    assert masks[:, 1].any()  # the polygons are drawn


def test_legacy_annotate_image_auto_and_none(coco):
    common = dict(loop=False, shuffle=False, batch=2, resize_width=64, resize_height=48, order="NHWC")
    with picpac.ImageStream(str(coco["masks"]), annotate="image", **common) as s:
        images, masks, _ = s.next()
    assert masks.shape == (2, 48, 64, 1) and masks.max() > 1  # COCO category ids, nearest-neighbour
    with picpac.ImageStream(str(coco["masks"]), annotate="auto", mean_color1=10, **common) as s:
        images, targets, _ = s.next()  # an autoencoder's target: the output image itself
    assert targets.shape == images.shape == (2, 48, 64, 3) and np.array_equal(targets, images)
    with picpac.ImageStream(str(coco["masks"]), annotate="none", **common) as s:
        images, labels, _ = s.next()
    assert labels.shape == (2,)


# -- v2 (2018-2022): ImageStream({"db": ..., ...}) ---------------------------------------------------
def test_v2_readme_classification_config(classes_db):
    path, _ = classes_db
    config = {"db": str(path),
              "loop": True,
              "shuffle": True,
              "reshuffle": True,
              "annotate": False,
              "channels": 3,
              "stratify": True,
              "dtype": "float32",
              "batch": 16,
              "cache": True,
              "transforms": [
                  {"type": "augment.flip", "horizontal": True, "vertical": False, "transpose": False},
                  {"type": "resize", "size": 224},
              ]}
    with picpac.ImageStream(config) as stream:
        meta, images = next(stream)  # v2's binding: the labels in the meta; v2's default order, NHWC
    assert images.shape == (16, 224, 224, 3) and images.dtype == np.float32 and meta.labels.shape == (16,)


def test_v2_readme_segmentation_config(coco):
    config = {"db": str(coco["polygons"]),
              "loop": True, "shuffle": True, "reshuffle": True, "channels": 3, "stratify": True,
              "dtype": "float32", "batch": 1,
              "annotate": [1],    # load field 1 as annotation
              "transforms": [
                  {"type": "augment.flip", "horizontal": True, "vertical": False, "transpose": False},
                  {"type": "clip", "round": 16},
                  {"type": "rasterize"},
              ]}
    with picpac.ImageStream(config) as stream:
        for _, (meta, images, labels) in zip(range(4), stream):  # v2's binding
            assert images.shape[1] % 16 == 0 and images.shape[2] % 16 == 0 and len(meta.ids) == 1
            assert labels.shape == (1, *images.shape[1:3], 1) and labels.dtype == np.uint8 and labels.max() == 1
    # the same with a mask image in field 1: JSON or image is told by the field's first byte
    with picpac.ImageStream({**config, "db": str(coco["masks"])}) as stream:
        meta, images, labels = next(stream)
    assert labels.shape == (1, *images.shape[1:3], 1) and labels.max() > 1


def test_v2_readme_box_regression_config(coco):
    anchor_stride = 16
    config = {"db": str(coco["boxes"]),
              "loop": False, "shuffle": False, "batch": 1,
              "annotate": [1],    # same as segmentation
              "transforms": [
                  {"type": "clip", "round": 16},    # feature stride, see below
                  {"type": "anchors.dense.box", 'downsize': anchor_stride},
                  {"type": "rasterize"}
              ]}
    stream = picpac.ImageStream(config)
    positives = 0
    for meta, images, labels, anchors, anchor_weight, params, params_weight in stream:  # v2's binding
        h, w = images.shape[1] // anchor_stride, images.shape[2] // anchor_stride
        assert anchors.shape == anchor_weight.shape == params_weight.shape == (1, h, w, 1)
        assert params.shape == (1, h, w, 1, 4)
        positives += int(anchors.sum())
    assert positives >= 12  # every image has boxes, each its best anchor at least
    stream.close()


def test_v2_keys(coco, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {"db": str(coco["boxes"]), "seed": 2016, "loop": False, "shuffle": True, "reshuffle": True,
              "stratify": False, "oversample": False, "perturb": False, "split": 1, "split_fold": 0,
              "split_negate": False, "mixin": str(coco["masks"]), "mixin_group_reset": 0, "mixin_group_delta": 0,
              "mixin_max": 3, "mixin_randomize": True, "cache": False, "preload": 0, "threads": 0, "channels": -1,
              "images": [0], "annotate": [], "raw": [1], "dtype": "uint8", "order": "NHWC", "colorspace": "BGR",
              "dump": 1, "batch": 5, "transforms": [{"type": "resize", "width": 32, "height": 32}]}
    with picpac.ImageStream(config) as stream:
        assert stream.size() == 15
        meta, images = next(stream)  # v2's binding: the raw field in the meta
    raw = meta.raw[0]
    assert images.shape == (5, 32, 32, 3) and images.dtype == np.uint8 and len(raw) == 5
    assert all(isinstance(r, bytes) and r[:1] in (b"{", b"\x89") for r in raw)  # field 1: JSON or a PNG mask
    assert sorted(p.name for p in (tmp_path / "picpac_dump").iterdir()) == [f"0_0_{i}.png" for i in range(5)]
    assert np.array_equal(cv2.imread(str(tmp_path / "picpac_dump" / "0_0_0.png")), images[0])


def test_v2_image_loader_config(classes_db):
    _, files = classes_db
    loader = picpac.ImageLoader({"channels": 3, "dtype": "float32", "perturb": False, "order": "NHWC",
                                 "colorspace": "RGB", "dump": 0, "seed": 2016,
                                 "transforms": [{"type": "resize", "size": 224}]})
    assert loader.load_path(files[0]).shape == (1, 224, 224, 3)


def test_no_op_keys_warn_once_per_key(monkeypatch):
    monkeypatch.setattr(legacy, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            picpac.stream.config.StreamConfig.from_dict(dict(anno_palette="tableau20", split_keys=[0, 1], anno_number=True))
    messages = sorted(str(w.message) for w in caught if issubclass(w.category, PicPacConfigWarning))
    assert len(messages) == 3 and "'anno_number'" in messages[0] and "accepted and ignored" in messages[0]
