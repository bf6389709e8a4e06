"""PicPac v2 programs run unchanged: a dict config in v2's vocabulary (``images``, ``annotate=[k]``, transforms as
v2's dicts) streams v2's batches, ``[meta, images, *facets]``, with v2's defaults (NHWC uint8) and its final batch
cut, on real ImageNet JPEGs and on annotated squares; v2's float colour arithmetic streams."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

import picpac
from picpac.stream.image_stream import Meta
from picpac.stream.legacy import is_v2
from helpers import SHARED_DATA

W, H = 64, 48


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the ../shared folder beside the repo)")
    path = tmp_path_factory.mktemp("v2") / "photos.picpac"
    with picpac.Writer(path) as w:
        for i, f in enumerate(sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:25]):
            w.append(image=f.read_bytes(), label=i % 5, note=f"n{i}".encode())
    return str(path)


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> str:
    """PNG images with a white square, its rect annotation (field 1) labelled 1 + i % 3."""
    path = tmp_path_factory.mktemp("v2") / "squares.picpac"
    with picpac.Writer(path) as w:
        for i in range(10):
            x0, y0 = 4 + 3 * i, 6 + 2 * (i % 4)
            pixels = np.zeros((H, W, 3), np.uint8)
            pixels[y0:y0 + 20, x0:x0 + 16] = 255
            doc = {"shapes": [{"type": "rect", "label": 1 + i % 3,
                               "geometry": {"x": x0 / W, "y": y0 / H, "width": 16 / W, "height": 20 / H}}]}
            w.append(image=cv2.imencode(".png", pixels)[1].tobytes(), annotation=json.dumps(doc).encode(), label=i)
    return str(path)


def test_classification_binds_meta_and_images_with_v2s_defaults(photos):
    """README: ``for meta, images in stream``; images (B, H, W, C) uint8; labels in meta.labels; the last batch cut."""
    stream = picpac.ImageStream({"db": photos, "batch": 10, "loop": False, "shuffle": False,
                                 "transforms": [{"type": "resize", "width": 40, "height": 30}]})
    seen = []
    for meta, images in stream:
        assert isinstance(meta, Meta) and images.dtype == np.uint8 and images.shape[1:] == (30, 40, 3)
        assert meta.ids.dtype == np.int32 and meta.labels.dtype == np.float32 and meta.raw == []
        assert meta.labels.tolist() == [i % 5 for i in meta.ids.tolist()] and len(images) == len(meta.ids)
        seen.append(len(images))
    assert seen == [10, 10, 5]  # v2 pads nothing


def test_segmentation_binds_meta_images_and_labels(squares):
    """README: ``annotate: [1]`` and ``rasterize``: ``for meta, images, labels in stream``, labels (B, H, W, 1)
    uint8."""
    config = {"db": squares, "annotate": [1], "batch": 4, "loop": False, "shuffle": False,
              "transforms": [{"type": "rasterize"}]}
    total = 0
    for meta, images, labels in picpac.ImageStream(config):
        assert images.shape[1:] == (H, W, 3) and labels.shape[1:] == (H, W, 1) and labels.dtype == np.uint8
        for i, record in enumerate(meta.ids.tolist()):
            ys, xs = np.nonzero(labels[i, :, :, 0])
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (4 + 3 * record, 6 + 2 * (record % 4),
                                                                        20 + 3 * record, 26 + 2 * (record % 4))
            assert set(np.unique(labels[i])) == {0, 1 + record % 3}
            assert (images[i, :, :, 0] > 0).sum() == (labels[i, :, :, 0] > 0).sum()  # the square under its mask
        total += len(meta.ids)
    assert total == 10


def test_raw_fields_arrive_in_the_meta(photos):
    config = {"db": photos, "raw": [1], "batch": 8, "loop": False, "shuffle": False,
              "transforms": [{"type": "resize", "width": 16, "height": 16}]}
    meta, images = next(iter(picpac.ImageStream(config)))
    assert meta.raw == [[f"n{i}".encode() for i in range(8)]]


def test_v2s_float_colour_arithmetic_streams(photos):
    """v2's colour jitter: to HSV as floats in [0, 1] (mul0), augment.add there, back to BGR (mul1)."""
    transforms = [{"type": "resize", "width": 32, "height": 32},
                  {"type": "colorspace", "code": "BGR2HSV", "mul0": 1.0 / 255},
                  {"type": "augment.add", "range1": 10, "range2": 0.1, "range3": 0.1},
                  {"type": "colorspace", "code": "HSV2BGR", "mul1": 255}]
    plain = {"db": photos, "batch": 25, "loop": False, "shuffle": False, "transforms": transforms[:1]}
    jittered = {**plain, "transforms": transforms, "perturb": True}
    (_, before), = list(picpac.ImageStream(plain))
    (_, after), = list(picpac.ImageStream(jittered))
    assert after.dtype == np.uint8 and after.shape == before.shape
    difference = np.abs(after.astype(int) - before.astype(int)).mean(axis=(1, 2, 3))
    assert (difference > 1).all() and difference.max() < 60  # shifted, not scrambled
    still = {**jittered, "perturb": False}  # no random step: HSV and back is the identity, within rounding
    (_, same), = list(picpac.ImageStream(still))
    assert np.abs(same.astype(int) - before.astype(int)).max() <= 2


