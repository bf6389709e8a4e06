"""ImageStream's exact resume: state_dict / load_state_dict / set_epoch give the batches of an uninterrupted run,
bit for bit (augmentation included), on any backend, worker count and path; elastic resume to another world
size; a state from another stream is refused; a process killed by SIGKILL resumes from its checkpoint."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import picpac
from picpac.transforms import Crop, Flip, Pad

from helpers import make_db

CIFAR = [Pad(sides=(2, 2, 2, 2)), Crop(16, 16, random=True), Flip(horizontal=0.5)]
THREADS = [dict(backend="thread", workers=1), dict(backend="thread", workers=2)]
SPAWN = dict(backend="process", workers=2)
RUNNERS = [*THREADS, dict(backend="process", workers=1, start_method="fork"),
           dict(backend="process", workers=2, start_method="fork")]
"""The batch path runs no OpenCV: its process backend may fork."""


def noisy(sample, rng):
    """Random noise from the sample's own RNG (a Python transform: its draws must survive a resume)."""
    sample.image = sample.image + rng.integers(0, 8, sample.image.shape, dtype=sample.image.dtype)
    return sample


def random_db(path: Path, n: int = 20) -> Path:
    rng = np.random.default_rng(1)
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=cv2.imencode(".png", rng.integers(0, 256, (12, 14, 3), np.uint8))[1].tobytes(), label=i)
    return path


SAMPLE_PATH = dict(batch=3, seed=7, perturb=True, crop_width=10, crop_height=8, pert_hflip=True, pert_color1=20,
                   pert_angle=15, dtype="uint8")


def take(s, count: int) -> list:
    """``count`` batches by next(), across passes (loop=False: a pass's end is skipped over), copied."""
    out = []
    while len(out) < count:
        try:
            batch = next(s)
        except StopIteration:
            continue
        out.append([a.copy() if isinstance(a, np.ndarray) else a for a in batch])
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y))
                                    for x, y in zip(a, b))


def through_json(state: dict) -> dict:
    return json.loads(json.dumps(state))


@pytest.fixture
def db(tmp_path):
    return random_db(tmp_path / "db.picpac")


@pytest.fixture
def arrays(tmp_path):
    images = np.random.default_rng(2).integers(0, 256, (36, 16, 16, 3)).astype(np.uint8)
    path = tmp_path / "arrays.picpac"
    picpac.write_arrays(path, images, np.arange(36) % 4)
    return path


def resumed(path, config: dict, cut: int, total: int, first: dict, second: dict) -> list:
    """``cut`` batches from a stream run by ``first``, then the rest from a new one run by ``second`` that loads
    the first's state (through JSON)."""
    with picpac.ImageStream(path, **config, **first) as s:
        head = take(s, cut)
        state = through_json(s.state_dict())
    with picpac.ImageStream(path, **config, **second) as s:
        s.load_state_dict(state)
        return head + take(s, total - cut)


@pytest.mark.parametrize("loop", [True, False])
def test_resume_gives_the_uninterrupted_batches_on_the_per_sample_path(db, loop):
    config = dict(SAMPLE_PATH, loop=loop)
    total = 17  # 51 samples: across passes of 20 (loop=False: 7 batches per pass, the last of 2)
    with picpac.ImageStream(db, **config, **THREADS[0]) as s:
        assert s.stats()["path"] == "sample"
        reference = take(s, total)
    for cut in (1, 7, 12):
        assert same(resumed(db, config, cut, total, THREADS[1], THREADS[0]), reference), cut
        assert same(resumed(db, config, cut, total, THREADS[0], THREADS[1]), reference), cut
    # worker processes (spawned: OpenCV in forked children of a process that ran it on threads can hang)
    assert same(resumed(db, config, 8, total, SPAWN, THREADS[1]), reference)
    assert same(resumed(db, config, 13, total, THREADS[0], SPAWN), reference)


