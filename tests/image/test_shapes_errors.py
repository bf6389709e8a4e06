"""Hostile annotation JSON gives a PicPacValueError naming what is wrong (a SampleError in a stream)."""
from __future__ import annotations

import pytest

from picpac.errors import PicPacValueError
from picpac.image.shapes import Shapes

POINT = '{"shapes": [{"type": "point", "geometry": {"x": 0.5, "y": 0.5}, %s}]}'


@pytest.mark.parametrize("doc, message", [
    (b"[" * 100000, "nested too deeply"),
    (POINT % '"label": [null]', "shape 0 has a bad label or tag"),
    (POINT % '"label": {"a": 1}', "shape 0 has a bad label or tag"),
    (POINT % '"tag": [1]', "shape 0 has a bad label or tag"),
    (POINT % '"label": -Infinity', "not a finite number"),
    (POINT % '"label": NaN', "not a finite number"),
    (POINT % '"label": [1, Infinity]', "not a finite number"),
    (POINT % '"tag": Infinity', "not a finite number"),
    (POINT % '"label": -1e308', "within float32's range"),
])
def test_bad_annotation_json(doc, message):
    with pytest.raises(PicPacValueError, match=message):
        Shapes.from_json(doc, 10, 10)


def test_good_labels_and_tags_still_parse():
    shapes = Shapes.from_json(POINT % '"label": [1, 2, 3], "tag": 4', 10, 10)
    assert len(shapes) == 1
