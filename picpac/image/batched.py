"""Vectorised transforms over a whole batch of same-shape arrays (image layer): the stream's batch path.

A batch is one NumPy array ``(B, H, W[, C])``. :func:`plan` turns a list of per-sample transforms
(``picpac.transforms`` / ``picpac.color`` objects) into batch steps, or says which transform has no
batch version; each step works on the whole batch at once: a pad is one copy into a buffer whose
border already holds the fill, random crops are one gather from a strided view of every window,
flips are picpac's flip kernel over the stacked rows of the flipped samples (exact for any dtype).

Randomness is counter-based and vectorised: draw ``j`` of a sample is a splitmix64 hash of
``(seed, epoch, source, record, j)`` (:func:`draws`, in NumPy uint64 arithmetic), so a sample's
augmentation depends on nothing but those numbers: not on the batch it lands in, the thread, or
what ran before. Step ``s`` of a
plan uses draws ``plan.slots[s] ..``: a random crop two (x, then y), a flip two (horizontal, then
vertical); :func:`uniforms` and :func:`below` map draws to floats in [0, 1) and integers.
These draws differ from the per-sample path's Philox streams, so the two paths crop and flip the
same sample differently (deterministic steps give the same pixels on both).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import PicPacValueError
from . import kernels
from .color import Normalize
from .sample import fill_value
from .transforms import CenterCrop, Crop, Flip, LimitSize, Pad, Resize, RoundSize, torchvision_centre

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def _mix_int(z: int) -> int:
    """splitmix64's finaliser on one Python int (mod 2**64)."""
    mask = 2**64 - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def draws(seed: int, epochs: Any, sources: Any, records: Any, count: int) -> np.ndarray:
    """(B, count) uint64: draw j of sample b is a hash of (seed, epochs[b], sources[b], records[b], j).

    With ``mix`` splitmix64's finaliser and ``g`` its increment 0x9E3779B97F4A7C15 (arithmetic mod
    2**64): ``k = mix(mix(seed + g) + epoch * 2**32 + source + g)``, the sample's key
    ``key = mix(k + record + g)``, and its draws ``mix(key + (j + 1) * g)`` for j = 0, 1, ...:
    the splitmix64 sequence from that key. (epoch and source below 2**32.)
    """
    records = np.atleast_1d(np.asarray(records, np.int64))
    n, golden = len(records), int(_GOLDEN)
    base = _mix_int((int(seed) + golden) & (2**64 - 1))
    epochs = np.broadcast_to(np.asarray(epochs, np.int64), (n,)).astype(np.uint64)
    sources = np.broadcast_to(np.asarray(sources, np.int64), (n,)).astype(np.uint64)
    key = _mix((epochs << np.uint64(32)) + sources + np.uint64((base + golden) & (2**64 - 1)))
    key = _mix(key + records.astype(np.uint64) + _GOLDEN)
    return _mix(key[:, None] + np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN)


def uniforms(bits: np.ndarray) -> np.ndarray:
    """Floats in [0, 1) from draws: their top 53 bits."""
    return (bits >> _S11).astype(np.float64) * 2.0 ** -53


def below(bits: np.ndarray, n: Any) -> np.ndarray:
    """int64 in [0, n) from draws: ``floor(uniform * n)``."""
    n = np.asarray(n, np.int64)
    return np.minimum(np.floor(uniforms(bits) * n).astype(np.int64), n - 1)


# -- steps -------------------------------------------------------------------------------------------
_thread = threading.local()
_BUFFERS_KEPT = 8


def buffer(name: str, shape: tuple[int, ...], dtype: Any, fill: Any = None) -> np.ndarray:
    """``shape`` rows of this thread's buffer ``name`` (for that shape of a row, dtype and fill), kept
    and reused by the next batches; made (filled with ``fill`` when given) when missing or too short.

    Reusing a buffer saves the page faults a fresh allocation of this size costs (it would come
    from, and go back to, the operating system). A step hands a buffer only to the next step, and
    only the rows it writes: a fill stays where nothing else is written (a pad's border).
    """
    buffers = getattr(_thread, "buffers", None)
    if buffers is None:
        buffers = _thread.buffers = {}
    dtype = np.dtype(dtype)
    key = (name, tuple(shape[1:]), dtype.str, None if fill is None else float(fill))
    out = buffers.get(key)
    if out is None or len(out) < shape[0]:
        if out is None and len(buffers) >= _BUFFERS_KEPT:
            buffers.clear()
        out = buffers[key] = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
    return out[:shape[0]]


