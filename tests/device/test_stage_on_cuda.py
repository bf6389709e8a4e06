"""The device stage as it runs on a GPU: the executor's side stream, its events and ``record_stream`` around the real
stage; the host waits once per decoder call and never else (torch's sync debug mode counts them); device memory flat
over many batches. Each runs on the CPU too (the ``device`` fixture), where the same code takes its CPU branches;
benchmarks/device_run.sh runs them on a GPU machine, PICPAC_TEST_DATA naming the copy of the data it carries."""
import gc
import warnings

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import picpac  # noqa: E402
from picpac.device.executor import DeviceExecutor  # noqa: E402
from picpac.device.geometry import Planned, plan  # noqa: E402
from picpac.device.stage import DeviceStage  # noqa: E402
from picpac.image.transforms import Flip, RandomResizedCrop  # noqa: E402
from helpers import imagenet_db  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: benchmarks/device_run.sh runs "
                          "these on a GPU")
SIZE = (24, 16)
W1 = {"transforms": [RandomResizedCrop(64, 64), Flip(horizontal=0.5)], "shuffle": True, "dtype": "uint8",
      "order": "NHWC", "batch": 32, "threads": 2, "seed": 3}


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    return imagenet_db(tmp_path_factory.mktemp("cuda") / "imagenet.picpac")


def planned(unit: int) -> tuple[Planned, None]:
    """A planning thread's work: a 40x30 image of its own, mirrored onto SIZE."""
    pixels = cv2.GaussianBlur(np.random.default_rng(unit).integers(0, 256, (30, 40, 3), dtype=np.uint8), (5, 5), 1)
    matrix = np.array([[-SIZE[0] / 40, 0, SIZE[0]], [0, SIZE[1] / 30, 0]])
    return Planned(None, pixels, plan(matrix, (40, 30), SIZE, (cv2.BORDER_CONSTANT, 0)), None, None, None, SIZE), None


class Watched(DeviceStage):
    """The real stage, noting the CUDA stream each batch was made on."""

    def __init__(self, device: str):
        super().__init__(device, 3, False, np.dtype(np.uint8), True, None, None)
        self.streams: list = []

    def __call__(self, plans):
        if self.cuda:
            self.streams.append(torch.cuda.current_stream(self.device))
        return super().__call__(plans)


def raise_it(unit, exc):
    raise exc


def test_the_executor_makes_the_real_stages_batches_on_a_side_stream_in_order(device):
    stage = Watched(device)
    out = [d.arrays[0] for d in DeviceExecutor(2, stage).run(planned, range(40), 8, 16, raise_it)]
    alone = Watched("cpu")
    for i, images in enumerate(out):  # read on the consumer's stream, which waited for the side stream's event
        assert images.device.type == device and images.shape == (8, 3, SIZE[1], SIZE[0])
        expected = alone([planned(u)[0] for u in range(8 * i, 8 * i + 8)])[0]
        assert np.abs(images.cpu().numpy().astype(int) - expected.numpy().astype(int)).max() <= 1
    if device == "cuda":
        default = torch.cuda.current_stream()
        assert len(stage.streams) == 5 and all(s != default for s in stage.streams)
        assert len({s.cuda_stream for s in stage.streams}) == 1  # one side stream for the run


def test_batches_freed_by_the_consumer_are_not_reused_before_it_is_done(device):
    """``record_stream``: a batch the consumer still reads (work queued on its stream) keeps its memory until that
    work is done, however soon the side stream makes the next ones."""
    alone = Watched("cpu")
    sums = torch.zeros(8, dtype=torch.float64, device=device)
    expected = np.zeros(8)
    for i, delivery in enumerate(DeviceExecutor(2, Watched(device)).run(planned, range(64), 8, 16, raise_it)):
        images = delivery.arrays[0]
        for _ in range(20):  # reads of this batch queued on the consumer's stream
            sums[i] += images.double().sum() / 20
        expected[i] = alone([planned(u)[0] for u in range(8 * i, 8 * i + 8)])[0].double().sum().item()
        del images, delivery
    assert np.abs(sums.cpu().numpy() - expected).max() <= 8 * 3 * SIZE[0] * SIZE[1]  # each value within one level


@CUDA
def test_the_host_waits_once_per_decoder_call_and_never_else(imagenet):
    """(Without a GPU, tests/device/test_stage_syncs.py counts the same waits in a fake CUDA.)"""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught, picpac.ImageStream(imagenet, device="cuda", loop=False,
                                                                              **W1) as stream:
            warnings.simplefilter("always")
            batches = sum(1 for _ in stream)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchronizing" in str(w.message)]
    assert batches == 8 and len(syncs) <= batches, [str(w.message) for w in syncs[:3]]


@CUDA
def test_device_memory_stays_flat_over_many_batches_and_is_all_given_back(imagenet):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    sizes = []
    with picpac.ImageStream(imagenet, device="cuda", loop=True, **W1) as stream:
        for i, (images, *_) in enumerate(stream):
            torch.cuda.synchronize()
            sizes.append(torch.cuda.memory_allocated())  # (the batches in flight included: their sizes vary)
            if i == 80:
                break
    del images, stream
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before + (1 << 20)  # nothing held once the stream is closed
    # what is held does not grow with the batches made: the last epoch's median is the second's
    assert np.median(sizes[-24:]) <= 1.25 * np.median(sizes[8:32]), sizes
