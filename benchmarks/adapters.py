"""The framework adapters' overhead (issue 13 item 7): W1 of benchmarks/loaders.py through each adapter
against the raw ImageStream, and the torch adapter against loaders.py's DataLoader contenders.

The workload, data and contenders are loaders.py's, imported from it (not copied): W1 train (decode ->
RandomResizedCrop 224 -> h-flip -> batch 64 uint8) over ../shared/data/imagenet-250 repeated to
--samples (default 2,000). Contenders, interleaved in every round so background load hits them alike;
medians of --repeats rounds:

  raw     picpac.ImageStream (loaders.run_picpac: threads=2, uint8, NHWC, BGR), in this process
  child   the same, in a child process of its own (no framework imported): tf's and jax's baseline
  torch   TorchLoader(memory_format='channels_last'), the same stream keys: uint8 tensors, int64 labels
  tf      tf_dataset(...), the same keys (prefetch(AUTOTUNE), its signature read from a peeked first batch)
  jax     JaxLoader(...), the same keys (jax.Arrays on the default device, double-buffered)
  pil/cv2 loaders.py's DataLoader(num_workers=2) contenders (b) and (c)

A rate is samples / wall time of one full pass, from creating the loader to its last batch (and, for
JAX, that batch ready on the device), as loaders.py times them. Each pass's CPU seconds and minor page
faults (its process's, and its DataLoader workers') are printed beside it. TensorFlow, JAX and the DataLoaders
each run their pass in a child process of their own, started every round, the framework imported
before the clock starts (forking DataLoader workers from this process, once it has run the other
loaders' threads, hung them). Each adapter is compared with the raw stream in the same kind of
process: torch with raw, tf and jax with child. A framework that cannot be imported is skipped with a
line saying so. Target: each adapter >= 0.97 x the raw stream.

    python benchmarks/adapters.py [--samples 2000] [--repeats 5] [--adapters torch,tf,jax] [--no-dataloaders]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loaders  # noqa: E402  (W1's definition, the data, the raw stream and the DataLoader contenders)
from loaders import BATCH, SIZE, WORKERS, picpac_transforms  # noqa: E402

TARGET = 0.97
WORKLOAD = "W1"
ADAPTERS = {"torch": "TorchLoader (torch)", "tf": "tf_dataset (tensorflow)", "jax": "JaxLoader (jax)"}
MODULES = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}


def stream_keys() -> dict:
    """loaders.run_picpac's ImageStream keys for W1."""
    return dict(loop=False, batch=BATCH, threads=WORKERS, dtype="uint8", order="NHWC", colorspace="BGR",
                shuffle=True, transforms=picpac_transforms(WORKLOAD))


def run_adapter(name: str, db: str, samples: int) -> tuple[float, float]:
    """One pass of W1 through adapter ``name`` in this process: (img/s, seconds to the first batch)."""
    keys = stream_keys()
    n, first = 0, None
    if name == "torch":
        import torch
        from picpac.adapters.torch import TorchLoader
        keys.pop("order")
        t0 = time.perf_counter()
        with TorchLoader(db, memory_format="channels_last", **keys) as loader:
            for images, labels, pad in loader:
                assert images.dtype == torch.uint8 and tuple(images.shape[1:]) == (3, SIZE, SIZE)
                n += len(images)
                first = first or time.perf_counter() - t0
    elif name == "tf":
        from picpac.adapters.tf import tf_dataset
        t0 = time.perf_counter()
        for images, labels, pad in tf_dataset(db, **keys):
            assert tuple(images.shape[1:]) == (SIZE, SIZE, 3)
            n += int(images.shape[0])
            first = first or time.perf_counter() - t0
    elif name == "jax":
        from picpac.adapters.jax import JaxLoader
        t0 = time.perf_counter()
        with JaxLoader(db, **keys) as loader:
            for images, labels, pad in loader:
                n += int(images.shape[0]) - int(pad)  # JaxLoader pads the last batch to full size
                first = first or time.perf_counter() - t0
            images.block_until_ready()
    else:
        raise ValueError(name)
    elapsed = time.perf_counter() - t0
    assert n == samples, f"{name} pass delivered {n} of {samples} samples"
    return n / elapsed, first


def measured(run: Callable[[], tuple[float, float]]) -> tuple[float, float, float, int]:
    """``run()``'s (img/s, seconds to the first batch), and the CPU seconds and minor page faults of the pass
    (this process's and its finished children's: the DataLoaders' workers)."""
    def usage() -> tuple[float, int]:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
                own.ru_minflt + children.ru_minflt)
    cpu, faults = usage()
    rate, first = run()
    cpu_after, faults_after = usage()
    return rate, first, cpu_after - cpu, faults_after - faults


