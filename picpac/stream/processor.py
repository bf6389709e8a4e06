"""One sample's way from stored bytes to output arrays, as a stream config says (stream layer).

Shared by ImageStream (many samples, on worker threads) and ImageLoader (one image, for
inference). Steps: decode -> annotation (vector shapes or a mask image) -> the deterministic
geometry keys (cacheable) -> random steps (PicPac's pert_* keys, crop/round, ``transforms``) ->
the task's targets (label, rasterized mask, boxes or keypoints) and the output layout.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import cv2
import numpy as np

from .. import image
from ..errors import ImageTooLargeError, PicPacValueError, SampleError
from ..file.layout import ArraySpec
from ..image import specs
from ..image.shapes import Shapes
from ..image.transforms import LimitSize, Rasterize, Resize, Sample, apply_all, convert
from .config import Augment, Decode, Output, StreamConfig
from .legacy import perturbation

Target = np.ndarray | None


class LazyRng:
    """The sample's ``numpy.random.Generator``, made on first use (deterministic steps never pay for it)."""

    __slots__ = ("_key", "_rng")

    def __init__(self, seed: int, epoch: int, source: int, record: int):
        self._key, self._rng = (seed, epoch, source, record), None

    def __getattr__(self, name: str) -> Any:
        if self._rng is None:
            self._rng = sample_rng(*self._key)
        return getattr(self._rng, name)


_thread = threading.local()
_clock = threading.local()


def _timed_decode(*args: Any, **kwargs: Any) -> np.ndarray | None:
    """image.decode_channels, adding its time to this thread's decode clock (profile=True)."""
    start = time.perf_counter()
    try:
        return image.decode_channels(*args, **kwargs)
    finally:
        _clock.seconds = getattr(_clock, "seconds", 0.0) + time.perf_counter() - start


def decode_seconds() -> float:
    """Seconds this thread spent decoding images since the last call (with profile=True)."""
    seconds, _clock.seconds = getattr(_clock, "seconds", 0.0), 0.0
    return seconds


def sample_rng(seed: int, epoch: int, source: int, record: int) -> np.random.Generator:
    """The RNG of one sample: a Philox stream keyed by (seed, source) at counter (record, epoch).

    Counter-based, so it depends on nothing but these numbers: not on thread timing or order.
    Each thread keeps one generator and resets its state here (6x cheaper than a new Philox), so
    the generator returned is valid until the thread's next call.
    """
    if not hasattr(_thread, "rng"):
        bits = np.random.Philox(key=[0, 0])
        _thread.rng = bits, np.random.Generator(bits), bits.state
    bits, generator, state = _thread.rng
    state["state"]["counter"][:] = (0, 0, record, epoch)
    state["state"]["key"][:] = (seed, source)
    state.update(buffer_pos=4, has_uint32=0, uinteger=0)  # no draws buffered from the last sample
    bits.state = state
    return generator


def array_size_error(where: str, record: int, name: str, nbytes: int, spec: ArraySpec) -> SampleError:
    return SampleError(where, record, f"has {nbytes} bytes in its {name!r} field, but the metadata 'arrays' "
                                      f"declares {spec} arrays of {spec.nbytes} bytes")


def array_view(data: Any, spec: ArraySpec, name: str, record: int, where: str) -> np.ndarray:
    """A record's array field as its array: zero-copy (copied only when misaligned for its dtype)."""
    nbytes = memoryview(data).nbytes
    if nbytes != spec.nbytes:
        raise array_size_error(where, record, name, nbytes, spec)
    array = np.frombuffer(data, spec.dtype).reshape(spec.shape)
    return array if array.flags.aligned else array.copy()


CV_DEPTHS = ("uint8", "int8", "uint16", "int16", "int32", "float32", "float64")
"""OpenCV's depth codes (the low 3 bits of a type such as PicPac's anno_type) as NumPy dtypes."""


