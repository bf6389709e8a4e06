"""Dense training targets (picpac.dense): anchor maps, keypoints, box features; hand-computed on tiny cases.

The grids are 8x8 (a 32x32 sample, downsize 4): cell (row i, column j) has its anchor point at
pixel (4j, 4i), so anchor x and y positions are 0, 4, ..., 28.
"""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

import picpac
from picpac.dense import BasicKeypoints, BoxFeature, DenseBoxAnchors, DenseCircleAnchors, DensePointAnchors
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.image.shapes import Shapes
from picpac.image.specs import build
from picpac.transforms import Sample, Scale

SIZE = 32


def rect(x, y, w, h, **more):
    return {"type": "rect", "geometry": {"x": x / SIZE, "y": y / SIZE, "width": w / SIZE, "height": h / SIZE}, **more}


def point(x, y, **more):
    return {"type": "point", "geometry": {"x": x / SIZE, "y": y / SIZE}, **more}


def sample(*shapes, size=SIZE) -> Sample:
    s = Sample(np.zeros((size, size, 3), np.uint8), 0.0, 7)
    s.shapes = Shapes.from_json({"shapes": list(shapes)}, size, size)
    return s


def targets(transform, *shapes) -> dict[str, np.ndarray]:
    dense = transform(sample(*shapes), None).extra["dense"]
    assert all(a.dtype == np.float32 for a in dense.values())
    return dense


def grid(cells, value=1.0, fill=0.0) -> np.ndarray:
    """An 8x8 map of ``fill`` with ``value`` at the (row, column) ``cells``."""
    out = np.full((8, 8), fill, np.float32)
    for cell in cells:
        out[cell] = value
    return out


# -- anchors.dense.box ----------------------------------------------------------------------------
def test_box_layout_and_the_centre_cell():
    """Rect [8, 24) x [4, 20): centre (16, 12), 16x16; score min(1 - |px-16|/8, 1 - |py-12|/8)."""
    t = targets(DenseBoxAnchors(downsize=4), rect(8, 4, 16, 16))
    assert list(t) == ["anchors", "anchor_weights", "params", "params_weights"]
    assert t["anchors"].shape == t["anchor_weights"].shape == t["params_weights"].shape == (8, 8, 1)
    assert t["params"].shape == (8, 8, 1, 4)
    # only the anchor at (16, 12) scores >= upper_th 0.8 (it scores 1); its 8 neighbours score 0.5
    np.testing.assert_array_equal(t["anchors"][..., 0], grid([(3, 4)]))
    band = [(r, c) for r in (2, 3, 4) for c in (3, 4, 5) if (r, c) != (3, 4)]
    np.testing.assert_array_equal(t["anchor_weights"][..., 0], grid(band, 0.0, 1.0))  # ignored: 0.4 <= 0.5 < 0.8
    np.testing.assert_array_equal(t["params_weights"][..., 0], grid(band + [(3, 4)]))  # regressed in the band too
    assert t["params"][3, 4, 0].tolist() == [0.0, 0.0, 16.0, 16.0]       # cx - px, cy - py, w, h
    assert t["params"][2, 3, 0].tolist() == [4.0, 4.0, 16.0, 16.0]       # anchor (12, 8)
    assert t["params"][4, 5, 0].tolist() == [-4.0, -4.0, 16.0, 16.0]     # anchor (20, 16)
    assert not t["params"][0, 0, 0].any() and not t["params"][3, 2, 0].any()  # unmatched: params_default 0


def test_box_without_a_confident_anchor_gets_its_best_one_forced():
    """Rect [6, 26) x [5, 15): centre (16, 10), 20x10; no anchor reaches 0.8, six score 0.6."""
    t = targets(DenseBoxAnchors(downsize=4), rect(6, 5, 20, 10))
    # the shape's best anchor, the first of the 0.6 ones in row-major order, is made positive
    np.testing.assert_array_equal(t["anchors"][..., 0], grid([(2, 3)]))
    np.testing.assert_array_equal(t["anchor_weights"][..., 0], grid([(2, 4), (2, 5), (3, 3), (3, 4), (3, 5)], 0.0, 1.0))
    np.testing.assert_array_equal(t["params_weights"][..., 0],
                                  grid([(2, 3), (2, 4), (2, 5), (3, 3), (3, 4), (3, 5)]))
    assert t["params"][2, 3, 0].tolist() == [4.0, 2.0, 20.0, 10.0]
    assert t["params"][3, 5, 0].tolist() == [-4.0, -2.0, 20.0, 10.0]
    # anchor (8, 8) scores min(1 - 8/10, 1 - 2/5) = 0.2: negative
    assert t["anchor_weights"][2, 2, 0] == 1 and t["params_weights"][2, 2, 0] == 0


