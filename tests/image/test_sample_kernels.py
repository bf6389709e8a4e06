"""A sample's geometry on both paths: the Python path (sample.resample, picpac's kernels on uint8) and the fused C
path (_kernels.finish, fused_sample's second half) carry out one plan with the same kernels, so they give the same
bytes for every plan sample.resample_plan makes; and picpac's kernels stay within a stated tolerance of OpenCV's."""
import cv2
import numpy as np
import pytest

from picpac.image import _kernels, decoding
from picpac.image.sample import Sample, fused_geometry, resample, resample_plan
from picpac.image.transforms import Affine, Pad, RandomResizedCrop, Resize, apply_all, convert

from helpers import smooth_jpeg

OUTPUT = {np.dtype(np.uint8): 0, np.dtype(np.float32): 1}


def finished(pixels: np.ndarray, plan, size, border=(cv2.BORDER_CONSTANT, 0), dtype=np.uint8, channel_first=False,
             mean=(), std=()) -> np.ndarray:
    """The fused path's kernels on decoded pixels: _kernels.finish with the plan's 12 numbers."""
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    width, height = size
    out = np.empty((channels, height, width) if channel_first else (height, width, channels), dtype)
    _kernels.finish(np.ascontiguousarray(pixels), pixels.shape[1], pixels.shape[0], channels,
                    fused_geometry(plan, size, border), out, OUTPUT[out.dtype], channel_first, mean, std)
    return out


def python(pixels, matrix, size, fill=0):
    out = resample(pixels, matrix, size, cv2.BORDER_CONSTANT, fill)
    return out if out.ndim == 3 else out[:, :, None]


def random_resize(rng):
    """(pixels, matrix, size) of a random resize, a fifth of them by an integer factor."""
    channels = int(rng.choice([1, 3]))
    h, w = (int(v) for v in rng.integers(1, 200, 2))
    height, width = (int(v) for v in rng.integers(1, 240, 2))
    if rng.random() < 0.2:
        kx, ky = (int(v) for v in rng.integers(1, 5, 2))
        w, h = max(1, w // kx) * kx, max(1, h // ky) * ky
        width, height = w // kx, h // ky
    pixels = rng.integers(0, 256, (h, w, channels) if channels == 3 else (h, w), dtype=np.uint8)
    return pixels, np.array([[width / w, 0, 0], [0, height / h, 0]]), (width, height)


def random_warp(rng, i):
    channels = int(rng.choice([1, 3]))
    h, w = (int(v) for v in rng.integers(2, 150, 2))
    width, height = int(rng.integers(1, 200)), int(rng.integers(1, 120))
    pixels = rng.integers(0, 256, (h, w, channels) if channels == 3 else (h, w), dtype=np.uint8)
    sx, sy = rng.uniform(0.2, 3, 2)
    angle = rng.uniform(-0.6, 0.6) if i % 2 else 0.0
    matrix = np.array([[sx * np.cos(angle), np.sin(angle), rng.uniform(-20, 20)],
                       [-np.sin(angle), sy * np.cos(angle), rng.uniform(-20, 20)]])
    return pixels, matrix, (width, height)


# -- the two paths: the same kernels, the same bytes ---------------------------------------------------------------
def test_resizes_are_the_same_bytes_on_both_paths():
    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(400):
        pixels, matrix, size = random_resize(rng)
        plan = resample_plan(pixels.shape, matrix, size)
        kinds.add((plan[0], plan[2]))
        assert np.array_equal(finished(pixels, plan, size), python(pixels, matrix, size)), (pixels.shape, size)
    assert {("slice", cv2.INTER_AREA), ("slice", cv2.INTER_LINEAR)} <= kinds


def test_warps_with_any_fill_are_the_same_bytes_on_both_paths():
    rng = np.random.default_rng(5)
    for i in range(300):
        pixels, matrix, size = random_warp(rng, i)
        fill = int(rng.integers(0, 256))
        plan = resample_plan(pixels.shape, matrix, size)
        assert plan[0] == "warp"
        got = finished(pixels, plan, size, (cv2.BORDER_CONSTANT, fill))
        assert np.array_equal(got, python(pixels, matrix, size, fill)), (i, pixels.shape, size)


def test_flips_slices_and_output_conversion_equal_convert():
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    for a, d in ((-1, 1), (1, -1), (-1, -1), (1, 1)):
        matrix = np.array([[a * 0.5, 0, 30.0 if a < 0 else -2], [0, d * 0.75, 25.0 if d < 0 else -3]])
        size = (24, 25)
        plan = resample_plan(pixels.shape, matrix, size)
        for dtype, first, mean, std in ((np.uint8, False, (), ()), (np.uint8, True, (), ()),
                                        (np.float32, True, (1.5, 2.5, 3.5), (50.0, 60.0, 70.0)),
                                        (np.float32, False, (100.0,), ()), (np.float32, False, (), (2.0,))):
            want = convert(python(pixels, matrix, size), first, np.dtype(dtype),
                           np.float32(mean) if mean else None, np.float32(std) if std else None)
            got = finished(pixels, plan, size, dtype=dtype, channel_first=first, mean=mean, std=std)
            assert got.dtype == want.dtype and np.array_equal(got, want), (a, d, dtype, first, mean, std)


def test_other_borders_and_fills_take_the_python_path():
    plan = ("warp", None, np.eye(2, 3))
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_REFLECT_101, 0)) is None
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, (1, 2, 3))) is None
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, 300.0))[9] == 255  # saturated
    assert fused_geometry(plan, (4, 4), (cv2.BORDER_CONSTANT, 0))[:3] == (2, 0, 0)


