"""Annotations through ImageStream and ImageLoader: masks, boxes and keypoints follow the image."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

import picpac
from picpac.ingest import import_dataset
from picpac.image.shapes import Shapes

W, H = 64, 48


def square_record(i: int) -> tuple[bytes, bytes, bytes, tuple[int, int, int, int]]:
    """A lossless image with a white square, its rect + keypoint annotation, its mask, and the square."""
    x0, y0 = 4 + 3 * (i % 5), 6 + 2 * (i % 4)
    x1, y1 = x0 + 20 + i % 7, y0 + 14 + i % 5
    pixels = np.zeros((H, W, 3), np.uint8)
    pixels[y0:y1, x0:x1] = 255
    mask = np.zeros((H, W), np.uint8)
    mask[y0:y1, x0:x1] = 1 + i % 3
    doc = {"shapes": [
        {"type": "rect", "geometry": {"x": x0 / W, "y": y0 / H, "width": (x1 - x0) / W, "height": (y1 - y0) / H},
         "label": 1 + i % 3},
        {"type": "point", "geometry": {"x": (x0 + 0.5) / W, "y": (y0 + 0.5) / H}, "label": 7},
    ]}
    return (cv2.imencode(".png", pixels)[1].tobytes(), json.dumps(doc).encode(),
            cv2.imencode(".png", mask)[1].tobytes(), (x0, y0, x1, y1))


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "squares.picpac"
    with picpac.Writer(path) as w:
        for i in range(12):
            image, annotation, mask, _ = square_record(i)
            w.append(image=image, annotation=annotation, mask=mask, label=i % 3)
    return path


def stream(db, **config):
    base = dict(loop=False, shuffle=False, batch=12, dtype="uint8", order="NHWC", threads=2)
    return picpac.ImageStream(db, **{**base, **config})


def extent(array: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(array)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


def test_segmentation_masks_from_shapes_are_exact(db):
    with stream(db, annotate="json") as s:
        images, masks, pad = next(s)
    assert images.shape == (12, H, W, 3) and masks.shape == (12, H, W, 1) and masks.dtype == np.float32
    for i in range(12):
        x0, y0, x1, y1 = square_record(i)[3]
        expected = np.zeros((H, W), np.float32)
        expected[y0:y1, x0:x1] = 1 + i % 3
        got = masks[i, :, :, 0].copy()
        corner = (slice(y0 - 3, y0 + 4), slice(x0 - 3, x0 + 4))
        assert (got[corner][got[corner] != expected[corner]] == 7).all()  # the keypoint's disc, drawn last
        got[corner] = expected[corner] = 0
        assert (got == expected).all()  # the rect's pixels exactly


def test_onehot_masks_and_nchw(db):
    with stream(db, annotate="image", onehot=4, order="NCHW", dtype="float32") as s:
        images, masks, _ = next(s)
    assert images.shape == (12, 3, H, W) and masks.shape == (12, 4, H, W)
    assert (masks.sum(1) == 1).all()
    for i in range(12):
        x0, y0, x1, y1 = square_record(i)[3]
        assert (masks[i, 1 + i % 3, y0:y1, x0:x1] == 1).all() and masks[i, 0, y0:y1, x0:x1].sum() == 0


@pytest.mark.parametrize("annotate", ["json", "image"])
def test_masks_follow_random_geometry(db, annotate):
    config = dict(annotate=annotate, perturb=True, pert_angle=25, pert_min_scale=0.8, pert_max_scale=1.2,
                  pert_hflip=True, pert_vflip=True, seed=3, loop=True)
    allowed = {0, 1, 2, 3} | ({7} if annotate == "json" else set())  # 7: the keypoint's disc
    with stream(db, **config) as s:
        for _ in range(3):
            images, masks, _ = next(s)
            for image, mask in zip(images, masks):
                inside, labelled = image[:, :, 0] > 127, mask[:, :, 0] > 0
                assert (inside != labelled).sum() <= 0.1 * inside.sum() + 30  # only edge pixels may differ
                assert set(np.unique(mask)) <= allowed  # nearest neighbour: no blended class ids


def test_detection_boxes_and_counts(db):
    with stream(db, task="detect") as s:
        images, boxes, counts, pad = next(s)
    assert boxes.shape == (12, 1, 5) and counts.tolist() == [1] * 12 and pad == 0
    for i in range(12):
        x0, y0, x1, y1 = square_record(i)[3]
        assert boxes[i, 0].tolist() == [1 + i % 3, x0, y0, x1, y1]
    with stream(db, task="detect", perturb=True, pert_angle=30, pert_hflip=True, seed=5) as s:
        images, boxes, counts, _ = next(s)
    for image, box in zip(images, boxes[:, 0]):
        x1, y1, x2, y2 = extent(image[:, :, 0] > 127)
        assert np.allclose(box[1:], np.clip([x1, y1, x2, y2], 0, [W, H, W, H]), atol=1.5)
    with stream(db, task="detect", max_boxes=3, crop_width=10, crop_height=10) as s:
        _, boxes, counts, _ = next(s)
    assert boxes.shape == (12, 3, 5) and (boxes[:, 1:, 0] == -1).all()
    assert (counts <= 1).all() and (boxes[:, 0, 3:] <= 10).all()  # clipped to the 10x10 output


def test_keypoints(db):
    with stream(db, task="keypoints", resize_width=32, resize_height=24) as s:
        _, points, counts, _ = next(s)
    assert points.shape == (12, 1, 3) and counts.tolist() == [1] * 12
    for i in range(12):
        x0, y0, _, _ = square_record(i)[3]
        assert np.allclose(points[i, 0], [7, (x0 + 0.5) / 2, (y0 + 0.5) / 2])


def test_v2_transform_dicts_and_perturb_false(db):
    config = dict(annotate="json", transforms=[{"type": "augment.flip", "horizontal": True, "vertical": False},
                                               {"type": "augment.rotate", "range": 20},
                                               {"type": "clip", "round": 16}])
    with stream(db, **config, seed=1) as s:
        first = [b[0] for b in s]
        second = [b[0] for b in s]  # reshuffle=True: a new epoch, new draws
    assert first[0].shape == (12, 48, 64, 3)
    assert any((a != b).any() for a, b in zip(first, second))
    with stream(db, **config, perturb=False) as s:
        fixed = [b for b in s]
        again = [b for b in s]
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(fixed, again))
    with stream(db) as plain:
        assert all((a[0] == b[0]).all() for a, b in zip(fixed, plain))  # centre versions: identity here


def test_annotated_batches_identical_for_any_thread_count(db):
    def run(threads):
        with picpac.ImageStream(db, batch=4, threads=threads, task="detect", perturb=True, pert_angle=30,
                                pert_hflip=True, crop_width=40, crop_height=40, seed=9) as s:
            return [next(s) for _ in range(6)]
    one, four = run(1), run(4)
    assert all(all((x == y).all() for x, y in zip(a[:3], b[:3])) for a, b in zip(one, four))


def test_missing_or_bad_annotations_name_the_record(tmp_path):
    path = tmp_path / "db.picpac"
    image = cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    with picpac.Writer(path) as w:
        w.append(image=image, annotation=b'{"shapes": []}')
        w.append(image=image)
        w.append(image=image, annotation=b'{"shapes": [{"type": "star"}]}')
    with picpac.ImageStream(path, loop=False, shuffle=False, task="detect", batch=1) as s:
        assert next(s)[2].tolist() == [0]
        with pytest.raises(picpac.SampleError, match="record 1 has no 'annotation' field"):
            next(s)
    with picpac.ImageStream(path, loop=False, shuffle=False, task="detect", batch=1, skip_errors=True) as s:
        assert len(list(s)) == 1 and s.stats()["skipped"] == 2


def test_image_loader_matches_validation_stream(db, tmp_path):
    config = dict(resize_width=32, resize_height=24, crop_width=20, crop_height=20, mean=[1, 2, 3],
                  transforms=[{"type": "augment.rotate", "range": 30}])
    loader = picpac.ImageLoader(config, v2=False)  # (v2's transform dicts: the layout of a stream given keywords)
    with picpac.ImageStream(db, loop=False, shuffle=False, batch=1, perturb=False, **config) as s:
        expected = next(s)[0]
    image = square_record(0)[0]
    (tmp_path / "x.png").write_bytes(image)
    assert loader.load_binary(image).shape == (1, 3, 20, 20)
    assert (loader.load_binary(image) == expected).all() and (loader.load_path(tmp_path / "x.png") == expected).all()
    with pytest.raises(picpac.PicPacValueError, match="cannot decode"):
        loader.load_binary(b"junk")
    with pytest.raises(picpac.MissingPathError, match="nope.png"):
        loader.load_path(tmp_path / "nope.png")


def test_yolo_seg_polygons_cover_their_objects(shared_data, tmp_path):
    """Each YOLO-seg polygon, rasterized with no transform, against the panoptic mask of its object."""
    coco = shared_data / "coco128-train"
    db = tmp_path / "seg.picpac"
    import_dataset(coco / "images", db, format="yolo-seg", labels=coco / "instance-polygons")
    panoptic = json.loads((coco / "panoptic" / "panoptic_train2017.json").read_text())
    segments = {a["file_name"].rsplit(".", 1)[0]: a["segments_info"] for a in panoptic["annotations"]}
    ious = []
    with picpac.Reader(db) as r:
        for rec in r:
            stem = rec.meta["path"].rsplit(".", 1)[0]
            shapes = json.loads(bytes(rec["annotation"]))["shapes"]
            if not shapes or stem not in segments:
                continue
            rgb = cv2.imread(str(coco / "panoptic" / "masks" / f"{stem}.png"))[:, :, ::-1].astype(np.int64)
            ids = rgb[:, :, 0] + 256 * rgb[:, :, 1] + 65536 * rgb[:, :, 2]  # segment id = R + 256 G + 256^2 B
            for shape in shapes:
                drawn = Shapes.from_json({"shapes": [shape]}, ids.shape[1], ids.shape[0]).rasterize(
                    np.zeros(ids.shape, np.uint8), channels=(1,)) > 0
                same = [ids == seg["id"] for seg in segments[stem] if seg["category_id"] == shape["label"]]
                ious.append(max(((drawn & m).sum() / (drawn | m).sum() for m in same), default=0.0))
    ious = np.array(ious)
    assert len(ious) > 700
    assert np.median(ious) >= 0.99 and (ious >= 0.9).mean() >= 0.9  # small objects traced coarsely lose a little


def test_dense_targets_of_transforms_join_the_batch(db):
    def heat(sample, rng):
        w, h = sample.size
        sample.extra.setdefault("dense", {})["heat"] = np.full((h // 4, w // 4), sample.record, np.float32)
        return sample
    with stream(db, task="detect", batch=3, transforms=[heat]) as s:
        images, boxes, counts, heat_maps, pad = next(s)
    assert heat_maps.shape == (3, H // 4, W // 4) and heat_maps[:, 0, 0].tolist() == [0, 1, 2]
    assert boxes.shape == (3, 1, 5) and pad == 0


def test_a_task_whose_annotations_the_database_lacks_fails_at_construction(tmp_path):
    path = tmp_path / "plain.picpac"
    with picpac.Writer(path) as w:
        for i in range(3):
            w.append(image=square_record(i)[0], label=i)
    for config, field in ((dict(task="detect"), "'annotation'"), (dict(annotate="image"), "'mask' or 'annotation'")):
        with pytest.raises(picpac.PicPacValueError, match=rf"reads the {field} field, but no record has one; the "
                                                          r"database's fields: \['image'\]"):
            picpac.ImageStream(path, **config)