def test_box_cells_go_to_the_best_shape_and_forced_matches_follow_shape_order():
    big, small = rect(8, 8, 16, 16), rect(12, 12, 8, 8)   # both centred at (16, 16)
    t = targets(DenseBoxAnchors(downsize=4), big, small)
    # at (16, 16) both score 1: the first (big) wins the cell, then small forces its best cell, the same one
    assert t["params"][4, 4, 0].tolist() == [0.0, 0.0, 8.0, 8.0]
    assert t["params"][3, 4, 0].tolist() == [0.0, 4.0, 16.0, 16.0]   # big scores 0.5 there, small 0
    assert t["anchors"][..., 0].sum() == 1 and t["anchors"][4, 4, 0] == 1
    reversed_ = targets(DenseBoxAnchors(downsize=4), small, big)
    assert reversed_["params"][4, 4, 0].tolist() == [0.0, 0.0, 16.0, 16.0]   # big's forced match comes last


def test_box_thresholds_and_params_default():
    t = targets(DenseBoxAnchors(downsize=4, lower_th=0.5, upper_th=0.5, params_default=1.0), rect(8, 4, 16, 16))
    plus = [(2, 4), (3, 3), (3, 4), (3, 5), (4, 4)]
    corners = [(2, 3), (2, 5), (4, 3), (4, 5)]        # min(0.5, 0.5) = 0.5 too
    np.testing.assert_array_equal(t["anchors"][..., 0], grid(plus + corners))
    assert t["anchor_weights"].min() == 1
    assert t["params"][0, 0, 0].tolist() == [1.0, 1.0, 1.0, 1.0]


def test_box_priors_score_by_iou():
    """Priors 16x16 and 8x8 against the 16x16 rect centred at (16, 12)."""
    t = targets(DenseBoxAnchors(downsize=4, priors=((16, 16), (8, 8)), lower_th=0.3, upper_th=0.55),
                rect(8, 4, 16, 16))
    assert t["anchors"].shape == (8, 8, 2) and t["params"].shape == (8, 8, 2, 4)
    # prior 16x16: IoU 1 at (16, 12); 192 / 320 = 0.6 one step away along an axis; 144 / 368 = 0.39 diagonally;
    # 128 / 384 = 0.33 two steps away along an axis
    plus = [(2, 4), (3, 3), (3, 4), (3, 5), (4, 4)]
    np.testing.assert_array_equal(t["anchors"][..., 0], grid(plus))
    ignored = [(2, 3), (2, 5), (4, 3), (4, 5), (1, 4), (5, 4), (3, 2), (3, 6)]
    np.testing.assert_array_equal(t["anchor_weights"][..., 0], grid(ignored, 0.0, 1.0))
    assert t["params"][2, 4, 0].tolist() == [0.0, 4.0, 16.0, 16.0]   # in pixels, not divided by the prior
    # prior 8x8: IoU at most 64 / 256 = 0.25 < lower_th: negative everywhere
    assert not t["anchors"][..., 1].any() and t["anchor_weights"][..., 1].min() == 1
    assert not t["params_weights"][..., 1].any()


# -- anchors.dense.circle and .point --------------------------------------------------------------
def test_circle():
    """Rect [8, 24)^2: centre (16, 16), radius sqrt(16 * 16) / 2 = 8; score (8 - d) / 8."""
    t = targets(DenseCircleAnchors(downsize=4), rect(8, 8, 16, 16))
    assert t["params"].shape == (8, 8, 1, 3)
    np.testing.assert_array_equal(t["anchors"][..., 0], grid([(4, 4)]))
    band = [(3, 4), (5, 4), (4, 3), (4, 5)]            # d = 4: 0.5; diagonal d = 5.66: 0.29, negative
    np.testing.assert_array_equal(t["anchor_weights"][..., 0], grid(band, 0.0, 1.0))
    np.testing.assert_array_equal(t["params_weights"][..., 0], grid(band + [(4, 4)]))
    assert t["params"][4, 4, 0].tolist() == [0.0, 0.0, 8.0]
    assert t["params"][3, 4, 0].tolist() == [0.0, 4.0, 8.0]          # cx - px, cy - py, r
    # a 16x4 box is a circle of radius sqrt(64) / 2 = 4
    assert targets(DenseCircleAnchors(downsize=4), rect(8, 14, 16, 4))["params"][4, 4, 0].tolist() == [0.0, 0.0, 4.0]


