"""The device stage's pixels against the CPU path's where the axes scale apart (issue 38, item 6): one axis averaged
12x or whole while the other is not, one that grows while the other shrinks. The stage runs on the CPU with the GPU's
decoding code (nvImageCodec's regions, its CPU backend; box averages for a reduced decode), as it runs on CUDA."""
from __future__ import annotations

import numpy as np
import pytest

import picpac
from helpers import SHARED_DATA

torch = pytest.importorskip("torch")
pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")

from picpac.device import stage  # noqa: E402
from picpac.device.decoders import NvImageCodec  # noqa: E402


@pytest.fixture
def as_on_cuda(monkeypatch):
    """DeviceStage(device='cpu') decoding JPEGs as it does on CUDA, over nvImageCodec's CPU backend."""
    made = stage.DeviceStage.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.jpeg, self.host = NvImageCodec(torch.device("cpu"), self.channels), stage.HostBuffers(torch.device("cpu"))
    monkeypatch.setattr(stage.DeviceStage, "__init__", init)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    files = sorted((SHARED_DATA / "imagenet-250").glob("*.JPEG"))[:24]
    if not files:
        pytest.skip(f"real data not found at {SHARED_DATA}")
    path = tmp_path_factory.mktemp("agreement") / "photos.picpac"
    with picpac.Writer(path) as w:
        for i, file in enumerate(files):
            w.append(image=file.read_bytes(), label=i)
    return str(path)


@pytest.mark.parametrize("size", [(224, 32), (1, 224), (640, 48), (32, 224), (224, 224)])
def test_each_axis_is_averaged_as_the_cpu_path_averages_it(photos, as_on_cuda, size):
    keys = {"batch": 8, "loop": False, "shuffle": False, "resize_width": size[0], "resize_height": size[1],
            "dtype": "uint8", "order": "NHWC"}
    cpu = list(picpac.ImageStream(photos, **keys))
    with picpac.ImageStream(photos, device="cpu", **keys) as s:
        device = [(np.asarray(images), labels) for images, labels, _ in s]
        assert s.stats()["device_decoded"] == 24  # every JPEG decoded by the GPU's code
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(cpu, device))
    x, y = (np.concatenate([b[0] for b in run]).astype(np.float64) for run in (cpu, device))
    levels = np.abs(x - y).reshape(len(x), -1).mean(1)
    assert levels.mean() < 0.3 and levels.max() < 0.6, (size, levels.mean(), levels.max())
