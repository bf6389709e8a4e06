"""picpac's pixel kernels (issue 36), three measurements on one core of this machine:

1. each kernel against OpenCV's (200 calls each on a 500x375 image): resize AREA and LINEAR, warps (axis-aligned,
   as W2's map, and a rotation), a flip; for every variant of the loops this CPU runs;
2. the fused path against fused=False in one process, six passes each, alternating (W1, W2; threads 1 and 2): CPU
   time per image and img/s (runs in separate processes vary more than the two paths differ);
3. libjpeg-turbo's M/8 scaling: the 250 JPEGs decoded at 8/8 down to 1/8 (benchmarks/jpeg_scales.c, built here
   with the C compiler and libjpeg's headers).

    python benchmarks/kernels.py [--passes 6] [--samples 1000]
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

import picpac
from picpac.image import kernels
from picpac.transforms import CenterCrop, Flip, RandomResizedCrop, Resize

DATA = os.environ.get("PICPAC_BENCH_DATA") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                           "shared", "data", "imagenet-250")


def per_call(fn, calls: int = 200) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def against_opencv() -> None:
    cv2.setNumThreads(1)
    image = np.random.default_rng(0).integers(0, 256, (375, 500, 3), np.uint8)
    rotation = cv2.getRotationMatrix2D((250, 180), 15, 0.8)
    axes = np.array([[0.682, 0, -58.5], [0, 0.6827, -16.0]])
    cases = [
        ("resize AREA, 500x375 to 341x256", lambda: kernels.resize(image, (341, 256), cv2.INTER_AREA),
         lambda: cv2.resize(image, (341, 256), interpolation=cv2.INTER_AREA)),
        ("resize LINEAR, 300x300 crop to 224x224", lambda: kernels.resize(image[:300, :300], (224, 224), cv2.INTER_LINEAR),
         lambda: cv2.resize(image[:300, :300], (224, 224), interpolation=cv2.INTER_LINEAR)),
        ("resize LINEAR, 150x150 crop up to 224x224",
         lambda: kernels.resize(image[:150, :150], (224, 224), cv2.INTER_LINEAR),
         lambda: cv2.resize(image[:150, :150], (224, 224), interpolation=cv2.INTER_LINEAR)),
        ("warp, axis-aligned (W2's map)", lambda: kernels.warp(image, axes, (224, 224), cv2.BORDER_CONSTANT, 0),
         lambda: cv2.warpAffine(image, axes, (224, 224))),
        ("warp, rotation 15 degrees, 0.8x", lambda: kernels.warp(image, rotation, (224, 224), cv2.BORDER_CONSTANT, 0),
         lambda: cv2.warpAffine(image, rotation, (224, 224))),
        ("flip of 224x224x3", lambda: kernels.flip(image[:224, :224], 1), lambda: cv2.flip(image[:224, :224], 1)),
    ]
    for variant in kernels.VARIANTS:
        try:
            kernels.select(variant)
        except ValueError:
            continue
        print(f"\nkernels {variant} against OpenCV {cv2.__version__} (us per call, one core):")
        for name, ours, theirs in cases:
            print(f"  {name:44s} picpac {per_call(ours):8.1f}   OpenCV {per_call(theirs):8.1f}")
    kernels.select("auto")


def fused_against_python(db: str, samples: int, passes: int) -> None:
    workloads = {"W1": [RandomResizedCrop(224, 224), Flip(horizontal=0.5)],
                 "W2": [Resize(shorter=256), CenterCrop(224, 224)]}
    print(f"\nthe fused path against fused=False, one process, {passes} passes each alternating, the best and worst "
          "left out (CPU ms per image, img/s):")
    for name, steps in workloads.items():
        for threads in (1, 2):
            runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for _ in range(passes):
                for fused in (True, False):
                    cpu, wall = time.process_time(), time.perf_counter()
                    with picpac.ImageStream(db, batch=64, loop=False, threads=threads, dtype="uint8", order="NHWC",
                                            colorspace="BGR", transforms=steps, shuffle=True, fused=fused) as stream:
                        for _ in stream:
                            pass
                    runs[fused].append((time.process_time() - cpu, time.perf_counter() - wall))
            line = []
            for fused in (True, False):
                cpu = sorted(r[0] for r in runs[fused])[1:-1]
                wall = sorted(r[1] for r in runs[fused])[1:-1]
                line.append(f"{'fused' if fused else 'fused=False'} {1000 * np.mean(cpu) / samples:.3f} ms "
                            f"{samples / np.mean(wall):6.0f} img/s")
            print(f"  {name} threads {threads}:  " + "   ".join(line))


def jpeg_scales(files: list[str]) -> None:
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jpeg_scales.c")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("\nM/8 scaling: no C compiler here")
        return
    with tempfile.TemporaryDirectory() as folder:
        program = os.path.join(folder, "jpeg_scales")
        built = subprocess.run([compiler, "-O2", source, "-ljpeg", "-o", program], capture_output=True, text=True)
        if built.returncode != 0:
            print(f"\nM/8 scaling: cannot build jpeg_scales.c ({built.stderr.strip()[:200]})")
            return
        print(f"\nlibjpeg-turbo's M/8 scaling, {len(files)} JPEGs to BGR, one core (us per image):")
        for m in range(8, 0, -1):
            out = subprocess.run([program, str(m), *files], capture_output=True, text=True, check=True).stdout.split()
            print(f"  {m}/8 {float(out[1]):8.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(DATA, "*.JPEG")))
    if not files:
        print(f"no JPEGs in {DATA}: this benchmark needs ../shared/data/imagenet-250", file=sys.stderr)
        return 2
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores; OpenCV {cv2.__version__}; picpac kernels {kernels.variant()}; "
          f"fast path {'on' if picpac.image.REGION_DECODE else 'off'}")
    against_opencv()
    with tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "jpegs.picpac")
        with picpac.Writer(db) as w:
            for i in range(args.samples):
                with open(files[i % len(files)], "rb") as f:
                    w.append(image=f.read(), label=i % 10)
        fused_against_python(db, args.samples, args.passes)
    jpeg_scales(files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
