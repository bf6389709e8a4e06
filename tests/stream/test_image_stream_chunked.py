"""ImageStream with shuffle_chunk / shuffle_window: each pass is the Sampler's chunked order of the pool (after the
split, in file order; a sharded dataset's global positions); it composes with splits, ranks, shards and resume,
shuffle_chunk=0 is the old order, shuffle=False ignores the keys, and bad values are refused naming the key."""
from __future__ import annotations

import json

import numpy as np
import pytest

import picpac
from picpac.sampling import Sampler, assign_folds, select

from helpers import make_db

N = 45
CHUNKED = dict(shuffle_chunk=4, shuffle_window=2)
SEED = 9


def stream(path, **config) -> picpac.ImageStream:
    return picpac.ImageStream(path, **{"seed": SEED, "workers": 2, "batch": 5, "resize_width": 8,
                                       "resize_height": 8, **config})


def batches(s: picpac.ImageStream, count: int | None = None) -> list[list[int]]:
    """The records of ``count`` batches (or a pass): their labels, as label i is record i; the real ones only."""
    out = []
    for _, labels, pad in s:
        out.append([int(v) for v in labels[:len(labels) - pad]])
        if len(out) == count:
            break
    return out


def flat(parts: list[list[int]]) -> list[int]:
    return [r for b in parts for r in b]


def chunked_order(pool: np.ndarray, epoch: int, chunk: int = 4, window: int = 2) -> list[int]:
    """The records of pass ``epoch`` over ``pool`` (record indices, ascending) in the Sampler's chunked order."""
    sampler = Sampler(np.zeros(len(pool)), SEED, shuffle=True, reshuffle=True, oversample=False, chunk=chunk,
                      window=window)
    return pool[sampler.pass_order(epoch)].tolist()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return make_db(tmp_path_factory.mktemp("chunked") / "db.picpac", N)


