"""Region decoding of incomplete and truncated JPEGs gives the pixels of the whole decode.

A progressive JPEG that ends (with its end marker) before its last scans is valid, and libjpeg
block-smooths the coefficients it lacks; the system's libjpeg-turbo and OpenCV's bundled one smooth
differently, and a cropped or skipped decode differently again (by up to 8 levels on this photo), so the
extension refuses such JPEGs and OpenCV decodes them whole. A JPEG cut mid-scan, with or without an
end marker appended, is decoded as a region only where libjpeg meets no damage, which then gives the
whole decode's pixels, and otherwise falls back to the whole decode."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.image import decoding
from picpac.transforms import Crop, Flip

extension = pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built")
EOI = b"\xff\xd9"


@functools.cache
def _sources(folder: str) -> tuple[bytes, bytes]:
    """(progressive, baseline) re-encodings of one imagenet-250 photo (500 x 375, 4:2:0)."""
    pixels = cv2.imread(str(sorted(Path(folder).glob("*.JPEG"))[3]), cv2.IMREAD_COLOR)
    return tuple(cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_PROGRESSIVE, p])[1]
                 .tobytes() for p in (1, 0))


def sources(shared_data: Path) -> tuple[bytes, bytes]:
    return _sources(str(shared_data / "imagenet-250"))


def scan_starts(data: bytes) -> list[int]:
    """Offsets of the start-of-scan markers (entropy-coded data never holds 0xFF 0xDA)."""
    starts, at = [], data.find(b"\xff\xda")
    while at >= 0:
        starts.append(at)
        at = data.find(b"\xff\xda", at + 2)
    return starts


def incomplete(progressive: bytes) -> dict[str, bytes]:
    """The progressive JPEG ended after each of its first scans but the last."""
    starts = scan_starts(progressive)
    assert len(starts) >= 6
    return {f"scans-{k}": progressive[:starts[k]] + EOI for k in range(1, len(starts))}


def cut(data: bytes, name: str) -> dict[str, bytes]:
    """``data`` cut mid-scan at several points, with an end marker appended and without."""
    found = {}
    for fraction in (0.2, 0.5, 0.8, 0.97):
        at = int(len(data) * fraction)
        found[f"{name}-cut-{fraction}-eoi"] = data[:at] + EOI
        found[f"{name}-cut-{fraction}"] = data[:at]
    return found


def regions(width: int, height: int) -> list[decoding.Region]:
    return [(width // 3, height // 3, width // 3, height // 3), (0, 0, width, 9), (5, 0, 40, height),
            (width - 41, height - 3, 41, 3), (1, height // 8, width // 2, height // 8), (0, 0, width, height)]


def differences(data: bytes) -> list:
    """Where decode_channels with a region is neither that region of the whole decode nor (falling
    back) the whole decode itself."""
    bad = []
    for reduction in (1, 2, 4):
        for channels, rgb in ((1, False), (3, False), (3, True)):
            whole = decoding.decode_channels(data, channels, rgb, reduction)
            if whole is None:
                got = decoding.decode_channels(data, channels, rgb, reduction, (0, 0, 8, 8))
                if got is not None:
                    bad.append((reduction, channels, rgb, "decoded where the whole decode gives None"))
                continue
            height, width = whole.shape[:2]
            for x, y, w, h in regions(width, height):
                got = decoding.decode_channels(data, channels, rgb, reduction, (x, y, w, h))
                if got.shape[:2] == (h, w):
                    same = np.array_equal(got, whole[y:y + h, x:x + w])
                else:
                    same = np.array_equal(got, whole)
                if not same:
                    diff = (np.abs(got.astype(int) - whole[y:y + h, x:x + w]).max()
                            if got.shape == whole[y:y + h, x:x + w].shape else got.shape)
                    bad.append((reduction, channels, rgb, (x, y, w, h), diff))
    return bad


@extension
def test_an_incomplete_progressive_jpeg_is_refused_and_decoded_whole(shared_data):
    progressive, _ = sources(shared_data)
    variants = incomplete(progressive)
    for name, data in variants.items():
        for reduction in (1, 2, 4):
            assert decoding._jpeg.decode(data, reduction, 10, 10, 40, 40, 1) is None, name
    assert decoding._jpeg.decode(progressive, 1, 10, 10, 40, 40, 1) is not None  # complete: a region
    bad = {name: found[:3] for name, data in variants.items() if (found := differences(data))}
    assert not bad, bad


@pytest.mark.parametrize("kind", ["progressive", "baseline"])
def test_a_truncated_jpeg_gives_the_whole_decodes_pixels(shared_data, kind):
    progressive, baseline = sources(shared_data)
    variants = cut(progressive if kind == "progressive" else baseline, kind)
    bad = {name: found[:3] for name, data in variants.items() if (found := differences(data))}
    assert not bad, bad


@extension
def test_a_baseline_jpeg_cut_below_a_region_still_decodes_the_region(shared_data):
    """Damage below the region is never read: the region path is taken, and equals the whole decode."""
    _, baseline = sources(shared_data)
    data = baseline[:int(len(baseline) * 0.8)] + EOI
    whole = decoding.decode_channels(data, 3, False)
    got = decoding.decode_channels(data, 3, False, 1, (10, 20, 100, 30))
    assert got.shape == (30, 100, 3) and np.array_equal(got, whole[20:50, 10:110])


def test_streams_of_incomplete_and_truncated_jpegs_are_the_same_with_region_decode_on_and_off(shared_data, tmp_path):
    progressive, baseline = sources(shared_data)
    records = [progressive, baseline, *incomplete(progressive).values(),
               *(data for data in {**cut(progressive, "p"), **cut(baseline, "b")}.values()
                 if decoding.decode_channels(data, 3, False) is not None)]  # what OpenCV decodes at all
    assert len(records) >= 14
    path = tmp_path / "damaged.picpac"
    with picpac.Writer(path) as w:
        for i, data in enumerate(records):
            w.append(image=data, label=i)
    out = []
    for region_decode in (True, False):
        with picpac.ImageStream(path, loop=False, shuffle=False, batch=len(records), dtype="uint8", order="NHWC",
                                colorspace="BGR", region_decode=region_decode, seed=5,
                                transforms=[Crop(160, 120, random=True), Flip(horizontal=0.5)]) as s:
            out.append(next(s))
    assert list(out[0][1]) == list(out[1][1]) == list(range(len(records)))
    assert np.array_equal(out[0][0], out[1][0]), [hashlib.sha1(a).hexdigest() == hashlib.sha1(b).hexdigest()
                                                  for a, b in zip(out[0][0], out[1][0])]


def test_a_jpeg_ends_where_an_end_of_image_marker_follows_its_last_scan():
    data = cv2.imencode(".jpg", np.full((16, 24, 3), 90, np.uint8))[1].tobytes()
    assert decoding.jpeg_ends(data) and decoding.jpeg_ends(np.frombuffer(data, np.uint8))
    assert decoding.jpeg_ends(data + b"\x00trailing bytes")  # after the marker: still whole
    assert not decoding.jpeg_ends(data[:-2]) and not decoding.jpeg_ends(data[:len(data) // 2])
    assert not decoding.jpeg_ends(data + data[:-2])  # a scan after the last marker, cut short
    assert not decoding.jpeg_ends(b"") and not decoding.jpeg_ends(b"\xd9")
