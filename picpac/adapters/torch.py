"""PyTorch adapter (``pip install 'picpac[torch]'``; `picpac docs adapters`).

* :class:`TorchLoader`: an ImageStream whose batches are torch tensors, zero-copy views of the NumPy
  batch (``torch.from_numpy``), NCHW or ``channels_last``, labels int64, optionally in pinned memory;
  ``set_epoch``, ``state_dict`` / ``load_state_dict``, and rank / world size from ``torch.distributed``.
* :class:`TorchDataset`: an ``IterableDataset`` for ``DataLoader(dataset, batch_size=None,
  num_workers=N)``; worker ``w`` of ``W`` on rank ``r`` of ``R`` streams share ``r * W + w`` of ``R * W``,
  so no sample is read twice.
* :class:`DevicePrefetcher`: copies the next batch to the device on a side CUDA stream while the
  current step runs, and turns uint8 images into normalised floats there.

Importing this module imports torch; ``import picpac`` does not.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from ..stream.config import StreamConfig
from ..stream.image_stream import ImageStream
from . import require
from .base import StreamLoader, loader_config, with_rank

torch = require("torch", "torch")
_IterableDataset: Any = torch.utils.data.IterableDataset  # a base class (the checker sees torch as a module object)

MEMORY_FORMATS = ("contiguous", "channels_last")
"""The images' memory formats: ``contiguous`` (NCHW, the stream's ``order='NCHW'``) or ``channels_last``
(an NCHW-shaped view of the stream's NHWC batch, still without a copy)."""

_forked: list[Any] = []
"""Streams a forked DataLoader worker inherited: kept, never closed there (their threads are the parent's)."""


# -- configuration ---------------------------------------------------------------------------------------
def _memory_format(value: Any) -> str:
    if value is torch.contiguous_format:
        return "contiguous"
    if value is torch.channels_last:
        return "channels_last"
    if value not in MEMORY_FORMATS:
        raise PicPacValueError(f"memory_format={value!r}: use 'contiguous' (NCHW), 'channels_last', "
                               "torch.contiguous_format or torch.channels_last")
    return value


def distributed_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``rank`` and ``world_size`` from torch.distributed where it leaves them out (or None)
    and torch.distributed is initialised; else the stream's own defaults apply (the RANK and WORLD_SIZE
    environment variables when both are set, else rank 0 of 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return with_rank(config, dist.get_rank(), dist.get_world_size())
    return config


def _stream_config(path: Any, config: StreamConfig | None, keys: dict[str, Any], memory_format: str
                   ) -> tuple[Any, StreamConfig]:
    """The path and the stream config the adapter runs: ``loop=False`` (a ``for`` loop is an epoch), the ``order``
    that the memory format views without a copy, int64 class ids by default, and the rank and world size resolved
    (torch.distributed's, the environment's, or 0 of 1)."""
    order = "NHWC" if memory_format == "channels_last" else "NCHW"
    path, parsed = loader_config(path, config, keys, "torch", {"loop": False, "order": order}, "int64",
                                 distributed_defaults)
    if parsed.output.order != order:
        raise PicPacValueError(f"order={parsed.output.order!r} does not fit memory_format={memory_format!r}: the "
                               "images are NCHW tensors either way; leave order out (memory_format='channels_last' "
                               "reads the stream's NHWC batch as a channels_last tensor without a copy)")
    return path, parsed


# -- batches -----------------------------------------------------------------------------------------------
_pinning: list[bool] = []


def pinning_available() -> bool:
    """Whether torch can pin host memory here (it needs an accelerator: CUDA, or another torch knows)."""
    if not _pinning:
        available = torch.cuda.is_available()
        accelerator = getattr(torch, "accelerator", None)
        if not available and accelerator is not None:
            available = bool(accelerator.is_available())
        _pinning.append(available)
    return _pinning[0]


def _pin_requested(pin_memory: bool) -> bool:
    if pin_memory and not pinning_available():
        warnings.warn("picpac: pin_memory=True, but torch can pin memory only with an accelerator, and none is "
                      "available: the batches stay in pageable memory", RuntimeWarning, stacklevel=3)
        return False
    return bool(pin_memory)


def to_tensors(batch: Sequence[Any], channels_last: bool = False, pin_memory: bool = False, device: Any = None
               ) -> tuple:
    """A stream batch with its arrays as tensors sharing their memory (``torch.from_numpy``).

    With ``device`` (a stream given the config key ``device``), the images are the device stage's tensors there
    already and the other arrays (labels, boxes) follow them there.

    With ``channels_last`` every 4-D array (images, masks; the stream made them NHWC) is viewed as an
    NCHW-shaped ``torch.channels_last`` tensor. ``pin_memory`` copies each array into pinned memory.
    Other items (``pad``, lists of raw bytes) pass as they are.
    """
    out = []
    for item in batch:
        if isinstance(item, np.ndarray):
            if not item.flags.writeable:  # torch would warn, and a write would reach the array
                item = item.copy()
            item = torch.from_numpy(item)
            if pin_memory:
                item = item.pin_memory()
        if isinstance(item, torch.Tensor):  # the device stage's tensors too
            if device is not None and item.device != device:
                item = item.to(device, non_blocking=True)
            if channels_last and item.dim() == 4:
                item = item.permute(0, 3, 1, 2)
        out.append(item)
    return tuple(out)


# -- in-process loader ------------------------------------------------------------------------------------
class TorchLoader(StreamLoader):
    """Batches of torch tensors from a picpac database: ``TorchLoader(path, **config)``.

    ``config`` holds ImageStream's keys (`picpac docs stream`); the loader sets ``loop=False`` (each
    ``for`` loop is one epoch), ``order`` from ``memory_format`` and, for classification without
    ``onehot``, ``label_dtype='int64'``, unless given. ``rank`` and ``world_size`` choose the share of
    every epoch's order; by default torch.distributed's when it is initialised. Each batch is the
    stream's tuple with its arrays as tensors that share the NumPy batch's memory: images
    ``(B, C, H, W)`` (contiguous, or ``torch.channels_last`` with ``memory_format='channels_last'``),
    labels, ``pad`` an int. ``pin_memory=True`` puts them in pinned memory (for asynchronous copies
    to a GPU; a warning and pageable memory where torch cannot pin). With ``device='cuda'`` the device
    stage decodes and augments on the GPU and every tensor of a batch arrives there (`picpac docs gpu`).

    ``for epoch in range(E): loader.set_epoch(epoch); for batch in loader: ...``
    """

    def __init__(self, path: Any, config: StreamConfig | None = None, *, memory_format: Any = "contiguous",
                 pin_memory: bool = False, **keys: Any):
        self.memory_format = _memory_format(memory_format)
        self.pin_memory = _pin_requested(pin_memory)
        path, config = _stream_config(path, config, keys, self.memory_format)
        self.rank, self.world_size = config.order.rank, config.order.world_size
        self.device = None if config.parallelism.device is None else torch.device(config.parallelism.device)
        self.stream = ImageStream(path, config)

    def __iter__(self) -> Iterator[tuple]:
        channels_last = self.memory_format == "channels_last"
        for batch in self.stream:
            yield to_tensors(batch, channels_last, self.pin_memory and self.device is None, self.device)

    def __repr__(self) -> str:
        return (f"TorchLoader({self.stream!r}, memory_format={self.memory_format!r}, "
                f"rank={self.rank}, world_size={self.world_size})")


# -- DataLoader workers -------------------------------------------------------------------------------------
class TorchDataset(_IterableDataset):
    """An ``IterableDataset`` of whole batches for ``DataLoader(dataset, batch_size=None, num_workers=N)``.

    Worker ``w`` of ``W`` on rank ``r`` of ``R`` streams share ``r * W + w`` of ``R * W`` of each epoch's
    order, so the workers together read every sample of the rank's part once (each worker's batches
    come from its own share; the DataLoader interleaves them). Without workers it streams the
    rank's share in-process. The keys are :class:`TorchLoader`'s. Each worker runs
    ``cpu_count // W`` stream threads unless ``workers`` (or ``threads``) is given.

    ``set_epoch(epoch)`` before a loop sets that epoch's order in the workers the loop starts (the
    DataLoader's default, ``persistent_workers=False``); persistent workers go on to the next epoch
    by themselves at each new loop, as a stream does.
    """

    def __init__(self, path: Any, config: StreamConfig | None = None, *, memory_format: Any = "contiguous",
                 **keys: Any):
        super().__init__()
        self.memory_format = _memory_format(memory_format)
        self.path, self.config = _stream_config(path, config, keys, self.memory_format)
        if self.config.parallelism.device is not None:
            raise PicPacValueError(f"TorchDataset with device={self.config.parallelism.device!r}: the device stage "
                                   "runs in the training process, not in DataLoader workers; use TorchLoader(path, "
                                   "device=...) instead (`picpac docs gpu`)")
        rank, world_size = self.config.order.rank, self.config.order.world_size
        assert rank is not None and world_size is not None, "StreamConfig.from_dict resolves them"
        self.rank, self.world_size = rank, world_size
        self._epoch: int | None = None
        self._stream: ImageStream | None = None
        self._key: tuple[int, int, int] | None = None  # (pid, worker, workers) the stream was made for
        self._applied: int | None = None  # the epoch last given to this process's stream

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next loop (in the workers a DataLoader starts after this call)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise PicPacValueError(f"set_epoch({epoch!r}): the epoch is an integer >= 0")
        self._epoch = int(epoch)

    def share(self) -> tuple[int, int]:
        """``(share, shares)`` this process streams: ``(r * W + w, R * W)`` in DataLoader worker w of W."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.rank * workers + worker, self.world_size * workers

    def _open(self) -> ImageStream:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        key = (os.getpid(), worker, workers)
        if self._stream is not None and self._key != key:
            if self._key is not None and self._key[0] != key[0]:
                _forked.append(self._stream)  # the parent's: its threads are not here, so not closed here
            else:
                self._stream.close()
            self._stream = self._applied = None
        if self._stream is None:
            rank, world_size = self.share()
            changes: dict[str, Any] = {"rank": rank, "world_size": world_size}
            if workers > 1 and self.config.given.get("workers") is None:
                changes["workers"] = max(1, (os.cpu_count() or 1) // workers)
            self._stream = ImageStream(self.path, self.config.replace(**changes))
            self._key = key
        return self._stream

    def __iter__(self) -> Iterator[tuple]:
        size = _collating_batch_size()
        if size is not None:
            raise PicPacTypeError(f"DataLoader(TorchDataset(...), batch_size={size}) would stack {size} of its "
                                  f"batches (each of the stream's batch={self.config.order.batch}) into one, 5-D "
                                  "images: a TorchDataset yields whole batches; use DataLoader(dataset, "
                                  "batch_size=None, ...) and set the batch with the stream's key batch=")
        stream = self._open()
        if self._epoch is not None and self._epoch != self._applied:
            stream.set_epoch(self._epoch)
            self._applied = self._epoch
        channels_last = self.memory_format == "channels_last"
        for batch in stream:
            yield to_tensors(batch, channels_last)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_stream"] = state["_key"] = state["_applied"] = None  # each worker opens its own
        return state

    def close(self) -> None:
        if self._stream is not None and self._key is not None and self._key[0] == os.getpid():
            self._stream.close()
        self._stream = None

    def __repr__(self) -> str:
        return f"TorchDataset({self.path!r}, rank={self.rank}, world_size={self.world_size})"


def _collating_batch_size() -> int | None:
    """The ``batch_size`` of a DataLoader that takes a dataset's items one by one to collate them (torch's
    iterable-dataset fetcher with auto-collation resumed the calling generator), or None. Read from the fetcher's
    frame: torch has no public way for a dataset to know."""
    caller = sys._getframe(2)  # this function <- the dataset's __iter__ generator <- whoever resumed it
    fetcher = caller.f_locals.get("self")
    if type(fetcher).__name__ == "_IterableDatasetFetcher" and getattr(fetcher, "auto_collation", False):
        return len(caller.f_locals.get("possibly_batched_index", ())) or None
    return None


# -- device prefetching -------------------------------------------------------------------------------------
class DevicePrefetcher:
    """Batches of ``loader`` on ``device``, the next one copied while the current step runs.

    On CUDA the copy of batch k+1 (``non_blocking``, from pinned memory when the host tensors are
    pinned; unpinned ones are pinned first) runs on a side stream while the caller's stream works
    on batch k, and the caller's stream waits for it before batch k+1 is used. On any other
    device (the CPU) the same steps run synchronously. ``dtype`` (with ``mean``/``std`` it defaults
    to float32) converts the images on the device, so the host sends uint8 (``dtype='uint8'`` in the
    stream's config): ``(x [/ 255 with value_range='0-1'] - mean) / std`` per channel, the stream's
    own float32 arithmetic. ``loader`` is a :class:`TorchLoader`, a DataLoader over a
    :class:`TorchDataset`, or any iterable of tuples whose first item is the images.

    ``state_dict()`` is the loader's state before the batch held ahead, so a resume repeats nothing
    and misses nothing; ``set_epoch`` and ``len`` are the loader's.
    """

    def __init__(self, loader: Iterable, device: Any = None, *, dtype: Any = None, mean: Any = None,
                 std: Any = None, value_range: str = "0-255", non_blocking: bool = True):
        self.loader: Any = loader  # its state_dict, load_state_dict, set_epoch and len where it has them
        self.device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
        if value_range not in ("0-255", "0-1"):
            raise PicPacValueError(f"value_range={value_range!r}: use '0-255' (mean/std in pixel values) or '0-1' "
                                   "(torchvision's units)")
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None) if dtype in ("float32", "float16", "bfloat16", "float64") else None
            if dtype is None:
                raise PicPacValueError("dtype: a floating torch dtype (torch.float32, 'float16', ...) or None")
        if dtype is None and (mean is not None or std is not None or value_range == "0-1"):
            dtype = torch.float32
        if dtype is not None and not dtype.is_floating_point:
            raise PicPacValueError(f"dtype={dtype}: the images are converted to a floating dtype, or not at all")
        self.dtype = dtype
        self.mean, self.std = _normalisation(mean, std, value_range)
        self.non_blocking = non_blocking
        self._constants: dict[int, tuple[Any, Any]] = {}  # channels -> (mean, std) on the device
        self._pending_state: dict[str, Any] | None = None

    # -- iteration --------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple]:
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(device=self.device) if cuda else None
        batches = iter(self.loader)
        try:
            ahead = self._fetch(batches, side)
            while ahead is not None:
                if cuda:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_stream(side)
                    for item in ahead:
                        if isinstance(item, torch.Tensor) and item.device.type == "cuda":
                            item.record_stream(current)  # its memory is not reused before this stream is done
                batch = ahead
                ahead = self._fetch(batches, side)  # the next copy starts before the current step
                yield batch
        finally:
            self._pending_state = None
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _fetch(self, batches: Iterator, side: Any) -> tuple | None:
        state = self._loader_state()
        try:
            batch = next(batches)
        except StopIteration:
            self._pending_state = None
            return None
        self._pending_state = state
        context = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
        with context:
            return self.to_device(batch)

    def to_device(self, batch: tuple) -> tuple:
        """``batch`` on the device (images converted and normalised), on the current CUDA stream."""
        if not isinstance(batch, (tuple, list)) or not batch:
            raise PicPacTypeError(f"DevicePrefetcher: the loader gave a {type(batch).__name__}, not a batch tuple "
                                  "(images, ...)")
        out = []
        for i, item in enumerate(batch):
            if isinstance(item, np.ndarray):
                item = torch.from_numpy(item)
            if isinstance(item, torch.Tensor):
                if self.device.type == "cuda" and item.device.type == "cpu" and not item.is_pinned():
                    item = item.pin_memory()
                item = item.to(self.device, non_blocking=self.non_blocking)
                if i == 0:
                    item = self._images(item)
            out.append(item)
        return tuple(out)

    def _images(self, images: Any) -> Any:
        if self.dtype is None:
            return images
        if images.dim() != 4:
            raise PicPacValueError(f"DevicePrefetcher: images of shape {tuple(images.shape)}, not (B, C, H, W)")
        # the stream's float32 arithmetic (a new tensor: the loader's stays as it was), then the dtype asked for
        out = images.to(torch.float32, copy=True)
        if self.mean is not None or self.std is not None:
            mean, std = self._device_constants(images.shape[1])
            if mean is not None:
                out.sub_(mean)
            if std is not None:
                out.div_(std)
        return out if self.dtype == torch.float32 else out.to(self.dtype)

    def _device_constants(self, channels: int) -> tuple[Any, Any]:
        if channels not in self._constants:
            values = []
            for name, value in (("mean", self.mean), ("std", self.std)):
                if value is not None and len(value) not in (1, channels):
                    raise PicPacValueError(f"DevicePrefetcher: {name} has {len(value)} values, the images "
                                           f"{channels} channel(s)")
                values.append(None if value is None else
                              torch.from_numpy(value).reshape(1, -1, 1, 1).to(self.device))
            self._constants[channels] = values[0], values[1]
        return self._constants[channels]

    # -- the loader's protocol ---------------------------------------------------------------------------------
    def _loader_state(self) -> dict[str, Any] | None:
        method = getattr(self.loader, "state_dict", None)
        return method() if method is not None else None

    def state_dict(self) -> dict[str, Any]:
        """The loader's state after the batches this prefetcher delivered (not the one it holds ahead)."""
        if not hasattr(self.loader, "state_dict"):
            raise PicPacTypeError(f"DevicePrefetcher: its loader ({type(self.loader).__name__}) has no state_dict")
        state = self._pending_state if self._pending_state is not None else self._loader_state()
        return {"loader": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or "loader" not in state:
            raise PicPacValueError("DevicePrefetcher.load_state_dict takes what its state_dict() returned")
        self.loader.load_state_dict(state["loader"])

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __repr__(self) -> str:
        return f"DevicePrefetcher({self.loader!r}, device={str(self.device)!r}, dtype={self.dtype})"


def _normalisation(mean: Any, std: Any, value_range: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """float32 per-channel mean and std in pixel units, as the stream computes them (processor.py)."""
    def values(name: str, value: Any) -> tuple[float, ...] | None:
        if value is None:
            return None
        flat = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if flat.ndim != 1 or not len(flat) or not np.isfinite(flat).all():
            raise PicPacValueError(f"DevicePrefetcher: {name}={value!r}: one finite number or one per channel")
        if name == "std" and (flat == 0).any():
            raise PicPacValueError(f"DevicePrefetcher: std={value!r} has a zero")
        return tuple(float(v) for v in flat)

    mean, std = values("mean", mean), values("std", std)
    if value_range == "0-1":  # torchvision's units: (x / 255 - mean) / std
        mean = None if mean is None else tuple(255 * m for m in mean)
        std = (255.0,) if std is None else tuple(255 * s for s in std)
    return (None if mean is None else np.asarray(mean, np.float32),
            None if std is None else np.asarray(std, np.float32))