def in_buffer(x: np.ndarray) -> bool:
    """Whether ``x`` lies in one of this thread's buffers (then it must be copied before it is handed on)."""
    return any(np.may_share_memory(x, b) for b in getattr(_thread, "buffers", {}).values())


@dataclass(frozen=True)
class BatchPad:
    """Pad every sample by ``top, bottom, left, right`` pixels (the border of :class:`picpac.transforms.Pad`)."""

    top: int
    bottom: int
    left: int
    right: int
    border: str = "constant"
    fill: float = 0
    draws: int = 0

    def __call__(self, x: np.ndarray, bits: np.ndarray, slot: int) -> np.ndarray:
        b, h, w = x.shape[:3]
        t, l = self.top, self.left
        if self.border != "constant":
            mode = {"replicate": "edge", "reflect": "reflect", "wrap": "wrap"}[self.border]
            widths = [(0, 0), (t, self.bottom), (l, self.right)] + [(0, 0)] * (x.ndim - 3)
            return np.pad(x, widths, mode=mode)
        # a buffer of this thread whose border already holds the fill: only the inside is written
        shape = (b, h + t + self.bottom, w + l + self.right, *x.shape[3:])
        fill = fill_value(self.fill, x.dtype)
        out = buffer("pad", shape, x.dtype, fill)
        out[:, t:t + h, l:l + w] = x
        return out


