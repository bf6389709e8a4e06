"""PicPac v2 transform specs (dicts) -> our transform objects: classes, parameters, nesting, random, errors."""
from __future__ import annotations

import json
from dataclasses import fields, is_dataclass

import cv2
import numpy as np
import pytest

import picpac
from picpac.color import AddColor, Blur, Normalize
from picpac.errors import PicPacError, PicPacTypeError, PicPacValueError
from picpac.image.shapes import Shapes
from picpac.image.specs import BUILDERS, UNSUPPORTED, Chain, ColorSpace, Drop, build
from picpac.transforms import (Affine, Crop, ErodeMask, Flip, LimitSize, OneOf, Pad, Rasterize, Resize, Rotate,
                               RoundSize, Sample, Scale, SomeOf, Sometimes)


def sample(channels: int = 3) -> Sample:
    """A 30x20 (W x H) RGB sample with a gradient, so geometry and colour changes show."""
    image = np.zeros((20, 30, 3), np.uint8)
    image[:, :, 0] = np.arange(30)[None, :] * 8
    image[:, :, 1] = np.arange(20)[:, None] * 12
    image[:, :, 2] = 200
    if channels == 1:
        image = image[:, :, 0].copy()
    return Sample(image, 0.0, 0, extra={"colorspace": "RGB"})


def run(specs: list, s: Sample | None = None, *, random: bool = True, seed: int = 0) -> Sample:
    s = sample() if s is None else s
    rng = np.random.default_rng(seed)
    for t in build(specs, random=random):
        s = t(s, rng)
    return s


def one(spec: dict, random: bool = True):
    built = build([spec], random=random)
    assert len(built) == 1, built
    return built[0]


def walk(obj):
    """Every transform object inside ``obj`` (itself included), through nested ``transforms``."""
    yield obj
    for t in getattr(obj, "transforms", ()):
        yield from walk(t)


