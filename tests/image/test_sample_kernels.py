"""The fused C path's kernels (picpac/image/_resample.c, through _jpeg.finish and decoding.fused_sample) against
OpenCV: the same bytes for every plan that sample.resample_plan makes, on random sizes."""
import cv2
import numpy as np
import pytest

from picpac.image import decoding
from picpac.image.sample import Sample, _resample, fused_geometry, resample_plan
from picpac.image.transforms import Affine, Pad, RandomResizedCrop, Resize, apply_all, convert

from helpers import smooth_jpeg

pytestmark = pytest.mark.skipif(not decoding.FUSED, reason="the fused C path needs picpac's C extension on x86-64 "
                                                           "with AVX2 and FMA")


def finished(pixels: np.ndarray, plan, size, border=(cv2.BORDER_CONSTANT, 0), dtype=np.uint8, channel_first=False,
             mean=(), std=()) -> np.ndarray:
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    geometry = fused_geometry(plan, size, border)
    width, height = size
    out = np.empty((channels, height, width) if channel_first else (height, width, channels), dtype)
    finish(pixels, geometry, out, channel_first, mean, std)
    return out


def finish(pixels: np.ndarray, geometry: tuple, out: np.ndarray, channel_first: bool, mean=(), std=()) -> None:
    """The kernels alone on decoded pixels (fused_sample's second half): _jpeg.finish."""
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    decoding._jpeg.finish(np.ascontiguousarray(pixels), width, height, channels, geometry, out,
                          decoding.FUSED_DTYPES[out.dtype], channel_first, mean, std)


def opencv(pixels, matrix, size, fill=0):
    out = _resample(pixels, matrix, size, cv2.INTER_LINEAR, cv2.BORDER_CONSTANT, fill)
    return out if out.ndim == 3 else out[:, :, None]


def test_resizes_equal_opencv_on_random_sizes():
    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(400):
        channels = int(rng.choice([1, 3]))
        h, w = (int(v) for v in rng.integers(1, 200, 2))
        height, width = (int(v) for v in rng.integers(1, 240, 2))
        if rng.random() < 0.2:  # integer shrinks: OpenCV's block means (and its 2x2 shortcut for INTER_LINEAR)
            kx, ky = (int(v) for v in rng.integers(1, 5, 2))
            w, h = max(1, w // kx) * kx, max(1, h // ky) * ky
            width, height = w // kx, h // ky
        pixels = rng.integers(0, 256, (h, w, channels) if channels == 3 else (h, w), dtype=np.uint8)
        matrix = np.array([[width / w, 0, 0], [0, height / h, 0]])
        plan = resample_plan(pixels.shape, matrix, (width, height), cv2.INTER_LINEAR)
        kinds.add((plan[0], plan[2]))
        assert np.array_equal(finished(pixels, plan, (width, height)), opencv(pixels, matrix, (width, height))), \
            (channels, h, w, height, width)
    assert {("slice", cv2.INTER_AREA), ("slice", cv2.INTER_LINEAR)} <= kinds


@pytest.mark.skipif(not decoding.FUSED_WARPS, reason="the C warp follows OpenCV 5's (4.x warps in fixed point)")
def test_warps_with_any_fill_equal_opencv_including_the_last_columns():
    """OpenCV maps 16 pixels at a time and the rest of a row another way: widths not a multiple of 16 check both."""
    rng = np.random.default_rng(5)
    for i in range(300):
        channels = int(rng.choice([1, 3]))
        h, w = (int(v) for v in rng.integers(2, 150, 2))
        width, height = int(rng.integers(1, 200)), int(rng.integers(1, 120))
        pixels = rng.integers(0, 256, (h, w, channels) if channels == 3 else (h, w), dtype=np.uint8)
        sx, sy = rng.uniform(0.2, 3, 2)
        angle = rng.uniform(-0.6, 0.6) if i % 2 else 0.0
        matrix = np.array([[sx * np.cos(angle), np.sin(angle), rng.uniform(-20, 20)],
                           [-np.sin(angle), sy * np.cos(angle), rng.uniform(-20, 20)]])
        fill = int(rng.integers(0, 256))
        plan = resample_plan(pixels.shape, matrix, (width, height), cv2.INTER_LINEAR)
        assert plan[0] == "warp"
        got = finished(pixels, plan, (width, height), (cv2.BORDER_CONSTANT, fill))
        assert np.array_equal(got, opencv(pixels, matrix, (width, height), fill)), (i, channels, h, w, height, width)


def test_flips_slices_and_output_conversion_equal_convert():
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    for a, d in ((-1, 1), (1, -1), (-1, -1), (1, 1)):
        matrix = np.array([[a * 0.5, 0, 30.0 if a < 0 else -2], [0, d * 0.75, 25.0 if d < 0 else -3]])
        size = (24, 25)
        plan = resample_plan(pixels.shape, matrix, size, cv2.INTER_LINEAR)
        if plan[0] == "warp" and not decoding.FUSED_WARPS:
            continue  # left to OpenCV 4
        for dtype, first, mean, std in ((np.uint8, False, (), ()), (np.uint8, True, (), ()),
                                        (np.float32, True, (1.5, 2.5, 3.5), (50.0, 60.0, 70.0)),
                                        (np.float32, False, (100.0,), ()), (np.float32, False, (), (2.0,))):
            want = convert(opencv(pixels, matrix, size), first, np.dtype(dtype),
                           np.float32(mean) if mean else None, np.float32(std) if std else None)
            got = finished(pixels, plan, size, dtype=dtype, channel_first=first, mean=mean, std=std)
            assert got.dtype == want.dtype and np.array_equal(got, want), (a, d, dtype, first, mean, std)


@pytest.mark.skipif(not decoding.FUSED_WARPS, reason="the C warp follows OpenCV 5's (4.x warps in fixed point)")
def test_other_borders_and_fills_are_left_to_opencv():
    plan = ("warp", None, np.eye(2, 3))
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_REFLECT_101, 0)) is None
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, (1, 2, 3))) is None
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, 300.0))[9] == 255  # saturated as OpenCV does