def test_point():
    """Point (9, 6): anchors (8, 4) and (8, 8) are sqrt(5) = 2.24 away, (12, 4) and (12, 8) sqrt(13) = 3.61."""
    default = targets(DensePointAnchors(downsize=4), point(9, 6))
    assert default["params"].shape == (8, 8, 1, 2)
    assert not default["anchors"].any() and default["anchor_weights"].min() == 1   # exp(-2.24) = 0.11 < 0.4
    th = float(np.exp(-3))                             # positive within 3 pixels
    t = targets(DensePointAnchors(downsize=4, lower_th=th, upper_th=th), point(9, 6))
    np.testing.assert_array_equal(t["anchors"][..., 0], grid([(1, 2), (2, 2)]))
    assert t["anchor_weights"].min() == 1
    assert t["params"][1, 2, 0].tolist() == [1.0, 2.0] and t["params"][2, 2, 0].tolist() == [1.0, -2.0]
    # the nearest anchor is forced when its score reaches lower_th, even below upper_th
    forced = targets(DensePointAnchors(downsize=4, lower_th=0.1, upper_th=0.9), point(9, 6))
    np.testing.assert_array_equal(forced["anchors"][..., 0], grid([(1, 2)]))
    np.testing.assert_array_equal(forced["anchor_weights"][..., 0], grid([(2, 2)], 0.0, 1.0))


def test_point_anchors_use_point_shapes_and_box_anchors_the_others():
    both = (rect(8, 4, 16, 16), point(9, 6))
    assert targets(DensePointAnchors(downsize=4, lower_th=0.05, upper_th=0.05), *both)["anchors"].sum() == 2
    assert targets(DenseBoxAnchors(downsize=4), *both)["anchors"].sum() == 1


# -- keypoints.basic and box_feature --------------------------------------------------------------
def test_keypoints_basic():
    t = targets(BasicKeypoints(downsize=4, classes=2, radius=4), point(9, 6, label=1), point(20, 20, label=2),
                rect(0, 0, 8, 8, label=5))            # not a point: ignored
    assert list(t) == ["keypoints", "offsets"]
    assert t["keypoints"].shape == (8, 8, 2) and t["offsets"].shape == (8, 8, 2, 2)
    # class 1: anchors within 4 px of (9, 6): (8, 4), (8, 8) at 2.24, (12, 4), (12, 8) at 3.61
    np.testing.assert_array_equal(t["keypoints"][..., 0], grid([(1, 2), (2, 2), (1, 3), (2, 3)]))
    # class 2: (20, 20) itself and the four anchors exactly 4 px away
    np.testing.assert_array_equal(t["keypoints"][..., 1], grid([(5, 5), (4, 5), (6, 5), (5, 4), (5, 6)]))
    assert t["offsets"][1, 3, 0].tolist() == [-3.0, 2.0]             # (9 - 12, 6 - 4)
    assert t["offsets"][4, 5, 1].tolist() == [0.0, 4.0]
    assert not t["offsets"][t["keypoints"] == 0].any()


def test_keypoints_nearest_point_radius_default_and_labels():
    t = targets(BasicKeypoints(downsize=4), point(8, 8), point(13, 8))
    # radius 0: one grid step (4 px); anchor (12, 8) is nearer to (13, 8) than to (8, 8)
    np.testing.assert_array_equal(t["keypoints"][..., 0], grid([(2, 2), (1, 2), (3, 2), (2, 1), (2, 3), (2, 4)]))
    assert t["offsets"][2, 3, 0].tolist() == [1.0, 0.0] and t["offsets"][2, 2, 0].tolist() == [0.0, 0.0]
    with pytest.raises(PicPacValueError, match="record 7: keypoints.basic with classes=1 needs point labels 1 .. 1, "
                                               "got 2"):
        BasicKeypoints(downsize=4)(sample(point(8, 8, label=2)), None)


