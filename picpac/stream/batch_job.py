"""The batch job: a whole batch of fixed-shape array records read, checked, transformed and converted at once
(``picpac.batched``), when the database holds arrays and every step has a batch version."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..engine.executor import Delivery
from ..errors import CorruptRecordError, PicPacError, SampleError
from ..file.reader import IndexedReader, Reader
from ..image import batched
from .config import StreamConfig
from .job import Part, Pool, capacity
from .position import Keys
from .processor import Processor, array_size_error


def batch_plan(readers: list[IndexedReader], config: StreamConfig, processor: Processor
               ) -> tuple[batched.Plan | None, str | None]:
    """The batch job's plan for a stream, or None and why the per-sample job runs instead."""
    if config.parallelism.vectorize is False:
        return None, "vectorize=False"
    name = config.decode.image_field
    if not isinstance(name, str):
        return None, f"image_field={name} names a field by number (the per-sample path reads it)"
    specs = [reader.arrays.get(name) for reader in readers]
    if specs[0] is None:
        return None, f"the database's {name!r} field is not declared as an array (metadata 'arrays')"
    if not all(reader.mapped for reader in readers):
        return None, "the database (or mixin) is sharded or remote (the batch path reads arrays from one mapped file)"
    if any(spec != specs[0] for spec in specs[1:]):
        return None, f"the mixin's {name!r} field is not the same array as the database's ({specs[0]})"
    task = config.output.task
    if config.decode.annotate is not None or task != "classify":
        return None, f"task={task!r} (annotations go through the per-sample path)"
    if config.decode.raw:
        return None, "raw names fields by number (the per-sample path reads them)"
    plan = batched.plan(processor.fixed + processor.random, specs[0].shape)
    return (None, plan) if isinstance(plan, str) else (plan, None)


