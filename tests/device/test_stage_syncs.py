"""The stage synchronises nowhere but where it means to (issue 38, items 2 and 4): on the CPU, the stage's CUDA
branches run against recording stand-ins for CUDA's streams and events, and every call of picpac's device code that
would make the host wait for the device on CUDA is counted: a stream or event synchronisation, a read back of a
tensor (``item``, ``bool``, ``tolist``), a copy to the device that is not asynchronous (``.to(device)`` without
``non_blocking=True``, ``torch.tensor(..., device=...)``). Per batch: the one host wait before the decoder call, and
nothing else, for batches with JPEGs decoded as on CUDA (nvImageCodec's CPU backend), pixels decoded on the CPU,
samples made whole on the CPU, a BGR flip and one-hot masks."""
from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed")

import picpac.device  # noqa: E402
from picpac.device import stage as stage_module  # noqa: E402
from picpac.device.decoders import NvImageCodec  # noqa: E402
from picpac.device.geometry import Planned, plan  # noqa: E402

DEVICE_CODE = str(Path(picpac.device.__file__).parent)
CONSTANT = (cv2.BORDER_CONSTANT, 0)


def from_device_code() -> bool:
    """Whether the call being counted comes from picpac's device code (not torch's own)."""
    caller = inspect.currentframe().f_back.f_back
    return caller is not None and caller.f_code.co_filename.startswith(DEVICE_CODE)


class Recorder:
    """CUDA's streams and events as stand-ins that count what would wait, and the tensor calls that would."""

    def __init__(self, monkeypatch):
        self.counts: Counter = Counter()
        counts = self.counts

        class Stream:
            cuda_stream = 0

            def synchronize(self):
                counts["stream.synchronize"] += 1

            def wait_event(self, event):
                pass

        class Event:
            def record(self, stream=None):
                pass

            def query(self):
                return True

            def synchronize(self):
                counts["event.synchronize"] += 1

        stream = Stream()
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args: self)
        for name in ("item", "tolist", "__bool__"):
            original = getattr(torch.Tensor, name)

            def reading(self, *args, _original=original, _name=name):
                if from_device_code():
                    counts[f"Tensor.{_name}"] += 1
                return _original(self, *args)
            monkeypatch.setattr(torch.Tensor, name, reading)
        to = torch.Tensor.to

        def copying(self, *args, **kwargs):
            moves = any(isinstance(a, (torch.device, str)) for a in args) or "device" in kwargs
            if moves and not kwargs.get("non_blocking") and from_device_code():
                counts["blocking .to(device)"] += 1
            return to(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, "to", copying)
        for name in ("tensor", "as_tensor"):
            original = getattr(torch, name)

            def making(*args, _original=original, _name=name, **kwargs):
                if "device" in kwargs and from_device_code():
                    counts[f"torch.{_name}(device=)"] += 1
                return _original(*args, **kwargs)
            monkeypatch.setattr(torch, name, making)


def cuda_like_stage(onehot: int = 0):
    """A stage on the CPU that takes its CUDA branches: pinned-style host buffers with events, and JPEGs decoded
    by nvImageCodec (its CPU backend) as RGB, so that BGR output flips them on the device."""
    stage = stage_module.DeviceStage("cpu", 3, False, np.dtype(np.uint8), True, None, None, onehot)
    stage.cuda = True
    stage.host = stage_module.HostBuffers(torch.device("cpu"))
    stage.host.cuda = True
    stage.jpeg = NvImageCodec(torch.device("cpu"), 3, bgr=False)
    return stage


def batch(seed: int, masks: bool) -> list[Planned]:
    rng = np.random.default_rng(seed)
    size, out = (64, 48), []
    for i in range(6):
        pixels = cv2.GaussianBlur(rng.integers(0, 256, (60 + 4 * i, 80, 3), np.uint8), (5, 5), 2)
        source = (pixels.shape[1], pixels.shape[0])
        matrix = np.array([[size[0] / source[0], 0.1 * (i % 2), 0], [0, size[1] / source[1], 0]])
        mask = mask_geometry = None
        if masks:
            mask = (np.arange(source[0] * source[1]).reshape(source[1], source[0]) % 3).astype(np.uint8)
            mask_geometry = plan(matrix, source, size, CONSTANT, nearest=True)
        if i % 3 == 0:  # a JPEG for the device's decoder
            jpeg = cv2.imencode(".jpg", pixels)[1].tobytes()
            out.append(Planned(jpeg, None, plan(matrix, source, size, CONSTANT), None, mask, mask_geometry, size))
        elif i % 3 == 1:  # pixels decoded on the CPU
            out.append(Planned(None, pixels, plan(matrix, source, size, CONSTANT), None, mask, mask_geometry, size))
        else:  # made whole on the CPU path
            done = np.zeros((3, size[1], size[0]), np.uint8)
            out.append(Planned(None, None, None, done, mask, mask_geometry, size))
    return out


@pytest.mark.parametrize("masks", [False, True], ids=["images", "onehot masks"])
def test_one_host_wait_per_batch_and_no_other(monkeypatch, masks):
    stage = cuda_like_stage(onehot=3 if masks else 0)
    recorder = Recorder(monkeypatch)
    for seed in range(3):
        images, made, decoded, failed = stage(batch(seed, masks))
        assert images.shape == (6, 3, 48, 64) and failed == [] and decoded == [True, False, False] * 2
        assert (made is None) != masks and (not masks or made.shape == (6, 3, 48, 64))
    assert dict(recorder.counts) == {"stream.synchronize": 3}  # the wait before each batch's decoder call


def test_the_recorder_sees_what_would_synchronise(monkeypatch):
    """The counting itself: a read back, a blocking copy and an event wait from picpac's device code are seen."""
    recorder = Recorder(monkeypatch)
    stage = cuda_like_stage()
    buffers = stage.host
    buffers.events[1] = type("Late", (), {"query": lambda self: False,
                                          "synchronize": lambda self: recorder.counts.update(["event.synchronize"])})()
    buffers.take(16)  # turn 1: its copies still queued
    namespace = {"torch": torch}
    exec(compile("t = torch.ones(2)\nbool(t.any())\nt.to(torch.device('cpu'))\n",
                 str(Path(DEVICE_CODE) / "stage.py"), "exec"), namespace)
    assert dict(recorder.counts) == {"event.synchronize": 1, "Tensor.__bool__": 1, "blocking .to(device)": 1}