# -- each type: class and parameters --------------------------------------------------------------
@pytest.mark.parametrize("spec, expected", [
    # resize: a size, or PicPac's min_size / max_size limits
    ({"type": "resize", "size": 64}, Resize(64, 64)),
    ({"type": "resize", "width": 40, "height": 30}, Resize(40, 30)),
    ({"type": "resize", "width": 40}, Resize(40, 0)),
    ({"type": "resize", "max_size": 420}, LimitSize(0, 420)),
    ({"type": "resize", "min_size": 100, "max_size": 400}, LimitSize(100, 400)),
    ({"type": "resize", "size": 200, "min_size": 100, "max_size": 400}, Resize(200, 200)),
    # pad (ours; PicPac has none)
    ({"type": "pad", "size": 32}, Pad(32, 32)),
    ({"type": "pad", "left": 1, "top": 2, "right": 3, "bottom": 4, "border_type": "replicate"},
     Pad(0, 0, (1, 2, 3, 4), border="replicate")),
    ({"type": "pad", "width": 50, "border_value": 7}, Pad(50, 0, fill=7)),
    # colorspace
    ({"type": "colorspace", "code": "BGR2HSV"}, ColorSpace("BGR2HSV")),
    ({"type": "colorspace", "code": "HSV2BGR", "mul1": 255.0}, ColorSpace("HSV2BGR", 1.0, 255.0)),
    ({"type": "colorspace", "code": "BGR2Lab", "mul0": 1 / 255}, ColorSpace("BGR2Lab", 1 / 255, 1.0)),
    # normalize: absent mean / std do nothing, as in PicPac
    ({"type": "normalize", "mean": 127, "std": 127}, Normalize(127.0, 127.0)),
    ({"type": "normalize", "mean": [1, 2, 3], "std": [4, 5, 6]}, Normalize((1.0, 2.0, 3.0), (4.0, 5.0, 6.0))),
    ({"type": "normalize", "mean": 10}, Normalize(10.0, 1.0)),
    # augment.flip: each enabled way with chance 1/2; PicPac's defaults: horizontal and vertical on
    ({"type": "augment.flip"}, Flip(0.5, 0.5, 0.0)),
    ({"type": "augment.flip", "horizontal": True, "vertical": False}, Flip(0.5, 0.0, 0.0)),
    ({"type": "augment.flip", "horizontal": True, "vertical": True, "transpose": True}, Flip(0.5, 0.5, 0.5)),
    # augment.scale: range r -> [1 - r, 1 + r], or min / max
    ({"type": "augment.scale", "range": 0.1}, Scale(0.9, 1.1)),
    ({"type": "augment.scale", "min": 0.8, "max": 1.2}, Scale(0.8, 1.2)),
    ({"type": "augment.scale"}, Scale(1.0, 1.0)),
    ({"type": "augment.scale", "range": 0.2, "max": 2}, Scale(0.8, 2.0)),
    # augment.rotate: range r -> [-r, r] degrees, or min / max; default 0
    ({"type": "augment.rotate", "range": 10}, Rotate(angle=10)),
    ({"type": "augment.rotate", "min": -10, "max": 10}, Rotate(angle=10)),
    ({"type": "augment.rotate", "min": -5, "max": 20}, Rotate(angle=(-5.0, 20.0))),
    ({"type": "augment.rotate"}, Rotate(angle=0)),
    ({"type": "augment.rotate", "range": 30, "border_type": "replicate"}, Rotate(angle=30, border="replicate")),
    # augment.add: PicPac's BGR channels, range / range1..3 / symmetric min_i, max_i
    ({"type": "augment.add", "range": 20}, AddColor((20, 20, 20), "BGR")),
    ({"type": "augment.add", "range1": 5, "range2": 6, "range3": 7}, AddColor((5, 6, 7), "BGR")),
    ({"type": "augment.add", "range": 20, "range2": 0}, AddColor((20, 0, 20), "BGR")),
    ({"type": "augment.add", "min1": -9, "max1": 9}, AddColor((9, 0, 0), "BGR")),
    ({"type": "augment.add", "range1": 10, "colorspace": "HSV"}, AddColor((10, 0, 0), "HSV")),
    # augment.blur (ours): sigma, or min / max
    ({"type": "augment.blur"}, Blur((0.0, 1.5))),
    ({"type": "augment.blur", "sigma": 2}, Blur(2.0)),
    ({"type": "augment.blur", "sigma": [0.5, 1]}, Blur((0.5, 1.0))),
    ({"type": "augment.blur", "min": 0.2, "max": 3}, Blur((0.2, 3.0))),
    # augment.affine (PicPac never implemented it): our Affine's fields
    ({"type": "augment.affine", "rotate": 10, "scale": [0.9, 1.1], "shear": 5, "translate": 0.1},
     Affine(rotate=10, scale=(0.9, 1.1), shear=5, translate=0.1)),
    ({"type": "augment.affine", "scale": 0.2, "rotate": [-5, 15]}, Affine(rotate=(-5.0, 15.0), scale=(0.8, 1.2))),
    ({"type": "augment.affine", "border_type": "reflect", "border_value": 3}, Affine(border="reflect", fill=3)),
    # rasterize: PicPac's copy / channels / dtype / use_tag / thickness
    ({"type": "rasterize"}, Rasterize()),
    ({"type": "rasterize", "use_tag": True, "dtype": "float32"}, Rasterize(color_by="tag", dtype="float32")),
    ({"type": "rasterize", "copy": 0, "channels": 3, "thickness": 2}, Rasterize(thickness=2, channels=3, copy=True)),
    ({"type": "rasterize", "index": 1, "copy": -1, "use_palette": False}, Rasterize()),
    # erode_mask: PicPac's default radius is 0
    ({"type": "erode_mask", "radius": 2, "iterations": 3}, ErodeMask(2, 3)),
    ({"type": "erode_mask"}, ErodeMask(0, 1)),
    ({"type": "drop"}, Drop()),
    ({"type": "drop", "index": 1}, Drop()),
])
def test_each_type_builds_its_class_and_parameters(spec, expected):
    assert one(spec) == expected


