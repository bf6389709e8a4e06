"""ImageStream over a sharded dataset (docs/stream.md, "Sharded datasets"): a list of files, a glob or a
.shards index streams exactly the batches of the one file that holds the same records in the same order."""
from __future__ import annotations

import json

import numpy as np
import pytest

import picpac
from picpac.file.shards import write_index

from helpers import make_db, png, run

N = 30
SIZES = (7, 12, 11)  # records per shard


def write(path, records) -> None:
    """records: indices into the N-record dataset; image i is (i, 2i, 3i), label i % 3, group i // 2."""
    with picpac.Writer(path) as w:
        for i in records:
            pixels = np.empty((6 + i % 4, 8, 3), np.uint8)
            pixels[:] = (i, 2 * i, 3 * i)
            w.append(image=png(pixels), label=float(i % 3), group=i // 2)


@pytest.fixture
def data(tmp_path):
    write(tmp_path / "merged.picpac", range(N))
    paths, start = [], 0
    for k, size in enumerate(SIZES):
        paths.append(str(tmp_path / f"train-{k:05d}.picpac"))
        write(paths[-1], range(start, start + size))
        start += size
    write_index(tmp_path / "train.shards", paths)
    return tmp_path, paths


CONFIG = dict(batch=4, resize_width=10, resize_height=10, perturb=True, pert_hflip=True, pert_angle=10,
              seed=3, shuffle=True)


def batches(db, count=12, **config):
    with picpac.ImageStream(db, **{**CONFIG, **config}) as stream:
        return run(stream, count)


def same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            assert np.array_equal(u, v)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_shards_stream_the_merged_files_batches(data, backend):
    tmp, paths = data
    expected = batches(str(tmp / "merged.picpac"), backend=backend, workers=2)
    for db in (paths, str(tmp / "train-*.picpac"), str(tmp / "train.shards")):
        same(batches(db, backend=backend, workers=2), expected)


@pytest.mark.parametrize("backend", ["thread", "process"])
@pytest.mark.parametrize("keys", [dict(split=5, split_fold=1), dict(split=5, split_fold=1, split_negate=True),
                                  dict(split=4, split_fold=2, stratify=True), dict(oversample=True),
                                  dict(loop=False, pad=True, reshuffle=True)])
def test_splits_and_oversample_match(data, keys, backend):
    tmp, paths = data
    count = 8 if keys.get("loop", True) else None
    same(batches(str(tmp / "train.shards"), count, backend=backend, workers=2, **keys),
         batches(str(tmp / "merged.picpac"), count, backend=backend, workers=2, **keys))


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_ranks_match_and_cover_disjointly(data, backend):
    tmp, paths = data
    seen = []
    for rank in range(2):
        keys = dict(loop=False, batch=5, rank=rank, world_size=2, perturb=False, backend=backend, workers=2)
        got = batches(paths, None, **keys)
        same(got, batches(str(tmp / "merged.picpac"), None, **keys))
        seen.append([int(v) // 3 for images, labels, pad in got for v in images[:len(images) - pad, 0, 0, 0]])
    assert sorted(seen[0] + seen[1]) == list(range(N))  # channel 0 (red) = 3 x record id: every record once


def test_resume_across_a_shard_boundary(data):
    tmp, paths = data
    db = str(tmp / "train.shards")
    whole = batches(db, 12)
    with picpac.ImageStream(db, **CONFIG) as stream:
        run(stream, 2)  # 8 samples: past the first shard's 7 records in order, mid-epoch
        state = json.loads(json.dumps(stream.state_dict()))
    assert [s["records"] for s in state["databases"][0]["shards"]] == list(SIZES)
    with picpac.ImageStream(db, **CONFIG) as stream:
        stream.load_state_dict(state)
        same(run(stream, 10), whole[2:])
    plain = {**CONFIG, "shuffle": False, "perturb": False}
    whole = batches(db, 4, **plain)
    with picpac.ImageStream(db, **plain) as stream:
        run(stream, 1)  # 4 of shard 0's 7 records
        state = stream.state_dict()
    with picpac.ImageStream(db, **plain) as stream:
        stream.load_state_dict(state)
        got = run(stream, 3)
    same(got, whole[1:])
    assert [int(v) // 3 for v in got[0][0][:, 0, 0, 0]] == [4, 5, 6, 7]  # the batch that crosses into shard 1


def test_set_epoch_matches(data):
    tmp, paths = data
    out = []
    for db in (paths, str(tmp / "merged.picpac")):
        with picpac.ImageStream(db, **{**CONFIG, "loop": False, "reshuffle": True}) as stream:
            stream.set_epoch(3)
            out.append(run(stream))
    same(*out)


def test_resume_refuses_a_changed_shard_list(data):
    tmp, paths = data
    with picpac.ImageStream(paths, **CONFIG) as stream:
        state = stream.state_dict()
    with picpac.ImageStream(paths[:2], **CONFIG) as stream, pytest.raises(picpac.PicPacValueError, match="state"):
        stream.load_state_dict(state)
    with picpac.ImageStream([paths[1], paths[0], paths[2]], **CONFIG) as stream, \
            pytest.raises(picpac.PicPacValueError, match="not the one"):
        stream.load_state_dict(state)
    with picpac.ImageStream(str(tmp / "merged.picpac"), **CONFIG) as stream, \
            pytest.raises(picpac.PicPacValueError, match="not the one"):
        stream.load_state_dict(state)


def test_glob_is_sorted_and_mixin_works(data):
    tmp, paths = data
    extra = make_db(tmp / "extra.picpac", 5)
    got = batches(str(tmp / "train-*.picpac"), None, loop=False, shuffle=False, perturb=False, mixin=str(extra))
    firsts = [int(v) // 3 for images, _, _ in got for v in images[:, 0, 0, 0]]
    assert firsts == list(range(N)) + [0, 1, 2, 3, 4]
    same(got, batches(str(tmp / "merged.picpac"), None, loop=False, shuffle=False, perturb=False, mixin=str(extra)))
    # a sharded mixin (an index) works too
    got = batches(str(tmp / "merged.picpac"), None, loop=False, shuffle=False, perturb=False,
                  mixin=str(tmp / "train.shards"))
    assert [int(v) // 3 for images, _, _ in got for v in images[:, 0, 0, 0]] == list(range(N)) * 2


def test_array_shards_take_the_per_sample_path(tmp_path):
    images = np.arange(12 * 4 * 4 * 3, dtype=np.uint8).reshape(12, 4, 4, 3)
    picpac.write_arrays(tmp_path / "a.picpac", images[:5], np.arange(5))
    picpac.write_arrays(tmp_path / "b.picpac", images[5:], np.arange(5, 12))
    picpac.write_arrays(tmp_path / "all.picpac", images, np.arange(12))
    keys = dict(batch=4, loop=False, shuffle=True, seed=2)
    shards = [str(tmp_path / "a.picpac"), str(tmp_path / "b.picpac")]
    with picpac.ImageStream(shards, **keys) as stream:
        got = run(stream)
        assert stream.stats()["path"] == "sample" and "sharded" in stream.stats()["path_reason"]
    with picpac.ImageStream(str(tmp_path / "all.picpac"), **keys) as stream:
        same(got, run(stream))
    with pytest.raises(picpac.PicPacValueError, match="sharded"):
        picpac.ImageStream(shards, vectorize=True, **keys)
