"""Exactness of transforms: image, mask, shapes, boxes and keypoints stay aligned, to within 1 px."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from picpac.errors import PicPacValueError
from picpac.image.shapes import Shapes
from picpac.transforms import (Affine, CenterCrop, Crop, ErodeMask, Flip, OneOf, Pad, RandomResizedCrop, Rasterize,
                               Resize, Rotate, Rotate90, Scale, Sample, Sometimes, SomeOf)

W, H = 40, 30
X0, Y0, X1, Y1 = 8, 6, 20, 14  # the square covers pixels X0..X1-1, Y0..Y1-1


def square_sample() -> Sample:
    """A white rectangle on black, its rect shape (label 2) and a keypoint at its top-left corner."""
    image = np.zeros((H, W), np.uint8)
    image[Y0:Y1, X0:X1] = 255
    doc = {"shapes": [  # the point first: the rect is drawn over its disc
        {"type": "point", "geometry": {"x": X0 / W, "y": Y0 / H}, "label": 5},
        {"type": "rect", "geometry": {"x": X0 / W, "y": Y0 / H, "width": (X1 - X0) / W, "height": (Y1 - Y0) / H},
         "label": 2},
    ]}
    mask = np.zeros((H, W), np.uint8)
    mask[Y0:Y1, X0:X1] = 2
    return Sample(image, 0.0, 0, mask=mask, shapes=Shapes.from_json(json.dumps(doc), W, H))


def extent(array: np.ndarray, threshold: float = 127) -> tuple[int, int, int, int]:
    """x1, y1, x2, y2 (exclusive) of the pixels above ``threshold``."""
    ys, xs = np.nonzero(array > threshold)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


class Fixed:
    """A stand-in rng whose draws are given: uniform returns values in turn; integers its low end."""

    def __init__(self, *uniforms: float):
        self.values = list(uniforms)

    def uniform(self, low, high):
        return self.values.pop(0)

    def random(self, n=None):
        return np.zeros(n) if n else 0.0

    def integers(self, low, high=None):
        return 0


def check_aligned(sample: Sample, corner: tuple[float, float]) -> None:
    """Image square, mask square, shape box, rasterized shape and keypoint agree."""
    point, box = sample.shapes.boxes()[0][:2], sample.shapes.boxes()[1]
    image_box = extent(sample.image)
    assert np.allclose(box, image_box, atol=1), (box, image_box)
    assert extent(sample.mask, 0) == image_box
    raster = Rasterize()(Sample(np.zeros((sample.size[1], sample.size[0]), np.uint8), 0, 0,
                                shapes=sample.shapes.copy()), None).mask
    assert ((raster == 2) == (sample.mask == 2)).all()
    assert np.allclose(point, corner, atol=1e-9)


@pytest.mark.parametrize("transform, corner, size", [
    (Rotate90(1), (Y0, W - X0), (H, W)),  # (x, y) -> (y, W - x)
    (Rotate90(2), (W - X0, H - Y0), (W, H)),
    (Flip(horizontal=1), (W - X0, Y0), (W, H)),
    (Flip(horizontal=0, vertical=1), (X0, H - Y0), (W, H)),
    (Flip(horizontal=0, transpose=1), (Y0, X0), (H, W)),
    (Scale(2.0), (2 * X0, 2 * Y0), (2 * W, 2 * H)),
    (Resize(20, 15), (X0 / 2, Y0 / 2), (20, 15)),
    (Crop(30, 20), (X0 - 5, Y0 - 5), (30, 20)),  # centred: (40 - 30) // 2 = 5, (30 - 20) // 2 = 5
    (Pad(50, 40), (X0 + 5, Y0 + 5), (50, 40)),
    (Pad(sides=(3, 4, 0, 0)), (X0 + 3, Y0 + 4), (W + 3, H + 4)),
])
def test_square_stays_aligned(transform, corner, size):
    sample = transform(square_sample(), Fixed())
    assert sample.size == size and sample.image.shape[:2] == size[::-1]
    check_aligned(sample, corner)


def test_exact_pixels_of_quarter_turn_and_flips():
    image = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert (Rotate90(1)(Sample(image, 0, 0), None).image == np.rot90(image, 1)).all()
    assert (Flip(horizontal=1)(Sample(image, 0, 0), Fixed()).image == image[:, ::-1]).all()
    assert (Flip(horizontal=0, vertical=1)(Sample(image, 0, 0), Fixed()).image == image[::-1]).all()
    assert (Flip(horizontal=0, transpose=1)(Sample(image, 0, 0), Fixed()).image == image.T).all()
    cropped = Crop(2, 2)(Sample(image, 0, 0), None).image
    assert (cropped == image[0:2, 1:3]).all()
    assert (Pad(sides=(1, 0, 0, 1))(Sample(image, 0, 0), None).image == np.pad(image, ((0, 1), (1, 0)))).all()


def test_chained_geometry_resamples_once():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    chained = Sample(image, 0, 0)
    for t in (Rotate90(1), Rotate90(1), Flip(horizontal=1), Flip(horizontal=0, vertical=1)):
        chained = t(chained, Fixed())
    assert chained._matrix is not None  # nothing resampled yet
    assert (chained.image == image).all()  # a half turn and both flips compose to the identity: bit-exact


def test_box_and_mask_agree_after_random_affine():
    """Vector path: the mask rasterized after the transform matches the box within 1 px.
    Mask-image path: a mask warped with nearest neighbour matches within 2 px (its staircase scales)."""
    rng = np.random.default_rng(1)
    checked = 0
    for trial in range(100):
        pts = rng.uniform(0.2, 0.8, (5, 2))
        doc = {"shapes": [{"type": "polygon", "geometry": {"points": [{"x": x, "y": y} for x, y in pts]}, "label": 1}]}
        shapes = Shapes.from_json(json.dumps(doc), 96, 80)
        warped = Rasterize()(Sample(np.zeros((80, 96), np.uint8), 0, trial, shapes=shapes.copy()), None).mask
        sample = Sample(np.zeros((80, 96), np.uint8), 0, trial, mask=warped, shapes=shapes)
        Affine(rotate=30, scale=(0.7, 1.3), shear=10, translate=0.1)(sample, rng)
        box = np.clip(sample.shapes.boxes()[0], 0, [96, 80, 96, 80])
        if (box[2] - box[0]) * (box[3] - box[1]) < 20:
            continue
        checked += 1
        vector = Rasterize()(Sample(np.zeros((80, 96), np.uint8), 0, trial, shapes=sample.shapes.copy()), None).mask
        assert np.allclose(box, extent(vector, 0), atol=1), (trial, box, extent(vector, 0))
        assert np.allclose(box, extent(sample.mask, 0), atol=2), (trial, box, extent(sample.mask, 0))
    assert checked >= 90


def test_random_resized_crop_follows_torchvision():
    t = RandomResizedCrop(24, 24)
    rng = np.random.default_rng(5)
    for _ in range(200):
        x, y, cw, ch = t.window(300, 200, rng)
        assert 0 <= x <= 300 - cw and 0 <= y <= 200 - ch
        assert 0.08 * 60000 - 300 <= cw * ch <= 60000
    # not random: the largest centred crop with an allowed aspect ratio
    assert RandomResizedCrop(24, 24, random=False).window(300, 100, None) == (83, 0, 133, 100)
    assert RandomResizedCrop(24, 24, random=False).window(100, 90, None) == (0, 0, 100, 90)
    sample = t(square_sample(), rng)
    assert sample.image.shape == (24, 24) and sample.mask.shape == (24, 24)
    assert CenterCrop(10, 10)(square_sample(), None).size == (10, 10)


def test_affine_centre_version_is_identity():
    sample = Affine(rotate=30, scale=(0.5, 1.5), shear=5, translate=0.2, random=False)(square_sample(), None)
    check_aligned(sample, (X0, Y0))
    assert (sample.image == square_sample().image).all()


def test_rotate_moves_the_square_counter_clockwise():
    sample = Rotate(angle=(90, 90))(square_sample(), np.random.default_rng(0))
    check_aligned(sample, Rotate90(1)(square_sample(), None).shapes.boxes()[0][:2] + (5, -5))


def test_combinators():
    seen = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        sample = OneOf((Rotate90(1), Flip(horizontal=1)))(square_sample(), rng)
        seen.add(sample.size)
    assert seen == {(W, H), (H, W)}
    assert Sometimes(0.3, (Rotate90(1),), random=False)(square_sample(), None).size == (W, H)
    assert Sometimes(0.7, (Rotate90(1),), random=False)(square_sample(), None).size == (H, W)
    both = SomeOf(2, (Rotate90(1), Scale(2.0)), random=False)(square_sample(), None)
    assert both.size == (2 * H, 2 * W)


def test_rasterize_modes_and_erode():
    sample = Rasterize(color_by="serial")(square_sample(), None)
    assert sample.shapes is None and set(np.unique(sample.mask)) == {0, 1, 2}
    outline = Rasterize(thickness=1, values=(9,))(square_sample(), None).mask
    assert outline[Y0, X0 + 3] == 9 and outline[(Y0 + Y1) // 2, (X0 + X1) // 2] == 0
    sample = square_sample()
    ErodeMask(radius=1)(sample, None)
    assert extent(sample.mask, 0) == (X0 + 1, Y0 + 1, X1 - 1, Y1 - 1)


def test_rasterize_draws_points_as_discs_of_point_radius():
    point = {"shapes": [{"type": "point", "label": 1, "geometry": {"x": 0.5, "y": 0.5}}]}
    for radius in (2, 5):
        sample = Sample(np.zeros((20, 20, 3), np.uint8), 0, 0)
        sample.shapes = Shapes.from_json(point, 20, 20)
        mask = Rasterize(point_radius=radius)(sample, None).mask
        rows = np.flatnonzero(mask[:, 10])
        assert (rows.min(), rows.max()) == (10 - radius, 10 + radius)
    masked = Sample(np.zeros((20, 20, 3), np.uint8), 0, 0)
    masked.mask = np.full((20, 20), 7, np.uint8)
    assert (Rasterize(point_radius=5)(masked, None).mask == 7).all()  # a mask image already: left as it is


def test_shape_boxes_ellipses_multipart_and_bad_shapes():
    doc = {"shapes": [
        {"type": "ellipse", "geometry": {"x": 0.1, "y": 0.2, "width": 0.4, "height": 0.2}},
        {"type": "polygons", "geometry": {"polygons": [[{"x": 0.1, "y": 0.1}, {"x": 0.2, "y": 0.3}],
                                                       [{"x": 0.6, "y": 0.5}, {"x": 0.7, "y": 0.4}]]}},
    ]}
    shapes = Shapes.from_json(doc, 100, 50)
    assert np.allclose(shapes.boxes(), [[10, 10, 50, 20], [10, 5, 70, 25]])
    shapes.transform(np.array([[0.0, 1, 0], [-1, 0, 100]]))  # a quarter turn of the 100 x 50 image
    assert np.allclose(shapes.boxes()[0], [10, 50, 20, 90])  # the ellipse's box stays exact
    with pytest.raises(PicPacValueError, match="shape 0 \\(polygon\\) has no points"):
        Shapes.from_json({"shapes": [{"type": "polygon", "geometry": {"points": []}}]}, 10, 10)
    with pytest.raises(PicPacValueError, match="unknown shape type .star."):
        Shapes.from_json({"shapes": [{"type": "star", "geometry": {}}]}, 10, 10)


def test_resize_shorter_side():
    assert Resize(shorter=15)(square_sample(), None).size == (20, 15)
    tall = Sample(np.zeros((40, 10), np.uint8), 0, 0)
    assert Resize(shorter=20)(tall, None).size == (20, 80)


def test_fast_path_flips_equal_the_general_warp():
    """Crop + flip goes through a slice and a flip (NumPy views); it must equal the kernels' warp of the same map."""
    from picpac.image import kernels
    from picpac.image.sample import resample
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    for a, d in ((-1, 1), (1, -1), (-1, -1)):
        matrix = np.array([[a * 1.0, 0, 30 if a < 0 else -10], [0, d * 1.0, 20 if d < 0 else -5]])
        fast = resample(image, matrix, (30, 20))
        m = matrix.copy()
        m[:, 2] = matrix[:, :2] @ (0.5, 0.5) + matrix[:, 2] - 0.5
        slow = kernels.warp(image, m, (30, 20), cv2.BORDER_CONSTANT, 0)
        assert (fast == slow).all(), (a, d)