@pytest.mark.parametrize("spec, expected", [
    ({"type": "clip", "round": 16}, [RoundSize(16)]),
    ({"type": "clip", "round_width": 8, "round_height": 8}, [RoundSize(8)]),
    ({"type": "clip", "size": 32}, [Crop(32, 32)]),
    ({"type": "clip", "min": 24, "max": 24}, [Crop(24, 24)]),
    ({"type": "clip", "min_width": 24, "max_width": 24}, [Crop(24, 0)]),
    ({"type": "clip", "width": 24, "height": 16, "round": 8}, [Crop(24, 16), RoundSize(8)]),
    ({"type": "clip", "min": 40}, [Pad(40, 40)]),
    ({"type": "clip", "min_height": 40}, [Pad(0, 40)]),
    ({"type": "clip", "size": 32, "shift": 4}, [Pad(32, 32, (4, 4, 4, 4)), Crop(32, 32)]),
    ({"type": "clip", "size": 32, "shift_x": 4}, [Pad(32, 32, (4, 0, 4, 0)), Crop(32, 32)]),
    ({"type": "clip", "size": 32, "border_type": "replicate"}, [Pad(32, 32, border="replicate"), Crop(32, 32)]),
    ({"type": "clip", "size": 32, "border_value": 5}, [Crop(32, 32, fill=5)]),
    ({"type": "clip"}, []),
    ({"type": "clip", "shift": 0, "max_crop": 0, "round": 0}, []),
])
def test_clip_expands_to_pad_crop_and_round(spec, expected):
    built = build([spec], random=False)
    assert built == [type(e)(**{**{f.name: getattr(e, f.name) for f in fields(e)}, **(
        {"random": False} if "random" in {f.name for f in fields(e)} else {})}) for e in expected]


def test_callables_pass_through_unchanged():
    def mine(s, rng):
        return s

    flip = Flip()
    built = build([mine, {"type": "drop"}, flip], random=False)
    assert built[0] is mine and built[2] is flip and built[1] == Drop()
    assert build(None, random=True) == [] and build([], random=True) == []
    assert build({"type": "drop"}, random=True) == [Drop()]  # one spec alone is a list of one
    assert build(({"type": "drop"},), random=True) == [Drop()]  # the config hands over a tuple


# -- nesting --------------------------------------------------------------------------------------
def test_sometimes_some_of_and_one_of_nest():
    spec = {"type": "sometimes", "chance": 0.3, "transforms": [
        {"type": "augment.flip", "vertical": False},
        {"type": "some_of", "count": 2, "transforms": [
            {"type": "augment.rotate", "range": 10},
            {"type": "augment.scale", "range": 0.1},
            {"type": "one_of", "transforms": [{"type": "augment.blur", "sigma": 1}, {"type": "augment.add",
                                                                                     "range": 5}]},
        ]},
    ]}
    assert one(spec) == Sometimes(0.3, (Flip(0.5, 0.0), SomeOf(2, (Rotate(10), Scale(0.9, 1.1), OneOf(
        (Blur(1.0), AddColor((5, 5, 5))))))))


def test_nested_defaults_follow_picpac():
    assert one({"type": "sometimes", "transforms": [{"type": "drop"}]}) == Sometimes(0.5, (Drop(),))
    assert one({"type": "some_of", "transforms": [{"type": "drop"}, {"type": "drop"}]}).k == 1


def test_a_multi_step_spec_is_one_choice_in_one_of_and_some_of():
    built = one({"type": "one_of", "transforms": [{"type": "clip", "size": 16, "shift": 2}, {"type": "drop"}]})
    assert built.transforms[0] == Chain((Pad(16, 16, (2, 2, 2, 2)), Crop(16, 16, random=True)))
    assert built.transforms[1] == Drop()
    s = Chain(built.transforms[0].transforms)(sample(), np.random.default_rng(0))
    assert s.size == (16, 16)
    in_sometimes = one({"type": "sometimes", "transforms": [{"type": "clip", "size": 16, "shift": 2}]})
    assert len(in_sometimes.transforms) == 2  # applied in turn anyway: no Chain needed