def deferred(data: bytes, rgb: bool = False) -> Sample:
    width, height, _ = decoding.jpeg_header(data)
    return Sample(None, 0, 0, size=(width, height), regions=True,
                  decoder=lambda r, region: decoding.decode_channels(data, 3, rgb, r, region, max_pixels=None))


@pytest.mark.parametrize("steps", [
    [RandomResizedCrop(64, 48)],
    [Resize(120, 90)],
    [Resize(shorter=300)],
    [Affine(rotate=20, scale=(0.5, 0.7))],
    [Pad(700, 500, fill=9), RandomResizedCrop(100, 100, scale=(0.5, 1))],
])
def test_a_planned_jpeg_sample_equals_its_python_decode(steps):
    """fused_plan + fused_sample (one C call from the bytes) give what reading ``sample.image`` gives."""
    data = smooth_jpeg(613, 411)
    for seed in range(6):
        rng = np.random.default_rng(seed)
        planned = apply_all(steps, deferred(data), rng)
        plan = planned.fused_plan()
        if plan is None and not decoding.FUSED_WARPS:
            continue  # a warp, left to OpenCV 4
        reduction, region, geometry = plan
        width, height = planned.size
        out = np.empty((height, width, 3), np.uint8)
        assert decoding.fused_sample(data, 3, False, reduction, region, geometry, out, False)
        python = apply_all(steps, deferred(data), np.random.default_rng(seed)).image
        assert np.array_equal(out, python), (steps, seed)


def test_warps_have_no_plan_before_opencv_5():
    plan = ("warp", None, np.eye(2, 3))
    assert (fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, 0)) is None) == (not decoding.FUSED_WARPS)


def test_what_the_fused_path_cannot_follow_has_no_plan():
    data = smooth_jpeg(100, 80)
    read = deferred(data)
    Resize(50, 40)(read, None)
    read.image  # the pixels were read: a Python step did
    assert read.fused_plan() is None
    reflect = Affine(rotate=10, border="reflect")(deferred(data), np.random.default_rng(0))
    assert reflect.fused_plan() is None
    rotated = deferred(data)
    rotated.warp(np.array([[0.0, 1, 0], [1, 0, 0]]), (80, 100))  # a transpose: the whole image, then a warp
    assert (rotated.fused_plan() or [None, None])[1] == ((0, 0, 100, 80) if decoding.FUSED_WARPS else None)


def test_a_jpeg_the_region_decoder_refuses_leaves_out_untouched():
    cmyk = smooth_jpeg(64, 48)[:-2]  # no end-of-image marker: the region decoder declines it
    out = np.full((48, 64, 3), 7, np.uint8)
    assert not decoding.fused_sample(cmyk, 3, False, 1, (0, 0, 64, 48), (0,) * 12, out, False)
    assert (out == 7).all()


@pytest.mark.parametrize("args, message", [
    (((1, 0, 0, 10, 10, 0, 2, 8, 8, 0, 0, 0),), "out has"),  # out too small
    (((5,) + (0,) * 11,), "bad geometry"),
    (((1, 0, 0, 99, 10, 0, 2, 8, 8, 0, 0, 0),), "bad geometry"),  # a window outside the pixels
])
def test_bad_plans_raise_value_errors(args, message):
    pixels = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ValueError, match=message):
        finish(pixels, *args, np.empty((4, 4, 3), np.uint8), False)
