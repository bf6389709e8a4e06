"""ImageStream: PicPac-compatible batches of decoded, transformed images from a picpac file."""
from __future__ import annotations

import math
import os
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, NamedTuple, cast

import cv2
import numpy as np

from ..engine import aligned
from ..engine.executor import Executor, ThreadExecutor
from ..engine.process_executor import ProcessExecutor
from ..engine.processes import pack_recipe
from ..errors import PicPacError, PicPacTypeError, PicPacValueError
from ..file.reader import IndexedReader, Reader, RecordReader
from ..file.shards import open_database
from ..sampling import Sampler, assign_folds, select
from .batch_job import BatchJob, batch_plan
from .config import StreamConfig
from .device_job import DeviceJob
from .fused_job import FusedSampleJob, fused_reason
from .job import Job, Pool, capacity, default_workers
from .legacy import with_v2_defaults
from .position import Keys, Position, load_state_dict, state_dict
from .processor import Processor
from .sample_job import Profile, SampleJob
from .workers import Choice, choose

Batch = tuple[Any, ...] | list[Any]
"""(images, labels | masks, pad) or (images, boxes | points, counts, pad); PicPac v2 (``v2=True``): a list,
[Meta, images, *facets]."""
Batches = Generator[Batch, None, None]
"""A stream's batches: a generator, so that ``close()`` (or dropping it) stops the work under way."""


class Meta(NamedTuple):
    """The first item of a PicPac v2 batch (``v2=True``): each sample's record id and label, and the raw fields."""

    ids: np.ndarray
    """int32 (B,): the records."""
    labels: np.ndarray
    """float32 (B,)."""
    raw: list
    """One list of B bytes per field of the config key ``raw``."""
SHAPE_KEYS = "resize_width/resize_height, crop_width/crop_height, or batch=1"
KEEP = 2
"""backend='process': a batch's images are overwritten only once KEEP more batches were asked for."""


def _process_executor(job: Job, workers: int, method: str, timeout: float | None) -> ProcessExecutor:
    # the job is pickled once, now: an unpicklable transform fails here, not in a worker
    return ProcessExecutor(pack_recipe(job.build, method), workers, method, KEEP, "picpac-stream", timeout)


EXECUTORS: dict[str, Callable[[Job, int, str, float | None], Executor]] = {
    "thread": lambda job, workers, method, timeout: ThreadExecutor(workers, "picpac-stream", timeout),
    "process": _process_executor,
}
"""The executor of each ``backend``, from the job, the workers, the start method and the timeout."""


