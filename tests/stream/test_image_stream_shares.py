"""ImageStream's rank shares (rank / world_size / share_pad): ranks disjoint and covering each epoch, equal batch
counts, DistributedSampler's split of one global order per epoch, with splits, oversample and loop=True."""
from __future__ import annotations

import numpy as np
import pytest

import picpac

from helpers import make_db


def ids(batch) -> list[int]:
    """Record ids from the images (NHWC, RGB: R = 3i), the real ones only (the last ``pad`` are filler)."""
    images, pad = batch[0], batch[-1]
    return [int(v) // 3 for v in images[:len(images) - pad, 0, 0, 0]]


def stream(path, **config):
    config = {"order": "NHWC", "dtype": "uint8", "workers": 2, "seed": 5, **config}
    return picpac.ImageStream(path, **config)


def one_pass(path, **config) -> list:
    with stream(path, loop=False, **config) as s:
        return [(ids(b), len(b[0]), b[-1]) for b in s]


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "db.picpac", 23)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("share_pad", [True, False])
@pytest.mark.parametrize("split", [dict(), dict(split=4, split_fold=1), dict(split=4, split_fold=1, split_negate=True),
                                   dict(split=3, split_fold=2, stratify=True)])
def test_ranks_are_disjoint_cover_the_pass_and_have_equal_batch_counts(db, world, share_pad, split):
    pool = sorted(sum((b[0] for b in one_pass(db, batch=4, **split)), []))  # one process: the split's samples
    passes = [one_pass(db, batch=4, rank=r, world_size=world, share_pad=share_pad, **split) for r in range(world)]
    counts = {len(p) for p in passes}
    assert len(counts) == 1  # the same number of batches on every rank (DDP hangs otherwise)
    with stream(db, loop=False, batch=4, rank=0, world_size=world, share_pad=share_pad, **split) as s:
        assert counts == {len(s)} and s.size() == sum(n for p in passes[:1] for _, n, _ in p)
    sizes = {sum(n for _, n, _ in p) for p in passes}
    assert len(sizes) == 1  # as many samples each
    seen = sorted(i for p in passes for b in p for i in b[0])
    if share_pad:
        assert seen == pool  # every sample once; the filler is counted in pad
        assert sizes == {-(-len(pool) // world)}
    else:
        assert len(set(seen)) == len(seen) == len(pool) // world * world and set(seen) <= set(pool)
        assert sum(pad for p in passes for _, _, pad in p) == 0


def test_a_pass_is_distributed_samplers_split_of_one_order(db):
    """Rank r of W takes items r, r+W, ... of the epoch's order (the one-process order), padded by its first items."""
    for epoch in range(3):
        with stream(db, loop=False, batch=23) as s:
            s.set_epoch(epoch)
            order = ids(next(s))
        for world in (2, 3, 4):
            padded = np.resize(order, -(-23 // world) * world)
            for rank in range(world):
                with stream(db, loop=False, batch=50, rank=rank, world_size=world, pad=False) as s:
                    s.set_epoch(epoch)
                    images = next(s)[0]
                assert [int(v) // 3 for v in images[:, 0, 0, 0]] == padded[rank::world].tolist()
                with stream(db, loop=False, batch=50, rank=rank, world_size=world, share_pad=False) as s:
                    s.set_epoch(epoch)
                    assert ids(next(s)) == order[:23 // world * world][rank::world]


@pytest.mark.parametrize("oversample", [False, True])
def test_the_endless_stream_shares_out_each_epoch(tmp_path, oversample):
    path = make_db(tmp_path / "db.picpac", 24, labels=[i % 3 for i in range(24)])
    config = dict(batch=5, oversample=oversample, shuffle=True)

    def endless(count, **more):
        out = []
        with stream(path, **config, **more) as s:
            for batch in s:
                out += ids(batch)
                if len(out) >= count:
                    return out[:count]

    single = endless(24 * 3)  # three epochs of the one-process stream
    for world in (2, 3, 4):
        ranks = [endless(24 // world * 3, rank=r, world_size=world) for r in range(world)]
        for epoch in range(3):
            order = single[24 * epoch:24 * (epoch + 1)]
            share = 24 // world
            for rank in range(world):
                assert ranks[rank][share * epoch:share * (epoch + 1)] == order[rank::world]
    if not oversample:  # reshuffled per epoch: a rank reads other samples in the next epoch
        assert sorted(single[:24]) == sorted(single[24:48]) == list(range(24)) and single[:24] != single[24:48]


def test_mixin_and_batch_padding_compose_with_ranks(db, tmp_path):
    mixin = make_db(tmp_path / "mixin.picpac", 5)
    passes = [one_pass(db, batch=4, pad=True, mixin=str(mixin), rank=r, world_size=3) for r in range(3)]
    assert {len(p) for p in passes} == {3} and all(n == 4 for p in passes for _, n, _ in p)  # 28 -> 10 each -> 12
    assert sum(len(b[0]) for p in passes for b in p) == 28  # the real samples: the pool exactly


def test_rank_and_world_size_from_the_environment_and_errors(db, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with stream(db, loop=False) as s:
        assert (s.config["rank"], s.config["world_size"], s.size()) == (1, 3, 8)
    with stream(db, loop=False, rank=0, world_size=1) as s:  # given keys win
        assert s.size() == 23
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(picpac.PicPacValueError, match="WORLD_SIZE='x' is not an int"):
        stream(db)
    monkeypatch.delenv("WORLD_SIZE")  # one of the two alone: not a launcher's, ignored
    with stream(db) as s:
        assert (s.config["rank"], s.config["world_size"]) == (0, 1)
    with pytest.raises(picpac.PicPacValueError, match=r"'rank' must be in \[0, world_size=4\), got 4"):
        stream(db, rank=4, world_size=4)
    with pytest.raises(picpac.PicPacValueError, match=r"'rank' must be in \[0, world_size=1\), got 1"):
        stream(db, rank=1)
    with pytest.raises(picpac.PicPacValueError, match=r"'world_size' must be in \[1, "):
        stream(db, world_size=0)
    with pytest.raises(picpac.PicPacValueError, match="only 23 samples: every rank would get none"):
        stream(db, world_size=30, share_pad=False)
    with stream(db, loop=False, batch=2, world_size=30, rank=29) as s:  # padding: every rank gets one
        assert [(ids(b), b[-1]) for b in s] and s.size() == 1


def test_the_batch_path_shares_out_the_same_way(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (30, 8, 8, 3)).astype(np.uint8)
    images[:, 0, 0, 0] = np.arange(30)
    path = tmp_path / "arrays.picpac"
    picpac.write_arrays(path, images, np.arange(30) % 3)
    for world in (2, 4):
        passes = []
        for rank in range(world):
            with picpac.ImageStream(path, loop=False, batch=4, dtype="uint8", order="NHWC", rank=rank,
                                    world_size=world, colorspace="BGR") as s:
                assert s.stats()["path"] == "batch"
                passes.append([b[0][:len(b[0]) - b[-1], 0, 0, 0].tolist() for b in s])
        assert len({len(p) for p in passes}) == 1
        assert sorted(i for p in passes for b in p for i in b) == list(range(30))


def test_shard_pad_is_the_old_name_of_share_pad(db):
    """A config or a saved state that says shard_pad (the name before a rank's part was called its share) means
    share_pad: the same shares, and the state resumes; both names at once is an error naming them."""
    old = one_pass(db, rank=1, world_size=4, shard_pad=False)
    assert old == one_pass(db, rank=1, world_size=4, share_pad=False) != one_pass(db, rank=1, world_size=4)
    with pytest.raises(picpac.PicPacValueError, match=r"config keys 'shard_pad' \(True\) and 'share_pad' both given; use only 'share_pad'"):
        stream(db, shard_pad=True, share_pad=True)
    with stream(db, rank=0, world_size=2, share_pad=False, loop=False) as s:
        batches = iter(s)
        next(batches)
        state = s.state_dict()
        rest = [ids(b) for b in batches]
    state["config"]["shard_pad"] = state["config"].pop("share_pad")  # as a state saved before the rename
    with stream(db, rank=0, world_size=2, share_pad=False, loop=False) as s:
        s.load_state_dict(state)
        assert [ids(b) for b in s] == rest
        state["config"]["shard_pad"] = True
        with pytest.raises(picpac.PicPacValueError, match="config key 'share_pad' is True in the state, False here"):
            s.load_state_dict(state)
