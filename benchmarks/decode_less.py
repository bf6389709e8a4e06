"""Decode less (issue 5 item 3): reduced-scale and region JPEG decoding vs full decoding.

Two databases, each repeated to --samples: imagenet-250 upscaled 4x (INTER_CUBIC) and re-encoded
once (JPEG quality 90), and imagenet-250 as it is. W1 (RandomResizedCrop 224 + h-flip) and W2
(shorter side 256 + centre crop 224), batch 64, threads 2, uint8; three ImageStream modes,
interleaved, medians of --repeats:
  full:   reduced_decode=False (every JPEG decoded whole)
  scaled: region_decode=False (libjpeg's 1/2 or 1/4 scale where the output allows)
  region: the default (scaled, and only the region the geometry reads; needs picpac.image._jpeg)
Also the W2 quality on the large images: PSNR of each mode against W2 of the original image.
Targets: region (the default) >= 2x full for W1 and W2 on the large images; PSNR within 1 dB.

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
from picpac.image import REGION_DECODE
from picpac.transforms import CenterCrop, Flip, RandomResizedCrop, Resize, Sample

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"
WORKLOADS = {
    "W1": lambda: [RandomResizedCrop(224, 224), Flip(horizontal=0.5)],
    "W2": lambda: [Resize(shorter=256), CenterCrop(224, 224)],
}
MODES = {"full": dict(reduced_decode=False), "scaled": dict(region_decode=False), "region": {}}


def build(folder: str, samples: int) -> tuple[dict[str, str], list[np.ndarray]]:
    """The two databases {"large": path, "original": path}, and the original images."""
    files = sorted(DATA.glob("*.JPEG"))
    originals = [cv2.imread(str(f), cv2.IMREAD_COLOR) for f in files]
    encoded = {"large": [cv2.imencode(".jpg", cv2.resize(o, None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC),
                                      [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes() for o in originals],
               "original": [f.read_bytes() for f in files]}
    paths = {}
    for name, jpegs in encoded.items():
        paths[name] = os.path.join(folder, f"{name}.picpac")
        with picpac.Writer(paths[name]) as w:
            for i in range(samples):
                w.append(image=jpegs[i % len(jpegs)], label=i % len(jpegs))
    return paths, originals


def rate(path: str, workload: str, mode: str) -> float:
    with picpac.ImageStream(path, loop=False, batch=64, threads=2, dtype="uint8", order="NHWC", colorspace="BGR",
                            transforms=WORKLOADS[workload](), **MODES[mode]) as s:
        t = time.perf_counter()
        n = sum(len(b[0]) for b in s)
        return n / (time.perf_counter() - t)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return 10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b) ** 2))


def w2_quality(path: str, originals: list[np.ndarray]) -> dict[str, float]:
    """Mean PSNR of W2 in each mode, against W2 of the original images."""
    n = len(originals)
    config = dict(loop=False, shuffle=False, batch=n, dtype="uint8", order="NHWC", colorspace="BGR")
    truths = [CenterCrop(224, 224)(Resize(shorter=256)(Sample(o, 0, 0), None), None).image for o in originals]
    quality = {}
    for mode, keys in MODES.items():
        with picpac.ImageStream(path, transforms=WORKLOADS["W2"](), **config, **keys) as s:
            out = next(s)[0]
        quality[mode] = float(np.mean([psnr(a, t) for a, t in zip(out, truths)]))
    return quality


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"this benchmark needs {DATA}")
    if not REGION_DECODE:
        print("picpac.image._jpeg is not built (no libjpeg headers at install): 'region' equals 'scaled'")
    with tempfile.TemporaryDirectory() as tmp:
        paths, originals = build(tmp, args.samples)
        runs = {(d, w, m): [] for d in paths for w in WORKLOADS for m in MODES}
        for _ in range(args.repeats):
            for key in runs:
                runs[key].append(rate(paths[key[0]], *key[1:]))
        quality = w2_quality(paths["large"], originals)
    print(f"{args.samples} samples, batch 64, threads 2, median of {args.repeats}; img/s and x full decode")
    for data, title in (("large", "imagenet-250 upscaled 4x (~2000x1500)"), ("original", "imagenet-250 (~500x375)")):
        print(title)
        for w in WORKLOADS:
            rates = {m: statistics.median(runs[data, w, m]) for m in MODES}
            cells = "   ".join(f"{m} {r:5.0f} ({r / rates['full']:.2f}x)" for m, r in rates.items())
            line = f"  {w}: {cells}   region / scaled {rates['region'] / rates['scaled']:.2f}x"
            if data == "large":
                ratio = rates["region"] / rates["full"]
                line += f"   target region >= 2x full   {'PASS' if ratio >= 2 else 'FAIL'}"
            print(line)
    gap = quality["full"] - min(quality["scaled"], quality["region"])
    print("W2 PSNR vs the original image (large): " + ", ".join(f"{m} {q:.2f} dB" for m, q in quality.items())
          + f"; worst gap to full {gap:.2f} dB   target < 1 dB   {'PASS' if gap < 1 else 'FAIL'}")


if __name__ == "__main__":
    main()
