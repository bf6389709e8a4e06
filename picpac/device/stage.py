"""The device stage: a batch of planned samples (``geometry.Planned``) made into device tensors.

JPEGs are decoded on the GPU (``decoders``: nvImageCodec's hardware engines and regions where it is installed,
else torchvision's batched nvJPEG), their compressed bytes first gathered into one pinned host buffer; pixels
decoded on the CPU (other formats, rotated JPEGs, JPEGs the GPU refuses, and every image on ``device='cpu'``) go
up in one asynchronous copy from a pinned buffer. On CUDA the stage thread waits on the host for its side stream
once before each decoder call (a decoder writes its outputs on a stream of its own, into blocks the side stream's
queued work may still read) and never else: every other copy is asynchronous from pinned memory, and nothing is
read back from the device. Then
``warp.warp`` maps the batch, the values are rounded as the CPU path's uint8 pixels are, the colour steps
drawn for each sample run (``photometric``), and the output's dtype, layout and normalisation are made there;
label masks take the same warp by nearest.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PicPacValueError, SampleError
from ..image.decoding import decode_channels
from . import photometric
from .decoders import decoder
from .geometry import Geometry, Planned
from .warp import _to, torch, warp

class HostBuffers:
    """Host memory reused batch after batch, pinned for a CUDA device: ``TURNS`` buffers in turn, each reused only
    once the device has finished the copies made from it."""

    TURNS = 4

    def __init__(self, device: Any):
        self.device, self.turn = device, 0
        self.cuda = device.type == "cuda"
        self.buffers: list = [None] * self.TURNS
        self.events: list = [None] * self.TURNS

    def take(self, nbytes: int) -> Any:
        """A uint8 tensor of ``nbytes`` (a view into this turn's buffer; ``.numpy()`` writes into it)."""
        self.turn = (self.turn + 1) % self.TURNS
        event, buffer = self.events[self.turn], self.buffers[self.turn]
        if event is not None and not event.query():  # (past the decoder call's wait it is done: no wait)
            event.synchronize()
        if buffer is None or buffer.numel() < nbytes:
            buffer = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8)
            self.buffers[self.turn] = buffer = buffer.pin_memory() if self.cuda else buffer
        return buffer[:nbytes]

    def used(self) -> None:
        """The copies from this turn's buffer are queued: it is free once the device's stream passes here."""
        if self.cuda:
            event = self.events[self.turn] = self.events[self.turn] or torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))


