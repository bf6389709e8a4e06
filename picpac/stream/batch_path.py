"""The batch path: a whole batch of fixed-shape array records read, checked, transformed and converted
at once (``picpac.batched``), when the database holds arrays and every step has a batch version."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CorruptRecordError, PicPacError, SampleError
from ..file.reader import Reader
from ..image import batched
from .processor import Processor, array_size_error


def batch_plan(readers: list[Reader], config: dict[str, Any], processor: Processor
               ) -> tuple[batched.Plan | None, str | None]:
    """The batch path's plan for a stream, or None and why the per-sample path runs instead."""
    c = config
    if c["vectorize"] is False:
        return None, "vectorize=False"
    name = c["image_field"]
    if not isinstance(name, str):
        return None, f"image_field={name} names a field by number (the per-sample path reads it)"
    specs = [reader.arrays.get(name) for reader in readers]
    if specs[0] is None:
        return None, f"the database's {name!r} field is not declared as an array (metadata 'arrays')"
    if not all(reader.mapped for reader in readers):
        return None, "the database (or mixin) is sharded or remote (the batch path reads arrays from one mapped file)"
    if any(spec != specs[0] for spec in specs[1:]):
        return None, f"the mixin's {name!r} field is not the same array as the database's ({specs[0]})"
    if c["annotate"] is not None or c["task"] != "classify":
        return None, f"task={c['task']!r} (annotations go through the per-sample path)"
    if c["raw"]:
        return None, "raw names fields by number (the per-sample path reads them)"
    plan = batched.plan(processor.fixed + processor.random, specs[0].shape)
    return (None, plan) if isinstance(plan, str) else (plan, None)


class BatchLoader:
    """The batch path's work: one chunk of keys made into one batch of array records at once.

    ``loader((first, positions, epochs)) -> (images, positions, key indices, errors)``: the records
    gathered (one np.take, or one gather), checked, transformed by the plan with counter-based
    draws, and converted to the output layout. Picklable (readers reopen by path), like sample_path.SampleLoader.
    """

    def __init__(self, readers: list[Reader], config: dict[str, Any], sources: np.ndarray, records: np.ndarray):
        self.readers, self.config, self.sources, self.records = readers, config, sources, records
        self.processor = Processor(config)
        self.plan, _ = batch_plan(readers, config, self.processor)
        self.field = config["image_field"]
        self.spec = readers[0].arrays[self.field]

    def __getstate__(self) -> dict[str, Any]:
        return {"readers": self.readers, "config": self.config, "sources": self.sources, "records": self.records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["readers"], state["config"], state["sources"], state["records"])

    def output(self) -> tuple[tuple[int, ...], np.dtype]:
        """The shape of one output image and the output dtype (a dry run on one blank sample)."""
        blank = np.zeros((1, *self.spec.shape), self.spec.dtype)
        p = self.processor
        out = batched.convert(self.plan(blank, batched.draws(0, 0, 0, [0], self.plan.draws)), p.channel_first,
                              p.dtype, p.mean, p.std)
        return out.shape[1:], out.dtype

    def __call__(self, job: tuple[int, np.ndarray, np.ndarray]) -> tuple:
        """``errors`` are the samples that failed as (key index, error) pairs, in key order (skip_errors=True);
        without skip_errors the first failure is raised instead."""
        first, positions, epochs = job
        c, spec = self.config, self.spec
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
            if not c["skip_errors"]:
                raise errors[min(errors)]
            good = np.setdiff1d(np.arange(n), list(errors))
            data, positions, epochs, sources, records = (a[good] for a in (data, positions, epochs, sources, records))
        else:
            good = np.arange(n)
        images = data.view(spec.dtype).reshape(len(data), *spec.shape)
        images = self.plan(images, batched.draws(c["seed"], epochs, sources, records, self.plan.draws))
        p = self.processor
        images = batched.convert(images, p.channel_first, p.dtype, p.mean, p.std)
        return images, positions, first + good, [(first + i, errors[i]) for i in sorted(errors)]


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


class BatchProcessWork:
    """A worker process's work on the batch path: ``work(job) -> (images, (positions, key indices, errors))``."""

    def __init__(self, loader: BatchLoader):
        self.loader = loader

    def build(self) -> BatchProcessWork:
        return self

    def __call__(self, job: tuple) -> tuple[np.ndarray, tuple]:
        images, positions, index, errors = self.loader(job)
        return images, (positions, index, errors)
