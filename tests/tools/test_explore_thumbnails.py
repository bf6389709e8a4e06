"""picpac.tools.explore.thumbnails: the bounded LRU cache, which field is the picture, pictures of encoded images
and of arrays of any dtype, the refusals (NoImage, a decompression bomb), thumbnails, annotations drawn over the
record page's image, and sizes probed without decoding."""
from __future__ import annotations

import json
import threading

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import ImageTooLargeError, PicPacError
from picpac.tools.drawing import PALETTE
from picpac.tools.explore.thumbnails import (MAX_PIXELS, THUMB_SIDE, VIEW_SIDE, LRUBytes, NoImage, annotated,
                                             image_field, probe_size, record_image, thumbnail)

from helpers import jpeg_bomb, png

RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 256, (30, 40, 3), np.uint8)  # BGR, 40 wide


def decoded(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


def write(path, *records: dict, metadata=None) -> picpac.Reader:
    with picpac.Writer(path, metadata=metadata) as w:
        for fields in records:
            label = fields.pop("label", 0)
            w.append(fields, label=label)
    return picpac.Reader(path)


# -- the cache ----------------------------------------------------------------------------------------------
def test_lru_drops_the_least_recently_used_first():
    lru = LRUBytes(limit=12)
    for key in "abc":
        lru.put(key, b"1234")
    assert lru.get("a") == b"1234"  # a is now the most recent
    lru.put("d", b"1234")
    assert (lru.get("b"), lru.get("a"), lru.get("c"), lru.get("d")) == (None, b"1234", b"1234", b"1234")
    assert len(lru) == 3 and lru.size == 12


def test_lru_replacing_a_key_counts_its_new_size_and_refuses_what_exceeds_the_limit():
    lru = LRUBytes(limit=10)
    lru.put("a", b"123456")
    lru.put("a", b"12")
    assert lru.size == 2 and len(lru) == 1
    lru.put("big", b"x" * 11)
    assert lru.get("big") is None and lru.size == 2
    lru.put("b", b"x" * 9)  # 11 in all: a goes
    assert lru.get("a") is None and lru.size == 9


def test_lru_under_threads_keeps_its_size_true():
    lru = LRUBytes(limit=1000)

    def work(t: int) -> None:
        for k in range(500):
            lru.put((t, k % 37), bytes(k % 50))
            lru.get((t, (k * 7) % 37))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lru.size == sum(len(v) for v in lru._items.values()) <= 1000


# -- which field, which picture -----------------------------------------------------------------------------
def test_image_field_is_image_or_else_the_first(tmp_path):
    assert image_field(write(tmp_path / "a", {"mask": b"m", "image": b"i"})) == "image"
    assert image_field(write(tmp_path / "b", {"photo": b"p", "mask": b"m"})) == "photo"
    assert image_field(write(tmp_path / "c")) is None


def test_record_image_decodes_an_encoded_image_as_bgr(tmp_path):
    gray = RNG.integers(0, 256, (30, 40), np.uint8)
    reader = write(tmp_path / "db", {"image": png(PIXELS)}, {"image": png(gray)})
    assert np.array_equal(record_image(reader, 0), PIXELS)
    assert np.array_equal(record_image(reader, 1), cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR))


@pytest.mark.parametrize("shape", [(6, 5, 3), (6, 5, 4), (6, 5), (6, 5, 1)])
def test_arrays_are_shown_as_rgb(tmp_path, shape):
    arrays = RNG.integers(0, 256, (2, *shape), np.uint8)
    picpac.write_arrays(tmp_path / "db", arrays)
    got = record_image(picpac.Reader(tmp_path / "db"), 1)
    a = arrays[1]
    if a.ndim == 3 and a.shape[2] == 3:
        want = a[:, :, ::-1]
    elif a.ndim == 3 and a.shape[2] == 4:
        want = a[:, :, 2::-1]
    else:
        want = np.repeat(a.reshape(6, 5, 1), 3, axis=2)
    assert got.shape == (6, 5, 3) and got.dtype == np.uint8 and np.array_equal(got, want)


def test_arrays_of_other_dtypes_are_stretched_to_0_255(tmp_path):
    arrays = np.array([[[-1.0, 0.0], [1.0, 3.0]], [[2.0, 2.0], [2.0, 2.0]]], np.float32)
    picpac.write_arrays(tmp_path / "db", arrays)
    reader = picpac.Reader(tmp_path / "db")
    assert record_image(reader, 0)[:, :, 0].tolist() == [[0, 63], [127, 255]]
    assert not record_image(reader, 1).any()  # one value: black


def test_an_array_that_is_no_image_is_named(tmp_path):
    picpac.write_arrays(tmp_path / "db", np.zeros((1, 4, 4, 2), np.uint8))
    with pytest.raises(NoImage, match=r"^record 0: an array of shape \(4, 4, 2\) is no image$"):
        record_image(picpac.Reader(tmp_path / "db"), 0)


def test_records_without_a_picture_are_no_image(tmp_path):
    reader = write(tmp_path / "db", {"image": b"not an image"}, {"other": png(PIXELS)})
    with pytest.raises(NoImage, match=r"^record 0: field 'image' holds no image picpac can decode$"):
        record_image(reader, 0)
    with pytest.raises(NoImage, match=r"^record 1 has no 'image' field$"):
        record_image(reader, 1)
    assert issubclass(NoImage, PicPacError)


