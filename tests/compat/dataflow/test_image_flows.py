"""picpac/compat/dataflow/image.py on its own: ImageFromFile (RGB or gray pixels, (h, w) resizes, seeded orders,
files that are missing or do not decode) and the augmenting flows (picpac transforms and plain functions, the
generator seeded per datapoint, coordinates moved with the image, copies, caught errors, refusals)."""
from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.dataflow import (AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, DataFlowError,
                             DataFromList, ImageFromFile)
from picpac.dataflow.base import make_rng
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.transforms import Crop, Flip

from dataflow_helpers import ready, write_png


# -- images -------------------------------------------------------------------------------------------------
def test_image_from_file(tmp_path):
    rgb = np.zeros((6, 8, 3), np.uint8)
    rgb[..., 0] = 200  # red
    files = [write_png(tmp_path / f"{i}.png", rgb + i) for i in range(3)]
    ds = ImageFromFile(files)
    (img,), = list(ds)[:1]
    assert len(ds) == 3 and img.shape == (6, 8, 3) and img[0, 0].tolist() == [200, 0, 0]
    small = list(ImageFromFile(files, channel=1, resize=(3, 4)))[0][0]
    assert small.shape == (3, 4, 1)
    shuffled = ImageFromFile(files, shuffle=True, seed=0)
    shuffled.reset_state()
    assert len(list(shuffled)) == 3
    with pytest.raises(picpac.MissingPathError):
        list(ImageFromFile([str(tmp_path / "nope.png")]))


def gradient() -> np.ndarray:
    return np.broadcast_to(np.arange(8, dtype=np.uint8)[None, :, None] * 10, (4, 8, 3)).copy()


def test_augment_component_with_transforms_and_functions():
    img = gradient()
    ds = DataFromList([[img, i] for i in range(6)], shuffle=False)
    aug = AugmentImageComponent(ds, [Flip(horizontal=1.0), lambda im: im + 1], seed=0)
    with pytest.raises(Exception, match=r"reset_state\(\)"):
        iter(aug)
    aug.reset_state()
    out = list(aug)
    assert all(np.array_equal(dp[0], img[:, ::-1] + 1) and dp[1] == i for i, dp in enumerate(out))
    assert np.array_equal(ds.lst[0][0], img)  # the input is untouched
    rand = AugmentImageComponent(ds, [Crop(4, 2, random=True)], seed=3)
    rand.reset_state()
    first = [dp[0] for dp in rand]
    rand2 = AugmentImageComponent(ds, [Crop(4, 2, random=True)], seed=3)
    rand2.reset_state()
    assert all(np.array_equal(a, b[0]) for a, b in zip(first, rand2))  # the seed reproduces the crops
    assert len({a.tobytes() for a in first}) > 1 and first[0].shape == (2, 4, 3)
    with pytest.raises(PicPacTypeError, match="imgaug augmentors are not supported"):
        AugmentImageComponent(ds, [lambda a, b, c: a])
    failing = AugmentImageComponent(ds, [lambda im: im[:, :, 5]], catch_exceptions=True, seed=0)
    failing.reset_state()
    assert list(failing) == []  # every datapoint dropped, the errors logged
    strict = AugmentImageComponent(ds, [lambda im: im[:, :, 5]], seed=0)
    strict.reset_state()
    with pytest.raises(IndexError):
        list(strict)


def test_augment_coordinates_and_components_move_together():
    img = gradient()
    coords = np.array([[0.5, 0.5], [7.0, 3.0]], np.float32)
    ds = DataFromList([[img, coords]], shuffle=False)
    aug = AugmentImageCoordinates(ds, [Flip(horizontal=1.0)], seed=0)
    aug.reset_state()
    (out_img, out_coords), = list(aug)
    assert np.array_equal(out_img, img[:, ::-1])
    assert out_coords.dtype == np.float32 and out_coords.tolist() == [[7.5, 0.5], [1.0, 3.0]]  # x -> 8 - x
    mask = (img[:, :, 0] > 30).astype(np.uint8)
    pair = DataFromList([[img, mask, coords, "keep"] for _ in range(12)], shuffle=False)
    both = AugmentImageComponents(pair, [Flip(horizontal=0.5)], index=(0, 1), coords_index=(2,), seed=1)
    both.reset_state()
    flips = []
    for a, m, c, tag in both:
        flipped = np.array_equal(a, img[:, ::-1])
        assert flipped or np.array_equal(a, img)
        assert np.array_equal(m, mask[:, ::-1] if flipped else mask)  # the same draw for the mask
        assert np.allclose(c, [[7.5, 0.5], [1.0, 3.0]] if flipped else coords) and tag == "keep"
        flips.append(flipped)
    assert any(flips) and not all(flips)
    with pytest.raises(PicPacValueError, match=r"\(N, 2\) float"):
        bad = AugmentImageCoordinates(DataFromList([[img, np.zeros((2, 3))]], shuffle=False), [Flip()], seed=0)
        bad.reset_state()
        list(bad)


