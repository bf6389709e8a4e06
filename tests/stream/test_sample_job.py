"""picpac.stream.sample_job on its own, on small real databases: one unit's work, its pickle, which failures it
skips, its units from keys and a pool (with prefetching), its parts from deliveries, its cache and its capacity."""
from __future__ import annotations

import pickle

import cv2
import numpy as np
import pytest

import picpac
from picpac.engine.executor import Delivery, ThreadExecutor
from picpac.errors import PicPacValueError, SampleError
from picpac.stream.config import StreamConfig
from picpac.stream.job import Part, Pool
from picpac.stream.position import Keys
from picpac.stream.sample_job import Profile, SampleJob, prefetched


def fill(i: int) -> tuple[int, int, int]:
    """Record i's colour, (B, G, R)."""
    return i % 256, 2 * i % 256, 3 * i % 256


def write(path, n: int, offset: int = 0, size=(6, 4)):
    """n PNGs; image i is filled with fill(offset + i), label offset + i."""
    with picpac.Writer(path) as w:
        for i in range(n):
            pixels = np.empty((size[1], size[0], 3), np.uint8)
            pixels[:] = fill(offset + i)
            w.append(image=cv2.imencode(".png", pixels)[1].tobytes(), label=float(offset + i))
    return path


@pytest.fixture
def readers(tmp_path):
    opened = [picpac.Reader(write(tmp_path / "db.picpac", 10)), picpac.Reader(write(tmp_path / "mixin.picpac", 5, 100))]
    yield opened
    for reader in opened:
        reader.close()


def job_of(readers, **keys) -> SampleJob:
    return SampleJob(readers, StreamConfig.from_dict(keys))


def keys_of(positions, epochs=None) -> Keys:
    positions = np.asarray(positions)
    epochs = np.zeros(len(positions), np.int64) if epochs is None else np.asarray(epochs)
    return Keys(lambda: iter([(positions, epochs)]), len(positions))


# -- one unit -------------------------------------------------------------------------------------------------------
def test_a_unit_is_one_sample_of_its_source_and_record(readers):
    job = job_of(readers, dtype="uint8")
    image, (target, dense, damage) = job((0, 3, 0, 0, 7, 7.0))  # index, position, epoch, source, record, label
    assert image.shape == (3, 4, 6) and image.dtype == np.uint8 and target is None and dense == () and damage is None
    assert image[:, 0, 0].tolist() == list(fill(7))[::-1]  # RGB
    image, _ = job((1, 12, 0, 1, 2, 102.0))  # the mixin's record 2
    assert image[:, 0, 0].tolist() == list(fill(102))[::-1] and (image == image[:, :1, :1]).all()


def test_a_detect_unit_carries_its_target(tmp_path):
    path = tmp_path / "boxes.picpac"
    with picpac.Writer(path) as w:
        w.append(image=cv2.imencode(".png", np.zeros((20, 40, 3), np.uint8))[1].tobytes(), label=0.0,
                 annotation=b'{"shapes": [{"type": "rect", "label": 2, '
                            b'"geometry": {"x": 0.25, "y": 0.5, "width": 0.5, "height": 0.25}}]}')
    with picpac.Reader(path) as reader:
        _, (boxes, dense, _) = job_of([reader], task="detect")((0, 0, 0, 0, 0, 0.0))
    assert boxes.tolist() == [[2, 10, 10, 30, 15]] and dense == ()


def test_the_random_steps_are_the_records_and_epochs(readers):
    job = job_of(readers, perturb=True, pert_hflip=True, pert_vflip=True, pert_color1=30, seed=7)
    first, _ = job((0, 0, 0, 0, 4, 4.0))
    assert np.array_equal(job((5, 9, 0, 0, 4, 4.0))[0], first)  # index and position do not enter
    epochs = [job((0, 0, epoch, 0, 4, 4.0))[0] for epoch in range(1, 9)]
    assert any(not np.array_equal(e, first) for e in epochs)
    assert not np.array_equal(job_of(readers, perturb=True, pert_color1=30, seed=8)((0, 0, 0, 0, 4, 4.0))[0],
                              job_of(readers, perturb=True, pert_color1=30, seed=7)((0, 0, 0, 0, 4, 4.0))[0])


