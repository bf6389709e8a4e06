"""Does the stream leave the training process its core? (issue 27 item 4)

A consumer that does per-batch work on the CPU in Python and NumPy (a stand-in for a training step's host side:
--step-ms of it per batch) runs three ways over W1 (RandomResizedCrop 224 + h-flip, uint8, batches of 64, the 250
ImageNet JPEGs repeated to --samples):
  alone       the step on one batch held in memory, --steps times: its own speed
  default     fed by ImageStream with the default workers (the usable cores but one)
  all cores   fed by ImageStream with one worker per core (the default before issue 27)
For each, the step's own time (only the time inside steps, not the wait for batches) and, fed, the stream's rate;
then the step's slowdown against alone (the issue's target for the default: at most 5%) and the default stream's
rate against the stream running alone with the same workers (no step).

    python benchmarks/consumer.py [--samples 2000] [--step-ms 10] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import BATCH, picpac_transforms, prepare  # noqa: E402

import picpac  # noqa: E402
from picpac.stream.job import default_workers, usable_cores  # noqa: E402


def calibrate(ms: float) -> int:
    """Rounds of the step's Python loop that take about ``ms`` milliseconds here."""
    rounds, start = 10_000, time.perf_counter()
    sum(i * i for i in range(rounds))
    return max(1, int(rounds * ms / 1000 / (time.perf_counter() - start)))


def step(images: np.ndarray, rounds: int) -> float:
    """Per-batch host work: a reduction over the batch in NumPy, then a Python loop (the GIL held throughout)."""
    total = float(images[:, ::8, ::8].mean())
    return total + sum(i * i for i in range(rounds))


def fed(db: str, samples: int, workers: int, rounds: int | None) -> tuple[float, float]:
    """(stream img/s, seconds inside steps per batch) of one pass; ``rounds`` None: no step (the stream alone)."""
    inside, batches = 0.0, 0
    start = time.perf_counter()
    with picpac.ImageStream(db, loop=False, batch=BATCH, workers=workers, dtype="uint8", order="NHWC",
                            colorspace="BGR", shuffle=True, transforms=picpac_transforms("W1")) as stream:
        for images, _, _ in stream:
            if rounds is not None:
                t = time.perf_counter()
                step(images, rounds)
                inside += time.perf_counter() - t
            batches += 1
    return samples / (time.perf_counter() - start), inside / max(1, batches)


def alone(images: np.ndarray, rounds: int, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(images, rounds)
    return (time.perf_counter() - start) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cores, default = usable_cores(), default_workers()
    rounds = calibrate(args.step_ms)
    print(f"machine: {cores} usable cores; default workers {default}; step: about {args.step_ms:g} ms of Python per "
          f"batch of {BATCH}; load average {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="picpac-consumer-") as tmp:
        *_, db, note = prepare(tmp, args.samples, False)
        print(f"data: {note}\n")
        with picpac.ImageStream(db, batch=BATCH, dtype="uint8", order="NHWC", transforms=picpac_transforms("W1")) as s:
            batch = next(s)[0]
        fed(db, args.samples, default, None)  # warm the page cache
        for _ in range(args.repeats):  # interleaved
            runs.setdefault("alone", []).append((0.0, alone(batch, rounds, args.samples // BATCH)))
            runs.setdefault("stream alone", []).append(fed(db, args.samples, default, None))
            runs.setdefault("default", []).append(fed(db, args.samples, default, rounds))
            runs.setdefault("all cores", []).append(fed(db, args.samples, cores, rounds))
    med = {k: (statistics.median(r for r, _ in v), statistics.median(s for _, s in v)) for k, v in runs.items()}
    base = med["alone"][1]
    print(f"{'consumer':40s} {'step ms':>8s}  {'vs alone':>8s}  {'stream img/s':>12s}")
    print(f"{'step alone':40s} {1000 * base:8.2f}  {'':8s}  {'':>12s}")
    print(f"{f'stream alone, {default} workers (no step)':40s} {'':8s}  {'':8s}  {med['stream alone'][0]:12,.0f}")
    for key, workers in (("default", default), ("all cores", cores)):
        rate, inside = med[key]
        print(f"{f'fed, {workers} workers ({key})':40s} {1000 * inside:8.2f}  {inside / base - 1:+8.1%}  {rate:12,.0f}")
    slowdown = med["default"][1] / base - 1
    print(f"\nthe default's step slowdown {slowdown:+.1%} (target <= +5%); its stream at "
          f"{med['default'][0] / med['stream alone'][0]:.2f}x the stream alone with the same workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
