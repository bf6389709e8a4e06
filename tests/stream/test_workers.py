"""workers: the default leaves the consumer a core; workers='auto' measures the GIL-held share of the stream's own
samples and picks threads or processes from it. The machine's size is set with monkeypatch where a choice needs
more cores than this one has."""
import pytest

import picpac
from picpac.errors import PicPacTypeError
from picpac.image.decoding import REGION_DECODE
from picpac.stream import workers
from picpac.stream.config import StreamConfig
from picpac.stream.job import capacity, default_workers, usable_cores

from helpers import smooth_jpeg


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("workers") / "db.picpac"
    with picpac.Writer(path) as w:
        for i in range(40):
            w.append(image=smooth_jpeg(320, 240, i), label=i % 4)
    return path


def hold_the_gil(sample, rng):
    """A Python step of a few milliseconds, all of it holding the GIL."""
    sum(range(200_000))
    return sample


def test_the_default_leaves_the_consumer_a_core(db):
    assert default_workers() == max(1, usable_cores() - 1)
    assert capacity(StreamConfig.from_dict({}))[0] == default_workers()
    assert capacity(StreamConfig.from_dict({"workers": 3}))[0] == 3
    with picpac.ImageStream(db, loop=False, batch=8) as stream:
        assert stream.stats()["worker_count"] == default_workers() and stream.stats()["workers_reason"] is None


def test_auto_is_a_value_of_workers_and_threads():
    assert StreamConfig.from_dict({"workers": "AUTO"}).parallelism.workers == "auto"
    assert StreamConfig.from_dict({"threads": "auto"}).parallelism.workers == "auto"
    with pytest.raises(PicPacTypeError, match="'workers' must be an int in \\[1, 1024\\] or 'auto', got 'many'"):
        StreamConfig.from_dict({"workers": "many"})


def test_python_steps_that_hold_the_gil_get_processes(db, monkeypatch):
    monkeypatch.setattr(workers, "default_workers", lambda: 15)  # a 16-core machine
    config = {"batch": 8, "resize_width": 64, "resize_height": 48, "transforms": [hold_the_gil], "workers": "auto"}
    with picpac.ImageStream(db, loop=False, **config) as stream:
        stats = stream.stats()
        assert (stream.config.parallelism.backend, stats["worker_count"]) == ("process", 15)
        assert stream.config.parallelism.workers == 15 and stream.config.parallelism.backend == "process"
        held = float(stats["workers_reason"].split("%")[0]) / 100
        assert held > 0.5 and "15 worker processes (no shared GIL)" in stats["workers_reason"]
        assert sum(len(b[0]) for b in stream) == 40  # and it streams


def test_a_given_thread_backend_gets_as_many_threads_as_the_gil_allows(db, monkeypatch):
    monkeypatch.setattr(workers, "default_workers", lambda: 15)
    config = {"batch": 8, "resize_width": 64, "resize_height": 48, "transforms": [hold_the_gil], "workers": "auto",
              "backend": "thread"}
    with picpac.ImageStream(db, loop=False, **config) as stream:
        stats = stream.stats()
        held = float(stats["workers_reason"].split("%")[0]) / 100
        assert stream.config.parallelism.backend == "thread"
        assert stats["worker_count"] == max(1, min(15, int(1 / held))) < 15
        assert "backend='thread' was given" in stats["workers_reason"]


def test_a_job_that_cannot_be_pickled_keeps_threads(db, monkeypatch):
    monkeypatch.setattr(workers, "default_workers", lambda: 15)
    config = {"batch": 8, "resize_width": 64, "resize_height": 48, "workers": "auto",
              "transforms": [lambda sample, rng: hold_the_gil(sample, rng)]}  # a lambda: spawn cannot send it
    with picpac.ImageStream(db, loop=False, **config) as stream:
        stats = stream.stats()
        assert stream.config.parallelism.backend == "thread"
        assert "processes cannot take this job" in stats["workers_reason"]


@pytest.mark.skipif(not REGION_DECODE, reason="the fused C path needs picpac.image._jpeg (libjpeg-turbo's headers)")
def test_the_fused_path_holds_the_gil_briefly_and_keeps_threads(db, monkeypatch):
    monkeypatch.setattr(workers, "default_workers", lambda: 7)  # an 8-core machine
    with picpac.ImageStream(db, loop=False, batch=8, resize_width=128, resize_height=96, workers="auto") as stream:
        stats = stream.stats()
        assert (stream.config.parallelism.backend, stats["worker_count"]) == ("thread", 7), stats["workers_reason"]
        assert float(stats["workers_reason"].split("%")[0]) < 100 / 7


def test_the_probe_measures_the_share_outside_reading_and_decoding(db):
    from picpac.stream.sample_job import SampleJob
    with picpac.ImageStream(db, loop=False, batch=8, resize_width=64, resize_height=48, fused=False) as stream:
        pipeline = stream._pipeline
        light = workers.probe(SampleJob, pipeline._readers, pipeline.config, pipeline.pool)
        heavy = workers.probe(SampleJob, pipeline._readers, pipeline.config.replace(transforms=[hold_the_gil]),
                              pipeline.pool)
    assert 0 < light < heavy <= 1 and heavy > 0.5
