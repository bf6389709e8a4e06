"""ImageStream over picpac files on object storage: a real S3 API server on loopback (moto's server mode)."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacTypeError, PicPacValueError, RemoteReadError

from helpers import children, make_db, png, run

_buckets = itertools.count()
CONFIG = dict(batch=8, loop=False, seed=5, resize_width=16, resize_height=12, perturb=True, pert_hflip=True,
              pert_angle=10, workers=2)


def remote(server, tmp_path, **kw) -> dict:
    return {"storage_options": server.options, "cache_dir": str(tmp_path / "cache"), "remote_block_size": "64KiB",
            **kw}


def noisy_db(path, n: int, size=(120, 90)) -> None:
    """n PNGs of random pixels (about 32 KB each at 120 x 90), label i."""
    rng = np.random.default_rng(0)
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=png(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)), label=i)


def put(server, tmp_path, n: int = 60, size=(40, 30)) -> str:
    noisy_db(tmp_path / "a.picpac", n=n, size=size)
    return server.put(f"s{next(_buckets)}-{os.getpid()}", "a.picpac", tmp_path / "a.picpac")


def equal(a, b) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y))
                                    for x, y in zip(a, b))


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_remote_file_streams_the_local_files_batches(s3_server, tmp_path, backend):
    url = put(s3_server, tmp_path)
    local = picpac.ImageStream(str(tmp_path / "a.picpac"), **CONFIG)
    with picpac.ImageStream(url, backend=backend, **CONFIG, **remote(s3_server, tmp_path)) as stream:
        assert equal(run(stream), run(local))
        assert equal(run(stream), run(local))  # the second epoch, reshuffled


def test_a_cache_smaller_than_the_file_streams_it_whole(s3_server, tmp_path):
    url = put(s3_server, tmp_path, n=80, size=(120, 90))
    assert os.path.getsize(tmp_path / "a.picpac") > 2_500_000
    want = run(picpac.ImageStream(str(tmp_path / "a.picpac"), **CONFIG))
    stream = picpac.ImageStream(url, cache_limit="256KiB", **CONFIG, **remote(s3_server, tmp_path))
    assert equal(run(stream), want)
    usage = sum(e.stat().st_size for d in os.scandir(tmp_path / "cache") for e in os.scandir(d.path))
    assert usage <= 256 * 1024


def test_a_server_killed_and_restarted_mid_epoch_delivers_the_same_batches(s3_server, tmp_path):
    url = put(s3_server, tmp_path, n=80, size=(120, 90))
    want = run(picpac.ImageStream(str(tmp_path / "a.picpac"), **CONFIG))
    stream = picpac.ImageStream(url, remote_retries=12, preload=8, **CONFIG, **remote(s3_server, tmp_path))
    got = []
    thread = None
    for i, batch in enumerate(stream):
        got.append(batch)
        if i == 2:
            thread = s3_server.outage(1.0)
    thread.join()
    assert equal(got, want)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_server_that_stays_down_stops_the_stream_with_a_clear_error(s3_server, tmp_path, backend):
    url = put(s3_server, tmp_path, n=80, size=(120, 90))
    before = children() - {s3_server.process.pid}  # the resource tracker, once started: not a leak
    stream = picpac.ImageStream(url, backend=backend, remote_retries=1, preload=8, **CONFIG,
                                **remote(s3_server, tmp_path))
    batches = iter(stream)
    next(batches)
    s3_server.kill()
    try:
        with pytest.raises(RemoteReadError, match=r"s3://.*a\.picpac: reading bytes .* failed 2 times"):
            for _ in batches:
                pass
        stream.close()
        assert children() == before
    finally:
        s3_server.start()
        s3_server.refill()


def test_resume_and_sharded_remote_datasets(s3_server, tmp_path):
    name = f"s{next(_buckets)}-{os.getpid()}"
    for k in range(2):
        make_db(tmp_path / f"t-{k}.picpac", n=20 + k)
        s3_server.put(name, f"t-{k}.picpac", tmp_path / f"t-{k}.picpac")
    config = dict(CONFIG, loop=True)
    want = run(picpac.ImageStream(str(tmp_path / "t-*.picpac"), **config), 8)
    stream = picpac.ImageStream(f"s3://{name}/t-*.picpac", **config, **remote(s3_server, tmp_path))
    first = run(stream, 3)
    state = stream.state_dict()
    assert [d["name"] for d in state["databases"][0]["shards"]] == ["t-0.picpac", "t-1.picpac"]
    resumed = picpac.ImageStream(f"s3://{name}/t-*.picpac", **config, **remote(s3_server, tmp_path))
    resumed.load_state_dict(state)
    assert equal(first + run(resumed, 5), want)


def test_arrays_on_object_storage_take_the_per_sample_path(s3_server, tmp_path):
    images = np.arange(20 * 4 * 4 * 3, dtype=np.uint8).reshape(20, 4, 4, 3)
    picpac.write_arrays(tmp_path / "arr.picpac", images, labels=np.arange(20))
    url = s3_server.put(f"s{next(_buckets)}-{os.getpid()}", "arr.picpac", tmp_path / "arr.picpac")
    stream = picpac.ImageStream(url, batch=5, loop=False, shuffle=False, **remote(s3_server, tmp_path))
    assert stream.stats()["path"] == "sample" and "remote" in stream.stats()["path_reason"]
    local = picpac.ImageStream(str(tmp_path / "arr.picpac"), batch=5, loop=False, shuffle=False)
    assert local.stats()["path"] == "batch"
    assert equal(run(stream), run(local))


@pytest.mark.parametrize("key, value, error", [("cache_limit", "lots", PicPacValueError),
                                               ("cache_limit", 0, PicPacValueError),
                                               ("remote_block_size", "1KiB", PicPacValueError),
                                               ("remote_retries", 1000, PicPacValueError),
                                               ("storage_options", "endpoint", PicPacTypeError)])
def test_bad_remote_keys_name_the_key(tmp_path, key, value, error):
    make_db(tmp_path / "a.picpac")
    with pytest.raises(error, match=key):
        picpac.ImageStream(str(tmp_path / "a.picpac"), **{key: value})
