"""Ray Data adapter throughput (issue 15 item 4): picpac.ray against picpac's own tools on the same data, in one run.

Data: the JPEGs of ../shared/data/imagenet-250 repeated (as symlinks) to --samples images in 10 class folders.
Contenders, each a full pass, alternated in every round so background load hits them alike; medians of
--repeats rounds, after an untimed one (it starts Ray's workers and fills the page cache). Ray is started once
(``ray.init(num_cpus=--cpus)``), before any clock:

  import   `picpac import` of the folder (picpac.ingest.import_dataset, threads=--cpus)    images/s
           picpac.ray.import_images(folder, out.shards): list, validate and write on Ray    images/s
  read     picpac.Reader over the imported DB, every record's fields copied to bytes        rows/s, MB/s
           picpac.ray.read_picpac(db).iter_batches(pyarrow)                                 rows/s, MB/s
  decode   picpac.ImageStream(db, threads=--cpus), resize to 224x224, uint8 NHWC            img/s
           read_picpac(db).map_batches(StreamTransform(the same keys), batch_size=64)       img/s

Each Ray rate is timed from building the dataset to its last row (Ray's planning and task start-up
included), each baseline from opening the file to its last record. A ratio is Ray / baseline.

    python benchmarks/ray_data.py [--samples 1000] [--repeats 2] [--cpus 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-250"
DECODE = dict(resize_width=224, resize_height=224, dtype="uint8", order="NHWC")
CLASSES = 10


def prepare(folder: Path, samples: int) -> str:
    """``samples`` symlinks to the imagenet-250 JPEGs in CLASSES class folders; a note on the data."""
    files = sorted(DATA.glob("*.JPEG"))
    if not files:
        raise SystemExit(f"no JPEGs in {DATA}: this benchmark needs ../shared/data/imagenet-250")
    for k in range(samples):
        target = folder / f"class{k % CLASSES}" / f"{k:06d}_{files[k % len(files)].name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(files[k % len(files)])
    size = sum(f.stat().st_size for f in files) / len(files)
    return f"{len(files)} JPEGs of imagenet-250 ({size / 1024:.0f} KiB on average) repeated to {samples} images"


def timed(run: Callable[[], tuple[int, int]]) -> tuple[float, float]:
    """``run()`` -> (items, bytes); returns (items/s, MB/s)."""
    t0 = time.perf_counter()
    items, size = run()
    elapsed = time.perf_counter() - t0
    return items / elapsed, size / elapsed / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    try:
        import ray
        import pyarrow.compute as pc
        import picpac.ray
    except ImportError as exc:
        raise SystemExit(f"this benchmark needs Ray Data ({exc}): pip install 'picpac[ray]'")
    import picpac
    from picpac.tools.ingest import import_dataset

    tmp = Path(tempfile.mkdtemp(prefix="picpac-ray-bench-"))
    try:
        note = prepare(tmp / "src", args.samples)
        t = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        print(f"data: {note}\nmachine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, Ray {ray.__version__} "
              f"(ray.init(num_cpus={args.cpus}): {time.perf_counter() - t:.1f} s, not timed), load average "
              f"{os.getloadavg()[0]:.2f}\nruns: {args.repeats} rounds, medians\n", flush=True)
        db = str(tmp / "cli.picpac")

        source_bytes = sum(p.stat().st_size for p in (tmp / "src").rglob("*.JPEG"))

        def cli_import() -> tuple[int, int]:
            report = import_dataset(tmp / "src", db, threads=args.cpus, progress=False, overwrite=True)
            return report.count, source_bytes

        def ray_import() -> tuple[int, int]:
            written = picpac.ray.import_images(tmp / "src", tmp / "ray" / "part.shards", overwrite=True)
            return written.records, source_bytes

        def reader() -> tuple[int, int]:
            rows = size = 0
            with picpac.Reader(db) as r:
                for record in r:
                    size += sum(len(bytes(v)) for v in record.fields.values())
                    rows += 1
            return rows, size

        def ray_read() -> tuple[int, int]:
            rows = size = 0
            for batch in picpac.ray.read_picpac(db).iter_batches(batch_size=256, batch_format="pyarrow"):
                rows += batch.num_rows
                size += pc.sum(pc.binary_length(batch.column("image"))).as_py()
            return rows, size

        def stream() -> tuple[int, int]:
            n = 0
            with picpac.ImageStream(db, loop=False, batch=64, threads=args.cpus, **DECODE) as s:
                for images, _, pad in s:
                    n += len(images) - pad
            return n, 0

        def ray_decode() -> tuple[int, int]:
            n = 0
            decoded = picpac.ray.read_picpac(db).map_batches(picpac.ray.StreamTransform(DECODE), batch_size=64,
                                                             batch_format="numpy")
            for batch in decoded.iter_batches(batch_size=64, batch_format="numpy"):
                assert batch["image"].shape[1:] == (224, 224, 3)
                n += len(batch["image"])
            return n, 0

        contenders = {"cli import": cli_import, "ray import": ray_import, "reader": reader, "ray read": ray_read,
                      "stream": stream, "ray decode": ray_decode}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for run in contenders.values():  # untimed: Ray's worker processes start and import picpac, files get cached
            run()
        for r in range(args.repeats):
            for name, run in contenders.items():
                results[name].append(timed(run))
                rate, mbs = results[name][-1]
                shown = f" {mbs:8.1f} MB/s" if mbs else ""
                print(f"  round {r + 1}/{args.repeats} {name:10s} {rate:8.0f} /s{shown}", flush=True)
        med = {name: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v))
               for name, v in results.items()}
        pairs = [("import", f"picpac import (threads={args.cpus})", "cli import", "picpac.ray.import_images",
                  "ray import", "images/s"),
                 ("read", "picpac.Reader, one process", "reader", "picpac.ray.read_picpac", "ray read", "rows/s"),
                 ("decode", f"ImageStream(threads={args.cpus}), resize 224", "stream",
                  "read_picpac + StreamTransform", "ray decode", "img/s")]
        print(f"\nresults: {args.samples} images, median of {args.repeats}; load average after "
              f"{os.getloadavg()[0]:.2f}")
        print(f"  {'':7s}{'contender':38s}{'rate':>10s} {'':9s}{'MB/s':>8s}   ray / baseline")
        for kind, base_label, base, ray_label, name, unit in pairs:
            for label, key in ((base_label, base), (ray_label, name)):
                rate, mbs = med[key]
                ratio = f"{rate / med[base][0]:.2f}x" if key == name else ""
                print(f"  {kind if key == base else '':7s}{label:38s}{rate:10.0f} {unit:9s}"
                      f"{f'{mbs:8.1f}' if mbs else '':>8s}   {ratio}")
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