def test_each_pass_is_the_chunked_order_of_the_file(db):
    with stream(db, loop=False, **CHUNKED) as s:
        passes = [flat(batches(s)) for _ in range(3)]
    everything = np.arange(N)
    assert passes == [chunked_order(everything, e) for e in range(3)]
    assert passes[0] != passes[1] and passes[1] != passes[2]
    # 2 runs of 4 records mixed at a time (the last run is record 44 alone): two regions of the file per window
    cuts = [0, 8, 13, 21, 29, 37, 45]
    assert [sorted(passes[0][a:b]) for a, b in zip(cuts, cuts[1:])] == [
        [*range(24, 28), *range(36, 40)], [*range(16, 20), 44], [*range(4, 8), *range(20, 24)],
        [*range(0, 4), *range(40, 44)], [*range(8, 12), *range(32, 36)], [*range(12, 16), *range(28, 32)]]
    with stream(db, loop=False, reshuffle=False, **CHUNKED) as s:
        assert flat(batches(s)) == flat(batches(s)) == passes[0]
    with stream(db, loop=True, **CHUNKED) as s:  # the endless stream: the passes back to back
        assert flat(batches(s, 2 * N // 5)) == passes[0] + passes[1]


def test_shuffle_chunk_zero_is_the_old_order_and_shuffle_false_ignores_the_keys(db):
    with stream(db, loop=False) as s:
        old = [flat(batches(s)) for _ in range(2)]
    with stream(db, loop=False, shuffle_chunk=0, shuffle_window=3) as s:
        assert [flat(batches(s)) for _ in range(2)] == old
    with stream(db, loop=False, shuffle=False, **CHUNKED) as s:
        assert flat(batches(s)) == list(range(N))


@pytest.mark.parametrize("negate", [False, True])
def test_a_split_is_chunked_in_its_own_positions(db, negate):
    config = dict(split=3, split_fold=1, split_negate=negate)
    with picpac.Reader(db) as reader:
        pool = select(assign_folds(reader.labels, reader.groups, 3, SEED), 3, 1, negate)
    assert 0 < len(pool) < N
    with stream(db, loop=False, **config, **CHUNKED) as s:
        assert [flat(batches(s)) for _ in range(2)] == [chunked_order(pool, e) for e in range(2)]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_are_disjoint_and_cover_each_chunked_pass(db, world):
    shares = []
    for rank in range(world):
        with stream(db, loop=False, rank=rank, world_size=world, **CHUNKED) as s:
            shares.append([flat(batches(s)) for _ in range(2)])
    for epoch in range(2):
        order = chunked_order(np.arange(N), epoch)
        got = [shares[rank][epoch] for rank in range(world)]
        assert sorted(flat(got)) == list(range(N))  # disjoint and covering (the share_pad repeats are pad)
        for rank in range(world):
            assert got[rank] == order[rank::world]


def test_sharded_dataset_is_chunked_in_global_positions(tmp_path):
    paths = [make_db(tmp_path / f"part-{k}.picpac", 15) for k in range(3)]
    with picpac.ImageStream([str(p) for p in paths], loop=False, seed=SEED, batch=45, resize_width=8,
                            resize_height=8, **CHUNKED) as s:
        (images, labels, _), = list(s)
    # shard k's record i (label i, pixels (i, 2i, 3i)) is global position 15 k + i
    order = chunked_order(np.arange(45), 0)
    assert labels.astype(int).tolist() == [p % 15 for p in order]
    assert [int(v) // 3 for v in images[:, 0, 0, 0]] == [p % 15 for p in order]  # RGB, NCHW: R = 3i


@pytest.mark.parametrize("loop", [True, False])
def test_resume_mid_pass_gives_the_remaining_batches(db, loop):
    config = dict(loop=loop, **CHUNKED)
    with stream(db, **config) as s:
        reference = batches(s, 7)  # loop=False: the pass of 9 batches, cut at 3
    with stream(db, **config) as s:
        head = batches(s, 3)
        state = json.loads(json.dumps(s.state_dict()))
    assert state["config"]["shuffle_chunk"] == 4 and state["config"]["shuffle_window"] == 2
    with stream(db, **config, workers=1) as s:
        s.load_state_dict(state)
        assert head + batches(s, 4) == reference
    for key, value in (("shuffle_chunk", 5), ("shuffle_window", 3)):
        with stream(db, **{**config, key: value}) as s:
            with pytest.raises(picpac.PicPacValueError, match=f"config key '{key}' is {config[key]} in the state, "
                                                              f"{value} here"):
                s.load_state_dict(state)


def test_a_state_saved_before_the_keys_resumes_at_their_defaults(db):
    with stream(db) as s:
        head = batches(s, 2)
        state = s.state_dict()
        rest = batches(s, 2)
    for key in ("shuffle_chunk", "shuffle_window"):
        del state["config"][key]
    with stream(db) as s:
        s.load_state_dict(state)
        assert batches(s, 2) == rest and head != rest
    with stream(db, **CHUNKED) as s:
        with pytest.raises(picpac.PicPacValueError, match="config key 'shuffle_chunk' is 0 in the state, 4 here"):
            s.load_state_dict(state)


@pytest.mark.parametrize("config,error,message", [
    (dict(shuffle_chunk=-1), picpac.PicPacValueError, r"config key 'shuffle_chunk' must be in \[0, "),
    (dict(shuffle_chunk=2**31), picpac.PicPacValueError, r"config key 'shuffle_chunk' must be in \[0, "),
    (dict(shuffle_window=0), picpac.PicPacValueError, r"config key 'shuffle_window' must be in \[1, "),
    (dict(shuffle_chunk=1.5), picpac.PicPacTypeError, "config key 'shuffle_chunk' must be an int"),
    (dict(shuffle_window=True), picpac.PicPacTypeError, "config key 'shuffle_window' must be an int"),
    (dict(shuffle_chunks=4), picpac.PicPacValueError, "did you mean 'shuffle_chunk'"),
])
def test_bad_values_are_refused_naming_the_key(db, config, error, message):
    with pytest.raises(error, match=message):
        stream(db, **config)


def test_only_the_chunked_order_reads_a_local_file_ahead(tmp_path):
    """In chunked order the stream gives its coming records to Reader.prefetch (docs/stream.md); in the
    random order and in file order it does not (a database in the page cache gains nothing from it)."""
    make_db(tmp_path / "a.picpac", n=12)
    fetchers = {}
    for name, keys in {"chunked": dict(shuffle_chunk=4), "random": {}, "file order": dict(shuffle=False,
                                                                                       shuffle_chunk=4)}.items():
        with picpac.ImageStream(str(tmp_path / "a.picpac"), **keys) as stream:
            fetchers[name] = [f is not None for f in stream._pipeline.pool.fetchers]
    assert fetchers == {"chunked": [True], "random": [False], "file order": [False]}