def test_box_feature():
    t = targets(BoxFeature(), rect(8, 4, 16, 16, label=2, tag=5), rect(28, 8, 12, 4), rect(40, 40, 4, 4),
                rect(10, 10, 0.5, 1), point(3, 3))
    # clipped to [0, 32]; the one outside the image, the one under min_area 1 and the point are left out
    assert t["box_feature"].tolist() == [[2, 5, 8, 4, 24, 20], [1, 0, 28, 8, 32, 12]]
    padded = targets(BoxFeature(max_boxes=3), rect(8, 4, 16, 16, label=2, tag=5))
    assert padded["box_feature"].tolist() == [[2, 5, 8, 4, 24, 20], [-1, 0, 0, 0, 0, 0], [-1, 0, 0, 0, 0, 0]]
    assert targets(BoxFeature(max_boxes=1), rect(0, 0, 4, 4), rect(8, 8, 4, 4))["box_feature"].shape == (1, 6)
    assert targets(BoxFeature(min_area=0), rect(10, 10, 0.5, 1))["box_feature"].shape == (1, 6)


# -- every type: empty annotations, sizes, errors -------------------------------------------------
@pytest.mark.parametrize("transform, shapes", [
    (DenseBoxAnchors(downsize=4), {"anchors": (8, 8, 1), "anchor_weights": (8, 8, 1), "params": (8, 8, 1, 4),
                                   "params_weights": (8, 8, 1)}),
    (DenseBoxAnchors(downsize=2, priors=((4, 4), (8, 2), (2, 8))), {"anchors": (16, 16, 3), "anchor_weights":
                                                                    (16, 16, 3), "params": (16, 16, 3, 4),
                                                                    "params_weights": (16, 16, 3)}),
    (DenseCircleAnchors(downsize=8), {"anchors": (4, 4, 1), "anchor_weights": (4, 4, 1), "params": (4, 4, 1, 3),
                                      "params_weights": (4, 4, 1)}),
    (DensePointAnchors(), {"anchors": (32, 32, 1), "anchor_weights": (32, 32, 1), "params": (32, 32, 1, 2),
                           "params_weights": (32, 32, 1)}),
    (BasicKeypoints(downsize=4, classes=3), {"keypoints": (8, 8, 3), "offsets": (8, 8, 3, 2)}),
    (BoxFeature(), {"box_feature": (0, 6)}),
])
def test_an_empty_annotation_gives_all_negative_maps(transform, shapes):
    t = targets(transform)
    assert {name: a.shape for name, a in t.items()} == shapes
    for name, a in t.items():
        assert (a == (1 if name == "anchor_weights" else 0)).all(), name


def test_targets_follow_geometric_transforms_without_resampling_the_image():
    s = sample(rect(8, 4, 16, 16), size=16)           # the same fractions of a 16x16 sample: [4, 12) x [2, 10)
    s = Scale(2.0)(s, None)                           # 32x32 now, the rect [8, 24) x [4, 20); still pending
    s = DenseBoxAnchors(downsize=4)(s, None)
    assert s._matrix is not None                       # the image was not read (nor resampled)
    direct = targets(DenseBoxAnchors(downsize=4), rect(8, 4, 16, 16))
    for name, a in s.extra["dense"].items():
        np.testing.assert_array_equal(a, direct[name])
    assert s.image.shape == (32, 32, 3)


def test_sides_must_be_multiples_of_downsize():
    with pytest.raises(PicPacValueError, match=r"record 7: anchors.dense.box needs sides that are multiples of "
                                               r"downsize=5, got 32x32; add \{'type': 'clip', 'round': 5\}"):
        DenseBoxAnchors(downsize=5)(sample(), None)


def test_samples_without_shapes():
    plain = Sample(np.zeros((8, 8), np.uint8), 0.0, 3)   # no annotation (ImageLoader): no targets
    assert "dense" not in DenseBoxAnchors()(plain, None).extra
    masked = Sample(np.zeros((8, 8), np.uint8), 0.0, 3, mask=np.zeros((8, 8), np.uint8))
    with pytest.raises(PicPacValueError, match="record 3: keypoints.basic needs vector shapes"):
        BasicKeypoints()(masked, None)


