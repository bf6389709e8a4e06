"""picpac's pixel kernels (picpac/image/kernels.py over the C extension _kernels): what each computes, exactly."""
from __future__ import annotations

import os
import subprocess
import sys

import cv2
import numpy as np
import pytest

from picpac.image import _kernels, kernels

RNG = np.random.default_rng(7)
IMAGE = RNG.integers(0, 256, (37, 53, 3), dtype=np.uint8)


@pytest.fixture
def each_variant():
    """Every variant of the loops this CPU runs, one after the other; back to the automatic choice after."""
    def runs(name):
        try:
            kernels.select(name)
            return True
        except ValueError:
            return False
    yield [name for name in kernels.VARIANTS if runs(name)]
    kernels.select("auto")


# -- resize --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("interpolation", [cv2.INTER_LINEAR, cv2.INTER_AREA])
def test_a_flat_image_stays_flat_at_any_size(interpolation):
    """The weights of every output pixel sum to exactly 2048 on each axis, so a constant is kept, never off by one."""
    for value in (0, 1, 127, 254, 255):
        flat = np.full((29, 41, 3), value, np.uint8)
        for size in ((1, 1), (3, 200), (41, 29), (17, 9), (300, 7), (82, 58)):
            assert (kernels.resize(flat, size, interpolation) == value).all(), (value, size)


def test_an_integer_shrink_by_area_is_the_block_mean_rounded_half_up():
    image = RNG.integers(0, 256, (12, 18, 3), dtype=np.uint8)
    want = np.floor(image.reshape(4, 3, 6, 3, 3).mean(axis=(1, 3)) + 0.5).astype(np.uint8)
    out = kernels.resize(image, (6, 4), cv2.INTER_AREA)
    assert np.abs(out.astype(int) - want).max() <= 1 and (out == want).mean() > 0.95  # (9 weights of 2048 / 3 each)
    halves = np.array([[0, 1], [1, 1]], np.uint8)  # the mean 0.75 rounds to 1; [[0, 0], [1, 1]]: 0.5 rounds up
    assert kernels.resize(halves, (1, 1), cv2.INTER_AREA)[0, 0] == 1
    assert kernels.resize(np.array([[0, 0], [1, 1]], np.uint8), (1, 1), cv2.INTER_AREA)[0, 0] == 1


def test_linear_at_the_same_size_and_a_slice_of_rows_apart_are_copies():
    assert np.array_equal(kernels.resize(IMAGE, (53, 37), cv2.INTER_LINEAR), IMAGE)
    view = IMAGE[5:30, 7:40]  # rows apart: no copy needed
    assert np.array_equal(kernels.resize(view, (33, 25), cv2.INTER_LINEAR), view)
    gray = IMAGE[:, :, 0]
    assert kernels.resize(gray, (20, 10), cv2.INTER_AREA).shape == (10, 20)
    four = RNG.integers(0, 256, (9, 9, 4), dtype=np.uint8)
    assert kernels.resize(four, (5, 5), cv2.INTER_LINEAR).shape == (5, 5, 4)


# -- warp ----------------------------------------------------------------------------------------------------------
def test_the_identity_warp_is_a_copy_and_a_whole_pixel_shift_fills_the_rest():
    assert np.array_equal(kernels.warp(IMAGE, np.eye(2, 3), (53, 37), cv2.BORDER_CONSTANT, 0), IMAGE)
    shifted = kernels.warp(IMAGE, np.array([[1.0, 0, 3], [0, 1, -2]]), (53, 37), cv2.BORDER_CONSTANT, 9)
    assert np.array_equal(shifted[:35, 3:], IMAGE[2:, :50]) and (shifted[:, :3] == 9).all() and (shifted[35:] == 9).all()


@pytest.mark.parametrize("border", [cv2.BORDER_REPLICATE, cv2.BORDER_REFLECT_101, cv2.BORDER_WRAP])
def test_each_border_reads_the_pixels_opencvs_border_does(border):
    """Shifted by whole pixels, a warp copies: what it reads outside is the border's own pixel, as cv2.copyMakeBorder
    lays it out, even far past the image (wrapped and reflected many times)."""
    small = IMAGE[:7, :5]
    padded = cv2.copyMakeBorder(small, 80, 80, 80, 80, border)
    for tx, ty in ((0, 0), (3, 2), (-4, 1), (38, 35), (-30, -33)):
        out = kernels.warp(small, np.array([[1.0, 0, tx], [0, 1, ty]]), (20, 16), border, 0)
        assert np.array_equal(out, padded[80 - ty:96 - ty, 80 - tx:100 - tx]), (border, tx, ty)


def test_a_warp_of_a_hostile_map_reads_nothing_and_raises_nothing():
    for m in ([[0.0, 0, 0], [0, 0, 0]], [[1e-300, 0, 0], [0, 1e-300, 0]], [[1e9, 1e9, -1e9], [1e9, -1e9, 1e9]]):
        out = kernels.warp(IMAGE, np.array(m), (8, 8), cv2.BORDER_REFLECT_101, 0)
        assert out.shape == (8, 8, 3)
    with pytest.raises(ValueError, match="not finite or past 1e9"):
        kernels.warp(IMAGE, np.array([[np.nan, 0, 0], [0, 1, 0]]), (8, 8), cv2.BORDER_CONSTANT, 0)


