"""Larger than memory (issue 15 item 3): every record of a database several times larger than the page cache
read once, in file order, in a fully random order and in chunked (quasi-random) orders (shuffle_chunk runs of
consecutive records, shuffle_window runs mixed at a time), from the disk.

Data: --size-mb of unique noise JPEGs (default 1,536 MB), each about --record-kb (default 110 KB, an average
ImageNet JPEG; about 350 x 350 pixels), written once into --dir (kept for the next run with --keep).

The page cache: before every pass the file's pages are dropped (the reader's map unmapped with
madvise(MADV_DONTNEED), then os.posix_fadvise(POSIX_FADV_DONTNEED)), and during the pass a background thread
drops them again each time --cache-mb more MB were read (default 256; 0: only before the pass). So at most
about --cache-mb of the file is ever cached, a page cache several times smaller than the database, while
the machine's real one may hold it all.

Passes, interleaved in every repeat (the best of --repeats: the machine is shared and noisy):
  Reader: r[i] (check=True: the CRC reads every byte) in the order a Sampler gives: sequential
          (shuffle=False), random (shuffle=True), chunked (shuffle_chunk=C, shuffle_window=--window for each
          C of --chunks)
  ImageStream: one pass (decode at 1/4 scale, resize to 64 x 64, --workers threads) sequential, random and
          chunked with the middle of --chunks

    python benchmarks/larger_than_memory.py [--size-mb 1536] [--record-kb 110] [--cache-mb 256]
        [--chunks 16,64,256] [--window 8] [--repeats 2] [--workers 2] [--dir /tmp] [--keep]
"""
from __future__ import annotations

import argparse
import mmap
import os
import threading
import time
from collections.abc import Iterable

import cv2
import numpy as np

import picpac
from picpac.file.mapping import advise
from picpac.sampling import Sampler


PREFETCH = 32
"""Records read ahead at a time: an ImageStream's preload with 2 workers (16 per worker)."""