def test_names_do_not_collide_and_keep_their_order():
    s = sample(rect(8, 4, 16, 16))
    s.extra = {"dense": {"heat": np.zeros(1, np.float32)}}
    earlier = s.extra["dense"]
    s = DenseBoxAnchors(downsize=4)(s, None)
    with pytest.raises(PicPacValueError, match="would replace the dense target 'anchors'.*'prefix'"):
        DenseCircleAnchors(downsize=4)(s, None)
    s = DenseCircleAnchors(downsize=4, prefix="circle_")(s, None)
    s = BoxFeature()(s, None)
    assert list(s.extra["dense"]) == ["heat", "anchors", "anchor_weights", "params", "params_weights",
                                      "circle_anchors", "circle_anchor_weights", "circle_params",
                                      "circle_params_weights", "box_feature"]
    assert list(earlier) == ["heat"]                   # a dict shared with a copied sample is not written into


# -- specs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, expected", [
    ({"type": "anchors.dense.box"}, DenseBoxAnchors()),
    ({"type": "anchors.dense.box", "downsize": 4, "lower_th": 0.1, "upper_th": 0.5, "weighted": False,
      "priors": [[10, 20], [20.5, 10]], "params_default": 1.0},
     DenseBoxAnchors(4, 0.5, 0.1, 1.0, priors=((10.0, 20.0), (20.5, 10.0)))),
    ({"type": "anchors.dense.box", "downsize": 8, "priors": [], "index": 1}, DenseBoxAnchors(downsize=8)),
    ({"type": "anchors.dense.circle", "downsize": 4, "upper_th": 0.9}, DenseCircleAnchors(downsize=4, upper_th=0.9)),
    ({"type": "anchors.dense.point", "downsize": 4, "lower_th": 0.05, "upper_th": 0.05, "prefix": "kp_"},
     DensePointAnchors(downsize=4, lower_th=0.05, upper_th=0.05, prefix="kp_")),
    ({"type": "keypoints.basic", "downsize": 4, "classes": 2, "radius": 25}, BasicKeypoints(4, 2, 25.0)),
    ({"type": "keypoints.basic"}, BasicKeypoints()),
    ({"type": "box_feature"}, BoxFeature()),
    ({"type": "box_feature", "min_area": 4, "max_boxes": 16}, BoxFeature(4.0, 16)),
])
def test_specs_build_the_dense_transforms(spec, expected):
    for random in (True, False):
        assert build([spec], random=random) == [expected]


@pytest.mark.parametrize("spec, error, match", [
    ({"type": "anchors.dense.box", "weighted": True}, PicPacValueError, "PicPac option 'weighted'"),
    ({"type": "anchors.dense.box", "index": 2}, PicPacValueError, "PicPac option 'index'"),
    ({"type": "box_feature", "index": 0}, PicPacValueError, "PicPac option 'index'"),
    ({"type": "anchors.dense.circle", "priors": [[4, 4]]}, PicPacValueError, "PicPac option 'priors'"),
    ({"type": "anchors.dense.box", "priors": [4, 4]}, PicPacTypeError, r"\[width, height\] pair, got 4"),
    ({"type": "anchors.dense.box", "priors": "big"}, PicPacTypeError, "'priors' must be a list"),
    ({"type": "anchors.dense.box", "priors": [[4, 0]]}, PicPacValueError, "above 0"),
    ({"type": "anchors.dense.box", "lower_th": 0.9}, PicPacValueError, "lower_th 0.9 is above upper_th 0.8"),
    ({"type": "anchors.dense.box", "downsize": 0}, PicPacValueError, r"'downsize' must be in \[1, 32766\], got 0"),
    ({"type": "anchors.dense.point", "prefix": 3}, PicPacTypeError, "'prefix' must be a string"),
    ({"type": "keypoints.basic", "radius": -1}, PicPacValueError, r"'radius' must be in \[0, 32766\], got -1"),
    ({"type": "keypoints.basic", "classes": 0}, PicPacValueError, r"'classes' must be in \[1, 65536\], got 0"),
    ({"type": "anchors.dense.box", "size": 30}, PicPacValueError, "unknown key 'size'"),
])
def test_spec_errors(spec, error, match):
    with pytest.raises(error, match=match):
        build([spec], random=True)