@dataclass(frozen=True)
class AnnotationZoom:
    """PicPac's anno_min_ratio: when the shapes' bounding box covers less than ``ratio`` of the image, zoom
    into a window of the image's aspect around it (kept inside the image) where it covers ``ratio``,
    keeping the size. Deterministic (a step of the fixed geometry)."""

    ratio: float

    def __call__(self, sample: Sample, rng: Any) -> Sample:
        shapes = sample.shapes
        if shapes is None or not len(shapes) or self.ratio <= 0:
            return sample
        boxes = shapes.boxes()
        x1, y1 = boxes[:, 0].min(), boxes[:, 1].min()
        x2, y2 = boxes[:, 2].max(), boxes[:, 3].max()
        w, h = sample.size
        area, wanted = (x2 - x1) * (y2 - y1), self.ratio * w * h
        if not 0 < area < wanted:
            return sample
        rate = math.sqrt(area / wanted)
        cw, ch = w * rate, h * rate
        x0 = min(max((x1 + x2 - cw) / 2, 0.0), w - cw)
        y0 = min(max((y1 + y2 - ch) / 2, 0.0), h - ch)
        sample.warp(np.array([[w / cw, 0, -x0 * w / cw], [0, h / ch, -y0 * h / ch]]), (w, h))
        return sample


def _field_name(fields: Mapping[str, Any], index: int, key: str, record: int, where: str) -> str:
    """The name of a record's field at position ``index`` (PicPac's field numbers)."""
    names = list(fields)
    if index >= len(names):
        raise SampleError(where, record, f"has no field {index} for {key}={index} (its fields: {names})")
    return names[index]


def _rasterizer(output: Output) -> Rasterize:
    """Shapes to a mask: anno_color1..3 (default: each shape's label), anno_thickness, anno_copy, and PicPac's
    anno_type (the mask's OpenCV type: its channels and depth) and point_radius."""
    values = [v for v in (output.anno_color1, output.anno_color2, output.anno_color3) if v is not None]
    channels, dtype = max(1, len(values)), "uint8"
    if output.anno_type is not None:
        channels, dtype = (output.anno_type >> 3) + 1, CV_DEPTHS[output.anno_type & 7]
        values = (values + [0.0] * channels)[:channels] if values else values  # PicPac's colours 2, 3: 0
    radius = 2 if output.point_radius is None else round(output.point_radius)
    return Rasterize(thickness=output.anno_thickness, values=tuple(values) or None, channels=channels, dtype=dtype,
                     copy=output.anno_copy, point_radius=radius)


