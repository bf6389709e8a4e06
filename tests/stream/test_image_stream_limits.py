"""The pixel limit in ImageStream and ImageLoader: a decompression bomb is a SampleError naming the record
(skipped with skip_errors), refused from its header on every decode path."""
from __future__ import annotations

import time

import cv2
import numpy as np
import pytest

import picpac

from helpers import jpeg_bomb, make_db, png, png_bomb

BOMB = 3


def bomb_db(path, bomb: bytes, n: int = 6):
    """n 8x6 PNGs labelled with their index, record BOMB replaced by ``bomb``."""
    with picpac.Writer(path) as writer:
        for i in range(n):
            writer.append(image=bomb if i == BOMB else png(np.full((6, 8, 3), i, np.uint8)), label=float(i))
    return path


PATHS = {
    "deferred": {},                                          # the JPEG header path, decoded when first read
    "reduced": {"resize_width": 4, "resize_height": 3},      # libjpeg's 1/4 scale: 800 MB before the limit
    "region": {"crop_width": 4, "crop_height": 3},           # the region decoder
    "whole": {"reduced_decode": False},                      # no deferral: decode_channels
    "as-stored": {"channels": -1},
}


@pytest.mark.parametrize("kind", ["jpeg", "png"])
@pytest.mark.parametrize("path", PATHS)
def test_a_bomb_is_a_sample_error_naming_the_record(tmp_path, kind, path):
    db = bomb_db(tmp_path / "db.picpac", jpeg_bomb() if kind == "jpeg" else png_bomb())
    start = time.perf_counter()
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=1, threads=1, **PATHS[path]) as s:
        labels = [float(next(s)[1][0]) for _ in range(BOMB)]
        with pytest.raises(picpac.SampleError, match=r"db.picpac: record 3 has an image of 65500x65500 = "
                                                     r"4,290,250,000 pixels, over the limit max_pixels=268435456"
                                                     r".*raise the config key max_pixels \(0: no limit\)") as info:
            next(s)
    assert labels == [0, 1, 2] and info.value.index == BOMB
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_skip_errors_skips_and_counts_a_bomb(tmp_path, backend):
    db = bomb_db(tmp_path / "db.picpac", jpeg_bomb())
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=2, skip_errors=True, backend=backend,
                            resize_width=4, resize_height=3) as s:
        labels = [float(v) for batch in s for v in batch[1]]
        stats = s.stats()
    assert labels == [0, 1, 2, 4, 5]
    assert stats["skipped"] == 1 and "record 3 has an image of 65500x65500" in stats["skipped_records"][0]


def test_the_max_pixels_key(tmp_path):
    db = make_db(tmp_path / "db.picpac", 4)  # 8x6 images: 48 pixels
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, max_pixels=48) as s:
        assert next(s)[0].shape == (4, 3, 6, 8)
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, max_pixels=0) as s:
        assert next(s)[0].shape == (4, 3, 6, 8)
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=4, max_pixels=47) as s:
        with pytest.raises(picpac.SampleError, match=r"record 0 has an image of 8x6 = 48 pixels"):
            next(s)
    with pytest.raises(picpac.PicPacValueError, match="'max_pixels' must be >= 0"):
        picpac.ImageStream(db, max_pixels=-1)
    with pytest.raises(picpac.PicPacTypeError, match="'max_pixels' must be an int"):
        picpac.ImageStream(db, max_pixels=2.5)


def test_a_mask_bomb(tmp_path):
    with picpac.Writer(tmp_path / "db.picpac") as writer:
        writer.append(image=png(np.zeros((6, 8, 3), np.uint8)), mask=png_bomb(), label=0.0)
    with picpac.ImageStream(tmp_path / "db.picpac", loop=False, annotate="image") as s:
        with pytest.raises(picpac.SampleError, match="record 0 has an image of 65500x65500"):
            next(s)


def test_image_loader_refuses_a_bomb(tmp_path):
    loader = picpac.ImageLoader(resize_width=4, resize_height=3)
    (tmp_path / "bomb.jpg").write_bytes(jpeg_bomb())
    with pytest.raises(picpac.ImageTooLargeError, match=r"^image bytes: image of 65500x65500 .*max_pixels"):
        loader.load_binary(jpeg_bomb())
    with pytest.raises(picpac.ImageTooLargeError, match=r"bomb.jpg: image of 65500x65500"):
        loader.load_path(tmp_path / "bomb.jpg")
    small = png(np.zeros((6, 8, 3), np.uint8))
    with pytest.raises(picpac.ImageTooLargeError, match="8x6"):
        picpac.ImageLoader(max_pixels=47).load_binary(small)
    assert picpac.ImageLoader(max_pixels=0).load_binary(small).shape == (1, 3, 6, 8)
    with pytest.raises(picpac.PicPacValueError, match="cannot decode"):
        loader.load_binary(b"junk")


def extreme_db(path):
    """Valid JPEGs of extreme aspect ratios (records 0 and 2) between ordinary ones, labelled by index."""
    sizes = [(3000, 2), (300, 400), (16, 40960), (120, 90)]
    with picpac.Writer(path) as writer:
        for i, (h, w) in enumerate(sizes):
            image = np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
            writer.append(image=cv2.imencode(".jpg", image)[1].tobytes(), label=float(i))
    return path


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("keys, skipped", [({"resize_shorter": 256}, [0, 2]), ({"min_size": 256}, [0, 2]),
                                           ({"resize_width": 224}, [0]), ({"resize_height": 224}, [2])])
def test_an_output_past_the_side_limit_is_a_sample_error_that_skip_errors_skips(tmp_path, fused, keys, skipped):
    """A 2x3000 JPEG resized to a shorter side of 256 would be 256x384000 (1.1 GiB of float32): refused before any
    pixel is allocated, on the fused path and the Python path alike; a 40960x16 one resized to 224 wide streams."""
    db = extreme_db(tmp_path / "extreme.picpac")
    config = {"batch": 1, "loop": False, "shuffle": False, "threads": 1, "fused": fused, **keys}
    with picpac.ImageStream(db, skip_errors=True, **config) as stream:
        labels = [int(batch[1][0]) for batch in stream]
        stats = stream.stats()
    assert labels == [i for i in range(4) if i not in skipped] and stats["skipped"] == len(skipped)
    with picpac.ImageStream(db, **config) as stream:
        with pytest.raises(picpac.SampleError, match=rf"record {skipped[0]} would become \d+x\d+ .*sides of 1 to 32766"):
            list(stream)
