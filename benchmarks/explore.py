"""`picpac explore` list pages on a huge database (issue 14): every page under 200 ms on 1,000,000 records.

Builds a database of --records tiny images (8x8x3 uint8 arrays through picpac.write_arrays, labels i % 10),
starts the explorer on 127.0.0.1 (a free port) in a thread, and times over HTTP, --repeats times each:

  grid            /grid (page 1) and /grid?start=N/2 (a page in the middle)
  label filter    /grid?label=3&start=50000
  fold filter     /grid?split=5&fold=2&start=50000 (ImageStream's fold assignment, seed 2016)
  both            /grid?label=3&split=5&fold=2
  record          /record/N-1
  thumbnail       /thumb/K.jpg (a cold one each time)

It prints the first (cold: a filter's selection is computed then, once) and the median of the rest.

    python benchmarks/explore.py [--records 1000000] [--repeats 11] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import picpac  # noqa: E402


def build(path: str, n: int) -> float:
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
    picpac.write_arrays(path, images, (np.arange(n) % 10).astype(np.float64), overwrite=True, sync=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--keep", default=None, help="folder for the database (kept; reused if there)")
    args = parser.parse_args()
    import uvicorn

    from picpac.tools.explore.app import build_app
    from picpac.tools.explore.server import allowed_hosts, bind

    folder = args.keep or tempfile.mkdtemp(prefix="picpac-explore-bench-")
    path = os.path.join(folder, f"tiny-{args.records}.picpac")
    if not os.path.exists(path):
        print(f"building {args.records:,} records: {build(path, args.records):.1f} s ({os.path.getsize(path):,} bytes)")
    t = time.perf_counter()
    app = build_app(path, allowed_hosts=allowed_hosts("127.0.0.1"))
    print(f"explorer start-up (open, index): {1000 * (time.perf_counter() - t):.0f} ms")
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def fetch(url: str) -> float:
        t = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=60) as resp:
            resp.read()
            assert resp.status == 200, url
        return 1000 * (time.perf_counter() - t)

    n = args.records
    pages = [("grid, page 1", lambda k: "/grid"),
             ("grid, middle page", lambda k: f"/grid?start={n // 2}"),
             ("label filter", lambda k: "/grid?label=3&start=50000"),
             ("fold filter", lambda k: "/grid?split=5&fold=2&start=50000"),
             ("label + fold filter", lambda k: "/grid?label=3&split=5&fold=2"),
             ("record page", lambda k: f"/record/{n - 1}"),
             ("thumbnail (cold)", lambda k: f"/thumb/{(k * 7919) % n}.jpg")]
    print(f"{'page':<22}{'first ms':>10}{'median ms':>11}   ({args.repeats} requests over HTTP, {n:,} records)")
    worst = 0.0
    for name, url in pages:
        times = [fetch(url(k)) for k in range(args.repeats)]
        median = statistics.median(times[1:]) if len(times) > 1 else times[0]
        worst = max(worst, times[0], median)
        print(f"{name:<22}{times[0]:>10.1f}{median:>11.1f}")
    print(f"slowest: {worst:.1f} ms ({'under' if worst < 200 else 'OVER'} the 200 ms target)")
    server.should_exit = True
    thread.join(10)
    sock.close()


if __name__ == "__main__":
    main()
