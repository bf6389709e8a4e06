"""The fused sample job: each sample from its record's bytes to its slot of the batch in one C call that runs
without the GIL, where the config and the sample allow; Python only plans it (docs/performance.md).

Planning is the Python path's own: decode (deferred), the geometry keys and the random steps compose one
pending map with the stream's RNG, without reading a pixel. The C call then decodes the JPEG region the map
reads, resamples it with picpac's kernels (the Python path's own), converts it and writes it into the batch, so a
batch is byte for byte what :class:`~.sample_job.SampleJob` makes. A sample whose plan the C call cannot follow
(not a JPEG, CMYK, a colour step that reads the pixels, a mask, a warp with a border other than a constant) takes
the Python path there.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..engine import aligned
from ..engine.executor import Delivery
from ..file.reader import IndexedReader
from ..image import decoding
from ..image.sample import Sample
from .config import StreamConfig
from .job import Part, Pool
from .position import Keys
from .processor import LazyRng, Processor, decode_seconds, sample_rng
from .sample_job import Profile, SampleJob


def fused_reason(config: StreamConfig, arrays: bool = False) -> str | None:
    """Why a stream's samples all take the Python path, or None when they take the fused C path where they can;
    ``arrays``: the database's image field holds arrays (metadata 'arrays'), which are not decoded."""
    d, o = config.decode, config.output
    if not d.fused:
        return "fused=False"
    if arrays:
        return f"the image field {d.image_field!r} holds arrays (nothing to decode)"
    if not decoding.REGION_DECODE:
        return decoding.FAST_PATH_OFF or "the fast path is off"
    if d.channels not in (1, 3):
        return "channels=-1 (images as stored)"
    if not (d.reduced_decode and d.region_decode):
        return "reduced_decode or region_decode is off"
    if config.parallelism.cache:
        return "cache=True (cached samples are decoded already)"
    if o.task == "segment" or d.annotate in ("image", "auto"):
        return f"task={o.task!r}, annotate={d.annotate!r} (masks and image targets take the Python path)"
    return None


