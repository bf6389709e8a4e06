"""The device's JPEG decoders, each ``decoder(buffer, spans, regions) -> images``: a batch's JPEGs (the ``(start,
stop)`` spans of one pinned uint8 host tensor) to (C, H, W) uint8 tensors on the device, None where a JPEG is
refused.

* :class:`NvImageCodec` (``pip install nvidia-nvimgcodec-cu12[nvjpeg]``, or -cu13): NVIDIA's nvImageCodec, which
  uses the GPU's hardware JPEG engines where it has them (A100, H100, H200), the CUDA decoder otherwise, and
  decodes only the planned region of each image (``roi``). On the CPU it runs libjpeg-turbo (tests).
* :class:`NvJpeg`: torchvision's batched nvJPEG (``pip install 'picpac[gpu]'``): whole images.

:func:`decoder` picks the first that is installed and decodes a probe JPEG on the device. nvImageCodec's own log lines
are silenced (``PYNVIMGCODEC_VERBOSITY=0`` unless set): the stage names each refused record in a warning instead.
Images come out of nvImageCodec by DLPack, whose export leaks nothing (its ``__cuda_array_interface__`` and
``__array_interface__`` each leak a Python int per read in 0.9).
"""
from __future__ import annotations

import importlib
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ..errors import require
from ..engine.threads import usable_cores
from .warp import torch

WHO = "picpac's device stage (the config key device)"
NVIMGCODEC = (0, 9)
"""The oldest nvImageCodec whose API the stage uses (``DecodeParams(sample_format=...)``, ``NVIMGCODEC_DEVICE_CPU_ONLY``,
both new in 0.9); pyproject's extras allow 0.9.x."""
Region = tuple[int, int, int, int]
"""(x0, y0, x1, y1): the pixels of an image a decoder with ``roi`` decodes."""
Span = tuple[int, int]
"""(start, stop): one JPEG's bytes in the batch's host buffer."""


def probe_jpeg() -> np.ndarray:
    """A 16x16 grey JPEG: what each decoder must decode on the device before the stage takes it."""
    return np.frombuffer(cv2.imencode(".jpg", np.full((16, 16, 3), 128, np.uint8))[1].tobytes(), np.uint8).copy()


def cpu_threads() -> int:
    """nvImageCodec's own CPU threads (its default: one per core, beside the stream's planning threads): a quarter of
    the usable cores, at least 2."""
    return max(2, usable_cores() // 4)


class NvImageCodec:
    """nvImageCodec's batched decode, a region per image; the hardware engines first on CUDA. ``bgr``: 3 channels
    decoded to BGR (else RGB)."""

    roi = True

    def __init__(self, device: Any, channels: int, bgr: bool = False):
        self.bgr_out = bgr and channels == 3
        """Whether it decodes 3 channels straight to BGR (no flip on the device)."""
        os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "0")  # (read when the module loads)
        nv = self.nv = importlib.import_module("nvidia.nvimgcodec")
        version = getattr(nv, "__version__", "0")
        if tuple(int(n) for n in re.findall(r"\d+", version)[:2]) < NVIMGCODEC:
            raise RuntimeError(f"nvImageCodec {version} is older than the {'.'.join(map(str, NVIMGCODEC))} whose API the "
                               "stage uses: pip install 'nvidia-nvimgcodec-cu12[nvjpeg]>=0.9,<0.10' (or -cu13)")
        self.device = device
        if device.type == "cuda":
            index = torch.cuda.current_device() if device.index is None else device.index
            backends = [nv.Backend(kind) for kind in (nv.HW_GPU_ONLY, nv.GPU_ONLY, nv.HYBRID_CPU_GPU)]
            self.decoder = nv.Decoder(device_id=index, max_num_cpu_threads=cpu_threads(), backends=backends)
        else:
            self.decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=cpu_threads(),
                                      backends=[nv.Backend(nv.CPU_ONLY)])
        # planar: (C, H, W) as the warp reads it, no per-image permute
        self.params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.GRAY if channels == 1 else nv.SRGB,
                                      sample_format=nv.P_Y if channels == 1 else nv.P_BGR if bgr else nv.P_RGB)
        where = "hardware engines or CUDA" if device.type == "cuda" else "CPU"
        self.name = f"nvImageCodec {getattr(nv, '__version__', '')} ({where}, regions)"
        # installed without its decoders for this device (nvidia-nvjpeg-cu12 missing, say), it refuses every JPEG
        probe = probe_jpeg()
        if self(torch.from_numpy(probe), [(0, probe.size)], [(0, 0, 16, 16)])[0] is None:
            raise RuntimeError(f"nvImageCodec decodes no JPEG on {device} here (are its decoders installed? "
                               "pip install 'nvidia-nvimgcodec-cu12[nvjpeg]')")

    def __call__(self, buffer: Any, spans: Sequence[Span], regions: Sequence[Region]) -> list:
        nv, host = self.nv, buffer.numpy()
        streams = [nv.CodeStream(host[start:stop]).get_sub_code_stream(region=nv.Region(y0, x0, y1, x1))
                   for (start, stop), (x0, y0, x1, y1) in zip(spans, regions)]
        cuda = self.device.type == "cuda"
        images = self.decoder.decode(streams, params=self.params,
                                     cuda_stream=torch.cuda.current_stream(self.device).cuda_stream if cuda else 0)
        return [None if image is None else self._tensor(image) for image in images]

    def _tensor(self, image: Any) -> Any:
        """A (C, H, W) image as a tensor on the device: by DLPack (on CUDA without a copy). nvImageCodec 0.9 exports
        no DLPack of a host image without a CUDA driver (its CPU backend on a machine without a GPU: tests): that one
        is read by ``__array_interface__``, which leaks a Python int per image there."""
        try:
            tensor = torch.from_dlpack(image)
        except RuntimeError:
            if image.buffer_kind == self.nv.ImageBufferKind.STRIDED_DEVICE:
                raise
            tensor = torch.from_numpy(np.asarray(image))
        return tensor if tensor.device == self.device else tensor.to(self.device)