@pytest.mark.parametrize("random", [True, False])
def test_random_flag_reaches_every_transform_including_nested(random):
    specs = [
        {"type": "augment.flip"}, {"type": "augment.scale", "range": 0.1}, {"type": "augment.rotate", "range": 10},
        {"type": "augment.add", "range": 10}, {"type": "augment.blur"}, {"type": "augment.affine", "rotate": 5},
        {"type": "clip", "size": 16, "round": 8},
        {"type": "sometimes", "transforms": [
            {"type": "one_of", "transforms": [{"type": "clip", "size": 8, "shift": 1}, {"type": "augment.flip"}]},
            {"type": "some_of", "count": 1, "transforms": [{"type": "augment.rotate", "range": 3},
                                                           {"type": "augment.scale", "min": 0.5, "max": 2}]}]},
    ]
    seen = [t for top in build(specs, random=random) for t in walk(top)]
    flagged = [t for t in seen if is_dataclass(t) and "random" in {f.name for f in fields(t)}]
    assert len(flagged) == 15
    assert all(t.random is random for t in flagged), [t for t in flagged if t.random is not random]


def test_not_random_is_the_deterministic_centre():
    specs = [{"type": "augment.flip"}, {"type": "augment.rotate", "range": 10}, {"type": "augment.add", "range": 30},
             {"type": "clip", "size": 16}]
    results = {run(specs, random=False, seed=seed).image.tobytes() for seed in range(4)}
    assert len(results) == 1
    expected = sample().image[2:18, 7:23]  # no flip, no turn, no colour shift: the centred 16x16 crop
    np.testing.assert_array_equal(run(specs, random=False).image, expected)
    assert len({run(specs, random=True, seed=seed).image.tobytes() for seed in range(4)}) > 1


# -- applied to a real sample ---------------------------------------------------------------------
@pytest.mark.parametrize("specs, size", [
    ([{"type": "clip", "round": 16}], (16, 16)),
    ([{"type": "resize", "width": 40, "height": 30}], (40, 30)),
    ([{"type": "resize", "size": 24}], (24, 24)),
    ([{"type": "resize", "max_size": 15}], (15, 10)),
    ([{"type": "resize", "min_size": 40}], (60, 40)),
    ([{"type": "clip", "size": 32, "shift": 4}], (32, 32)),
    ([{"type": "clip", "width": 24, "height": 12}], (24, 12)),
    ([{"type": "clip", "min": 25}], (30, 25)),
    ([{"type": "clip", "size": 32, "border_type": "replicate"}], (32, 32)),
    ([{"type": "pad", "left": 1, "top": 2, "right": 3, "bottom": 4}], (34, 26)),
    ([{"type": "augment.scale", "min": 2, "max": 2}, {"type": "clip", "round": 16}], (48, 32)),
    ([{"type": "augment.flip", "transpose": True}, {"type": "augment.rotate", "range": 10},
      {"type": "resize", "width": 40, "height": 30}, {"type": "clip", "round": 16}], (32, 16)),
])
def test_pipeline_on_a_sample_gives_the_expected_size(specs, size):
    for random in (True, False):
        for seed in range(3):
            s = run(specs, random=random, seed=seed)
            assert s.size == size and s.image.shape[:2] == size[::-1]


def test_full_pipeline_with_shapes_rasterize_and_drop():
    doc = {"shapes": [{"type": "rect", "geometry": {"x": 0.2, "y": 0.25, "width": 0.4, "height": 0.5}, "label": 3}]}
    s = sample()
    s.shapes = Shapes.from_json(json.dumps(doc), 30, 20)
    specs = [{"type": "augment.flip", "horizontal": True, "vertical": False}, {"type": "augment.rotate", "range": 5},
             {"type": "augment.add", "range": 10}, {"type": "clip", "round": 16}, {"type": "rasterize"},
             {"type": "erode_mask", "radius": 1}]
    out = run(specs, s)
    assert out.image.shape == (16, 16, 3) and out.mask.shape == (16, 16) and out.mask.dtype == np.uint8
    assert set(np.unique(out.mask)) == {0, 3} and out.shapes is None
    dropped = run([{"type": "drop"}], out)
    assert dropped.mask is None and dropped.shapes is None