def test_a_pickled_job_makes_the_same_output(readers):
    job = job_of(readers, perturb=True, pert_color1=40, crop_width=4, crop_height=3, batch=3, seed=11,
                 skip_errors=True, cache=True)
    copy = pickle.loads(pickle.dumps(job))
    assert copy is not job and copy.build() is copy
    assert (copy.group, copy.window, copy.chunk, copy.skip_errors, copy.seed) == (3, job.window, job.chunk, True, 11)
    assert copy.cache == {} and copy.profile is None
    for unit in [(0, 0, 0, 0, 1, 1.0), (1, 1, 3, 0, 9, 9.0), (2, 11, 2, 1, 4, 104.0)]:
        image, (target, dense, damage) = job(unit)
        again, (target2, dense2, damage2) = copy(unit)
        assert np.array_equal(image, again) and (target, dense, damage) == (target2, dense2, damage2)
    try:
        for reader in copy.readers:
            assert reader.path in {r.path for r in readers} and reader is not readers[0]
    finally:
        for reader in copy.readers:
            reader.close()


# -- failures -------------------------------------------------------------------------------------------------------------
def test_failed_skips_picpac_errors_only_with_skip_errors(readers):
    unit = (6, 2, 0, 0, 2, 2.0)
    error = SampleError("db", 2, "cannot decode its image")
    assert job_of(readers, skip_errors=True).failed(unit, error) == 6
    assert job_of(readers, skip_errors=True).failed(unit, PicPacValueError("bad")) == 6
    assert job_of(readers, skip_errors=True).failed(unit, ZeroDivisionError("user code")) is None
    assert job_of(readers).failed(unit, error) is None


def test_a_broken_record_raises_a_sample_error_naming_it(tmp_path):
    path = tmp_path / "broken.picpac"
    with picpac.Writer(path) as w:
        w.append(image=b"not an image", label=0.0)
    with picpac.Reader(path) as reader:
        job = job_of([reader], skip_errors=True)
        with pytest.raises(SampleError, match=rf"^{path}: record 0 cannot decode its image$") as info:
            job((3, 0, 0, 0, 0, 0.0))
        assert job.failed((3, 0, 0, 0, 0, 0.0), info.value) == 3


# -- units ---------------------------------------------------------------------------------------------------------------
def test_units_of_keys_and_a_pool(readers):
    pool = Pool(records=np.array([5, 0, 3, 1]), sources=np.array([0, 1, 0, 1]),
                labels=np.array([5.0, 100.0, 3.0, 101.0]), fetchers=[None, None])
    units = list(job_of(readers).units(keys_of([2, 0, 1, 3, 2], [0, 0, 0, 1, 1]), pool))
    assert units == [(0, 2, 0, 0, 3, 3.0), (1, 0, 0, 0, 5, 5.0), (2, 1, 0, 1, 0, 100.0), (3, 3, 1, 1, 1, 101.0),
                     (4, 2, 1, 0, 3, 3.0)]
    assert all(type(v) is int for u in units for v in u[:5]) and all(type(u[5]) is float for u in units)


def test_units_prefetch_each_sources_records_a_window_ahead(readers):
    asked: list[tuple[str, list[int]]] = []
    pool = Pool(records=np.array([10, 11, 12, 13, 14, 15, 16, 17]), sources=np.array([0, 1, 0, 1, 0, 1, 0, 1]),
                labels=np.zeros(8), fetchers=[lambda r: asked.append(("db", r.tolist())),
                                              lambda r: asked.append(("mixin", r.tolist()))])
    job = job_of(readers, workers=1, preload=3)
    assert job.window == 3
    units = job.units(keys_of([0, 1, 2, 3, 4, 5, 6]), pool)
    assert asked == []  # nothing before the first unit is asked for
    assert next(units)[1] == 0
    # the first window and the next one were asked for, each source its own records
    assert asked == [("db", [10, 12]), ("mixin", [11]), ("db", [14]), ("mixin", [13, 15])]
    assert [u[1] for u in units] == [1, 2, 3, 4, 5, 6]
    assert asked[4:] == [("db", [16]), ("mixin", [])]
    only_db = Pool(pool.records, pool.sources, pool.labels, [pool.fetchers[0], None])
    asked.clear()
    list(job.units(keys_of([1, 3, 5]), only_db))  # the mixin has no fetcher; the db has none of these records
    assert asked == [("db", [])]


def test_prefetched_without_fetchers_is_the_keys_chunks():
    chunks = [(p.tolist(), e.tolist()) for p, e in prefetched(keys_of([3, 1, 2]), [None, None], np.zeros(4, int),
                                                                np.arange(4), 2)]
    assert chunks == [([3, 1], [0, 0]), ([2], [0])]


