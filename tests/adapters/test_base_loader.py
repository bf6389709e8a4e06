"""picpac.adapters.base: the rank defaults, the database-and-config forms every adapter accepts, and
StreamLoader's epochs, state and close as its stream's."""
from __future__ import annotations

import json

import pytest

import picpac
from picpac.adapters.base import StreamLoader, database_and_config, with_rank
from picpac.errors import PicPacError, PicPacTypeError, PicPacValueError
from helpers import make_db


@pytest.fixture
def db(tmp_path):
    """10 images labelled 0..9 (label i for record i)."""
    return make_db(tmp_path / "db.picpac", n=10)


class Loader(StreamLoader):
    """An adapter's loader in its smallest form: one stream, and a count of what it forgot ahead."""

    def __init__(self, path, **config):
        self.stream = picpac.ImageStream(path, **config)
        self.forgotten = 0

    def __iter__(self):
        return iter(self.stream)

    def _forget(self) -> None:
        self.forgotten += 1


def labels(batches) -> list[int]:
    return [int(x) for batch in batches for x in batch[1][:len(batch[1]) - batch[-1]]]


def test_with_rank_fills_only_what_the_config_leaves_out():
    assert with_rank({"batch": 4}, 2, 8) == {"batch": 4, "rank": 2, "world_size": 8}
    assert with_rank({"rank": None, "world_size": None}, 1, 3) == {"rank": 1, "world_size": 3}
    assert with_rank({"rank": 0, "world_size": 2}, 5, 9) == {"rank": 0, "world_size": 2}
    assert with_rank({"rank": 0}, 5, 9) == {"rank": 0, "world_size": 9}


def test_with_rank_leaves_the_given_config_alone():
    config = {"batch": 4}
    assert with_rank(config, 1, 2) is not config
    assert config == {"batch": 4}


def test_database_and_config_takes_a_path_and_keys():
    assert database_and_config("a.picpac", {"batch": 2}, "torch") == ("a.picpac", {"batch": 2})


def test_database_and_config_takes_picpacs_dict_form_and_keywords_override_it():
    given = {"db": "a.picpac", "batch": 2, "seed": 1}
    path, config = database_and_config(given, {"seed": 7}, "torch")
    assert (path, config) == ("a.picpac", {"batch": 2, "seed": 7})
    assert given == {"db": "a.picpac", "batch": 2, "seed": 1}


@pytest.mark.parametrize("path", [None, {"batch": 2}])
def test_database_and_config_without_a_database_names_the_adapter(path):
    with pytest.raises(PicPacTypeError, match=r"the jax adapter needs a database: its path, or \{'db': path, \.\.\.\}"):
        database_and_config(path, {}, "jax")


def test_database_and_config_refuses_a_ready_stream_and_says_what_takes_one(db):
    with picpac.ImageStream(db, batch=2) as stream:
        with pytest.raises(PicPacTypeError, match=r"the tf adapter builds its own ImageStream .*the stream's config "
                                                  r"keys, or use from_stream\(stream\)$"):
            database_and_config(stream, {}, "tf", ", or use from_stream(stream)")
        with pytest.raises(PicPacTypeError, match=r"via \{'db'\}"):
            database_and_config({"db": stream}, {}, "torch", " via {'db'}")


def test_stream_loader_sizes_are_the_streams(db):
    with Loader(db, batch=4, loop=False, split=2, split_fold=0) as loader:
        assert (len(loader), loader.size()) == (2, 5) == (len(loader.stream), loader.stream.size())


def test_set_epoch_goes_to_the_streams_epoch_and_forgets_what_is_ahead(db):
    with Loader(db, batch=5, loop=False, shuffle=True, seed=3) as loader, \
            picpac.ImageStream(db, batch=5, loop=False, shuffle=True, seed=3) as stream:
        stream.set_epoch(2)
        want = labels(stream)
        loader.set_epoch(2)
        assert loader.forgotten == 1
        assert labels(loader) == want and sorted(want) == list(range(10))
        with pytest.raises(PicPacValueError, match="set_epoch takes an int >= 0, got -1"):
            loader.set_epoch(-1)


def test_state_dict_resumes_after_the_batches_delivered(db):
    with Loader(db, batch=2, loop=False, shuffle=True, seed=5) as loader:
        batches = iter(loader)
        first = labels([next(batches), next(batches)])
        state = json.loads(json.dumps(loader.state_dict()))  # JSON-serialisable
        assert set(state) == {"stream"} and state["stream"] == loader.stream.state_dict()
        rest = labels(batches)
    assert len(first) == 4 and sorted(first + rest) == list(range(10))
    with Loader(db, batch=2, loop=False, shuffle=True, seed=5) as again:
        again.load_state_dict(state)
        assert again.forgotten == 1
        assert labels(again) == rest


@pytest.mark.parametrize("state", [None, {"epoch": 0}, [("stream", {})]])
def test_load_state_dict_refuses_what_state_dict_did_not_return_and_names_the_loader(db, state):
    with Loader(db, batch=2) as loader:
        with pytest.raises(PicPacValueError, match=r"^Loader\.load_state_dict takes what Loader\.state_dict\(\) "
                                                   rf"returned \(a dict with 'stream'\), not {type(state).__name__}$"):
            loader.load_state_dict(state)
        assert loader.forgotten == 0


def test_close_and_the_context_close_the_stream(db):
    loader = Loader(db, batch=2)
    with loader as entered:
        assert entered is loader
        assert next(iter(loader))[0].shape == (2, 3, 6, 8)
    with pytest.raises(PicPacError, match="the ImageStream is closed"):
        loader.state_dict()
    loader.close()  # twice: harmless, as the stream's
    other = Loader(db, batch=2)
    other.close()
    with pytest.raises(PicPacError, match="the ImageStream is closed"):
        other.stream.state_dict()