def test_drop_removes_shapes_too():
    s = sample()
    s.shapes = Shapes.from_json({"shapes": []}, 30, 20)
    s.mask = np.ones((20, 30), np.uint8)
    out = run([{"type": "augment.rotate", "range": 10}, {"type": "drop"}], s)
    assert out.shapes is None and out.mask is None and out.image.shape == (20, 30, 3)


def test_rasterize_with_tag_and_copy():
    doc = {"shapes": [{"type": "rect", "geometry": {"x": 0, "y": 0, "width": 0.5, "height": 0.5}, "label": 1,
                       "tag": 7}]}
    s = sample()
    s.shapes = Shapes.from_json(doc, 30, 20)
    tagged = run([{"type": "rasterize", "use_tag": True, "dtype": "float32"}], s)
    assert tagged.mask.dtype == np.float32 and tagged.mask[0, 0] == 7 and tagged.mask[-1, -1] == 0
    s = sample()
    s.shapes = Shapes.from_json(doc, 30, 20)
    copied = run([{"type": "rasterize", "copy": 0, "thickness": 1}], s)
    assert copied.mask.shape == (20, 30, 3) and copied.mask[-1, -1].tolist() == [232, 228, 200]


def test_normalize_applies():
    out = run([{"type": "normalize", "mean": 100, "std": 2}])
    assert out.image.dtype == np.float32
    np.testing.assert_allclose(out.image, (sample().image.astype(np.float32) - 100) / 2)


# -- colorspace -----------------------------------------------------------------------------------
def test_colorspace_follows_the_sample_order_and_marks_it():
    s = run([{"type": "colorspace", "code": "BGR2HSV"}])
    np.testing.assert_array_equal(s.image, cv2.cvtColor(sample().image, cv2.COLOR_RGB2HSV))
    assert s.extra["colorspace"] == "HSV"
    back = run([{"type": "colorspace", "code": "HSV2BGR"}], s)
    assert back.extra == {"colorspace": "RGB"}
    assert np.abs(back.image.astype(int) - sample().image).max() <= 4  # HSV round trip in uint8

    bgr = sample()
    bgr.extra = {"colorspace": "BGR"}
    lab = run([{"type": "colorspace", "code": "BGR2Lab"}], bgr)
    np.testing.assert_array_equal(lab.image, cv2.cvtColor(sample().image, cv2.COLOR_BGR2Lab))
    assert run([{"type": "colorspace", "code": "Lab2BGR"}], lab).extra["colorspace"] == "BGR"


def test_colorspace_gray_swap_and_multipliers():
    gray = run([{"type": "colorspace", "code": "BGR2GRAY"}])
    np.testing.assert_array_equal(gray.image, cv2.cvtColor(sample().image, cv2.COLOR_RGB2GRAY))
    assert run([{"type": "colorspace", "code": "GRAY2BGR"}], gray).image.shape == (20, 30, 3)
    swapped = run([{"type": "colorspace", "code": "BGR2RGB"}])
    np.testing.assert_array_equal(swapped.image, sample().image[:, :, ::-1])
    assert swapped.extra["colorspace"] == "BGR"
    scaled = run([{"type": "colorspace", "code": "BGR2HSV", "mul0": 1 / 255},
                  {"type": "colorspace", "code": "HSV2BGR", "mul1": 255}])
    assert scaled.image.dtype == np.float32 and scaled.extra["colorspace"] == "RGB"
    np.testing.assert_allclose(scaled.image, sample().image, atol=0.01)


def test_colorspace_errors():
    with pytest.raises(PicPacValueError, match="'BGR2HSV'"):
        build([{"type": "colorspace", "code": "BGR2HSVV"}], random=True)
    with pytest.raises(PicPacValueError, match="'code'"):
        build([{"type": "colorspace"}], random=True)
    with pytest.raises(PicPacValueError, match="in RGB"):
        run([{"type": "colorspace", "code": "HSV2BGR"}])
    with pytest.raises(PicPacValueError, match="3-channel"):
        run([{"type": "colorspace", "code": "BGR2HSV"}], sample(channels=1))


