"""picpac.adapters.torch: tensors from the stream's batches, epochs, DataLoader workers, pinning, the
device prefetcher and resume."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'picpac[torch]')")

import picpac  # noqa: E402
from picpac.adapters.torch import DevicePrefetcher, TorchDataset, TorchLoader, pinning_available  # noqa: E402
from helpers import make_db  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA path is not tested here")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
KEYS = dict(batch=4, seed=7, workers=2)
WORKER_START = "forkserver"
"""How these tests' DataLoaders start workers. Other test modules leave JAX's and TensorFlow's thread pools
running in this process, and a fork copies whatever locks those threads hold at that moment (a worker hung
for ever in a full run): forked workers are tested in a fresh interpreter instead
(test_in_process_dataset_then_forked_workers)."""
torch.multiprocessing.get_context(WORKER_START).set_forkserver_preload(["picpac.adapters.torch"])


@pytest.fixture
def db(tmp_path):
    """24 images of 8x6, image i filled with (i, 2i, 3i) and labelled i: labels are the record numbers."""
    return make_db(tmp_path / "db.picpac", n=24)


def records(batches) -> list[int]:
    return [int(x) for batch in batches for x in batch[1][:len(batch[1]) - batch[-1]]]


def test_tensors_share_the_stream_batches(db):
    with TorchLoader(db, **KEYS) as loader, picpac.ImageStream(db, loop=False, label_dtype="int64", **KEYS) as stream:
        assert len(loader) == len(stream) == 6 and loader.size() == 24
        got, want = list(loader), list(stream)
    assert len(got) == len(want) == 6
    for (images, labels, pad), (np_images, np_labels, np_pad) in zip(got, want):
        assert images.dtype == torch.float32 and images.shape == (4, 3, 6, 8) and images.is_contiguous()
        assert labels.dtype == torch.int64 and labels.shape == (4,)
        assert isinstance(pad, int) and pad == np_pad == 0
        assert np.array_equal(images.numpy(), np_images) and np.array_equal(labels.numpy(), np_labels)
    assert sorted(records(got)) == list(range(24))


def test_zero_copy_from_numpy(db):
    from picpac.adapters.torch import to_tensors

    with picpac.ImageStream(db, loop=False, **KEYS) as stream:
        batch = next(stream)
    images, labels, pad = to_tensors(batch)
    assert images.data_ptr() == batch[0].ctypes.data and labels.data_ptr() == batch[1].ctypes.data


def test_channels_last(db):
    with TorchLoader(db, memory_format="channels_last", dtype="uint8", **KEYS) as loader, \
            TorchLoader(db, dtype="uint8", **KEYS) as nchw:
        for (images, labels, _), (reference, _, _) in zip(loader, nchw):
            assert images.shape == (4, 3, 6, 8) and images.dtype == torch.uint8
            assert images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
            assert torch.equal(images, reference)
    with TorchLoader(db, memory_format=torch.channels_last, **KEYS) as loader:
        assert loader.stream.config["order"] == "NHWC"
    with pytest.raises(picpac.PicPacError, match="memory_format"):
        TorchLoader(db, memory_format="channels_last", order="NCHW")
    with pytest.raises(picpac.PicPacError, match="memory_format"):
        TorchLoader(db, memory_format="nhwc")


def test_labels_follow_the_config(db):
    with TorchLoader(db, label_dtype="float32", **KEYS) as loader:
        assert next(iter(loader))[1].dtype == torch.float32
    with TorchLoader(db, onehot=24, **KEYS) as loader:  # one-hot rows stay float32, as soft targets are
        assert next(iter(loader))[1].shape == (4, 24)


def test_set_epoch_changes_the_order_as_the_stream_does(db):
    with TorchLoader(db, **KEYS) as loader, picpac.ImageStream(db, loop=False, **KEYS) as stream:
        orders = []
        for epoch in (0, 1, 0, 5):
            loader.set_epoch(epoch)
            stream.set_epoch(epoch)
            got = records(loader)
            assert got == records(stream)
            assert sorted(got) == list(range(24))
            orders.append(got)
    assert orders[0] == orders[2] and orders[0] != orders[1] != orders[3]
    with TorchLoader(db, **KEYS) as loader:  # no set_epoch: passes count up, as the stream's
        assert records(loader) == orders[0] and records(loader) == orders[1]


def test_rank_defaults_from_torch_distributed(db, monkeypatch):
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 3)
    seen = []
    for rank in range(3):
        monkeypatch.setattr(dist, "get_rank", lambda rank=rank: rank)
        with TorchLoader(db, **KEYS) as loader:
            assert (loader.rank, loader.world_size) == (rank, 3) and loader.size() == 8
            seen.append(records(loader))
    assert sorted(sum(seen, [])) == list(range(24))
    with TorchLoader(db, rank=1, world_size=2, **KEYS) as loader:  # given: they win
        assert (loader.rank, loader.world_size) == (1, 2) and loader.size() == 12


def test_rank_defaults_without_torch_distributed(db, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with TorchLoader(db, **KEYS) as loader:
        assert (loader.rank, loader.world_size) == (0, 1) and loader.size() == 24


def dataloader(dataset, workers=2, **kwargs):
    if workers:
        kwargs.setdefault("multiprocessing_context", WORKER_START)
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, **kwargs)


def collect(dataset, workers, epochs=(None,), **kwargs):
    loader = dataloader(dataset, workers, **kwargs)
    out = []
    for epoch in epochs:
        if epoch is not None:
            dataset.set_epoch(epoch)
        batches = list(loader)
        for images, labels, pad in batches:
            assert images.dtype == torch.float32 and images.shape[1:] == (3, 6, 8) and labels.dtype == torch.int64
            # each image is the record its label names: (i, 2i, 3i) as BGR, RGB out
            assert torch.equal(images[:, 2, 0, 0], labels.float())
        out.append(records(batches))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers_read_every_sample_once(db, workers):
    dataset = TorchDataset(db, **KEYS)
    (seen,) = collect(dataset, workers)
    assert sorted(seen) == list(range(24))


def test_dataloader_workers_split_the_rank_share(db):
    seen = []
    for rank in range(2):  # rank r of 2 with 2 workers: shares 2r and 2r + 1 of 4
        (got,) = collect(TorchDataset(db, rank=rank, world_size=2, **KEYS), 2)
        assert len(got) == 12 and len(set(got)) == 12
        seen += got
    assert sorted(seen) == list(range(24))


def test_dataloader_uneven_shares(tmp_path):
    """25 samples among 2 workers: share_pad=True (the default) repeats one so the shares are equal, as
    DistributedSampler does, and the batch's ``pad`` counts it, so the real samples are each read once;
    share_pad=False drops one instead."""
    db = make_db(tmp_path / "odd.picpac", n=25)
    batches = list(dataloader(TorchDataset(db, **KEYS)))
    assert sum(len(labels) for _, labels, _ in batches) == 26 and sum(pad for *_, pad in batches) == 1
    assert sorted(records(batches)) == list(range(25))
    (dropped,) = collect(TorchDataset(db, share_pad=False, **KEYS), 2)
    assert len(dropped) == len(set(dropped)) == 24


def test_dataloader_epochs(db):
    """set_epoch before each loop gives the workers that epoch's order: the same samples as in-process
    streams of the two shares, per epoch; and a new order for a new epoch."""
    def share_records(epoch):
        out = []
        for share in range(2):
            with picpac.ImageStream(db, loop=False, rank=share, world_size=2, **KEYS) as stream:
                stream.set_epoch(epoch)
                out.append(records(stream))
        return out

    first, second = collect(TorchDataset(db, **KEYS), 2, epochs=(3, 4))
    for got, epoch in ((first, 3), (second, 4)):
        a, b = share_records(epoch)
        assert sorted(got) == list(range(24))
        assert got == [x for pair in zip(np.reshape(a, (-1, 4)), np.reshape(b, (-1, 4))) for part in pair
                       for x in part]  # the DataLoader takes the workers' batches in turn
    assert first != second


def test_dataloader_spawned_workers(db):
    dataset = TorchDataset(db, **KEYS)
    (seen,) = collect(dataset, 2, multiprocessing_context="spawn")
    assert sorted(seen) == list(range(24))


def test_dataloader_channels_last(db):
    for images, _, _ in dataloader(TorchDataset(db, memory_format="channels_last", **KEYS)):
        assert images.shape == (4, 3, 6, 8) and images.is_contiguous(memory_format=torch.channels_last)


def test_in_process_dataset_then_forked_workers(db):
    """A dataset iterated in-process, then by workers forked from that process: each worker opens its own
    stream. Run in a fresh interpreter, whose only threads are torch's and picpac's (see WORKER_START)."""
    script = f"""