def test_a_decompression_bomb_is_refused_not_decoded(tmp_path):
    reader = write(tmp_path / "db", {"image": jpeg_bomb(9000, 9000)})
    assert 9000 * 9000 > MAX_PIXELS
    with pytest.raises(ImageTooLargeError, match="9000x9000"):
        record_image(reader, 0)


# -- thumbnails and the record page's image -----------------------------------------------------------------
def test_thumbnail_is_a_small_jpeg_kept_in_the_cache(tmp_path):
    big = cv2.resize(PIXELS, (400, 300), interpolation=cv2.INTER_NEAREST)
    reader = write(tmp_path / "db", {"image": png(big)}, {"image": png(PIXELS)})
    cache = LRUBytes()
    data = thumbnail(reader, 0, cache)
    assert data[:2] == b"\xff\xd8" and decoded(data).shape == (120, THUMB_SIDE, 3)
    assert cache.get(("thumb", id(reader), 0)) == data
    assert thumbnail(reader, 0, cache) is data  # from the cache
    assert decoded(thumbnail(reader, 1, cache)).shape == (30, 40, 3)  # a small image keeps its size


def test_the_record_image_is_shrunk_to_the_view_side(tmp_path):
    reader = write(tmp_path / "db", {"image": png(np.zeros((600, 2048, 3), np.uint8))})
    assert decoded(annotated(reader, 0)).shape == (300, VIEW_SIDE, 3)


def rect(x, y, w, h, label=1) -> dict:
    return {"type": "rect", "geometry": {"x": x, "y": y, "width": w, "height": h}, "label": label}


def test_shapes_are_outlined_in_their_labels_colour_with_their_class(tmp_path):
    black = np.zeros((100, 200, 3), np.uint8)
    shapes = {"shapes": [rect(0.1, 0.2, 0.3, 0.5, label=1), rect(0.6, 0.2, 0.3, 0.5, label=13)]}
    reader = write(tmp_path / "db", {"image": png(black), "annotation": json.dumps(shapes).encode()},
                   metadata={"classes": ["a", "b"], "source": "coco instances.json"})
    img = decoded(annotated(reader, 0))
    for (x1, x2), label in (((20, 80), 1), ((120, 180), 13)):  # the rect covers pixels x1 .. x2 - 1, y 20 .. 69
        on = list(PALETTE[label % len(PALETTE)])
        assert img[25:69, x1].tolist() == [on] * 44 and img[25:69, x2 - 1].tolist() == [on] * 44
        assert img[69, x1:x2].tolist() == [on] * (x2 - x1)
        assert not img[22:69, x1 + 1:x2 - 1].any()  # an outline, not filled
        assert img[8:18, x1:x1 + 12].any()  # the caption above it: "1 b", "13"
    assert not img[70:].any()


def test_a_point_is_a_dot(tmp_path):
    black = np.zeros((100, 100, 3), np.uint8)
    point = {"type": "point", "geometry": {"x": 0.5, "y": 0.5}, "label": 2}
    reader = write(tmp_path / "db", {"image": png(black), "annotation": json.dumps({"shapes": [point]}).encode()})
    img = decoded(annotated(reader, 0))
    assert img[50, 48].tolist() == list(PALETTE[2]) and img[50, 52].tolist() == list(PALETTE[2])
    assert not img[60:].any() and not img[:, 60:].any()


@pytest.mark.parametrize("field", ["annotation", "mask"])
def test_a_mask_is_blended_half_and_half_with_its_colours(tmp_path, field):
    """In the field 'annotation', or 'mask' (the record page draws what picpac dump and the augmentation page draw)."""
    image = np.full((20, 30, 3), 100, np.uint8)
    mask = np.zeros((10, 15), np.uint8)
    mask[2:5, 3:9], mask[6:9, 1:4] = 1, 2
    reader = write(tmp_path / "db", {"image": png(image), field: png(mask)})
    img = decoded(annotated(reader, 0))
    big = cv2.resize(mask, (30, 20), interpolation=cv2.INTER_NEAREST)
    for value in (1, 2):
        want = np.rint((100 + np.array(PALETTE[value])) / 2).astype(np.uint8).tolist()
        assert np.unique(img[big == value], axis=0).tolist() == [want]
    assert np.all(img[big == 0] == 100)


@pytest.mark.parametrize("annotation", [b'{"shapes": "nope"}', b'{"shapes": [{"type": "point", "geometry": {"x": 0.5, '
                                        b'"y": 0.5}, "label": NaN}]}', b"neither JSON nor an image", jpeg_bomb(9000, 9000)],
                         ids=["bad-json", "nan-label", "bytes", "bomb"])
def test_an_annotation_that_cannot_be_drawn_leaves_the_image(tmp_path, annotation):
    reader = write(tmp_path / "db", {"image": png(PIXELS), "annotation": annotation})
    assert np.array_equal(decoded(annotated(reader, 0)), PIXELS)


# -- sizes ---------------------------------------------------------------------------------------------------
def test_probe_size_reads_headers_and_array_shapes(tmp_path):
    reader = write(tmp_path / "db", {"image": png(PIXELS)}, {"image": b"junk"}, {"other": b"x"})
    assert [probe_size(reader, i) for i in range(3)] == [(40, 30), None, None]
    picpac.write_arrays(tmp_path / "arrays", np.zeros((1, 7, 9), np.uint8))
    assert probe_size(picpac.Reader(tmp_path / "arrays"), 0) == (9, 7)
    empty = tmp_path / "empty"
    picpac.Writer(empty).close()
    assert probe_size(picpac.Reader(empty), 0) is None
