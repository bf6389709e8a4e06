"""picpac.tools.explore.controls: the edits the augmentation page's controls make in its config text (lines and
comments kept), the edits a page may send, the values the controls show, the fold links and the re-roll."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("yaml")

from picpac.tools.explore.augment import DEFAULT_CONFIG, ConfigRefused, parse_text  # noqa: E402
from picpac.tools.explore.controls import (CONTROLS, EDITABLE, MAX_EDIT, REROLL_SEEDS, control_values,  # noqa: E402
                                           edit_config, fold_links, parse_updates, reroll)

TEXT = "# my config\nseed: 3\nbatch: 4   # four\nperturb: true\npert_angle: 10\ntransforms:\n  - {type: augment.flip}\n"


def test_an_edit_replaces_the_keys_own_line_and_keeps_the_others():
    edited = edit_config(TEXT, {"pert_angle": 45, "pert_hflip": True})
    assert edited == ("# my config\nseed: 3\nbatch: 4   # four\nperturb: true\npert_angle: 45\ntransforms:\n"
                      "  - {type: augment.flip}\npert_hflip: true\n")


def test_an_edit_of_none_drops_the_key():
    assert edit_config(TEXT, {"batch": None, "split": None}) == TEXT.replace("batch: 4   # four\n", "")


def test_an_edit_writes_strings_and_floats_that_parse_back():
    edited = edit_config("seed: 1\n", {"pert_colorspace": "HSV", "pert_min_scale": 0.85, "task": "detect"})
    assert edited == 'seed: 1\npert_colorspace: "HSV"\npert_min_scale: 0.85\ntask: "detect"\n'
    assert parse_text(edited) == {"seed": 1, "pert_colorspace": "HSV", "pert_min_scale": 0.85, "task": "detect"}


def test_a_json_text_stays_json():
    edited = edit_config('{"seed": 2, "batch": 3}', {"seed": 9, "batch": None, "pert_vflip": False})
    assert json.loads(edited) == {"seed": 9, "pert_vflip": False}


@pytest.mark.parametrize("text", ["pert_angle:\n  10\nseed: 1\n", "seed: 1\nseed: 2\n"])
def test_a_text_a_line_edit_would_misread_is_written_out_whole(text):
    edited = edit_config(text, {"pert_angle": 30})
    assert parse_text(edited) == {**parse_text(text), "pert_angle": 30}


def test_a_float_yaml_would_read_as_text_is_written_out_whole():
    edited = edit_config("seed: 1\n", {"pert_min_scale": 1e-05})  # json writes 1e-05: a string to YAML 1.1
    assert parse_text(edited) == {"seed": 1, "pert_min_scale": 1e-05}


def test_an_edit_of_a_text_that_does_not_parse_is_refused():
    with pytest.raises(ConfigRefused, match="neither JSON nor YAML"):
        edit_config("seed: [1\n", {"seed": 2})


@pytest.mark.parametrize("text, message", [
    ('{"db": "/etc/passwd"}', "an edit may set only the page's controls"),
    ('{"transforms": []}', "not 'transforms'"),
    ('{"seed": [1, 2]}', "an edit sets 'seed' to a number, a boolean, a short string or null, got [1, 2]"),
    ('{"task": "' + "x" * 41 + '"}', "a short string"),
    ("[1]", "must be a JSON object of keys to values, got list"),
    ("seed=1", "must be a JSON object of keys to values, got 'seed=1'"),
    ("{" + " " * MAX_EDIT + "}", f"at most {MAX_EDIT:,} characters"),
])
def test_a_page_sends_only_scalar_edits_of_its_controls(text, message):
    with pytest.raises(ConfigRefused, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_updates(text)


def test_a_page_edit_is_parsed():
    assert parse_updates('{"pert_angle": 20, "task": null, "split_negate": true}') == {
        "pert_angle": 20, "task": None, "split_negate": True}


def test_every_control_is_a_stream_key_the_explorer_allows():
    from picpac.tools.explore.augment import ALLOWED

    assert {c.key for c in CONTROLS} <= ALLOWED and EDITABLE <= ALLOWED


def test_the_controls_show_the_texts_values_and_the_defaults():
    values = control_values(DEFAULT_CONFIG)
    assert values["seed"] == 2016 and values["batch"] == 8 and values["pert_angle"] == 15.0
    assert values["perturb"] is True and values["pert_hflip"] is True and values["pert_vflip"] is False
    assert values["pert_colorspace"] == "BGR" and values["task"] == "" and values["annotate"] == ""
    values = control_values("task: detect\nannotate: json\npert_colorspace: HSV\n")
    assert (values["task"], values["annotate"], values["pert_colorspace"], values["batch"]) == ("detect", "json",
                                                                                                 "HSV", 1)


@pytest.mark.parametrize("text", ["seed: [1\n", "pert_angle: 999\n"])
def test_a_text_that_does_not_parse_shows_the_defaults(text):
    values = control_values(text)
    assert values["pert_angle"] == 0.0 and values["seed"] == 2016


def test_fold_links_edit_the_split_and_show_which_one_is_on():
    links = fold_links("seed: 1\n")
    assert [link["text"] for link in links] == ["all records"] + [f"fold {f} of 5" for f in range(5)]
    assert [link["on"] for link in links] == [True] + [False] * 5
    assert links[0]["edit"] == {"split": None, "split_fold": None, "split_negate": None}
    assert links[3]["edit"] == {"split": 5, "split_fold": 2, "split_negate": True}
    links = fold_links("split: 3\nsplit_fold: 1\nsplit_negate: true\n")
    assert [link["on"] for link in links] == [False, False, True, False]
    assert [link["on"] for link in fold_links("split: 3\nsplit_fold: 1\n")] == [False] * 4  # training folds
    assert len(fold_links("split: 1000\n")) == 33


def test_a_fold_links_edit_makes_the_text_of_that_fold():
    text = edit_config(DEFAULT_CONFIG, fold_links(DEFAULT_CONFIG)[2]["edit"])
    assert parse_text(text) == {**parse_text(DEFAULT_CONFIG), "split": 5, "split_fold": 1, "split_negate": True}
    assert fold_links(text)[2]["on"]
    assert parse_text(edit_config(text, fold_links(text)[0]["edit"])) == parse_text(DEFAULT_CONFIG)


def test_a_reroll_draws_a_new_seed():
    seeds = {reroll()["seed"] for _ in range(20)}
    assert len(seeds) > 1 and all(0 <= s < REROLL_SEEDS for s in seeds)