class FusedSampleJob(SampleJob):
    """A :class:`SampleJob` whose samples take the fused C path where they can, each written straight into its
    slot of the batch (``unit index // batch``, ``unit index % batch``) when the stream runs on threads."""

    def __init__(self, readers: list[IndexedReader], config: StreamConfig, processor: Processor | None = None,
                 profile: Profile | None = None):
        super().__init__(readers, config, processor, profile)
        p = self.processor
        self.mean = () if p.mean is None else tuple(p.mean.tolist())
        self.std = () if p.std is None else tuple(p.std.tolist())
        self.channels, self.rgb = config.decode.channels, p.rgb
        # a mean or std of another length than 1 or the channels: the Python path raises the error that names it
        self.normalisable = all(len(values) in (0, 1, self.channels) for values in (self.mean, self.std))
        self.slots = True
        """Whether samples go into batch buffers; not in a worker process, whose arrays the executor copies."""
        self.batches: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()
        self.counts = {"fused": 0, "python": 0}

    def __call__(self, unit: tuple) -> tuple[np.ndarray, tuple]:
        index, _, epoch, source, record, label = unit
        start, cpu = time.perf_counter(), time.thread_time()
        reader = self.readers[source]
        fields = reader[record].fields
        read = time.perf_counter() - start
        # a config with random steps draws for every sample: its generator at once, not through LazyRng's lookups
        rng = sample_rng(self.seed, epoch, source, record) if self.processor.random else \
            LazyRng(self.seed, epoch, source, record)
        sample = self.processor.plan(fields, label, record, reader.path, reader.arrays, rng)
        planned = time.perf_counter()
        image = self._fused(sample, fields, index)
        fused = image is not None
        if not fused:
            pixels, target, dense = self.processor.output(sample)  # (may decode: a damaged JPEG comes here)
            image = self._slot(index, pixels.shape, pixels.dtype)
            image[...] = pixels
            decoded = decode_seconds()
        else:
            decoded = time.perf_counter() - planned  # the C call: decode, resample and convert
            target, dense = self.processor.target(sample)
        if self.profile is not None:
            self.profile.sample(read, decoded, time.perf_counter() - start, time.thread_time() - cpu)
        return image, (target, dense, self.processor.damage(sample), fused)

    def _fused(self, sample: Sample, fields: dict[str, Any], index: int) -> np.ndarray | None:
        """The sample's image made by one C call, in its slot; None where the Python path must make it."""
        plan = sample.fused_plan() if self.normalisable else None
        if plan is None:
            return None
        reduction, region, geometry = plan
        width, height = sample.size
        shape = (self.channels, height, width) if self.processor.channel_first else (height, width, self.channels)
        out = self._slot(index, shape, self.processor.dtype)
        name = self.processor.field_name(fields, self.config.decode.image_field, "image_field", sample.record, "")
        if not decoding.fused_sample(fields[name], self.channels, self.rgb, reduction, region, geometry, out,
                                     self.processor.channel_first, self.mean, self.std):
            return None
        return out

    def _slot(self, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Where sample ``index`` goes: its row of its batch's buffer (made by the batch's first sample to come)."""
        if not self.slots:
            return np.empty(shape, dtype)
        batch, slot = divmod(index, self.group)
        with self.lock:
            buffer = self.batches.get(batch)
            if buffer is None:
                buffer = self.batches[batch] = aligned.empty((self.group, *shape), dtype)
        if buffer.shape[1:] != shape or buffer.dtype != dtype:
            return np.empty(shape, dtype)  # images of another size: the stream stacks them (or says why it cannot)
        return buffer[slot]

    def collect(self, deliveries: Iterator[Delivery], real: int | None, skip: Callable) -> Iterator[Part]:
        """SampleJob's parts, counting which path each sample took (in this process, whatever the executor)."""
        return super().collect(self._counted(deliveries), real, skip)

    def _counted(self, deliveries: Iterator[Delivery]) -> Iterator[Delivery]:
        for delivery in deliveries:
            fused = sum(extra[3] for extra in delivery.extras)
            with self.lock:
                self.counts["fused"] += fused
                self.counts["python"] += len(delivery.extras) - fused
            yield delivery._replace(extras=[extra[:3] for extra in delivery.extras])

    def units(self, keys: Keys, pool: Pool) -> Iterator[tuple]:
        """SampleJob's units; a pass starts with no batch buffers (those of a pass left early are dropped)."""
        with self.lock:
            self.batches.clear()
        yield from super().units(keys, pool)

    def images(self, delivery: Delivery) -> np.ndarray | list[np.ndarray]:
        """The delivery's batch buffer itself when its samples fill its first rows in order (no copy to stack them),
        else the list of images. The buffer (and any of batches before it) leaves the job."""
        items, arrays = delivery.items, delivery.arrays
        batch, slot = divmod(items[0][0], self.group)
        with self.lock:
            buffer = self.batches.pop(batch, None)
            for older in [b for b in self.batches if b < batch]:  # batches whose every sample failed
                del self.batches[older]
        if buffer is None or slot != 0 or any(unit[0] != items[0][0] + i for i, unit in enumerate(items)):
            return arrays
        start, step = buffer.ctypes.data, buffer[0].nbytes
        if any(array.ctypes.data != start + i * step for i, array in enumerate(arrays)):
            return arrays  # a sample of another size, made beside the buffer
        return buffer[:len(items)]

    def path_counts(self) -> dict[str, int]:
        """``fused_samples`` and ``python_samples``: how many of the samples delivered took each path."""
        with self.lock:
            return {f"{path}_samples": n for path, n in self.counts.items()}

    def build(self) -> FusedSampleJob:
        """A worker process's job: no batch buffers there (the executor copies each array into shared memory)."""
        self.slots = False
        return self
