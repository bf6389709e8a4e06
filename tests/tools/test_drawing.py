"""picpac.tools.drawing: colours by label, class names, masks blended, shapes outlined with captions, boxes,
each checked pixel for pixel."""
from __future__ import annotations

import numpy as np
import pytest

from picpac.image.shapes import Shapes
from picpac.tools.drawing import (PALETTE, WHITE, blend_mask, caption, class_name, colour, draw_boxes,
                                  draw_shapes)


@pytest.mark.parametrize("label, want", [(0.0, PALETTE[0]), (3.0, PALETTE[3]), (12.0, PALETTE[2]),
                                         (-1.0, PALETTE[1]), (2.7, PALETTE[2]), (float("nan"), WHITE),
                                         (float("inf"), WHITE)])
def test_a_label_has_a_colour(label, want):
    assert colour(label) == want


@pytest.mark.parametrize("value, text", [(1.0, "1 cat"), (0.0, "0"), (2.0, "2"), (0.5, "0.5"), (-1.0, "-1"),
                                         (float("nan"), "nan")])
def test_a_class_is_named_where_the_classes_name_it(value, text):
    assert class_name(value, ["", "cat"]) == text


def test_a_mask_is_blended_half_and_half_and_zero_left_alone():
    canvas = np.full((2, 3, 3), 100, np.uint8)
    blend_mask(canvas, np.array([[0, 1, 2], [11, 0, 0.6]]))
    assert canvas[0, 0].tolist() == [100, 100, 100] and canvas[1, 1].tolist() == [100, 100, 100]
    assert canvas[0, 1].tolist() == [50, 150, 50]  # (100 + PALETTE[1]) / 2
    assert canvas[0, 2].tolist() == [178, 50, 50] and canvas[1, 0].tolist() == [50, 150, 50]  # 11 % 10 == 1
    assert canvas[1, 2].tolist() == [50, 150, 50]  # 0.6 rounds to class 1


def test_shapes_are_outlined_and_captioned_in_their_colour():
    canvas = np.zeros((40, 60, 3), np.uint8)
    shapes = Shapes.from_json({"shapes": [{"type": "rect", "label": 2, "geometry": {"x": 0.25, "y": 0.5,
                                                                                    "width": 0.5, "height": 0.25}}]},
                              60, 40)
    draw_shapes(canvas, shapes, ["", "", "box"])
    blue = list(PALETTE[2])
    assert canvas[20:30, 15].tolist() == [blue] * 10 and canvas[20:30, 44].tolist() == [blue] * 10
    assert canvas[29, 15:45].tolist() == [blue] * 30 and not canvas[21:29, 16:44].any()
    assert canvas[8:19, 15:45].any() and not canvas[30:].any()  # "2 box" above the box


def test_a_box_covers_its_pixels_up_to_the_far_edge():
    canvas = np.zeros((20, 20, 3), np.uint8)
    draw_boxes(canvas, np.array([[1, 2.4, 3.0, 12.0, 9.6]]))
    green = list(PALETTE[1])
    assert canvas[3:10, 2].tolist() == [green] * 7 and canvas[3:10, 11].tolist() == [green] * 7
    assert canvas[3, 2:12].tolist() == [green] * 10 and canvas[9, 2:12].tolist() == [green] * 10
    assert not canvas[4:9, 3:11].any() and not canvas[10:].any() and not canvas[:, 12:].any()


def test_a_caption_stays_inside_the_top_left():
    canvas = np.zeros((30, 60, 3), np.uint8)
    caption(canvas, "7", (-20, -5), (0, 0, 255))
    assert canvas[:, :8].any() and not canvas[12:].any() and not canvas[:, 8:].any()
    assert canvas[..., 2].max() > 200 and canvas[..., :2].max() < 100  # red on black (anti-aliased)
