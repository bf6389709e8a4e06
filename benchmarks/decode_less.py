"""Decode less (issue 5 item 3): reduced-scale JPEG decoding vs full decoding on large images.

imagenet-250 upscaled 4x (INTER_CUBIC) and re-encoded once (JPEG quality 90), repeated to
--samples; W1 (RandomResizedCrop 224 + h-flip) and W2 (shorter side 256 + centre crop 224), batch
64, threads 2, uint8; ImageStream with reduced_decode=True vs False, interleaved, medians of
--repeats. Also the W2 quality: PSNR of both against W2 of the original (not upscaled) image.
Targets: reduced >= 2x full for W1 and W2; PSNR within 1 dB.

    python benchmarks/decode_less.py [--samples 1000] [--repeats 3]
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
from picpac.transforms import CenterCrop, Flip, RandomResizedCrop, Resize, Sample

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"
WORKLOADS = {
    "W1": lambda: [RandomResizedCrop(224, 224), Flip(horizontal=0.5)],
    "W2": lambda: [Resize(shorter=256), CenterCrop(224, 224)],
}


def build(path: str, samples: int) -> list[np.ndarray]:
    originals = [cv2.imread(str(f), cv2.IMREAD_COLOR) for f in sorted(DATA.glob("*.JPEG"))]
    large = [cv2.imencode(".jpg", cv2.resize(o, None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC),
                          [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes() for o in originals]
    with picpac.Writer(path) as w:
        for i in range(samples):
            w.append(image=large[i % len(large)], label=i % len(large))
    return originals


def rate(path: str, workload: str, reduced: bool) -> float:
    with picpac.ImageStream(path, loop=False, batch=64, threads=2, dtype="uint8", order="NHWC", colorspace="BGR",
                            reduced_decode=reduced, transforms=WORKLOADS[workload]()) as s:
        t = time.perf_counter()
        n = sum(len(b[0]) for b in s)
        return n / (time.perf_counter() - t)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return 10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b) ** 2))


def w2_quality(path: str, originals: list[np.ndarray]) -> tuple[float, float]:
    """Mean PSNR of W2 with reduced and with full decode, against W2 of the original images."""
    n = len(originals)
    config = dict(loop=False, shuffle=False, batch=n, dtype="uint8", order="NHWC", colorspace="BGR")
    outputs = []
    for reduced in (True, False):
        with picpac.ImageStream(path, reduced_decode=reduced, transforms=WORKLOADS["W2"](), **config) as s:
            outputs.append(next(s)[0])
    truths = [CenterCrop(224, 224)(Resize(shorter=256)(Sample(o, 0, 0), None), None).image for o in originals]
    return tuple(float(np.mean([psnr(a, t) for a, t in zip(out, truths)])) for out in outputs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"this benchmark needs {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.picpac")
        originals = build(path, args.samples)
        runs = {(w, r): [] for w in WORKLOADS for r in (False, True)}
        for _ in range(args.repeats):
            for key in runs:
                runs[key].append(rate(path, *key))
        quality = w2_quality(path, originals)
    print(f"imagenet-250 upscaled 4x (~2000x1500), {args.samples} samples, batch 64, threads 2, "
          f"median of {args.repeats}")
    for w in WORKLOADS:
        full, reduced = statistics.median(runs[w, False]), statistics.median(runs[w, True])
        ratio = reduced / full
        print(f"{w}: full decode {full:6.0f} img/s   reduced {reduced:6.0f} img/s   {ratio:.2f}x   "
              f"target >= 2x   {'PASS' if ratio >= 2 else 'FAIL'}")
    gap = quality[1] - quality[0]
    print(f"W2 PSNR vs the original: reduced {quality[0]:.2f} dB, full {quality[1]:.2f} dB, gap {gap:.2f} dB   "
          f"target < 1 dB   {'PASS' if gap < 1 else 'FAIL'}")


if __name__ == "__main__":
    main()
