"""``workers='auto'``: the worker count and backend from a measured bound, not a guess.

A few samples of the stream's own pool run on this thread first, timed as ``profile=True`` times them: the share
of a sample's time spent outside reading and native code that releases the GIL (decoding, and on the fused path
the whole C call) is ``held`` (an upper bound: OpenCV's transforms release it too); threads can run at most
``1 / held`` samples at once, however many there are. With one core kept for the consumer, ``n = cores - 1``
workers: threads when ``1 / held >= n``, else processes (which share no GIL), unless ``backend`` was given as
'thread' or the job cannot be sent to a process.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from ..engine.processes import pack_recipe
from ..errors import PicPacError
from ..file.reader import IndexedReader
from .config import StreamConfig
from .job import Pool, default_workers
from .processor import Processor
from .sample_job import Profile

PROBE_SAMPLES = 16
"""Samples the probe times (a few milliseconds each on ImageNet-sized JPEGs)."""
WARM_UP = 4
"""Samples the probe makes first without timing them (first calls, caches)."""


@dataclass(frozen=True)
class Choice:
    """What ``workers='auto'`` chose and why."""

    workers: int
    backend: str
    reason: str
    """The measured share of a sample's time that holds the GIL, and the choice it made."""


def probe(job_type: Any, readers: list[IndexedReader], config: StreamConfig, pool: Pool,
          samples: int = PROBE_SAMPLES) -> float:
    """The GIL-held share of a sample made by ``job_type`` on this thread: the median over ``samples`` samples of the
    pool (one slow sample, a page fault or a first call, does not decide), after ``WARM_UP`` untimed ones."""
    profile = Profile()
    job = job_type(readers, config, Processor(config.decode, config.augment, config.output, profile=True), profile)
    shares = []
    for i in range(min(samples + WARM_UP, len(pool.records))):  # units as SampleJob.units makes them, epoch 0
        before = dict(profile.stages)
        job((i, i, 0, int(pool.sources[i]), int(pool.records[i]), float(pool.labels[i])))
        spent = {stage: profile.stages[stage] - before[stage] for stage in ("read", "decode", "transform")}
        total = sum(spent.values())
        # reading copies from the mapped file and checks a CRC, both without the GIL for records of images
        shares.append(1.0 if total <= 0 else max(0.0, min(1.0, spent["transform"] / total)))
    return statistics.median(shares[WARM_UP:] or shares)


def choose(job_type: Any, readers: list[IndexedReader], config: StreamConfig, pool: Pool) -> Choice:
    """The workers and backend for ``config`` (whose ``workers`` is 'auto'), measured on the pool's first samples."""
    start = time.perf_counter()
    held = probe(job_type, readers, config, pool)
    n = default_workers()
    bound = float("inf") if held == 0 else 1 / held
    measured = f"{held:.1%} of a sample's time holds the GIL, so threads scale to at most {bound:.1f}x " \
               f"(measured on {min(PROBE_SAMPLES, len(pool.records))} samples in {time.perf_counter() - start:.2f} s)"
    if bound >= n:
        return Choice(n, "thread", f"{measured}; {n} threads, one core left to the consumer")
    count = max(1, min(n, int(bound)))  # the threads the GIL lets run, where processes are not to be had
    if config.given.get("backend") == "thread":
        return Choice(count, "thread", f"{measured}; backend='thread' was given: {count} threads")
    try:
        pack_recipe(job_type(readers, config).build, config.parallelism.start_method)
    except PicPacError as exc:
        return Choice(count, "thread", f"{measured}; processes cannot take this job ({exc}): {count} threads")
    return Choice(n, "process", f"{measured}; {n} worker processes (no shared GIL), one core left to the consumer")
