"""picpac.stream.processor on its own: a record's fields through decode -> settle -> augment -> output, on real
JPEGs and on PNGs of known pixels, and the batch targets of each task."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from picpac.errors import PicPacValueError, SampleError
from picpac.image.transforms import Sample
from picpac.stream.config import StreamConfig
from picpac.stream.processor import LazyRng, Processor, decode_seconds

IMAGENET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "imagenet-250"
TENCH = IMAGENET / "n01440764_tench.JPEG"  # 500 x 375, upright


def processor(**keys) -> Processor:
    return Processor.of(StreamConfig.from_dict(keys))


def png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def rng() -> LazyRng:
    return LazyRng(2016, 0, 0, 0)


@pytest.fixture
def tench() -> bytes:
    if not TENCH.is_file():
        pytest.skip(f"real data not found at {IMAGENET}")
    return TENCH.read_bytes()


# a 3 x 2 BGR image of known values: pixel (y, x) has B = 10 * (3 * y + x), G = B + 1, R = B + 2
KNOWN = (10 * np.arange(6, dtype=np.uint8).reshape(2, 3, 1) + np.arange(3, dtype=np.uint8)).astype(np.uint8)
KNOWN_RGB = KNOWN[:, :, ::-1]


# -- decode --------------------------------------------------------------------------------------------------
def test_a_jpeg_is_deferred_its_size_from_the_header(tench):
    p = Processor.of(StreamConfig.from_dict({"profile": True}))  # decodes on the clock decode_seconds reads
    decode_seconds()
    sample = p.decode({"image": tench}, 3.0, 7, "db.picpac")
    assert sample.size == (500, 375) and (sample.label, sample.record) == (3.0, 7)
    assert decode_seconds() == 0.0  # nothing decoded yet: the size came from the header
    want = cv2.imdecode(np.frombuffer(tench, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    assert np.array_equal(sample.image, want)
    assert decode_seconds() > 0.0
    gray = processor(channels=1).decode({"image": tench}, 0.0, 0, "db")
    assert gray.size == (500, 375)
    assert np.array_equal(gray.image, cv2.imdecode(np.frombuffer(tench, np.uint8), cv2.IMREAD_GRAYSCALE))
    bgr = processor(colorspace="BGR").decode({"image": tench}, 0.0, 0, "db")
    assert np.array_equal(bgr.image, want[:, :, ::-1])


def test_a_png_is_decoded_at_once_to_the_channels_asked(tmp_path):
    bgra = np.dstack([KNOWN, np.full((2, 3), 200, np.uint8)])
    data = png(bgra)
    p = Processor.of(StreamConfig.from_dict({"profile": True}))
    decode_seconds()
    rgb = p.decode({"image": data}, 0.0, 0, "db")
    assert decode_seconds() > 0.0  # decoded in decode(): no header to defer it on
    assert rgb.image.shape == (2, 3, 3) and np.array_equal(rgb.image, KNOWN_RGB)
    assert np.array_equal(processor(colorspace="BGR").decode({"image": data}, 0.0, 0, "db").image, KNOWN)
    stored = processor(channels=-1).decode({"image": data}, 0.0, 0, "db").image
    assert np.array_equal(stored, np.dstack([KNOWN_RGB, np.full((2, 3), 200, np.uint8)]))  # RGBA
    assert np.array_equal(processor(channels=-1, colorspace="BGR").decode({"image": data}, 0.0, 0, "db").image, bgra)
    gray = processor(channels=1).decode({"image": data}, 0.0, 0, "db").image
    assert gray.shape == (2, 3)
    assert np.array_equal(gray, cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE))
    one = png(KNOWN[:, :, 0])  # a grayscale PNG: 3 channels when asked, as stored (2-D) with -1
    assert np.array_equal(processor().decode({"image": one}, 0.0, 0, "db").image, np.repeat(KNOWN[:, :, :1], 3, 2))
    assert np.array_equal(processor(channels=-1).decode({"image": one}, 0.0, 0, "db").image, KNOWN[:, :, 0])


def test_the_image_field_by_name_or_number():
    fields = {"label_text": b"x", "pixels": png(KNOWN)}
    assert np.array_equal(processor(image_field="pixels").decode(fields, 0.0, 0, "db").image, KNOWN_RGB)
    assert np.array_equal(processor(image_field=1).decode(fields, 0.0, 0, "db").image, KNOWN_RGB)
    with pytest.raises(SampleError, match=r"^db: record 4 has no field 2 for image_field=2 \(its fields: "
                                          r"\['label_text', 'pixels'\]\)$"):
        processor(image_field=2).decode(fields, 0.0, 4, "db")


# -- settle ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keys, size", [
    (dict(resize_width=64, resize_height=48), (64, 48)),
    (dict(resize_width=100), (100, 75)),  # the other side keeps the aspect
    (dict(resize_height=30), (40, 30)),
    (dict(max_size=250), (250, 188)),
    (dict(min_size=750), (1000, 750)),
])
def test_settle_gives_the_exact_size(tench, keys, size):
    p = processor(**keys)
    settled = p.settle(p.decode({"image": tench}, 0.0, 0, "db"), rng())
    assert settled.size == size
    assert settled.image.shape == (size[1], size[0], 3)
    image, target, dense = p.output(settled)
    assert image.shape == (3, size[1], size[0]) and target is None and dense == ()


# -- output ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order, dtype", [("NCHW", "float32"), ("NHWC", "float32"), ("NCHW", "uint8"),
                                          ("NHWC", "uint8")])
def test_output_layout_and_type(order, dtype):
    p = processor(order=order, dtype=dtype)
    image, target, dense = p.sample({"image": png(KNOWN)}, 1.0, 0, "db", None, rng())
    assert image.dtype == np.dtype(dtype) and image.flags.c_contiguous and target is None and dense == ()
    want = KNOWN_RGB.transpose(2, 0, 1) if order == "NCHW" else KNOWN_RGB
    assert image.shape == want.shape and np.array_equal(image, want.astype(dtype))
    assert image[0, 1, 2] == (52 if order == "NCHW" else 10)  # R at (y=1, x=2) / B at (y=0, x=1)


def test_mean_and_std_per_output_channel():
    pixels = np.empty((1, 2, 3), np.uint8)
    pixels[:] = (80, 60, 50)  # B, G, R
    fields = {"image": png(pixels)}
    image, _, _ = processor(mean=[10, 20, 30], std=[2, 4, 5]).sample(fields, 0.0, 0, "db", None, rng())
    assert image.dtype == np.float32 and image.shape == (3, 1, 2)
    assert image[:, 0, 0].tolist() == [20.0, 10.0, 10.0]  # ((50-10)/2, (60-20)/4, (80-30)/5): R, G, B
    image, _, _ = processor(mean=[10, 20, 30], std=[2, 4, 5], colorspace="BGR").sample(fields, 0.0, 0, "db", None,
                                                                                         rng())
    assert image[:, 0, 0].tolist() == [35.0, 10.0, 4.0]  # ((80-10)/2, (60-20)/4, (50-30)/5): B, G, R
    image, _, _ = processor(mean=50, order="NHWC").sample(fields, 0.0, 0, "db", None, rng())
    assert image.shape == (1, 2, 3) and image[0, 1].tolist() == [0.0, 10.0, 30.0]


def test_value_range_0_1_with_and_without_mean_and_std():
    pixels = np.zeros((1, 3, 3), np.uint8)
    pixels[0, :, :] = [[0, 0, 0], [51, 51, 51], [255, 255, 255]]
    fields = {"image": png(pixels)}
    image, _, _ = processor(value_range="0-1").sample(fields, 0.0, 0, "db", None, rng())
    assert image.dtype == np.float32
    assert image[0, 0].tolist() == [0.0, np.float32(0.2), 1.0] and (image == image[:1]).all()
    image, _, _ = processor(value_range="0-1", mean=0.5, std=0.25).sample(fields, 0.0, 0, "db", None, rng())
    assert image[0, 0].tolist() == [-2.0, np.float32(-1.2), 2.0]  # torchvision's (x / 255 - mean) / std


def test_a_transform_sees_the_settled_sample_and_its_dense_targets_follow():
    seen = []

    def probe(sample: Sample, rng) -> Sample:
        seen.append((sample.size, sample.label, sample.record))
        sample.extra.setdefault("dense", {})["sum"] = np.array([int(sample.image.sum())], np.int64)
        return sample
    p = processor(resize_width=6, resize_height=4, transforms=[probe])
    image, target, dense = p.sample({"image": png(KNOWN)}, 5.0, 9, "db", None, rng())
    assert seen == [((6, 4), 5.0, 9)] and image.shape == (3, 4, 6) and target is None
    assert len(dense) == 1 and dense[0].tolist() == [int(image.sum())]


def test_a_settled_samples_random_steps_follow_the_records_rng():
    p = processor(perturb=True, pert_hflip=True, dtype="uint8", order="NHWC")
    flips = set()
    for record in range(16):
        settled = p.settle(p.decode({"image": png(KNOWN)}, 0.0, record, "db"), rng())
        image, _, _ = p.output(p.augment(settled, LazyRng(2016, 0, 0, record)))
        again, _, _ = p.output(p.augment(p.settle(p.decode({"image": png(KNOWN)}, 0.0, record, "db"), rng()),
                                         LazyRng(2016, 0, 0, record)))
        assert np.array_equal(image, again)  # the record's RNG decides
        flipped = np.array_equal(image, KNOWN_RGB[:, ::-1])
        assert flipped or np.array_equal(image, KNOWN_RGB)
        flips.add(flipped)
    assert flips == {True, False}


# -- targets ---------------------------------------------------------------------------------------------------------
def test_classify_labels_and_onehot_rows():
    labels = np.array([2.0, 0.0, 1.0, 2.0])
    records = [5, 6, 7, 8]
    none = [None] * 4
    dense = [()] * 4
    (out,) = processor().targets(none, labels, records, dense)
    assert out.dtype == np.float32 and out.tolist() == [2.0, 0.0, 1.0, 2.0]
    (out,) = processor(label_dtype="int64").targets(none, labels, records, dense)
    assert out.dtype == np.int64 and out.tolist() == [2, 0, 1, 2]
    (out,) = processor(onehot=3).targets(none, labels, records, dense)
    assert out.dtype == np.float32
    assert out.tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
    (out,) = processor(onehot=4, label_dtype="int32").targets(none, labels, records, dense)
    assert out.dtype == np.int32 and out.shape == (4, 4) and out.argmax(1).tolist() == [2, 0, 1, 2]
    assert out.sum() == 4


def test_dense_targets_are_stacked_and_tables_padded():
    dense = [(np.array([1, 2], np.int32), np.array([[1.0, 5.0]], np.float32)),
             (np.array([3, 4], np.int32), np.array([[2.0, 6.0], [3.0, 7.0]], np.float32))]
    labels, extra_a, extra_b = processor().targets([None, None], np.array([0.0, 1.0]), [0, 1], dense)
    assert extra_a.tolist() == [[1, 2], [3, 4]]
    assert extra_b.tolist() == [[[1, 5], [-1, 0]], [[2, 6], [3, 7]]]  # padded: label -1, zeros
    with pytest.raises(PicPacValueError, match="dense targets of shapes .* cannot be batched"):
        processor().targets([None, None], np.array([0.0, 1.0]), [0, 1],
                            [(np.zeros((1, 2)),), (np.zeros((1, 3)),)])


def shapes_json(*shapes: dict) -> bytes:
    return json.dumps({"shapes": list(shapes)}).encode()


def rect(x, y, w, h, label=1):
    return {"type": "rect", "label": label, "geometry": {"x": x, "y": y, "width": w, "height": h}}


def point(x, y, label=1):
    return {"type": "point", "label": label, "geometry": {"x": x, "y": y}}


def test_detect_boxes_are_clipped_to_the_image_and_small_ones_dropped():
    fields = {"image": png(np.zeros((50, 100, 3), np.uint8)),
              "annotation": shapes_json(rect(0.1, 0.2, 0.3, 0.4, 1),   # (10, 10) - (40, 30)
                                        rect(0.9, -0.2, 0.3, 0.5, 2),  # (90, -10) - (120, 15): clipped
                                        rect(0.5, 0.5, 0.005, 0.01, 3),  # 0.5 x 0.5 pixels: under min_box_area
                                        point(0.5, 0.5, 4),  # not a box
                                        rect(1.1, 0.1, 0.2, 0.2, 5))}  # outside: nothing left after clipping
    p = processor(task="detect")
    _, boxes, _ = p.sample(fields, 0.0, 3, "db", None, rng())
    assert boxes.dtype == np.float32
    np.testing.assert_allclose(boxes, [[1, 10, 10, 40, 30], [2, 90, 0, 100, 15]], atol=1e-4)
    _, small, _ = processor(task="detect", min_box_area=0).sample(fields, 0.0, 3, "db", None, rng())
    np.testing.assert_allclose(small, [[1, 10, 10, 40, 30], [2, 90, 0, 100, 15], [3, 50, 25, 50.5, 25.5]], atol=1e-4)
    _, large, _ = processor(task="detect", min_box_area=500).sample(fields, 0.0, 3, "db", None, rng())
    np.testing.assert_allclose(large, [[1, 10, 10, 40, 30]], atol=1e-4)  # 600 pixels kept, 250 dropped
    table, counts = p.targets([boxes, large], np.zeros(2), [3, 4], [(), ()])
    assert counts.tolist() == [2, 1] and table.shape == (2, 2, 5)
    np.testing.assert_allclose(table[1], [[1, 10, 10, 40, 30], [-1, 0, 0, 0, 0]], atol=1e-4)
    table, counts = processor(task="detect", max_boxes=1).targets([boxes, large], np.zeros(2), [3, 4], [(), ()])
    assert counts.tolist() == [1, 1] and table.shape == (2, 1, 5)


def test_keypoints_inside_the_image_only():
    fields = {"image": png(np.zeros((50, 100, 3), np.uint8)),
              "annotation": shapes_json(point(0.5, 0.5, 1), point(1.2, 0.5, 2), point(-0.01, 0.5, 3),
                                        point(0.0, 0.0, 4), point(1.0, 0.5, 5), point(0.99, 0.98, 6),
                                        rect(0.1, 0.1, 0.2, 0.2, 7))}
    p = processor(task="keypoints")
    _, points, _ = p.sample(fields, 0.0, 3, "db", None, rng())
    assert points.dtype == np.float32
    np.testing.assert_allclose(points, [[1, 50, 25], [4, 0, 0], [6, 99, 49]], atol=1e-4)  # x == width is outside
    table, counts = p.targets([points, points[:1]], np.zeros(2), [3, 4], [(), ()])
    assert table.shape == (2, 3, 3) and counts.tolist() == [3, 1] and table[1, 1:, 0].tolist() == [-1, -1]


def test_segment_masks_plain_and_onehot():
    mask = np.array([[0, 1, 2], [2, 1, 0]], np.uint8)
    fields = {"image": png(KNOWN), "mask": png(mask)}
    p = processor(annotate="image", task="segment")
    _, target, _ = p.sample(fields, 0.0, 1, "db", None, rng())
    assert np.array_equal(target, mask)
    (masks,) = p.targets([target, target[::-1]], np.zeros(2), [1, 2], [(), ()])
    assert masks.dtype == np.float32 and masks.shape == (2, 1, 2, 3)
    assert masks[0, 0].tolist() == mask.tolist() and masks[1, 0].tolist() == mask[::-1].tolist()
    (masks,) = processor(annotate="image", order="NHWC").targets([target], np.zeros(1), [1], [()])
    assert masks.shape == (1, 2, 3, 1)
    onehot = processor(annotate="image", onehot=3)
    (masks,) = onehot.targets([target], np.zeros(1), [1], [()])
    assert masks.dtype == np.float32 and masks.shape == (1, 3, 2, 3)
    assert [masks[0, k].tolist() for k in range(3)] == [(mask == k).astype(float).tolist() for k in range(3)]
    (masks,) = processor(annotate="image", onehot=3, order="NHWC").targets([target], np.zeros(1), [1], [()])
    assert masks.shape == (1, 2, 3, 3) and masks[0].argmax(2).tolist() == mask.tolist()
    with pytest.raises(PicPacValueError, match=r"^record 42: mask value 2 is not a class id in \[0, onehot=2\)$"):
        processor(annotate="image", onehot=2).targets([mask == 1, mask], np.zeros(2), [41, 42], [(), ()])


def test_segment_from_shapes_rasterized_with_the_labels():
    fields = {"image": png(np.zeros((4, 8, 3), np.uint8)), "annotation": shapes_json(rect(0.5, 0, 0.5, 1, 3))}
    _, mask, _ = processor(task="segment").sample(fields, 0.0, 1, "db", None, rng())
    assert mask.shape == (4, 8) and mask.dtype == np.uint8
    assert (mask[:, :4] == 0).all() and (mask[:, 5:] == 3).all()


# -- errors ------------------------------------------------------------------------------------------------------------
def test_a_missing_image_field_names_the_record_and_the_fields():
    with pytest.raises(SampleError, match=r"^train\.picpac: record 12 has no 'image' field \(its fields: "
                                          r"\['img', 'label'\]\)$") as info:
        processor().sample({"img": png(KNOWN), "label": b"1"}, 0.0, 12, "train.picpac", None, rng())
    assert (info.value.path, info.value.index) == ("train.picpac", 12)


def test_an_image_over_max_pixels_is_a_sample_error(tench):
    with pytest.raises(SampleError, match=r"^db: record 3 has an image of 500x375 = 187,500 pixels, over the limit "
                                          r"max_pixels=100000 .*raise the config key max_pixels") as info:
        processor(max_pixels=100_000).decode({"image": tench}, 0.0, 3, "db")
    assert info.value.index == 3
    with pytest.raises(SampleError, match=r"^db: record 4 has an image of 3x2 = 6 pixels, over the limit max_pixels=5"):
        processor(max_pixels=5).sample({"image": png(KNOWN)}, 0.0, 4, "db", None, rng())
    assert processor(max_pixels=6).decode({"image": png(KNOWN)}, 0.0, 4, "db").size == (3, 2)


def test_an_undecodable_image_and_annotation_name_the_record():
    with pytest.raises(SampleError, match=r"^db: record 5 cannot decode its image$"):
        processor().decode({"image": b"not an image"}, 0.0, 5, "db")
    with pytest.raises(SampleError, match=r"^db: record 6 has no 'annotation' field for annotate='json'$"):
        processor(task="detect").decode({"image": png(KNOWN)}, 0.0, 6, "db")
    with pytest.raises(SampleError, match=r"^db: record 7 has a 3x1 mask for a 3x2 image$"):
        processor(annotate="image").decode({"image": png(KNOWN), "mask": png(KNOWN[:1, :, 0])}, 0.0, 7, "db")


def test_a_transform_error_gets_a_note_naming_the_record():
    def boom(sample: Sample, rng) -> Sample:
        raise ZeroDivisionError("bad")
    with pytest.raises(ZeroDivisionError, match="bad") as info:
        processor(transforms=[boom]).sample({"image": png(KNOWN)}, 0.0, 13, "db", None, rng())
    assert info.value.__notes__[-1].endswith("on record 13")


def test_a_segment_sample_that_lost_its_mask_names_the_file():
    def drop_mask(sample: Sample, rng) -> Sample:
        sample.mask = None
        return sample
    fields = {"image": png(KNOWN), "mask": png(KNOWN[:, :, 0])}
    with pytest.raises(SampleError, match=r"^train\.picpac: record 3 has no mask after its transforms"):
        processor(annotate="image", transforms=[drop_mask]).sample(fields, 0.0, 3, "train.picpac", None, rng())
