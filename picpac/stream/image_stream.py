"""ImageStream: PicPac-compatible batches of decoded, transformed images from a picpac file."""
from __future__ import annotations

import itertools
import math
import os
import time
import warnings
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import cv2
import numpy as np

from ..engine import aligned
from ..engine.processes import OK, ProcessPool, pack_recipe
from ..engine.shared_batches import SharedBatches
from ..engine.threads import ordered_map
from ..errors import PicPacError, PicPacTypeError, PicPacValueError
from ..file.reader import Reader
from ..file.remote import REMOTE_TIMEOUT, RemoteOptions
from ..file.shards import open_database
from ..sampling import Sampler, assign_folds, select
from .batch_path import BatchLoader, BatchProcessWork, batch_plan
from .config import parse
from .position import Keys, Position, load_state_dict, state_dict
from .sample_path import SampleLoader, SampleProcessWork, prefetching

Batch = tuple  # (images, labels | masks, pad) or (images, boxes | points, counts, pad)
SHAPE_KEYS = "resize_width/resize_height, crop_width/crop_height, or batch=1"
KEEP = 2
"""backend='process': a batch's images are overwritten only once KEEP more batches were asked for."""


class _Pipeline:
    """Everything a stream's batches need: the pool, the sampler, the per-sample work, the counters.

    Batches reference this object, not the ImageStream, so dropping the stream stops them.
    """

    def __init__(self, path: Any, config: dict[str, Any]):
        self._readers: list[Reader] = []  # a ShardedReader stands for a dataset of several files
        self._workers: ProcessPool | None = None  # backend='process': kept from one pass to the next
        self._batcher: SharedBatches | None = None
        self._output_layout: tuple | None = None
        c = self.config = config
        self.threads = c["workers"] or os.cpu_count() or 1
        self.preload = c["preload"] or max(16 * self.threads, c["batch"])
        # samples per hand-off to a worker: fewer hand-offs, while every thread still has work queued
        self.chunk = max(1, min(8, self.preload // (4 * self.threads)))
        self.remote = RemoteOptions(cache_dir=c["cache_dir"], cache_limit=c["cache_limit"],
                                    block_size=c["remote_block_size"], retries=c["remote_retries"],
                                    storage_options=c["storage_options"] or {},
                                    timeout=c["timeout"] or REMOTE_TIMEOUT)
        self._readers.append(open_database(path, remote=self.remote))
        try:
            self._build_pool()
            # a worker reading a remote file is also given the time one read may take with its retries, so
            # that a server that stalls is reported by its URL, not as a silent worker
            remote = any(reader.downloads for reader in self._readers)
            self.timeout = c["timeout"] and c["timeout"] + (self.remote.deadline() if remote else 0.0)
            self._check_labels()
            self._check_fields()
            self._sampler = Sampler(self._labels, c["seed"], shuffle=c["shuffle"], reshuffle=c["reshuffle"],
                                    oversample=c["oversample"], chunk=c["shuffle_chunk"],
                                    window=c["shuffle_window"])
            self.position = Position(self._sampler, c, self._readers[0].path)
            self.loader = SampleLoader(self._readers, c)
            # records are read ahead from the network always, from a local file in chunked order (larger than memory)
            chunked = c["shuffle"] and c["shuffle_chunk"] > 0
            self._fetchers = [r.prefetch if r.downloads or chunked else None for r in self._readers]
            self.processor = self.loader.processor
            self._check_channels()
            self.plan, self.path_reason = batch_plan(self._readers, c, self.processor)
            if c["vectorize"] and self.plan is None:
                raise PicPacValueError(f"{path}: vectorize=True, but the batch path cannot run: {self.path_reason}")
            self.batch_loader = None if self.plan is None else \
                BatchLoader(self._readers, c, self._sources, self._records)
            # pickled once, now: an unpicklable transform fails here, not in a worker
            work = SampleProcessWork(self.loader) if self.plan is None else BatchProcessWork(self.batch_loader)
            self._recipe = pack_recipe(work.build, c["start_method"]) if c["backend"] == "process" else None
        except BaseException:
            self.close()
            raise
        self._failed = (0, -2, 0)  # (keys that cover the pool, the last failed key, failures in a row)
        self.stats = {"samples": 0, "batches": 0, "skipped": 0, "skipped_records": [],
                      "path": "sample" if self.plan is None else "batch", "path_reason": self.path_reason}

    # -- the pool of samples: the chosen split of the database, plus the mixin ------------------
    def _build_pool(self) -> None:
        c = self.config
        main = self._readers[0]
        folds = assign_folds(main.labels, main.groups, c["split"], c["seed"], shuffle=c["shuffle"],
                             stratify=c["stratify"])
        records = select(folds, c["split"], c["split_fold"], c["split_negate"])
        sources = np.zeros(len(records), np.int64)
        labels = main.labels[records]
        if c["mixin"] is not None:
            mixin = open_database(c["mixin"], remote=self.remote)
            self._readers.append(mixin)
            count = min(len(mixin), c["mixin_max"]) if c["mixin_max"] else len(mixin)
            extra = np.arange(count)
            if c["mixin_randomize"] and count < len(mixin):  # PicPac: shuffle the mixin, then truncate
                extra = np.sort(np.random.default_rng([c["seed"], 1]).permutation(len(mixin))[:count])
            mixed = mixin.labels[extra]
            mixed = np.full(count, c["mixin_group_reset"]) if c["mixin_group_reset"] >= 0 else mixed + c["mixin_group_delta"]
            records = np.concatenate([records, extra])
            sources = np.concatenate([sources, np.ones(count, np.int64)])
            labels = np.concatenate([labels, mixed])
        if not len(records):
            raise PicPacValueError(f"{main.path}: the stream has no samples (split={c['split']}, "
                                   f"split_fold={c['split_fold']}, split_negate={c['split_negate']})")
        self._records, self._sources, self._labels = records, sources, labels

    # -- what the config and the index tell before any record is read ------------------------------
    def _check_labels(self) -> None:
        """Classification labels fit ``onehot`` and ``label_dtype``: the first that does not is named."""
        c = self.config
        if c["task"] != "classify" or not (c["onehot"] or c["label_dtype"] != "float32"):
            return
        labels = self._labels
        bad = labels != np.floor(labels)
        need = "an integral class id"
        if c["onehot"]:
            bad |= (labels < 0) | (labels >= c["onehot"])
            need = f"a class id in [0, onehot={c['onehot']})"
        elif c["label_dtype"] != "float32":
            info = np.iinfo(c["label_dtype"])
            bad |= (labels < info.min) | (labels > info.max)
            need = f"an integral class id for label_dtype={c['label_dtype']!r}"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            reader = self._readers[int(self._sources[i])]
            raise PicPacValueError(f"{reader.path}: record {int(self._records[i])} has label {self._labels[i]:g}, "
                                   f"not {need} ({int(bad.sum())} of the stream's {len(labels)} labels are not)")

    def _check_fields(self) -> None:
        """The fields the config reads exist in the database (and the mixin): ``image_field``, and the
        annotation's field; a missing one is named with the fields the database has."""
        c = self.config
        for reader in self._readers:
            _check_field(reader, "image_field", c["image_field"])
            if c["annotation_field"] is not None and c["annotate"] != "auto":
                _check_field(reader, "annotation_field", c["annotation_field"])
        reader = self._readers[0]
        needed = {"json": ("annotation",), "image": ("mask", "annotation"),
                  "any": ("annotation", "mask")}.get(c["annotate"])
        if c["annotation_field"] is None and needed and not any(name in reader.fields for name in needed):
            raise PicPacValueError(f"{reader.path}: task={c['task']!r} with annotate={c['annotate']!r} reads the "
                                   f"{' or '.join(map(repr, needed))} field, but no record has one; the database's "
                                   f"fields: {reader.fields} (picpac import writes annotations, annotation_field "
                                   "names another field; see `picpac docs augment`)")

    def _check_channels(self) -> None:
        """With channels=-1 (as stored), mean/std fit the channels of the database's images, from its
        declared arrays or its first sample."""
        c = self.config
        if c["channels"] != -1 or not any(v is not None and len(v) > 1 for v in (c["mean"], c["std"])):
            return
        reader = self._readers[int(self._sources[0])]
        record = int(self._records[0])
        field = c["image_field"]
        spec = reader.arrays.get(field) if isinstance(field, str) else None
        if spec is not None:
            channels = spec.shape[2] if len(spec.shape) == 3 else 1
        else:
            sample = self.processor.decode(reader[record].fields, 0.0, record, reader.path, reader.arrays)
            image = sample.image
            channels = image.shape[2] if image.ndim == 3 else 1
        for name in ("mean", "std"):
            if c[name] is not None and len(c[name]) not in (1, channels):
                raise PicPacValueError(f"{reader.path}: config key {name!r} has {len(c[name])} values, but with "
                                       f"channels=-1 the images have {channels} channel(s) (record {record}): "
                                       f"give 1 or {channels}, or set channels=1 or 3")

    # -- one sample (on a worker thread) ---------------------------------------------------------
    def _load(self, key: tuple[int, int]) -> tuple[np.ndarray, Any, tuple]:
        position, epoch = key
        return self.loader(epoch, int(self._sources[position]), int(self._records[position]),
                           float(self._labels[position]))

    # -- batches ---------------------------------------------------------------------------------
    def batches(self, keys: Keys, real: int | None) -> Iterator[Batch]:
        """Batches of ``keys``; in a finite pass the keys after the first ``real`` are padding."""
        self._failed = (keys.cover, -2, 0)
        if self.plan is not None:
            return self._finishing(self._vector_batches(keys, real))
        if self.config["backend"] == "process":
            return self._finishing(self._process_batches(keys, real))
        return self._finishing(self._thread_batches(keys, real))

    def _finishing(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        """``batches``, and the end of the pass noted when they end (loop=False)."""
        yield from batches
        self.position.finish()

    # -- the batch path: array records gathered, transformed and converted a whole batch at a time ------
    def _vector_batches(self, keys: Keys, real: int | None) -> Iterator[Batch]:
        """Batches of whole-batch jobs, one per ``batch`` keys; samples skipped (skip_errors) are made up
        from the next job's, so every batch but a pass's last is full, as on the per-sample path."""
        batch = self.config["batch"]
        jobs = ((i * batch, positions, epochs) for i, (positions, epochs) in enumerate(keys.chunks(batch)))
        # jobs in flight: one running and one waiting per worker, so none idles while the consumer waits
        window = max(2 * self.threads, -(-self.preload // batch))
        process = self.config["backend"] == "process"
        parts = self._process_parts(jobs, window) if process else self._thread_parts(jobs, window)
        held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # samples made but not delivered yet
        done = 0  # keys behind the batches delivered
        views: deque[weakref.ref | None] = deque(maxlen=KEEP)  # process: the last batches' images, if shared
        try:
            for images, positions, index, errors, shared in parts:
                for at, exc in errors:
                    self._skip(exc, at)
                if not held and len(positions) == batch:  # the usual case: a job's batch as it came
                    if shared and self.config["copy"]:
                        images, shared = aligned.copy(images), False
                    out = self._deliver(images, positions, index, real, done)
                    done = int(index[-1]) + 1
                    views.append(weakref.ref(out[0]) if shared else None)
                    del images
                    yield out
                    del out
                    if len(views) == KEEP and views[0] is not None and views[0]() is not None:
                        self._warn_kept()
                        views[0] = None
                    continue
                held.append((images.copy() if shared else images, positions, index))  # shared: reused soon
                while sum(len(h[1]) for h in held) >= batch:
                    images, kept, index = (np.concatenate([h[i] for h in held]) for i in range(3))  # copies
                    held = [(images[batch:], kept[batch:], index[batch:])] if len(kept) > batch else []
                    out = self._deliver(images[:batch], kept[:batch], index[:batch], real, done)
                    done = int(index[batch - 1]) + 1
                    yield out
            if held and sum(len(h[1]) for h in held):
                images, kept, index = (np.concatenate([h[i] for h in held]) for i in range(3))
                yield self._deliver(images, kept, index, real, done)
        finally:
            parts.close()

    def _thread_parts(self, jobs: Iterator[tuple], window: int) -> Iterator[tuple]:
        work = ordered_map(self.batch_loader, jobs, self.threads, window, name="picpac-stream", timeout=self.timeout)
        try:
            for _, outcome in work:
                yield (*outcome.get(), False)
        finally:
            work.close()

    def _process_parts(self, jobs: Iterator[tuple], window: int) -> Iterator[tuple]:
        """Jobs on the worker processes, each writing its batch into its slot of a shared ring.

        Job k goes to slot k % (window + KEEP); it is sent once job k - window was handed on, so its
        slot's last batch was delivered KEEP batches ago (the process backend's promise).
        """
        c = self.config
        if self._workers is None:
            self._workers = ProcessPool(self._recipe, self.threads, c["start_method"], name="picpac-stream",
                                        timeout=self.timeout)
        pool, slots = self._workers, window + KEEP
        shape, dtype = self._output
        arena = pool.arena((c["batch"], *shape), dtype, slots)
        pending: deque[tuple[int, int]] = deque()
        sent = itertools.count()

        def send() -> None:
            for job in itertools.islice(jobs, 1):
                slot = next(sent) % slots
                pending.append((pool.submit(job, slot), slot))

        try:
            for _ in range(window):
                send()
            while pending:
                seq, slot = pending.popleft()
                reply = pool.result(seq)
                if reply[0] != OK:
                    raise reply[1]
                array, (positions, index, errors) = reply[1], reply[2]
                yield (arena[slot] if array is None else array), positions, index, errors, array is None
                send()
        except BaseException:  # break, close, an error, Ctrl-C: stop the workers and free the memory
            self.stop_workers()
            raise

    @property
    def _output(self) -> tuple[tuple[int, ...], np.dtype]:
        if self._output_layout is None:
            self._output_layout = self.batch_loader.output()
        return self._output_layout

    def _deliver(self, images: np.ndarray, positions: np.ndarray, index: np.ndarray, real: int | None,
                 done: int) -> tuple:
        """A batch of the batch path: its targets, the counters, and the stream position."""
        padding = int((index >= real).sum()) if real is not None else 0
        out = self._assemble(images, (None,) * len(positions), ((),) * len(positions), positions, padding)
        self._advance(int(index[-1]) + 1 - done)
        return out

    def _thread_batches(self, keys: Keys, real: int | None) -> Iterator[Batch]:
        batch = self.config["batch"]
        images: list[tuple[np.ndarray, Any, tuple]] = []  # (image, target, dense targets) per sample
        positions: list[int] = []
        taken = padding = 0
        keys = prefetching(keys, self._fetchers, self._sources, self._records, self.preload)
        work = ordered_map(self._load, keys, self.threads, self.preload, chunk=self.chunk,
                           name="picpac-stream", timeout=self.timeout)
        profile = self.loader.profile
        mark = time.perf_counter()
        try:
            for index, ((position, _), outcome) in enumerate(work):
                if profile is not None:
                    profile.stages["wait"] += time.perf_counter() - mark
                taken += 1
                try:
                    images.append(outcome.get())
                except PicPacError as exc:
                    if not self.config["skip_errors"]:
                        raise
                    self._skip(exc, index)
                    continue
                positions.append(position)
                padding += real is not None and index >= real
                if len(images) == batch:
                    out = self._assemble(*zip(*images), positions, padding)
                    self._advance(taken)
                    images, positions, taken, padding = [], [], 0, 0
                    yield out
                mark = time.perf_counter()
            if images:
                out = self._assemble(*zip(*images), positions, padding)
                self._advance(taken)
                yield out
        finally:
            work.close()

    def _process_batches(self, keys: Keys, real: int | None) -> Iterator[Batch]:
        """The same batches, from worker processes writing the images into shared memory."""
        c = self.config
        if self._workers is None:
            self._workers = ProcessPool(self._recipe, self.threads, c["start_method"], name="picpac-stream",
                                        timeout=self.timeout)
            self._batcher = SharedBatches(self._workers, c["batch"], self.preload, keep=KEEP)
        tasks = ((index, position, epoch, int(self._sources[position]), int(self._records[position]),
                  float(self._labels[position])) for index, (position, epoch) in
                 enumerate(prefetching(keys, self._fetchers, self._sources, self._records, self.preload)))
        batches = self._batcher(tasks, self._on_error)
        views: deque[weakref.ref | None] = deque(maxlen=KEEP)  # the last batches' images, while shared
        try:
            for shared in batches:
                positions = [task[1] for task in shared.items]
                padding = sum(real is not None and task[0] >= real for task in shared.items)
                images = shared.arrays
                shared_view = isinstance(images, np.ndarray)
                if c["copy"] and shared_view:
                    images, shared_view = aligned.copy(images), False
                out = self._assemble(images, *zip(*shared.extras), positions, padding)
                self._advance(shared.taken)
                views.append(weakref.ref(out[0]) if shared_view else None)
                del images, shared
                yield out
                del out
                if len(views) == KEEP and views[0] is not None and views[0]() is not None:
                    self._warn_kept()
                    views[0] = None
        except BaseException:  # break, close, an error, Ctrl-C: stop the workers and free the memory
            self.stop_workers()
            raise
        finally:
            batches.close()

    def _warn_kept(self) -> None:
        warnings.warn("picpac: a batch from backend='process' is still referenced while its shared memory is "
                      f"reused, so its images change under you: use a batch's images before asking for {KEEP} "
                      "more batches, or leave copy=True (the default) to keep batches", RuntimeWarning, stacklevel=4)

    def _on_error(self, task: tuple, exc: BaseException) -> None:
        if not (self.config["skip_errors"] and isinstance(exc, PicPacError)):
            raise exc
        self._skip(exc, task[0])

    def stop_workers(self) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = self._batcher = None

    def _skip(self, exc: PicPacError, index: int) -> None:
        """Count the sample at key ``index`` as skipped; once as many keys in a row as cover the pool
        failed, every sample did, and the stream would never make a batch: raise."""
        self.stats["skipped"] += 1
        if len(self.stats["skipped_records"]) < 100:
            self.stats["skipped_records"].append(str(exc))
        cover, last, run = self._failed
        run = run + 1 if index == last + 1 else 1
        self._failed = cover, index, run
        if run >= cover:
            c = self.config
            whose = "the stream's" if c["world_size"] == 1 else \
                f"rank {c['rank']}'s (of world_size={c['world_size']}) share of an epoch:"
            raise PicPacError(f"{self.path}: skip_errors=True, but every one of {whose} {self.size()} "
                              f"samples failed, so it cannot make a batch; the last: {exc}") from exc

    def _advance(self, taken: int) -> None:
        self.position.advance(taken)

    def _assemble(self, images: Any, targets: tuple, dense: tuple, positions: list[int], pad: int) -> tuple:
        """A batch from its images (a list of arrays, or one array already stacked) and per-sample targets."""
        start = time.perf_counter()
        try:
            return self._assemble_batch(images, targets, dense, positions, pad)
        finally:
            if self.loader.profile is not None:
                self.loader.profile.stages["batch"] += time.perf_counter() - start

    def _assemble_batch(self, images: Any, targets: tuple, dense: tuple, positions: list[int], pad: int) -> tuple:
        if not isinstance(images, np.ndarray):
            shapes = {image.shape for image in images}
            if len(shapes) > 1:
                raise PicPacValueError(f"{self._readers[0].path}: images of different sizes {sorted(shapes)} in one "
                                       f"batch; set {SHAPE_KEYS} to make them equal")
            images = aligned.stack(images)
        labels = self._labels[positions].astype(np.float32)
        records = self._records[positions]
        targets = self.processor.targets(list(targets), labels, records, list(dense))
        if self.stats["batches"] < self.config["dump"]:
            _dump(self.stats["batches"], (images, *targets), self.processor)
        self.stats["samples"] += len(images)
        self.stats["batches"] += 1
        return (images, *targets, int(pad))

    def order(self) -> tuple[Keys, int | None]:
        """The keys of the next iteration: the endless stream from its position, or the next pass (this
        rank's share of it)."""
        return self.position.order()

    def size(self) -> int:
        """Samples per pass on this rank (its share of the pool)."""
        return self.position.share()

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


def _check_field(reader: Reader, key: str, field: str | int) -> None:
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


def _keep_alive(stream: ImageStream, batches: Iterator[Batch]) -> Iterator[Batch]:
    """``batches``, holding ``stream`` alive while a for loop runs over a temporary stream."""
    try:
        yield from batches
    finally:
        batches.close()


class ImageStream:
    """Stream ``(images, labels, pad)`` batches from a picpac database (keys in docs/stream.md).

    ``ImageStream(path, **config)`` or PicPac's ``ImageStream({"db": path, ...})``. With
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

    def __init__(self, path: str | os.PathLike | list | Mapping[str, Any] | None = None, **config: Any):
        if isinstance(path, Mapping):
            config = {**path, **config}
            path = None
        if path is None:
            path = config.pop("db", None)
        if path is None:
            raise PicPacTypeError("ImageStream needs a database: ImageStream('db.picpac', ...) or {'db': ...}")
        self._current: Iterator[Batch] | None = None  # the batches next() draws from
        self._active: weakref.ref | None = None  # the newest batches, to stop them when a new loop starts
        self._pipeline = _Pipeline(path, parse(config))
        self.config = self._pipeline.config

    # -- the public protocol -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        """Endless batches from where the last loop stopped (loop=True), or one pass (loop=False)."""
        return _keep_alive(self, self._start())

    def _start(self) -> Iterator[Batch]:
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
        return math.ceil(self.size() / self.config["batch"])

    def size(self) -> int:
        """Samples per pass: the records after the split, plus the mixin; with ``world_size`` > 1 this
        rank's share of them (``shard_pad``)."""
        return self._pipeline.size()

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
        """Counts so far: samples and batches delivered, samples skipped (skip_errors=True) and why."""
        stats = self._pipeline.stats
        profile = self._pipeline.loader.profile
        return {**stats, "skipped_records": list(stats["skipped_records"]),
                **(profile.snapshot() if profile is not None else {})}

    def close(self) -> None:
        """Stop the workers and close the database(s). Closing twice is harmless."""
        self._stop()
        self._pipeline.close()

    def _stop(self) -> None:
        for batches in (self._current, self._active and self._active()):
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
        return f"ImageStream({self._pipeline.path!r}, size={self.size()}, batch={self.config['batch']})"
