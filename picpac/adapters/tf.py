"""TensorFlow adapter (``pip install 'picpac[tf]'``; `picpac docs adapters`).

* :func:`tf_dataset`: a ``tf.data.Dataset`` of an ImageStream's batches, with a full
  ``output_signature`` (the stream's dtypes, its known shapes, ``None`` where a size can vary) and
  ``prefetch(tf.data.AUTOTUNE)``; each iteration of the dataset is one pass (an epoch) of the stream.
* :func:`dataflow_to_dataset`: any DataFlow as a ``tf.data.Dataset`` (tensorpack's
  ``TFDatasetInput.dataflow_to_dataset(df, types)``, with the signature inferred when not given).
* :func:`stream_signature`: the ``TensorSpec`` tuple of a stream's batches.

Importing this module imports TensorFlow; ``import picpac`` does not.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from ..stream.config import StreamConfig
from ..stream.image_stream import Batch, Batches, ImageStream
from . import require
from .base import loader_config

tf = require("tensorflow", "tf")

__all__ = ["tf_dataset", "dataflow_to_dataset", "stream_signature", "spec_of"]


# -- configuration ---------------------------------------------------------------------------------------
def _stream_config(path: Any, config: StreamConfig | None, keys: dict[str, Any]) -> tuple[Any, StreamConfig]:
    """The path and the stream config the adapter runs: ``loop=False`` (an iteration of the dataset is an
    epoch), ``order='NHWC'`` (Keras' and TensorFlow's CPU convolutions' layout) and int64 class ids (as tf.one_hot
    and Keras' sparse losses take them), unless the config gives them."""
    return loader_config(path, config, keys, "tf", {"loop": False, "order": "NHWC"}, "int64",
                         instead=", or tf_dataset(stream) for a stream of your own")


# -- signatures ---------------------------------------------------------------------------------------------
def spec_of(value: Any, shape: Any = None) -> Any:
    """The ``tf.TensorSpec`` of one component: an array's dtype (its shape unless ``shape`` is given), a
    list of bytes/str as a string vector, a Python int as int32, a float as float32, a bool as bool
    (as ``BatchData`` batches them), bytes/str as a string scalar."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (bytes, str)) for v in value):
        return tf.TensorSpec((len(value),) if shape is None else shape, tf.string)
    if isinstance(value, (bytes, str)):
        return tf.TensorSpec(() if shape is None else shape, tf.string)
    if isinstance(value, (bool, np.bool_)):
        dtype: Any = tf.bool
    elif isinstance(value, int):
        dtype = tf.int32
    elif isinstance(value, float):
        dtype = tf.float32
    else:
        array = np.asarray(value)
        if array.dtype.kind in "OUSV":
            if array.dtype.kind in "US" or (array.size and all(isinstance(v, (bytes, str)) for v in array.flat)):
                return tf.TensorSpec(array.shape if shape is None else shape, tf.string)
            raise PicPacTypeError(f"a component of type {type(value).__name__} ({array.dtype}) has no tf dtype")
        return tf.TensorSpec(array.shape if shape is None else shape, tf.as_dtype(array.dtype))
    return tf.TensorSpec(() if shape is None else shape, dtype)


def _fixed_size(stream: ImageStream) -> bool:
    """Whether every batch's images (and image-shaped targets) have the first batch's size: the config fixes
    the output size (both resize keys, or both crop keys; or the batch path's fixed-shape arrays) and no
    custom ``transforms`` could change it."""
    c = stream.config
    if c.get("transforms"):
        return False
    return bool((c["resize_width"] and c["resize_height"]) or (c["crop_width"] and c["crop_height"])
                or stream.stats()["path"] == "batch")


def stream_signature(stream: ImageStream, first: Batch | None = None) -> tuple:
    """The ``TensorSpec`` tuple of ``stream``'s batches, from its first batch (``first``, or peeked: the
    stream's place is restored after it, so nothing is consumed) and its config:

    * the batch dimension is ``batch`` when every batch is full (``loop=True`` or ``pad=True``), else
      ``None`` (the last batch of a pass can be short);
    * the other dimensions of arrays of rank 3 and more are the first batch's when the output size is
      fixed (both ``resize_*`` or both ``crop_*`` keys, or the batch path; no custom ``transforms``),
      else ``None``, but for the images' channel axis; the rows of detection boxes and keypoints are
      ``max_boxes``, or ``None`` when it is 0;
    * labels, one-hot rows and counts keep their shape; a ``raw`` field is a string vector; ``pad`` a
      scalar int32.
    """
    if first is None:
        first = peek(stream)
    c = stream.config
    full = c["loop"] or c["pad"]
    fixed = _fixed_size(stream)
    channel_axis = 3 if c["order"] == "NHWC" else 1
    specs = []
    for index, item in enumerate(first):
        if index == len(first) - 1:  # pad
            specs.append(tf.TensorSpec((), tf.int32))
            continue
        spec = spec_of(item)
        shape = list(spec.shape)
        if not shape:
            specs.append(spec)
            continue
        shape[0] = shape[0] if full else None
        if index == 1 and c["task"] in ("detect", "keypoints"):
            shape[1] = c["max_boxes"] or None
        elif len(shape) >= 3 and not fixed:
            for axis in range(1, len(shape)):
                keep = index == 0 and axis == channel_axis and c["channels"] != -1
                shape[axis] = shape[axis] if keep else None
        specs.append(tf.TensorSpec(shape, spec.dtype))
    return tuple(specs)


def peek(stream: ImageStream) -> Batch:
    """The stream's next batch, leaving the stream where it was (its ``state_dict`` restored)."""
    state = stream.state_dict()
    batches = iter(stream)
    try:
        first = next(batches)
    except StopIteration:
        raise PicPacValueError(f"{stream!r} has no batch to take a signature from") from None
    finally:
        batches.close()
        stream.load_state_dict(state)
    return first


# -- datasets -----------------------------------------------------------------------------------------------
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold (64-bit)


def _restore_malloc() -> None:
    """Undo TensorFlow's process-wide ``mallopt(M_MMAP_THRESHOLD, 128 KiB)``.

    TensorFlow sets it when it builds a kernel that calls Python (``numpy_function``'s, and so
    ``from_generator``'s; ``ApplyPython311MemoryPatch``), which turns off glibc's adaptive threshold for
    the whole process: from then on every allocation over 128 KiB (each decoded image, each resized
    sample, each batch) is a fresh ``mmap`` whose pages fault in on first touch and go back on ``free``.
    The stream's workers then spend more time in the kernel than decoding (W1 ran at half speed).
    Setting any threshold also freezes the trim threshold at 128 KiB, where glibc's adaptive rule keeps
    it at twice the mmap threshold: every freed batch's pages went back to the kernel and faulted in
    again (4x the raw stream's page faults a pass), so both are set, as the adaptive rule would at its
    ceiling. Called when a pass starts, from inside that kernel, so after it is built; a no-op off
    glibc."""
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD)


@functools.cache
def _mallopt() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return None


def _options() -> Any:
    """The datasets' options: no autotuning. The stream runs its own workers and reads ahead, so TF's
    autotune thread has nothing to tune, and deleting an iterator waited for it (up to 2 s at the end
    of each pass). ``dataset.with_options`` can turn it back on."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def _from_generator(generator: Callable[[], Iterator], signature: Any) -> Any:
    def restored() -> Iterator:
        _restore_malloc()
        yield from generator()
    return tf.data.Dataset.from_generator(restored, output_signature=signature).with_options(_options())


def _prefetched(dataset: Any, prefetch: Any) -> Any:
    if prefetch is True:
        return dataset.prefetch(tf.data.AUTOTUNE)
    if prefetch is False or prefetch is None or prefetch == 0:
        return dataset
    if isinstance(prefetch, bool) or not isinstance(prefetch, (int, np.integer)) or prefetch < 0:
        raise PicPacValueError(f"prefetch={prefetch!r}: True (tf.data.AUTOTUNE), False, or a number of batches")
    return dataset.prefetch(int(prefetch))


def _dataset(generator: Callable[[], Iterator], signature: Any, prefetch: Any) -> Any:
    return _prefetched(_from_generator(generator, signature), prefetch)


def tf_dataset(source: Any, config: StreamConfig | None = None, *, output_signature: Any = None,
               prefetch: Any = True, **keys: Any) -> Any:
    """A ``tf.data.Dataset`` of a picpac database's batches: ``tf_dataset(path, **config)``.

    ``source`` is a database's path (or PicPac's ``{'db': path, ...}``) and ``keys`` ImageStream's keys
    (`picpac docs stream`), or ``config`` a StreamConfig; the adapter sets ``loop=False``, ``order='NHWC'`` and, for classification
    without ``onehot``, ``label_dtype='int64'``, unless given. ``source`` may also be an ``ImageStream``
    (no ``config`` or keys then), used as it is: yours to ``set_epoch`` and to close.

    Each element is the stream's batch tuple, ``(images, labels, pad)`` or the task's, as tensors with the
    stream's dtypes; ``output_signature`` (default :func:`stream_signature`) is complete, with ``None``
    only where a size can vary. The default signature is read from the first batch, made when the dataset
    is built; it starts the first iteration (your own stream is only peeked: left where it was).
    ``prefetch``: True for ``prefetch(tf.data.AUTOTUNE)``, a number of batches, or False. The dataset's
    cardinality is the batches per pass (``len(stream)``; unknown with ``skip_errors``), or infinite with
    ``loop=True``.

    With ``loop=False`` each iteration of the dataset (a ``for`` loop, each of Keras' epochs) is one
    pass of the stream, the next epoch each time; with your own stream, ``stream.set_epoch(e)`` before
    an iteration makes it epoch ``e``. ``loop=True``: one endless iteration. One iteration runs at a time
    (:class:`StreamPasses`): a second replaces the first, whose next batch is then an error.
    """
    if isinstance(source, ImageStream):
        if config is not None or keys:
            given = sorted(keys) if keys else "config="
            raise PicPacTypeError(f"tf_dataset(stream, ...): an ImageStream comes with its config; {given} "
                                  "are for tf_dataset(path, **config)")
        stream = source
    else:
        path, config = _stream_config(source, config, keys)
        stream = ImageStream(path, config)
    started = None  # the pass the signature was read from, to go on with
    if output_signature is not None:
        signature = output_signature
    elif stream is source:  # yours: left where it was
        signature = stream_signature(stream)
    else:  # this dataset's own: its first iteration goes on with the pass read (no batch decoded twice)
        batches = iter(stream)
        try:
            first = next(batches)
        except StopIteration:
            raise PicPacValueError(f"{source!r} has no batch to take a signature from") from None
        signature = stream_signature(stream, first)
        started = (first, batches)

    passes = StreamPasses(stream, signature, started)
    if stream.config.parallelism.skip_errors:  # batches per pass unknown: the generator's end ends the pass
        dataset = _from_generator(passes.generator, signature)
    else:
        dataset = passes.dataset()
    if stream.config.order.loop:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return _prefetched(dataset, prefetch)


class StreamPasses:
    """An ImageStream's passes as a dataset's iterations: each iteration of the dataset starts the stream's
    next pass (the first, the pass ``started`` for the signature: its first batch and the rest).

    :meth:`dataset` is ``Dataset.range(batches per pass).map(batch i of this pass)``: TensorFlow builds (and
    optimises) one function at each iteration, where ``from_generator`` builds four (the generator's
    three, and the ``flat_map``'s that tells iterations apart). So iterations are not told apart: one
    runs at a time (as the stream runs one pass at a time), and a batch asked for out of turn is an
    error. :meth:`generator` is the ``from_generator`` form, for
    ``skip_errors`` (whose passes' batch count is unknown until they end)."""

    def __init__(self, stream: ImageStream, signature: Any, started: tuple[Batch, Batches] | None = None):
        self.stream, self.signature, self.started = stream, tuple(signature), started
        self.batches: Batches | None = None  # the stream's pass under way
        self.current: Iterator[Batch] | None = None  # its batches to come (the started pass's first batch too)
        self.next_index = 0
        self.lock = threading.Lock()  # TensorFlow may call from several threads

    def dataset(self) -> Any:
        count = 2 ** 63 - 1 if self.stream.config.order.loop else len(self.stream)
        types = [spec.dtype for spec in self.signature]

        @tf.autograph.experimental.do_not_convert
        def batch(index: Any) -> tuple:
            values = tf.numpy_function(self.batch, [index], types, stateful=True)
            for value, spec in zip(values, self.signature):
                value.set_shape(spec.shape)
            return tuple(values)
        return tf.data.Dataset.range(count).with_options(_options()).map(batch)

    def batch(self, index: np.integer) -> list:
        """Batch ``index`` of this iteration's pass (0: the next pass's first), its components as the
        signature's arrays."""
        with self.lock:
            if index == 0:
                _restore_malloc()  # from inside the numpy_function kernel, built by now
                self.current = self._start()
            elif index != self.next_index or self.current is None:
                raise PicPacValueError(f"tf_dataset: batch {index} asked for where batch {self.next_index} comes "
                                       "next: one iteration of a tf_dataset at a time (each is a pass of its stream)")
            self.next_index = index + 1
            return self._arrays(next(self.current))

    def generator(self) -> Iterator[Batch]:
        """One pass (loop=False) per call, as ``from_generator`` calls it at each iteration."""
        with self.lock:
            batches = self._start()
        yield from batches

    def _start(self) -> Iterator[Batch]:
        """The next pass's batches (the started pass, the first time); the last pass's are closed."""
        if self.batches is not None:
            self.batches.close()
        self.next_index = 0
        if self.started is None:
            self.batches = iter(self.stream)
            return self.batches
        first, self.batches = self.started
        self.started = None
        return itertools.chain((first,), self.batches)

    def _arrays(self, batch: Batch) -> list:
        if len(batch) != len(self.signature):
            raise PicPacTypeError(f"tf_dataset: a batch of {len(batch)} components, where the output_signature has "
                                  f"{len(self.signature)}")
        arrays = []
        for index, (value, spec) in enumerate(zip(batch, self.signature)):
            if spec.dtype == tf.string:  # a list of bytes: numpy_function makes it a string tensor
                arrays.append(value)
                continue
            array = value if isinstance(value, np.ndarray) else np.asarray(value, spec.dtype.as_numpy_dtype)
            if array.dtype != spec.dtype.as_numpy_dtype or not spec.shape.is_compatible_with(array.shape):
                raise PicPacTypeError(f"tf_dataset: component {index} of a batch is {array.dtype} {array.shape}, "
                                      f"where the output_signature has {spec}")
            arrays.append(array)
        return arrays


def _types_signature(types: Sequence, shapes: Sequence | Mapping | None) -> tuple:
    if shapes is not None and len(shapes) != len(types):
        raise PicPacValueError(f"dataflow_to_dataset: {len(types)} types but {len(shapes)} shapes")
    return tuple(tf.TensorSpec(None if shapes is None else shapes[i], tf.as_dtype(t)) for i, t in enumerate(types))


def _inferred_signature(first: Any, shapes: Any) -> Any:
    """The signature of datapoints like ``first``: its dtypes exactly, its ranks, and every size ``None``
    (a DataFlow says nothing about which sizes can vary) unless ``shapes`` gives them."""
    if isinstance(first, Mapping):
        names = list(first)
        shapes = shapes if isinstance(shapes, Mapping) or shapes is None else dict(zip(names, shapes))
        return {name: _component_spec(first[name], None if shapes is None else shapes.get(name)) for name in names}
    if shapes is not None and len(shapes) != len(first):
        raise PicPacValueError(f"dataflow_to_dataset: datapoints of {len(first)} components but {len(shapes)} shapes")
    return tuple(_component_spec(value, None if shapes is None else shapes[i]) for i, value in enumerate(first))


def _component_spec(value: Any, shape: Any) -> Any:
    spec = spec_of(value)
    return tf.TensorSpec(shape if shape is not None else [None] * spec.shape.rank, spec.dtype)


def _datapoint(dp: Any) -> Any:
    """A datapoint as TensorFlow takes an element: a tuple (of a list's components), or a dict."""
    if isinstance(dp, Mapping):
        return dict(dp)
    if isinstance(dp, (list, tuple)):
        return tuple(dp)
    raise PicPacTypeError(f"dataflow_to_dataset: a datapoint is a list, tuple or dict, not {type(dp).__name__}")


def dataflow_to_dataset(df: Any, types: Sequence | None = None, shapes: Sequence | Mapping | None = None, *,
                        output_signature: Any = None, prefetch: Any = True) -> Any:
    """Any DataFlow as a ``tf.data.Dataset`` (tensorpack's ``dataflow_to_dataset``).

    As tensorpack's, it calls ``df.reset_state()`` (do not call it again), turns each datapoint (a list of
    components) into a tuple, and the dataset is finite when the DataFlow is: each iteration of the
    dataset is one pass of ``df`` (``.repeat()`` for more). Dict datapoints become dict elements.

    The signature: ``output_signature`` (a structure of ``tf.TensorSpec``); or tensorpack's ``types`` (a
    dtype per component) with sizes unknown, or ``shapes`` (one per component, ``None`` for a size that
    varies); or, with neither, the first datapoint's dtypes and ranks with ``shapes``, or every size
    ``None``. That first datapoint is not lost: it starts the dataset's first iteration.
    ``prefetch``: True for ``prefetch(tf.data.AUTOTUNE)``, a number of elements, or False.
    """
    if not (hasattr(df, "reset_state") and hasattr(df, "__iter__")):  # every DataFlow has both (compat/ is above us)
        raise PicPacTypeError(f"dataflow_to_dataset takes a DataFlow (reset_state, __iter__), not {type(df).__name__}")
    df.reset_state()
    held: list[Iterator] = []
    if output_signature is not None:
        signature = output_signature
    elif types is not None:
        if not isinstance(types, (list, tuple)):
            raise PicPacTypeError(f"dataflow_to_dataset: types is a list of dtypes, one per component, not {types!r}")
        signature = _types_signature(types, shapes)
    else:
        datapoints = iter(df)
        try:
            first = _datapoint(next(datapoints))
        except StopIteration:
            raise PicPacValueError(f"dataflow_to_dataset: {type(df).__name__} yields no datapoint to take a "
                                   "signature from; give types or output_signature") from None
        signature = _inferred_signature(first, shapes)

        def rest(first: Any = first, datapoints: Iterator = datapoints) -> Iterator:
            yield first
            yield from datapoints
        held.append(rest())

    def generator() -> Iterator:
        # the first iteration continues the pass the signature was taken from; every other is a new pass
        source = held.pop() if held else iter(df)
        for dp in source:
            yield _datapoint(dp)

    return _dataset(generator, signature, prefetch)
