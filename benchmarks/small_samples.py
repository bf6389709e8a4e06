"""Small samples: picpac's batch path against a PyTorch DataLoader (issue item "Small samples").

Data: 50,000 CIFAR-like 32x32x3 uint8 arrays (uniform random pixels, seed 0; labels i % 10), written
once with ``picpac.write_arrays`` into a temporary folder (an array field: no decoding).
Workload: pad 4 (zeros) -> random 32x32 crop -> horizontal flip p=0.5 -> batches of 256, uint8 NHWC.

Contenders, each made once and run for one untimed warm-up pass, then for --repeats passes (epochs),
interleaved so background load hits them alike; every pass is timed on its own and the median is
reported:
  (a) picpac.ImageStream(batch=256, dtype="uint8", order="NHWC", threads=2, shuffle=True, loop=False) with
      transforms [Pad(sides=(4, 4, 4, 4)), Crop(32, 32, random=True), Flip(horizontal=0.5)]: the batch path
      on worker threads (the default backend)
  (b) the same with backend="process" (2 worker processes, spawn: they start in the warm-up pass, which
      here takes seconds, since a spawned worker imports this script and so torch; they then stay)
  (c) torch DataLoader(num_workers=2, batch_size=256, shuffle=True) over a Dataset holding the arrays in
      memory and doing the same per sample in NumPy (np.pad, a slice, [:, ::-1]), default collate; its
      workers start afresh every epoch (persistent_workers=False, the default), as users see it

A rate is samples / wall time of one pass. Targets, for (a): >= 200,000 samples/s and >= 10x (c).

torch is not a picpac dependency: pip install torch==2.13.0 (exit 2 without it).

    python benchmarks/small_samples.py [--samples 50000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import picpac
from picpac.transforms import Crop, Flip, Pad

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError as _exc:  # reported by main(): the module itself stays importable
    torch = DataLoader = None
    Dataset = object
    _MISSING: ImportError | None = _exc
else:
    _MISSING = None

BATCH, PAD, SIZE, WORKERS = 256, 4, 32, 2
TARGET_RATE, TARGET_RATIO = 200_000, 10.0


class Arrays(Dataset):
    """The arrays in memory; each item padded, randomly cropped and flipped in NumPy."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels
        self._rng: np.random.Generator | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        if self._pid != os.getpid():  # one generator per worker process, seeded by torch's worker seed
            self._rng, self._pid = np.random.default_rng(torch.initial_seed() % 2**32), os.getpid()
        padded = np.pad(self.images[i], ((PAD, PAD), (PAD, PAD), (0, 0)))
        y, x = self._rng.integers(0, 2 * PAD + 1, 2)
        crop = padded[y:y + SIZE, x:x + SIZE]
        if self._rng.random() < 0.5:
            crop = crop[:, ::-1]
        return np.ascontiguousarray(crop), int(self.labels[i])


def picpac_stream(path: str, **extra) -> picpac.ImageStream:
    stream = picpac.ImageStream(path, batch=BATCH, loop=False, shuffle=True, dtype="uint8", order="NHWC",
                                threads=WORKERS, transforms=[Pad(sides=(PAD,) * 4), Crop(SIZE, SIZE, random=True),
                                                             Flip(horizontal=0.5)], **extra)
    assert stream.stats()["path"] == "batch", stream.stats()["path_reason"]
    return stream


def one_pass(batches, samples: int, start: float) -> float:
    n = 0
    for images, *_ in batches:
        n += len(images)
    assert n == samples and tuple(images.shape[1:]) == (SIZE, SIZE, 3)
    return n / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if _MISSING is not None:
        print(f"this benchmark needs torch ({_MISSING}); it is not a picpac dependency: pip install torch==2.13.0",
              file=sys.stderr)
        return 2
    images = np.random.default_rng(0).integers(0, 256, (args.samples, SIZE, SIZE, 3), np.uint8)
    labels = np.arange(args.samples) % 10
    runs: dict[str, list[float]] = {"threads": [], "processes": [], "dataloader": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cifar-like.picpac")
        t = time.perf_counter()
        picpac.write_arrays(path, images, labels)
        written = time.perf_counter() - t
        makers = {"threads": lambda: picpac_stream(path),
                  "processes": lambda: picpac_stream(path, backend="process"),
                  "dataloader": lambda: DataLoader(Arrays(images, labels), batch_size=BATCH, shuffle=True,
                                                   num_workers=WORKERS)}
        contenders: dict[str, object] = {}
        try:
            for name, make in makers.items():  # made, and warmed up by one pass
                contenders[name] = make()
                one_pass(contenders[name], args.samples, time.perf_counter())
            for _ in range(args.repeats):
                for name, contender in contenders.items():
                    runs[name].append(one_pass(contender, args.samples, time.perf_counter()))
        finally:
            for contender in contenders.values():
                if isinstance(contender, picpac.ImageStream):
                    contender.close()
    med = {name: statistics.median(rates) for name, rates in runs.items()}
    ratio = med["threads"] / med["dataloader"]
    print(f"{args.samples} CIFAR-like {SIZE}x{SIZE}x3 uint8 arrays, pad {PAD} + random crop {SIZE} + h-flip, "
          f"batch {BATCH}, uint8 NHWC; median of {args.repeats} passes after a warm-up, {os.cpu_count()} cores "
          f"(write_arrays: {written:.2f} s)")
    for name, label in (("threads", "(a) picpac batch path, threads=2"),
                        ("processes", "(b) picpac batch path, backend='process', 2 workers"),
                        ("dataloader", "(c) DataLoader(num_workers=2), NumPy per sample")):
        each = ", ".join(f"{r:,.0f}" for r in runs[name])
        print(f"  {label:52s} {med[name]:>10,.0f} samples/s   ({each})")
    print(f"  (a) >= {TARGET_RATE:,} samples/s: {med['threads']:,.0f}   "
          f"{'PASS' if med['threads'] >= TARGET_RATE else 'FAIL'}")
    print(f"  (a) / (c) >= {TARGET_RATIO:g}x: {ratio:.1f}x   {'PASS' if ratio >= TARGET_RATIO else 'FAIL'}"
          f"   ((b) / (c): {med['processes'] / med['dataloader']:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
