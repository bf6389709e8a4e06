"""picpac.tools.explore.augment on its own: the checks load_config makes (and the message each refusal gives),
nested transform values, the digest, the cost estimate from the database's sizes, PNGs pixel for pixel, a run's
child process fed its pickled request, the bounded exchange's broken pipe, and a busy augmenter."""
from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys

import cv2
import numpy as np
import pytest

pytest.importorskip("yaml")

import picpac  # noqa: E402
from picpac.errors import PicPacError  # noqa: E402
from picpac.tools.explore import augment  # noqa: E402
from picpac.tools.explore.augment import (FIXED, MAX_DEPTH, MAX_PIXELS, Augmenter, ConfigRefused, Names,  # noqa: E402
                                          check_cost, config_digest, encode_png, exchange, load_config)

from helpers import make_db  # noqa: E402


def refusal(text: str) -> str:
    with pytest.raises(ConfigRefused) as caught:
        load_config(text)
    return str(caught.value)


def test_an_empty_config_gets_the_defaults_and_the_fixed_keys():
    for text in ("", "   \n", "{}", "# only a comment\n"):
        config, parsed = load_config(text)
        assert config == {"batch": 8, "max_pixels": MAX_PIXELS, **FIXED}
        assert parsed["batch"] == 8 and parsed["dtype"] == "uint8" and parsed["order"] == "NHWC"


def test_json_and_yaml_give_one_config():
    assert load_config('{"seed": 3, "pert_hflip": true}')[0] == load_config("seed: 3\npert_hflip: true\n")[0]


def test_a_key_that_names_a_file_is_refused_as_such():
    message = refusal("label_path: x")
    assert message.startswith("config key 'label_path' is not allowed in the explorer (it names a file or a database); "
                              "allowed: anno_color1, ")


def test_a_key_of_how_the_server_runs_is_refused_as_no_augmentation_key():
    assert refusal("backend: process").startswith("config key 'backend' is not allowed in the explorer (it is not an "
                                                  "augmentation, size or split key)")


@pytest.mark.parametrize("text, message", [
    ("1: 2", "config keys must be strings, got 1"),
    ("batch: true", "config key 'batch' (the samples shown) must be an int in [1, 32], got True"),
    ("batch: 0", "config key 'batch' (the samples shown) must be an int in [1, 32], got 0"),
    ("batch: 2.0", "config key 'batch' (the samples shown) must be an int in [1, 32], got 2.0"),
    ("max_pixels: 16777217", "config key 'max_pixels' must be an int in [1, 16,777,216] in the explorer, got 16777217"),
    ("max_pixels: true", "config key 'max_pixels' must be an int in [1, 16,777,216] in the explorer, got True"),
    ("- a\n- b", "the config must be a mapping of keys to values, got list"),
    ("just text", "the config must be a mapping of keys to values, got str"),
])
def test_load_config_refusals(text, message):
    assert refusal(text) == message


def test_a_config_text_past_the_limit_is_refused_before_it_is_parsed():
    assert refusal("#" * 20_001) == "the config is 20,001 characters long; at most 20,000 are accepted"


def test_values_are_checked_by_the_streams_own_parse():
    with pytest.raises(PicPacError, match="pert_angle"):
        load_config("pert_angle: lots")


def test_transforms_hold_no_key_naming_a_file_at_any_depth():
    text = json.dumps({"transforms": [{"type": "sometimes", "transforms": [{"type": "augment.blur",
                                                                            "maskDir": "/tmp"}]}]})
    assert refusal(text) == ("config key 'transforms.transforms': key 'maskDir' is not allowed in the explorer "
                             "(it names a file)")
    assert refusal("transforms: [{1: 2}]") == "config key 'transforms': key '1' is not allowed in the explorer " \
                                              "(it names a file)"


