"""picpac.adapters.jax: jax.Arrays from the stream's batches, sharded over the devices' batch mesh,
double-buffered; epochs, ranks and exact resume."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# two CPU devices, so the batch can be split; only heard when JAX is not imported yet (else see below)
if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
jax = pytest.importorskip("jax", reason="JAX is not installed (pip install 'picpac[jax]')")

import picpac  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402
from picpac.adapters.jax import JaxLoader, batch_sharding, device_put_batches  # noqa: E402
from picpac.dataflow import BatchData, PicPacData  # noqa: E402
from helpers import make_db  # noqa: E402

KEYS = dict(batch=4, seed=7, workers=2)
SIZE = dict(resize_width=8, resize_height=6)
TWO = pytest.mark.skipif(len(jax.local_devices()) < 2, reason="JAX was imported with one device before this module "
                         "could set XLA_FLAGS (test_two_devices_in_a_subprocess covers it)")


@pytest.fixture
def db(tmp_path):
    """22 images of 8x6, image i filled with (i, 2i, 3i) and labelled i: the last batch of 4 is short."""
    return make_db(tmp_path / "db.picpac", n=22)


def records(batches) -> list[int]:
    return [int(x) for batch in batches for x in np.asarray(batch[1])[:len(batch[1]) - batch[-1]]]


def numpy_batches(db, **keys):
    config = {"loop": False, "order": "NHWC", "pad": True, "label_dtype": "int32", **keys}
    with picpac.ImageStream(db, **config) as stream:
        return [tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in b) for b in stream]


def test_arrays_equal_the_numpy_stream(db):
    with JaxLoader(db, **KEYS, **SIZE) as loader:
        assert len(loader) == 6 and loader.size() == 22
        got = list(loader)
    want = numpy_batches(db, **KEYS, **SIZE)
    assert len(got) == len(want) == 6
    for (images, labels, pad), (np_images, np_labels, np_pad) in zip(got, want):
        assert isinstance(images, jax.Array) and isinstance(labels, jax.Array) and isinstance(pad, int)
        assert images.dtype == np.float32 and images.shape == (4, 6, 8, 3)  # NHWC; every batch full (pad=True)
        assert labels.dtype == np.int32 and labels.shape == (4,)
        assert np.asarray(images).tobytes() == np_images.tobytes() and np.array_equal(labels, np_labels)
        assert pad == np_pad
    assert [pad for *_, pad in got] == [0, 0, 0, 0, 0, 2]
    assert sorted(records(got)) == list(range(22))


def test_config_wins(db):
    with JaxLoader(db, order="NCHW", pad=False, dtype="uint8", label_dtype="float32", devices=jax.local_devices()[:1],
                   **KEYS, **SIZE) as loader:
        batches = list(loader)
    assert batches[0][0].shape == (4, 3, 6, 8) and batches[0][0].dtype == np.uint8
    assert batches[0][1].dtype == np.float32 and batches[-1][0].shape == (2, 3, 6, 8)
    with JaxLoader(db, onehot=22, **KEYS, **SIZE) as loader:
        assert next(iter(loader))[1].shape == (4, 22)


@TWO
def test_the_batch_is_split_over_the_devices(db):
    devices = jax.local_devices()[:2]
    with JaxLoader(db, devices=devices, **KEYS, **SIZE) as loader:
        for images, labels, _ in loader:
            assert images.sharding == NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
            for array in (images, labels):
                shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start)
                assert [s.device for s in shards] == devices and [s.data.shape[0] for s in shards] == [2, 2]
                assert np.array_equal(np.concatenate([np.asarray(s.data) for s in shards]), np.asarray(array))
    with pytest.raises(picpac.PicPacError, match="multiple"):
        JaxLoader(db, devices=devices, batch=3)


@TWO
def test_a_sharding_given(db):
    mesh = Mesh(np.array(jax.local_devices()[:2]), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    with JaxLoader(db, sharding=replicated, batch=3, seed=7, **SIZE) as loader:  # replicated: any batch size
        images, labels, _ = next(iter(loader))
        assert images.shape == (3, 6, 8, 3) and all(s.data.shape == (3, 6, 8, 3) for s in images.addressable_shards)
    with pytest.raises(picpac.PicPacError, match="not both"):
        JaxLoader(db, sharding=replicated, devices=jax.local_devices())
    with pytest.raises(picpac.PicPacError, match="Sharding"):
        JaxLoader(db, sharding="batch")


def test_two_devices_in_a_subprocess(db):
    """The batch split over two CPU devices, whatever this process's JAX was started with."""
    code = textwrap.dedent(f"""
        import numpy as np, jax
        from picpac.adapters.jax import JaxLoader
        assert len(jax.devices()) == 2, jax.devices()
        with JaxLoader({str(db)!r}, batch=4, seed=7, resize_width=8, resize_height=6) as loader:
            for images, labels, pad in loader:
                assert sorted(s.data.shape[0] for s in images.addressable_shards) == [2, 2]
                assert {{s.device for s in images.addressable_shards}} == set(jax.devices())
        print("ok")
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_set_epoch_changes_the_order_as_the_stream_does(db):
    with JaxLoader(db, **KEYS, **SIZE) as loader, \
            picpac.ImageStream(db, loop=False, pad=True, **KEYS, **SIZE) as stream:
        orders = []
        for epoch in (0, 1, 0, 5):
            loader.set_epoch(epoch)
            stream.set_epoch(epoch)
            got = records(loader)
            assert got == records(stream) and sorted(got) == list(range(22))
            orders.append(got)
    assert orders[0] == orders[2] and orders[0] != orders[1] != orders[3]
    with JaxLoader(db, **KEYS, **SIZE) as loader:  # no set_epoch: passes count up, as the stream's
        assert records(loader) == orders[0] and records(loader) == orders[1]


def test_double_buffering(db):
    """When batch k is given, batch k+1 has been drawn and put on the devices already."""
    drawn = []

    def source():
        for i in range(4):
            drawn.append(i)
            yield {"x": np.full((2, 3), i, np.float32), "i": i}

    seen = []
    for batch in device_put_batches(source(), devices=jax.local_devices()[:1]):
        seen.append((int(batch["x"][0, 0]), len(drawn)))
        assert isinstance(batch["x"], jax.Array) and batch["i"] == seen[-1][0]
    assert seen == [(0, 2), (1, 3), (2, 4), (3, 4)]


def test_device_put_batches_over_a_dataflow(db):
    df = BatchData(PicPacData(db, shuffle=False), 2, remainder=True)
    df.reset_state()
    reference = BatchData(PicPacData(db, shuffle=False), 2, remainder=True)
    reference.reset_state()
    got = list(device_put_batches(df, batch_sharding(jax.local_devices()[:2])))
    want = list(reference)
    assert len(got) == len(want) == 11
    for (images, labels), (np_images, np_labels) in zip(got, want):
        assert images.dtype == np.uint8 and np.array_equal(images, np_images) and np.array_equal(labels, np_labels)


def test_state_dict_excludes_the_batch_held_ahead(db):
    with JaxLoader(db, **KEYS, **SIZE) as loader:
        loader.set_epoch(2)
        batches = iter(loader)
        first = [next(batches) for _ in range(3)]  # the loader has made a 4th already
        state = json.loads(json.dumps(loader.state_dict()))
        rest = records(batches)
    with JaxLoader(db, **KEYS, **SIZE) as resumed:
        resumed.load_state_dict(state)
        again = list(resumed)
        assert records(again) == rest and len(again) == 3
        assert sorted(records(first) + rest) == list(range(22))
        with pytest.raises(picpac.PicPacError, match="state_dict"):
            resumed.load_state_dict({"epoch": 1})


def test_state_after_a_break(db):
    """A loop broken off: the state still leaves out the batch held ahead; the next loop of an endless
    stream goes on from the last batch given."""
    with JaxLoader(db, **KEYS, **SIZE) as loader, JaxLoader(db, **KEYS, **SIZE) as whole:
        everything = records(whole)
        for i, _ in enumerate(loader):
            if i == 1:
                break
        state = loader.state_dict()
        with JaxLoader(db, **KEYS, **SIZE) as resumed:
            resumed.load_state_dict(state)
            assert records(resumed) == everything[8:]
    with JaxLoader(db, loop=True, **KEYS, **SIZE) as endless, \
            picpac.ImageStream(db, loop=True, pad=True, order="NHWC", **KEYS, **SIZE) as stream:
        want = [int(x) for _ in range(8) for x in next(stream)[1]]
        got = []
        for _ in range(4):
            for i, batch in enumerate(endless):
                got += records([batch])
                if i == 1:
                    break
        assert got == want


def test_rank_defaults_from_jax_processes(db, monkeypatch):
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    seen = []
    for rank in range(2):
        monkeypatch.setattr(jax, "process_index", lambda rank=rank: rank)
        with JaxLoader(db, devices=jax.local_devices()[:1], **KEYS, **SIZE) as loader:
            assert (loader.rank, loader.world_size) == (rank, 2) and loader.size() == 11
            seen.append(records(loader))
    assert sorted(sum(seen, [])) == list(range(22))
    with JaxLoader(db, rank=1, world_size=3, **KEYS, **SIZE) as loader:  # given: they win
        assert (loader.rank, loader.world_size) == (1, 3)


def test_rank_defaults_in_one_process(db, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with JaxLoader(db, **KEYS) as loader:
        assert (loader.rank, loader.world_size) == (0, 1) and loader.size() == 22


def test_no_stream_is_passed_in(db):
    with picpac.ImageStream(db) as stream, pytest.raises(picpac.PicPacError, match="device_put_batches"):
        JaxLoader(stream)
    with JaxLoader({"db": str(db), **KEYS}) as loader:
        assert loader.size() == 22


def test_missing_jax_names_the_extra(monkeypatch):
    import importlib

    monkeypatch.setitem(sys.modules, "jax", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "picpac.adapters.jax")
    with pytest.raises(picpac.adapters.MissingFrameworkError, match=r"pip install 'picpac\[jax\]'"):
        importlib.import_module("picpac.adapters.jax")


def test_device_stage_tensors_arrive_through_dlpack(db):
    with JaxLoader(db, device="cpu", dtype="uint8", **KEYS, **SIZE) as loader:
        got = list(loader)
    want = numpy_batches(db, dtype="uint8", **KEYS, **SIZE)
    for (images, labels, _), (np_images, np_labels, _) in zip(got, want):
        assert isinstance(images, jax.Array) and images.dtype == np.uint8 and images.shape == (4, 6, 8, 3)
        assert np.array_equal(np.asarray(images), np_images) and np.array_equal(labels, np_labels)