@dataclass(frozen=True)
class BatchCrop:
    """Crop ``height`` x ``width`` from every sample: centred, or at a random place per sample.

    A side longer than the samples is padded (centred) with ``fill``, as :class:`picpac.transforms.Crop` does.
    """

    height: int
    width: int
    random: bool = False
    fill: float = 0
    torchvision: bool = False
    """Centred windows start where torchvision's CenterCrop starts them (halves rounded to even)."""

    @property
    def draws(self) -> int:
        return 2 if self.random else 0

    def offsets(self, size: tuple[int, int], bits: np.ndarray, slot: int) -> tuple[Any, Any]:
        """(y, x) of every sample's window in an input of ``size`` = (height, width) (already padded)."""
        ey, ex = size[0] - self.height, size[1] - self.width
        if not self.random:
            return (torchvision_centre(ey), torchvision_centre(ex)) if self.torchvision else (ey // 2, ex // 2)
        return below(bits[:, slot + 1], ey + 1), below(bits[:, slot], ex + 1)

    def __call__(self, x: np.ndarray, bits: np.ndarray, slot: int) -> np.ndarray:
        h, w = x.shape[1:3]
        grow_y, grow_x = max(0, self.height - h), max(0, self.width - w)
        if grow_y or grow_x:
            x = BatchPad(grow_y // 2, grow_y - grow_y // 2, grow_x // 2, grow_x - grow_x // 2, fill=self.fill)(
                x, bits, slot)
            h, w = x.shape[1:3]
        y, xs = self.offsets((h, w), bits, slot)
        if np.ndim(y) == 0 and np.ndim(xs) == 0:
            return x[:, y:y + self.height, xs:xs + self.width]
        ey, ex = h - self.height, w - self.width
        s = x.strides
        windows = as_strided(x, (len(x), ey + 1, ex + 1, self.height, self.width, *x.shape[3:]),
                             (s[0], s[1], s[2], s[1], s[2], *s[3:]), writeable=False)
        return windows[np.arange(len(x)), y, xs]


def _mirror(x: np.ndarray, rows: np.ndarray, vertical: bool) -> None:
    """Mirror samples ``rows`` of ``x`` in place, left-right (or upside down), through this thread's buffers: picpac's
    flip over the stacked rows of the samples, which copies pixels of any dtype as they are."""
    n, (h, w) = len(rows), x.shape[1:3]
    picked = buffer("picked", (n, *x.shape[1:]), x.dtype)
    if x.flags.c_contiguous:
        np.take(x, rows, axis=0, out=picked, mode="clip")
    else:
        picked[...] = x[rows]
    if vertical:
        x[rows] = picked[:, ::-1]
        return
    channels = int(np.prod(x.shape[3:], dtype=np.int64))
    if channels > kernels.MAX_CHANNELS:
        x[rows] = picked[:, :, ::-1]
        return
    mirrored = buffer("mirrored", (n, *x.shape[1:]), x.dtype)
    flat = (n * h, w, channels) if x.ndim > 3 else (n * h, w)
    kernels.flip(picked.reshape(flat), 1, out=mirrored.reshape(flat))
    x[rows] = mirrored


@dataclass(frozen=True)
class BatchFlip:
    """Flip each sample horizontally with probability ``horizontal``, vertically with ``vertical``."""

    horizontal: float
    vertical: float
    draws: int = 2

    def flags(self, bits: np.ndarray, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Which samples flip horizontally, which vertically."""
        return uniforms(bits[:, slot]) < self.horizontal, uniforms(bits[:, slot + 1]) < self.vertical

    def __call__(self, x: np.ndarray, bits: np.ndarray, slot: int) -> np.ndarray:
        horizontal, vertical = self.flags(bits, slot)
        if not (horizontal.any() or vertical.any()):
            return x
        if not x.flags.writeable or in_buffer(x):
            x = x.copy()
        for flags, upside_down in ((horizontal, False), (vertical, True)):
            rows = np.flatnonzero(flags)
            if len(rows):
                _mirror(x, rows, upside_down)
        return x


@dataclass(frozen=True)
class BatchNormalize:
    """float32 ``(x - mean) / std`` per channel, as :class:`picpac.color.Normalize`."""

    mean: Any
    std: Any
    draws: int = 0

    def __call__(self, x: np.ndarray, bits: np.ndarray, slot: int) -> np.ndarray:
        out = x.astype(np.float32)
        out -= self.mean
        out /= self.std
        return out


@dataclass(frozen=True)
class Plan:
    """Batch steps for samples of one shape: ``steps[s]`` uses draws ``slots[s]`` onwards; ``draws`` in all.

    ``plan(images, bits)`` may write into ``images`` (the stream's own gathered copy).
    """

    steps: tuple
    slots: tuple[int, ...]
    draws: int
    shape: tuple[int, ...]
    """The shape of one sample after the steps."""

    def __call__(self, images: np.ndarray, bits: np.ndarray) -> np.ndarray:
        for step, slot in zip(self.steps, self.slots):
            images = step(images, bits, slot)
        return images.copy() if in_buffer(images) else images


def plan(transforms: Sequence[Any], shape: tuple[int, ...]) -> Plan | str:
    """The batch version of ``transforms`` for samples of ``shape`` (H, W[, C]), or why there is none.

    Steps that change nothing at this shape (a resize to the size the samples have, a flip that is
    not random) are left out.
    """
    steps: list = []
    h, w = shape[:2]
    channels = shape[2] if len(shape) > 2 else 0
    for t in transforms:
        step = _batch_step(t, h, w, channels)
        if isinstance(step, str):
            return step
        if step is None:
            continue
        steps.append(step)
        if isinstance(step, BatchPad):
            h, w = h + step.top + step.bottom, w + step.left + step.right
        elif isinstance(step, BatchCrop):
            h, w = step.height, step.width
    slots = tuple(np.cumsum([0] + [s.draws for s in steps])[:-1].tolist())
    return Plan(tuple(steps), slots, sum(s.draws for s in steps), (h, w, *shape[2:]))


def _no_batch_version(t: Any, why: str = "") -> str:
    name = getattr(t, "__name__", None) or type(t).__name__
    return f"{name} has no batch version{why}"


def _batch_step(t: Any, h: int, w: int, channels: int) -> Any:
    """One transform's batch step, None when it changes nothing here, or a string saying why it cannot run."""
    if isinstance(t, (LimitSize, Resize)):
        size = _resized(t, w, h)
        return None if size == (w, h) else _no_batch_version(t, f" (it resizes {w}x{h} to {size[0]}x{size[1]})")
    if isinstance(t, Pad):
        left, top, right, bottom = t.sides
        width, height = max(t.width, w + left + right), max(t.height, h + top + bottom)
        x, y = left + (width - w - left - right) // 2, top + (height - h - top - bottom) // 2
        if (width, height) == (w, h):
            return None
        pads = (y, height - h - y, x, width - w - x)
        if t.border == "reflect" and max(pads) >= min(h, w) or t.border == "wrap" and max(pads) > min(h, w):
            return _no_batch_version(t, f" (a {t.border} border wider than the {w}x{h} sample)")
        return BatchPad(*pads, border=t.border, fill=t.fill)
    if isinstance(t, (Crop, CenterCrop, RoundSize)):
        if isinstance(t, RoundSize):
            width, height, random, fill = t._round(w), t._round(h), t.random, 0
            if width < 1 or height < 1:
                return _no_batch_version(t, f" (a {w}x{h} sample is too small for it)")
        elif isinstance(t, Crop):
            width, height, random, fill = t.width or w, t.height or h, t.random, t.fill
        else:
            width, height, random, fill = t.width, t.height, False, 0
        if (width, height) == (w, h):
            return None
        return BatchCrop(height, width, random and (width < w or height < h), fill, isinstance(t, CenterCrop))
    if isinstance(t, Flip):
        if not t.random or (t.horizontal <= 0 and t.vertical <= 0 and t.transpose <= 0):
            return None
        if t.transpose > 0:
            return _no_batch_version(t, " (transpose)")
        return BatchFlip(t.horizontal, t.vertical)
    if isinstance(t, Normalize):
        try:
            mean = Normalize._per_channel(t.mean, channels, "mean")
            std = Normalize._per_channel(t.std, channels, "std")
        except PicPacValueError as exc:
            return _no_batch_version(t, f" ({exc})")
        return BatchNormalize(mean, std)
    return _no_batch_version(t)


def _resized(t: LimitSize | Resize, w: int, h: int) -> tuple[int, int]:
    """The (width, height) a per-sample LimitSize or Resize gives a w x h image."""
    if isinstance(t, LimitSize):
        scale = 1.0
        if t.max_size and max(h, w) > t.max_size:
            scale = t.max_size / max(h, w)
        elif t.min_size and min(h, w) < t.min_size:
            scale = t.min_size / min(h, w)
        return (w, h) if scale == 1.0 else (max(1, round(w * scale)), max(1, round(h * scale)))
    if t.shorter:
        f = t.shorter / min(w, h)
        return max(1, round(w * f)), max(1, round(h * f))
    return t.width or max(1, round(w * t.height / h)), t.height or max(1, round(h * t.width / w))


def convert(images: np.ndarray, channel_first: bool, dtype: np.dtype, mean: np.ndarray | None,
            std: np.ndarray | None) -> np.ndarray:
    """The batch in the output layout and type, as :func:`picpac.transforms.convert` does per sample
    (the same float32 operations, so the same values).

    A new array (``images`` itself when it already has the layout and type and is not one of this
    thread's buffers). Channels-first data is first laid out in its own dtype, the small copy.
    """
    if images.ndim == 3:
        images = images[..., None]
    if channel_first:
        images = images.transpose(0, 3, 1, 2)
    if mean is None and std is None:
        if images.dtype == dtype and images.flags.c_contiguous and not in_buffer(images):
            return images
        if images.dtype == dtype:
            return np.array(images, order="C")
        return np.ascontiguousarray(images).astype(dtype)
    source = np.ascontiguousarray(images)
    shape = (-1, 1, 1) if channel_first else (-1,)

    def per_channel(value: Any) -> Any:
        return np.float32(value) if np.ndim(value) == 0 else np.asarray(value, np.float32).reshape(shape)

    out = np.subtract(source, per_channel(mean), dtype=np.float32) if mean is not None else source.astype(np.float32)
    if std is not None:
        out /= per_channel(std)
    return out if out.dtype == dtype else out.astype(dtype)