def test_the_vocabulary_decides_and_the_key_v2_says_it_outright(photos):
    assert is_v2({"images": [0]}) and is_v2({"annotate": [1]}) and is_v2({"annotate": True})
    assert is_v2({"transforms": [{"type": "resize"}]}) and not is_v2({"transforms": []})
    assert not is_v2({"batch": 4, "annotate": "json"}) and not is_v2({"images": [0], "v2": False})
    ours = picpac.ImageStream({"db": photos, "batch": 4, "loop": False, "resize_width": 16, "resize_height": 16})
    images, labels, pad = next(iter(ours))  # our own dict form: (images, labels, pad), NCHW float32
    assert images.shape == (4, 3, 16, 16) and images.dtype == np.float32
    forced = picpac.ImageStream({"db": photos, "batch": 4, "loop": False, "resize_width": 16, "resize_height": 16,
                                 "v2": True})
    meta, images = next(iter(forced))
    assert images.shape == (4, 16, 16, 3) and images.dtype == np.uint8


def test_rasterize_keeps_the_dtype_v2_asks_for(tmp_path):
    """v2's ``{"type": "rasterize", "dtype": "float32"}``: a shape labelled 300 is 300.0, not 300 wrapped to uint8."""
    path = tmp_path / "big.picpac"
    doc = {"shapes": [{"type": "rect", "label": 300, "geometry": {"x": 0.25, "y": 0.25, "width": 0.5, "height": 0.5}}]}
    with picpac.Writer(path) as w:
        w.append(image=cv2.imencode(".png", np.zeros((16, 16, 3), np.uint8))[1].tobytes(),
                 annotation=json.dumps(doc).encode(), label=0)
    for dtype, inside in (("float32", 300.0), ("int32", 300), ("uint8", 255)):  # uint8: saturated, as OpenCV draws
        config = {"db": str(path), "annotate": [1], "loop": False, "transforms": [{"type": "rasterize", "dtype": dtype}]}
        (meta, images, labels), = list(picpac.ImageStream(config))
        assert labels.dtype == np.dtype(dtype) and labels.shape == (1, 16, 16, 1)
        assert labels[0, 4:12, 4:12, 0].tolist() == [[inside] * 8] * 8 and labels[0, :4].max() == 0


def test_image_loader_takes_v2s_layout_from_a_v2_config(photos):
    """ImageLoader given a v2 config (or v2=True) returns v2's (1, H, W, C) uint8, the batches' layout."""
    data = open(next(iter(sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG")))), "rb").read()
    v2 = picpac.ImageLoader({"transforms": [{"type": "resize", "width": 40, "height": 30}]}).load_binary(data)
    forced = picpac.ImageLoader({"resize_width": 40, "resize_height": 30, "v2": True}).load_binary(data)
    ours = picpac.ImageLoader({"resize_width": 40, "resize_height": 30}).load_binary(data)
    assert (v2.shape, v2.dtype, forced.shape, forced.dtype) == ((1, 30, 40, 3), np.uint8, (1, 30, 40, 3), np.uint8)
    assert (ours.shape, ours.dtype) == ((1, 3, 30, 40), np.float32)
    assert np.array_equal(ours[0].transpose(1, 2, 0), forced[0].astype(np.float32))
    meta, streamed = next(iter(picpac.ImageStream({"db": photos, "batch": 1, "loop": False, "shuffle": False,
                                                   "transforms": [{"type": "resize", "width": 40, "height": 30}]})))
    assert meta.ids.tolist() == [0] and np.array_equal(streamed, v2)  # the stream's first sample: the same file


def test_categories_counts_the_class_ids(photos, squares, tmp_path):
    """Legacy ``stream.categories()``: the largest label plus one; labels that are no class ids are named."""
    assert picpac.ImageStream(photos, loop=False).categories() == 5
    assert picpac.ImageStream(photos, loop=False, split=5, split_fold=0, split_negate=True).categories() == 5
    assert picpac.ImageStream(squares, loop=False, mixin=photos, mixin_group_delta=20).categories() == 25
    path = tmp_path / "regression.picpac"
    with picpac.Writer(path) as w:
        w.append(image=cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes(), label=0.5)
    with pytest.raises(picpac.PicPacValueError, match=r"label 0\.5 is no class id"):
        picpac.ImageStream(path, loop=False).categories()