# -- ImageFromFile --------------------------------------------------------------------------------------------
def photo() -> np.ndarray:
    """A 6x10 RGB image with distinct rows, columns and channels (so a swap of any two shows)."""
    y, x = np.mgrid[0:6, 0:10]
    return np.stack([x * 20, y * 40, 255 - x * 10 - y * 5], -1).astype(np.uint8)


def test_image_from_file_reads_rgb_or_gray_pixels_and_resizes_to_h_w(tmp_path):
    rgb = photo()
    path = write_png(tmp_path / "photo.png", rgb)
    (img,), = list(ImageFromFile([Path(path)]))  # a PathLike, too
    assert img.dtype == np.uint8 and np.array_equal(img, rgb)
    (gray,), = list(ImageFromFile([path], channel=1))
    assert gray.shape == (6, 10, 1) and np.array_equal(gray[:, :, 0], cv2.imread(path, cv2.IMREAD_GRAYSCALE))
    (small,), = list(ImageFromFile([path], resize=(3, 5)))  # (h, w)
    assert small.shape == (3, 5, 3) and np.array_equal(small, cv2.resize(rgb, (5, 3)))
    (square,), = list(ImageFromFile([path], resize=4))
    assert square.shape == (4, 4, 3) and np.array_equal(square, cv2.resize(rgb, (4, 4)))


def test_image_from_file_shuffles_each_pass_with_its_seeded_rng(tmp_path):
    files = [write_png(tmp_path / f"{i}.png", np.full((2, 2, 3), i, np.uint8)) for i in range(7)]
    df = ImageFromFile(files, shuffle=True, seed=5)
    with pytest.raises(DataFlowError, match=r"^ImageFromFile: call reset_state\(\)"):
        iter(df)
    df.reset_state()
    rng = make_rng(5)
    assert [[int(img[0, 0, 0]) for img, in df] for _ in range(2)] == [rng.permutation(7).tolist(),
                                                                       rng.permutation(7).tolist()]
    assert [int(img[0, 0, 0]) for img, in ImageFromFile(files)] == list(range(7)) and len(df) == 7


def test_image_from_file_names_the_file_it_cannot_read(tmp_path):
    with pytest.raises(PicPacValueError, match=r"^ImageFromFile: no image files given$"):
        ImageFromFile([])
    with pytest.raises(PicPacValueError, match=r"^ImageFromFile: channel must be 1 or 3, got 4$"):
        ImageFromFile(["a.png"], channel=4)
    text = tmp_path / "notes.png"
    text.write_bytes(b"not an image")
    with pytest.raises(PicPacValueError, match=rf"^{text}: does not decode as an image$"):
        list(ImageFromFile([str(text)]))
    missing = tmp_path / "gone.png"
    with pytest.raises(picpac.MissingPathError, match=rf"^{missing}: no such file$"):
        list(ImageFromFile([missing]))
    df = ImageFromFile([str(missing), str(text)])  # nothing is read until iterated
    assert len(df) == 2


# -- augmenting -----------------------------------------------------------------------------------------------
def test_each_datapoint_gets_a_generator_seeded_from_the_flows_rng():
    """Datapoint k's transform draws from ``Generator(PCG64(s_k))``, s_k the k-th ``randint(0, 2**63 - 1)`` of
    ``make_rng(seed)``: reproducible for a seed, different for each datapoint."""
    drawn = []

    def record(sample, rng):
        drawn.append(int(rng.integers(1 << 40)))
        return sample
    ds = DataFromList([[gradient()] for _ in range(4)], shuffle=False)
    next(iter(ready(AugmentImageComponent(ds, record, seed=11))))  # one augmentor, not in a list
    drawn.clear()
    list(ready(AugmentImageComponent(ds, [record], seed=11)))
    rng = make_rng(11)
    seeds = [int(rng.randint(0, 2**63 - 1, dtype=np.int64)) for _ in range(4)]
    assert drawn == [int(np.random.Generator(np.random.PCG64(s)).integers(1 << 40)) for s in seeds]
    assert len(set(drawn)) == 4


def test_copy_protects_the_source_from_functions_that_write_into_their_input():
    def add_one_in_place(img):
        img += 1
        return img
    img = gradient()
    ds = DataFromList([[img]], shuffle=False)
    (out,), = list(ready(AugmentImageComponent(ds, [add_one_in_place], seed=0)))
    assert np.array_equal(out, gradient() + 1) and np.array_equal(img, gradient())
    list(ready(AugmentImageComponent(ds, [add_one_in_place], copy=False, seed=0)))
    assert np.array_equal(img, gradient() + 1)  # copy=False: the function had the source's own array


