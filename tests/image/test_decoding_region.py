"""Region-of-interest JPEG decoding (picpac.image._jpeg): a region is exactly those pixels of a whole
decode, anything the extension cannot do falls back to the whole image, and a stream gives the same
batches with region_decode on and off."""
from __future__ import annotations

import functools
import hashlib
import io
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.image import decoding
from picpac.transforms import Affine, CenterCrop, Crop, Flip, Pad, RandomResizedCrop, Resize, Sample

extension = pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built (no libjpeg-turbo "
                                                                "headers at install): regions are decoded whole")


def test_the_extension_is_built_where_required():
    """CI sets PICPAC_REQUIRE_REGION_DECODE=1, so a build that silently dropped the extension fails there."""
    if os.environ.get("PICPAC_REQUIRE_REGION_DECODE") == "1":
        assert decoding.REGION_DECODE is True, "PICPAC_REQUIRE_REGION_DECODE=1 but picpac.image._jpeg was not built"
    assert decoding.REGION_DECODE is (decoding._jpeg is not None)


# -- synthetic JPEGs ------------------------------------------------------------------------------

def textured(width: int, height: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Smooth random colour blobs plus pixel noise: every block and chroma sample differs."""
    rng = np.random.default_rng(seed)
    shape = (height // 8 + 2, width // 8 + 2) + ((channels,) if channels > 1 else ())
    smooth = cv2.resize(rng.integers(0, 256, shape, dtype=np.uint8), (width, height), interpolation=cv2.INTER_CUBIC)
    return np.clip(smooth + rng.integers(-24, 25, smooth.shape), 0, 255).astype(np.uint8)


def jpeg(pixels: np.ndarray, *params: int) -> bytes:
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90, *params])[1].tobytes()


SAMPLING = cv2.IMWRITE_JPEG_SAMPLING_FACTOR
S444, S422, S420 = (cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
                    cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420)
PROGRESSIVE, RESTART = cv2.IMWRITE_JPEG_PROGRESSIVE, cv2.IMWRITE_JPEG_RST_INTERVAL

# name: (width, height, grey source, imencode params, luma sampling (h, v) or None for grey)
VARIANTS = {
    "444": (333, 257, False, (SAMPLING, S444), (1, 1)),
    "422": (333, 257, False, (SAMPLING, S422), (2, 1)),
    "420": (333, 257, False, (SAMPLING, S420), (2, 2)),
    "grey": (333, 257, True, (), None),
    "progressive-420": (333, 257, False, (PROGRESSIVE, 1, SAMPLING, S420), (2, 2)),
    "restart-420": (333, 257, False, (RESTART, 3, SAMPLING, S420), (2, 2)),
    "progressive-restart-422-tall": (129, 301, False, (PROGRESSIVE, 1, RESTART, 2, SAMPLING, S422), (2, 1)),
    "tiny-420": (17, 9, False, (SAMPLING, S420), (2, 2)),
}


@functools.cache
def variant(name: str) -> bytes:
    width, height, grey, params, _ = VARIANTS[name]
    return jpeg(textured(width, height, 1 if grey else 3, seed=len(name)), *params)


def frame(data: bytes) -> tuple[int, int, list[tuple[int, int]]]:
    """(SOF marker, DRI present, [(h, v) per component]) from a JPEG's header (up to its first scan)."""
    i, restart, sof, factors = 2, 0, None, None
    while data[i] == 0xFF and data[i + 1] != 0xDA:
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker == 0xDD:
            restart = 1
        if marker in (0xC0, 0xC1, 0xC2):
            sof, count = marker, data[i + 9]
            factors = [(data[i + 11 + 3 * k] >> 4, data[i + 11 + 3 * k] & 15) for k in range(count)]
        i += 2 + length
    return sof, restart, factors


@pytest.mark.parametrize("name", VARIANTS)
def test_the_synthetic_jpegs_are_what_they_claim(name):
    _, _, grey, params, luma = VARIANTS[name]
    marker, restart, factors = frame(variant(name))
    assert marker == (0xC2 if PROGRESSIVE in params[::2] else 0xC0)
    assert restart == (RESTART in params[::2])
    assert factors == ([(1, 1)] if grey else [luma, (1, 1), (1, 1)])


def reduced(size: int, reduction: int) -> int:
    return -(-size // reduction)


def regions(width: int, height: int, rng: np.random.Generator, count: int = 24) -> list:
    """Edge-touching, one-pixel, whole and random regions of a width x height image."""
    w, h = width, height
    found = [(0, 0, w, h), (0, 0, 1, 1), (w - 1, 0, 1, 1), (0, h - 1, 1, 1), (w - 1, h - 1, 1, 1),
             (0, 0, 1, h), (min(1, w - 1), 0, 1, h), (w // 2, 0, 1, h), (w - 1, 0, 1, h),
             (0, 0, w, 1), (0, h // 2, w, 1), (0, h - 1, w, 1),
             (0, h // 4, min(3, w), max(1, h // 2)), (w // 4, 0, max(1, w // 2), min(2, h)),
             (max(0, w - 5), h // 4, min(5, w), max(1, h // 2)), (w // 4, max(0, h - 3), max(1, w // 2), min(3, h)),
             (0, 0, max(1, w // 2), max(1, h // 2)), (w // 2, h // 2, w - w // 2, h - h // 2)]
    for _ in range(count):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        rw = 1 if rng.random() < 0.2 else int(rng.integers(1, w - x + 1))
        rh = 1 if rng.random() < 0.2 else int(rng.integers(1, h - y + 1))
        found.append((x, y, rw, rh))
    return [r for r in dict.fromkeys(found) if r[0] + r[2] <= w and r[1] + r[3] <= h]


MODES = [(1, False), (1, True), (3, False), (3, True)]  # (channels, rgb)


def mismatches(data: bytes, reduction: int, channels: int, rgb: bool, chosen: list) -> list:
    whole = decoding.decode_channels(data, channels, rgb, reduction)
    bad = []
    for x, y, w, h in chosen:
        got = decoding.decode_channels(data, channels, rgb, reduction, (x, y, w, h))
        want = whole[y:y + h, x:x + w]
        if got.shape != want.shape or not np.array_equal(got, want):
            diff = np.abs(got.astype(int) - want).max() if got.shape == want.shape else None
            bad.append(((x, y, w, h), got.shape, diff))
    return bad


@extension
@pytest.mark.parametrize("reduction", [1, 2, 4, 8])
@pytest.mark.parametrize("name", VARIANTS)
def test_a_region_is_exactly_those_pixels_of_the_whole_decode(name, reduction):
    data = variant(name)
    width, height, _, _, luma = VARIANTS[name]
    size = reduced(width, reduction), reduced(height, reduction)
    rng = np.random.default_rng(reduction)
    chosen = regions(*size, rng)
    assert len(chosen) > (10 if min(size) < 4 else 30)
    bad = {(c, rgb): found for c, rgb in MODES if (found := mismatches(data, reduction, c, rgb, chosen))}
    assert not bad, {mode: found[:5] for mode, found in bad.items()}


# -- edge cases: narrow crops, grey output, truncation, borders --------------------------------------

@extension
def test_grey_regions_of_an_rgb_stream():
    data = variant("420")
    whole = decoding.decode_channels(data, 1, True)
    got = decoding.decode_channels(data, 1, True, 1, (10, 20, 30, 40))
    assert got.shape == (40, 30) and np.array_equal(got, whole[20:60, 10:40])


@extension
@pytest.mark.parametrize("width, region", [
    pytest.param(333, (0, 0, 1, 257), id="left-column"),
    pytest.param(338, (337, 0, 1, 257), id="right-column-width-16k+2"),
])
def test_a_one_column_region_at_a_cropped_420_edge(width, region):
    data = jpeg(textured(width, 257), SAMPLING, S420)
    whole = decoding.decode_channels(data, 3, False)
    x, y, w, h = region
    assert np.array_equal(decoding.decode_channels(data, 3, False, 1, region), whole[y:y + h, x:x + w])


# -- real JPEGs -----------------------------------------------------------------------------------

@functools.cache
def _imagenet(folder: str) -> list[bytes]:
    return [f.read_bytes() for f in sorted(Path(folder).glob("*.JPEG"))]


def imagenet(shared_data) -> list[bytes]:
    files = _imagenet(str(shared_data / "imagenet-250"))
    assert len(files) == 250
    return files


@extension
def test_regions_of_real_jpegs(shared_data):
    """A seeded random region of each imagenet-250 file at each reduction, in gray, BGR and RGB."""
    rng = np.random.default_rng(2024)
    bad = []
    for i, data in enumerate(imagenet(shared_data)):
        width, height, orientation = decoding.jpeg_header(data)
        assert orientation == 1
        channels, rgb = MODES[i % len(MODES)]
        for reduction in (1, 2, 4, 8):
            w, h = reduced(width, reduction), reduced(height, reduction)
            x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
            region = x, y, int(rng.integers(1, w - x + 1)), int(rng.integers(1, h - y + 1))
            bad += [(i, reduction, *m) for m in mismatches(data, reduction, channels, rgb, [region])]
    assert not bad, bad[:10]


@extension
def test_a_whole_decode_through_the_extension_is_opencvs(shared_data):
    flags = {(0, 1): cv2.IMREAD_GRAYSCALE, (0, 2): cv2.IMREAD_REDUCED_GRAYSCALE_2,
             (0, 4): cv2.IMREAD_REDUCED_GRAYSCALE_4, (0, 8): cv2.IMREAD_REDUCED_GRAYSCALE_8,
             (1, 1): cv2.IMREAD_COLOR, (1, 2): cv2.IMREAD_REDUCED_COLOR_2,
             (1, 4): cv2.IMREAD_REDUCED_COLOR_4, (1, 8): cv2.IMREAD_REDUCED_COLOR_8}
    bad = []
    for i, data in enumerate(imagenet(shared_data)):
        width, height, _ = decoding.jpeg_header(data)
        mode = (0, 1, 2)[i % 3]
        for reduction in (1, 2, 4, 8):
            w, h = reduced(width, reduction), reduced(height, reduction)
            want = cv2.imdecode(np.frombuffer(data, np.uint8), flags[min(mode, 1), reduction])
            if mode == 2:
                want = want[:, :, ::-1]
            pixels, x0, row_width = decoding._jpeg.decode(data, reduction, 0, 0, w, h, mode)
            assert (x0, row_width, len(pixels)) == (0, w, w * h * (1 if mode == 0 else 3))
            got = np.frombuffer(pixels, np.uint8).reshape(want.shape)
            if not np.array_equal(got, want):
                bad.append((i, reduction, mode))
    assert not bad, bad[:10]


# -- fallbacks: the whole image -------------------------------------------------------------------

def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def test_a_png_with_a_region_decodes_whole():
    pixels = textured(70, 50)
    png = cv2.imencode(".png", pixels)[1].tobytes()
    got = decoding.decode_channels(png, 3, False, 1, (3, 4, 10, 10))
    assert got.shape == (50, 70, 3) and np.array_equal(got, pixels)
    assert same(decoding.decode_channels(png, 3, True, 2, (3, 4, 10, 10)), decoding.decode_channels(png, 3, True, 2))


LARGE = functools.cache(lambda: jpeg(textured(700, 500)))


@pytest.mark.parametrize("region", [
    (690, 10, 20, 5),    # past the right edge
    (10, 490, 20, 20),   # past the bottom edge
    (700, 0, 2, 2),      # starts right of the image
    (0, 500, 2, 2),      # starts below it
    (600, 400, 200, 200),
])
def test_a_region_past_the_edge_decodes_whole(region):
    data = LARGE()
    for channels, rgb in MODES:
        for reduction in (1, 2):
            got = decoding.decode_channels(data, channels, rgb, reduction, region)
            want = decoding.decode_channels(data, channels, rgb, reduction)
            assert got.shape == want.shape and np.array_equal(got, want)


@extension
def test_the_extension_clips_a_region_at_the_right_edge():
    pixels, x0, row_width = decoding._jpeg.decode(LARGE(), 1, 690, 10, 20, 5, 1)
    assert x0 <= 690 and x0 + row_width == 700 and len(pixels) == 5 * row_width * 3
    whole = decoding.decode_channels(LARGE(), 3, False)
    # from the asked column on (column x0, at an iMCU edge, lacks its chroma neighbour: the reason
    # decode_channels asks for one more column each side)
    assert np.array_equal(np.frombuffer(pixels, np.uint8).reshape(5, row_width, 3)[:, 690 - x0:], whole[10:15, 690:])
    assert decoding._jpeg.decode(LARGE(), 1, 10, 490, 20, 20, 1) is None  # past the bottom: no rows clipped
    assert decoding._jpeg.decode(LARGE(), 1, 700, 0, 2, 2, 1) is None


def truncated() -> bytes:
    data = LARGE()
    return data[:len(data) // 2]  # header intact, scan cut


@pytest.mark.parametrize("region", [(0, 400, 16, 16), (0, 0, 700, 500), (300, 200, 50, 290)])
def test_a_region_that_reaches_the_cut_of_a_truncated_jpeg_is_no_partial_image(region):
    data = truncated()
    assert decoding.jpeg_header(data) == (700, 500, 1)
    assert same(decoding.decode_channels(data, 3, False, 1, region), decoding.decode_channels(data, 3, False))


@extension
def test_a_region_above_the_cut_of_a_truncated_jpeg_is_no_partial_image():
    data = truncated()
    assert same(decoding.decode_channels(data, 3, False, 1, (0, 0, 16, 16)), decoding.decode_channels(data, 3, False))


def test_a_cmyk_jpeg_with_a_region_decodes_whole():
    from PIL import Image  # in the test extra: OpenCV cannot write CMYK JPEGs
    buf = io.BytesIO()
    Image.fromarray(textured(70, 50)[:, :, ::-1].copy()).convert("CMYK").save(buf, "JPEG", quality=95)
    data = buf.getvalue()
    assert data[:2] == b"\xff\xd8" and decoding.jpeg_header(data) == (70, 50, 1)
    if decoding.REGION_DECODE:
        assert decoding._jpeg.decode(data, 1, 0, 0, 5, 5, 1) is None
    for channels, rgb in MODES:
        for reduction in (1, 2):
            got = decoding.decode_channels(data, channels, rgb, reduction, (1, 1, 5, 5))
            want = decoding.decode_channels(data, channels, rgb, reduction)
            assert want.shape[:2] == (reduced(50, reduction), reduced(70, reduction))
            assert got.shape == want.shape and np.array_equal(got, want)


# -- the raw C function ---------------------------------------------------------------------------

@extension
@pytest.mark.parametrize("args", [
    (3, 0, 0, 1, 1, 1), (0, 0, 0, 1, 1, 1), (16, 0, 0, 1, 1, 1),   # reduction
    (1, 0, 0, 1, 1, 5), (1, 0, 0, 1, 1, -1),                       # mode
    (1, -1, 0, 1, 1, 1), (1, 0, -1, 1, 1, 1),                      # negative origin
    (1, 0, 0, 0, 1, 1), (1, 0, 0, 1, 0, 1), (1, 0, 0, -2, 1, 1),   # empty or negative size
], ids=lambda a: "reduction,x,y,w,h,mode=" + ",".join(map(str, a)))
def test_the_c_function_rejects_bad_arguments(args):
    with pytest.raises(ValueError, match="bad reduction, mode or region"):
        decoding._jpeg.decode(LARGE(), *args)


@extension
@pytest.mark.parametrize("data", [b"", b"garbage" * 10, b"\xff\xd8", b"\xff\xd8\xff\xe0\x00\x10JFIF",
                                  cv2.imencode(".png", textured(8, 8))[1].tobytes()],
                         ids=["empty", "garbage", "soi-only", "header-cut", "png"])
def test_the_c_function_gives_none_for_no_jpeg(data):
    assert decoding._jpeg.decode(data, 1, 0, 0, 1, 1, 1) is None


@extension
def test_the_c_function_takes_any_bytes_like_object():
    data = LARGE()
    want = decoding._jpeg.decode(data, 2, 5, 7, 30, 20, 2)
    for view in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert decoding._jpeg.decode(view, 2, 5, 7, 30, 20, 2) == want
    with pytest.raises(TypeError):
        decoding._jpeg.decode("not bytes", 1, 0, 0, 1, 1, 1)


# -- Sample: the region the pending map reads -----------------------------------------------------

def deferred(data: bytes, calls: list, use_region: bool = True) -> Sample:
    def decoder(reduction: int, region: decoding.Region | None) -> np.ndarray | None:
        calls.append((reduction, region))
        return decoding.decode_channels(data, 3, False, reduction, region if use_region else None)
    return Sample(None, 0.0, 0, size=decoding.jpeg_header(data)[:2], decoder=decoder, regions=True)


@extension
def test_a_random_resized_crop_decodes_only_its_region(shared_data):
    data = imagenet(shared_data)[0]
    width, height, _ = decoding.jpeg_header(data)
    wholes = {r: decoding.decode_channels(data, 3, False, r) for r in (1, 2, 4)}
    exact = smaller = 0
    for seed in range(16):
        calls: list = []
        regional = RandomResizedCrop(224, 224)(deferred(data, calls), np.random.default_rng(seed))
        reference = RandomResizedCrop(224, 224)(deferred(data, [], use_region=False), np.random.default_rng(seed))
        pixels, _ = regional._decode()
        [(reduction, region)] = calls
        assert region is not None and region == regional._region(reduction)
        x, y, w, h = region
        assert pixels.shape == (h, w, 3) and np.array_equal(pixels, wholes[reduction][y:y + h, x:x + w])
        smaller += w * h < wholes[reduction].shape[0] * wholes[reduction].shape[1]
        out, want = regional.image, reference.image
        assert out.shape == want.shape == (224, 224, 3)
        if reduction == 1:  # a slice and cv2.resize: bit-identical
            assert np.array_equal(out, want), seed
            exact += 1
        else:  # warpAffine's fixed-point grid moves with the region's origin
            assert np.abs(out.astype(int) - want).max() <= 1, seed
    assert exact >= 12 and smaller >= 14, (exact, smaller)


@extension
def test_a_flip_reads_the_whole_image_through_the_region_path(shared_data):
    data = imagenet(shared_data)[1]
    width, height, _ = decoding.jpeg_header(data)
    calls: list = []
    sample = Flip(horizontal=1)(deferred(data, calls), np.random.default_rng(0))
    assert np.array_equal(sample.image, cv2.flip(decoding.decode_channels(data, 3, False), 1))
    assert calls == [(1, (0, 0, width, height))]


def test_a_rotation_has_no_region(shared_data):
    data = imagenet(shared_data)[0]
    width, height, _ = decoding.jpeg_header(data)
    calls: list = []
    sample = Affine(rotate=(30, 30))(deferred(data, calls), np.random.default_rng(0))
    assert sample._region(1) is None and sample._region(2) is None
    assert sample.image.shape == (height, width, 3)
    assert calls == [(1, None)]


@pytest.mark.parametrize("border", ["constant", "replicate", "reflect", "wrap"])
def test_a_padded_border_reads_the_whole_image(border):
    """A 50x50 window at the padded canvas' corner: 40 pixels of border, 10 of image, each way."""
    data = LARGE()
    outputs = []
    for use_region in (True, False):
        sample = Pad(sides=(40, 40, 40, 40), border=border)(deferred(data, [], use_region), None)
        sample.warp(np.array([[1.0, 0, 0], [0, 1, 0]]), (50, 50))
        outputs.append(sample.image)
    assert np.array_equal(*outputs)


# -- streams --------------------------------------------------------------------------------------

def batch(path, n: int, transforms: list, region_decode: bool) -> tuple[np.ndarray, np.ndarray]:
    """The first batch on the Python path (fused=False: the spy sees its decodes)."""
    with picpac.ImageStream(path, loop=False, shuffle=False, batch=n, dtype="uint8", order="NHWC", fused=False,
                            colorspace="BGR", region_decode=region_decode, transforms=transforms, seed=3) as s:
        out = next(s)
    return out[0], out[1]


@pytest.fixture
def spy(monkeypatch):
    """(calls, index): every decode as (record found by its bytes, reduction, region)."""
    calls: list = []
    index: dict = {}
    decode = decoding.decode_channels

    def spied(data, channels, rgb, reduction=1, region=None, **options):
        calls.append((index.get(hashlib.sha1(data).digest()), reduction, region))
        return decode(data, channels, rgb, reduction, region, **options)
    monkeypatch.setattr(picpac.image, "decode_channels", spied)
    return calls, index


@pytest.fixture
def imagenet64(shared_data, tmp_path, spy):
    path = tmp_path / "imagenet64.picpac"
    with picpac.Writer(path) as w:
        for i, data in enumerate(imagenet(shared_data)[:64]):
            w.append(image=data, label=i)
            spy[1][hashlib.sha1(data).digest()] = i
    return path


def by_record(calls: list) -> dict[int, tuple[int, tuple | None]]:
    out = {}
    for record, reduction, region in calls:
        assert record not in out, "one decode per sample"
        out[record] = reduction, region
    return out


def test_w1_batches_are_the_same_with_region_decode_on_and_off(imagenet64, spy):
    calls = spy[0]
    w1 = [RandomResizedCrop(224, 224), Flip(horizontal=0.5)]
    on, labels = batch(imagenet64, 64, w1, True)
    regional = by_record(calls)
    calls.clear()
    off, labels_off = batch(imagenet64, 64, w1, False)
    whole = by_record(calls)
    assert list(labels) == list(labels_off) == list(range(64))
    assert sorted(regional) == sorted(whole) == list(range(64))
    assert all(region is None for _, region in whole.values())
    assert all(region is not None for _, region in regional.values())
    full_scale = [i for i in range(64) if regional[i][0] == 1]
    assert [regional[i][0] for i in range(64)] == [whole[i][0] for i in range(64)]
    assert len(full_scale) >= 56, len(full_scale)
    for i in range(64):
        if i in full_scale:  # slice, cv2.resize, cv2.flip: bit-identical
            assert np.array_equal(on[i], off[i]), i
        else:
            assert np.abs(on[i].astype(int) - off[i]).max() <= 1, i


def test_random_crops_are_the_same_with_region_decode_on_and_off(imagenet64, spy):
    steps = [Crop(200, 200, random=True), Flip(horizontal=0.5, vertical=0.5)]
    on, _ = batch(imagenet64, 64, steps, True)
    assert all(reduction == 1 for _, reduction, _ in spy[0])
    off, _ = batch(imagenet64, 64, steps, False)
    assert np.array_equal(on, off)


def test_w2_batches_differ_by_at_most_one(imagenet64, spy):
    w2 = [Resize(shorter=256), CenterCrop(224, 224)]
    on, _ = batch(imagenet64, 64, w2, True)
    assert all(region is not None for _, _, region in spy[0])
    off, _ = batch(imagenet64, 64, w2, False)
    diff = np.abs(on.astype(int) - off)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999, (diff.max(), (diff == 0).mean())


def with_orientation(data: bytes, orientation: int) -> bytes:
    """``data`` with an APP1 Exif segment (orientation tag only) right after SOI."""
    tiff = b"II*\x00" + struct.pack("<IHHHII", 8, 1, 0x0112, 3, 1, orientation) + struct.pack("<I", 0)
    app1 = b"Exif\x00\x00" + tiff
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + data[2:]


def test_an_exif_rotated_jpeg_streams_the_same_with_region_decode_on_and_off(tmp_path, spy):
    """Stored 160x120, shown 120x160: the region (in shown pixels) must not be cut from the stored image."""
    calls, index = spy
    stored = [jpeg(textured(160, 120, seed=s)) for s in range(4)]
    records = [with_orientation(data, 6) for data in stored]
    records.append(jpeg(textured(120, 160, seed=9)))  # an upright control of the shown size
    path = tmp_path / "exif.picpac"
    with picpac.Writer(path) as w:
        for i, data in enumerate(records):
            w.append(image=data, label=i)
            index[hashlib.sha1(data).digest()] = i
    assert [decoding.jpeg_header(d) for d in records] == [(120, 160, 6)] * 4 + [(120, 160, 1)]
    shown = [decoding.decode_channels(d, 3, False) for d in records]
    for data, pixels in zip(stored, shown):  # OpenCV applies the orientation: 90 degrees clockwise
        assert np.array_equal(pixels, cv2.rotate(decoding.decode_channels(data, 3, False), cv2.ROTATE_90_CLOCKWISE))

    calls.clear()
    centre, _ = batch(path, 5, [CenterCrop(64, 96)], True)
    for i in range(5):
        assert np.array_equal(centre[i], shown[i][32:128, 28:92]), i
    regions = {record: region for record, _, region in calls}
    assert regions == {0: None, 1: None, 2: None, 3: None, 4: (28, 32, 64, 96)}  # regions of upright JPEGs only
    steps = [Crop(64, 96, random=True), Flip(horizontal=0.5)]
    on, _ = batch(path, 5, steps, True)
    off, _ = batch(path, 5, steps, False)
    assert np.array_equal(on, off)


# -- threads --------------------------------------------------------------------------------------

@extension
def test_concurrent_region_decodes_match_serial_ones():
    data = jpeg(textured(1024, 768, seed=5), SAMPLING, S420)
    rng = np.random.default_rng(8)
    jobs = []
    for _ in range(48):
        reduction = int(rng.choice([1, 2, 4]))
        w, h = reduced(1024, reduction), reduced(768, reduction)
        x, y = int(rng.integers(0, w - 1)), int(rng.integers(0, h))
        jobs.append((reduction, (x, y, int(rng.integers(2, w - x + 1)), int(rng.integers(1, h - y + 1)))))

    def run(job):
        reduction, region = job
        return decoding.decode_channels(data, 3, True, reduction, region)
    serial = [run(job) for job in jobs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(run, jobs * 4))
    for k, got in enumerate(concurrent):
        want = serial[k % len(jobs)]
        assert got.shape == (jobs[k % len(jobs)][1][3], jobs[k % len(jobs)][1][2], 3)
        assert np.array_equal(got, want), jobs[k % len(jobs)]
