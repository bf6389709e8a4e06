"""Memory while streaming (issue 5 item 7): RSS stays within +-50 MB over 200,000 samples of W1.

W1 = decode -> RandomResizedCrop 224 -> h-flip -> batch 64 uint8, endless stream over
imagenet-250 repeated to 2,000 records. The start RSS is taken after one full pass (the mapped
database pages, the thread pool and NumPy's allocator are warm by then); the end RSS after
--samples more samples. RSS is read from /proc/self/status (VmRSS), so it includes the pages of the
memory-mapped database that are resident.

    python benchmarks/memory.py [--samples 200000]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import picpac
from picpac.transforms import Flip, RandomResizedCrop

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200_000)
    args = ap.parse_args()
    jpegs = [f.read_bytes() for f in sorted(DATA.glob("*.JPEG"))]
    if not jpegs:
        raise SystemExit(f"this benchmark needs {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w1.picpac")
        with picpac.Writer(path) as w:
            for i in range(2000):
                w.append(image=jpegs[i % len(jpegs)], label=i % len(jpegs))
        with picpac.ImageStream(path, batch=64, dtype="uint8", order="NHWC", colorspace="BGR",
                                transforms=[RandomResizedCrop(224, 224), Flip(horizontal=0.5)]) as stream:
            batches = iter(stream)
            seen = 0
            while seen < 2000:  # one full pass to warm up
                seen += len(next(batches)[0])
            start, t, seen = rss_mb(), time.perf_counter(), 0
            peak = start
            while seen < args.samples:
                seen += len(next(batches)[0])
                if seen % (64 * 100) < 64:
                    peak = max(peak, rss_mb())
            end, elapsed = rss_mb(), time.perf_counter() - t
    change = end - start
    print(f"W1, {seen:,} samples in {elapsed:.0f} s ({seen / elapsed:,.0f} img/s), threads {os.cpu_count()}")
    print(f"RSS at start {start:.1f} MB, at end {end:.1f} MB, change {change:+.1f} MB (peak {peak:.1f} MB)   "
          f"target within +-50 MB   {'PASS' if abs(change) <= 50 else 'FAIL'}")


if __name__ == "__main__":
    main()