import torch
from picpac.adapters.torch import TorchDataset
dataset = TorchDataset({str(db)!r}, **{KEYS!r})
for workers in (0, 2):
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None)
    print(sorted(int(x) for _, labels, pad in loader for x in labels[:len(labels) - pad]))
dataset.close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [str(list(range(24)))] * 2 + [""]


@pytest.mark.skipif(not pinning_available(), reason="torch cannot pin memory here (it needs an accelerator)")
def test_pin_memory(db):
    with TorchLoader(db, pin_memory=True, **KEYS) as loader, TorchLoader(db, **KEYS) as plain:
        for (images, labels, _), (reference, _, _) in zip(loader, plain):
            assert images.is_pinned() and labels.is_pinned() and torch.equal(images, reference)
    with TorchLoader(db, pin_memory=True, memory_format="channels_last", **KEYS) as loader:
        images = next(iter(loader))[0]
        assert images.is_pinned() and images.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.skipif(pinning_available(), reason="torch can pin memory here: test_pin_memory covers it")
def test_pin_memory_unavailable_warns(db):
    with pytest.warns(RuntimeWarning, match="pin_memory"):
        loader = TorchLoader(db, pin_memory=True, **KEYS)
    with loader:
        images = next(iter(loader))[0]
        assert not loader.pin_memory and images.shape == (4, 3, 6, 8)


