"""Every number in a v2 transform spec is bounded when the spec is built, not found out by OpenCV or NumPy later.

A bad number is a PicPacValueError (a non-number a PicPacTypeError) naming the transform, the key, the
allowed range and the value; a number at a bound still builds and runs.
"""
from __future__ import annotations

import re

import cv2
import numpy as np
import pytest

import picpac
from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.image.decoding import MAX_SIDE
from picpac.image.specs import build
from picpac.transforms import Sample

PNG = cv2.imencode(".png", np.full((3, 4, 3), 100, np.uint8))[1].tobytes()  # a real 4x3 (W x H) image


def bound_error(kind: str, key: str, low, high, value: str, where: str = "[0]") -> str:
    """The message Spec.value gives, as a regex."""
    return re.escape(f"transform {where} ({kind!r}): {key!r} must be in [{low}, {high}], got ") + value


# -- the fuzzer's reproducers: each used to reach OpenCV / NumPy from ImageLoader.load_binary ---------------
@pytest.mark.parametrize("spec, key, low, high, value", [
    ({"type": "augment.blur", "sigma": 1e300}, "sigma", 0, 256, r"1e\+300"),            # was cv2.error
    ({"type": "resize", "size": 2**40}, "size", 0, MAX_SIDE, "1099511627776"),          # was cv2.error
    ({"type": "pad", "width": 2**31}, "width", 0, MAX_SIDE, "2147483648"),              # was cv2.error
    ({"type": "erode_mask", "radius": 2**31}, "radius", 0, 1024, "2147483648"),         # was ValueError
    ({"type": "keypoints.basic", "classes": 2**31}, "classes", 1, 2**16, "2147483648"),  # was MemoryError
])
def test_reproducers_fail_when_the_loader_is_made(spec, key, low, high, value):
    with pytest.raises(PicPacValueError, match=bound_error(spec["type"], key, low, high, value)):
        picpac.ImageLoader({"transforms": [spec]}).load_binary(PNG)
    with pytest.raises(PicPacValueError, match=bound_error(spec["type"], key, low, high, value)):
        picpac.ImageLoader({"transforms": [spec]})  # at build time, before any image


def test_reproducer_through_an_image_stream(tmp_path):
    path = tmp_path / "one.picpac"
    with picpac.Writer(path) as w:
        w.append(image=PNG, label=0)
    with pytest.raises(PicPacValueError, match=bound_error("pad", "width", 0, MAX_SIDE, "2147483648")):
        picpac.ImageStream(path, batch=1, transforms=[{"type": "pad", "width": 2**31}])


