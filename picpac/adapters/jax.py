"""JAX adapter (``pip install 'picpac[jax]'``; `picpac docs adapters`).

* :class:`JaxLoader`: an ImageStream whose batches are ``jax.Array``s placed with ``jax.device_put``,
  sharded along the batch axis over a 1-D mesh of the local devices (or a sharding given), and
  double-buffered: the next batch is put on the devices while the current one is used.
  ``set_epoch``, ``state_dict`` / ``load_state_dict`` (exact: the batch held ahead is not counted), and
  rank / world size from ``jax.process_index()`` / ``jax.process_count()``.
* :func:`device_put_batches`: the same placement and double-buffering over any iterable of batches
  (a DataFlow's datapoints, tuples or dicts).
* :func:`batch_sharding`: the default sharding, ``NamedSharding(Mesh(devices, ('batch',)), P('batch'))``.

Importing this module imports JAX; ``import picpac`` does not.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from ..stream.config import StreamConfig
from ..stream.image_stream import ImageStream
from . import require
from .base import StreamLoader, loader_config, with_rank

jax = require("jax", "jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

__all__ = ["JaxLoader", "device_put_batches", "batch_sharding", "put_batch", "AXIS"]

AXIS = "batch"
"""The name of the default mesh's one axis, along which the batch is split."""


# -- placement ------------------------------------------------------------------------------------------------
def batch_sharding(devices: Sequence | None = None) -> Any:
    """``NamedSharding`` over a 1-D mesh of ``devices`` (default: ``jax.local_devices()``) named ``'batch'``,
    splitting an array's first axis across them."""
    devices = list(jax.local_devices() if devices is None else devices)
    if not devices:
        raise PicPacValueError("batch_sharding: no devices")
    return NamedSharding(Mesh(np.array(devices), (AXIS,)), PartitionSpec(AXIS))


def _sharding(sharding: Any, devices: Sequence | None) -> Any:
    if sharding is not None and devices is not None:
        raise PicPacTypeError("give sharding or devices, not both (devices make the default 1-D batch mesh)")
    if sharding is None:
        return batch_sharding(devices)
    if not isinstance(sharding, jax.sharding.Sharding):
        raise PicPacTypeError(f"sharding: a jax.sharding.Sharding (e.g. NamedSharding), not {type(sharding).__name__}")
    return sharding


def _put_array(array: Any, sharding: Any) -> Any:
    if np.ndim(array) == 0 and isinstance(sharding, NamedSharding):
        sharding = NamedSharding(sharding.mesh, PartitionSpec())  # a scalar is replicated
    if sharding.is_fully_addressable:
        return jax.device_put(array, sharding)
    # a sharding over the devices of several processes: this process's rows of the global batch
    return jax.make_array_from_process_local_data(sharding, np.asarray(array))