def test_picpacs_hsv_add_idiom_becomes_an_add_in_hsv():
    idiom = [{"type": "colorspace", "code": "BGR2HSV"}, {"type": "augment.add", "range1": 10, "range3": 4},
             {"type": "augment.add", "range2": 3}, {"type": "colorspace", "code": "HSV2BGR"}]
    assert build(idiom, random=True) == [AddColor((10, 0, 4), "HSV"), AddColor((0, 3, 0), "HSV")]
    nested = one({"type": "sometimes", "transforms": idiom})
    assert nested.transforms == (AddColor((10, 0, 4), "HSV"), AddColor((0, 3, 0), "HSV"))
    # scaled conversions are kept as they are; an add between them then fails loudly on the HSV image
    scaled = [{**idiom[0], "mul0": 1 / 255}, idiom[1], {**idiom[3], "mul1": 255}]
    assert [type(t) for t in build(scaled, random=True)] == [ColorSpace, AddColor, ColorSpace]
    with pytest.raises(PicPacValueError, match="got 'HSV'"):
        run([idiom[0], idiom[1], {**idiom[3], "mul1": 255}])


# -- errors ---------------------------------------------------------------------------------------
def test_unknown_type_suggests_the_closest_and_lists_supported():
    with pytest.raises(PicPacValueError) as info:
        build([{"type": "drop"}, {"type": "augment.rotat", "range": 10}], random=True)
    message = str(info.value)
    assert "'augment.rotat'" in message and "did you mean 'augment.rotate'?" in message and "[1]" in message
    for kind in BUILDERS:
        assert kind in message
    with pytest.raises(PicPacValueError, match="unknown type 'frobnicate'; supported types: anchors.dense.box, "
                                               "anchors.dense.circle, anchors.dense.point, augment.add"):
        build([{"type": "frobnicate"}], random=True)


@pytest.mark.parametrize("kind", ["clip_square", "mask", "wave.augment.add", "wave.augment.mul", "wave.augment.scale"])
def test_picpac_types_we_do_not_support_say_so(kind):
    assert kind in UNSUPPORTED
    with pytest.raises(PicPacValueError, match=f"PicPac type '{kind}' is not supported yet; supported types: "):
        build([{"type": kind, "range": 4}], random=True)


@pytest.mark.parametrize("kind", ["box_feature", "keypoints.basic", "anchors.dense.box", "anchors.dense.circle",
                                  "anchors.dense.point"])
def test_picpacs_dense_target_types_are_supported(kind):
    """They build from picpac.dense (tests/image/test_dense.py checks what they make)."""
    assert kind not in UNSUPPORTED and kind in BUILDERS
    assert type(build([{"type": kind}], random=True)[0]).__module__ == picpac.dense.__name__


def test_unknown_key_names_key_and_type():
    with pytest.raises(PicPacValueError, match=r"unknown key 'rnage' for type 'augment.rotate' \(did you mean "
                                               r"'range'\?\); its keys: border_type, border_value, max, min, range"):
        build([{"type": "augment.rotate", "rnage": 10}], random=True)
    with pytest.raises(PicPacValueError, match=r"transform \[0\].transforms\[1\]: unknown key 'probability' for "
                                               r"type 'augment.flip'"):
        build([{"type": "sometimes", "transforms": [{"type": "drop"}, {"type": "augment.flip", "probability": 1}]}],
              random=True)


