"""Where a dataset lives, and what it costs (issue 15 item 5, docs/scale.md): one file, shards, object storage.

Data and workload are loaders.py's (imported, not copied): ../shared/data/imagenet-250 repeated to --samples
(default 2,000), W1 train (decode -> RandomResizedCrop 224 -> h-flip -> batches of 64 uint8) on
ImageStream(threads=2). Contenders, interleaved in every round; medians of --repeats rounds:

  file          one picpac file on local disk: the baseline
  shards        the same records in --shards files named by a .shards index
  s3 cold       the file on a real S3 API server on loopback (moto's server mode, a child process), read
                with range requests into an empty cache (4 MiB blocks); shuffled in full
  s3 cold chunk the same, with shuffle_chunk=256 (docs/stream.md): runs of records, so whole blocks are used
  s3 warm       the same as s3 cold, its cache kept from the previous pass

A rate is samples / wall time of one pass, from creating the stream to its last batch. Before the
stream figures, raw reads: every record once, in random order, by a local Reader and by a RemoteReader
into an empty cache, in MB/s (no decoding). moto's server is a Python process on the same 2 cores, so
object storage here costs CPU a remote server would not: the s3 figures are a lower bound.

    python benchmarks/scale.py [--samples 2000] [--repeats 3] [--shards 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loaders  # noqa: E402  (the data and W1)
from loaders import BATCH, SIZE, WORKERS, picpac_transforms  # noqa: E402

import picpac  # noqa: E402
from picpac.file.remote import RemoteOptions, RemoteReader  # noqa: E402
from picpac.file.shards import write_index  # noqa: E402

CHUNK = 256


def start_s3() -> tuple[subprocess.Popen, dict]:
    """moto's S3 server on a free loopback port, and the storage_options that reach it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, {"key": "bench", "secret": "bench", "endpoint_url": f"http://127.0.0.1:{port}",
                    "client_kwargs": {"region_name": "us-east-1"}}


def upload(db: str, options: dict) -> str:
    import boto3  # moto's dependency
    client = boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1",
                          aws_access_key_id=options["key"], aws_secret_access_key=options["secret"])
    client.create_bucket(Bucket="bench")
    client.upload_file(db, "bench", "data.picpac")
    return "s3://bench/data.picpac"


def write_shards(db: str, folder: str, count: int) -> str:
    """The records of ``db`` in ``count`` files of consecutive records, and their index."""
    reader = picpac.Reader(db)
    bounds = np.linspace(0, len(reader), count + 1).astype(int)
    paths = []
    for k in range(count):
        paths.append(os.path.join(folder, f"part-{k:03d}.picpac"))
        with picpac.Writer(paths[-1]) as w:
            for i in range(bounds[k], bounds[k + 1]):
                r = reader[i]
                w.append(image=bytes(r["image"]), label=r.label)
    index = os.path.join(folder, "data.shards")
    write_index(index, paths)
    return index


def stream_pass(spec: str, samples: int, **keys) -> float:
    t0 = time.perf_counter()
    n = 0
    with picpac.ImageStream(spec, loop=False, batch=BATCH, threads=WORKERS, dtype="uint8", order="NHWC",
                            colorspace="BGR", shuffle=True, transforms=picpac_transforms("W1"), **keys) as stream:
        for images, _, _ in stream:
            assert images.shape[1:] == (SIZE, SIZE, 3)
            n += len(images)
    assert n == samples, f"{spec}: {n} of {samples} samples"
    return n / (time.perf_counter() - t0)


def raw_reads(reader, order: np.ndarray) -> float:
    """MB/s of reading every record of ``order`` once."""
    t0 = time.perf_counter()
    total = sum(len(reader[int(i)]["image"]) for i in order)
    return total / (time.perf_counter() - t0) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    try:
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as exc:
        print(f"needs moto[server] and s3fs ({exc}): pip install 'picpac[remote]' 'moto[server]'", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="picpac-scale-")
    server = None
    try:
        _, _, _, db, note = loaders.prepare(tmp, args.samples, large=False)
        print(f"data: {note}")
        index = write_shards(db, tmp, args.shards)
        server, storage = start_s3()
        url = upload(db, storage)
        cache = os.path.join(tmp, "cache")

        def cold(**keys) -> float:
            shutil.rmtree(cache, ignore_errors=True)
            return stream_pass(url, args.samples, storage_options=storage, cache_dir=cache, **keys)

        order = np.random.default_rng(0).permutation(args.samples)
        local = raw_reads(picpac.Reader(db), order)
        shutil.rmtree(cache, ignore_errors=True)
        options = RemoteOptions(cache_dir=cache, storage_options=storage)
        opens = []
        for _ in range(2):
            t = time.perf_counter()
            reader = RemoteReader(url, options=options)
            opens.append(time.perf_counter() - t)
        t = time.perf_counter()
        reader._range(0, options.block_size)  # one block, straight from the server
        block = time.perf_counter() - t
        remote = raw_reads(reader, order)
        warm = raw_reads(reader, order)
        print(f"s3: opening a RemoteReader {opens[0] * 1000:.0f} ms (the process's first S3 client), then "
              f"{opens[1] * 1000:.0f} ms; one {options.block_size >> 20} MiB range request {block * 1000:.0f} ms "
              f"({options.block_size / block / 1e6:.0f} MB/s)")
        print(f"raw reads, every record once in random order: local file {local:,.0f} MB/s; s3 into an empty "
              f"cache {remote:,.1f} MB/s, then from the cache {warm:,.0f} MB/s")
        runs = {
            "file": lambda: stream_pass(db, args.samples),
            "shards": lambda: stream_pass(index, args.samples),
            "s3 cold": cold,
            "s3 cold chunk": lambda: cold(shuffle_chunk=CHUNK),
            "s3 warm": lambda: stream_pass(url, args.samples, storage_options=storage, cache_dir=cache),
        }
        rates: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.repeats):
            for name, run in runs.items():
                rates[name].append(run())
            print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), flush=True)
        base = statistics.median(rates["file"])
        print(f"\nW1, {args.samples} samples, threads={WORKERS}, median of {args.repeats} (img/s, ratio to file):")
        for name, values in rates.items():
            median = statistics.median(values)
            print(f"  {name:<14} {median:8.0f} img/s  {median / base:5.2f}x")
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
