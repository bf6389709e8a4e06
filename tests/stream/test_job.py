"""picpac.stream.job on its own: a stream's capacity (workers and samples made ahead) and its frozen pool."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from picpac.stream.config import StreamConfig
from picpac.stream import job
from picpac.stream.job import Part, Pool, capacity, usable_cores


def config(**keys) -> StreamConfig:
    return StreamConfig.from_dict(keys)


@pytest.mark.parametrize("keys, want", [
    (dict(workers=3), (3, 48)),  # preload: 16 per worker
    (dict(workers=3, batch=100), (3, 100)),  # and at least a batch
    (dict(workers=3, batch=48), (3, 48)),
    (dict(workers=2, preload=5), (2, 5)),  # given: as given, even under a batch
    (dict(workers=2, preload=5, batch=64), (2, 5)),
    (dict(threads=4), (4, 64)),  # PicPac's name
])
def test_capacity_given(keys, want):
    assert capacity(config(**keys)) == want


def test_capacity_defaults_to_a_worker_per_core_but_the_consumers(monkeypatch):
    assert capacity(config()) == (max(1, usable_cores() - 1), 16 * max(1, usable_cores() - 1))
    monkeypatch.setattr(job, "usable_cores", lambda: 8)
    assert capacity(config()) == (7, 112)
    assert capacity(config(batch=200)) == (7, 200)
    assert capacity(config(preload=3)) == (7, 3)
    assert capacity(config(workers=8)) == (8, 128)
    monkeypatch.setattr(job, "usable_cores", lambda: 1)  # one core: one worker all the same
    assert capacity(config()) == (1, 16)


def test_usable_cores_are_this_process_s_affinity():
    assert usable_cores() == (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())


def test_pool_is_frozen():
    pool = Pool(np.arange(3), np.zeros(3, np.int64), np.ones(3), [None])
    for name in ("records", "sources", "labels", "fetchers"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(pool, name, None)
    assert pool.records.tolist() == [0, 1, 2] and pool.fetchers == [None]


def test_a_part_is_shared_only_when_said():
    part = Part([np.zeros(2)], (None,), ((),), [4], 0, 1)
    assert part.shared is False and part.made is None
    assert part._fields == ("images", "targets", "dense", "positions", "padding", "taken", "shared", "made", "damaged")
    assert part.damaged == ()