# -- picpac's kernels against OpenCV's: a stated tolerance -----------------------------------------------------------
OPENCV = tuple(int(v) for v in cv2.__version__.split(".")[:2])
def resize_tolerance(pixels, size) -> int:
    """Levels a resize may differ from cv2.resize's: picpac rounds its exact weighted sums once (11-bit weights,
    summing to 2048 on each axis); OpenCV's LINEAR truncates partial sums in 16-bit arithmetic and its AREA weights are
    floats. The pixels sampled are the same, so they agree to a level; to 2 where AREA averages more than 8 pixels of
    an axis, whose 11-bit weights are each within half a 2048th of OpenCV's."""
    (h, w), (width, height) = pixels.shape[:2], size
    return 1 if w <= 8 * width and h <= 8 * height else 2
WARP_TOLERANCE = 1 if OPENCV >= (5, 0) else 12
"""Levels a warp may differ from cv2.warpAffine's: OpenCV 5 warps in float as picpac does (the order of its fused
operations differs: a level at most); 4.x maps to fixed-point positions of 1/32 pixel, so across a sharp edge of 255
levels its pixels are up to 255/32 away, rounded twice."""


def opencv(pixels, matrix, size, fill=0):
    plan = resample_plan(pixels.shape, matrix, size)
    if plan[0] == "slice":
        _, (x0, y0, x1, y1), interpolation, flip = plan
        out = pixels[y0:y1, x0:x1]
        out = out if interpolation is None else cv2.resize(out, size, interpolation=interpolation)
        out = out if flip is None else cv2.flip(out, flip)
    else:
        _, shrink, m = plan
        source = pixels if shrink is None else cv2.resize(pixels, shrink, interpolation=cv2.INTER_AREA)
        out = cv2.warpAffine(source, m, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                             borderValue=(fill,) * 4)
    return out if out.ndim == 3 else out[:, :, None]


def mixed(pixels, size) -> bool:
    """Whether one axis shrinks and the other grows: there OpenCV's INTER_AREA samples two pixels of each source cell
    on the shrinking axis (its area-mode LINEAR), where picpac averages each axis that shrinks."""
    (h, w), (width, height) = pixels.shape[:2], size
    return (width < w) != (height < h) and width != w and height != h


