"""StreamConfig (picpac/stream/config.py): every key in one typed group, from_dict the one way in from keys,
frozen, a read-only mapping of the flat names, and what ImageStream and the adapters take as it is."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import picpac
from picpac.stream.config import GROUP_OF, GROUPS, KEYS, Order, StreamConfig


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("groups") / "db.picpac"
    rng = np.random.default_rng(5)
    picpac.write_arrays(path, rng.integers(0, 256, (12, 8, 10, 3), np.uint8), np.arange(12) % 3)
    return str(path)


def test_every_key_is_a_field_of_exactly_one_group():
    names = [f.name for kind in GROUPS.values() for f in dataclasses.fields(kind)]
    assert len(names) == len(set(names)) == len(KEYS)
    assert set(GROUPS) == {"order", "parallelism", "split", "remote", "decode", "augment", "output"}
    assert (GROUP_OF["batch"], GROUP_OF["workers"], GROUP_OF["mixin"], GROUP_OF["cache_limit"], GROUP_OF["channels"],
            GROUP_OF["pert_angle"], GROUP_OF["order"]) == ("order", "parallelism", "split", "remote", "decode",
                                                            "augment", "output")


def test_from_dict_fills_typed_groups_and_the_flat_names_read_them():
    c = StreamConfig.from_dict({"batch": 4, "threads": 3, "channel_first": False, "mean_color1": 1,
                                "mean_color2": 2, "mean_color3": 3, "annotate": "json"})
    assert (c.order.batch, c.parallelism.workers, c.output.order, c.output.mean) == (4, 3, "NHWC", (3.0, 2.0, 1.0))
    assert c.output.task == "segment" and c.decode.annotate == "json"  # filled in together
    assert c["batch"] == 4 and c["workers"] == c["threads"] == 3 and c["order"] == "NHWC"
    assert dict(c) == c.to_dict() and set(c) == set(KEYS) and len(c) == len(KEYS)
    assert "threads" not in c.to_dict() and "threads" not in c.given and c.given["workers"] == 3


def test_a_config_is_frozen():
    c = StreamConfig.from_dict({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.order.batch = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.order = Order(batch=2)
    with pytest.raises(TypeError):
        c["batch"] = 2


def test_unknown_keys_keep_their_did_you_mean():
    with pytest.raises(picpac.PicPacValueError, match="unknown config key 'bach'; did you mean 'batch'"):
        StreamConfig.from_dict({"bach": 2})
    with pytest.raises(picpac.PicPacValueError, match="unknown config key 'thread'; did you mean 'threads'"):
        StreamConfig.from_dict({"thread": 2})


def test_threads_and_workers_are_one_count():
    assert StreamConfig.from_dict({"threads": 2, "workers": 2}).parallelism.workers == 2
    assert StreamConfig.from_dict({"threads": 0}).parallelism.workers is None  # PicPac's 0: the default
    with pytest.raises(picpac.PicPacValueError, match=r"'threads' \(2\) and 'workers' \(3\) are two names of one count"):
        StreamConfig.from_dict({"threads": 2, "workers": 3})
    with pytest.raises(picpac.PicPacTypeError, match="'workers' must be an int"):
        StreamConfig.from_dict({"threads": "2"})


def test_none_is_the_unset_value_of_every_key_whose_default_is_none():
    c = StreamConfig.from_dict({name: None for name, key in KEYS.items() if key.default is None})
    assert c == StreamConfig.from_dict({})
    with pytest.raises(picpac.PicPacTypeError, match="'batch' must be an int"):
        StreamConfig.from_dict({"batch": None})


def test_replace_makes_it_again_from_the_keys_it_was_made_from():
    c = StreamConfig.from_dict({"batch": 4, "loop": True})
    d = c.replace(seed=9)
    assert (d.order.batch, d.order.loop, d.order.seed) == (4, True, 9) and c.order.seed == 2016
    with pytest.raises(picpac.PicPacValueError, match="'batch' must be in"):
        c.replace(batch=0)


def test_a_config_pickles_with_its_keys():
    c = StreamConfig.from_dict({"batch": 4, "transforms": [{"type": "augment.flip", "horizontal": True}]})
    back = pickle.loads(pickle.dumps(c))
    assert back == c and back.given == c.given and back.replace(seed=1).augment.transforms == c.augment.transforms


def test_image_stream_takes_a_config_as_it_is(db):
    keys = dict(batch=4, loop=False, dtype="uint8", seed=3)
    config = StreamConfig.from_dict(keys)
    with picpac.ImageStream(db, **keys) as a, picpac.ImageStream(db, config) as b:
        assert b.config is config
        for x, y in zip(a, b, strict=True):
            assert all(np.array_equal(p, q) for p, q in zip(x[:-1], y[:-1])) and x[-1] == y[-1]
    with picpac.ImageStream(db, config, batch=6) as c:  # keys beside a config change it
        assert c.config.order.batch == 6 and c.config.output.dtype == "uint8" and len(c) == 2
    with pytest.raises(picpac.PicPacTypeError, match="config must be a StreamConfig"):
        picpac.ImageStream(db, {"batch": 2})


def test_the_torch_loader_takes_a_config_and_adds_its_defaults(db):
    from picpac.adapters.torch import TorchLoader
    config = StreamConfig.from_dict(dict(batch=4, dtype="uint8", seed=3))
    with TorchLoader(db, config) as a, TorchLoader(db, batch=4, dtype="uint8", seed=3) as b:
        assert a.stream.config == b.stream.config
        assert (a.stream.config.order.loop, a.stream.config.output.label_dtype) == (False, "int64")
        assert [x[1].tolist() for x in a] == [y[1].tolist() for y in b]
    with TorchLoader(db, config.replace(loop=True, label_dtype="float32")) as given:  # the adapter's defaults yield
        assert (given.stream.config.order.loop, given.stream.config.output.label_dtype) == (True, "float32")
    with pytest.raises(picpac.PicPacTypeError, match="config= takes a StreamConfig"):
        TorchLoader(db, {"batch": 4})
