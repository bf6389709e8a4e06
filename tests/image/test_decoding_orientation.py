"""One reading of EXIF orientation (picpac/image/decoding.py): picpac's header parser decides, OpenCV is told to
ignore it, and picpac turns the pixels itself, so every path (fused or not, whatever the config) shows a JPEG the
same way, whatever OpenCV would have read."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

import picpac
from picpac.image import decoding

from helpers import smooth_jpeg
from image_helpers import after_frame, exif, with_segment

IMAGE = smooth_jpeg(96, 64)
PIXELS = cv2.imdecode(np.frombuffer(IMAGE, np.uint8), cv2.IMREAD_COLOR)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_orientation_turns_the_pixels_as_viewers_and_opencv_do(orientation):
    data = with_segment(IMAGE, exif(orientation))
    assert np.array_equal(decoding.decode(data), cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
    assert decoding.decode(data).shape[:2] == decoding.jpeg_header(data)[1::-1]  # (height, width) as the header says
    assert np.array_equal(decoding.decode(data, cv2.IMREAD_UNCHANGED), PIXELS)  # as stored


@pytest.mark.parametrize("name, data, turned", [
    ("exif after the frame header", after_frame(IMAGE, exif(3)), PIXELS[::-1, ::-1]),
    ("two exif segments, 3 then 1", with_segment(with_segment(IMAGE, exif(1)), exif(3)), PIXELS[::-1, ::-1]),
    ("two exif segments, 1 then 3", with_segment(with_segment(IMAGE, exif(3)), exif(1)), PIXELS),
    ("exif 6 after the frame header", after_frame(IMAGE, exif(6)), np.ascontiguousarray(PIXELS.swapaxes(0, 1)[:, ::-1])),
])
def test_every_path_shows_a_record_the_way_the_header_says(tmp_path, name, data, turned):
    """decode, the fused path and the Python path, with and without a resize: the same orientation."""
    assert np.array_equal(decoding.decode(data), turned), name
    db = tmp_path / "one.picpac"
    with picpac.Writer(db) as w:
        w.append(image=data, label=0)
    height, width = turned.shape[:2]
    for keys in ({}, {"resize_width": width, "resize_height": height}):
        images = []
        for fused in (True, False):
            with picpac.ImageStream(db, batch=1, loop=False, dtype="uint8", order="NHWC", colorspace="BGR",
                                    fused=fused, **keys) as stream:
                images.append(next(stream)[0][0])
        assert np.array_equal(images[0], images[1]) and np.array_equal(images[0], turned), (name, keys)
