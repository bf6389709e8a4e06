"""The device job: samples planned on CPU threads, their batches made by the device stage (``device='cuda'`` or
``'cpu'``; docs/gpu.md).

A planning thread reads a record and runs the Python path's own planning (decode deferred, the geometry keys and
the random steps compose one pending map with the stream's RNG), so crops, flips, scales and rotations are those of
the CPU path for the same seed, and boxes and keypoints are moved by the same maps here, exactly. What goes to the
device (``device.geometry.Planned``): an upright baseline JPEG's bytes, for the GPU to decode (on CUDA), else the
pixels decoded here (other formats, rotated or CMYK JPEGs, every image with ``device='cpu'``), with the map as a
``Geometry``; label masks with theirs. A sample whose pixels a step read (a colour step) goes with them; one whose
map the device cannot follow (a reflecting border) is made whole by the CPU path. ``stats()`` counts where each
sample was decoded.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import cv2
import numpy as np

from ..device.geometry import Planned, plan
from ..engine.executor import Delivery
from ..errors import PicPacValueError, SampleError
from ..file.reader import IndexedReader
from ..image.decoding import jpeg_ends
from ..image.sample import Sample
from .config import StreamConfig
from .job import Part
from .processor import LazyRng, Processor, sample_rng
from .sample_job import Profile, SampleJob

_CONSTANT = (cv2.BORDER_CONSTANT, 0)


class DeviceJob(SampleJob):
    """A :class:`SampleJob` whose units return ``(Planned, (target, dense))`` for its device stage (``self.stage``, a
    ``device.stage.DeviceStage``) to turn into a batch of tensors."""

    def __init__(self, readers: list[IndexedReader], config: StreamConfig, processor: Processor | None = None,
                 profile: Profile | None = None):
        super().__init__(readers, config, processor, profile)
        from ..device.stage import DeviceStage  # torch: imported only by a stream that asks for a device
        p, out = self.processor, config.output
        self.segment = out.task == "segment"
        self.stage = DeviceStage(config.parallelism.device, config.decode.channels, p.rgb, p.dtype, p.channel_first,
                                 p.mean, p.std, out.onehot if self.segment else 0)
        from ..device import photometric
        self.photometric = photometric
        # the trailing colour steps the device makes; the steps before them run here, as on the CPU path
        colours = photometric.steps(p.random)
        self.head, self.tail = p.random[:len(p.random) - colours], p.random[len(p.random) - colours:]
        self.order = "RGB" if p.rgb else "BGR"
        self.lock = threading.Lock()
        self.counts = {"device": 0, "cpu": 0}

    def __call__(self, unit: tuple) -> tuple[Planned, tuple]:
        _, _, epoch, source, record, label = unit
        start, cpu = time.perf_counter(), time.thread_time()
        rng = sample_rng(self.seed, epoch, source, record) if self.processor.random else \
            LazyRng(self.seed, epoch, source, record)
        settled, fields, read = self._settled(source, record, label, rng, start)
        sample = self.processor.augment(settled, rng, self.head)
        planned = self._plan(sample, fields, rng)
        # masks are the stage's to make
        target, dense = (None, self.processor.dense(sample)) if self.segment else self.processor.target(sample)
        if self.profile is not None:
            self.profile.sample(read, 0.0, time.perf_counter() - start, time.thread_time() - cpu)
        return planned, (target, dense)

    def _plan(self, sample: Sample, fields: dict[str, Any], rng: Any) -> Planned:
        """What the device stage needs of ``sample``, whose colour steps (``self.tail``) are still to come: drawn
        here for the device, or run here on the CPU path."""
        matrix, size, border = sample.pending()
        mask, mask_geometry = self._mask(sample, matrix, size)
        jpeg = pixels = geometry = None
        frame = sample.extra.get("jpeg_frame")  # the header Processor.decode read: (w, h, orientation, baseline)
        if sample.deferred and self.stage.decodes and frame[2] == 1 and frame[3]:  # the GPU's decoders take it
            name = self.processor.field_name(fields, self.config.decode.image_field, "image_field", sample.record, "")
            if not jpeg_ends(fields[name]):  # cut short: refused as the CPU path refuses it, whatever region is read
                raise SampleError(sample.extra.get("source", "sample"), sample.record, "cannot decode its image")
            jpeg, geometry = fields[name], plan(matrix, sample.source_size, size, border, reduction=sample.reduction)
        if jpeg is None:
            pixels, source_matrix = sample.source()
            if pixels.dtype == np.uint8 and pixels.ndim == (2 if self.stage.channels == 1 else 3):
                geometry = plan(source_matrix, (pixels.shape[1], pixels.shape[0]), size, border)
        if geometry is None or self.segment and mask_geometry is None:
            # a map the device cannot follow, or pixels of another kind: the CPU path makes the sample whole
            done, target, _ = self.processor.output(self.processor.augment(sample, rng, self.tail))
            if not self.segment:
                return Planned(None, None, None, done, None, None, size)
            return Planned(None, None, None, done, target, plan(None, size, size, _CONSTANT, True), size)
        colour = tuple(c for c in (self.photometric.plan(step, rng, self.order) for step in self.tail) if c is not None)
        return Planned(jpeg, None if jpeg is not None else pixels, geometry, None, mask, mask_geometry, size, colour,
                       sample.extra.get("source", ""), sample.record)

    def _mask(self, sample: Sample, matrix: np.ndarray | None, size: tuple[int, int]) -> tuple[Any, Any]:
        """A segmentation sample's mask and its warp (by nearest); shapes are drawn at the output's size, as
        ``Processor.output`` draws them."""
        if not self.segment:
            return None, None
        if sample.shapes is not None:
            if self.processor.rasterize.copy:  # PicPac's anno_copy draws over the image: the CPU path
                return None, None
            drawn = self.processor.rasterize.draw(sample.shapes, size)
            self._class_ids(drawn, sample.record)
            return drawn, plan(None, size, size, _CONSTANT, True)
        mask = sample.raw_mask
        if mask is None:
            raise SampleError(sample.extra.get("source", ""), sample.record,
                              "has no mask after its transforms (a 'drop' step?)")
        geometry = plan(matrix, (mask.shape[1], mask.shape[0]), size, _CONSTANT, True)
        if geometry is not None:
            x0, y0, x1, y1 = geometry.crop
            self._class_ids(mask[y0:y1, x0:x1], sample.record)
        return mask, geometry

    def _class_ids(self, mask: np.ndarray, record: int) -> None:
        """With ``onehot``, a PicPacValueError for a mask value past the class ids, checked here on the host (the
        part of the mask the warp reads), so that the stage reads nothing back from the device."""
        k = self.stage.onehot
        if k and mask.size and mask.max() >= k:
            raise PicPacValueError(f"record {record}: mask value {int(mask.max())} is not a class id in "
                                   f"[0, onehot={k})")

    def collect(self, deliveries: Iterator[Delivery], real: int | None, skip: Callable) -> Iterator[Part]:
        """Each delivery's tensors as one batch's part, counting where its samples were decoded. A sample whose JPEG
        the stage could not decode is skipped (skip_errors=True: its keys count towards the next part) or raised."""
        taken = 0
        for delivery in deliveries:
            images, masks, decoded, failed = delivery.arrays
            items, extras = delivery.items, delivery.extras
            if failed:
                for k, exc in failed:
                    index = self.failed(items[k], exc)
                    if index is None:
                        raise exc
                    skip(exc, index)
                gone = {k for k, _ in failed}
                items = [unit for k, unit in enumerate(items) if k not in gone]
                extras = [extra for k, extra in enumerate(extras) if k not in gone]
            with self.lock:
                self.counts["device"] += sum(decoded)
                self.counts["cpu"] += len(decoded) - sum(decoded)
            taken += delivery.taken
            if not items:
                continue
            targets, dense = zip(*extras)
            padding = sum(real is not None and unit[0] >= real for unit in items)
            yield Part(images, targets, dense, [unit[1] for unit in items], padding, taken,
                       made=None if masks is None else (masks,))
            taken = 0

    def path_counts(self) -> dict[str, int]:
        """``device_decoded`` and ``cpu_decoded``: how many of the samples delivered were decoded where."""
        with self.lock:
            return {f"{where}_decoded": n for where, n in self.counts.items()}
