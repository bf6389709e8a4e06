"""ImageStream throughput against the one-core ceiling (issue 3).

Workload: decode JPEG -> resize to 224x224 -> batch 64 (uint8, NHWC, BGR: no conversion beyond the
resize), over ../shared/data/imagenet-250 repeated to >= 2,000 samples. The ceiling is a plain
single-thread loop doing the same decode + resize. Runs are interleaved; medians of --repeats.
Targets: threads=2 >= 1.7x the ceiling, threads=1 >= 0.9x.

    python benchmarks/stream_throughput.py [--samples 2000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

import picpac

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"
SIZE = 224
BATCH = 64


def build(path: str, samples: int) -> list[bytes]:
    files = sorted(DATA.glob("*.JPEG"))
    if not files:
        raise SystemExit(f"no JPEGs in {DATA}: this benchmark needs ../shared/data/imagenet-250")
    jpegs = [f.read_bytes() for f in files]
    jpegs = (jpegs * (samples // len(jpegs) + 1))[:samples]
    with picpac.Writer(path) as w:
        for i, data in enumerate(jpegs):
            w.append(image=data, label=i % 1000)
    return jpegs


def ceiling(jpegs: list[bytes]) -> float:
    t = time.perf_counter()
    for data in jpegs:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        h, w = img.shape[:2]
        cv2.resize(img, (SIZE, SIZE), interpolation=cv2.INTER_AREA if SIZE * SIZE < w * h else cv2.INTER_LINEAR)
    return len(jpegs) / (time.perf_counter() - t)


def stream(path: str, threads: int, **extra) -> float:
    config = dict(loop=False, batch=BATCH, resize_width=SIZE, resize_height=SIZE, dtype="uint8", order="NHWC",
                  colorspace="BGR", threads=threads)
    config.update(extra)
    with picpac.ImageStream(path, **config) as s:
        t = time.perf_counter()
        n = sum(len(images) for images, _, _ in s)
        return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "imagenet.picpac")
        jpegs = build(path, args.samples)
        runs: dict[str, list[float]] = {"ceiling": [], "threads=1": [], "threads=2": [], "threads=2 float32 NCHW RGB": []}
        for _ in range(args.repeats):  # interleaved, so background load hits every variant alike
            runs["ceiling"].append(ceiling(jpegs))
            runs["threads=1"].append(stream(path, 1))
            runs["threads=2"].append(stream(path, 2))
            runs["threads=2 float32 NCHW RGB"].append(stream(path, 2, dtype="float32", order="NCHW",
                                                             colorspace="RGB"))
    med = {name: statistics.median(v) for name, v in runs.items()}
    base = med["ceiling"]
    print(f"{args.samples} samples of imagenet-250, decode + resize {SIZE} + batch {BATCH}, "
          f"median of {args.repeats}, {os.cpu_count()} cores")
    targets = {"threads=1": 0.9, "threads=2": 1.7}
    for name, rate in med.items():
        line = f"{name:28s} {rate:8.0f} img/s   {rate / base:5.2f}x ceiling"
        if name in targets:
            line += f"   target >= {targets[name]}x   {'PASS' if rate / base >= targets[name] else 'FAIL'}"
        print(line)


if __name__ == "__main__":
    main()