class _Pipeline:
    """Everything a stream's batches need: the pool of keys, the job, the executor, the order, the counters.

    Batches reference this object, not the ImageStream, so dropping the stream stops them.
    """

    def __init__(self, path: Any, config: StreamConfig):
        self._readers: list[IndexedReader] = []  # one file, local or remote, or a dataset of shards
        self.config = c = config
        p = c.parallelism
        self.remote = c.remote_options()
        self._readers.append(open_database(path, remote=self.remote))
        self.executor: Executor | None = None
        try:
            records, sources, labels = self._build_pool()
            # records are read ahead from the network always, from a local file in chunked order (larger than memory)
            chunked = c.order.shuffle and c.order.shuffle_chunk > 0
            self.pool = Pool(records, sources, labels,
                             [r.prefetch if r.downloads or chunked else None for r in self._readers])
            # a worker reading a remote file is also given the time one read may take with its retries, so
            # that a server that stalls is reported by its URL, not as a silent worker
            remote = any(reader.downloads for reader in self._readers)
            timeout = p.timeout and p.timeout + (self.remote.deadline() if remote else 0.0)
            self._check_labels()
            self._check_fields()
            o = c.order
            self._sampler = Sampler(labels, o.seed, shuffle=o.shuffle, reshuffle=o.reshuffle,
                                    oversample=c.split.oversample, chunk=o.shuffle_chunk, window=o.shuffle_window)
            self.position = Position(self._sampler, o, self._readers[0].path)
            self.profile = Profile() if p.profile else None
            self.processor = Processor.of(c)
            self._check_channels()
            plan, self.path_reason = batch_plan(self._readers, c, self.processor)
            if p.device is not None:  # the device stage makes the batches
                plan, self.path_reason = None, f"device={p.device!r}"
            if p.vectorize and plan is None:
                raise PicPacValueError(f"{path}: vectorize=True, but the batch path cannot run: {self.path_reason}")
            name = c.decode.image_field
            self.fused_reason = fused_reason(c, any(name in reader.arrays for reader in self._readers))
            self.workers_reason = None
            if p.workers == "auto":  # measured now, and the config says what was chosen from here on
                if p.device is not None:
                    choice = Choice(default_workers(), "thread", f"device={p.device!r}: planning threads, one core "
                                                                 "left to the consumer")
                elif plan is None:
                    job_type = FusedSampleJob if self.fused_reason is None else SampleJob
                    choice = choose(job_type, self._readers, c, self.pool)
                else:
                    choice = Choice(default_workers(), p.backend, "the batch path (vectorised NumPy)")
                self.config = c = c.replace(workers=choice.workers, backend=choice.backend)
                p, self.workers_reason = c.parallelism, choice.reason
            if p.device is not None:
                from ..device.executor import DeviceExecutor  # torch: imported only by a stream on a device
                device_job = DeviceJob(self._readers, c, self.processor, self.profile)
                self.job: Job = device_job
                self.fused_reason = f"device={p.device!r} (the device stage makes the batches)"
                self.executor = DeviceExecutor(capacity(c)[0], device_job.stage, "picpac-stream", timeout)
            else:
                if plan is not None:  # batch_plan gives a plan only when every reader is mapped: a Reader
                    self.job = BatchJob(cast("list[Reader]", self._readers), c, self.pool, self.processor, plan)
                elif self.fused_reason is None:
                    self.job = FusedSampleJob(self._readers, c, self.processor, self.profile)
                else:
                    self.job = SampleJob(self._readers, c, self.processor, self.profile)
                self.executor = EXECUTORS[p.backend](self.job, capacity(c)[0], p.start_method, timeout)
        except BaseException:
            self.close()
            raise
        self._failed = (0, -2, 0)  # (keys that cover the pool, the last failed key, failures in a row)
        self.stats: dict[str, Any] = {
            "samples": 0, "batches": 0, "skipped": 0, "skipped_records": [], "damaged": 0, "damaged_records": [],
            "path": "sample" if plan is None else "batch", "path_reason": self.path_reason,
            "fused_reason": self.fused_reason if plan is None else "the batch path runs",
            "worker_count": capacity(c)[0], "workers_reason": self.workers_reason}
        if isinstance(self.job, DeviceJob):
            self.stats["device_decoder"] = self.job.stage.decoder_name

    # -- the pool of samples: the chosen split of the database, plus the mixin ------------------
    def _build_pool(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The records, sources and labels of the pool."""
        split, seed = self.config.split, self.config.order.seed
        main = self._readers[0]
        folds = assign_folds(main.labels, main.groups, split.split, seed, shuffle=self.config.order.shuffle,
                             stratify=split.stratify)
        records = select(folds, split.split, split.split_fold, split.split_negate)
        sources = np.zeros(len(records), np.int64)
        labels = main.labels[records]
        if split.mixin is not None:
            mixin = open_database(split.mixin, remote=self.remote)
            self._readers.append(mixin)
            count = min(len(mixin), split.mixin_max) if split.mixin_max else len(mixin)
            extra = np.arange(count)
            if split.mixin_randomize and count < len(mixin):  # PicPac: shuffle the mixin, then truncate
                extra = np.sort(np.random.default_rng([seed, 1]).permutation(len(mixin))[:count])
            mixed = mixin.labels[extra]
            mixed = np.full(count, split.mixin_group_reset) if split.mixin_group_reset >= 0 else \
                mixed + split.mixin_group_delta
            records = np.concatenate([records, extra])
            sources = np.concatenate([sources, np.ones(count, np.int64)])
            labels = np.concatenate([labels, mixed])
        if not len(records):
            raise PicPacValueError(f"{main.path}: the stream has no samples (split={split.split}, "
                                   f"split_fold={split.split_fold}, split_negate={split.split_negate})")
        return records, sources, labels

    # -- what the config and the index tell before any record is read ------------------------------
    def _check_labels(self) -> None:
        """Classification labels fit ``onehot`` and ``label_dtype``: the first that does not is named."""
        out = self.config.output
        if out.task != "classify" or not (out.onehot or out.label_dtype != "float32"):
            return
        labels = self.pool.labels
        bad = labels != np.floor(labels)
        need = "an integral class id"
        if out.onehot:
            bad |= (labels < 0) | (labels >= out.onehot)
            need = f"a class id in [0, onehot={out.onehot})"
        elif out.label_dtype != "float32":
            info = np.iinfo(out.label_dtype)
            bad |= (labels < info.min) | (labels > info.max)
            need = f"an integral class id for label_dtype={out.label_dtype!r}"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            reader = self._readers[int(self.pool.sources[i])]
            raise PicPacValueError(f"{reader.path}: record {int(self.pool.records[i])} has label {labels[i]:g}, "
                                   f"not {need} ({int(bad.sum())} of the stream's {len(labels)} labels are not)")

    def _check_fields(self) -> None:
        """The fields the config reads exist in the database (and the mixin): ``image_field``, and the
        annotation's field; a missing one is named with the fields the database has."""
        d = self.config.decode
        for reader in self._readers:
            _check_field(reader, "image_field", d.image_field)
            if d.annotation_field is not None and d.annotate != "auto":
                _check_field(reader, "annotation_field", d.annotation_field)
        reader = self._readers[0]
        needed = {"json": ("annotation",), "image": ("mask", "annotation"),
                  "any": ("annotation", "mask")}.get(d.annotate or "")
        if d.annotation_field is None and needed and not any(name in reader.fields for name in needed):
            raise PicPacValueError(f"{reader.path}: task={self.config.output.task!r} with annotate={d.annotate!r} "
                                   f"reads the {' or '.join(map(repr, needed))} field, but no record has one; the "
                                   f"database's fields: {reader.fields} (picpac import writes annotations, "
                                   "annotation_field names another field; see `picpac docs augment`)")

    def _check_channels(self) -> None:
        """With channels=-1 (as stored), mean/std fit the channels of the database's images, from its
        declared arrays or its first sample."""
        d, out = self.config.decode, self.config.output
        if d.channels != -1 or not any(v is not None and len(v) > 1 for v in (out.mean, out.std)):
            return
        reader = self._readers[int(self.pool.sources[0])]
        record = int(self.pool.records[0])
        spec = reader.arrays.get(d.image_field) if isinstance(d.image_field, str) else None
        if spec is not None:
            channels = spec.shape[2] if len(spec.shape) == 3 else 1
        else:
            sample = self.processor.decode(reader[record].fields, 0.0, record, reader.path, reader.arrays)
            image = sample.image
            channels = image.shape[2] if image.ndim == 3 else 1
        for name, values in (("mean", out.mean), ("std", out.std)):
            if values is not None and len(values) not in (1, channels):
                raise PicPacValueError(f"{reader.path}: config key {name!r} has {len(values)} values, but with "
                                       f"channels=-1 the images have {channels} channel(s) (record {record}): "
                                       f"give 1 or {channels}, or set channels=1 or 3")

    # -- batches: the one delivery loop ------------------------------------------------------------
    def batches(self, keys: Keys, real: int | None) -> Batches:
        """Batches of ``keys``; in a finite pass the keys after the first ``real`` are padding."""
        self._failed = (keys.cover, -2, 0)
        return self._finishing(self._deliver(keys, real))

    def _finishing(self, batches: Iterator[Batch]) -> Batches:
        """``batches``, and the end of the pass noted when they end (loop=False)."""
        yield from batches
        self.position.finish()

    def _deliver(self, keys: Keys, real: int | None) -> Batches:
        """The job's units on the executor, their parts assembled into batches, in key order.

        A batch's images may be a view into the executor's shared memory (backend='process'), which it
        overwrites once KEEP more batches were asked for: copied unless copy=False, and a batch still
        referenced then is warned about."""
        job, executor = self.job, self.executor
        assert executor is not None, "set by __init__, which failed otherwise"
        deliveries = executor.run(job, job.units(keys, self.pool), job.group, job.window, self._on_error, job.chunk,
                                  job.layout())
        parts = job.collect(deliveries, real, self._skip)
        # the executors and the jobs make them by generators: closed below, they stop the work under way
        assert isinstance(deliveries, Generator) and isinstance(parts, Generator)
        views: deque[weakref.ref | None] = deque(maxlen=KEEP)  # the last batches' images, while shared
        copy = self.config.parallelism.copy
        mark = time.perf_counter()
        try:
            for part in parts:
                if self.profile is not None:
                    self.profile.stages["wait"] += time.perf_counter() - mark
                shared = part.shared
                images = part.images
                if shared and copy:
                    images, shared = aligned.copy(images), False
                out = self._assemble(images, part.targets, part.dense, part.positions, part.padding, part.made)
                self._damaged(part.damaged)
                self.position.advance(part.taken)
                views.append(weakref.ref(out[0]) if shared else None)
                del images, part
                yield out
                del out
                if len(views) == KEEP and views[0] is not None and views[0]() is not None:
                    warnings.warn("picpac: a batch from backend='process' is still referenced while its shared "
                                  "memory is reused, so its images change under you: use a batch's images before "
                                  f"asking for {KEEP} more batches, or leave copy=True (the default) to keep "
                                  "batches", RuntimeWarning, stacklevel=4)
                    views[0] = None
                mark = time.perf_counter()
        finally:
            parts.close()
            deliveries.close()

    def _on_error(self, unit: Any, exc: BaseException) -> None:
        index = self.job.failed(unit, exc)
        if index is None:
            raise exc
        self._skip(exc, index)

    def stop_workers(self) -> None:
        if self.executor is not None:
            self.executor.close()

    def _skip(self, exc: BaseException, index: int) -> None:
        """Count the sample at key ``index`` as skipped; once as many keys in a row as cover the pool
        failed, every sample did, and the stream would never make a batch: raise."""
        self.stats["skipped"] += 1
        if len(self.stats["skipped_records"]) < 100:
            self.stats["skipped_records"].append(str(exc))
        cover, last, run = self._failed
        run = run + 1 if index == last + 1 else 1
        self._failed = cover, index, run
        if run >= cover:
            o = self.config.order
            whose = "the stream's" if o.world_size == 1 else \
                f"rank {o.rank}'s (of world_size={o.world_size}) share of an epoch:"
            raise PicPacError(f"{self.path}: skip_errors=True, but every one of {whose} {self.size()} "
                              f"samples failed, so it cannot make a batch; the last: {exc}") from exc

    def _damaged(self, damaged: tuple[str, ...]) -> None:
        """Count the samples of a batch whose images libjpeg warned about (served as it decoded them)."""
        self.stats["damaged"] += len(damaged)
        room = 100 - len(self.stats["damaged_records"])
        self.stats["damaged_records"] += damaged[:max(0, room)]

    def _assemble(self, images: Any, targets: tuple, dense: tuple, positions: Any, pad: int,
                  made: tuple | None = None) -> Batch:
        """A batch from its images (a list of arrays, or one array already stacked: a torch tensor from the device
        stage) and per-sample targets (or the task's batch arrays ``made`` by the job)."""
        start = time.perf_counter()
        try:
            return self._assemble_batch(images, targets, dense, positions, pad, made)
        finally:
            if self.profile is not None:
                self.profile.stages["batch"] += time.perf_counter() - start

    def _assemble_batch(self, images: Any, targets: tuple, dense: tuple, positions: Any, pad: int,
                        made: tuple | None) -> Batch:
        if isinstance(images, list):
            shapes = {image.shape for image in images}
            if len(shapes) > 1:
                raise PicPacValueError(f"{self._readers[0].path}: images of different sizes {sorted(shapes)} in one "
                                       f"batch; set {SHAPE_KEYS} to make them equal")
            images = aligned.stack(images)
        labels = self.pool.labels[positions].astype(np.float32)
        records = self.pool.records[positions]
        # v2's mask facet keeps the dtype its rasterize step (or mask image) gave it
        masks = np.result_type(*targets) if self.config.output.task == "segment" and made is None else None
        targets = self.processor.targets(list(targets), labels, records, list(dense), made)
        batch: Batch
        if self.config.output.v2:
            batch, arrays, count = self._v2_batch(images, targets, records, labels, pad, masks)
        else:
            batch, arrays, count = (images, *targets, int(pad)), (images, *targets), len(images)
        if self.stats["batches"] < self.config.output.dump:
            # the device stage's tensors read back to the host (duck-typed: the stream layer imports no torch)
            host = tuple(a.cpu().numpy() if hasattr(a, "cpu") else a for a in arrays)
            _dump(self.stats["batches"], host, self.processor)
        self.stats["samples"] += count
        self.stats["batches"] += 1
        return batch

    def _v2_batch(self, images: Any, targets: tuple, records: np.ndarray, labels: np.ndarray,
                  pad: int, masks: np.dtype | None = None) -> tuple[list, tuple, int]:
        """PicPac v2's batch, ``[Meta(ids, labels, raw), images, *facets]``, the arrays ``dump`` draws and its
        samples: a final batch is cut to them (v2 pads none). The meta holds the records as ids, the labels as
        float32 and each raw field's list of bytes; the facets are the task's arrays after the label (masks, of the
        samples' mask dtype ``masks``; boxes and counts) and the dense targets."""
        n = len(images) - pad
        raws = len(self.config.decode.raw)
        facets, raw = (targets[:len(targets) - raws], targets[len(targets) - raws:]) if raws else (targets, ())
        task = self.config.output.task
        if task == "classify":
            facets = facets[1:]  # the labels: v2 gives them in the meta
        elif task == "segment" and not self.config.output.onehot:  # v2's label facet: the rasterizer's dtype
            facets = (facets[0].astype(masks or self.processor.rasterize.dtype), *facets[1:])
        meta = Meta(records[:n].astype(np.int32), labels[:n], [list(r[:n]) for r in raw])
        return [meta, images[:n], *(f[:n] for f in facets)], (images, *facets), n

    def order(self) -> tuple[Keys, int | None]:
        """The keys of the next iteration: the endless stream from its position, or the next pass (this
        rank's share of it)."""
        return self.position.order()

    def size(self) -> int:
        """Samples per pass on this rank (its share of the pool)."""
        return self.position.share()

    def categories(self) -> int:
        """ImageStream.categories."""
        labels = np.concatenate([self._readers[0].labels, self.pool.labels])
        bad = (labels < 0) | (labels != np.floor(labels)) | ~np.isfinite(labels)
        if bad.any():
            raise PicPacValueError(f"{self.path}: label {float(labels[bad][0])!r} is no class id (an integer >= 0), so the "
                                   "stream has no categories: its labels are regression targets")
        return int(labels.max()) + 1 if len(labels) else 0

    def state_dict(self) -> dict[str, Any]:
        return state_dict(self.position, self.config, self._readers)

    def load_state_dict(self, state: Any) -> None:
        load_state_dict(self.position, self.config, self._readers, state)

    @property
    def path(self) -> str:
        return self._readers[0].path if self._readers else "closed"

    @property
    def closed(self) -> bool:
        return not self._readers

    def close(self) -> None:
        self.stop_workers()
        for reader in self._readers:
            reader.close()
        self._readers = []


IMAGE_NAMES = ("image", "jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm")
"""Field names that hold images (WebDataset names a member by its type), suggested for image_field."""


def _check_field(reader: RecordReader, key: str, field: str | int) -> None:
    """PicPacValueError unless the database has ``field`` (a name, or PicPac's field number)."""
    fields = reader.fields
    if isinstance(field, str) and field in fields or not isinstance(field, str) and field < len(fields):
        return
    what = f"no field {field!r}" if isinstance(field, str) else f"{len(fields)} field(s), no field number {field}"
    hint = ""
    if key == "image_field":
        images = [name for name in fields if name.lower().rsplit(".", 1)[-1] in IMAGE_NAMES]
        hint = f"; did you mean image_field={images[0]!r}?" if images else \
            "; set image_field to the field of the images"
    raise PicPacValueError(f"{reader.path}: config key {key!r} is {field!r}, but the database has {what}; its fields: "
                           f"{fields}{hint}")


def _dump(index: int, arrays: tuple, processor: Any) -> None:
    """PicPac's ``dump``: the batch's images and image-shaped targets as PNGs, picpac_dump/{batch}_{array}_{i}.png."""
    os.makedirs("picpac_dump", exist_ok=True)
    for k, array in enumerate(arrays):
        if not isinstance(array, np.ndarray) or array.ndim != 4:
            continue
        hwc = array.transpose(0, 2, 3, 1) if processor.channel_first else array
        for i, image in enumerate(hwc):
            if image.shape[2] not in (1, 3, 4):
                image = image[:, :, :1]
            if k == 0 and processor.rgb and image.shape[2] == 3:
                image = image[:, :, ::-1]
            cv2.imwrite(os.path.join("picpac_dump", f"{index}_{k}_{i}.png"),
                        np.clip(image, 0, 255).astype(np.uint8))


def _keep_alive(stream: ImageStream, batches: Batches) -> Batches:
    """``batches``, holding ``stream`` alive while a for loop runs over a temporary stream."""
    try:
        yield from batches
    finally:
        batches.close()


class ImageStream:
    """Stream ``(images, labels, pad)`` batches from a picpac database (keys in docs/stream.md).

    ``ImageStream(path, **keys)``, ``ImageStream(path, config)`` with a :class:`StreamConfig` (keys beside it
    change it), or PicPac's ``ImageStream({"db": path, ...})``. With
    ``loop=True`` (default) iteration is endless and continues where the last loop stopped;
    with ``loop=False`` each ``iter()`` is one pass over the samples. Decoding and transforms run
    on ``workers`` threads, or processes with ``backend='process'`` (images then arrive as views
    into shared memory, valid until two more batches are asked for), at most ``preload`` samples
    ahead; the batches are the same for any worker count and either backend. Breaking out of a
    loop, ``close()`` or deleting the stream stops the workers. A database of fixed-shape arrays is
    streamed a whole batch at a time when every step allows it (``stats()["path"]``; docs/arrays.md).
    With ``rank``/``world_size`` each process reads its share of every epoch; ``state_dict()`` /
    ``load_state_dict()`` resume exactly (elastically with another world size) and ``set_epoch(e)``
    goes to pass ``e`` (docs/stream.md, "Ranks and resume"). ``path`` may name a sharded dataset: a list of
    files, a glob or a ``.shards`` index file, streamed as the file that merges them (docs/stream.md,
    "Sharded datasets").
    """

    def __init__(self, path: str | os.PathLike | list | Mapping[str, Any] | None = None,
                 config: StreamConfig | None = None, **keys: Any):
        if isinstance(path, Mapping):
            keys = with_v2_defaults({**path, **keys})  # (docs/stream.md, "PicPac's configs")
            path = None
        elif keys.get("v2"):
            keys = with_v2_defaults(keys)
        if path is None:
            path = keys.pop("db", None)
        if path is None:
            raise PicPacTypeError("ImageStream needs a database: ImageStream('db.picpac', ...) or {'db': ...}")
        if config is not None and not isinstance(config, StreamConfig):
            raise PicPacTypeError(f"ImageStream(path, config): config must be a StreamConfig (StreamConfig.from_dict"
                                  f"(keys)), got {type(config).__name__}; or give the keys: ImageStream(path, **keys)")
        if config is None:
            config = StreamConfig.from_dict(keys)
        elif keys:
            config = config.replace(**keys)
        self._current: Batches | None = None  # the batches next() draws from
        self._active: weakref.ref[Batches] | None = None  # the newest batches, to stop them when a new loop starts
        self._pipeline = _Pipeline(path, config)
        self.config = self._pipeline.config  # workers='auto' resolved

    # -- the public protocol -----------------------------------------------------------------------
    def __iter__(self) -> Batches:
        """Endless batches from where the last loop stopped (loop=True), or one pass (loop=False); ``close()`` on
        them stops their workers."""
        return _keep_alive(self, self._start())

    def _start(self) -> Batches:
        self._check_open()
        self._stop()  # one engine at a time: a new loop replaces an abandoned one
        batches = self._pipeline.batches(*self._pipeline.order())
        self._active = weakref.ref(batches)
        return batches

    def __next__(self) -> Batch:
        """The next batch; at the end of a pass (loop=False) StopIteration, and the next call starts another."""
        if self._current is None:
            self._current = self._start()
        try:
            return next(self._current)
        except StopIteration:
            self._current = None
            raise

    next = __next__  # PicPac's stream.next()

    def __len__(self) -> int:
        """Batches per pass."""
        return math.ceil(self.size() / self.config.order.batch)

    def size(self) -> int:
        """Samples per pass: the records after the split, plus the mixin; with ``world_size`` > 1 this
        rank's share of them (``share_pad``)."""
        return self._pipeline.size()

    def categories(self) -> int:
        """PicPac's count of classes: the largest label of the database and of the pool (its mixin as relabelled)
        plus one. PicPacValueError when a label is no class id (regression labels)."""
        self._check_open()
        return self._pipeline.categories()

    def reset(self) -> None:
        """Restart from the first batch of the first pass."""
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of epoch (pass) ``epoch``: the next batch is its first, its order and augmentation
        as in an uninterrupted run's (torch's ``DistributedSampler.set_epoch``). A loop under way ends."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise PicPacValueError(f"set_epoch takes an int >= 0, got {epoch!r}")
        self._stop()
        self._pipeline.position.set_epoch(int(epoch))

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is, as plain JSON-serialisable data: the epoch, the samples of it consumed (by all
        ranks together), the config keys that fix the order, and the database's fingerprint. Counts the
        batches delivered, not those made ahead. ``load_state_dict`` continues from it (docs/stream.md,
        "Ranks and resume")."""
        self._check_open()
        return self._pipeline.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state_dict()``'s state, in O(1): the next batches are those an uninterrupted run
        gives after it (with another ``world_size``, the rest of the epoch is split among these ranks).
        A loop under way ends. A state of another database or an incompatible config: PicPacValueError
        naming what differs."""
        self._check_open()
        self._stop()
        self._pipeline.load_state_dict(state)

    def _check_open(self) -> None:
        if self._pipeline.closed:
            raise PicPacError("the ImageStream is closed")

    def stats(self) -> dict[str, Any]:
        """Counts so far: samples and batches delivered, samples skipped (skip_errors=True) and why, samples whose
        JPEG libjpeg warned about (damaged scan data: served as decoded, the damaged part filled in) and what it said."""
        stats = self._pipeline.stats
        profile = self._pipeline.profile
        job = self._pipeline.job
        counts = job.path_counts() if isinstance(job, (FusedSampleJob, DeviceJob)) else {}
        return {**stats, "skipped_records": list(stats["skipped_records"]),
                "damaged_records": list(stats["damaged_records"]), **counts,
                **(profile.snapshot() if profile is not None else {})}

    def close(self) -> None:
        """Stop the workers and close the database(s). Closing twice is harmless."""
        self._stop()
        self._pipeline.close()

    def _stop(self) -> None:
        for batches in (self._current, self._active() if self._active is not None else None):
            if batches is not None:
                batches.close()
        self._current = self._active = None

    def __enter__(self) -> ImageStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_pipeline", None) is not None:
            self.close()

    def __repr__(self) -> str:
        return f"ImageStream({self._pipeline.path!r}, size={self.size()}, batch={self.config.order.batch})"
