"""The size a sample's geometry makes is bounded before a pixel is allocated (picpac/image/sample.py): sides of 1 to
MAX_SIDE and at most max_pixels pixels, else a SampleError naming the record, whether the pixels are read, the map goes
to the fused path or to the device stage."""
from __future__ import annotations

import numpy as np
import pytest

from picpac.errors import SampleError
from picpac.image.decoding import MAX_SIDE
from picpac.image.sample import Sample
from picpac.image.transforms import Crop, LimitSize, Pad, Resize


def never(reduction, region):
    raise AssertionError("no pixels may be decoded for a sample refused by its size")


def deferred(width: int, height: int, **kwargs) -> Sample:
    return Sample(None, 1.0, 7, size=(width, height), decoder=never, extra={"source": "db.picpac"}, **kwargs)


@pytest.mark.parametrize("step, size, made", [
    (Resize(shorter=256), (2, 3000), "256x384000"),          # torchvision's rounding of an extreme aspect ratio
    (Resize(shorter=256), (65500, 1), "16768000x256"),
    (LimitSize(min_size=256), (3, 40000), "256x3413333"),
    (Pad(40000, 10), (10, 10), "40000x10"),
])
def test_a_size_past_the_sides_is_a_sample_error_naming_the_record(step, size, made):
    sample = step(deferred(*size, regions=True), None)
    for made_by in (lambda s: s.image, lambda s: s.fused_plan(), lambda s: s.pending()):
        with pytest.raises(SampleError, match=rf"^db.picpac: record 7 would become {made} \(.* pixels\) by its "
                                              rf"geometry: an image may have sides of 1 to {MAX_SIDE} pixels"):
            made_by(sample)


def test_max_pixels_bounds_what_is_made_and_none_leaves_the_sides():
    with pytest.raises(SampleError, match=r"would become 1000x1000 \(1,000,000 pixels\).* at most max_pixels=999,999"):
        Resize(1000, 1000)(deferred(10, 10, max_pixels=999_999), None).pending()
    assert Resize(1000, 1000)(deferred(10, 10, max_pixels=None), None).pending()[1] == (1000, 1000)
    with pytest.raises(SampleError, match="sides of 1 to"):
        Resize(MAX_SIDE + 1, 10)(deferred(10, 10, max_pixels=None), None).pending()
    decoded = Sample(np.zeros((4, 4, 3), np.uint8), 0.0, 2, max_pixels=100)
    with pytest.raises(SampleError, match="^sample: record 2 would become 11x10"):
        Resize(11, 10)(decoded, None).image
    assert Sample(np.zeros((4, 4, 3), np.uint8), 0.0, 2, max_pixels=100).copy().max_pixels == 100


def test_a_step_of_the_chain_that_is_never_made_is_not_bounded():
    """A pad past the sides that a crop takes back: one map, whose output is small (PicPac's clip with a shift)."""
    image = np.arange(12, dtype=np.uint8).reshape(3, 4)
    sample = Crop(4, 3)(Pad(MAX_SIDE + 10, 3)(Sample(image, 0.0, 0), None), None)
    assert np.array_equal(sample.image, image)
    assert Resize(width=224)(deferred(40960, 16), None).pending()[1] == (224, 1)  # a side of 1 is an image
