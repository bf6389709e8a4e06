"""picpac.stream.legacy on its own: each PicPac key translate() maps and to what, the accepted no-op keys warned
once per process, PicPac's perturbation as steps in its order, and SameColor's pixels."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from picpac.errors import PicPacTypeError, PicPacValueError
from picpac.image.color import AddColor
from picpac.image.transforms import Affine, Crop, Flip, RoundSize, Sample
from picpac.stream.config import Augment, StreamConfig
from picpac.stream.legacy import NO_OPS, PicPacConfigWarning, SameColor, perturbation, translate


# -- translate ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, want", [
    ({"bgr2rgb": True}, {"colorspace": "RGB"}),
    ({"bgr2rgb": 0}, {"colorspace": "BGR"}),
    ({"channel_first": True}, {"order": "NCHW"}),
    ({"channel_first": False}, {"order": "NHWC"}),
    ({"bgr2rgb": 1, "channel_first": 0, "batch": 4}, {"colorspace": "RGB", "order": "NHWC", "batch": 4}),
])
def test_bgr2rgb_and_channel_first(given, want):
    assert translate(given) == want


def test_bgr2rgb_and_channel_first_refuse_non_booleans_and_their_new_name_beside():
    with pytest.raises(PicPacTypeError, match=r"^config key 'bgr2rgb' must be True or False, got 'yes'$"):
        translate({"bgr2rgb": "yes"})
    with pytest.raises(PicPacTypeError, match=r"^config key 'channel_first' must be True or False, got 2$"):
        translate({"channel_first": 2})
    with pytest.raises(PicPacValueError, match=r"^config keys 'bgr2rgb' and 'colorspace' both given; use only the latter"):
        translate({"bgr2rgb": True, "colorspace": "RGB"})
    with pytest.raises(PicPacValueError, match=r"^config keys 'channel_first' and 'order' both given"):
        translate({"channel_first": True, "order": "NCHW"})


@pytest.mark.parametrize("given, want", [
    # PicPac subtracts mean_color1..3 from OpenCV's channels (B, G, R), before its bgr2rgb swap
    ({"mean_color1": 1, "mean_color2": 2, "mean_color3": 3}, {"mean": (3.0, 2.0, 1.0)}),  # RGB output: reversed
    ({"mean_color1": 1, "mean_color2": 2, "mean_color3": 3, "bgr2rgb": True},
     {"colorspace": "RGB", "mean": (3.0, 2.0, 1.0)}),
    ({"mean_color1": 1, "mean_color2": 2, "mean_color3": 3, "bgr2rgb": False},
     {"colorspace": "BGR", "mean": (1.0, 2.0, 3.0)}),
    ({"mean_color1": 1.5, "mean_color3": 3, "colorspace": "bgr"}, {"colorspace": "bgr", "mean": (1.5, 0.0, 3.0)}),
    ({"mean_color1": 7, "mean_color2": 2, "mean_color3": 3, "channels": 1}, {"channels": 1, "mean": (7.0,)}),
    ({"mean_color1": 0, "mean_color2": 0.0}, {}),  # all zero: no mean at all
])
def test_mean_colors(given, want):
    got = translate(given)
    assert got == want and all(type(v) is float for v in got.get("mean", ()))


def test_mean_colors_and_mean_refused_together_and_typed():
    with pytest.raises(PicPacValueError, match=r"^config keys 'mean_color1..3' and 'mean' both given; use only 'mean'$"):
        translate({"mean_color2": 1, "mean": [1, 2, 3]})
    with pytest.raises(PicPacTypeError, match=r"^config key 'mean_color3' must be a number, got '9'$"):
        translate({"mean_color3": "9"})
    with pytest.raises(PicPacTypeError, match=r"^config key 'mean_color1' must be a number, got True$"):
        translate({"mean_color1": True})


@pytest.mark.parametrize("flag, channels", [
    (-1, -1),  # IMREAD_UNCHANGED: as stored
    (0, 1),  # IMREAD_GRAYSCALE
    (1, 3),  # IMREAD_COLOR
    (2, 1),  # IMREAD_ANYDEPTH: gray
    (3, 3),  # ANYDEPTH | COLOR
    (4, -1),  # IMREAD_ANYCOLOR: as stored
    (5, -1),
])
def test_decode_mode_flags_as_channels(flag, channels):
    assert translate({"decode_mode": flag}) == {"channels": channels}
    assert translate({"decode_mode": flag, "channels": 0}) == {"channels": channels}  # PicPac's 0: unset
    assert translate({"decode_mode": flag, "channels": -1}) == {"channels": channels}
    assert translate({"decode_mode": flag, "channels": 3}) == {"channels": 3}  # converted to channels when set
    assert translate({"decode_mode": flag, "channels": 1}) == {"channels": 1}


def test_decode_mode_must_be_an_int():
    with pytest.raises(PicPacTypeError, match=r"^config key 'decode_mode' must be an OpenCV imread flag \(an int\), "
                                              r"got 'color'$"):
        translate({"decode_mode": "color"})
    with pytest.raises(PicPacTypeError, match="decode_mode"):
        translate({"decode_mode": True})


def test_unset_sizes_channels_threads_and_preload():
    sizes = ("resize_width", "resize_height", "crop_width", "crop_height", "min_size", "max_size")
    assert translate(dict.fromkeys(sizes, -1)) == dict.fromkeys(sizes, 0)
    assert translate({"resize_width": -7, "resize_height": 32}) == {"resize_width": 0, "resize_height": 32}
    assert translate({"resize_width": 0, "max_size": 5}) == {"resize_width": 0, "max_size": 5}
    assert translate({"channels": 0}) == {"channels": -1}
    assert translate({"channels": 3}) == {"channels": 3}
    assert translate({"threads": 0, "preload": 0}) == {}
    assert translate({"preload": 9}) == {"preload": 9}
    config = StreamConfig.from_dict({"threads": 0, "preload": 0, "resize_width": -1, "channels": 0})
    assert (config.parallelism.workers, config.parallelism.preload) == (None, None)
    assert (config.augment.resize_width, config.decode.channels) == (0, -1)


def test_threads_is_workers():
    assert translate({"threads": 4}) == {"workers": 4}
    assert translate({"threads": 4, "workers": 4}) == {"workers": 4}
    assert translate({"threads": 4, "workers": None}) == {"workers": 4}
    assert translate({"threads": None, "workers": 3}) == {"workers": 3}
    with pytest.raises(PicPacValueError, match=r"^config keys 'threads' \(2\) and 'workers' \(3\) are two names of one "
                                               r"count .*give one$"):
        translate({"threads": 2, "workers": 3})
    config = StreamConfig.from_dict({"threads": 6})
    assert config.parallelism.workers == config["workers"] == config["threads"] == 6
    assert "threads" not in config.given and config.given["workers"] == 6


@pytest.mark.parametrize("images, want", [([2], {"image_field": 2}), (3, {"image_field": 3}), ([0], {}), (0, {}),
                                          ([], {}), (None, {})])
def test_images(images, want):
    assert translate({"images": images}) == want


def test_images_names_one_field():
    with pytest.raises(PicPacValueError, match=r"^config key 'images': \[1, 2\] names several fields; one is supported$"):
        translate({"images": [1, 2]})
    with pytest.raises(PicPacTypeError, match=r"^config key 'images': a field index must be an int, got 'a'$"):
        translate({"images": ["a"]})
    with pytest.raises(PicPacValueError, match=r"^config keys 'images' \(\[2\]\) and 'image_field' both given; use only "
                                               r"'image_field'$"):
        translate({"images": [2], "image_field": "pixels"})


@pytest.mark.parametrize("annotate, want", [
    (True, {"annotate": "any", "annotation_field": 1}),  # PicPac 2018: the record's field 1
    ([1], {"annotate": "any", "annotation_field": 1}),
    ([3], {"annotate": "any", "annotation_field": 3}),
    (2, {"annotate": "any", "annotation_field": 2}),
    ([0], {"annotate": "auto"}),  # the image itself is the target
    ([], {"annotate": None}),
    (False, {"annotate": False}),
    ("json", {"annotate": "json"}),
    ("image", {"annotate": "image"}),
])
def test_annotate(annotate, want):
    assert translate({"annotate": annotate}) == want


def test_annotate_with_annotation_field_given_too():
    with pytest.raises(PicPacValueError, match=r"^config keys 'annotate' \(\[1\]\) and 'annotation_field' both given; use "
                                               r"only 'annotation_field' \(with annotate='any'\)$"):
        translate({"annotate": [1], "annotation_field": 2})
    assert translate({"annotate": "json", "annotation_field": 2}) == {"annotate": "json", "annotation_field": 2}


def test_negate_and_multi_images():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PicPacConfigWarning)  # (once per process: the subprocess test sees it)
        assert translate({"negate": True}) == {"split_negate": True}
    assert translate({"multi_images": 1}) == {} and translate({"multi_images": 0}) == {}
    with pytest.raises(PicPacValueError, match=r"^config key 'multi_images' \(2\): PicPac's MultiImageStream"):
        translate({"multi_images": 2})


def test_translate_leaves_its_argument_and_other_keys_alone():
    given = {"bgr2rgb": True, "threads": 2, "batch": 8, "seed": 3}
    assert translate(given) == {"colorspace": "RGB", "workers": 2, "batch": 8, "seed": 3}
    assert given == {"bgr2rgb": True, "threads": 2, "batch": 8, "seed": 3}


def test_no_op_keys_are_dropped_and_warned_once_per_process():
    """In a fresh process: each key's first translate warns (a PicPacConfigWarning naming the key and why), later
    ones do not; another key warns on its own first use (negate, read as split_negate, too)."""
    script = textwrap.dedent("""
        import warnings
        from picpac.stream.legacy import NO_OPS, PicPacConfigWarning, translate
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                assert translate({"anno_palette": "tableau20", "batch": 2}) == {"batch": 2}
            first = len(caught)
            assert translate({"anno_number": True, "split_keys": [0], "anno_palette": 1}) == {}
            assert translate({"negate": 1}) == {"split_negate": 1}
            assert translate({"negate": 0, "anno_number": 2}) == {"split_negate": 0}
        for w in caught:
            assert w.category is PicPacConfigWarning, w.category
            print(w.message)
        print(first, len(caught))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    *messages, counts = out.stdout.splitlines()
    assert counts == "1 4"
    assert messages == [f"picpac: config key 'anno_palette': accepted and ignored: {NO_OPS['anno_palette']}",
                        f"picpac: config key 'anno_number': accepted and ignored: {NO_OPS['anno_number']}",
                        f"picpac: config key 'split_keys': accepted and ignored: {NO_OPS['split_keys']}",
                        "picpac: config key 'negate': read as split_negate (PicPac's README writes negate=, which "
                        "PicPac itself ignored)"]