def test_transforms_nested_deeper_than_the_bound_are_refused():
    deep = {"transforms": [[]]}
    inner = deep["transforms"][0]
    for _ in range(MAX_DEPTH):
        inner.append([])
        inner = inner[0]
    assert refusal(json.dumps(deep)) == f"config key 'transforms' is nested more than {MAX_DEPTH} levels deep"


def test_the_digest_is_twenty_hex_of_the_configs_content():
    a = config_digest({"seed": 1, "batch": 2})
    assert len(a) == 20 and int(a, 16) >= 0
    assert a == config_digest({"batch": 2, "seed": 1}) != config_digest({"batch": 2, "seed": 2})
    assert len(config_digest({"x": {1}})) == 20  # a value JSON has no form for: digested by its text


def parsed(text: str):
    return load_config(text)[1]


def test_the_estimate_passes_a_config_within_the_bounds():
    check_cost(parsed("resize_width: 64\nresize_height: 48\nbatch: 32"), [(640, 480), (4000, 3000)])
    check_cost(parsed("crop_width: 64\ncrop_height: 48"), [])


def test_the_estimate_names_the_step_the_size_and_the_bound():
    with pytest.raises(ConfigRefused) as caught:
        check_cost(parsed("resize_width: 8000"), [(400, 300), (300, 400)])
    assert str(caught.value) == ("config key 'resize_width' makes the database's 300x400 images 8000x10667 "
                                 "(85,336,000 pixels), more than max_pixels=16,777,216 (the explorer's bound on every "
                                 "image a run makes); lower it")


def test_an_image_the_stream_refuses_is_not_counted():
    check_cost(parsed("max_pixels: 1000\nmax_size: 40"), [(5000, 5000), (20, 20)])  # 40x40 only of the 5000x5000


def test_the_estimate_of_a_batch_of_outputs():
    with pytest.raises(ConfigRefused, match=r"^32 samples of up to 4,000,000 pixels are more than the explorer's "
                                            r"256 MiB per run; lower 'batch' or the size$"):
        check_cost(parsed("batch: 32\nresize_width: 2000\nresize_height: 2000"), [(100, 100)])
    with pytest.raises(ConfigRefused, match="^32 samples of up to 4,000,000 pixels"):  # no sizes: the fixed size
        check_cost(parsed("batch: 32\ncrop_width: 2000\ncrop_height: 2000"), [])
    check_cost(parsed("batch: 32\nresize_width: 2000"), [])  # no sizes, no fixed size: nothing to estimate


@pytest.mark.parametrize("shape", [(5, 7), (5, 7, 1), (5, 7, 3), (5, 7, 4)])
def test_encode_png_is_the_samples_rgb_pixels(shape):
    sample = np.random.default_rng(1).integers(0, 256, shape, np.uint8)
    back = cv2.imdecode(np.frombuffer(encode_png(sample), np.uint8), cv2.IMREAD_UNCHANGED)
    if len(shape) == 3 and shape[2] == 3:
        back = cv2.cvtColor(back, cv2.COLOR_BGR2RGB)
    elif len(shape) == 3 and shape[2] == 4:
        back = cv2.cvtColor(back, cv2.COLOR_BGRA2RGBA)
    assert np.array_equal(back, sample.reshape(back.shape))


CHILD = [sys.executable, "-c", "from picpac.tools.explore.augment import child; child()"]
SHAPES = Names(("image", "annotation"), ("background", "box", "dot"), "shapes")