class Processor:
    """Per-sample work for one config's decode, augment and output groups (docs/stream.md, docs/augment.md)."""

    def __init__(self, decode: Decode, augment: Augment, output: Output, profile: bool = False):
        self.decoding, self.outputs = decode, output
        self.rgb = output.colorspace == "RGB"
        self.fixed: list = []
        if augment.min_size or augment.max_size:
            self.fixed.append(LimitSize(augment.min_size, augment.max_size))
        if augment.resize_width or augment.resize_height or augment.resize_shorter:
            self.fixed.append(Resize(augment.resize_width, augment.resize_height, augment.resize_shorter))
        if augment.anno_min_ratio:
            self.fixed.append(AnnotationZoom(augment.anno_min_ratio))
        self.transforms = specs.build(augment.transforms, random=augment.perturb is not False)
        """The steps of the config key 'transforms': the last of ``random``."""
        self.random = perturbation(augment) + self.transforms
        self.rasterize = _rasterizer(output)
        self.channel_first = output.order == "NCHW"
        self.dtype = np.dtype(output.dtype)
        mean, std = output.mean, output.std
        if output.value_range == "0-1":  # mean/std in torchvision's units: (x / 255 - mean) / std
            mean = None if mean is None else tuple(255 * m for m in mean)
            std = (255.0,) if std is None else tuple(255 * s for s in std)
        self.mean = None if mean is None else np.float32(mean)
        self.std = None if std is None else np.float32(std)
        self.label_dtype = np.dtype(output.label_dtype)
        self.decode_image = _timed_decode if profile else image.decode_channels
        self.max_pixels = decode.max_pixels
        # a region of an upright JPEG only (libjpeg does not apply EXIF orientation)
        self.region_decode = decode.region_decode and image.REGION_DECODE

    @classmethod
    def of(cls, config: StreamConfig) -> Processor:
        """The processor of a stream config."""
        return cls(config.decode, config.augment, config.output, config.parallelism.profile)

    def sample(self, fields: dict[str, Any], label: float, record: int, where: str,
               arrays: Mapping[str, ArraySpec] | None, rng: Any) -> tuple[np.ndarray, Target, tuple[np.ndarray, ...]]:
        """A record's fields all the way to its output arrays: decode -> settle -> augment -> output."""
        return self.output(self.plan(fields, label, record, where, arrays, rng))

    def plan(self, fields: dict[str, Any], label: float, record: int, where: str,
             arrays: Mapping[str, ArraySpec] | None, rng: Any) -> Sample:
        """A record's sample after decode -> settle -> augment, its output not made: where no step read the
        pixels, a deferred JPEG is still undecoded, its whole geometry one pending map (the fused C path)."""
        return self.augment(self.settle(self.decode(fields, label, record, where, arrays), rng), rng)

    @staticmethod
    def damage(sample: Sample) -> str | None:
        """What libjpeg said of a sample's image (damaged scan data, a bad marker), naming the record; None when its
        image was decoded without a warning (or is not decoded yet)."""
        warning = sample.extra.get("damage")
        return None if warning is None else \
            f"{sample.extra.get('source', 'sample')}: record {sample.record} has a damaged image (libjpeg: {warning})"

    # -- steps ------------------------------------------------------------------------------------
    def decode(self, fields: dict[str, Any], label: float, record: int, where: str,
               arrays: Mapping[str, ArraySpec] | None = None) -> Sample:
        """The sample of a record's fields: its image and, as configured, its annotation.

        A JPEG decoded to 1 or 3 channels is deferred: its size comes from the header, and it is
        decoded when the pixels are first read, at the smallest scale the planned geometry allows.
        A field declared in ``arrays`` (the database's array fields) is not decoded: it is viewed as
        its array, zero-copy and read-only, and ``channels`` and ``colorspace`` do not apply to it.
        An image (or mask) over ``max_pixels`` is a SampleError, raised from its header before any decoding.
        """
        try:
            return self._decode(fields, label, record, where, arrays)
        except ImageTooLargeError as exc:
            raise SampleError(where, record, f"has an image of {exc.advice('the config key max_pixels')}") from exc
        except MemoryError:
            raise SampleError(where, record, "cannot be decoded: not enough memory for its image") from None

    def _decode(self, fields: dict[str, Any], label: float, record: int, where: str,
                arrays: Mapping[str, ArraySpec] | None) -> Sample:
        c = self.decoding
        name = self.field_name(fields, c.image_field, "image_field", record, where)
        if name not in fields:
            raise SampleError(where, record, f"has no {name!r} field (its fields: {list(fields)})")
        data, channels = fields[name], c.channels
        extra: dict[str, Any] = {"colorspace": self.outputs.colorspace, "source": where}
        if c.raw:
            names = [f if isinstance(f, str) else _field_name(fields, f, "raw", record, where) for f in c.raw]
            extra["raw"] = tuple(bytes(fields[n]) if n in fields else b"" for n in names)  # a missing name: b""
        spec = arrays.get(name) if arrays else None
        header = image.jpeg_frame(data) if spec is None and channels in (1, 3) and c.reduced_decode else None
        if spec is not None:
            sample = Sample(array_view(data, spec, name, record, where), label, record, extra=extra,
                            max_pixels=self.max_pixels)
        elif header is not None:
            width, height, orientation, baseline = header
            extra["jpeg_frame"] = header  # (the device job reads whether it is baseline from it)
            image.check_pixels(width, height, self.max_pixels)
            if not baseline:
                image.check_scans(data, width, height, self.max_pixels)
            # checked here, from the header the deferred decode reads: it need not check again
            sample = Sample(None, label, record, extra=extra, size=(width, height),
                            decoder=partial(self.decode_image, data, channels, self.rgb, max_pixels=None,
                                            on_damage=partial(extra.__setitem__, "damage")),
                            regions=self.region_decode and orientation == 1, max_pixels=self.max_pixels)
        else:
            pixels = self.decode_image(data, channels, self.rgb, max_pixels=self.max_pixels,
                                       on_damage=partial(extra.__setitem__, "damage"))
            if pixels is None:
                raise SampleError(where, record, "cannot decode its image")
            sample = Sample(pixels, label, record, extra=extra, max_pixels=self.max_pixels)
        annotate, field = c.annotate, c.annotation_field
        name = None if field is None or annotate == "auto" else \
            self.field_name(fields, field, "annotation_field", record, where)
        if annotate == "json":
            sample.shapes = self._shapes(fields, sample.size, record, where, name or "annotation")
        elif annotate == "image":
            sample.mask = self._mask(fields, sample.size, record, where, arrays, name)
        elif annotate == "any":  # PicPac v2's annotate=[k]: JSON when it starts with '{', else an image
            name = name or ("annotation" if "annotation" in fields or "mask" not in fields else "mask")
            if name not in fields:
                raise SampleError(where, record, f"has no {name!r} field for annotate='any'")
            head = bytes(memoryview(fields[name])[:64]).lstrip()
            if not head:
                sample.shapes = Shapes.empty()  # an empty annotation: a negative
            elif head.startswith(b"{"):
                sample.shapes = self._shapes(fields, sample.size, record, where, name)
            else:
                sample.mask = self._mask(fields, sample.size, record, where, arrays, name)
        return sample

    @staticmethod
    def field_name(fields: Mapping[str, Any], field: str | int, key: str, record: int, where: str) -> str:
        """The name of a config key's field in a record: the name given, or the record's field at
        PicPac's field number."""
        return field if isinstance(field, str) else _field_name(fields, field, key, record, where)

    def _shapes(self, fields: dict[str, Any], size: tuple[int, int], record: int, where: str,
                name: str = "annotation") -> Shapes:
        if name not in fields:
            raise SampleError(where, record, f"has no {name!r} field for annotate='json'")
        try:
            return Shapes.from_json(fields[name], *size)
        except (PicPacValueError, ValueError) as exc:
            raise SampleError(where, record, f"has a bad annotation: {exc}") from None

    def _mask(self, fields: dict[str, Any], size: tuple[int, int], record: int, where: str,
              arrays: Mapping[str, ArraySpec] | None = None, name: str | None = None) -> np.ndarray:
        name = name or ("mask" if "mask" in fields else "annotation")
        if name not in fields:
            raise SampleError(where, record, f"has no {name!r} field for annotate='image'")
        if arrays and name in arrays:
            mask = array_view(fields[name], arrays[name], name, record, where)
        else:
            mask = image.decode(fields[name], cv2.IMREAD_UNCHANGED, max_pixels=self.max_pixels)
        if mask is None:
            raise SampleError(where, record, f"cannot decode its {name!r} image")
        if (mask.shape[1], mask.shape[0]) != size:
            raise SampleError(where, record, f"has a {mask.shape[1]}x{mask.shape[0]} mask for a "
                                             f"{size[0]}x{size[1]} image")
        return mask

    def settle(self, sample: Sample, rng: Any) -> Sample:
        """The deterministic geometry keys (what ``cache=True`` keeps, resampled by its copy)."""
        return apply_all(self.fixed, sample, rng)

    def augment(self, sample: Sample, rng: Any, steps: list | None = None) -> Sample:
        """The random steps (or ``steps`` of them), in order; an exception from user code gets a note naming the
        record."""
        for step in self.random if steps is None else steps:
            try:
                sample = step(sample, rng)
            except Exception as exc:
                exc.add_note(f"in transform {step!r} on record {sample.record}")
                raise
        return sample

    def output(self, sample: Sample) -> tuple[np.ndarray, Target, tuple[np.ndarray, ...]]:
        """The image in the output layout, the task's target, and the dense targets of transforms.

        Dense targets are the arrays a transform put in ``sample.extra["dense"]`` (e.g. anchor
        maps), in the order they were added; each becomes one more batch array.
        """
        if self.outputs.task == "segment" and sample.shapes is not None:
            sample = self.rasterize(sample, None)
        return convert(sample.image, self.channel_first, self.dtype, self.mean, self.std), *self.target(sample)

    def target(self, sample: Sample) -> tuple[Target, tuple[np.ndarray, ...]]:
        """The task's target and the dense targets of a sample (rasterized already for ``segment``); the pixels
        are read only for ``annotate='auto'``."""
        task = self.outputs.task
        dense = self.dense(sample)
        if task == "classify":
            return None, dense
        if self.decoding.annotate == "auto":  # PicPac's autoencoder target: the output image itself
            return convert(sample.image, False, np.dtype(np.float32), self.mean, self.std), dense
        if task == "segment":
            if sample.mask is None:
                raise SampleError(sample.extra.get("source", ""), sample.record,
                                  "has no mask after its transforms (a 'drop' step?)")
            return sample.mask, dense
        return self._boxes(sample) if task == "detect" else self._points(sample), dense

    @staticmethod
    def dense(sample: Sample) -> tuple[np.ndarray, ...]:
        """The dense targets transforms put in ``sample.extra["dense"]``, then the raw fields' bytes."""
        return tuple(sample.extra.get("dense", {}).values()) + sample.extra.get("raw", ())

    def _boxes(self, sample: Sample) -> np.ndarray:
        """(n, 5) ``label, x1, y1, x2, y2`` of the non-point shapes, clipped to the image, small ones dropped."""
        shapes = sample.shapes or Shapes.empty()
        keep = np.array([kind != "point" for kind in shapes.kinds], bool)
        w, h = sample.size
        boxes = np.clip(shapes.boxes()[keep], 0, (w, h, w, h))
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        big = area >= max(self.outputs.min_box_area, 1e-9)
        return np.hstack([shapes.labels[keep][big, None], boxes[big]]).astype(np.float32)

    def _points(self, sample: Sample) -> np.ndarray:
        """(n, 3) ``label, x, y`` of the point shapes inside the image."""
        shapes = sample.shapes or Shapes.empty()
        keep = np.array([kind == "point" for kind in shapes.kinds], bool)
        xy = shapes.boxes()[keep][:, :2]
        w, h = sample.size
        inside = (xy[:, 0] >= 0) & (xy[:, 0] < w) & (xy[:, 1] >= 0) & (xy[:, 1] < h)
        return np.hstack([shapes.labels[keep][inside, None], xy[inside]]).astype(np.float32)

    # -- batches ----------------------------------------------------------------------------------
    def targets(self, targets: list[Target], labels: np.ndarray, records: list[int],
                dense: list[tuple[np.ndarray, ...]], made: tuple | None = None) -> tuple:
        """The batch's arrays after the images: the task's ((labels,), (masks,) or (boxes or points,
        counts); ``made`` when the job made them, as the device stage makes masks), then each dense target
        stacked over the batch."""
        stacked = tuple(list(arrays) if isinstance(arrays[0], bytes) else _stack_rows(arrays)  # raw: bytes
                        for arrays in zip(*dense)) if dense and dense[0] else ()
        return (made if made is not None else self._task_targets(targets, labels, records)) + stacked

    def _task_targets(self, targets: list[Target], labels: np.ndarray, records: list[int]) -> tuple:
        task = self.outputs.task
        if task == "classify":
            out = self._onehot_labels(labels) if self.outputs.onehot else labels
            return (out.astype(self.label_dtype, copy=False),)
        if task == "segment":
            return (self._masks(targets, records),)
        counts = np.array([len(t) for t in targets], np.int32)
        n = self.outputs.max_boxes or max(1, int(counts.max()))
        width = 5 if task == "detect" else 3
        out = np.zeros((len(targets), n, width), np.float32)
        out[:, :, 0] = -1  # padding rows: label -1
        for i, t in enumerate(targets):
            out[i, :min(n, len(t))] = t[:n]
        return out, np.minimum(counts, n)

    def _onehot_labels(self, labels: np.ndarray) -> np.ndarray:
        """One-hot rows of class ids (the stream checked every label of its pool against ``onehot``)."""
        k = self.outputs.onehot
        rows = np.zeros((len(labels), k), np.float32)  # (not np.eye(k)[labels]: k x k floats)
        rows[np.arange(len(labels)), labels.astype(np.int64)] = 1
        return rows

    def _masks(self, masks: list[np.ndarray], records: list[int]) -> np.ndarray:
        """(B, 1, H, W) float32 masks, or (B, K, H, W) one-hot with ``onehot=K`` (NHWC: channels last)."""
        stacked = np.stack([m if m.ndim == 3 else m[:, :, None] for m in masks])
        k = self.outputs.onehot
        if k:
            if stacked.shape[3] != 1:
                raise PicPacValueError("onehot masks need single-channel masks")
            values = stacked[..., 0]
            bad = values >= k
            if bad.any():
                i = int(np.argwhere(bad)[0][0])
                raise PicPacValueError(f"record {records[i]}: mask value {int(values[bad][0])} is not a class id "
                                       f"in [0, onehot={k})")
            stacked = (values[..., None] == np.arange(k)).astype(np.float32)
        else:
            stacked = stacked.astype(np.float32)
        return np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)) if self.channel_first else stacked


def _stack_rows(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    """Stack per-sample arrays; tables that differ only in length (e.g. box_feature) are padded to the
    longest with rows of label (first column) -1 and zeros, as detection boxes are."""
    if len({a.shape for a in arrays}) == 1:
        return np.stack(arrays)
    if len({a.shape[1:] for a in arrays}) > 1:
        raise PicPacValueError(f"dense targets of shapes {sorted({a.shape for a in arrays})} cannot be batched; "
                               "make the images the same size")
    out = np.zeros((len(arrays), max(len(a) for a in arrays), *arrays[0].shape[1:]), arrays[0].dtype)
    out[:, :, 0] = -1
    for i, a in enumerate(arrays):
        out[i, :len(a)] = a
    return out