@pytest.mark.parametrize("spec, key", [
    ({"type": "clip", "max": 100}, "'max'"),
    ({"type": "clip", "min": 10, "max": 100}, "'max'"),
    ({"type": "clip", "max_width": 100}, "'max_width'"),
    ({"type": "clip", "size": 32, "max_crop": 4}, "'max_crop'"),
    ({"type": "clip", "max_crop_height": 2}, "'max_crop_height'"),
    ({"type": "clip", "round_width": 16}, "'round_width'"),
    ({"type": "clip", "round": 16, "round_height": 8}, "'round_height'"),
    ({"type": "clip", "round": 16, "shift": 4}, "'shift'"),
    ({"type": "clip", "width": 16, "shift_y": 4}, "'shift_y'"),
    ({"type": "augment.add", "min1": -5, "max1": 10}, "'min1'"),
    ({"type": "augment.add", "max2": 10}, "'max2'"),
    ({"type": "rasterize", "use_palette": True}, "'use_palette'"),
    ({"type": "rasterize", "copy": 1}, "'copy'"),
    ({"type": "rasterize", "index": 2}, "'index'"),
    ({"type": "erode_mask", "border_type": "replicate"}, "'border_type'"),
    ({"type": "drop", "index": 0}, "'index'"),
])
def test_picpac_options_we_cannot_express_name_the_option(spec, key):
    with pytest.raises(PicPacValueError, match=f"PicPac option {key} .* is not supported yet"):
        build([spec], random=True)


@pytest.mark.parametrize("spec, error, match", [
    ({"type": "resize"}, PicPacValueError, "needs size"),
    ({"type": "resize", "size": 50, "max_size": 40}, PicPacValueError, "outside"),
    ({"type": "resize", "min_size": 50, "max_size": 40}, PicPacValueError, "above max_size"),
    ({"type": "resize", "size": -1}, PicPacValueError, r"'size' must be in \[0, 32766\], got -1"),
    ({"type": "resize", "size": 1.5}, PicPacTypeError, "whole number"),
    ({"type": "augment.rotate", "range": "ten"}, PicPacTypeError, "'range' must be a number"),
    ({"type": "augment.rotate", "min": 5, "max": -5}, PicPacValueError, "above max"),
    ({"type": "augment.rotate", "range": 5, "border_type": "mirror"}, PicPacValueError, "'border_type'"),
    ({"type": "augment.scale", "min": 0, "max": 1}, PicPacValueError, "0 < min <= max"),
    ({"type": "augment.flip", "horizontal": "yes"}, PicPacTypeError, "true or false"),
    ({"type": "augment.blur", "sigma": 1, "min": 0}, PicPacValueError, "not both"),
    ({"type": "augment.blur", "sigma": [2, 1]}, PicPacValueError, "empty"),
    ({"type": "augment.affine", "scale": 1.5}, PicPacValueError, "above 0"),
    ({"type": "normalize", "std": 0}, PicPacValueError, "non-zero"),
    ({"type": "normalize", "mean": [1, 2, 3, 4, 5]}, PicPacValueError, "1 to 4"),
    ({"type": "sometimes"}, PicPacValueError, "needs 'transforms'"),
    ({"type": "sometimes", "transforms": {"type": "drop"}}, PicPacTypeError, "must be a list"),
    ({"type": "sometimes", "chance": 2, "transforms": []}, PicPacValueError, r"\[0, 1\]"),
    ({"type": "some_of", "count": 3, "transforms": [{"type": "drop"}]}, PicPacValueError,
     r"'count' must be in \[0, 1\], got 3"),
    ({"type": "one_of", "transforms": []}, PicPacValueError, "at least one"),
    ({"type": "rasterize", "dtype": "float64"}, PicPacValueError, "'dtype'"),
    ({"range": 10}, PicPacValueError, "needs a 'type'"),
])
def test_bad_values(spec, error, match):
    with pytest.raises(error, match=match):
        build([spec], random=True)


def test_bad_entries_and_lists():
    with pytest.raises(PicPacTypeError, match="neither a dict"):
        build([42], random=True)
    with pytest.raises(PicPacTypeError, match="list of specs"):
        build("augment.flip", random=True)
    with pytest.raises(PicPacError):  # every error is one of ours
        build([{"type": "sometimes", "transforms": [{"type": "wave.augment.add"}]}], random=True)


def test_none_values_count_as_not_given():
    """Python-built configs (aardvark's) pass None for unset flags."""
    assert build([{"type": "clip", "width": None, "height": None, "round": 16, "shift": None}],
                 random=False) == [RoundSize(16, random=False)]