# -- through the stream ---------------------------------------------------------------------------
@pytest.fixture
def db(tmp_path):
    """Four 32x32 PNGs, each with a 16x16 rect at x = 8 + 4i, y = 4 and a point."""
    path = tmp_path / "dense.picpac"
    with picpac.Writer(path) as w:
        for i in range(4):
            image = np.zeros((SIZE, SIZE, 3), np.uint8)
            image[4:20, 8 + 4 * i:24 + 4 * i] = 255
            doc = {"shapes": [rect(8 + 4 * i, 4, 16, 16, label=1 + i % 2, tag=i), point(9, 6)]}
            w.append(image=cv2.imencode(".png", image)[1].tobytes(), annotation=json.dumps(doc).encode())
    return path


def test_stream_appends_the_dense_targets_after_the_task_arrays(db):
    with picpac.ImageStream(db, task="detect", batch=2, loop=False, shuffle=False, transforms=[
            {"type": "anchors.dense.box", "downsize": 4}, {"type": "box_feature"}]) as s:
        batches = list(s)
    assert len(batches) == 2
    images, boxes, counts, anchors, weights, params, params_weights, box_feature, pad = batches[0]
    assert images.shape == (2, 3, SIZE, SIZE) and boxes.shape == (2, 1, 5) and counts.tolist() == [1, 1]
    assert anchors.shape == weights.shape == params_weights.shape == (2, 8, 8, 1)
    assert params.shape == (2, 8, 8, 1, 4) and box_feature.shape == (2, 1, 6) and pad == 0
    for b, i in enumerate((0, 1)):                    # rect centre (16 + 4i, 12): the anchor in row 3, column 4 + i
        np.testing.assert_array_equal(anchors[b, :, :, 0], grid([(3, 4 + i)]))
        assert params[b, 3, 4 + i, 0].tolist() == [0.0, 0.0, 16.0, 16.0]
        assert box_feature[b].tolist() == [[1 + i % 2, i, 8 + 4 * i, 4, 24 + 4 * i, 20]]
    _, _, _, anchors, *_ = batches[1]
    np.testing.assert_array_equal(anchors[1, :, :, 0], grid([(3, 7)]))


def test_stream_with_keypoints_and_flip(db):
    specs = [{"type": "augment.flip", "horizontal": True, "vertical": False},
             {"type": "keypoints.basic", "downsize": 4, "radius": 3}]
    with picpac.ImageStream(db, task="keypoints", batch=4, loop=False, shuffle=False, seed=1, transforms=specs) as s:
        images, points, counts, keypoints, offsets, pad = next(s)
    assert keypoints.shape == (4, 8, 8, 1) and offsets.shape == (4, 8, 8, 1, 2)
    for b in range(4):
        x, y = points[b, 0, 1:]                        # the point where the stream says it is, flipped or not
        assert (x, y) in ((9.0, 6.0), (23.0, 6.0))
        rows, cols = np.nonzero(keypoints[b, :, :, 0])
        assert len(rows) and np.all(np.hypot(cols * 4 - x, rows * 4 - y) <= 3)
        np.testing.assert_allclose(offsets[b, rows, cols, 0], np.stack([x - cols * 4, y - rows * 4], -1))


def test_ragged_box_features_are_padded_in_the_batch(tmp_path):
    import json

    import cv2

    import picpac

    path = tmp_path / "ragged.picpac"
    image = cv2.imencode(".png", np.zeros((16, 16, 3), np.uint8))[1].tobytes()
    box = {"type": "rect", "geometry": {"x": 0.25, "y": 0.25, "width": 0.5, "height": 0.5}, "label": 3}
    with picpac.Writer(path) as w:
        for count in (1, 3, 0):
            w.append(image=image, annotation=json.dumps({"shapes": [box] * count}).encode())
    with picpac.ImageStream(path, loop=False, shuffle=False, batch=3, annotate="json", task="classify",
                            transforms=[{"type": "box_feature"}]) as s:
        images, labels, features, pad = next(s)
    assert features.shape == (3, 3, 6)
    assert features[:, :, 0].tolist() == [[3, -1, -1], [3, 3, 3], [-1, -1, -1]]
    assert features[0, 0, 2:].tolist() == [4, 4, 12, 12] and (features[0, 1:, 1:] == 0).all()
