"""Reader speed: open time of a 1,000,000-record database and random ``r[i]`` of a small record.

Targets (issue 2): open < 0.2 s, random access < 5 us. The baseline printed beside them is a plain
Python ``bytes`` slice of the same mmap-backed file (the floor of any Python-level access).

    python benchmarks/reader.py [--records 1000000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time

import numpy as np

import picpac


def build(path: str, n: int) -> None:
    payload = bytes(range(32))
    with picpac.Writer(path) as w:
        for i in range(n):
            w.append(image=payload, label=i % 1000)


def time_open(path: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = picpac.Reader(path)
        times.append(time.perf_counter() - t)
        r.close()
    return statistics.median(times)


def time_random(path: str, samples: int, check: bool, repeats: int) -> float:
    order = np.random.default_rng(0).integers(0, 2**62, samples)
    times = []
    with picpac.Reader(path, check=check) as r:
        idx = (order % len(r)).tolist()
        for _ in range(repeats):
            t = time.perf_counter()
            for i in idx:
                r[i]
            times.append((time.perf_counter() - t) / samples)
    return statistics.median(times)


def time_baseline(path: str, samples: int, repeats: int) -> float:
    order = np.random.default_rng(0).integers(0, 2**62, samples)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    size = len(mm) - 64
    idx = (order % size).tolist()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for i in idx:
            mm[i:i + 64]
        times.append((time.perf_counter() - t) / samples)
    mm.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.picpac")
        t = time.perf_counter()
        build(path, args.records)
        build_s = time.perf_counter() - t
        print(f"built {args.records:,} records ({os.path.getsize(path) / 1e6:.1f} MB) in {build_s:.1f} s "
              f"({args.records / build_s:,.0f} records/s)")
        open_s = time_open(path, args.repeats)
        print(f"open:                 {open_s * 1e3:8.2f} ms   target < 200 ms   {'PASS' if open_s < 0.2 else 'FAIL'}")
        base = time_baseline(path, args.samples, args.repeats)
        for check in (True, False):
            per = time_random(path, args.samples, check, args.repeats)
            status = "PASS" if per < 5e-6 else "FAIL"
            print(f"random r[i] check={check!s:5}: {per * 1e6:6.2f} us   target < 5 us   {status}   "
                  f"({per / base:.1f}x a bare 64-byte mmap slice, {base * 1e6:.2f} us)")


if __name__ == "__main__":
    main()