# -- perturbation ------------------------------------------------------------------------------------------------
def test_perturbation_in_picpacs_order_with_its_parameters():
    a = Augment(perturb=True, pert_angle=15, pert_min_scale=0.8, pert_max_scale=1.2, pert_border="reflect",
                pert_hflip=True, pert_vflip=True, pert_color1=10, pert_color2=-20, pert_color3=30,
                pert_colorspace="HSV", crop_width=32, crop_height=24, round_div=8, round_mod=1)
    assert perturbation(a) == [Affine(rotate=15, scale=(0.8, 1.2), border="reflect"),
                               Flip(horizontal=0.5, vertical=0.5),
                               AddColor((10.0, 20.0, 30.0), colorspace="HSV"),  # |pert_color|
                               Crop(32, 24, random=True),
                               RoundSize(8, 1, random=True)]


@pytest.mark.parametrize("keys, want", [
    (dict(perturb=True), []),
    (dict(perturb=True, pert_angle=-5), [Affine(rotate=-5, scale=(1.0, 1.0), border="constant")]),
    (dict(perturb=True, pert_min_scale=0.5), [Affine(rotate=0.0, scale=(0.5, 1.0), border="constant")]),
    (dict(perturb=True, pert_vflip=True), [Flip(horizontal=0.0, vertical=0.5)]),
    (dict(perturb=True, pert_hflip=True), [Flip(horizontal=0.5, vertical=0.0)]),
    (dict(perturb=True, pert_color2=4), [AddColor((0.0, 4.0, 0.0), colorspace="BGR")]),
    (dict(perturb=True, pert_color1=-9, pert_colorspace="SAME"), [SameColor(9.0)]),
    (dict(perturb=True, pert_color2=9, pert_colorspace="SAME"), []),  # SAME reads pert_color1 alone
    (dict(perturb=True, crop_width=10), [Crop(10, 0, random=True)]),
    (dict(perturb=True, round_div=4), [RoundSize(4, 0, random=True)]),
    # without perturb: the pert_* keys do nothing, crop and round are their deterministic centre versions
    (dict(pert_angle=30, pert_hflip=True, pert_color1=5, crop_height=10, round_div=4, round_mod=3),
     [Crop(0, 10, random=False), RoundSize(4, 3, random=False)]),
    (dict(perturb=False, pert_min_scale=0.5, crop_width=3), [Crop(3, 0, random=False)]),
])
def test_perturbation_steps(keys, want):
    steps = perturbation(Augment(**keys))
    assert steps == want  # (dataclasses: equal only to their own type)


