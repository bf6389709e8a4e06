"""Where W1 loses against 2 x the one-core ceiling (issue 5 item 2): per-sample cost and 2-thread scaling.

Over imagenet-250 repeated to 2,000 records, W1 = decode -> RandomResizedCrop 224 -> h-flip, uint8:
(1) a bare cv2.imdecode loop on 1 and on 2 threads (does decoding itself scale on this machine?),
(2) the ceiling loop (decode + the same transform on bytes in memory) vs ImageStream(threads=1):
    picpac's per-sample overhead, (3) ImageStream with threads=2 vs threads=1: its scaling.
Medians of --repeats, interleaved.

    python benchmarks/scaling.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np

import picpac
from picpac.transforms import Flip, RandomResizedCrop

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"


def decode_rate(jpegs: list[np.ndarray], threads: int) -> float:
    def work(part: list[np.ndarray]) -> None:
        for data in part:
            cv2.imdecode(data, cv2.IMREAD_COLOR)
    workers = [threading.Thread(target=work, args=(jpegs[i::threads],)) for i in range(threads)]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(jpegs) / (time.perf_counter() - t)


def ceiling_ms(jpegs: list[np.ndarray]) -> float:
    crop, rng = RandomResizedCrop(224, 224), np.random.default_rng(0)
    t = time.perf_counter()
    for data in jpegs:
        img = cv2.imdecode(data, cv2.IMREAD_COLOR)
        x, y, w, h = crop.window(img.shape[1], img.shape[0], rng)
        out = cv2.resize(img[y:y + h, x:x + w], (224, 224),
                         interpolation=cv2.INTER_AREA if w * h > 224 * 224 else cv2.INTER_LINEAR)
        if rng.random() < 0.5:
            cv2.flip(out, 1)
    return (time.perf_counter() - t) / len(jpegs) * 1000


def stream_rate(path: str, threads: int) -> float:
    with picpac.ImageStream(path, loop=False, batch=64, threads=threads, dtype="uint8", order="NHWC",
                            colorspace="BGR", transforms=[RandomResizedCrop(224, 224), Flip(horizontal=0.5)]) as s:
        t = time.perf_counter()
        n = sum(len(b[0]) for b in s)
        return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    files = sorted(DATA.glob("*.JPEG"))
    if not files:
        raise SystemExit(f"this benchmark needs {DATA}")
    raw = [f.read_bytes() for f in files] * 8
    jpegs = [np.frombuffer(d, np.uint8) for d in raw]
    runs: dict[str, list[float]] = {k: [] for k in ("decode1", "decode2", "ceiling", "stream1", "stream2")}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w1.picpac")
        with picpac.Writer(path) as w:
            for i, d in enumerate(raw):
                w.append(image=d, label=i % len(files))
        for _ in range(args.repeats):
            runs["decode1"].append(decode_rate(jpegs, 1))
            runs["decode2"].append(decode_rate(jpegs, 2))
            runs["ceiling"].append(ceiling_ms(jpegs))
            runs["stream1"].append(stream_rate(path, 1))
            runs["stream2"].append(stream_rate(path, 2))
    m = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{len(raw)} imagenet JPEGs, W1, median of {args.repeats}")
    print(f"bare decode: 1 thread {m['decode1']:.0f}/s, 2 threads {m['decode2']:.0f}/s, "
          f"scaling {m['decode2'] / m['decode1']:.2f}x")
    stream_ms = 1000 / m["stream1"]
    print(f"per sample: ceiling loop {m['ceiling']:.2f} ms, ImageStream(threads=1) {stream_ms:.2f} ms, "
          f"overhead {stream_ms / m['ceiling'] - 1:+.0%}")
    print(f"ImageStream: threads=1 {m['stream1']:.0f} img/s, threads=2 {m['stream2']:.0f} img/s, "
          f"scaling {m['stream2'] / m['stream1']:.2f}x; vs 2 x ceiling {m['stream2'] * m['ceiling'] / 2000:.2f}")


if __name__ == "__main__":
    main()