# -- one or more per builder: nan, inf, negative, gigantic ------------------------------------------------
@pytest.mark.parametrize("spec, key, low, high, value", [
    ({"type": "resize", "max_size": float("nan")}, "max_size", 0, MAX_SIDE, "nan"),
    ({"type": "resize", "width": 40, "min_size": float("inf")}, "min_size", 0, MAX_SIDE, "inf"),
    ({"type": "clip", "width": -1}, "width", 0, MAX_SIDE, "-1"),
    ({"type": "clip", "size": 8, "shift": 10**400}, "shift", 0, MAX_SIDE, "10{400}$"),  # no OverflowError
    ({"type": "clip", "round": 2**20}, "round", 0, MAX_SIDE, "1048576"),
    ({"type": "clip", "max_crop": float("nan")}, "max_crop", 0, MAX_SIDE, "nan"),
    ({"type": "pad", "top": -3}, "top", 0, MAX_SIDE, "-3"),
    ({"type": "pad", "size": 8, "border_value": float("inf")}, "border_value", -10**6, 10**6, "inf"),
    ({"type": "colorspace", "code": "BGR2GRAY", "mul0": float("nan")}, "mul0", -10**6, 10**6, "nan"),
    ({"type": "normalize", "mean": [0, float("inf"), 0]}, "mean", -10**6, 10**6, "inf"),
    ({"type": "normalize", "std": float("-inf")}, "std", -10**6, 10**6, "-inf"),
    ({"type": "augment.scale", "range": float("nan")}, "range", 0, 1, "nan"),
    ({"type": "augment.scale", "min": 0.5, "max": 1e9}, "max", 0, 100, r"1000000000\.0"),
    ({"type": "augment.rotate", "range": float("inf")}, "range", 0, 360, "inf"),
    ({"type": "augment.rotate", "min": -1e9, "max": 0}, "min", -360, 360, r"-1000000000\.0"),
    ({"type": "augment.add", "range": 1e9}, "range", 0, 255, r"1000000000\.0"),
    ({"type": "augment.add", "range2": float("nan")}, "range2", 0, 255, "nan"),
    ({"type": "augment.add", "min1": float("-inf")}, "min1", -255, 255, "-inf"),
    ({"type": "augment.blur", "sigma": [0, float("inf")]}, "sigma", 0, 256, "inf"),
    ({"type": "augment.blur", "max": 257}, "max", 0, 256, "257"),
    ({"type": "augment.affine", "rotate": float("nan")}, "rotate", -360, 360, "nan"),
    ({"type": "augment.affine", "shear": 90}, "shear", -89, 89, "90"),
    ({"type": "augment.affine", "translate": [0, 5]}, "translate", -1, 1, "5"),
    ({"type": "augment.affine", "scale": [0.5, 1e9]}, "scale", 0, 100, r"1000000000\.0"),
    ({"type": "sometimes", "chance": float("nan"), "transforms": []}, "chance", 0, 1, "nan"),
    ({"type": "some_of", "count": -1, "transforms": [{"type": "drop"}]}, "count", 0, 1, "-1"),
    ({"type": "some_of", "count": 2**40, "transforms": [{"type": "drop"}]}, "count", 0, 1, "1099511627776"),
    ({"type": "rasterize", "thickness": 2**31}, "thickness", -1, MAX_SIDE, "2147483648"),
    ({"type": "rasterize", "channels": 5}, "channels", 1, 4, "5"),
    ({"type": "rasterize", "copy": float("nan")}, "copy", -1, 2**16, "nan"),
    ({"type": "erode_mask", "iterations": 10**6}, "iterations", 0, 100, "1000000"),
    ({"type": "drop", "index": 2**40}, "index", 0, 2**16, "1099511627776"),
    ({"type": "anchors.dense.box", "downsize": 2**40}, "downsize", 1, MAX_SIDE, "1099511627776"),
    ({"type": "anchors.dense.box", "lower_th": float("nan")}, "lower_th", 0, 1, "nan"),
    ({"type": "anchors.dense.box", "priors": [[float("inf"), 4]]}, "priors", 0, MAX_SIDE, "inf"),
    ({"type": "anchors.dense.circle", "upper_th": 2}, "upper_th", 0, 1, "2"),
    ({"type": "anchors.dense.point", "params_default": float("inf")}, "params_default", -10**6, 10**6, "inf"),
    ({"type": "keypoints.basic", "radius": float("inf")}, "radius", 0, MAX_SIDE, "inf"),
    ({"type": "keypoints.basic", "downsize": 0}, "downsize", 1, MAX_SIDE, "0"),
    ({"type": "box_feature", "min_area": float("nan")}, "min_area", 0, MAX_SIDE**2, "nan"),
    ({"type": "box_feature", "max_boxes": 2**31}, "max_boxes", 0, 2**16, "2147483648"),
])
def test_out_of_range_numbers_name_type_key_range_and_value(spec, key, low, high, value):
    with pytest.raises(PicPacValueError, match=bound_error(spec["type"], key, low, high, value)):
        build([spec], random=True)


@pytest.mark.parametrize("spec, match", [
    ({"type": "pad", "left": 20000, "right": 20000}, rf"'pad'\): left \+ right must be in \[0, {MAX_SIDE}\], "
                                                      r"got 40000"),
    ({"type": "pad", "top": MAX_SIDE, "bottom": 1}, rf"'pad'\): top \+ bottom must be in \[0, {MAX_SIDE}\], "
                                                    rf"got {MAX_SIDE + 1}"),
    ({"type": "anchors.dense.box", "priors": [[4, 4]] * (2**16 + 1)}, "'priors' must have at most 65536 pairs"),
])
def test_sums_and_lengths_are_bounded(spec, match):
    with pytest.raises(PicPacValueError, match=match):
        build([spec], random=True)


