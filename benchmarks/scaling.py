"""W1 throughput as the cores grow (issue 27 item 3), all rows in one run.

Over the 250 ImageNet JPEGs of ../shared/data/imagenet-250 repeated to --samples (W1 = RandomResizedCrop 224 +
h-flip, uint8 NHWC batches of 64, one full pass each, workers started inside the timing):
  picpac, thread backend, threads 1, 2, 4, 8, N (the fused C path where this machine has it; with --python the
      Python path too, fused=False)
  picpac backend=process with N workers
  torch DataLoader(num_workers=N) over the files, decoding with cv2 and with PIL (benchmarks/loaders.py's
      datasets; spawned workers, as OpenCV needs)
N = the cores this process may use. Each row prints img/s and its ratio to picpac's one thread; the issue's
targets on a 16-core machine: threads N >= 12x threads 1, and >= 1.3x DataLoader + cv2 with N workers. On a
2-core machine (N = 2) only the first is meaningful.

    python benchmarks/scaling.py [--samples 2000] [--threads 1,2,4,8] [--python]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaders import (BATCH, SIZE, DataLoader, FileDataset, _MISSING, _worker_init, picpac_transforms,  # noqa: E402
                     prepare)

import picpac  # noqa: E402
from picpac.image.decoding import REGION_DECODE as FUSED  # noqa: E402
from picpac.stream.job import usable_cores  # noqa: E402


def picpac_rate(db: str, samples: int, workers: int, backend: str = "thread", fused: bool = True) -> float:
    start = time.perf_counter()
    with picpac.ImageStream(db, loop=False, batch=BATCH, workers=workers, backend=backend, dtype="uint8",
                            order="NHWC", colorspace="BGR", shuffle=True, fused=fused,
                            transforms=picpac_transforms("W1")) as stream:
        n = sum(len(images) for images, _, _ in stream)
    assert n == samples, f"a pass delivered {n} of {samples} samples"
    return n / (time.perf_counter() - start)


def dataloader_rate(paths: list[str], labels: list[int], decoder: str, workers: int) -> float:
    start = time.perf_counter()
    loader = DataLoader(FileDataset(paths, labels, decoder, "W1"), batch_size=BATCH, shuffle=True,
                        num_workers=workers, worker_init_fn=_worker_init, multiprocessing_context="spawn")
    n = 0
    for images, _ in loader:
        assert tuple(images.shape[1:]) == (SIZE, SIZE, 3)
        n += len(images)
    assert n == len(paths)
    return n / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--threads", default="1,2,4,8", help="thread counts besides N (comma-separated)")
    ap.add_argument("--python", action="store_true", help="also the Python path (fused=False) at each thread count")
    args = ap.parse_args()
    if _MISSING is not None:
        print(f"benchmarks/scaling.py needs torch and Pillow for its DataLoader rows ({_MISSING}): "
              "pip install torch==2.13.0 pillow", file=sys.stderr)
        return 2
    cores = usable_cores()
    counts = sorted({int(t) for t in args.threads.split(",")} | {cores})
    print(f"machine: {cores} usable cores (os.cpu_count {os.cpu_count()}), Python {sys.version.split()[0]}, "
          f"fused C path {'on' if FUSED else 'off (Python path only)'}; load average {os.getloadavg()[0]:.2f}")
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="picpac-scaling-") as tmp:
        paths, labels, _, db, note = prepare(tmp, args.samples, False)
        print(f"data: {note}; W1, batches of {BATCH}, {SIZE}x{SIZE} uint8\n")
        picpac_rate(db, args.samples, 1)  # warm the page cache and the code
        paths_of = [("fused" if FUSED else "python", True)] + ([("python", False)] if args.python and FUSED else [])
        for name, fused in paths_of:
            for threads in counts:
                rows.append((f"picpac {name}, threads {threads}", picpac_rate(db, args.samples, threads, fused=fused)))
        rows.append((f"picpac backend=process, {cores} workers", picpac_rate(db, args.samples, cores, "process")))
        for decoder in ("cv2", "pil"):
            rows.append((f"DataLoader + {decoder}, {cores} workers", dataloader_rate(paths, labels, decoder, cores)))
    one = rows[0][1]
    print(f"{'W1':44s} {'img/s':>8s}   vs picpac threads 1")
    for name, rate in rows:
        print(f"{name:44s} {rate:8,.0f}   {rate / one:5.2f}x")
    full = dict(rows)[f"picpac {paths_of[0][0]}, threads {cores}"]
    cv2_rate = dict(rows)[f"DataLoader + cv2, {cores} workers"]
    print(f"\ntargets (16 cores): threads {cores} / threads 1 = {full / one:.2f}x (>= 12x there; here at most "
          f"{cores}x), threads {cores} / DataLoader + cv2 = {full / cv2_rate:.2f}x (>= 1.3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