def test_perturbation_from_a_stream_config():
    config = StreamConfig.from_dict({"perturb": True, "pert_colorspace": "", "pert_color1": 3, "pert_border": 1})
    assert config.augment.pert_colorspace == "BGR" and config.augment.pert_border == "replicate"
    assert perturbation(config.augment) == [AddColor((3.0, 0.0, 0.0), colorspace="BGR")]


# -- SameColor ---------------------------------------------------------------------------------------------------
def image() -> np.ndarray:
    pixels = np.array([[[0, 5, 250], [255, 100, 7]]], np.uint8)  # (1, 2, 3): every channel differs
    return pixels


@pytest.mark.parametrize("seed, delta", [(0, 8), (4, 27), (2, -14), (3, -25), (1, 1)])
def test_same_color_adds_one_value_to_every_channel_saturating(seed, delta):
    # the draw: round(uniform(-30, 30)) of the generator given
    assert round(np.random.default_rng(seed).uniform(-30, 30)) == delta
    sample = SameColor(30)(Sample(image(), 0.0, 0), np.random.default_rng(seed))
    want = np.clip(image().astype(int) + delta, 0, 255)
    assert sample.image.dtype == np.uint8 and sample.image.tolist() == want.tolist()


def test_same_color_pixels_written_out():
    got = SameColor(30)(Sample(image(), 0.0, 0), np.random.default_rng(4)).image  # +27
    assert got.tolist() == [[[27, 32, 255], [255, 127, 34]]]
    got = SameColor(30)(Sample(image(), 0.0, 0), np.random.default_rng(3)).image  # -25
    assert got.tolist() == [[[0, 0, 225], [230, 75, 0]]]


def test_same_color_zero_draw_and_float_images():
    pixels = image()
    sample = SameColor(0.4)(Sample(pixels, 0.0, 0), np.random.default_rng(0))  # round(0.11) = 0: untouched
    assert sample.image is pixels
    floats = np.array([[[-3.0, 300.0]]], np.float32)
    sample = SameColor(30)(Sample(floats, 0.0, 0), np.random.default_rng(0))  # +8, not clipped
    assert sample.image.dtype == np.float32 and sample.image.tolist() == [[[5.0, 308.0]]]
