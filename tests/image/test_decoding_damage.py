"""A damaged JPEG is named (picpac/image/decoding.py, picpac.image._jpeg.image): libjpeg's warnings ("Corrupt JPEG
data ...") reach the caller as picpac's, through ``on_damage``, and nothing is printed on stderr unnamed."""
from __future__ import annotations

import re

import cv2
import numpy as np
import pytest

from picpac.image import _jpeg, decoding

from helpers import smooth_jpeg

pytestmark = pytest.mark.skipif(not decoding.REGION_DECODE, reason="picpac.image._jpeg was not built")

IMAGE = smooth_jpeg(96, 64)
PIXELS = decoding.decode(IMAGE)


EXTRANEOUS = r"Corrupt JPEG data: \d+ extraneous bytes before marker 0xd9"
"""libjpeg's warning for stray bytes after the scan (the count: those its bit reader had not fetched ahead)."""


def padded(jpeg: bytes) -> bytes:
    """``jpeg`` with 100 stray bytes before its end-of-image marker: its pixels intact, libjpeg warns."""
    return jpeg[:-2] + b"\0" * 100 + jpeg[-2:]


def cut(jpeg: bytes) -> bytes:
    """``jpeg`` with the middle third of its scan data gone (its end-of-image marker kept): its lower part is lost."""
    start = jpeg.index(b"\xff\xda")
    third = (len(jpeg) - start) // 3
    return jpeg[:start + third] + jpeg[start + 2 * third:]


def test_a_warning_reaches_the_caller_with_libjpegs_words_and_nothing_is_printed(capfd):
    warned: list[str] = []
    pixels = decoding.decode(padded(IMAGE), on_damage=warned.append)
    assert len(warned) == 1 and re.fullmatch(EXTRANEOUS, warned[0]), warned
    assert np.array_equal(pixels, PIXELS)  # the scan itself is intact
    assert decoding.decode(padded(IMAGE)) is not None  # no callback: decoded all the same
    assert capfd.readouterr().err == ""


def test_lost_scan_data_is_reported_and_filled_in_as_libjpeg_fills_it(capfd):
    data = cut(IMAGE)
    warned: list[str] = []
    pixels = decoding.decode(data, on_damage=warned.append)
    assert warned == ["Corrupt JPEG data: premature end of data segment"]
    assert pixels.shape == PIXELS.shape and not np.array_equal(pixels, PIXELS)
    assert np.array_equal(pixels[:8], PIXELS[:8])  # the first row of blocks came before the cut
    assert _jpeg.image(data, 1, 1, 0)[1:] == (96, 64, 3, 1, warned[0])
    assert capfd.readouterr().err == ""


def test_an_undamaged_jpeg_warns_nothing_and_decodes_as_opencv_does():
    warned: list[str] = []
    for flags, reduction in ((None, 1), (cv2.IMREAD_GRAYSCALE, 1), (cv2.IMREAD_REDUCED_COLOR_2, 2),
                             (cv2.IMREAD_REDUCED_GRAYSCALE_4, 4), (cv2.IMREAD_UNCHANGED, 1)):
        ours = decoding.decode(IMAGE, flags, on_damage=warned.append)
        theirs = cv2.imdecode(np.frombuffer(IMAGE, np.uint8), cv2.IMREAD_COLOR if flags is None else flags)
        assert np.array_equal(ours, theirs), (flags, reduction)
    assert warned == []
    _, width, height, channels, warnings, message = _jpeg.image(IMAGE, 2, 3, 0)
    assert (width, height, channels, warnings, message) == (48, 32, 3, 0, None)


def test_a_region_that_reads_the_damage_is_decoded_whole_and_reported():
    """The region decode refuses a JPEG libjpeg warns about within the rows it reads (the last row reads on to the
    end-of-image marker); the whole decode that follows names the damage. A region that stops above the damage reads
    none of it: its pixels are exact, and nothing is reported."""
    warned: list[str] = []
    data = padded(IMAGE)
    pixels = decoding.decode_channels(data, 3, True, 1, (8, 34, 40, 30), on_damage=warned.append)
    assert len(warned) == 1 and re.fullmatch(EXTRANEOUS, warned[0]), warned
    assert np.array_equal(pixels, PIXELS[..., ::-1])  # the whole image (the caller tells by its shape)
    assert _jpeg.decode(data, 1, 8, 34, 40, 30, 1, 0) is None
    above = decoding.decode_channels(data, 3, True, 1, (8, 4, 40, 30), on_damage=warned.append)
    assert np.array_equal(above, PIXELS[4:34, 8:48, ::-1]) and len(warned) == 1


def test_a_gray_jpeg_comes_out_as_stored():
    gray = cv2.imencode(".jpg", cv2.cvtColor(PIXELS, cv2.COLOR_BGR2GRAY))[1].tobytes()
    warned: list[str] = []
    assert decoding.decode(padded(gray), on_damage=warned.append).shape == (64, 96)
    assert len(warned) == 1 and re.fullmatch(EXTRANEOUS, warned[0]), warned


def test_a_jpeg_libjpeg_cannot_decode_is_no_image_and_says_why():
    data = bytearray(IMAGE)
    at = data.index(b"\xff\xc4")  # the first Huffman table: counts that add up to more codes than a table holds
    data[at + 5:at + 21] = b"\xff" * 16
    assert decoding.decode(bytes(data)) is None
    pixels, *_, message = _jpeg.image(bytes(data), 1, 1, 0)
    assert pixels is None and "Huffman" in message


def test_bad_arguments_are_value_errors():
    for reduction, mode in ((3, 1), (1, 4), (1, -1)):
        with pytest.raises(ValueError, match="bad reduction or mode"):
            _jpeg.image(IMAGE, reduction, mode)
    with pytest.raises(ValueError, match="more than max_pixels=100"):
        _jpeg.image(IMAGE, 1, 1, 100)
    assert _jpeg.image(IMAGE[:-2], 1, 1) is None  # no end-of-image marker: not this decoder's
