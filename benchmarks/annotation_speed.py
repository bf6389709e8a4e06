"""Cost of annotations (issue 4): detection streaming vs the same stream without annotations.

On ../shared/data/coco128-train imported with its YOLO boxes (repeated to --samples): decode ->
random affine (rotate 15, scale 0.8-1.2) -> random crop 512 -> batch 16, threads 2; once with
task='detect' (boxes follow the affine, are clipped and batched), once as plain images. Runs are
interleaved; medians of --repeats. Target: detection >= 0.8x the plain stream.

    python benchmarks/annotation_speed.py [--samples 1024] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import picpac
from picpac.ingest import import_dataset

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "coco128-train"
CONFIG = dict(loop=False, batch=16, threads=2, dtype="uint8", order="NHWC", perturb=True, pert_angle=15,
              pert_min_scale=0.8, pert_max_scale=1.2, crop_width=512, crop_height=512)


def build(tmp: str, samples: int) -> str:
    once = os.path.join(tmp, "once.picpac")
    import_dataset(DATA / "images", once, format="yolo", labels=DATA / "detection", progress=False)
    path = os.path.join(tmp, "coco.picpac")
    with picpac.Reader(once) as r, picpac.Writer(path, metadata={"classes": r.classes}) as w:
        for i in range(samples):
            rec = r[i % len(r)]
            w.append(dict(rec.fields), label=rec.label, meta=rec.meta)
    return path


def rate(path: str, **extra) -> float:
    with picpac.ImageStream(path, **CONFIG, **extra) as s:
        t = time.perf_counter()
        n = sum(len(batch[0]) for batch in s)
        return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"this benchmark needs {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        path = build(tmp, args.samples)
        plain, detect = [], []
        for _ in range(args.repeats):
            plain.append(rate(path))
            detect.append(rate(path, task="detect"))
    p, d = statistics.median(plain), statistics.median(detect)
    print(f"coco128 x {args.samples} samples, affine + crop 512 + batch 16, threads 2, median of {args.repeats}")
    print(f"images only      {p:7.0f} img/s")
    print(f"detection boxes  {d:7.0f} img/s   {d / p:.2f}x   target >= 0.8x   {'PASS' if d / p >= 0.8 else 'FAIL'}")


if __name__ == "__main__":
    main()