class DeviceStage:
    """Planned samples -> ``(images, masks or None, decoded)`` on ``device``: images in the output's dtype and
    layout, masks as the stream's float32 (or one-hot) masks, and which samples the device decoded."""

    def __init__(self, device: str, channels: int, rgb: bool, dtype: np.dtype, channel_first: bool,
                 mean: np.ndarray | None, std: np.ndarray | None, onehot: int = 0):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise PicPacValueError(f"device={device!r}, but torch sees no CUDA device here (torch "
                                   f"{torch.__version__}); use device='cpu' or leave device out")
        self.channels, self.rgb, self.dtype, self.channel_first = channels, rgb, dtype, channel_first
        self.onehot = onehot
        self.mean = None if mean is None else torch.from_numpy(mean).reshape(1, -1, 1, 1).to(self.device)
        self.std = None if std is None else torch.from_numpy(std).reshape(1, -1, 1, 1).to(self.device)
        self.jpeg = decoder(self.device, channels, not rgb) if self.cuda else None
        self.host = HostBuffers(self.device) if self.cuda else None

    @property
    def decodes(self) -> bool:
        """Whether JPEGs are decoded on the device (CUDA); else the planning threads decode them."""
        return self.jpeg is not None

    @property
    def decoder_name(self) -> str:
        """Which decoder decodes JPEGs (``stats()['device_decoder']``)."""
        return self.jpeg.name if self.jpeg is not None else "the planning threads (libjpeg-turbo, as the CPU path)"

    def __call__(self, planned: Sequence[Planned]) -> tuple[Any, Any, list[bool], list[tuple[int, SampleError]]]:
        """``(images, masks or None, decoded, failed)``: ``failed`` the samples whose JPEG neither the device nor the
        CPU decodes, by their place in ``planned``, left out of the batch (None when none is left)."""
        sizes = {p.size for p in planned}
        if len(sizes) > 1:
            raise PicPacValueError(f"images of different sizes {sorted(sizes)} in one batch; set resize_width/"
                                   "resize_height, crop_width/crop_height, or batch=1 to make them equal")
        size = planned[0].size
        images, geometries, masks, mask_geometries, decoded, failed = self._upload(planned)
        if failed:
            kept = [i for i in range(len(planned)) if i not in failed]
            planned, images, geometries, masks, mask_geometries, decoded = (
                [items[i] for i in kept] for items in (planned, images, geometries, masks, mask_geometries, decoded))
            if not planned:
                return None, None, [], sorted(failed.items())
        warped = [i for i, p in enumerate(planned) if p.done is None]
        out = None
        if warped:
            values = warp([images[i] for i in warped], [geometries[i] for i in warped], size)
            values = values.round_().clamp_(0, 255)  # the CPU path's pixels are uint8 before the output's steps
            bgr = [k for k, i in enumerate(warped) if decoded[i] and not self.rgb and self.channels == 3]
            if bgr and not self.jpeg.bgr_out:  # torchvision's nvJPEG decodes RGB
                rows = _to(np.array(bgr, np.int64), self.device)
                values[rows] = values[rows].flip(1)
            colours = [planned[i].colour for i in warped]
            if any(colours):
                values = photometric.apply(values, colours, "RGB" if self.rgb else "BGR")
            out = self._output(values)
        if len(warped) < len(planned):
            done = [i for i, p in enumerate(planned) if p.done is not None]
            host = self._to_device([np.stack([planned[i].done for i in done])])[0]
            if out is None:
                out = host
            else:  # the samples in batch order
                full = torch.empty((len(planned), *out.shape[1:]), dtype=out.dtype, device=self.device)
                full[_to(np.array(warped, np.int64), self.device)] = out
                full[_to(np.array(done, np.int64), self.device)] = host
                out = full
        mask_batch = None
        if any(m is not None for m in masks):
            if any(m is None for m in masks):
                raise PicPacValueError("a batch with masks for some samples only: every sample of a segmentation "
                                       "stream needs a mask")
            mask_batch = self._masks(warp(masks, mask_geometries, size, nearest=True))
        return out, mask_batch, decoded, sorted(failed.items())

    def _upload(self, planned: Sequence[Planned]) -> tuple[list, list, list, list, list[bool], dict]:
        """``(images, geometries, masks, mask geometries, decoded, failed)``: the part of each sample's source (and
        mask) that its warp reads, as a (C, h, w) device tensor, with the geometry from that part; whether the
        device decoded it; and the samples whose JPEG no decoder takes, with the error that names them. JPEGs are
        decoded at most ``DECODE_BYTES`` of pixels at a time, each cut to its part at once, so a batch of large
        photos never holds all of them whole; host pixels are cut before they are copied."""
        n = len(planned)
        images: list = [None] * n
        geometries = [p.geometry for p in planned]
        decoded = [False] * n
        failed: dict[int, SampleError] = {}
        host: dict[int, np.ndarray] = {i: p.pixels for i, p in enumerate(planned) if p.pixels is not None}
        for chunk in _chunks([i for i, p in enumerate(planned) if p.jpeg is not None], planned, self.channels):
            regions = [planned[i].geometry.crop for i in chunk]
            for i, image in zip(chunk, self._decode([planned[i].jpeg for i in chunk], regions)):
                g = planned[i].geometry
                x0, y0, x1, y1 = g.crop
                if image is not None and self.jpeg.roi and image.shape[1:] == (y1 - y0, x1 - x0):
                    images[i], geometries[i], decoded[i] = image, g._replace(crop=(0, 0, x1 - x0, y1 - y0)), True
                elif image is not None and not self.jpeg.roi and image.shape[1:] == (g.source[1], g.source[0]):
                    images[i], geometries[i] = _cut(image, g, copy=True)
                    decoded[i] = True
                else:
                    warnings.warn(f"picpac's device stage: {self.jpeg.name} refused {planned[i].source}: record "
                                  f"{planned[i].record}; the CPU decodes it", RuntimeWarning, stacklevel=2)
                    pixels, geometries[i] = _decode_on_cpu(planned[i].jpeg, g, self.channels, self.rgb)
                    if pixels is None:
                        failed[i] = SampleError(planned[i].source, planned[i].record, "cannot decode its image "
                                                "(refused by the device's decoder and by libjpeg)")
                    else:
                        host[i] = pixels
        mask_geometries = [p.mask_geometry for p in planned]
        cuts = []
        for i, pixels in host.items():
            pixels, geometries[i] = _cut(pixels, geometries[i])
            cuts.append((i, pixels))
        for i, p in enumerate(planned):
            if p.mask is not None:
                mask, mask_geometries[i] = _cut(p.mask, p.mask_geometry)
                cuts.append((n + i, mask))
        arrays = dict(zip([i for i, _ in cuts], map(_chw, self._to_device([a for _, a in cuts]))))
        images = [arrays.get(i, image) for i, image in enumerate(images)]
        masks = [arrays.get(n + i) for i in range(n)]
        return images, geometries, masks, mask_geometries, decoded, failed

    def _decode(self, datas: list, regions: list) -> list:
        """The JPEGs decoded on the device (their regions, where the decoder takes them), their bytes gathered into
        one pinned buffer; None where refused. First the host waits for the side stream: the decoders write on
        streams of their own, into blocks freed by work the side stream may still have queued."""
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        ends = np.cumsum([memoryview(d).nbytes for d in datas]).tolist()
        pinned = self.host.take(ends[-1])
        host, spans = pinned.numpy(), list(zip([0] + ends[:-1], ends))
        for data, (start, stop) in zip(datas, spans):
            host[start:stop] = np.frombuffer(data, np.uint8)
        out = self.jpeg(pinned, spans, regions)
        self.host.used()
        return out

    def _to_device(self, arrays: list[np.ndarray]) -> list:
        """Host arrays as device tensors: on CUDA one asynchronous copy from a pinned buffer; on the CPU views."""
        arrays = [a.astype(np.int32) if a.dtype == np.uint16 else a for a in arrays]  # torch's kernels lack uint16
        if not self.cuda or not arrays:
            return [torch.from_numpy(a if a.flags.writeable else a.copy()) for a in arrays]
        arrays = [np.ascontiguousarray(a) for a in arrays]
        starts = np.cumsum([0] + [-(-a.nbytes // 16) * 16 for a in arrays])  # each array 16-byte aligned
        pinned = self.host.take(int(starts[-1]))
        host = pinned.numpy()
        for a, start in zip(arrays, starts):
            host[start:start + a.nbytes] = a.reshape(-1).view(np.uint8)
        on_device = pinned.to(self.device, non_blocking=True)
        self.host.used()
        return [on_device[start:start + a.nbytes].view(getattr(torch, str(a.dtype))).reshape(a.shape)
                for a, start in zip(arrays, starts)]

    def _output(self, values: Any) -> Any:
        """float32 (n, C, H, W) pixel values in the output's dtype, normalisation and layout."""
        if self.mean is not None:
            values = values - self.mean
        if self.std is not None:
            values = values / self.std
        values = values.to(getattr(torch, self.dtype.name))
        return values.contiguous() if self.channel_first else values.permute(0, 2, 3, 1).contiguous()

    def _masks(self, masks: Any) -> Any:
        """The stream's mask batch: float32 (n, 1|K, H, W) (NHWC: channels last), one-hot with ``onehot``. Their
        class ids were checked on the host, where each sample was planned (``DeviceJob``): nothing is read back."""
        k = self.onehot
        if k:
            if masks.shape[1] != 1:
                raise PicPacValueError("onehot masks need single-channel masks")
            masks = (masks == torch.arange(k, device=self.device).reshape(1, k, 1, 1)).float()
        return masks.contiguous() if self.channel_first else masks.permute(0, 2, 3, 1).contiguous()


DECODE_BYTES = 1 << 30
"""The most pixels (in bytes) the device decodes at once; each image is cut to the part its warp reads after."""


def _chunks(indices: list[int], planned: Sequence[Planned], channels: int) -> list[list[int]]:
    """``indices`` in runs whose images take at most ``DECODE_BYTES`` decoded (one image at least)."""
    runs: list[list[int]] = []
    total = DECODE_BYTES
    for i in indices:
        width, height = planned[i].geometry.source
        nbytes = width * height * channels
        if total + nbytes > DECODE_BYTES:
            runs.append([])
            total = 0
        runs[-1].append(i)
        total += nbytes
    return runs


def _decode_on_cpu(jpeg: Any, g: Geometry, channels: int, rgb: bool) -> tuple[np.ndarray | None, Geometry]:
    """A JPEG the device refused, decoded by libjpeg as the CPU path decodes it: at the scale 1/pool its box averages
    stand for (its geometry then reads those pixels as they are)."""
    r = g.pool
    pixels = decode_channels(jpeg, channels, rgb, r, max_pixels=None)
    width, height = g.source
    if pixels is None or r == 1 or pixels.shape[:2] != (-(-height // r), -(-width // r)):
        return pixels, g  # (decoded whole: the box averages stay)
    x0, y0, x1, y1 = g.crop
    return pixels, g._replace(pool=1, crop=(x0 // r, y0 // r, -(-x1 // r), -(-y1 // r)))


def _cut(image: Any, g: Geometry, copy: bool = False) -> tuple[Any, Geometry]:
    """The part of ``image`` ((C, H, W) tensor or (H, W[, C]) array) that ``g`` reads, and ``g`` from that part
    (its map is relative to the part already); ``copy`` lets the whole image go."""
    x0, y0, x1, y1 = g.crop
    part = image[:, y0:y1, x0:x1] if not isinstance(image, np.ndarray) else image[y0:y1, x0:x1]
    if copy:
        part = part.clone()
    return part, g._replace(crop=(0, 0, x1 - x0, y1 - y0))


def _chw(tensor: Any) -> Any:
    """(H, W[, C]) as (C, H, W), a view."""
    return tensor[None] if tensor.dim() == 2 else tensor.permute(2, 0, 1)