def test_a_python_transforms_draws_resume_too(db):
    config = dict(SAMPLE_PATH, transforms=[noisy])
    with picpac.ImageStream(db, **config, **THREADS[1]) as s:
        reference = take(s, 12)
    for cut in (3, 7):
        assert same(resumed(db, config, cut, 12, THREADS[1], THREADS[0]), reference)


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("runner", [0, 1, 3])
def test_resume_gives_the_uninterrupted_batches_on_the_batch_path(arrays, loop, runner):
    config = dict(batch=5, seed=3, transforms=CIFAR, dtype="uint8", order="NHWC", loop=loop)
    with picpac.ImageStream(arrays, **config, **RUNNERS[1]) as s:
        assert s.stats()["path"] == "batch"
        reference = take(s, 20)  # 100 samples: across passes of 36 (loop=False: 8 batches per pass)
    for cut in (2, 8, 13):
        with picpac.ImageStream(arrays, **config, **RUNNERS[runner]) as first:
            head = take(first, cut)
            state = through_json(first.state_dict())
        with picpac.ImageStream(arrays, **config, **RUNNERS[(runner + 2) % len(RUNNERS)]) as second:
            second.load_state_dict(state)
            assert second.stats()["path"] == "batch"
            tail = take(second, 20 - cut)
        assert same(head + tail, reference), cut


def test_set_epoch_gives_that_pass_of_an_uninterrupted_run(db):
    config = dict(SAMPLE_PATH, loop=False, transforms=[noisy], workers=2)
    with picpac.ImageStream(db, **config) as s:
        passes = [take_pass(s) for _ in range(4)]
    assert not same(passes[1], passes[2])  # reshuffled, and augmented anew
    with picpac.ImageStream(db, **config) as s:
        for epoch in (3, 1, 2, 0):
            s.set_epoch(epoch)
            assert same(take_pass(s), passes[epoch])
        next(s)
        s.set_epoch(2)  # mid-pass: the pass under way ends
        assert same(take_pass(s), passes[2]) and same(take_pass(s), passes[3])
        with pytest.raises(picpac.PicPacValueError, match="set_epoch takes an int >= 0"):
            s.set_epoch(-1)


def test_set_epoch_on_the_endless_stream_goes_to_the_epochs_first_sample(db):
    with picpac.ImageStream(db, **SAMPLE_PATH, workers=2) as s:
        reference = take(s, 20)  # 60 samples: three epochs of 20
    flat = np.concatenate([b[0] for b in reference])
    with picpac.ImageStream(db, **SAMPLE_PATH, workers=2) as s:
        for epoch in (2, 1):  # batches from the epoch's first sample on (20 samples: not on a batch boundary)
            s.set_epoch(epoch)
            assert np.array_equal(np.concatenate([b[0] for b in take(s, 2)]), flat[20 * epoch:20 * epoch + 6])


def take_pass(s) -> list:
    return [[a.copy() if isinstance(a, np.ndarray) else a for a in batch] for batch in s]


