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


def test_a_truncated_jpeg_is_refused_as_on_the_cpu_path_whatever_region_is_read(photos, as_on_cuda, tmp_path):
    """Cut short, its crop in the intact part: nvImageCodec would decode the region, the CPU path refuses the record;
    both refuse it (issue 38, item 7), and both skip it alike with skip_errors=True."""
    path = tmp_path / "cut.picpac"
    data = (SHARED_DATA / "imagenet-250").glob("*.JPEG")
    whole = next(iter(sorted(data))).read_bytes()
    with picpac.Writer(path) as w:
        w.append(image=whole, label=0)
        w.append(image=whole[:len(whole) * 3 // 4], label=1)  # no end-of-image marker
    keys = {"batch": 1, "loop": False, "shuffle": False, "resize_width": 64, "resize_height": 48,
            "crop_width": 32, "crop_height": 8, "round_div": 0}
    for device in (None, "cpu"):
        with pytest.raises(picpac.SampleError, match=r"cut.picpac: record 1 cannot decode its image"):
            list(picpac.ImageStream(path, device=device, **keys))
        with picpac.ImageStream(path, device=device, skip_errors=True, **keys) as s:
            assert [int(labels[0]) for _, labels, _ in s] == [0] and s.stats()["skipped"] == 1


REFUSED = """
import sys, warnings
import cv2, numpy as np, picpac, torch
from picpac.device import stage
from picpac.device.decoders import NvImageCodec
made = stage.DeviceStage.__init__
def init(self, *args, **kwargs):  # as on CUDA: nvImageCodec decodes (its CPU backend); the first to import it
    made(self, *args, **kwargs)
    self.jpeg, self.host = NvImageCodec(torch.device("cpu"), self.channels), stage.HostBuffers(torch.device("cpu"))
stage.DeviceStage.__init__ = init
pixels = cv2.GaussianBlur(np.random.default_rng(1).integers(0, 256, (48, 64, 3), np.uint8), (5, 5), 2)
jpeg = cv2.imencode(".jpg", pixels)[1].tobytes()
with picpac.Writer(sys.argv[1]) as w:
    w.append(image=jpeg.replace(b"\\xff\\xda", b"\\xff\\xd0\\xff\\xda", 1), label=0)
keys = {"batch": 1, "loop": False, "resize_width": 32, "resize_height": 24, "dtype": "uint8"}
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with picpac.ImageStream(sys.argv[1], device="cpu", **keys) as s:
        (images, _, _), = list(s)
        counts = (s.stats()["device_decoded"], s.stats()["cpu_decoded"])
(expected, _, _), = list(picpac.ImageStream(sys.argv[1], **keys))
print(counts, np.array_equal(np.asarray(images), expected))
print("\\n".join(str(w.message) for w in seen if w.category is RuntimeWarning))
"""


def test_a_jpeg_the_device_refuses_is_named_in_a_warning_and_decoded_on_the_cpu(tmp_path):
    """nvImageCodec's own log lines are silenced; the stage names the record it refused and the CPU decodes it as the
    CPU path does (a stray restart marker before the scan: nvImageCodec's parser refuses it, libjpeg reads past it).
    In a process of its own, so that picpac is the first to load nvImageCodec, as in a user's."""
    import subprocess
    import sys

    path = tmp_path / "refused.picpac"
    done = subprocess.run([sys.executable, "-c", REFUSED, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "(0, 1) True"  # decoded on the CPU, the CPU path's bytes
    assert lines[1].startswith("picpac's device stage: nvImageCodec") and \
        lines[1].endswith(f"refused {path}: record 0; the CPU decodes it")
    assert "ERROR" not in done.stderr and "jpeg_parser" not in done.stderr