def test_coordinates_move_exactly_with_a_crop_and_keep_their_dtype():
    img = gradient()  # 4 x 8
    coords = np.array([[3.0, 1.5], [5.5, 2.0]])
    (out, moved), = list(ready(AugmentImageCoordinates(DataFromList([(img, coords)], shuffle=False), [Crop(4, 2)],
                                                       seed=0)))
    assert np.array_equal(out, img[1:3, 2:6])  # centred: 2 columns and 1 row off
    assert moved.dtype == np.float64 and moved.tolist() == [[1.0, 0.5], [3.5, 1.0]]
    flips = ready(AugmentImageCoordinates(DataFromList([{"im": img, "xy": coords}], shuffle=False),
                                          [Flip(horizontal=0, vertical=1.0)], img_index="im", coords_index="xy",
                                          seed=0))
    (dp,) = list(flips)
    assert np.array_equal(dp["im"], img[::-1]) and dp["xy"].tolist() == [[3.0, 2.5], [5.5, 2.0]]  # y -> 4 - y


def test_components_take_the_same_draws_and_leave_other_components():
    img = gradient()
    pairs = DataFromList([(img, img[:, :, 0].copy(), "tag") for _ in range(10)], shuffle=False)
    both = ready(AugmentImageComponents(pairs, [Crop(3, 3, random=True)], index=(0, 1), seed=2))
    for a, m, tag in both:
        assert np.array_equal(a[:, :, 0], m) and tag == "tag"  # the same crop of both
    with pytest.raises(PicPacValueError, match=r"^AugmentImageComponents needs at least one image index$"):
        AugmentImageComponents(pairs, [Flip()], index=())


def test_augmentors_are_refused_when_the_flow_is_made():
    ds = DataFromList([[gradient()]], shuffle=False)
    with pytest.raises(PicPacTypeError, match=r"^an augmentor must be a picpac transform t\(sample, rng\) or a function "
                                              r"img -> img, got int$"):
        AugmentImageComponent(ds, [Flip(), 3])
    with pytest.raises(PicPacTypeError, match=r"^cannot tell what .* is: an augmentor takes \(sample, rng\) \(a picpac "
                                              r"transform\) or \(img\) \(a function img -> img\); it takes 0 required "
                                              r"arguments. tensorpack's imgaug augmentors are not supported: use "
                                              r"picpac.transforms / picpac.color$"):
        AugmentImageCoordinates(ds, [lambda: None])
    assert len(list(ready(AugmentImageComponent(ds, [lambda img, scale=2: img * scale], seed=0)))) == 1  # defaults
    with pytest.raises(PicPacValueError, match=r"^coordinates must be an \(N, 2\) float array of \(x, y\), got int64 "
                                               r"\(2, 2\)$"):
        list(ready(AugmentImageCoordinates(DataFromList([[gradient(), np.zeros((2, 2), np.int64)]], shuffle=False),
                                           [Flip()], seed=0)))


def test_an_augmentor_without_a_readable_signature_is_refused_saying_so():
    ds = DataFromList([[gradient()[:, :, 0]]], shuffle=False)
    with pytest.raises(PicPacTypeError) as info:
        AugmentImageComponent(ds, [cv2.equalizeHist])
    assert str(info.value) == ("cannot tell what <built-in function equalizeHist> is: its signature cannot be read "
                               "(e.g. an OpenCV function), so it cannot be told from a picpac transform "
                               "t(sample, rng): wrap it, e.g. lambda img: f(img)")
    out = list(ready(AugmentImageComponent(ds, [lambda img: cv2.equalizeHist(img)], seed=0)))  # wrapped, it runs
    assert np.array_equal(out[0][0], cv2.equalizeHist(gradient()[:, :, 0]))


def test_caught_errors_are_logged_and_their_datapoints_dropped(caplog):
    def fail_on_odd(img):
        if img[0, 0, 0] % 2:
            raise ValueError("odd image")
        return img
    ds = DataFromList([[np.full((2, 2, 3), i, np.uint8), i] for i in range(6)], shuffle=False)
    with caplog.at_level(logging.ERROR, logger="picpac.dataflow"):
        out = list(ready(AugmentImageComponent(ds, [fail_on_odd], catch_exceptions=True, seed=0)))
    assert [dp[1] for dp in out] == [0, 2, 4]
    assert [r.getMessage() for r in caplog.records] == [
        f"AugmentImageComponent: {k} augmentation errors so far (the datapoints are dropped)" for k in (1, 2, 3)]
    assert all("ValueError: odd image" in r.exc_text for r in caplog.records)