class BatchJob:
    """The batch job: one unit is a chunk of ``batch`` keys, ``(first key index, positions, epochs)``, made into
    one batch of array records at once: ``(images, (positions, key indices, errors))``.

    The records are gathered (one np.take, or one gather), checked, transformed by the plan with counter-based
    draws, and converted to the output layout. Picklable (readers reopen by path), like sample_job.SampleJob.
    """

    group = 1
    chunk = 1

    def __init__(self, readers: list[Reader], config: StreamConfig, pool: Pool, processor: Processor | None = None,
                 plan: batched.Plan | None = None):
        self.readers, self.config = readers, config
        self.sources, self.records = pool.sources, pool.records
        self.processor = processor or Processor.of(config)
        self.plan = plan or batch_plan(readers, config, self.processor)[0]
        self.field = config.decode.image_field
        self.spec = readers[0].arrays[self.field]
        self.batch, self.seed, self.skip_errors = config.order.batch, config.order.seed, config.parallelism.skip_errors
        workers, preload = capacity(config)
        # jobs in flight: one running and one waiting per worker, so none idles while the consumer waits
        self.window = max(2 * workers, -(-preload // self.batch))
        self._layout: tuple[tuple[int, ...], np.dtype] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"readers": self.readers, "config": self.config, "sources": self.sources, "records": self.records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["readers"], state["config"], Pool(state["records"], state["sources"], np.empty(0), []))

    def build(self) -> BatchJob:
        """A worker process's job: itself, as it arrived pickled (``processes.pack_recipe``)."""
        return self

    def layout(self) -> tuple[tuple[int, ...], np.dtype]:
        """The shape and dtype of a full batch's images (a dry run on one blank sample)."""
        if self._layout is None:
            blank = np.zeros((1, *self.spec.shape), self.spec.dtype)
            p = self.processor
            out = batched.convert(self.plan(blank, batched.draws(0, 0, 0, [0], self.plan.draws)), p.channel_first,
                                  p.dtype, p.mean, p.std)
            self._layout = (self.batch, *out.shape[1:]), out.dtype
        return self._layout

    def units(self, keys: Keys, pool: Pool) -> Iterator[tuple]:
        return ((i * self.batch, positions, epochs) for i, (positions, epochs) in enumerate(keys.chunks(self.batch)))

    def failed(self, unit: tuple, exc: BaseException) -> None:
        """A whole job that raised raises (its samples' own failures come back as its ``errors``)."""

    def __call__(self, unit: tuple[int, np.ndarray, np.ndarray]) -> tuple[np.ndarray, tuple]:
        """``errors`` are the samples that failed as (key index, error) pairs, in key order (skip_errors=True);
        without skip_errors the first failure is raised instead."""
        first, positions, epochs = unit
        spec = self.spec
        sources, records = self.sources[positions], self.records[positions]
        n = len(positions)
        data = np.empty((n, spec.nbytes), np.uint8) if sources.any() else None
        errors: dict[int, PicPacError] = {}
        for source in np.unique(sources).tolist():
            mine = np.flatnonzero(sources == source) if data is not None else np.arange(n)
            part, failed = _array_bytes(self.readers[source], records[mine], spec, self.field)
            errors.update((int(mine[i]), exc) for i, exc in failed.items())
            if data is None:
                data = part
            else:
                data[mine] = part
        if errors:
            if not self.skip_errors:
                raise errors[min(errors)]
            good = np.setdiff1d(np.arange(n), list(errors))
            data, positions, epochs, sources, records = (a[good] for a in (data, positions, epochs, sources, records))
        else:
            good = np.arange(n)
        images = data.view(spec.dtype).reshape(len(data), *spec.shape)
        images = self.plan(images, batched.draws(self.seed, epochs, sources, records, self.plan.draws))
        p = self.processor
        images = batched.convert(images, p.channel_first, p.dtype, p.mean, p.std)
        return images, (positions, first + good, [(first + i, errors[i]) for i in sorted(errors)])

    def collect(self, deliveries: Iterator[Delivery], real: int | None,
                skip: Callable[[BaseException, int], None]) -> Iterator[Part]:
        """Batches of the jobs' batches; samples skipped (skip_errors) are made up from the next job's, so every
        batch but a pass's last is full, as on the per-sample path."""
        batch = self.batch
        held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # samples made but not delivered yet
        done = 0  # keys behind the parts delivered

        def part(images: np.ndarray, positions: np.ndarray, index: np.ndarray, shared: bool = False) -> Part:
            nonlocal done
            taken, done = int(index[-1]) + 1 - done, int(index[-1]) + 1
            padding = int((index >= real).sum()) if real is not None else 0
            return Part(images, (None,) * len(positions), ((),) * len(positions), positions, padding, taken, shared)

        for delivery in deliveries:
            shared = isinstance(delivery.arrays, np.ndarray)
            images, (positions, index, errors) = delivery.arrays[0], delivery.extras[0]
            del delivery
            for at, exc in errors:
                skip(exc, at)
            if not held and len(positions) == batch:  # the usual case: a job's batch as it came
                yield part(images, positions, index, shared)
                continue
            held.append((images.copy() if shared else images, positions, index))  # shared: reused soon
            while sum(len(h[1]) for h in held) >= batch:
                images, kept, index = (np.concatenate([h[i] for h in held]) for i in range(3))  # copies
                held = [(images[batch:], kept[batch:], index[batch:])] if len(kept) > batch else []
                yield part(images[:batch], kept[:batch], index[:batch])
        if held and sum(len(h[1]) for h in held):
            images, kept, index = (np.concatenate([h[i] for h in held]) for i in range(3))
            yield part(images, kept, index)


def _array_bytes(reader: Reader, records: np.ndarray, spec: Any, field: str = "image"
                 ) -> tuple[np.ndarray, dict[int, PicPacError]]:
    """The ``field`` (image) bytes of ``records`` as rows (len(records), spec.nbytes), checked; and the records that
    fail, by position (their rows hold zeros).

    Records written back to back (write_arrays) are copied whole, by one np.take into this thread's
    buffer, and parsed and checked there; other layouts are parsed in the file and gathered. A
    record's checksum is checked the first time the stream reads it (picpac never rewrites a
    record's bytes; a batch of arrays makes this check a third of the work).
    """
    rows = None
    if reader.stride:
        rows = batched.buffer(f"records of {reader.path}", (len(records), reader.stride), np.uint8)
        reader.take(records, rows)
    starts, lengths, problems = reader.spans(records, field, rows, once=True)
    failed: dict[int, PicPacError] = {}
    for i in np.flatnonzero(lengths != spec.nbytes).tolist():
        record = int(records[i])
        failed[i] = CorruptRecordError(reader.path, record, problems[i]) if i in problems else \
            SampleError(reader.path, record, f"has no {field!r} field") if lengths[i] < 0 else \
            array_size_error(reader.path, record, field, int(lengths[i]), spec)
    if rows is not None:
        delta = starts - np.arange(len(records), dtype=np.int64) * rows.shape[1]
        if not failed and len(delta) and (delta == delta[0]).all():
            return rows[:, int(delta[0]):int(delta[0]) + spec.nbytes], failed  # the usual case: one slice
    ok = lengths == spec.nbytes
    gathered = reader.gather(starts[ok], spec.nbytes, rows.reshape(-1) if rows is not None else None)
    if not failed:
        return gathered, failed
    data = np.zeros((len(records), spec.nbytes), np.uint8)
    data[ok] = gathered
    return data, failed