def test_resizes_are_within_a_level_of_opencvs():
    rng = np.random.default_rng(11)
    differing, compared = 0, 0
    for _ in range(400):
        pixels, matrix, size = random_resize(rng)
        if mixed(pixels, size) and resample_plan(pixels.shape, matrix, size)[2] == cv2.INTER_AREA:
            continue
        diff = np.abs(python(pixels, matrix, size).astype(int) - opencv(pixels, matrix, size))
        assert diff.max() <= resize_tolerance(pixels, size), (pixels.shape, size, diff.max())
        differing, compared = differing + int((diff > 0).sum()), compared + 1
    assert differing > 0 and compared > 300  # (not OpenCV's bytes: ours)


def test_an_axis_that_shrinks_is_averaged_whatever_the_other_does():
    """Columns 0, 255, 0, 255 ... shrunk 4x across while the rows grow 3x: every output pixel is the mean, 127.5
    rounded half up (OpenCV's INTER_AREA weighs the two pixels it samples of each cell: 191 with 5.0)."""
    stripes = np.tile(np.array([0, 255], np.uint8), (10, 20))  # 10 x 40
    out = resample(stripes, np.array([[0.25, 0, 0], [0, 3, 0]]), (10, 30))
    assert out.shape == (30, 10) and (out == 128).all()
    assert not (cv2.resize(stripes, (10, 30), interpolation=cv2.INTER_AREA) == 128).all()


def test_warps_are_within_the_tolerance_of_opencvs():
    rng = np.random.default_rng(5)
    for i in range(300):
        pixels, matrix, size = random_warp(rng, i)
        fill = int(rng.integers(0, 256))
        diff = np.abs(python(pixels, matrix, size, fill).astype(int) - opencv(pixels, matrix, size, fill))
        assert diff.max() <= WARP_TOLERANCE, (i, OPENCV, diff.max())


# -- the fused call on a JPEG --------------------------------------------------------------------------------------
def deferred(data: bytes, rgb: bool = False) -> Sample:
    width, height, _ = decoding.jpeg_header(data)
    return Sample(None, 0, 0, size=(width, height), regions=True,
                  decoder=lambda r, region: decoding.decode_channels(data, 3, rgb, r, region, max_pixels=None))


fast_path = pytest.mark.skipif(not decoding.REGION_DECODE, reason="the fused path needs picpac.image._jpeg (built with "
                                                                  "libjpeg-turbo's headers)")


@fast_path
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
        reduction, region, geometry = planned.fused_plan()
        width, height = planned.size
        out = np.empty((height, width, 3), np.uint8)
        assert decoding.fused_sample(data, 3, False, reduction, region, geometry, out, False)
        python = apply_all(steps, deferred(data), np.random.default_rng(seed)).image
        assert np.array_equal(out, python), (steps, seed)


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
    assert rotated.fused_plan()[1] == (0, 0, 100, 80)


@fast_path
def test_a_jpeg_the_region_decoder_refuses_leaves_out_untouched():
    cmyk = smooth_jpeg(64, 48)[:-2]  # no end-of-image marker: the region decoder declines it
    out = np.full((48, 64, 3), 7, np.uint8)
    assert not decoding.fused_sample(cmyk, 3, False, 1, (0, 0, 64, 48), (0,) * 12, out, False)
    assert (out == 7).all()


@pytest.mark.parametrize("geometry, message", [
    ((1, 0, 0, 10, 10, 0, 2, 8, 8, 0, 0, 0), "out has"),  # out too small
    ((5,) + (0,) * 11, "bad geometry"),
    ((1, 0, 0, 99, 10, 0, 2, 8, 8, 0, 0, 0), "bad geometry"),  # a window outside the pixels
])
def test_bad_plans_raise_value_errors(geometry, message):
    with pytest.raises(ValueError, match=message):
        _kernels.finish(bytes(300), 10, 10, 3, geometry, np.empty((4, 4, 3), np.uint8), 0, False, (), ())
