"""backend='process' against backend='thread' (the process backend issue).

Three workloads over one synthetic database (PNG images, decode -> crop -> batch):
* ``tiny``: 32x32 images and no Python transform: the per-sample cost is mostly hand-off, so
  this measures the engine's overhead (threads should win);
* ``python``: the same plus a pure-Python transform holding the GIL for about 1 ms per sample
  (the case the process backend is for: threads serialise on the GIL, processes do not);
* ``large``: resized to 224x224 and given as float32 (600 KB a sample, 38 MB a batch): the case where
  copying a batch out of the shared ring costs the most.
Each workload runs on threads, on processes (batches copied out of the shared ring: ``copy=True``, the
default) and on processes with zero-copy views (``copy=False``); the last line gives the copy's cost.
Interleaved runs, medians; each run streams one pass with the workers already started.

    python benchmarks/process_backend.py [--samples 2000] [--repeats 3] [--workers 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import cv2
import numpy as np

import picpac


def python_work(sample, rng):
    """About 1 ms of pure Python per sample (holds the GIL)."""
    total = 0
    for i in range(20_000):
        total += i * i % 7
    sample.extra["work"] = total
    return sample


def build(path: str, samples: int) -> None:
    rng = np.random.default_rng(0)
    with picpac.Writer(path) as w:
        for i in range(samples):
            pixels = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
            w.append(image=cv2.imencode(".png", pixels)[1].tobytes(), label=i % 10)


WORKLOADS = {
    "tiny": dict(crop_width=32, crop_height=32, dtype="uint8"),
    "python": dict(crop_width=32, crop_height=32, dtype="uint8", transforms=[python_work]),
    "large": dict(resize_width=224, resize_height=224, dtype="float32"),
}


def rate(path: str, backend: str, workers: int, workload: dict, copy: bool = True) -> float:
    config = dict(loop=False, batch=64, perturb=True, workers=workers, backend=backend, copy=copy, **workload)
    with picpac.ImageStream(path, **config) as s:
        next(s)  # start the workers (and make the ring) outside the timing
        for _ in s:
            pass
        t = time.perf_counter()
        n = sum(len(images) for images, _, _ in s)  # the second pass, on warm workers
        return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.picpac")
        build(path, args.samples)
        for _ in range(args.repeats):
            for workload, settings in WORKLOADS.items():
                for backend, copy, name in (("thread", True, "thread"), ("process", True, "process"),
                                            ("process", False, "process copy=False")):
                    runs.setdefault(f"{workload:6} {name:18}", []).append(
                        rate(path, backend, args.workers, settings, copy))
    print(f"{args.samples} samples 40x40 PNG, crop 32 (large: resize 224, float32), batch 64, {args.workers} workers, "
          f"median of {args.repeats}, {os.cpu_count()} cores")
    medians = {name: statistics.median(values) for name, values in runs.items()}
    for name, value in medians.items():
        print(f"  {name}  {value:9.0f} img/s")
    for workload in WORKLOADS:
        ratio = medians[f"{workload:6} {'process':18}"] / medians[f"{workload:6} {'process copy=False':18}"]
        print(f"  {workload}: the default copy runs at {ratio:.2f}x the zero-copy rate")


if __name__ == "__main__":
    main()