def test_numpy_numbers_and_nested_specs_are_checked():
    with pytest.raises(PicPacValueError, match=r"'augment.rotate'\): 'range' must be in \[0, 360\], got .*nan"):
        build([{"type": "augment.rotate", "range": np.float64("nan")}], random=True)
    nested = {"type": "sometimes", "transforms": [{"type": "one_of", "transforms": [
        {"type": "augment.blur", "min": 0, "max": float("inf")}]}]}
    with pytest.raises(PicPacValueError, match=bound_error("augment.blur", "max", 0, 256, "inf",
                                                           "[0].transforms[0].transforms[0]")):
        build([nested], random=False)


@pytest.mark.parametrize("spec, match", [
    ({"type": "augment.blur", "sigma": "big"}, "'sigma' must be a number or a"),
    ({"type": "resize", "size": True}, "'size' must be a number"),
    ({"type": "box_feature", "min_area": [1]}, "'min_area' must be a number"),
    ({"type": "resize", "size": 1.5}, "'size' must be a whole number"),
])
def test_wrong_types_are_type_errors(spec, match):
    with pytest.raises(PicPacTypeError, match=match):
        build([spec], random=True)


# -- at the bounds: still builds and runs ---------------------------------------------------------------------
@pytest.mark.parametrize("spec, shape", [
    ({"type": "resize", "width": MAX_SIDE, "height": 2}, (1, 3, 2, MAX_SIDE)),
    ({"type": "pad", "width": MAX_SIDE}, (1, 3, 3, MAX_SIDE)),
    ({"type": "pad", "left": MAX_SIDE - 4}, (1, 3, 3, MAX_SIDE)),
    ({"type": "clip", "width": MAX_SIDE, "height": 2, "shift": MAX_SIDE, "round": 2}, (1, 3, 2, MAX_SIDE)),
    ({"type": "augment.blur", "sigma": 256}, (1, 3, 3, 4)),
    ({"type": "augment.rotate", "min": -360, "max": 360}, (1, 3, 3, 4)),
    ({"type": "augment.affine", "rotate": 360, "shear": 89, "translate": 1, "scale": [0.01, 100]}, (1, 3, 3, 4)),
    ({"type": "augment.scale", "min": 100, "max": 100}, (1, 3, 300, 400)),
    ({"type": "augment.add", "range": 255}, (1, 3, 3, 4)),
    ({"type": "normalize", "mean": 10**6, "std": -10**6}, (1, 3, 3, 4)),
    ({"type": "sometimes", "chance": 1, "transforms": [{"type": "colorspace", "code": "BGR2RGB", "mul1": 10**6}]},
     (1, 3, 3, 4)),
])
def test_a_spec_at_its_bounds_runs(spec, shape):
    out = picpac.ImageLoader({"transforms": [spec], "v2": False}).load_binary(PNG)  # (float32: every value finite)
    assert out.shape == shape and np.isfinite(out).all()


def test_mask_and_target_specs_at_their_bounds_run():
    s = Sample(np.zeros((8, 8, 3), np.uint8), 0.0, 0, mask=np.ones((8, 8), np.uint8))
    rng = np.random.default_rng(0)
    for t in build([{"type": "erode_mask", "radius": 1024, "iterations": 1}], random=True):
        s = t(s, rng)
    assert s.mask.shape == (8, 8)
    built = build([{"type": "keypoints.basic", "classes": 2**16, "radius": MAX_SIDE, "downsize": MAX_SIDE},
                   {"type": "anchors.dense.box", "lower_th": 0, "upper_th": 1, "priors": [[MAX_SIDE, 0.5]]},
                   {"type": "box_feature", "min_area": MAX_SIDE**2, "max_boxes": 2**16},
                   {"type": "rasterize", "channels": 4, "thickness": MAX_SIDE}], random=True)
    assert built[0].classes == 2**16 and built[3].channels == 4