def put_batch(batch: Any, sharding: Any) -> Any:
    """``batch`` (a tuple, list or dict) with every NumPy or JAX array placed with ``sharding``; other items
    (``pad``, lists of raw bytes, strings) pass as they are."""
    if isinstance(batch, Mapping):
        return {key: put_batch(value, sharding) if isinstance(value, Mapping) else _put_item(value, sharding)
                for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return tuple(_put_item(item, sharding) for item in batch)
    raise PicPacTypeError(f"a batch is a tuple, list or dict, not {type(batch).__name__}")


def _put_item(item: Any, sharding: Any) -> Any:
    if hasattr(item, "__dlpack__") and not isinstance(item, (np.ndarray, jax.Array)):
        item = jax.dlpack.from_dlpack(item)  # the device stage's torch tensor, without a copy
    if isinstance(item, np.ndarray) and item.dtype.kind not in "OUSV" or isinstance(item, jax.Array):
        return _put_array(item, sharding)
    return item


def _double_buffered(batches: Iterator, sharding: Any, before_fetch: Any = None) -> Iterator:
    """``batches`` placed with ``sharding``, the next one put (asynchronously) before the current one is
    yielded; ``before_fetch()`` is called before each batch is drawn."""
    def fetch() -> Any:
        if before_fetch is not None:
            before_fetch()
        try:
            batch = next(batches)
        except StopIteration:
            return None
        return (put_batch(batch, sharding),)

    ahead = fetch()
    while ahead is not None:
        (batch,) = ahead
        ahead = fetch()  # the next transfer is under way while the caller uses this batch
        yield batch


def device_put_batches(batches: Iterable, sharding: Any = None, *, devices: Sequence | None = None) -> Iterator:
    """Any iterable of batches (tuples, lists or dicts of arrays: an ImageStream, a DataFlow) as batches
    of ``jax.Array``s placed with ``sharding`` (default :func:`batch_sharding` of ``devices``, the local
    devices), double-buffered: batch k+1 is put on the devices before batch k is given."""
    sharding = _sharding(sharding, devices)
    iterator = iter(batches)
    try:
        yield from _double_buffered(iterator, sharding)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


# -- configuration ---------------------------------------------------------------------------------------
def distributed_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``rank`` and ``world_size`` from ``jax.process_index()`` and ``jax.process_count()``
    where it leaves them out (or None) and JAX runs more than one process; else the stream's own
    defaults apply (the RANK and WORLD_SIZE environment variables when both are set, else rank 0 of 1)."""
    if jax.process_count() > 1:
        return with_rank(config, jax.process_index(), jax.process_count())
    return config


def _stream_config(path: Any, config: StreamConfig | None, keys: dict[str, Any]) -> tuple[Any, StreamConfig]:
    """The path and the stream config the loader runs: ``loop=False`` (a ``for`` loop is an epoch),
    ``order='NHWC'`` (JAX's and Flax's layout), ``pad=True`` (every batch full: one shape to compile, and a batch
    that splits evenly over the devices), int32 class ids (JAX keeps 32-bit integers unless jax_enable_x64), and
    the rank and world size resolved."""
    return loader_config(path, config, keys, "jax", {"loop": False, "order": "NHWC", "pad": True}, "int32",
                         distributed_defaults, ", or use device_put_batches(stream) for a stream of your own")


# -- the loader ---------------------------------------------------------------------------------------------
class JaxLoader(StreamLoader):
    """Batches of ``jax.Array``s from a picpac database: ``JaxLoader(path, **config)``.

    ``config`` holds ImageStream's keys (`picpac docs stream`); the loader sets ``loop=False`` (each
    ``for`` loop is one epoch), ``order='NHWC'``, ``pad=True`` (the last batch filled up and ``pad``
    counting the filler, so every batch has one shape) and, for classification without ``onehot``,
    ``label_dtype='int32'``, unless given. ``rank`` and ``world_size`` default to
    ``jax.process_index()`` and ``jax.process_count()`` when JAX runs several processes.

    Every array of a batch is placed with ``sharding``: by default a ``NamedSharding`` over a 1-D mesh
    of ``devices`` (default ``jax.local_devices()``) splitting the batch axis, so the batch size must
    be a multiple of the device count. A sharding over several processes' devices makes global arrays
    of each process's batch (``jax.make_array_from_process_local_data``). ``pad`` stays a Python int.
    The next batch is put on the devices while the current one is used (double buffering);
    ``state_dict()`` leaves that batch out, so a resume from it is exact.

    ``for epoch in range(E): loader.set_epoch(epoch); for images, labels, pad in loader: ...``
    """

    def __init__(self, path: Any, config: StreamConfig | None = None, *, sharding: Any = None,
                 devices: Sequence | None = None, **keys: Any):
        self.sharding = _sharding(sharding, devices)
        path, config = _stream_config(path, config, keys)
        self.rank, self.world_size = config.order.rank, config.order.world_size
        ways = len(self.sharding.mesh.devices.flat) if sharding is None else 1  # a sharding given: JAX checks
        if config.order.batch % ways:
            raise PicPacValueError(f"batch={config.order.batch} does not split evenly over the {ways} devices of the "
                                   "batch mesh: make it a multiple of the device count, or pass devices=")
        self.stream = ImageStream(path, config)
        self._pending_state: dict[str, Any] | None = None  # the stream's state before the batch held ahead

    def __iter__(self) -> Iterator[tuple]:
        if self._pending_state is not None and self.stream.config.order.loop:
            # a loop that broke off held a batch ahead: an endless stream goes on from the last batch given
            self.stream.load_state_dict(self._pending_state)
        self._pending_state = None
        batches = iter(self.stream)
        finished = False
        try:
            yield from _double_buffered(batches, self.sharding, self._before_fetch)
            finished = True
        finally:
            if finished:
                self._pending_state = None
            batches.close()

    def _before_fetch(self) -> None:
        self._pending_state = self.stream.state_dict()

    def _state(self) -> dict[str, Any]:
        """The stream's state after the batches delivered, not the one held ahead."""
        return self._pending_state if self._pending_state is not None else self.stream.state_dict()

    def _forget(self) -> None:
        self._pending_state = None

    def __repr__(self) -> str:
        return f"JaxLoader({self.stream!r}, sharding={self.sharding}, rank={self.rank}, world_size={self.world_size})"