# -- collect ---------------------------------------------------------------------------------------------------------------
def test_collect_makes_parts_counting_padding(readers):
    job = job_of(readers, batch=2)
    units = [(0, 4, 0, 0, 4, 4.0), (1, 7, 0, 0, 7, 7.0), (2, 1, 0, 0, 1, 1.0), (3, 4, 0, 0, 4, 4.0),
             (4, 2, 0, 0, 2, 2.0)]
    outputs = [job(u) for u in units]
    listed = Delivery([o[0] for o in outputs[:2]], units[:2], [o[1] for o in outputs[:2]], 2)
    shared = Delivery(np.stack([o[0] for o in outputs[2:4]]), units[2:4], [o[1] for o in outputs[2:4]], 3)
    last = Delivery([outputs[4][0]], units[4:], [outputs[4][1]], 1)
    skipped = []
    parts = list(job.collect(iter([listed, shared, last]), 3, lambda exc, index: skipped.append(index)))
    assert all(type(p) is Part for p in parts) and skipped == []
    assert [(p.positions, p.padding, p.taken, p.shared) for p in parts] == \
        [([4, 7], 0, 2, False), ([1, 4], 1, 3, True), ([2], 1, 1, False)]  # indices >= 3 pad the pass
    assert parts[0].images is listed.arrays and parts[1].images is shared.arrays
    assert parts[0].targets == (None, None) and parts[0].dense == ((), ())
    parts = list(job.collect(iter([listed, shared]), None, skipped.append))  # an endless stream: no padding
    assert [p.padding for p in parts] == [0, 0]


def test_collect_over_a_thread_executor(readers):
    job = job_of(readers, batch=3, workers=2, preload=4)
    pool = Pool(records=np.arange(10), sources=np.zeros(10, int), labels=np.arange(10.0), fetchers=[None])
    executor = ThreadExecutor(2)
    deliveries = executor.run(job, job.units(keys_of([9, 8, 7, 6, 5, 4, 3]), pool), job.group, job.window,
                              lambda unit, exc: None, job.chunk)
    parts = list(job.collect(deliveries, 5, lambda exc, index: None))
    assert [p.positions for p in parts] == [[9, 8, 7], [6, 5, 4], [3]]
    assert [p.padding for p in parts] == [0, 1, 1] and [p.taken for p in parts] == [3, 3, 1]
    assert [img[:, 0, 0].tolist() for img in parts[0].images] == [[27.0, 18.0, 9.0], [24.0, 16.0, 8.0],
                                                                   [21.0, 14.0, 7.0]]


# -- cache ---------------------------------------------------------------------------------------------------------------
def test_cache_keeps_the_settled_sample(readers):
    keys = dict(resize_width=12, resize_height=8, perturb=True, pert_hflip=True, pert_color1=20)
    job, plain = job_of(readers, cache=True, **keys), job_of(readers, **keys)
    first, _ = job((0, 5, 0, 0, 5, 5.0))
    assert list(job.cache) == [(0, 5)] and job.cache[(0, 5)].size == (12, 8)
    readers_were, job.readers = job.readers, [None, None]  # what comes next must come from the cache
    # each epoch's random steps start again from the settled sample, as they do without the cache
    for epoch in range(8):
        assert np.array_equal(job((0, 5, epoch, 0, 5, 5.0))[0], plain((0, 5, epoch, 0, 5, 5.0))[0])
    assert np.array_equal(job((0, 5, 0, 0, 5, 5.0))[0], first)
    with pytest.raises(TypeError):
        job((0, 6, 0, 0, 6, 6.0))  # not cached: read, from the reader that is gone
    job.readers = readers_were
    assert job_of(readers).cache is None


# -- capacity ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keys, window, chunk", [
    (dict(workers=2, preload=40), 40, 5),  # window // (4 * workers)
    (dict(workers=1, preload=1000), 1000, 8),  # at most 8
    (dict(workers=4, preload=8), 8, 1),  # at least 1
    (dict(workers=2), 32, 4),  # preload: 16 per worker
    (dict(workers=1, batch=64), 64, 8),  # and at least a batch
])
def test_window_and_chunk_from_capacity(readers, keys, window, chunk):
    job = job_of(readers, **keys)
    assert (job.window, job.chunk, job.group) == (window, chunk, keys.get("batch", 1))


# -- profile ---------------------------------------------------------------------------------------------------------------
def test_profile_counts_each_sample(readers):
    profile = Profile()
    config = StreamConfig.from_dict({"profile": True})
    job = SampleJob(readers, config, profile=profile)
    for record in range(4):
        job((record, record, 0, 0, record, float(record)))
    snap = profile.snapshot()
    assert snap["processed"] == 4 and list(snap["workers"]) == ["MainThread"]
    assert snap["stages"]["read"] > 0 and snap["stages"]["decode"] > 0 and snap["stages"]["transform"] >= 0
    assert snap["workers"]["MainThread"] >= snap["stages"]["read"] + snap["stages"]["decode"]