@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last"])
def test_prefetcher_normalises_on_the_device(db, memory_format):
    """The host sends uint8; the prefetcher's float normalisation equals the stream's host-side one."""
    host = TorchLoader(db, value_range="0-1", mean=MEAN, std=STD, memory_format=memory_format, **KEYS)
    raw = TorchLoader(db, dtype="uint8", memory_format=memory_format, **KEYS)
    device = DevicePrefetcher(raw, "cpu", mean=MEAN, std=STD, value_range="0-1")
    assert len(device) == 6
    count = 0
    for (images, labels, pad), (want, want_labels, want_pad) in zip(device, host):
        assert images.dtype == torch.float32 and images.device.type == "cpu"
        assert images.is_contiguous(memory_format=getattr(torch, memory_format.replace("contiguous",
                                                                                         "contiguous_format")))
        assert torch.allclose(images, want, atol=1e-6, rtol=0) and torch.equal(labels, want_labels) and pad == want_pad
        count += 1
    assert count == 6
    host.close(), raw.close()


def test_prefetcher_options(db):
    with TorchLoader(db, dtype="uint8", **KEYS) as raw, TorchLoader(db, mean=[10, 20, 30], std=2, **KEYS) as host:
        for (images, _, _), (want, _, _) in zip(DevicePrefetcher(raw, "cpu", mean=[10, 20, 30], std=2), host):
            assert torch.equal(images, want)  # pixel units, the same float32 steps: bit for bit
    with TorchLoader(db, dtype="uint8", **KEYS) as raw:
        plain = next(iter(DevicePrefetcher(raw, "cpu")))[0]
        assert plain.dtype == torch.uint8
        raw.set_epoch(0)  # (each loop is the next pass)
        half = next(iter(DevicePrefetcher(raw, "cpu", dtype="float16")))[0]
        assert half.dtype == torch.float16 and torch.equal(half, plain.half())
        with pytest.raises(picpac.PicPacError, match="3 channel"):
            next(iter(DevicePrefetcher(raw, "cpu", mean=[1, 2])))
    with pytest.raises(picpac.PicPacError, match="value_range"):
        DevicePrefetcher([], "cpu", value_range="0-10")
    with pytest.raises(picpac.PicPacError, match="floating"):
        DevicePrefetcher([], "cpu", dtype=torch.int32)


def test_prefetcher_over_a_dataloader(db):
    loader = dataloader(TorchDataset(db, dtype="uint8", **KEYS))
    seen = [int(x) for _, labels, _ in DevicePrefetcher(loader, "cpu", mean=MEAN, std=STD, value_range="0-1")
            for x in labels]
    assert sorted(seen) == list(range(24))