def run_child(name: str, db: str, samples: int) -> tuple[float, float, float, int]:
    """``run_adapter`` in a fresh child process, the framework imported there before the clock starts."""
    out = subprocess.run([sys.executable, __file__, "--child", name, "--db", db, "--samples", str(samples)],
                         capture_output=True, text=True, check=False,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if out.returncode != 0:
        raise SystemExit(f"the {name} child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def child(name: str, db: str, samples: int) -> int:
    if name == "child":
        print(json.dumps(measured(lambda: loaders.run_picpac(db, samples, WORKLOAD))))
        return 0
    if name in ("cv2", "pil"):  # a fresh process: its DataLoader forks no thread state of this benchmark's
        loaders.torch.set_num_threads(1)
        paths, labels = json.loads(Path(db).read_text())
        print(json.dumps(measured(lambda: loaders.run_dataloader(paths, labels, name, WORKLOAD))))
        return 0
    __import__(MODULES[name])
    if name == "jax":
        import jax
        jax.numpy.zeros(1).block_until_ready()  # the backend started before the clock, as torch's is
    print(json.dumps(measured(lambda: run_adapter(name, db, samples))))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--adapters", default="torch,tf,jax")
    ap.add_argument("--no-dataloaders", action="store_true", help="skip loaders.py's DataLoader contenders")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.db, args.samples)

    adapters = []
    for name in args.adapters.split(","):
        if name not in ADAPTERS:
            ap.error(f"unknown adapter {name!r}: torch, tf, jax")
        if importlib.util.find_spec(MODULES[name]) is None:
            print(f"skipped: {ADAPTERS[name]}: {MODULES[name]} is not installed (pip install 'picpac[{name}]')")
        else:
            adapters.append(name)
    dataloaders = [] if args.no_dataloaders or "torch" not in adapters or loaders._MISSING is not None else ["cv2", "pil"]
    if not args.no_dataloaders and not dataloaders:
        print("skipped: the DataLoader contenders (they need torch and Pillow: pip install torch==2.13.0 pillow)")
    if dataloaders:
        loaders.torch.set_num_threads(1)
    names = ["raw"] + (["child"] if {"tf", "jax"} & set(adapters) else []) + adapters + dataloaders
    label = {"raw": "raw picpac.ImageStream(threads=2)", "child": "the same, in a child process", **ADAPTERS, "cv2": loaders.CONTENDERS["cv2"],
             "pil": loaders.CONTENDERS["pil"]}
    versions = []
    for name in adapters:
        spec = importlib.util.find_spec(MODULES[name])
        versions.append(f"{MODULES[name]} (found at {Path(spec.origin).parent.name})")

    with tempfile.TemporaryDirectory(prefix="picpac-adapters-") as tmp:
        t = time.perf_counter()
        paths, labels, jpegs, db, note = loaders.prepare(tmp, args.samples, False)
        lists = os.path.join(tmp, "files.json")  # the DataLoader children's file list
        Path(lists).write_text(json.dumps([paths, labels]))
        print(f"data: {note} (prepared in {time.perf_counter() - t:.0f} s)")
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average before the runs "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} (shared machine: other work runs beside these)")
        print(f"workload: {loaders.WORKLOADS[WORKLOAD]}; every contender: one full pass, timed from creating the "
              f"loader to its last batch; tf, jax and the DataLoaders in a child process each (framework imported first)")
        print(f"runs: {args.repeats} rounds, in each: {' '.join(names)}; medians reported\n", flush=True)
        runs: dict[str, list[tuple[float, float, float, int]]] = {n: [] for n in names}
        for r in range(args.repeats):
            for n in names:
                if n == "raw":
                    result = measured(lambda: loaders.run_picpac(db, args.samples, WORKLOAD))
                elif n == "torch":
                    result = measured(lambda: run_adapter(n, db, args.samples))
                elif n in ("child", "tf", "jax"):
                    result = run_child(n, db, args.samples)
                else:
                    result = run_child(n, lists, args.samples)
                runs[n].append(result)
                print(f"  round {r + 1}/{args.repeats} {n:5s} {result[0]:7.0f} img/s  "
                      f"(first batch after {result[1]:.2f} s)", flush=True)

    med = {n: statistics.median(v[0] for v in runs[n]) for n in names}
    print(f"\nresults: {args.samples} samples, median of {args.repeats}; load average after the runs "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for n in names:
        spread = ", ".join(f"{v[0]:.0f}" for v in runs[n])
        first = statistics.median(v[1] for v in runs[n])
        cpu = statistics.median(v[2] for v in runs[n])
        faults = statistics.median(v[3] for v in runs[n])
        print(f"  {label[n]:44s} {med[n]:7.0f} img/s   first batch {first:5.2f} s   CPU {cpu:5.2f} s   "
              f"page faults {faults:7,.0f}   runs [{spread}]")
    print()
    for n in adapters:
        base = "raw" if n == "torch" else "child"
        ratio = med[n] / med[base]
        print(f"  {label[n]:26s} / raw stream{' (child)' if base == 'child' else '        '}   {ratio:5.3f}   "
              f"target >= {TARGET}   {'PASS' if ratio >= TARGET else 'FAIL'}")
    for n in dataloaders:
        print(f"  {label['torch']:26s} / {label[n]}   {med['torch'] / med[n]:5.2f}")
    print("\nnot measured here: the GPU step wait (DevicePrefetcher's copy overlapping the step); this machine has "
          "no GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