def columns_and_rows(w: int, h: int) -> np.ndarray:
    """(h, w, 2) uint8: each pixel's column and row."""
    return np.stack(np.meshgrid(np.arange(w), np.arange(h)), -1).astype(np.uint8)


@pytest.mark.parametrize("w, h, x, y", [(227, 230, 2, 3), (225, 229, 0, 2), (229, 224, 2, 0), (224, 226, 0, 1)])
def test_center_crop_starts_where_torchvisions_does(w, h, x, y):
    """torchvision: int(round((W - w) / 2)), halves to even: 3 spare pixels start at 2 (PicPac's Crop: 1)."""
    out = CenterCrop(224, 224)(Sample(columns_and_rows(w, h), 0, 0), None).image
    assert out.shape[:2] == (224, 224) and (out[0, 0, 0], out[0, 0, 1]) == (x, y)
    assert Crop(224, 224)(Sample(columns_and_rows(w, h), 0, 0), None).image[0, 0, 0] == (w - 224) // 2


def test_the_batch_path_centres_as_the_sample_path():
    from picpac.image.batched import _batch_step
    batch = np.stack([columns_and_rows(227, 230)] * 2)
    cut = _batch_step(CenterCrop(224, 224), 230, 227, 2)(batch, np.zeros((2, 0), np.uint64), 0)
    assert (cut[0, 0, 0, 0], cut[0, 0, 0, 1]) == (2, 3)
    plain = _batch_step(Crop(224, 224), 230, 227, 2)(batch, np.zeros((2, 0), np.uint64), 0)
    assert (plain[0, 0, 0, 0], plain[0, 0, 0, 1]) == (1, 3)


@pytest.mark.parametrize("w, h, size", [(640, 427, (383, 256)), (427, 640, (256, 383)), (500, 375, (341, 256)),
                                        (256, 300, (256, 300))])
def test_resize_shorter_sizes_the_longer_side_as_torchvision(w, h, size):
    """torchvision's Resize(256): the longer side int(256 * 640 / 427) = 383 (rounding would give 384)."""
    assert Resize(shorter=256)(Sample(np.zeros((h, w, 3), np.uint8), 0, 0), None).size == size