def run_child(path, config: dict, output: int = 1 << 20, names: Names = Names(("image",))) -> tuple:
    done = subprocess.run(CHILD, input=pickle.dumps((str(path), config, 1 << 30, output, names)), capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return pickle.loads(done.stdout)


def bgr(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def test_a_run_replies_the_streams_first_batch_as_pngs(tmp_path):
    db = make_db(tmp_path / "db.picpac", n=6, size=(40, 30))
    config = load_config("seed: 4\nbatch: 3\npert_hflip: true\nperturb: true")[0]
    kind, outputs = run_child(db, config)
    assert kind == "ok" and len(outputs) == 3
    with picpac.ImageStream(db, **config) as stream:
        images, labels, _ = next(iter(stream))
    for output, image, want in zip(outputs, images, labels):
        back = cv2.cvtColor(bgr(output["png"]), cv2.COLOR_BGR2RGB)
        assert np.array_equal(back, image)
        assert (output["label"], output["shapes"], output["width"], output["height"]) == (float(want), "", 40, 30)
        drawn = cv2.cvtColor(bgr(output["drawn"]), cv2.COLOR_BGR2RGB)
        # no annotations: the label is written in the corner, every other pixel is the stream's
        assert not np.array_equal(drawn[:16, :16], image[:16, :16])
        assert np.array_equal(drawn[16:], image[16:]) and np.array_equal(drawn[:, 16:], image[:, 16:])


def shapes_db(path) -> str:
    """Three flat grey 80x64 PNGs labelled 0, 1, 2, each with a box (class 1) at x 10..40, y 8..48 and a point
    (class 2) at (60, 50)."""
    shapes = {"shapes": [{"type": "rect", "label": 1, "geometry": {"x": 10 / 80, "y": 8 / 64, "width": 30 / 80,
                                                                     "height": 40 / 64}},
                         {"type": "point", "label": 2, "geometry": {"x": 60 / 80, "y": 50 / 64}}]}
    with picpac.Writer(path, metadata={"classes": list(SHAPES.classes)}) as w:
        for i in range(3):
            w.append(image=cv2.imencode(".png", np.full((64, 80, 3), 40, np.uint8))[1].tobytes(),
                     annotation=json.dumps(shapes).encode(), label=i)
    return str(path)


@pytest.mark.parametrize("keys", ["task: detect\nannotate: json", "task: keypoints\nannotate: json",
                                  "task: segment\nannotate: json", "annotate: json", ""])
def test_a_run_draws_boxes_with_their_classes_and_points_for_every_task(tmp_path, keys):
    db = shapes_db(tmp_path / "shapes.picpac")
    kind, outputs = run_child(db, load_config(f"batch: 2\nshuffle: false\n{keys}")[0], names=SHAPES)
    assert kind == "ok" and [o["label"] for o in outputs] == [0.0, 1.0]
    for output in outputs:
        assert output["shapes"] == "2 shapes: 1 box, 2 dot"
        assert (bgr(output["png"]) == 40).all()  # the stream's pixels: no drawing
        drawn = bgr(output["drawn"])
        assert drawn[28, 10].tolist() == [0, 200, 0] and drawn[28, 39].tolist() == [0, 200, 0]  # the box, class 1
        segment = "annotate" in keys and "task: detect" not in keys and "task: keypoints" not in keys
        inside = [20, 120, 20] if segment else [40, 40, 40]  # a segmentation mask asked for: blended in green
        assert drawn[28, 11:39].tolist() == [inside] * 28
        assert drawn[50, 58].tolist() == [255, 0, 0] and drawn[50, 62].tolist() == [255, 0, 0]  # the point, class 2
        assert (drawn[:8, 12:40] != 40).any()  # the caption "1 box" above the box


def test_a_run_blends_a_mask_in(tmp_path):
    mask = np.zeros((30, 40), np.uint8)
    mask[16:28, 16:36] = 2  # (clear of the label in the top left corner)
    with picpac.Writer(tmp_path / "masks.picpac") as w:
        w.append(image=cv2.imencode(".png", np.zeros((30, 40, 3), np.uint8))[1].tobytes(),
                 mask=cv2.imencode(".png", mask)[1].tobytes())
    kind, outputs = run_child(tmp_path / "masks.picpac", load_config("batch: 1")[0],
                              names=Names(("image", "mask")))
    assert kind == "ok" and (bgr(outputs[0]["png"]) == 0).all()
    drawn = bgr(outputs[0]["drawn"])
    assert (drawn[16:28, 16:36] == [128, 0, 0]).all()  # class 2's blue, half and half with black
    assert (drawn[16:, :16] == 0).all() and (drawn[:, 36:] == 0).all() and (drawn[:16, 16:] == 0).all()


def test_a_run_refuses_pngs_past_its_output_bound(tmp_path):
    db = make_db(tmp_path / "db.picpac", n=4)
    kind, message = run_child(db, load_config("batch: 2")[0], output=10)
    assert kind == "refused" and message.startswith("the run's PNGs add up to ")
    assert " bytes after 1 of 2 samples, more than the explorer's 0 MiB per run; lower 'batch' or the size" in message


def test_a_run_of_a_database_that_is_gone_is_refused_naming_it(tmp_path):
    kind, message = run_child(tmp_path / "gone.picpac", load_config("")[0])
    assert kind == "refused" and str(tmp_path / "gone.picpac") in message


def test_exchange_with_a_process_that_ends_before_it_reads():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write('gone early\\n')"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.wait()
    out, err = exchange(process, b"x" * (4 << 20), 1 << 20)  # more than a pipe holds: the write breaks
    assert (bytes(out), err, process.returncode) == (b"", b"gone early\n", 0)


def test_a_busy_augmenter_says_so_without_starting_a_run(tmp_path, monkeypatch):
    db = make_db(tmp_path / "db.picpac", n=2)
    monkeypatch.setattr(augment, "LOCK_WAIT", 0.2)
    augmenter = Augmenter(str(db), lambda: [(8, 6)])

    async def while_another_runs():
        await augmenter._lock.acquire()

        async def present() -> bool:
            return False
        with pytest.raises(PicPacError, match="^the explorer is busy with another augmentation run; try again$"):
            await augmenter.run("batch: 1", present)
    asyncio.run(while_another_runs())
    assert augmenter.started == 0



def test_a_yaml_alias_is_refused_before_it_expands():
    """Six levels of ten aliases each would be 10**6 lists: refused at the first alias, at once."""
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg"))
    assert refusal(text) == "the config uses a YAML alias (*name); the explorer does not expand them: write the value out"
    assert refusal("a: &a {seed: 1}\n<<: *a") == refusal(text)  # a merge key reads an alias too


def test_the_values_a_config_holds_are_bounded_while_parsing_and_after():
    assert augment.MAX_NODES == 2000
    many = "transforms:\n" + "".join(f"- {{type: flip, p: {i}}}\n" for i in range(700))  # 2,801 values
    assert refusal(many) == "the config holds more than 2,000 values; the explorer runs smaller ones"
    as_json = json.dumps({"transforms": [{"type": "flip", "p": i} for i in range(700)]})
    assert refusal(as_json) == "the config holds more than 2,000 values; the explorer runs smaller ones"
    assert refusal("[" * 5000 + "]" * 5000).startswith("the config is nested too deeply")


def test_a_mistyped_key_gets_a_did_you_mean_and_resize_shorter_is_a_size_key():
    assert refusal("resize_widht: 64") == "unknown config key 'resize_widht'; did you mean 'resize_width'?"
    assert refusal("resize_shorterr: 64") == "unknown config key 'resize_shorterr'; did you mean 'resize_shorter'?"
    assert parsed("resize_shorter: 64").augment.resize_shorter == 64
    with pytest.raises(ConfigRefused, match=r"^config key 'resize_shorter' makes the database's 300x200 images "
                                            r"7500x5000 \(37,500,000 pixels\)"):
        check_cost(parsed("resize_shorter: 5000"), [(300, 200)])
    with pytest.raises(ConfigRefused, match=r"^config key 'resize_shorter' makes the database's 2x3000 images "
                                            r"256x384000 "):
        check_cost(parsed("resize_shorter: 256"), [(2, 3000)])