def ids(batch) -> list[int]:
    return [int(v) // 3 for v in batch[0][:len(batch[0]) - batch[-1], 0, 0, 0]]


@pytest.mark.parametrize("loop", [False, True])
def test_elastic_resume_from_four_ranks_to_two_sees_each_sample_of_the_epoch_once(tmp_path, loop):
    path = make_db(tmp_path / "db.picpac", 42)
    config = dict(batch=3, order="NHWC", dtype="uint8", seed=11, loop=loop, workers=2)
    seen, states = [], []
    for rank in range(4):  # 4 ranks in step: 2 batches each, then a checkpoint (42 = 4 x 11 - 2: padded)
        with picpac.ImageStream(path, rank=rank, world_size=4, **config) as s:
            for batch in take(s, 2):
                seen += ids(batch)
            states.append(through_json(s.state_dict()))
    assert all(state == {**states[0], "rank": i} for i, state in enumerate(states))
    assert states[0]["consumed"] == 24 and states[0]["epoch"] == 0
    shares = []
    for rank in range(2):
        with picpac.ImageStream(path, rank=rank, world_size=2, **config) as s:
            s.load_state_dict(states[0])  # rank 0's state serves every rank
            assert s.state_dict()["consumed"] == 24
            if loop:
                batches = take(s, 3)  # the 18 left over 2 ranks: 9 each, then the next epoch
                after = take(s, 1)
            else:
                batches, after = take_pass(s), take(s, 1)
            shares.append(sum((ids(b) for b in batches), []))
            assert s.state_dict()["epoch"] == 1
            with picpac.ImageStream(path, rank=rank, world_size=2, **config) as fresh:
                fresh.set_epoch(1)  # the epoch after: as any 2-rank run's
                assert ids(after[0]) == ids(take(fresh, 1)[0])
    assert len(shares[0]) == len(shares[1]) == 9
    assert sorted(seen + shares[0] + shares[1]) == list(range(42))  # the epoch, each sample exactly once


def test_a_state_from_another_stream_is_refused_naming_what_differs(db, tmp_path):
    with picpac.ImageStream(db, **SAMPLE_PATH) as s:
        take(s, 2)
        state = s.state_dict()
    json.dumps(state)
    assert state["format"] == "picpac.ImageStream.state/1" and state["samples"] == 20
    assert state["config"]["seed"] == 7 and state["databases"][0]["records"] == 20
    with picpac.ImageStream(db, **{**SAMPLE_PATH, "seed": 8}) as s:
        with pytest.raises(picpac.PicPacValueError, match="config key 'seed' is 7 in the state, 8 here"):
            s.load_state_dict(state)
    with picpac.ImageStream(db, **SAMPLE_PATH, split=4, split_fold=1) as s:
        with pytest.raises(picpac.PicPacValueError, match="config key 'split' is 1 in the state, 4 here"):
            s.load_state_dict(state)
    with picpac.ImageStream(db, **SAMPLE_PATH, loop=False) as s:
        with pytest.raises(picpac.PicPacValueError, match="'loop' is True in the state, False here"):
            s.load_state_dict(state)
    other = random_db(tmp_path / "other.picpac", 21)
    with picpac.ImageStream(other, **SAMPLE_PATH) as s:
        with pytest.raises(picpac.PicPacValueError, match=r"the database .*other.picpac is not the one the state was "
                                                          r"saved from \(records 20 in the state, 21 here"):
            s.load_state_dict(state)
    with picpac.Writer(db, append=True) as w:  # the same file, grown: another commit
        w.append(image=b"x", label=0)
    with picpac.ImageStream(db, **SAMPLE_PATH) as s:
        with pytest.raises(picpac.PicPacValueError, match="is not the one the state was saved from"):
            s.load_state_dict(state)
    with picpac.ImageStream(other, **SAMPLE_PATH) as s:
        with pytest.raises(picpac.PicPacValueError, match="load_state_dict takes what ImageStream.state_dict"):
            s.load_state_dict({"epoch": 1})
        with pytest.raises(picpac.PicPacValueError, match="'offset' must be an int >= 0"):
            s.load_state_dict({**s.state_dict(), "offset": -1})


def test_a_state_of_a_fresh_or_finished_pass(db):
    with picpac.ImageStream(db, loop=False, batch=6, workers=1) as s:
        assert s.state_dict()["epoch"] == 0 and s.state_dict()["offset"] == 0
        batches = take(s, 4)  # the whole first pass, its end not yet seen
        assert (s.state_dict()["epoch"], s.state_dict()["offset"], s.state_dict()["consumed"]) == (1, 0, 0)
        assert len(batches) == len(s) == 4


CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import picpac
    db, checkpoint, log, mode = sys.argv[1:5]
    stream = picpac.ImageStream(db, batch=4, seed=9, perturb=True, crop_width=10, crop_height=8, pert_hflip=True,
                                pert_color1=30, dtype="uint8", workers=2)
    if mode == "resume":
        with open(checkpoint) as f:
            stream.load_state_dict(json.load(f))
    out = []
    for step, (images, labels, pad) in enumerate(stream):
        out.append((images.copy(), labels.copy()))
        if mode == "resume" and step == 9:
            np.savez(log, images=np.stack([o[0] for o in out]), labels=np.stack([o[1] for o in out]))
            break
        if mode == "train" and step == 5:
            with open(checkpoint + ".tmp", "w") as f:
                json.dump(stream.state_dict(), f)
            os.replace(checkpoint + ".tmp", checkpoint)   # the checkpoint: after batch 5
        if mode == "train" and step > 5:
            time.sleep(0.05)   # training goes on until it is killed
""")


def test_a_process_killed_by_sigkill_resumes_from_its_checkpoint(db, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    checkpoint, log = tmp_path / "state.json", tmp_path / "resumed.npz"
    root = str(Path(picpac.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, str(script), str(db), str(checkpoint), str(log), "train"], env=env)
    try:
        deadline = time.monotonic() + 60
        while not checkpoint.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the child died before its checkpoint"
            time.sleep(0.02)
        time.sleep(0.2)  # mid-epoch, a few batches past the checkpoint
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    state = json.loads(checkpoint.read_text())
    assert state["epoch"] == 1 and state["offset"] == 4 and state["consumed"] == 4  # 24 samples: epoch 1, 4 in
    subprocess.run([sys.executable, str(script), str(db), str(checkpoint), str(log), "resume"], env=env, check=True,
                   timeout=60)
    resumed = np.load(log)
    with picpac.ImageStream(db, batch=4, seed=9, perturb=True, crop_width=10, crop_height=8, pert_hflip=True,
                            pert_color1=30, dtype="uint8", workers=1) as s:
        reference = take(s, 16)[6:]
    np.testing.assert_array_equal(resumed["labels"], np.stack([b[1] for b in reference]))  # the same samples
    np.testing.assert_array_equal(resumed["images"], np.stack([b[0] for b in reference]))  # the same pixels


def loaded(path, config: dict, state: dict, count: int) -> list:
    with picpac.ImageStream(path, **config) as s:
        s.load_state_dict(state)
        return take(s, count)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("batch_path", [False, True])
def test_an_offset_of_10_to_the_18_resumes_at_once_where_the_equivalent_small_state_does(db, arrays, batch_path):
    path, config = (arrays, dict(batch=5, seed=3, transforms=CIFAR, dtype="uint8")) if batch_path else \
        (db, dict(SAMPLE_PATH, workers=2))
    with picpac.ImageStream(path, **config) as s:
        take(s, 2)
        state, n = through_json(s.state_dict()), s.size()
    huge = {**state, "epoch": 3, "offset": 10**18 + 7}
    small = {**state, "epoch": 3 + 10**18 // n, "offset": 10**18 % n + 7}
    assert same(loaded(path, config, huge, 3), loaded(path, config, small, 3))
    with picpac.ImageStream(path, **config) as s:
        s.load_state_dict(huge)
        assert (s.state_dict()["epoch"], s.state_dict()["offset"]) == (small["epoch"], small["offset"])
    # saved by 4 ranks, loaded on 1: whole epochs in the saved shares, then the rest of that epoch
    quarter = -(-n // 4)
    elastic = {**state, "world_size": 4, "offset": 10**18}
    with picpac.ImageStream(path, **config) as s:
        s.load_state_dict(elastic)
        assert s.state_dict()["epoch"] == state["epoch"] + 10**18 // quarter
        assert s.state_dict()["consumed"] == s.state_dict()["start"] == min(10**18 % quarter * 4, n)


def test_a_state_no_stream_can_reach_is_a_value_error_naming_its_key(db):
    with picpac.ImageStream(db, **SAMPLE_PATH) as s:
        take(s, 2)
        state = s.state_dict()
        last = 2**63 // 20 - 1  # the last epoch of 20 samples: its stream positions stay int64
        for epoch in (2**62, 2**63, 2**64, 10**30):
            with pytest.raises(picpac.PicPacValueError, match=rf"db.picpac: the state's 'epoch' \({epoch}\) is past "
                                                              rf"the last epoch this stream can reach, {last} "
                                                              r"\(its 20 samples per epoch"):
                s.load_state_dict({**state, "epoch": epoch})
        with pytest.raises(picpac.PicPacValueError, match=rf"the state's 'offset' \({20 * 2**62}\) from its 'epoch' "
                                                          rf"0 is past the last epoch this stream can reach, {last}"):
            s.load_state_dict({**state, "offset": 20 * 2**62})
        s.load_state_dict({**state, "epoch": last})  # the last epoch itself: its batches, then the stream ends
        rest = take_pass(s)  # 20 samples less the 6 of the state's offset: 14, in 5 batches (the last of 2)
        assert [len(batch[1]) for batch in rest] == [3, 3, 3, 3, 2]
        with pytest.raises(picpac.PicPacValueError, match=rf"set_epoch\({last + 1}\) is past the last epoch"):
            s.set_epoch(last + 1)
    with picpac.ImageStream(db, **SAMPLE_PATH, loop=False) as s:
        state = s.state_dict()
        with pytest.raises(picpac.PicPacValueError, match=r"the state's 'offset' \(1000000000000000000\) is past the "
                                                          r"end of its pass: each of its 1 rank\(s\) has 20 samples"):
            s.load_state_dict({**state, "offset": 10**18})
        s.load_state_dict({**state, "offset": 20})  # the end of the pass: the next pass
        assert (s.state_dict()["epoch"], s.state_dict()["offset"]) == (1, 0)


@pytest.mark.parametrize("key,value,message", [
    ("epoch", True, r"'epoch' must be an int >= 0, got True \(pass what state_dict\(\) returned, unchanged\)"),
    ("epoch", 1.0, r"'epoch' must be an int >= 0, got 1.0"),
    ("epoch", "1", r"'epoch' must be an int >= 0, got '1'"),
    ("start", 21, r"'start' must be an int >= 0 and <= 20, got 21"),
    ("offset", None, r"'offset' must be an int >= 0, got None"),
    ("world_size", True, r"'world_size' must be an int >= 1, got True"),
    ("world_size", 0, r"'world_size' must be an int >= 1, got 0"),
    ("consumed", -1, r"'consumed' must be an int >= 0 and <= 20, got -1"),
    ("consumed", 21, r"'consumed' must be an int >= 0 and <= 20, got 21"),
    ("rank", 1, r"'rank' must be an int in \[0, world_size=1\), got 1"),
    ("rank", False, r"'rank' must be an int in \[0, world_size=1\), got False"),
    ("samples", 20.5, r"the state's stream has 20.5 samples per epoch, this one 20"),
])
def test_every_field_of_a_crafted_state_is_checked_naming_the_key(db, key, value, message):
    with picpac.ImageStream(db, **SAMPLE_PATH) as s:
        state = s.state_dict()
        with pytest.raises(picpac.PicPacValueError, match=message):
            s.load_state_dict({**state, key: value})


def test_a_bool_is_not_the_int_a_state_holds(tmp_path):
    one = random_db(tmp_path / "one.picpac", 1)
    with picpac.ImageStream(one, batch=1, seed=1) as s:
        state = s.state_dict()
        with pytest.raises(picpac.PicPacValueError, match="config key 'seed' is True in the state, 1 here"):
            s.load_state_dict({**state, "config": {**state["config"], "seed": True}})
        with pytest.raises(picpac.PicPacValueError, match="the state's stream has True samples per epoch, this one 1"):
            s.load_state_dict({**state, "samples": True})
        with pytest.raises(picpac.PicPacValueError, match=r"records True in the state, 1 here"):
            s.load_state_dict({**state, "databases": [{**state["databases"][0], "records": True}]})
    with picpac.ImageStream(one, batch=1, seed=1, share_pad=False) as s:
        with pytest.raises(picpac.PicPacValueError, match=r"the state's 'world_size' \(2\) leaves no sample to any "
                                                          r"rank of an epoch of 1 with share_pad=False"):
            s.load_state_dict({**s.state_dict(), "world_size": 2})