def build(path: str, size_mb: int, record_kb: int) -> None:
    """Unique noise JPEGs of about ``record_kb`` (0.91 bytes a pixel at quality 90) up to ``size_mb``."""
    side = int((record_kb * 1024 / 0.91) ** 0.5)
    rng = np.random.default_rng(0)
    written = 0
    with picpac.Writer(path) as w:
        while written < size_mb * 2**20:
            jpeg = cv2.imencode(".jpg", rng.integers(0, 256, (side, side, 3), np.uint8),
                                [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
            w.append(image=jpeg, label=0)
            written += len(jpeg)


class Evictor:
    """Keeps at most about ``cache_mb`` of a file in the page cache: drops its pages now and, from a thread, each
    time ``cache_mb`` more MB were ``read`` (0: only now). ``maps``: the mappings of the file to unmap first
    (fadvise leaves mapped pages cached)."""

    def __init__(self, path: str, maps: Iterable[np.ndarray], cache_mb: int):
        self.fd, self.maps, self.limit = os.open(path, os.O_RDONLY), list(maps), cache_mb * 2**20
        self.done = self.dropped_at = 0
        self.drops = 0
        self._stop = threading.Event()
        self.drop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if self.limit:
            self._thread.start()

    def drop(self) -> None:
        for m in self.maps:
            advise(m, mmap.MADV_DONTNEED)  # the file's pages stay valid: the next access reads them again
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self.drops += 1

    def read(self, nbytes: int) -> None:
        self.done += nbytes

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            if self.done - self.dropped_at >= self.limit:
                self.dropped_at = self.done
                self.drop()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        os.close(self.fd)


def mapping(reader: picpac.Reader) -> np.ndarray:
    """The Reader's map of the file (a private attribute: a benchmark may look)."""
    return reader._bytes


Run = tuple[float, int, int, int]
"""One pass: seconds, records, bytes, cache drops."""


def reader_pass(path: str, order: np.ndarray, cache_mb: int, ahead: int = 0) -> Run:
    """Read the records in ``order`` once, checked; with ``ahead``, as the stream does in chunked order:
    ``Reader.prefetch`` of the next ``ahead`` records as each ``ahead`` start."""
    with picpac.Reader(path, check=True) as r:
        sizes = r.index["size"].astype(np.int64)
        evictor = Evictor(path, [mapping(r)], cache_mb)
        try:
            start = time.perf_counter()
            if ahead:
                r.prefetch(order[:ahead])
            for k, i in enumerate(order.tolist()):
                if ahead and k % ahead == 0:
                    r.prefetch(order[k + ahead:k + 2 * ahead])
                r[i]
                evictor.read(int(sizes[i]))
            seconds = time.perf_counter() - start
        finally:
            evictor.close()
        return seconds, len(order), int(sizes[order].sum()), evictor.drops


def stream_pass(path: str, config: dict, cache_mb: int, workers: int) -> Run:
    """One ImageStream pass, from the stream's creation to its last batch."""
    start = time.perf_counter()
    with picpac.ImageStream(path, loop=False, batch=64, workers=workers, dtype="uint8", order="NHWC",
                            resize_width=64, resize_height=64, **config) as s:
        readers = s._pipeline._readers  # the stream's maps: a benchmark may look
        mean = int(readers[0].index["size"].mean())
        evictor = Evictor(path, [mapping(r) for r in readers], cache_mb)
        try:
            samples = 0
            for images, _, _ in s:
                samples += len(images)
                evictor.read(len(images) * mean)
            seconds = time.perf_counter() - start
        finally:
            evictor.close()
    return seconds, samples, samples * mean, evictor.drops


def table(title: str, runs: dict[str, list[Run]]) -> None:
    """Each order's fastest pass, and the chunked orders' ratios to the random and sequential ones."""
    print(f"\n{title}")
    print(f"  {'order':<20} {'seconds':>8} {'MB/s':>8} {'records/s':>10} {'drops':>6}")
    rates = {}
    for name, passes in runs.items():
        seconds, records, nbytes, drops = min(passes)
        rates[name] = records / seconds
        print(f"  {name:<20} {seconds:8.2f} {nbytes / 2**20 / seconds:8.1f} {records / seconds:10,.0f} {drops:6d}")
    for name, rate in rates.items():
        if name != "random" and name != "sequential":
            print(f"  {name}: {rate / rates['random']:.2f}x random, {rate / rates['sequential']:.2f}x sequential")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1536)
    ap.add_argument("--record-kb", type=int, default=110)
    ap.add_argument("--cache-mb", type=int, default=256, help="the simulated page cache (0: drop only before)")
    ap.add_argument("--chunks", default="16,64,256", help="shuffle_chunk values, comma-separated")
    ap.add_argument("--window", type=int, default=8, help="shuffle_window")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--keep", action="store_true", help="keep the database (and reuse it when it is there)")
    ap.add_argument("--no-stream", action="store_true", help="skip the ImageStream passes")
    args = ap.parse_args()
    chunks = [int(c) for c in args.chunks.split(",")]
    path = os.path.join(args.dir, f"larger-than-memory-{args.size_mb}mb-{args.record_kb}kb.picpac")
    if not os.path.exists(path):
        start = time.perf_counter()
        build(path, args.size_mb, args.record_kb)
        print(f"built {path} in {time.perf_counter() - start:.1f} s")
    try:
        with picpac.Reader(path) as r:
            n, size = len(r), int(r.index["size"].sum())
        print(f"{n:,} records, {size / 2**20:,.0f} MB ({size / n / 1024:.0f} KB each); simulated page cache "
              f"{args.cache_mb} MB ({size / 2**20 / max(args.cache_mb, 1):.1f}x smaller than the database); "
              f"window {args.window} runs; best of {args.repeats}")
        orders = {"sequential": dict(shuffle=False), "random": dict(shuffle=True)}
        orders |= {f"chunked {c} x {args.window}": dict(shuffle=True, shuffle_chunk=c, shuffle_window=args.window)
                   for c in chunks}
        middle = f"chunked {chunks[len(chunks) // 2]} x {args.window}"
        ahead = {"random + prefetch": "random", f"{middle} + prefetch": middle}
        labels = np.zeros(n)
        reads: dict[str, list[Run]] = {name: [] for name in [*orders, *ahead]}
        for repeat in range(args.repeats):
            for name in reads:
                config = orders[ahead.get(name, name)]
                sampler = Sampler(labels, 2016 + repeat, shuffle=config["shuffle"], reshuffle=True, oversample=False,
                                  chunk=config.get("shuffle_chunk", 0), window=args.window)
                reads[name].append(reader_pass(path, sampler.pass_order(0), args.cache_mb,
                                               PREFETCH if name in ahead else 0))
        table("Reader, every record once (check=True)", reads)
        if args.no_stream:
            return
        streams: dict[str, list[Run]] = {name: [] for name in ("sequential", "random", middle)}
        for repeat in range(args.repeats):
            for name in streams:
                streams[name].append(stream_pass(path, dict(orders[name], seed=2016 + repeat), args.cache_mb,
                                                 args.workers))
        table(f"ImageStream, one pass (decode + resize to 64 x 64, {args.workers} workers)", streams)
    finally:
        if not args.keep:
            os.unlink(path)


if __name__ == "__main__":
    main()
