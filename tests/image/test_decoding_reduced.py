"""Reduced-scale JPEG decoding: chosen from the planned geometry, exact in geometry, no quality loss."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

import picpac
from picpac.image import decoding
from picpac.transforms import CenterCrop, Flip, RandomResizedCrop, Resize, Rotate90, Sample


def big_jpeg(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def deferred(data: bytes, used: list[int]) -> Sample:
    def decoder(reduction: int, region: decoding.Region | None) -> np.ndarray:
        used.append(reduction)
        return decoding.decode_channels(data, 3, False, reduction)
    return Sample(None, 0.0, 0, size=decoding.jpeg_header(data)[:2], decoder=decoder)


@pytest.mark.parametrize("transform, reduction", [
    (Resize(250, 187), 4),      # 1/8 would do, but libjpeg's 1/8 is DC-only: 1/4 is the smallest used
    (Resize(500, 375), 4),
    (Resize(500, 380), 2),      # 380 rows need more than the 375 of 1/4
    (Resize(shorter=256), 4),   # 341 x 256
    (Resize(1000, 750), 2),
    (Resize(1200, 900), 1),     # 0.6x: half scale would upsample
    (Rotate90(1), 1),
])
def test_the_largest_reduction_that_keeps_the_resolution(transform, reduction):
    rng = np.random.default_rng(0)
    pixels = cv2.resize(rng.integers(0, 256, (15, 20, 3), dtype=np.uint8), (2000, 1500), interpolation=cv2.INTER_CUBIC)
    used: list[int] = []
    sample = transform(deferred(big_jpeg(pixels), used), None)
    out = sample.image
    assert used == [reduction] and out.shape[:2] == sample.size[::-1]


def test_geometry_is_the_same_as_full_decode():
    """A white square lands on the same output pixels whatever the decode scale."""
    pixels = np.zeros((1600, 2400, 3), np.uint8)
    pixels[400:800, 800:1600] = 255
    data = big_jpeg(pixels)
    steps = [Resize(600, 400), Flip(horizontal=1)]
    reduced = deferred(data, used := [])
    full = Sample(decoding.decode_channels(data, 3, False), 0.0, 0)
    for step in steps:
        reduced = step(reduced, np.random.default_rng(0))
        full = step(full, np.random.default_rng(0))
    a, b = reduced.image.astype(int), full.image.astype(int)
    assert used == [4]
    assert np.abs(a - b).mean() < 2 and ((a > 127) == (b > 127)).mean() > 0.99


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return 10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b) ** 2))


def test_w2_quality_within_1db_of_full_decode(shared_data, tmp_path):
    """imagenet images upscaled 4x: W2 (shorter side 256, centre crop 224) from the reduced decode
    scores within 1 dB PSNR of the full decode, both against W2 of the original image."""
    files = sorted((shared_data / "imagenet-250").glob("*.JPEG"))[:24]
    path = tmp_path / "large.picpac"
    truths = []
    with picpac.Writer(path) as w:
        for f in files:
            original = cv2.imread(str(f), cv2.IMREAD_COLOR)
            w.append(image=big_jpeg(cv2.resize(original, None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC)))
            truth = CenterCrop(224, 224)(Resize(shorter=256)(Sample(original, 0, 0), None), None).image
            truths.append(truth)
    config = dict(loop=False, shuffle=False, batch=len(files), dtype="uint8", order="NHWC", colorspace="BGR",
                  transforms=[Resize(shorter=256), CenterCrop(224, 224)])
    with picpac.ImageStream(path, **config) as s:
        reduced = next(s)[0]
    with picpac.ImageStream(path, reduced_decode=False, **config) as s:
        full = next(s)[0]
    gaps = [psnr(f, t) - psnr(r, t) for r, f, t in zip(reduced, full, truths)]
    assert max(gaps) < 1.0, gaps


def test_random_resized_crop_plans_its_own_reduction(shared_data):
    data = (sorted((shared_data / "imagenet-250").glob("*.JPEG"))[0]).read_bytes()
    pixels = decoding.decode_channels(data, 3, False)
    large = big_jpeg(cv2.resize(pixels, None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC))
    seen = set()
    for seed in range(40):
        used: list[int] = []
        out = RandomResizedCrop(224, 224)(deferred(large, used), np.random.default_rng(seed)).image
        assert out.shape == (224, 224, 3)
        seen.add(used[0])
    assert len(seen) >= 2 and max(seen) >= 4  # small crops need the full image, big crops far less


def test_bad_jpeg_after_a_good_header_is_a_sample_error(tmp_path):
    data = big_jpeg(np.zeros((64, 64, 3), np.uint8))
    path = tmp_path / "db.picpac"
    with picpac.Writer(path) as w:
        w.append(image=data[:len(data) // 2])  # header intact, scan truncated
    with picpac.ImageStream(path, loop=False, resize_width=16, resize_height=16) as s:
        with pytest.raises(picpac.SampleError, match="record 0 cannot decode its image"):
            next(s)