class NvJpeg:
    """torchvision's batched nvJPEG decode: whole images, RGB."""

    roi = False
    bgr_out = False

    def __init__(self, device: Any, channels: int):
        io = require("torchvision.io", "gpu", WHO)
        self.mode = io.ImageReadMode.GRAY if channels == 1 else io.ImageReadMode.RGB
        self.decode, self.device = io.decode_jpeg, device
        self.name = "torchvision nvJPEG (whole images)"
        try:  # a torchvision built without nvJPEG refuses every JPEG on the device
            self.decode(torch.from_numpy(probe_jpeg()), mode=self.mode, device=self.device)
        except RuntimeError as exc:
            raise NoDecoderError(f"torchvision {getattr(require('torchvision', 'gpu', WHO), '__version__', '')} "
                                 f"decodes no JPEG on {device} ({exc})") from None

    def __call__(self, buffer: Any, spans: Sequence[Span], regions: Sequence[Region]) -> list:
        datas = [buffer[start:stop] for start, stop in spans]
        try:
            return list(self.decode(datas, mode=self.mode, device=self.device))
        except RuntimeError:  # one JPEG it refuses fails the batch: each alone, the refused left out
            out = []
            for data in datas:
                try:
                    out.append(self.decode(data, mode=self.mode, device=self.device))
                except RuntimeError:
                    out.append(None)
            return out


class NoDecoderError(RuntimeError):
    """A decoder is installed but decodes no JPEG on the device."""


def decoder(device: Any, channels: int, bgr: bool = False) -> NvImageCodec | NvJpeg | None:
    """The decoder for ``device`` (3 channels as BGR with ``bgr``): nvImageCodec where it is installed and starts,
    else torchvision's nvJPEG (or a MissingFrameworkError naming ``picpac[gpu]``), each tried on ``device`` with a
    probe JPEG. An nvImageCodec installed that does not start (another version's API, no decoders for this device,
    any failure of its probe) is never a crash: a RuntimeWarning says why, and so does the decoder's name
    (``stats()["device_decoder"]``). None, with a warning, when torchvision decodes no JPEG on the device either
    (built without nvJPEG): the planning threads decode them then, in parallel, as for ``device='cpu'``."""
    try:
        return NvImageCodec(device, channels, bgr)
    except ModuleNotFoundError as exc:
        if exc.name not in ("nvidia", "nvidia.nvimgcodec"):
            raise
        why = None  # not installed: torchvision's decoder, as documented
    except Exception as exc:  # whatever an installed nvImageCodec raises, the stage goes on without it
        why = f"nvImageCodec does not start here ({type(exc).__name__}: {exc})"
        warnings.warn(f"picpac's device stage: {why}; torchvision's nvJPEG decodes instead", RuntimeWarning,
                      stacklevel=2)
    try:
        fallback = NvJpeg(device, channels)
    except NoDecoderError as exc:
        warnings.warn(f"picpac's device stage: {why or 'nvImageCodec is not installed'}, and {exc}: the planning "
                      "threads decode the JPEGs on the CPU (pip install 'picpac[gpu-cu12]' for nvImageCodec)",
                      RuntimeWarning, stacklevel=2)
        return None
    if why is not None:
        fallback.name += f"; {why}"
    return fallback