# -- nearest and flip: any dtype, values as stored -------------------------------------------------------------------
DTYPES = [np.uint8, np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float16, np.float32, np.float64, np.bool_]


def random_of(dtype, shape):
    bits = RNG.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return (bits % 2).astype(np.bool_).reshape(shape) if dtype is np.bool_ else bits.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nearest_crops_flips_and_scales_by_whole_pixels_exactly(dtype):
    mask = random_of(dtype, (10, 12, 2))
    crop = kernels.nearest(mask, np.array([[1.0, 0, -3], [0, 1, -2]]), (6, 5))
    assert crop.tobytes() == np.ascontiguousarray(mask[2:7, 3:9]).tobytes()
    mirrored = kernels.nearest(mask, np.array([[-1.0, 0, 12], [0, 1, 0]]), (12, 10))
    assert mirrored.tobytes() == np.ascontiguousarray(mask[:, ::-1]).tobytes()
    doubled = kernels.nearest(mask, np.array([[2.0, 0, 0], [0, 2, 0]]), (24, 20))
    assert doubled.tobytes() == np.ascontiguousarray(mask.repeat(2, 0).repeat(2, 1)).tobytes()
    outside = kernels.nearest(mask, np.array([[1.0, 0, 5], [0, 1, 0]]), (12, 10))
    assert not outside[:, :5].view(np.uint8).any()  # zeros from outside


def test_nearest_never_mixes_labels():
    labels = RNG.integers(0, 5, (40, 50), dtype=np.uint16) * 1000
    rotated = kernels.nearest(labels, np.array([[0.8, 0.6, -10], [-0.6, 0.8, 25]]), (64, 48))
    assert set(np.unique(rotated)) <= set(np.unique(labels)) | {0}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("code", [1, 0, -1])
def test_flip_copies_every_dtype_as_stored(dtype, code):
    image = random_of(dtype, (9, 11, 3))
    want = image[::-1 if code <= 0 else 1, ::-1 if code != 0 else 1]
    assert kernels.flip(image, code).tobytes() == np.ascontiguousarray(want).tobytes()


# -- variants and arguments ----------------------------------------------------------------------------------------
def test_every_variant_gives_the_same_bytes(each_variant):
    results = {}
    for name in each_variant:
        kernels.select(name)
        assert kernels.variant() == name
        results[name] = (kernels.resize(IMAGE, (31, 22), cv2.INTER_LINEAR).tobytes(),
                         kernels.resize(IMAGE, (20, 13), cv2.INTER_AREA).tobytes(),
                         kernels.warp(IMAGE, np.array([[0.9, 0.2, 3], [-0.3, 1.1, 1]]), (40, 30), cv2.BORDER_WRAP, 0)
                         .tobytes())
    assert "portable" in results and len(set(results.values())) == 1


def test_the_environment_picks_the_variant_at_import():
    code = "import picpac.image.kernels as k; print(k.variant())"
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PICPAC_KERNELS": "portable"},
                         capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "portable", run.stderr
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PICPAC_KERNELS": "sse9"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "PICPAC_KERNELS=sse9 is no variant this build and CPU run" in run.stderr
    with pytest.raises(ValueError, match="sse9 is no variant"):
        kernels.select("sse9")


@pytest.mark.parametrize("call, message", [
    (lambda: _kernels.resize(IMAGE.astype(np.uint16), np.empty((4, 4, 3), np.uint16), 0), "resize: src: an image of"),
    (lambda: _kernels.resize(IMAGE, np.empty((4, 4, 1), np.uint8), 0), "out must have the source's channels"),
    (lambda: _kernels.resize(IMAGE, np.empty((4, 4, 3), np.uint8), 5), "interpolation must be 0"),
    (lambda: _kernels.resize(IMAGE, np.empty((4, 4, 3), np.uint8)[:, ::2], 0), "resize: out: an image of"),
    (lambda: _kernels.resize(IMAGE, np.empty((40000, 1, 3), np.uint8), 0), "sides of at most 32766"),
    (lambda: _kernels.warp(IMAGE, (1, 0, 0, 0, 1, 0), 4, 0, np.empty((4, 4, 3), np.uint8)), "border must be 0 to 3"),
    (lambda: _kernels.flip(IMAGE, 2, np.empty_like(IMAGE)), "code must be 1, 0 or -1"),
    (lambda: _kernels.flip(IMAGE, 1, np.empty((37, 53, 3), np.int16)), "flip: out: an image of"),
])
def test_bad_arguments_are_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
    with pytest.raises(TypeError, match="m: 6 numbers"):
        _kernels.nearest(IMAGE, (1, 0, 0), np.empty((4, 4, 3), np.uint8))