def test_state_dict_round_trip(db):
    with TorchLoader(db, **KEYS) as loader:
        loader.set_epoch(2)
        batches = iter(loader)
        first = [next(batches) for _ in range(2)]
        state = json.loads(json.dumps(loader.state_dict()))
        rest = records(batches)
    with TorchLoader(db, **KEYS) as resumed:
        resumed.load_state_dict(state)
        assert records(resumed) == rest
        assert sorted(records(first) + rest) == list(range(24))
        with pytest.raises(picpac.PicPacError, match="state_dict"):
            resumed.load_state_dict({"epoch": 1})


def test_prefetcher_state_dict_excludes_the_batch_held_ahead(db):
    with TorchLoader(db, **KEYS) as loader:
        device = DevicePrefetcher(loader, "cpu")
        batches = iter(device)
        first = [next(batches) for _ in range(3)]  # the loader has made a 4th already
        state = json.loads(json.dumps(device.state_dict()))
        rest = records(batches)
    with TorchLoader(db, **KEYS) as again:
        resumed = DevicePrefetcher(again, "cpu")
        resumed.load_state_dict(state)
        assert records(resumed) == rest and len(rest) == 12
        assert sorted(records(first) + rest) == list(range(24))


def test_no_stream_is_passed_in(db):
    with picpac.ImageStream(db) as stream, pytest.raises(picpac.PicPacError, match="path"):
        TorchLoader(stream)


def test_dict_form(db):
    with TorchLoader({"db": str(db), **KEYS}) as loader:
        assert loader.size() == 24


@CUDA
@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last"])
def test_cuda_prefetcher_matches_host(db, memory_format):  # pragma: no cover - needs a GPU
    host = TorchLoader(db, value_range="0-1", mean=MEAN, std=STD, memory_format=memory_format, **KEYS)
    raw = TorchLoader(db, dtype="uint8", memory_format=memory_format, pin_memory=True, **KEYS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = list(zip(DevicePrefetcher(raw, "cuda", mean=MEAN, std=STD, value_range="0-1"), host))
    for (images, labels, _), (want, want_labels, _) in pairs:
        assert images.device.type == "cuda" and labels.device.type == "cuda"
        assert torch.allclose(images.cpu(), want, atol=1e-6, rtol=0) and torch.equal(labels.cpu(), want_labels)
        if memory_format == "channels_last":
            assert images.is_contiguous(memory_format=torch.channels_last)
    host.close(), raw.close()


def test_device_loader_batches_are_the_device_streams_with_labels_beside_them(db):
    with TorchLoader(db, device="cpu", dtype="uint8", **KEYS) as loader, \
            picpac.ImageStream(db, loop=False, device="cpu", dtype="uint8", label_dtype="int64", **KEYS) as stream, \
            TorchLoader(db, dtype="uint8", **KEYS) as numpy_loader:
        for (images, labels, pad), (reference, ref_labels, _), (plain, _, _) in zip(loader, stream, numpy_loader):
            assert images.shape == (4, 3, 6, 8) and images.dtype == torch.uint8 and labels.dtype == torch.int64
            assert torch.equal(images, reference) and torch.equal(labels, torch.from_numpy(ref_labels))
            assert torch.equal(images, plain)  # flat images of whole pixels: resampled to the same bytes
    with TorchLoader(db, device="cpu", memory_format="channels_last", dtype="uint8", **KEYS) as loader:
        images = next(iter(loader))[0]
        assert images.shape == (4, 3, 6, 8) and images.is_contiguous(memory_format=torch.channels_last)


def test_dataloader_workers_refuse_the_device_stage(db):
    with pytest.raises(picpac.PicPacError, match="TorchDataset with device='cpu'.*TorchLoader"):
        TorchDataset(db, device="cpu")


@pytest.mark.parametrize("batch_size, workers", [(4, 0), (None, 0), (1, 2)])
def test_a_dataloader_that_would_stack_whole_batches_is_refused(db, batch_size, workers):
    """DataLoader's default batch_size=1 (or any) collates TorchDataset's batches into 5-D images: refused by name."""
    keys = {"multiprocessing_context": WORKER_START} if workers else {}
    loader = torch.utils.data.DataLoader(TorchDataset(db, batch=4, workers=1), batch_size=batch_size,
                                         num_workers=workers, **keys)
    if batch_size is None:  # the right spelling
        assert next(iter(loader))[0].shape == (4, 3, 6, 8)
        return
    with pytest.raises(picpac.PicPacError, match=rf"batch_size={batch_size}\) would stack .*batch_size=None"):
        next(iter(loader))
